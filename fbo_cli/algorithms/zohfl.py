"""ZO-HFL: the randomized implicit zeroth-order method for heterogeneous FL as a hierarchical problem.

Reference: Yuyang Qiu, Kibaek Kim, Farzad Yousefian, "A Randomized Zeroth-Order Hierarchical Framework
for Heterogeneous Federated Learning", arXiv 2504.01839 (2025), Algorithms 1 and 2.

One communication round r (Alg. 1), with S_r the participating clients (``participation`` β):

1. The server draws, for each i ∈ S_r, a direction v_{i,r} uniform on the unit sphere of R^d
   (``v = z/||z||``, z ~ N(0, I); Alg. 1 line 3), and broadcasts x̂_r and v_{i,r}.
2. Client i calls Alg. 2 twice, from the inputs x± = x̂_r ± η v_{i,r} (Alg. 1 line 5): starting at
   y_0 = x± (docs/fidelity.md#zohfl), H_r = ceil(τ√(r+1)) steps (§IV) of projected SGD on its lower problem
   y_{t+1} = Π_{Y_i(x±)}[y_t - γ̃_t (∇CE(y_t; ζ_t) + μ (y_t - x±))], γ̃_t = γ̃/(t+Γ) (Alg. 2 line 4).
   With ``crn`` (default) the + and - calls use the same minibatches ζ_t; the two calls
   are one batched computation. It sends y± back.
3. The server forms g_i = (d/(2η)) (f2(x+, y+) - f2(x-, y-)) v_{i,r}, with f2(x, y) = (λ/2)||x - y||²
   evaluated in float64 (Alg. 1 line 7; the dimension factor d = n·C of Lemma 7(i)).
4. It draws a minibatch ξ_r of its own data and sets ĝ = ∇f̃1(x̂_r; ξ_r) + Σ_{i∈S_r} ρ_i g_i
   (Alg. 1 line 7 with the §IV weights ρ_i of the task; non-participants contribute 0;
   ``aggregate: unbiased`` multiplies the sum by m/|S_r|).
5. x̂_{r+1} = x̂_r - γ_r ĝ, γ_r = γ/√(r+1) (Alg. 1 line 8, §IV).

``num_dirs`` q > 1 averages q independent directions per client (2q Alg. 2 calls); the paper uses 1.
``warm_start`` starts Alg. 2 from the client's previous outputs instead of x± (docs/fidelity.md#zohfl).

Rounds per iteration: 1. Payload: up 2·q·d floats (y+ and y-) per client; down d + 1 (x̂_r and a seed
for the directions). Oracles: 2·q·H_r local gradients per participating client, 1 server gradient.

Metrics besides the task's: ``global_loss`` = f1(x̂) on the full server data + f̂2, where f̂2 is the
previous round's ρ-weighted mean over S_r of (f2(x+, y+) + f2(x-, y-))/2, rescaled to all clients by
Σ_i ρ_i / Σ_{i∈S_r} ρ_i (docs/fidelity.md#zohfl); ``g1_norm`` and ``gzo_norm`` (||∇f̃1|| and ||Σ ρ_i g_i||,
diagnostics).

Hyperparameters (paper §IV defaults): τ = 20 (Table I; 5/20/50 in Fig. 2), γ = 0.01, γ̃ = 0.1, Γ = 1,
η = 0.1, q = 1. Not given in the paper: minibatch B = 64 for ζ and ξ (docs/fidelity.md#zohfl); λ and μ are the task's
``lam``/``mu`` (1.0 each).

Run batches (fbo_cli/grids/run_batches.py; ``_hfl.py``): runs differing in γ, γ̃, Γ, η step together (the directions,
client
sets and minibatches are drawn once; the 2q Alg. 2 calls of the R runs are one local computation of 2qR models a
client); ``crn: false`` and ``warm_start`` run alone. Identical bit for bit to each run alone on the CPU but for the
evaluated losses and accuracy, within rounding (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ._hfl import HFLAlgorithm
from .base import bounded
from .batching import Batching


def zo_gradient(f_plus: torch.Tensor, f_minus: torch.Tensor, v: torch.Tensor, eta: float,
                dim: int) -> torch.Tensor:
    """The two-point estimator of Lemma 7(i)/Alg. 1 line 7: ``(d/(2η)) (f(x+ηv) - f(x-ηv)) v``.
    ``f_plus, f_minus [...]`` (float64 preferred), ``v [..., d]``; returns ``[..., d]`` in ``v``'s dtype."""
    coef = (dim / (2.0 * eta)) * (f_plus - f_minus)
    return coef.to(v.dtype).unsqueeze(-1) * v


def unit_directions(gen: torch.Generator, shape: tuple[int, ...], device=None) -> torch.Tensor:
    """Directions uniform on the unit sphere: ``z/||z||`` with ``z ~ N(0, I)`` along the last axis."""
    z = torch.randn(*shape, generator=gen, device=gen.device).to(device)
    return z / z.norm(dim=-1, keepdim=True)


class ZOHFL(HFLAlgorithm):
    paper: ClassVar[str] = "Qiu, Kim & Yousefian, arXiv 2504.01839 (ZO-HFL)"
    step_metrics: ClassVar[tuple[str, ...]] = ("global_loss", "f2_hat", "g1_norm", "gzo_norm")  # Fig. 2's loss
    # _hfl.py; crn and no warm start (can_batch)
    batch: ClassVar[Batching] = HFLAlgorithm.batch.but(on=True, state=("x", "personal", "diag_t"))
    DIAG: ClassVar[tuple[str, ...]] = ("f2_hat", "g1_norm", "gzo_norm")  # the round's diagnostics, diag_t [3] float64

    @dataclass
    class HP:
        tau: float = bounded(20.0, gt=0, le=10_000, doc="τ: H_r = ceil(τ √(r+1)) local steps per Alg. 2 call")
        server_lr: float = bounded(0.01, doc="γ: server step γ_r = γ/√(r+1)")
        local_lr: float = bounded(0.1, doc="γ̃: local step γ̃_t = γ̃/(t+Γ)")
        Gamma: float = bounded(1.0, doc="Γ: offset of the decaying local step γ̃/(t+Γ)")
        lr_schedule: str = bounded("decay", choices=("decay", "constant"),
                                   doc="decay (γ̃/(t+Γ), the paper) | constant (γ̃)")
        eta: float = bounded(0.1, gt=0, doc="η, smoothing radius")
        num_dirs: int = bounded(1, ge=1, le=1000, doc="q, directions per client per round (paper: 1)")
        batch_size: int = bounded(64, doc="B of the clients' minibatches ζ (0: full local data)")
        server_batch: int = bounded(64, doc="B of the server's minibatch ξ (0: full server data)")
        crn: bool = bounded(True, doc="same minibatches for the + and - calls (docs/fidelity.md#zohfl)")
        aggregate: str = bounded("sum", choices=("sum", "unbiased"),
                                 doc="sum (non-participants give 0) | unbiased (x m/|S_r|)")
        warm_start: bool = bounded(False, doc="start Alg. 2 from the client's previous y± (docs/fidelity.md#zohfl)")

    @classmethod
    def can_batch(cls, hp) -> bool:
        return cls.batch.on and hp.crn and not hp.warm_start

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)
        self.diag_t: torch.Tensor | None = None  # none before the first round
        self.prev = None
        if hp.warm_start:
            self.prev = torch.zeros(task.m, 2 * hp.num_dirs, task.d, dtype=self.x.dtype, device=self.x.device)
            self.seen = torch.zeros(task.m, dtype=torch.bool, device=self.x.device)

    def step(self) -> None:
        task, hp, gen, led = self.task, self.hp, self.fed.gen, self.ledger
        x, r, d, q = self.x, self.r, task.d, hp.num_dirs
        G = 2 * q
        S = self.sample()
        M = len(S)
        H = self.local_steps(r)
        v = unit_directions(gen, (M, q, d), x.device)  # step 1
        sign = torch.tensor([1.0, -1.0], dtype=x.dtype, device=x.device)
        x_in = []  # each run's x± [M, G, d]

        def inputs(k, h, at):
            x_in.append((at(x) + h.eta * sign[None, None, :, None] * v[:, :, None, :]).reshape(M, G, d))

        self.each_run(inputs)
        x_all = torch.stack(x_in, 1).reshape(M, -1, d) if self.batched else x_in[0]  # [M, R·G, d], run-major
        y0 = x_all
        if self.prev is not None:
            y0 = torch.where(self.seen[S][:, None, None], self.prev[S], x_all)
        table, counts = task.client_table(S)
        ball = task.p.local_constraint != "none"
        if hp.crn:  # step 2: both calls of all clients (and runs) in one batched run, sharing minibatches
            Y, _ = self.local(self.as_stack(y0), self.as_stack(x_all), table, counts, H, groups=G,
                              mu=task.p.mu, project=ball)
            Y = self.from_stack(Y, self.runs * G)
        else:  # independent minibatches for every call (a run alone)
            one = lambda t: self.as_stack(t.reshape(M * G, 1, d))
            tab, cnt = table.repeat_interleave(G, 0), counts.repeat_interleave(G)
            Y, _ = self.local(one(y0), one(x_all), tab, cnt, H, groups=1, mu=task.p.mu, project=ball)
            Y = self.from_stack(Y, 1).reshape(M, G, d)
        Y = Y.view(M, self.runs, G, d) if self.batched else Y
        w = task.weights[S]
        srv = task.server_rows  # step 4's minibatch ξ_r, drawn once for the runs
        if len(srv) == 0:  # server_frac = 0: f1 ≡ 0
            rows = srv
        elif hp.server_batch > 0:
            pick = torch.randint(len(srv), (hp.server_batch,), generator=gen, device=gen.device)
            rows = srv[pick.to(srv.device)]
        else:
            rows = srv
        led.oracle("grads", int(len(rows) > 0), len(rows))
        self.x = x.clone()
        self.diag_t = torch.empty(*x.shape[:-1], len(self.DIAG), dtype=torch.float64, device=x.device)

        def server(k, h, at):
            Yk = at(Y, 1)
            Fv = task.f2(x_in[k], Yk).view(M, q, 2)  # step 3, float64
            g = zo_gradient(Fv[..., 0], Fv[..., 1], v, h.eta, d).mean(1)  # [M, d]
            gzo = (w[:, None] * g).sum(0)
            if h.aggregate == "unbiased":
                gzo = gzo * (task.m / M)
            g1 = task.f1_grad(at(x), rows) if len(rows) else torch.zeros_like(at(x))  # step 4
            at(self.x).copy_(at(x) - h.server_lr / math.sqrt(r + 1) * (g1 + gzo))  # step 5
            f2_clients = Fv.mean((1, 2))
            wd = w.double()
            at(self.diag_t).copy_(torch.tensor([float((wd * f2_clients).sum() / wd.sum() * task.weights.double().sum()),
                                                float(g1.norm()), float(gzo.norm())], dtype=torch.float64,
                                               device=x.device))
            if self.personal is not None:
                at(self.personal)[S] = Yk.mean(1)

        self.each_run(server)
        led.comm(M, 2 * q * d, d + 1)
        if self.prev is not None:
            self.prev[S] = Y
            self.seen[S] = True
        self.r += 1

    @property
    def diag(self) -> dict[str, float]:
        """The last round's diagnostics (none before the first)."""
        return {} if self.diag_t is None else dict(zip(self.DIAG, self.diag_t.tolist()))

    def more_metrics(self, out: dict[str, float]) -> dict[str, float]:
        out = {**super().more_metrics(out), **self.diag}
        if "f2_hat" in out:
            out["global_loss"] = out.get("server_loss", 0.0) + out["f2_hat"]
        return out
