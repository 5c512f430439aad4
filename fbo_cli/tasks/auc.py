"""Federated deep AUC maximization, a min-max task (CODASCA: Yuan, Guo, Xu, Ying, Yang, ICML 2021).

Problem (CODASCA eq. 1): ``min_{v=(w,a,b)} max_alpha (1/K) Σ_k f_k(v, alpha)`` with ``f_k`` the
expectation over client k's data of ``F(v, alpha; z)`` below, with **one global** positive ratio ``p``.

Losses (one client, one minibatch; the batch *mean* with indicator weights), score
``h = sigmoid(net(w; x))`` in [0, 1] (docs/fidelity.md#codasca), ``m`` the margin:

* ``square`` (eq. 2; the ``paper`` preset, ``m = 1`` gives eq. 2 exactly)::

      (1-p)(h-a)^2 I[y=1] + p(h-b)^2 I[y=-1] + 2(m+alpha)(p h I[y=-1] - (1-p) h I[y=1]) - p(1-p) alpha^2

* ``aucm`` (the AUC-margin loss of the official code; the ``code`` preset, alpha >= 0)::

      (1-p)(h-a)^2 I[y=1] + p(h-b)^2 I[y=-1]
          + 2 alpha (p(1-p) m + p h I[y=-1] - (1-p) h I[y=1]) - p(1-p) alpha^2

  With alpha free, ``aucm`` is ``square`` under ``alpha_aucm = m + alpha_square`` plus a constant.

The closed-form dual gradient of the code (``dual_grad: closed_form``) is ``2(m + b - a) - 2 alpha``
(aucm) or ``2(b - a) - 2 alpha`` (square): the population ``∂f/∂alpha`` over ``p(1-p)`` at the
class-mean ``a, b``.

Data (docs/fidelity.md#codasca): the classes of any dataset are made binary, positives = the second half of
the class ids (``y >= C // 2``: CIFAR-100 50-99, CIFAR-10 / Fashion-MNIST / digits 5-9, as the
paper's code). The training part is made imbalanced: positives are subsampled (uniformly within each
positive class, the same fraction everywhere) so that they are ``imratio`` of the training data; the
test set is untouched (balanced for the class-balanced datasets). Each client trains on all the rows
the partition gave it (its ``train`` and ``val`` parts together: the task has no upper level).
``p`` is the positive fraction of the union of the clients' training data (docs/fidelity.md#codasca).

Models (pure functions of a flat parameter vector, vmapped over clients by the algorithms):

* ``mlp``: ``d -> hidden -> hidden -> 1`` with ReLU (the experiments: 32 -> 64 -> 64 -> 1); feature data.
* ``cnn``: ``Conv3x3(c, ch) -> ReLU -> MaxPool2 -> Conv3x3(ch, 2ch) -> ReLU -> MaxPool2 -> FC(hidden)
  -> ReLU -> FC(1)``; 28x28 (and 8x8) images.
* ``resnet20``: He et al. (2016) CIFAR ResNet-20 (3 stages x 3 basic blocks, 16/32/64 channels,
  parameter-free "option A" shortcuts), with **GroupNorm** (``norm_groups`` groups) in place of
  BatchNorm: a normalization that uses no batch statistics works unchanged under ``vmap`` over the
  client dimension and has no running statistics to average (docs/fidelity.md#codasca).
* ``auto``: resnet20 for 3x32x32, cnn for other 1-channel images, mlp otherwise.

Metric: ``test_auc`` = the Mann-Whitney U statistic with ties counted 1/2 (= scikit-learn's
``roc_auc_score``) of the model's scores on the test set. With ``holdout: true`` each client's
validation part (``val_frac`` of its rows, after the same imbalance subsampling) is not trained on,
and ``val_auc``, the AUC on their union, is the tuning score (``fbo tune``'s default for this task):
test AUC is reported, never tuned on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import vmap

from ..data.split import take_rows
from ..errors import UsageError
from ..sim.bounds import bounded
from ..sim.federation import Batch
from .base import Layout, Task, relu_pool2

PRESETS = {
    "paper": {"loss": "square", "dual_constraint": "none", "dual_grad": "autograd", "grad_clip": 0.0,
              "weight_decay": 0.0},
    "code": {"loss": "aucm", "dual_constraint": "nonneg", "dual_grad": "closed_form", "grad_clip": 1.0,
             "weight_decay": 1e-5},
}
ALPHA_MAX = 999.0  # the official code's clamp of alpha under the nonneg constraint


# --------------------------------------------------------------------------------------------------
# The metric


def auc_score(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """ROC AUC as the normalized Mann-Whitney U statistic, ties counted 1/2 (average ranks)."""
    s = scores.detach().double().flatten()
    pos = positive.detach().bool().flatten()
    n1 = int(pos.sum())
    n0 = len(s) - n1
    if n1 == 0 or n0 == 0:
        return float("nan")
    srt, order = s.sort()
    _, inv, counts = torch.unique_consecutive(srt, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    avg = (ends - counts.double() + 1 + ends) / 2  # mean of the 1-based ranks start+1..end
    ranks = torch.empty_like(s)
    ranks[order] = avg[inv]
    u = ranks[pos].sum().item() - n1 * (n1 + 1) / 2
    return u / (n1 * n0)


def per_client_grads(fn, v: torch.Tensor, alpha: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Every client's gradients of its own loss: ``fn`` is the loss vmapped over the client
    dimension, ``[K]`` values; the clients' losses do not share parameters, so the gradient of their
    sum with respect to the stacked ``v [K, d]`` is the stack of the per-client gradients (one
    reverse pass over the vmapped forward; faster than ``vmap(grad)`` here, same numbers)."""
    v = v.detach().requires_grad_()
    alpha = alpha.detach().requires_grad_()
    with torch.enable_grad():
        gv, ga = torch.autograd.grad(fn(v, alpha, batch).sum(), (v, alpha), allow_unused=True)
    return gv, (torch.zeros_like(alpha) if ga is None else ga)


# --------------------------------------------------------------------------------------------------
# The task


class AUC(Task):
    name: ClassVar[str] = "auc"
    kind: ClassVar[str] = "minimax"
    metric: ClassVar[str] = "test_auc"
    default_dataset: ClassVar[str] = "synth-c100"
    # CODASCA's setting: every client takes part, clients share no class; one round = I local iterations
    run_defaults: ClassVar[dict] = {"clients": 16, "partition": "class-disjoint", "participation": 1.0,
                                    "rounds": 64, "eval_every": 8}
    tune_metric: ClassVar[tuple[str, str]] = ("val_auc", "max")  # needs holdout: true
    datasets: ClassVar[tuple[str, ...]] = ("synth-c100", "fashion-mnist", "mnist", "mnist5k", "cifar10",
                                           "cifar100", "digits", "breast-cancer", "synthetic")

    @dataclass
    class Params:
        imratio: float = bounded(0.1, doc="positive fraction of the training data (0.1 or 0.3 in the paper)")
        preset: str = bounded("paper", doc="paper (eq. 2) | code (official script); fills the knobs left empty")
        loss: str | None = bounded(None, doc="square | aucm (None: the preset's)")
        margin: float = bounded(1.0, doc="m, the margin of the AUC square / AUC-M loss")
        dual_constraint: str | None = bounded(None, doc="none | nonneg (alpha in [0, 999]); None: the preset's")
        model: str = bounded("auto", doc="auto | mlp | cnn | resnet20")
        hidden: int = bounded(64, ge=1, le=100_000, doc="MLP width / CNN fully connected width")
        channels: int = bounded(16, ge=1, le=1024, doc="CNN first conv channels (the second has twice as many)")
        norm_groups: int = bounded(8, ge=1, le=1024, doc="resnet20 GroupNorm groups")
        holdout: bool = bounded(False,
                                doc="hold each client's validation part (val_frac of its rows) out of training: their "
                                    "union gives val_auc, the tuning score; off, each client trains on all its rows "
                                    "and there is no val_auc")
        fast: bool = bounded(True, doc="the mlp's closed-form gradients (False: autograd through the vmapped loss)")

    @classmethod
    def check_params(cls, p: "AUC.Params") -> None:
        if p.preset not in PRESETS:
            raise UsageError(f"preset must be one of {', '.join(PRESETS)}; got '{p.preset}'",
                             kind="bad_value", field="preset", value=p.preset)
        pre = PRESETS[p.preset]
        if (p.loss or pre["loss"]) not in ("square", "aucm"):
            raise UsageError(f"loss must be square or aucm; got '{p.loss or pre['loss']}'",
                             kind="bad_value", field="loss", value=p.loss or pre["loss"])
        constraint = p.dual_constraint or pre["dual_constraint"]
        if constraint not in ("none", "nonneg"):
            raise UsageError(f"dual_constraint must be none or nonneg; got '{constraint}'",
                             kind="bad_value", field="dual_constraint", value=constraint)
        if not 0.0 < p.imratio < 1.0:
            raise UsageError(f"imratio must be in (0, 1), got {p.imratio}",
                             kind="bad_value", field="imratio", value=p.imratio)
        if p.model not in ("auto", "mlp", "cnn", "resnet20"):
            raise UsageError(f"model must be one of auto, mlp, cnn, resnet20; got '{p.model}'",
                             kind="bad_value", field="model", value=p.model)
        if p.model == "resnet20" and any(width % p.norm_groups for width in (16, 32, 64)):
            raise UsageError(f"norm_groups must divide 16, 32 and 64; got {p.norm_groups}",
                             kind="bad_value", field="norm_groups", value=p.norm_groups)

    def __init__(self, params: "AUC.Params", data):
        super().__init__(params, data)
        p = params
        pre = PRESETS[p.preset]
        self.preset = pre
        self.loss_kind = p.loss or pre["loss"]
        self.constraint = p.dual_constraint or pre["dual_constraint"]
        self._build_data(data)
        self._build_model(data.dataset.shape)

    # data ----------------------------------------------------------------------------------------
    def _build_data(self, data) -> None:
        C = data.num_classes
        if C < 2:
            raise UsageError("the auc task needs a dataset with at least 2 classes",
                             kind="unsupported", field="dataset", value=data.dataset.name)
        seed = int(data.spec.get("seed", 0)) if hasattr(data, "spec") else 0
        ypool = data.y.cpu().numpy()
        pos_pool = ypool >= C // 2
        rows = [np.concatenate([t[m], v[m2]]) for t, m, v, m2 in zip(
            data.train_idx.cpu().numpy(), data.train_mask.cpu().numpy(),
            data.val_idx.cpu().numpy(), data.val_mask.cpu().numpy(), strict=True)]
        owned = np.unique(np.concatenate(rows))
        n_neg = int((~pos_pool[owned]).sum())
        n_pos = int(pos_pool[owned].sum())
        want = int(self.p.imratio / (1 - self.p.imratio) * n_neg)
        keep = np.ones(len(ypool), dtype=bool)
        if want < n_pos:  # subsample every positive class by the same fraction (the code: per class)
            rs = np.random.RandomState(seed + 4004)
            for c in range(C // 2, C):
                idx = owned[ypool[owned] == c]
                k = int(round(len(idx) * want / n_pos))
                drop = rs.permutation(idx)[k:]
                keep[drop] = False
        if self.p.holdout:  # the same subsampling; the validation parts are not trained on
            val = [np.sort(v[m][keep[v[m]]]) for v, m in zip(data.val_idx.cpu().numpy(), data.val_mask.cpu().numpy())]
            rows = [np.sort(t[m][keep[t[m]]]) for t, m in zip(data.train_idx.cpu().numpy(),
                                                            data.train_mask.cpu().numpy())]
            self.val_rows = torch.as_tensor(np.concatenate(val), device=data.X.device)
            if len(self.val_rows) == 0 or len(np.unique(ypool[np.concatenate(val)] >= C // 2)) < 2:
                raise UsageError("holdout: the clients' validation parts hold fewer than two classes; raise val_frac",
                                 kind="bad_value", field="val_frac")
        else:
            rows = [np.sort(r[keep[r]]) for r in rows]
        if min(len(r) for r in rows) == 0:
            raise UsageError("after the imbalance subsampling some client holds no training example; "
                             "use fewer clients or a larger imratio", kind="bad_value", field="clients/imratio")
        width = max(len(r) for r in rows)
        idx = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=bool)
        for i, r in enumerate(rows):
            idx[i, :len(r)] = r
            idx[i, len(r):] = r[0]
            mask[i, :len(r)] = True
        dev = data.X.device
        self.idx = torch.as_tensor(idx, device=dev)  # [K, n] rows of the pool
        self.mask = torch.as_tensor(mask, device=dev)
        self.counts = self.mask.sum(1)
        self.ybin = (data.y >= C // 2).to(data.X.dtype)  # pool labels, 1 = positive
        self.ytest = (data.y_test >= C // 2)
        allrows = np.concatenate(rows)
        self.p_pos = float(pos_pool[allrows].mean())  # the global p
        self.client_p = [float(pos_pool[r].mean()) for r in rows]
        if not 0.0 < self.p_pos < 1.0:
            raise UsageError(f"the training data holds only one class (p = {self.p_pos}); check the dataset",
                             kind="unsupported", field="dataset", value=data.dataset.name)

    def batch(self, pos: torch.Tensor, valid: torch.Tensor) -> Batch:
        """Minibatch of positions ``pos [K, B]`` into each client's rows (``valid`` False on padding):
        ``X [K, B, ...]``, ``y [K, B]`` (1 positive, 0 negative), ``w [K, B]`` batch-mean weights."""
        rows = torch.gather(self.idx, 1, pos)
        w = valid.to(self.data.X.dtype)
        w = w / w.sum(1, keepdim=True).clamp(min=1)
        return {"X": take_rows(self.data.X, rows), "y": self.ybin[rows], "w": w}

    # model ---------------------------------------------------------------------------------------
    def _build_model(self, shape: tuple[int, ...]) -> None:
        p = self.p
        kind = p.model
        if kind == "auto":
            if len(shape) == 3 and shape[0] == 3 and shape[1] >= 16:
                kind = "resnet20"
            elif len(shape) == 3 and shape[1] >= 8:
                kind = "cnn"
            else:
                kind = "mlp"
        if kind not in ("mlp", "cnn", "resnet20"):
            raise UsageError(f"model must be one of auto, mlp, cnn, resnet20; got '{kind}'",
                             kind="bad_value", field="model", value=kind)
        if kind in ("cnn", "resnet20") and (len(shape) != 3 or shape[1] < 8):
            raise UsageError(f"model '{kind}' needs image data; dataset '{self.data.dataset.name}' "
                             f"has shape {shape}", kind="unsupported", field="model", value=kind)
        self.model_kind = kind
        self.norm_names: list[str] = []
        if kind == "mlp":
            d, H = math.prod(shape), p.hidden
            self.layout = Layout([("w1", (H, d)), ("b1", (H,)), ("w2", (H, H)), ("b2", (H,)), ("w3", (1, H)),
                                  ("b3", (1,))])
        elif kind == "cnn":
            c, h, _ = shape
            ch = p.channels
            s = h // 4
            self.layout = Layout([("c1", (ch, c, 3, 3)), ("cb1", (ch,)), ("c2", (2 * ch, ch, 3, 3)),
                                  ("cb2", (2 * ch,)), ("w1", (p.hidden, 2 * ch * s * s)), ("b1", (p.hidden,)),
                                  ("w2", (1, p.hidden)), ("b2", (1,))])
        else:
            c = shape[0]
            for width in (16, 32, 64):
                if width % p.norm_groups:
                    raise UsageError(f"norm_groups must divide 16, 32 and 64; got {p.norm_groups}",
                                     kind="bad_value", field="norm_groups", value=p.norm_groups)
            sh = [("conv0", (16, c, 3, 3)), ("gn0w", (16,)), ("gn0b", (16,))]
            cin = 16
            for si, width in enumerate((16, 32, 64)):
                for j in range(3):
                    pre = f"s{si}b{j}"
                    wd = (width,)
                    sh += [(f"{pre}c1", (width, cin, 3, 3)), (f"{pre}n1w", wd), (f"{pre}n1b", wd)]
                    sh += [(f"{pre}c2", (width, width, 3, 3)), (f"{pre}n2w", wd), (f"{pre}n2b", wd)]
                    self.norm_names += [f"{pre}n1w", f"{pre}n1b", f"{pre}n2w", f"{pre}n2b"]
                    cin = width
            sh += [("fc", (1, 64)), ("fcb", (1,))]
            self.norm_names += ["gn0w", "gn0b"]
            self.layout = Layout(sh)
        self.dw = self.layout.size
        self.dv = self.dw + 2  # v = (w, a, b)

    def init(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``v0 = (w0, a=0, b=0)`` (PyTorch's default layer init; GroupNorm scale 1, shift 0) and
        ``alpha0 = 0`` (docs/fidelity.md#codasca)."""
        dev = self.data.X.device
        w = self.layout.init(gen, dev)
        if self.norm_names:
            P = self.layout.unflatten(w)
            for n in self.norm_names:
                P[n].fill_(1.0 if n.endswith("w") else 0.0)
        return torch.cat([w, w.new_zeros(2)]), w.new_zeros(1)

    def logits(self, w: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """``[n]`` pre-sigmoid scores of a stack of examples under the flat weights ``w``."""
        P = self.layout.unflatten(w)
        if self.model_kind == "mlp":
            h = F.relu(F.linear(X.reshape(X.shape[0], -1), P["w1"], P["b1"]))
            h = F.relu(F.linear(h, P["w2"], P["b2"]))
            return F.linear(h, P["w3"], P["b3"]).squeeze(-1)
        if self.model_kind == "cnn":
            h = relu_pool2(F.conv2d(X, P["c1"], P["cb1"], padding=1))
            h = relu_pool2(F.conv2d(h, P["c2"], P["cb2"], padding=1))
            h = F.relu(F.linear(h.flatten(1), P["w1"], P["b1"]))
            return F.linear(h, P["w2"], P["b2"]).squeeze(-1)
        g = self.p.norm_groups
        h = F.relu(F.group_norm(F.conv2d(X, P["conv0"], padding=1), g, P["gn0w"], P["gn0b"]))
        cin = 16
        for si, width in enumerate((16, 32, 64)):
            for j in range(3):
                pre = f"s{si}b{j}"
                stride = 2 if (si > 0 and j == 0) else 1
                out = F.relu(F.group_norm(F.conv2d(h, P[f"{pre}c1"], stride=stride, padding=1), g,
                                          P[f"{pre}n1w"], P[f"{pre}n1b"]))
                out = F.group_norm(F.conv2d(out, P[f"{pre}c2"], padding=1), g, P[f"{pre}n2w"], P[f"{pre}n2b"])
                sc = h
                if stride != 1 or cin != width:  # option A: subsample and zero-pad the channels
                    sc = h[:, :, ::2, ::2]
                    extra = width - cin
                    sc = F.pad(sc, (0, 0, 0, 0, extra // 2, extra - extra // 2))
                h = F.relu(out + sc)
                cin = width
        return F.linear(h.mean((2, 3)), P["fc"], P["fcb"]).squeeze(-1)

    def score(self, w: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(w, X))

    # losses (one client, one batch) ---------------------------------------------------------------
    def objective(self, v: torch.Tensor, alpha: torch.Tensor, b: Batch) -> torch.Tensor:
        """``F_k(v, alpha; batch)``: eq. 2 (``square``) or the AUC-margin loss (``aucm``), batch mean."""
        p, m = self.p_pos, self.p.margin
        h = self.score(v[:self.dw], b["X"])
        a, bb, al = v[self.dw], v[self.dw + 1], alpha[0]
        pos = b["y"]
        neg = 1.0 - pos
        t = (1 - p) * (h - a) ** 2 * pos + p * (h - bb) ** 2 * neg - p * (1 - p) * al ** 2
        if self.loss_kind == "square":
            t = t + 2 * (m + al) * (p * h * neg - (1 - p) * h * pos)
        else:
            t = t + 2 * al * (p * (1 - p) * m + p * h * neg - (1 - p) * h * pos)
        return (t * b["w"]).sum()

    def grads(self, loss: str, v: torch.Tensor, alpha: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Every client's gradients ``([K, dv], [K, 1])`` of its ``loss`` (``objective`` or ``bce``) at its
        own ``v [K, dv]``, ``alpha [K, 1]`` on its minibatch: closed forms for the mlp (``fast``; batched
        products, tested equal to autograd in float64), else autograd through the vmapped loss."""
        if not (self.p.fast and self.model_kind == "mlp"):
            return per_client_grads(vmap(getattr(self, loss)), v, alpha, b)
        return self._mlp_grads(loss, v, alpha, b)

    def _mlp_grads(self, loss: str, v: torch.Tensor, alpha: torch.Tensor, b: Batch):
        """The mlp's forward pass as batched products over the clients, then its backward pass by hand:
        ``d loss / d z3`` of the score's logit (eq. 2, the AUC-margin loss or BCE), through the three layers."""
        K, dw = v.shape[0], self.dw
        P = self.layout.unflatten_stacked(v[:, :dw])
        X = b["X"].reshape(K, b["X"].shape[1], -1)
        z1 = torch.baddbmm(P["b1"].unsqueeze(1), X, P["w1"].transpose(1, 2))
        h1 = z1.relu()
        z2 = torch.baddbmm(P["b2"].unsqueeze(1), h1, P["w2"].transpose(1, 2))
        h2 = z2.relu()
        z3 = torch.baddbmm(P["b3"].unsqueeze(1), h2, P["w3"].transpose(1, 2)).squeeze(-1)  # [K, B]
        y, w = b["y"], b["w"]
        s = torch.sigmoid(z3)
        if loss == "bce":
            dz3 = w * (s - y)
            ga = torch.zeros_like(alpha)
            gab = v.new_zeros(K, 2)
        else:
            p, m = self.p_pos, self.p.margin
            a, bb, al = v[:, dw:dw + 1], v[:, dw + 1:dw + 2], alpha[:, :1]
            neg = 1.0 - y
            ra, rb = w * (1 - p) * (s - a) * y, w * p * (s - bb) * neg  # [K, B]
            lin = p * s * neg - (1 - p) * s * y
            c = m + al if self.loss_kind == "square" else al
            ds = 2 * (ra + rb) + 2 * c * w * (p * neg - (1 - p) * y)
            dz3 = ds * s * (1 - s)
            gab = torch.stack([-2 * ra.sum(1), -2 * rb.sum(1)], 1)
            wsum = w.sum(1, keepdim=True)
            ga = 2 * (w * lin).sum(1, keepdim=True) - 2 * p * (1 - p) * al * wsum
            if self.loss_kind == "aucm":
                ga = ga + 2 * p * (1 - p) * m * wsum
        gw3 = torch.bmm(dz3.unsqueeze(1), h2)  # [K, 1, H]
        relu_back = torch.ops.aten.threshold_backward  # ReLU's backward, as autograd computes it
        dz2 = relu_back(dz3.unsqueeze(2) * P["w3"], z2, 0.0)  # [K, B, H]
        gw2 = torch.bmm(dz2.transpose(1, 2), h1)
        dz1 = relu_back(torch.bmm(dz2, P["w2"]), z1, 0.0)
        gw1 = torch.bmm(dz1.transpose(1, 2), X)
        gv = torch.cat([gw1.flatten(1), dz1.sum(1), gw2.flatten(1), dz2.sum(1), gw3.flatten(1),
                        dz3.sum(1, keepdim=True), gab], 1)
        return gv, ga

    def dual_closed_form(self, v: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """The official code's dual gradient ``2(m + b - a) - 2 alpha`` (aucm) or ``2(b - a) - 2 alpha``
        (square); ``v [..., dv]``, ``alpha [..., 1]``."""
        a, b = v[..., self.dw:self.dw + 1], v[..., self.dw + 1:self.dw + 2]
        m = self.p.margin if self.loss_kind == "aucm" else 0.0
        return 2 * (m + b - a) - 2 * alpha

    def project_dual(self, alpha: torch.Tensor) -> torch.Tensor:
        return alpha.clamp(0.0, ALPHA_MAX) if self.constraint == "nonneg" else alpha

    def bce(self, v: torch.Tensor, _unused: torch.Tensor, b: Batch) -> torch.Tensor:
        """Binary cross-entropy of the logit (the FedAvg baseline's loss), batch mean."""
        z = self.logits(v[:self.dw], b["X"])
        return (F.binary_cross_entropy_with_logits(z, b["y"], reduction="none") * b["w"]).sum()

    # evaluation ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def scores_of(self, w: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Scores of the rows of ``X`` in chunks: 500 rows through a CNN (on one CPU core about 1.8x faster
        than 2,000: the activations stay in cache; the scores agree to float32 rounding), 20,000 through the MLP."""
        chunk = 500 if self.model_kind != "mlp" else 20000
        return torch.cat([self.score(w, X[i:i + chunk]) for i in range(0, len(X), chunk)])

    def test_scores(self, w: torch.Tensor) -> torch.Tensor:
        return self.scores_of(w, self.data.X_test)

    @torch.inference_mode()
    def evaluate(self, v: torch.Tensor) -> dict[str, float]:
        out = {"test_auc": auc_score(self.test_scores(v[:self.dw]), self.ytest)}
        if self.p.holdout:  # the tuning score: the clients' held-out rows, never the test set
            sc = self.scores_of(v[:self.dw], self.data.X[self.val_rows])
            out["val_auc"] = auc_score(sc, self.ybin[self.val_rows] > 0.5)
        return out
