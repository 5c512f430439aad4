"""Federated hyper-representation learning (FBO-AggITD (Xiao & Ji, ICML 2023) §4.1-4.2; Franceschi et al. 2018 setup).

Upper variable x: the representation (feature extractor); lower variable y: the classifier head,
global and shared by all clients (eq. 1 of FBO-AggITD).

* ``f_i(x, y)``: cross-entropy of the network on client i's *validation* split (no regularizer).
* ``g_i(x, y)``: cross-entropy on client i's *training* split plus a regularizer on y:
  ``l2`` (default: ``reg_coef/2 ||y||^2``, reg_coef = 0.01; strongly convex, as the theory assumes),
  ``norm`` (FedNest repo: ``reg_coef * Σ_k ||y_k||_2`` over the head's tensors, un-squared,
  reg_coef = 0.05 = 0.5 * 0.1) or ``none``. The repo's un-squared norm is not the default: its
  gradient pulls the head bias to 0 with constant force, its Hessian ``reg_coef (I - b̂b̂ᵀ)/||b||``
  then grows without bound, and once ``λ ||∇²_y g|| > 2`` the Neumann / AggITD recursions diverge
  (docs/fidelity.md#aggitd, FBO-AggITD row 7, has the run that showed it).

Models (FedNest repo):

* ``mlp``: ``Linear(d, 200) -> Dropout(0.5) -> ReLU -> Linear(200, C)``; x = first layer
  (157,000 parameters on MNIST), y = head (2,010). Dropout is active in every training-mode
  quantity (gradients, HVPs, JVPs) and off in evaluation (docs/fidelity.md#aggitd).
* ``cnn``: LeNet-style ``Conv(c,6,5) -> ReLU -> Pool -> Conv(6,16,5) -> ReLU -> Pool -> FC(400,120)
  -> ReLU`` as x (MNIST pads the first conv by 2, as FedNest's ``CNNMnist``), and
  ``FC(120,84) -> ReLU -> FC(84,C)`` as y.

Reuse: g depends on x only through the features ``relu(x-part(X))`` (dropout and ReLU commute), so
the lower-level phase encodes each client's training split once per outer iteration.

Local lower level (``lower: local``; FedBiO eq. (5), Li, Huang & Huang, NeurIPS 2023; AdaFBiO eq. (2)/(3),
Huang, arXiv 2211.01122): every client i has its
own head y_i, ``y*_i(x) = argmin_y g_i(x, y)``, and the upper level is ``(1/m) Σ_i f_i(x, y*_i(x))``.
The losses f_i, g_i are the same functions; only the state changes: ``init`` returns y stacked
``[m, dy]`` (every head starts from the same draw, as the papers' ``y_1^(m) = y_1``), and
``evaluate(x, Y)`` scores client i's head on client i's own test split (``FederatedData.split("test")``,
the test set dealt out following each client's label distribution). ``test_acc`` is then the mean
over clients of the per-client accuracies (personalized accuracy), ``test_loss`` the
mean of the per-client losses, ``test_acc_pooled`` the accuracy over all clients' test examples
together. ``test_on: clients`` scores a *global* head the same way (for comparisons with
personalized runs); ``auto`` (default) is ``pooled`` for a global head (the full test set, the
pooled test metric of Xiao & Ji, unchanged) and ``clients`` for per-client heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..sim.bounds import bounded
from ..sim.federation import Batch, same_bits
from .base import BilevelTask, Layout, relu_pool2, weighted_ce
from .hyperrep_head import HeadClosedForms, _HeadOracles
from .softmax import SoftmaxHead

EVAL_SPLITS = ("test", "val", "train")
_BITS: dict = {}  # (device, dtype) -> [256, 8]: entry (b, k) is 2 * (bit k of b), i.e. 1/(1-q) for q = 1/2


def dropout_mask(gen: torch.Generator, shape: tuple[int, ...], q: float, dtype, device) -> torch.Tensor:
    """Inverted-dropout mask ``[*shape]``: independent entries ``1/(1-q)`` with probability ``1-q``, else 0.

    For ``q = 1/2`` every mask entry is one uniform random *bit*: 32-bit words are drawn from ``gen``,
    each of their bytes is spread to 8 mask entries ``{0, 2}`` of ``dtype`` by a 256-row table (32 masks per
    draw instead of one ``torch.rand`` float per mask; ~20x faster on the CPU; the table in ``dtype``: no
    conversion kernel); other ``q`` compare ``torch.rand`` floats with ``q``. The fast and generic
    paths both use this function, so they see the same masks (docs/fidelity.md#aggitd)."""
    n = math.prod(shape)
    if q == 0.5:
        key = (str(device), dtype)
        if key not in _BITS:
            k8 = torch.arange(8, device=device)  # built on `device` itself, whatever the default device is
            _BITS[key] = (((torch.arange(256, device=device).unsqueeze(1) >> k8) & 1) * 2).to(dtype)
        words = torch.empty(-(-n // 32), dtype=torch.int32, device=device).random_(-2 ** 31, 2 ** 31, generator=gen)
        keep = _BITS[key].index_select(0, words.view(torch.uint8).long()).view(-1)
        return (keep if len(keep) == n else keep[:n]).view(shape)
    r = torch.rand(shape, generator=gen, device=device)
    keep = r.ge_(q) if r.dtype == dtype else (r >= q).to(dtype)  # in place: 0./1.
    return keep.div_(1 - q)


class HyperRep(HeadClosedForms, BilevelTask):
    name: ClassVar[str] = "hyperrep"
    reuse: ClassVar[bool] = True
    client_major: ClassVar[bool] = True
    # the upper loss on rows neither level trains on (10% of each client's: spec_checks.HELDOUT_FRAC); the
    # validation split's upper loss, which x is fitted on, rewards the largest stable step (docs/fidelity.md#verdicts)
    tune_metric: ClassVar[tuple[str, str]] = ("heldout_loss", "min")
    default_dataset: ClassVar[str] = "mnist5k"
    datasets: ClassVar[tuple[str, ...]] = ("mnist", "fashion-mnist", "cifar10", "mnist5k", "digits", "synthetic")

    @dataclass
    class Params:
        model: str = bounded("mlp", doc="the representation model x: mlp | cnn")
        hidden: int = bounded(200, ge=1, le=100_000, doc="MLP hidden units")
        dropout: float = bounded(0.5, doc="MLP dropout probability (0 disables)")
        reg: str = bounded("l2", doc="l2 | norm | none")
        reg_coef: float | None = bounded(None, doc="None: 0.01 for l2, 0.05 for norm (FedNest repo)")
        lower: str = bounded("global", doc="global (one shared head, eq. 1) | local (a head per client, eq. 5)")
        test_on: str = bounded("auto", doc="auto | pooled (full test set) | clients (each client's own test split)")
        fast: bool = bounded(True, doc="closed-form oracles for the mlp's softmax head (False: generic torch.func)")
        eval: str = bounded("test,val",
                            doc="what evaluate() scores, comma-separated: test (the test set: test_acc, test_loss), "
                                "val (every client's validation split: val_loss, val_acc, the upper objective), train "
                                "(the whole training set, pooled: train_acc, train_loss, the public FedNest code's "
                                "training accuracy; global head only)")

    @classmethod
    def check_params(cls, p: "HyperRep.Params") -> None:
        if p.model not in ("mlp", "cnn"):
            raise UsageError(f"model must be one of mlp, cnn; got '{p.model}'",
                             kind="bad_value", field="model", value=p.model)
        if p.reg not in ("norm", "l2", "none"):
            raise UsageError(f"reg must be one of norm, l2, none; got '{p.reg}'",
                             kind="bad_value", field="reg", value=p.reg)
        if not 0.0 <= p.dropout < 1.0:
            raise UsageError(f"dropout must be in [0, 1), got {p.dropout}",
                             kind="bad_value", field="dropout", value=p.dropout)
        if p.lower not in ("global", "local"):
            raise UsageError(f"lower must be one of global, local; got '{p.lower}'",
                             kind="bad_value", field="lower", value=p.lower)
        if p.test_on not in ("auto", "pooled", "clients"):
            raise UsageError(f"test_on must be one of auto, pooled, clients; got '{p.test_on}'",
                             kind="bad_value", field="test_on", value=p.test_on)
        if p.test_on == "pooled" and p.lower == "local":
            raise UsageError("test_on=pooled needs lower=global: each head is scored on its own client",
                             kind="unsupported", field="test_on", value="pooled")
        eval_on = tuple(e.strip() for e in p.eval.split(","))
        if any(e not in EVAL_SPLITS for e in eval_on) or len(set(eval_on)) < len(eval_on):
            raise UsageError(f"eval must be a comma-separated list of {', '.join(EVAL_SPLITS)} (each once); "
                             f"got '{p.eval}'", kind="bad_value", field="eval", value=p.eval)
        if "train" in eval_on and p.lower == "local":
            raise UsageError("eval=train scores one global head on the whole training set; lower=local has a "
                             "head per client", kind="unsupported", field="eval", value=p.eval)

    def __init__(self, params: "HyperRep.Params", data):
        super().__init__(params, data)
        p = params
        self.eval_on = tuple(e.strip() for e in p.eval.split(","))
        self.local_lower = p.lower == "local"
        # the regularizer's coefficient, resolved once: reg_coef, else 0.01 for l2 and 0.05 for norm (FedNest repo)
        self.reg_coef = 0.0 if p.reg == "none" else (
            p.reg_coef if p.reg_coef is not None else {"l2": 0.01, "norm": 0.05}[p.reg])
        shape = data.dataset.shape
        C = data.num_classes
        if p.model == "mlp":
            d = math.prod(shape)
            self.width = p.hidden
            self.lx = Layout([("w1", (p.hidden, d)), ("b1", (p.hidden,))])
            self.ly = Layout([("w2", (C, p.hidden)), ("b2", (C,))])
        else:
            if len(shape) != 3 or shape[1] < 8:
                raise UsageError(f"the cnn model needs image data; dataset '{data.dataset.name}' has shape {shape}",
                                 kind="unsupported", field="model", value="cnn")
            c, h, _ = shape
            self.pad = 2 if h == 28 else 0
            s = ((h + 2 * self.pad - 4) // 2 - 4) // 2
            self.width = 120
            self.lx = Layout([("c1", (6, c, 5, 5)), ("cb1", (6,)), ("c2", (16, 6, 5, 5)), ("cb2", (16,)),
                              ("w1", (120, 16 * s * s)), ("b1", (120,))])
            self.ly = Layout([("w2", (84, 120)), ("b2", (84,)), ("w3", (C, 84)), ("b3", (C,))])
        self.dx, self.dy = self.lx.size, self.ly.size
        self.soft = SoftmaxHead(C, p.hidden) if p.model == "mlp" else None
        self._feat: list[tuple] = []  # the fast path's last few (x, X, Z) encodings

    # model ---------------------------------------------------------------------------------------
    def init(self, gen):
        dev = self.data.X.device
        x, y = self.lx.init(gen, dev), self.ly.init(gen, dev)
        if self.local_lower:  # y_1^(m) = y_1 for every client
            y = y.expand(self.data.num_clients, -1).clone()
        return x, y

    def encode(self, x: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Features of a stack of examples under representation x: ``[n, width]`` after ReLU."""
        P = self.lx.unflatten(x)
        if self.p.model == "mlp":
            return F.relu(F.linear(X.reshape(X.shape[0], -1), P["w1"], P["b1"]))
        h = relu_pool2(F.conv2d(X, P["c1"], P["cb1"], padding=self.pad))
        h = relu_pool2(F.conv2d(h, P["c2"], P["cb2"]))
        return F.relu(F.linear(h.flatten(1), P["w1"], P["b1"]))

    def head(self, y: torch.Tensor, H: torch.Tensor, drop: torch.Tensor | None) -> torch.Tensor:
        Q = self.ly.unflatten(y)
        if drop is not None:
            H = H * drop
        if self.p.model == "mlp":
            return F.linear(H, Q["w2"], Q["b2"])
        return F.linear(F.relu(F.linear(H, Q["w2"], Q["b2"])), Q["w3"], Q["b3"])

    def reg_y(self, y: torch.Tensor) -> torch.Tensor:
        coef = self.reg_coef
        if self.p.reg == "none" or coef == 0:
            return y.new_zeros(())
        if self.p.reg == "l2":
            return 0.5 * coef * (y * y).sum()
        return coef * sum(t.norm() for t in self.ly.unflatten(y).values())

    # losses (one client, one batch) ---------------------------------------------------------------
    def f(self, x, y, b: Batch):
        return weighted_ce(self.head(y, self.encode(x, b["X"]), b.get("drop")), b["y"], b["w"])

    def g(self, x, y, b: Batch):
        return self.f(x, y, b) + self.reg_y(y)

    def g_enc(self, _unused, y, b: Batch):
        return weighted_ce(self.head(y, b["X"], b.get("drop")), b["y"], b["w"]) + self.reg_y(y)

    def noise(self, gen, batch):
        q = self.p.dropout
        if self.p.model != "mlp" or q == 0:
            return batch
        shape = (*batch["y"].shape, self.width)
        return {**batch, "drop": dropout_mask(gen, shape, q, batch["w"].dtype, batch["y"].device)}

    # fast path (mlp): closed-form oracles (hyperrep_head.py, softmax.py, docs/fidelity.md#fast-path) ------------
    def oracles(self, fn):
        if self.p.fast and self.soft is not None and (fn == self.f or fn == self.g or fn == self.g_enc):
            return _HeadOracles(self, fn)
        return super().oracles(fn)

    # evaluation ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def evaluate(self, x, y):
        """The metrics of the splits in ``eval`` (dropout off), in inference mode, in chunks of 5,000 rows."""
        out: dict[str, float] = {}
        if "test" in self.eval_on:
            if y.dim() == 2 or self.p.test_on == "clients":
                out.update(self.evaluate_clients(x, y))
            else:
                out.update(self.pooled(x, y, self.data.X_test, self.data.y_test, "test"))
        if "val" in self.eval_on:  # the upper objective (1/m) Σ_i f_i on the split x is fitted on
            out.update(self.evaluate_on(x, y, "val"))
        if "train" in self.eval_on:
            out.update(self.pooled(x, y, self.data.X, self.data.y, "train"))
        if self.data.hold_idx is not None:  # the held-out tuning score (run setting heldout_frac > 0)
            out.update(self.evaluate_on(x, y, "heldout"))
        return out

    @torch.inference_mode()
    def evaluate_runs(self, xs, ys) -> list[dict[str, float]]:
        """Each run's :meth:`evaluate` of a run batch's points, in one pass: every chunk of rows is encoded for the R
        runs' representations as one product (the mlp's first layer, the run dimension written out: each run's
        encoding alone, bit for bit, ``same_bits``), then each run's head and metrics on its encodings as alone.
        The encodings wait in a memo until their run is scored."""
        self._eval_runs, self._eval_memo = list(xs), {}
        if "test" in self.eval_on:
            self._eval_test = self.data.split("test") if self.data.test_idx is not None else None
        try:
            return [self.evaluate(x, y) for x, y in zip(xs, ys)]
        finally:
            self._eval_runs, self._eval_memo, self._eval_test = [], {}, None

    _eval_runs: list = []
    _eval_memo: dict = {}
    _eval_test = None

    def _encode(self, x, X):
        """``encode(x, X)`` in evaluation; in :meth:`evaluate_runs` (mlp) the chunk's encodings of all its runs at
        once, on the first run's call."""
        runs = self._eval_runs
        if self.p.model != "mlp" or not any(r is x for r in runs):
            return self.encode(x, X)
        key = (X.data_ptr(), tuple(X.shape), X.stride())
        hit = self._eval_memo.pop((id(x), key), None)
        if hit is not None or x is not runs[0]:  # (rows the first run did not encode: this run's alone)
            return self.encode(x, X) if hit is None else hit
        P = self.lx.unflatten_stacked(torch.stack(runs))
        X2 = X.reshape(X.shape[0], -1)
        H = same_bits(("eval-encode", len(runs), tuple(X2.shape), X2.dtype, X2.device),
                      lambda: F.relu(torch.baddbmm(P["b1"].unsqueeze(1), X2.expand(len(runs), -1, -1), P["w1"].mT)),
                      lambda: torch.stack([self.encode(r, X) for r in runs]))
        for r, Hr in zip(runs, H):
            if r is not x:
                self._eval_memo[(id(r), key)] = Hr
        return H[next(i for i, r in enumerate(runs) if r is x)]

    def pooled(self, x, y, X, lab, which: str) -> dict[str, float]:
        """``{which}_acc`` and ``{which}_loss`` of the global model (x, y) over all rows of ``X``, pooled."""
        logits = torch.cat([self.head(y, self._encode(x, X[i:i + 5000]), None) for i in range(0, len(X), 5000)])
        return {f"{which}_acc": (logits.argmax(1) == lab).float().mean().item(),
                f"{which}_loss": F.cross_entropy(logits, lab).item()}

    @torch.inference_mode()
    def evaluate_on(self, x, y, which: str) -> dict[str, float]:
        """``{which}_loss`` = (1/m) Σ_i f_i(x, y_i) on every client's ``which`` split (dropout off) and
        ``{which}_acc``, the mean over clients of their accuracy there: held-out training data, never
        the test set."""
        sp = self.data.split(which)
        m, t = sp.mask.shape
        H = torch.cat([self._encode(x, c) for c in sp.X.reshape(m * t, *sp.X.shape[2:]).split(5000)]).view(m, t, -1)
        heads = y if y.dim() == 2 else y.expand(m, -1)
        logits = torch.vmap(lambda yi, Hi: self.head(yi, Hi, None))(heads, H)
        mask = sp.mask.to(logits.dtype)
        n = mask.sum(1).clamp(min=1)
        ce = F.cross_entropy(logits.reshape(m * t, -1), sp.y.reshape(-1), reduction="none").view(m, t)
        right = (logits.argmax(-1) == sp.y).to(logits.dtype)
        return {f"{which}_loss": ((ce * mask).sum(1) / n).mean().item(),
                f"{which}_acc": ((right * mask).sum(1) / n).mean().item()}

    @torch.inference_mode()
    def evaluate_clients(self, x, y):
        """Each client's head (``y [m, dy]``, or one global head ``[dy]``) on its own test split."""
        te = self._eval_test or self.data.split("test")  # one split for a batch's runs (their encodings' memo)
        m, t = te.mask.shape
        X = te.X.reshape(m * t, *te.X.shape[2:])
        H = torch.cat([self._encode(x, c) for c in X.split(5000)]).view(m, t, -1)
        heads = y if y.dim() == 2 else y.expand(m, -1)
        logits = torch.vmap(lambda yi, Hi: self.head(yi, Hi, None))(heads, H)  # [m, t, C]
        mask = te.mask.to(logits.dtype)
        n = mask.sum(1)
        has = n > 0
        right = ((logits.argmax(-1) == te.y).to(logits.dtype) * mask).sum(1)
        ce = F.cross_entropy(logits.reshape(m * t, -1), te.y.reshape(-1), reduction="none").view(m, t)
        ce = (ce * mask).sum(1)
        return {"test_acc": (right[has] / n[has]).mean().item(),
                "test_loss": (ce[has] / n[has]).mean().item(),
                "test_acc_pooled": (right.sum() / n.sum()).item()}
