"""Federated data hyper-cleaning (AdaFBiO, Huang, arXiv 2211.01122, eq. (4); FedBiO,
Li, Huang & Huang, NeurIPS 2023; a reconstruction).

    min_x (1/M) Σ_m f^m(x, y*(x)),   y*(x) = argmin_y (1/M) Σ_m g^m(x, y)          (global lower level)

* ``y``: a linear softmax classifier ``W [C, D]`` and bias ``b [C]`` (d = 7,850 on MNIST), global and
  shared by all clients.
* ``x``: one weight logit per *training* example over all clients (d_x = N_train); example i gets
  the weight ``σ(x_i)``. The coordinates are laid out client by client, so client m owns the
  contiguous block of its own training examples; ``x = 0`` at the start (σ = 1/2).
* ``g^m(x, y) = Σ_{i∈D_t^m} w_i σ(x_i) CE(W a_i + b, ỹ_i) + ν ||y||²`` with ``w_i = 1/|D_t^m|`` (or
  1/|batch| on a minibatch) and ``ν = reg_coef = 1e-3``: the weighted training loss on the client's
  (noisy) training split plus the L2 term of eq. (4), which makes g 2ν-strongly convex in y.
* ``f^m(x, y) = Σ_{j∈D_v^m} w_j CE(W a_j + b, y_j)``: plain cross-entropy on the client's clean
  validation split; f does not depend on x (∇_x f = 0).

Client m's lower loss touches only its own block of x, so ∇_x g^m and ∇_x∇_y g^m vanish outside
it. An algorithm that keeps a full copy of x per client and averages the copies therefore moves
each block by 1/M of its owner's local progress: exactly Eq. (1)'s semantics (docs/fidelity.md#fedbio);
nothing is special-cased in the algorithms.

Label noise (training splits only, validation and test labels stay clean): each training example
independently, with probability ``noise``, gets a label drawn uniformly from the *other* C-1
classes (docs/fidelity.md#fedbio), so every flipped example is really corrupted. The flip is drawn from a
generator seeded by the run's seed, so every algorithm of a seed sees the same corrupted labels.
The mask rides along in ``FederatedData.extra["noisy"]`` (and the x position of each row in
``extra["xpos"]``).

Metrics: ``test_acc``/``test_loss`` of y on the test set, ``upper_loss`` = (1/M) Σ_m f^m(x, y) on
the full validation splits (``heldout_loss`` the same on the rows neither level trains on, the default
tuning score, when the run sets ``heldout_frac``), and ``precision``/``recall``/``f1`` of flagging example i as
corrupted iff σ(x_i) < 0.5 (i.e. x_i < 0), plus the mean weight σ(x_i) of clean and of corrupted examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..sim.blockstack import BlockStack
from ..sim.bounds import bounded
from ..sim.federation import Batch, Oracles, per_client_value
from .base import BilevelTask, Layout, weighted_ce
from .softmax import SoftmaxHead


class HyperClean(BilevelTask):
    name: ClassVar[str] = "hyperclean"
    client_major: ClassVar[bool] = True
    reuse: ClassVar[bool] = False
    metric: ClassVar[str] = "test_acc"
    # the upper loss on rows neither level trains on (10% of each client's: spec_checks.HELDOUT_FRAC); the
    # validation split's upper loss, which x is fitted on, rewards the largest stable step (docs/fidelity.md#verdicts)
    tune_metric: ClassVar[tuple[str, str]] = ("heldout_loss", "min")
    default_dataset: ClassVar[str] = "mnist5k"
    # the experiments' setting: 10 clients, all participating, Dirichlet(0.5), 10% validation, R = 300
    run_defaults: ClassVar[dict] = {"clients": 10, "participation": 1.0, "partition": "dirichlet", "alpha": 0.5,
                                    "val_frac": 0.1, "rounds": 300}
    datasets: ClassVar[tuple[str, ...]] = ("mnist", "fashion-mnist", "cifar10", "cifar100", "mnist5k",
                                           "digits", "breast-cancer", "synthetic")

    @dataclass
    class Params:
        noise: float = bounded(0.4, doc="label-noise rate p on the training splits (docs/fidelity.md#fedbio)")
        reg_coef: float = bounded(1e-3, doc="ν in ν||y||² (eq. (4))")
        fast: bool = bounded(True, doc="closed-form oracles of the softmax classifier (False: generic torch.func)")

    @classmethod
    def check_params(cls, p: "HyperClean.Params") -> None:
        if not 0.0 <= p.noise < 1.0:
            raise UsageError(f"noise must be in [0, 1), got {p.noise}", kind="bad_value", field="noise", value=p.noise)

    def __init__(self, params: "HyperClean.Params", data):
        super().__init__(params, data)
        p = params
        if "noisy" in data.extra or "xpos" in data.extra:
            raise UsageError("this FederatedData already carries a hyper-cleaning noise mask; "
                             "build a fresh one", kind="unsupported", field="data")
        C, D = data.num_classes, math.prod(data.dataset.shape)
        self.ly = Layout([("w", (C, D)), ("b", (C,))])
        dev = data.X.device
        rows = data.train_idx[data.train_mask]  # training rows of the pool, client by client
        n = rows.numel()
        self.rows = rows
        self.block = data.train_mask.sum(1)  # size of each client's block of x
        # label noise on the training rows only, from a generator seeded by the run's seed
        seed = data.spec.get("seed", torch.initial_seed()) if hasattr(data, "spec") else torch.initial_seed()
        gen = torch.Generator().manual_seed((int(seed) * 1_000_003 + 17) % (2 ** 63))
        flip = torch.rand(n, generator=gen) < p.noise
        shift = torch.randint(1, C, (n,), generator=gen)
        flip, shift = flip.to(dev), shift.to(dev)
        y = data.y.clone()  # the dataset cache shares data.y; never corrupt it in place
        y[rows] = torch.where(flip, (y[rows] + shift) % C, y[rows])
        data.y = y
        noisy = torch.zeros(data.X.shape[0], dtype=torch.bool, device=dev)
        noisy[rows] = flip
        xpos = torch.zeros(data.X.shape[0], dtype=torch.long, device=dev)
        xpos[rows] = torch.arange(n, device=dev)
        data.extra["noisy"] = noisy
        data.extra["xpos"] = xpos
        self.noisy = flip  # [dx], in x order
        self.dx, self.dy = n, self.ly.size
        # the client owning each coordinate of x: FedBiO's client copies of x as a BlockStack (the fast oracles'
        # x-derivatives of client m vanish off its block; blockstack.py)
        self.x_owner = torch.repeat_interleave(torch.arange(len(self.block), device=dev), self.block) \
            if p.fast else None
        self.soft = SoftmaxHead(C, D)

    # model ---------------------------------------------------------------------------------------
    def init(self, gen):
        dev = self.data.X.device
        return torch.zeros(self.dx, device=dev), torch.zeros(self.dy, device=dev)

    def logits(self, y: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        Q = self.ly.unflatten(y)
        return F.linear(X.reshape(*X.shape[:-len(self.data.dataset.shape)], -1), Q["w"], Q["b"])

    # losses (one client, one batch) ---------------------------------------------------------------
    def f(self, x, y, b: Batch):
        return weighted_ce(self.logits(y, b["X"]), b["y"], b["w"])

    def g(self, x, y, b: Batch):
        s = torch.sigmoid(x[b["xpos"]])
        return weighted_ce(self.logits(y, b["X"]), b["y"], b["w"] * s) + self.p.reg_coef * (y * y).sum()

    def g_fixed(self, _unused, y, b: Batch):
        """Lower loss with every example at weight 1 (FedAvg baselines): ``Σ w_i CE_i + ν||y||²``."""
        return weighted_ce(self.logits(y, b["X"]), b["y"], b["w"]) + self.p.reg_coef * (y * y).sum()

    # fast path: closed-form oracles (softmax.py; docs/fidelity.md#fast-path) ---------------------------------
    def oracles(self, fn):
        if self.p.fast and (fn == self.f or fn == self.g or fn == self.g_fixed):
            return _WeightedHeadOracles(self, fn)
        return super().oracles(fn)

    def _sig(self, x, b: Batch) -> torch.Tensor:
        """``[M, n]``: σ(x_i) of the batch's examples (x global ``[dx]`` or per client ``[M, dx]``, dense or a
        BlockStack)."""
        if isinstance(x, BlockStack):
            return torch.sigmoid(x.gather(b["xpos"]))
        if x.dim() == 1:
            return torch.sigmoid(x[b["xpos"]])
        N, R = len(b["xpos"]), len(x)
        if R != N:  # in a run batch, the R runs' x ``[R, dx]`` for the batch's R*M rows (each run's M)
            at = torch.arange(0, R * x.shape[1], x.shape[1], device=x.device).repeat_interleave(N // R)
            return torch.sigmoid(x.reshape(-1)[b["xpos"] + at.unsqueeze(1)])
        return torch.sigmoid(torch.gather(x, 1, b["xpos"]))

    def _scatter(self, x, b: Batch, d: torch.Tensor):
        """``[M, dx]``: ∂/∂x of ``Σ_n w_n σ(x_n) ψ_n`` given ``d = ψ`` (``[M, n]``): ``w_n σ'(x_n) ψ_n`` at x_n."""
        s = self._sig(x, b)
        if isinstance(x, BlockStack):
            return x.scattered(b["xpos"], b["w"] * s * (1 - s) * d)
        out = x.new_zeros(len(b["w"]), self.dx)
        return out.scatter_add_(1, b["xpos"], b["w"] * s * (1 - s) * d)

    # evaluation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def detection(self, x: torch.Tensor) -> dict[str, float]:
        """Precision/recall/F1 of flagging σ(x_i) < 0.5 as corrupted, and the mean weights."""
        flagged = x < 0
        noisy = self.noisy
        tp = int((flagged & noisy).sum())
        nf, nn = int(flagged.sum()), int(noisy.sum())
        prec = tp / nf if nf else 0.0
        rec = tp / nn if nn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
        s = torch.sigmoid(x)
        clean = ~noisy
        return {"precision": prec, "recall": rec, "f1": f1,
                "weight_clean": float(s[clean].mean()) if clean.any() else 0.0,
                "weight_noisy": float(s[noisy].mean()) if noisy.any() else 0.0}

    @torch.no_grad()
    def evaluate(self, x, y):
        X, lab = self.data.X_test, self.data.y_test
        logits = torch.cat([self.logits(y, X[i:i + 10000]) for i in range(0, len(X), 10000)])
        out = {"test_acc": (logits.argmax(1) == lab).float().mean().item(),
               "test_loss": F.cross_entropy(logits, lab).item()}
        val = self.data.split("val")
        out["upper_loss"] = per_client_value(self.f, x, y, val.full()).mean().item()
        if self.data.hold_idx is not None:  # the held-out tuning score: rows neither level trains on
            out["heldout_loss"] = per_client_value(self.f, x, y, self.data.split("heldout").full()).mean().item()
        out.update(self.detection(x))
        return out

    @torch.no_grad()
    def evaluate_runs(self, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> list[dict[str, float]]:
        """``evaluate`` of the R runs of a run batch (``xs``, ``ys``: each run's iterate), their R heads in one
        product over each split (``[n, D] @ [D, R*C]``: every row of the test set and of the validation splits
        is read once for the R runs). The same metrics; float rounding apart (the product's blocking and the
        cross-entropy's mean are not the run alone's, docs/fidelity.md#batches)."""
        R, C = len(ys), self.soft.C
        Y = torch.stack(ys)
        W, b = Y[:, :-C].reshape(R * C, -1), Y[:, -C:].reshape(-1)

        def ce(X, lab):  # [n, R] cross-entropies and [n, R] right answers of the R heads
            logits = torch.cat([F.linear(X[i:i + 10000].flatten(1), W, b) for i in range(0, len(X), 10000)])
            logits = logits.view(len(X), R, C)
            labels = lab.unsqueeze(1).expand(-1, R)
            return (F.cross_entropy(logits.transpose(1, 2), labels, reduction="none"),
                    (logits.argmax(2) == labels).float())

        loss, right = ce(self.data.X_test, self.data.y_test)
        outs = [{"test_acc": a, "test_loss": v} for a, v in zip(right.mean(0).tolist(), loss.mean(0).tolist())]
        splits = [("upper_loss", "val")] + ([("heldout_loss", "heldout")] if self.data.hold_idx is not None else [])
        for key, which in splits:  # (1/M) Σ_m f^m: f^m the w-weighted cross-entropy of client m's split
            sp = self.data.split(which).full()
            M, n = sp["w"].shape
            per = ce(sp["X"].reshape(M * n, *sp["X"].shape[2:]), sp["y"].reshape(-1))[0].view(M, n, R)
            for o, v in zip(outs, (per * sp["w"].unsqueeze(2)).sum(1).mean(0).tolist()):
                o[key] = v
        for o, x in zip(outs, xs):
            o.update(self.detection(x))
        return outs


class _WeightedHeadOracles(Oracles):
    """hyperclean's closed forms (``fast``): the softmax classifier with per-example weights ``w σ(x)`` in
    g, ``w`` in f and in ``g_fixed`` (the FedAvg bounds' lower loss, g at σ = 1), ``softmax.py``; the
    x-derivatives scattered onto the batch's examples (``_scatter``); f and ``g_fixed`` do not depend on
    x. The client means are the generic means of these."""

    # in a run batch the features stay the M clients' rows, shared by the runs (softmax.py, _times_features)
    shared_keys = ("X",)
    # ... the SVRG pair one call for the R runs' x and anchors [R, d] beside their clients' heads [R*M, dy]; the
    # other calls at the R runs' globals (the FedNest family's hypergradient on every client's rows) one call too
    run_globals = ("svrg",)
    fold_globals = ("grad", "hvp", "cross", "grad_mean", "hvp_mean", "cross_mean")

    def __init__(self, task: HyperClean, fn):
        super().__init__(fn)
        self.t, self.lower = task, fn == task.g
        self.nu = task.p.reg_coef if fn != task.f else 0.0  # ν||y||² in g and g_fixed

    def _reg(self, y):
        return 2 * self.nu * y if self.nu else 0.0

    def _w(self, x, b: Batch) -> torch.Tensor:  # w_n σ(x_n) for g, w_n for f
        return b["w"] * self.t._sig(x, b) if self.lower else b["w"]

    @staticmethod
    def _zeros(x, b: Batch):  # ∇_x of what does not depend on x
        return x.zeros() if isinstance(x, BlockStack) else x.new_zeros(len(b["w"]), x.shape[-1])

    def grad(self, argnum, x, y, b):
        sm, A = self.t.soft, b["X"].flatten(2)
        if argnum == 1:
            return sm.grad(y, A, b["y"], self._w(x, b)) + self._reg(y)
        if not self.lower:
            return self._zeros(x, b)
        return self.t._scatter(x, b, sm.ce(y, A, b["y"]))

    def grads(self, x, y, b):
        return self.grad(0, x, y, b), self.grad(1, x, y, b)

    def svrg(self, x, y1, y0, b):
        d = self.t.soft.grad_diff(y1, y0, b["X"].flatten(2), b["y"], self._w(x, b))
        if self.nu and y0.dim() == 2 and len(y0) != len(y1):  # the runs' anchors (run_globals), each for its rows
            y0 = y0.repeat_interleave(len(y1) // len(y0), 0)
        return d + self._reg(y1 - y0)

    def hvp(self, x, y, b, v):
        return self.t.soft.hvp(y, b["X"].flatten(2), b["y"], self._w(x, b), v) + self._reg(v)

    head_hvp = hvp

    def cross(self, x, y, b, v):
        if not self.lower:
            return self._zeros(x, b)
        return self.t._scatter(x, b, self.t.soft.cross_dw(y, b["X"].flatten(2), b["y"], v))
