"""Heterogeneous federated learning as a hierarchical problem (ZO-HFL, Qiu, Kim & Yousefian, arXiv 2504.01839).

Problem (1) of Qiu, Kim and Yousefian (arXiv 2504.01839), as instantiated in their §IV:

* model: multinomial logistic regression, no bias: ``p(c | u) = softmax(x u)_c`` with the
  parameters a matrix ``x ∈ R^{C×n}`` (stored flat, ``d = C·n``, class-major as ``nn.Linear``'s weight);
* server loss ``f1(x) = CE(x; D_s)``, the mean cross-entropy on the server's own data;
* penalty ``f2(x) = Σ_i ρ_i (λ/2) ||x - y_i(x)||²`` with ``ρ_i = N_i / Σ_j N_j`` (``client_weighting:
  data``, §IV) or ``ρ_i = 1/m`` (``uniform``, Alg. 1 literally) (docs/fidelity.md#zohfl);
* client i's lower problem ``y_i(x) = argmin_{y ∈ Y_i(x)} CE(y; D_i) + (μ/2) ||x - y||²``, with
  ``Y_i(x) = R^d`` (``local_constraint: none``, the experiments) or the ball
  ``{||y - x|| <= radius}`` (``ball``).

Data (docs/fidelity.md#zohfl): train and test pooled, 10% test,
30% of the rest to the server uniformly at random, the remaining 70% split over the ``clients`` with the
run's ``partition`` (``dirichlet`` with ``alpha`` in the paper). The task rebuilds the runner's
:class:`FederatedData` *in place* with this pipeline, from the run's own partition settings
(``data.spec``), so every algorithm sees the same object. Features are flattened pixels in [0, 1]
(``features: unit``), raw pixel values in [0, 255] (``raw``, as code that skips ToTensor's scaling sees them) or
the loader's standardized values (``standard``).

The task holds no algorithm logic: it provides batched closed-form oracles (cross-entropy gradients of
stacked models ``[K, G·C, n]``: ``G`` models per client share each minibatch), the projection, the
row tables of clients and server, and the metrics. Also here: :func:`partition_counts`, the
client-by-class counts of Fig. 1 (drawn by :mod:`fbo_cli.evidence.report.zohfl_section`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..data.hierarchical import build_hierarchical
from ..errors import UsageError
from ..sim.bounds import bounded
from .base import Task

# The loaders' normalization (fbo_cli/data/sources.py), undone by ``features: unit``.
_NORMALIZATION: dict[str, tuple] = {
    "mnist": ((0.1307,), (0.3081,)),
    "mnist5k": ((0.1307,), (0.3081,)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "digits": ((0.5,), (0.5,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


class HFL(Task):
    name: ClassVar[str] = "hfl"
    kind: ClassVar[str] = "hfl"
    metric: ClassVar[str] = "test_acc"
    tune_metric: ClassVar[tuple[str, str]] = ("server_loss", "min")  # the server's own data
    default_dataset: ClassVar[str] = "fashion-mnist"
    datasets: ClassVar[tuple[str, ...]] = ("mnist", "fashion-mnist", "cifar10", "cifar100", "mnist5k",
                                           "digits", "breast-cancer", "synthetic")
    # The paper's setting (§IV), for a runner that applies task-level defaults below the user's keys.
    run_defaults: ClassVar[dict] = {"clients": 10, "partition": "dirichlet", "alpha": 1.0,
                                    "participation": 0.5, "rounds": 500, "eval_every": 10}

    @dataclass
    class Params:
        lam: float = bounded(1.0, doc="λ, weight of the penalty f2 (not given in the paper)")
        mu: float = bounded(1.0, doc="μ, the clients' proximal weight (not given in the paper)")
        client_weighting: str = bounded("data", doc="data (ρ_i = N_i/ΣN_j, §IV) | uniform (1/m, Alg. 1)")
        local_constraint: str = bounded("none", doc="none (the experiments) | ball (||y - x|| <= radius)")
        radius: float = bounded(1.0, doc="ρ_i of the ball constraint")
        test_frac: float = bounded(0.1, doc="share of the pooled data held out as the global test set")
        server_frac: float = bounded(0.3, doc="share of the training data given to the server")
        pool_test: bool = bounded(True,
                                  doc="pool train and test, then split (docs/fidelity.md#zohfl); False: the official "
                                      "test set")
        holdout: float = bounded(0.0, doc="per-client held-out share, for the optional personalized accuracy")
        features: str = bounded("unit",
                                doc="unit (pixels in [0, 1]) | raw (pixels in [0, 255]) | standard (the loader's)")
        pretrain_steps: int = bounded(300, ge=0, le=100_000,
                                      doc="server pre-training: SGD steps on its own data for x̂_0 (0: x̂_0 = 0)")
        pretrain_lr: float = bounded(0.1, doc="constant step of the pre-training SGD")
        pretrain_batch: int = bounded(64, doc="minibatch of the pre-training SGD")

    @classmethod
    def check_params(cls, p: "HFL.Params") -> None:
        if p.client_weighting not in ("data", "uniform"):
            raise UsageError(f"client_weighting must be one of data, uniform; got '{p.client_weighting}'",
                             kind="bad_value", field="client_weighting", value=p.client_weighting)
        if p.local_constraint not in ("none", "ball"):
            raise UsageError(f"local_constraint must be one of none, ball; got '{p.local_constraint}'",
                             kind="bad_value", field="local_constraint", value=p.local_constraint)
        if p.features not in ("unit", "raw", "standard"):
            raise UsageError(f"features must be one of unit, raw, standard; got '{p.features}'",
                             kind="bad_value", field="features", value=p.features)
        if p.pretrain_steps > 0 and (p.pretrain_lr <= 0 or p.pretrain_batch < 1):
            raise UsageError(f"server pre-training needs pretrain_lr > 0 and pretrain_batch >= 1; "
                             f"got {p.pretrain_lr}, {p.pretrain_batch}",
                             kind="bad_value", field="pretrain_lr" if p.pretrain_lr <= 0 else "pretrain_batch",
                             value=p.pretrain_lr if p.pretrain_lr <= 0 else p.pretrain_batch)
        if p.mu <= 0:
            raise UsageError(f"mu must be > 0 (the lower level is μ-strongly convex), got {p.mu}",
                             kind="bad_value", field="mu", value=p.mu)
        if p.local_constraint == "ball" and p.radius <= 0:
            raise UsageError(f"radius must be > 0 with local_constraint=ball, got {p.radius}",
                             kind="bad_value", field="radius", value=p.radius)

    def __init__(self, params: "HFL.Params", data):
        super().__init__(params, data)
        p = params
        s = data.spec or {}
        if "server_frac" not in s:  # the runner's generic split: rebuild with the hierarchical pipeline
            dev = data.X.device
            m = s.get("clients", data.num_clients)
            new = build_hierarchical(data.dataset, s.get("partition", "iid"), m, s.get("seed", 0), dev,
                                     alpha=s.get("alpha", 0.5),
                                     shards_per_client=s.get("shards_per_client", 2), test_frac=p.test_frac,
                                     server_frac=p.server_frac, holdout_frac=p.holdout, pool_test=p.pool_test)
            for f in fields(new):
                setattr(data, f.name, getattr(new, f.name))
        self.C = data.num_classes
        X = data.X.reshape(len(data.X), -1)
        Xt = data.X_test.reshape(len(data.X_test), -1)
        if p.features in ("unit", "raw") and data.dataset.name in _NORMALIZATION:
            X, Xt = self._unit(X, data), self._unit(Xt, data)
            if p.features == "raw":  # integer pixel values, as a loader without ToTensor's scaling gives them
                X, Xt = X * 255.0, Xt * 255.0
        self.X, self.Xt = X.contiguous(), Xt.contiguous()
        self.Y, self.Yt = data.y, data.y_test
        self.nf = self.X.shape[1]
        self.d = self.nf * self.C
        self.m = data.num_clients
        self.table, self.counts = data.train_idx, data.train_mask.sum(1)
        self.server_rows = data.server_idx if data.server_idx is not None else data.train_idx.new_zeros(0)
        n = self.counts.to(self.X.dtype)
        self.weights = n / n.sum() if p.client_weighting == "data" else torch.full_like(n, 1.0 / self.m)

    def _unit(self, X: torch.Tensor, data) -> torch.Tensor:
        mean, std = _NORMALIZATION[data.dataset.name]
        ch = len(mean)
        Z = X.view(len(X), ch, -1)
        return (Z * torch.tensor(std, dtype=X.dtype, device=X.device)[:, None]
                + torch.tensor(mean, dtype=X.dtype, device=X.device)[:, None]).reshape(len(X), -1)

    # variables ---------------------------------------------------------------------------------------
    def init_x(self) -> torch.Tensor:
        """x̂_0, the same for every method of a seed (Alg. 1 line 1: "server obtains initial global
        model"): ``pretrain_steps`` steps of minibatch SGD with constant step ``pretrain_lr`` on the
        server's own data from 0, with a generator of its own seeded by the run's seed (so the run's
        random stream is untouched); ``pretrain_steps: 0`` gives x̂_0 = 0 (docs/fidelity.md#zohfl). Computed once."""
        if getattr(self, "_x0", None) is None:
            x = self.X.new_zeros(self.d)
            srv, p = self.server_rows, self.p
            if p.pretrain_steps > 0 and len(srv):
                seed = int((self.data.spec or {}).get("seed", 0))
                gen = torch.Generator(device=self.X.device).manual_seed(seed * 7919 + 13)
                for _ in range(p.pretrain_steps):
                    pick = torch.randint(len(srv), (p.pretrain_batch,), generator=gen, device=gen.device)
                    x = x - p.pretrain_lr * self.f1_grad(x, srv[pick])
            self._x0 = x
        return self._x0.clone()

    def client_table(self, clients: torch.Tensor,
                     with_server: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Row tables ``[M, n_max]`` and counts ``[M]`` of the given clients (the server's rows appended
        as one more client when ``with_server``)."""
        table, counts = self.table[clients], self.counts[clients]
        if not with_server:
            return table, counts
        srv = self.server_rows
        width = max(table.shape[1], len(srv))
        pad = lambda t, k: torch.cat([t, t[:, :1].expand(-1, k - t.shape[1])], 1) if t.shape[1] < k else t
        table = torch.cat([pad(table, width), pad(srv[None], width)])
        return table, torch.cat([counts, counts.new_tensor([len(srv)])])

    # batched oracles -------------------------------------------------------------------------------
    def ce_grad(self, W: torch.Tensor, Xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor,
                groups: int = 1) -> torch.Tensor:
        """Gradients of the weighted cross-entropy ``Σ_b w_kb CE(W_kg; u_kb, y_kb)`` of ``K`` stacked
        linear models, ``G = groups`` per row of the batch: ``W [K, G·C, n]``, ``Xb [K, B, n]``,
        ``yb, wb [K, B]``. Closed form ``(softmax(W X^T) - onehot(y)^T) diag(w) X``, computed
        class-major (the fast ``bmm`` shapes on the CPU); returns ``[K, G·C, n]``."""
        K, B, _ = Xb.shape
        C = self.C
        P = torch.softmax(torch.bmm(W, Xb.transpose(1, 2)).view(K, groups, C, B), 2)
        P.scatter_add_(2, yb.view(K, 1, 1, B).expand(K, groups, 1, B),
                       P.new_full((1, 1, 1, 1), -1.0).expand(K, groups, 1, B))
        P.mul_(wb.view(K, 1, 1, B))
        return torch.bmm(P.view(K, groups * C, B), Xb)

    def batch_rows(self, gen: torch.Generator, table: torch.Tensor, counts: torch.Tensor, steps: int,
                   B: int) -> torch.Tensor:
        """``[steps, K, B]`` pool rows: for every step, ``B`` i.i.d. uniform draws from each row table."""
        u = torch.rand(steps, table.shape[0], B, generator=gen, device=gen.device).to(table.device)
        pos = torch.minimum((u * counts[None, :, None]).long(), (counts - 1)[None, :, None])
        return torch.gather(table.unsqueeze(0).expand(steps, -1, -1), 2, pos)

    def gather(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[..., n]`` and labels ``[...]`` of the pool rows ``rows [...]``."""
        flat = rows.reshape(-1)
        return (torch.index_select(self.X, 0, flat).view(*rows.shape, self.nf),
                torch.index_select(self.Y, 0, flat).view(rows.shape))

    def project(self, W: torch.Tensor, anchor: torch.Tensor, groups: int = 1) -> torch.Tensor:
        """``Π_{Y_i(x)}``: identity, or the ball of ``radius`` around each model's input ``x``
        (``Π(y) = x + (y - x) min(1, ρ/||y - x||)``) for ``W, anchor [K, G·C, n]``."""
        if self.p.local_constraint == "none":
            return W
        K, GC, n = W.shape
        D = (W - anchor).reshape(K, groups, -1)
        norm = D.pow(2).sum(-1, keepdim=True).sqrt()
        scale = torch.clamp(self.p.radius / norm.clamp(min=1e-30), max=1.0)
        return anchor + (D * scale).view(K, GC, n)

    def f1_grad(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``∇ f̃1(x; ξ)``: the mean cross-entropy gradient on the server rows ``rows [B]``; ``[d]``."""
        Xb, yb = self.gather(rows)
        w = torch.full((1, len(rows)), 1.0 / len(rows), dtype=x.dtype, device=x.device)
        return self.ce_grad(x.view(1, self.C, self.nf), Xb[None], yb[None], w).reshape(-1)

    def f2(self, x_in: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``f2(x, y) = (λ/2) ||x - y||²`` per row, in float64 (docs/fidelity.md#zohfl)."""
        D = (x_in - y).double()
        return 0.5 * self.p.lam * D.pow(2).sum(-1)

    # metrics ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def ce_acc(self, x: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
               chunk: int = 20000) -> tuple[float, float]:
        """Mean cross-entropy and accuracy of the model ``x [d]`` on ``(X, y)``."""
        if len(y) == 0:
            return float("nan"), float("nan")
        W = x.view(self.C, self.nf)
        loss = correct = 0.0
        for i in range(0, len(y), chunk):
            Z = X[i:i + chunk] @ W.T
            loss += F.cross_entropy(Z, y[i:i + chunk], reduction="sum").item()
            correct += (Z.argmax(1) == y[i:i + chunk]).sum().item()
        return loss / len(y), correct / len(y)

    @torch.no_grad()
    def ce_acc_runs(self, xs: list[torch.Tensor], X: torch.Tensor, y: torch.Tensor,
                    chunk: int = 20000) -> list[tuple[float, float]]:
        """``ce_acc`` of R models at once (a run batch's evaluation): their ``[C, n]`` weights side by side in one
        product per chunk (``X @ [n, R·C]``), so each row is read once for the R models. The counts of right
        answers are exact; the losses agree with ``ce_acc`` within float rounding (another product kernel)."""
        R = len(xs)
        if len(y) == 0:
            return [(float("nan"), float("nan"))] * R
        W = torch.stack(xs).view(R * self.C, self.nf)
        loss, correct = [0.0] * R, [0] * R
        for i in range(0, len(y), chunk):
            Z = (X[i:i + chunk] @ W.T).view(-1, R, self.C)
            lab = y[i:i + chunk].unsqueeze(1).expand(-1, R)
            ce = F.cross_entropy(Z.transpose(1, 2), lab, reduction="none").sum(0).tolist()
            hit = (Z.argmax(2) == lab).sum(0).tolist()
            loss = [a + b for a, b in zip(loss, ce)]
            correct = [a + b for a, b in zip(correct, hit)]
        return [(a / len(y), c / len(y)) for a, c in zip(loss, correct)]

    @torch.no_grad()
    def evaluate_runs(self, xs: list[torch.Tensor]) -> list[dict[str, float]]:
        """``evaluate`` of the R models of a run batch in one pass per split (:meth:`ce_acc_runs`)."""
        outs = [{"test_acc": a, "test_loss": v} for v, a in self.ce_acc_runs(xs, self.Xt, self.Yt)]
        if len(self.server_rows):
            srv = self.ce_acc_runs(xs, self.X[self.server_rows], self.Y[self.server_rows])
            for o, (v, _) in zip(outs, srv):
                o["server_loss"] = v
        return outs

    @torch.no_grad()
    def personal_acc(self, Yp: torch.Tensor) -> float:
        """Accuracy of each client's personalized model ``Yp [m, d]`` on its own held-out rows, pooled."""
        idx, mask = self.data.val_idx, self.data.val_mask
        if not bool(mask.any()):
            return float("nan")
        Z = torch.bmm(self.X[idx], Yp.view(self.m, self.C, self.nf).transpose(1, 2))
        hit = (Z.argmax(-1) == self.Y[idx]) & mask
        return hit.sum().item() / mask.sum().item()

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor) -> dict[str, float]:
        """Global model metrics: test accuracy and loss (the global test split) and the server loss f1
        (full server data; absent when ``server_frac`` is 0)."""
        tl, ta = self.ce_acc(x, self.Xt, self.Yt)
        out = {"test_acc": ta, "test_loss": tl}
        if len(self.server_rows):
            out["server_loss"] = self.ce_acc(x, self.X[self.server_rows], self.Y[self.server_rows])[0]
        return out


# ------------------------------------------------------------------------------------------------------
# Fig. 1: the client-by-class partition


def partition_counts(data) -> torch.Tensor:
    """``[m, C]`` number of training examples of each class held by each client."""
    lab = data.y[data.train_idx]
    oh = F.one_hot(lab, data.num_classes) * data.train_mask.unsqueeze(-1)
    return oh.sum(1)
