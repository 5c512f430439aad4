"""FedNest and LFedNest: federated bilevel optimization with an AID-based hypergradient.

Reference: Davoud Ataee Tarzanagh, Mingchen Li, Christos Thrampoulidis, Samet Oymak, "FedNest:
Federated Bilevel, Minimax, and Compositional Optimization", ICML 2022; as used as the baseline of
Xiao & Ji, ICML 2023 (FBO-AggITD), whose
experimental setup follows the public FedNest code.

FedNest, one outer iteration:

1. FedInn (N times, a fresh client set each time, FedNest repo): anchor q = mean_i ∇_y G_i(x, y)
   (1 round), local SVRG steps y_i <- y_i - β(∇G_i(y_i; ζ) - ∇G_i(y; ζ) + q), y = mean_i y_i
   (1 round). ``lower_solver: sgd`` (FedNest_SGD): FedAvg local SGD, 1 round.
2. FedIHGP on a fresh client set S (docs/fidelity.md#aggitd):
   p_0 = mean_i ∇_y F_i(x, y^N) (1 round); for t = 1..T: p_t = mean_i (I - λ ∇²_y G_i(x, y^N)) p_{t-1}
   (T rounds); P = λ Σ_{t=0}^{T} p_t. The public code's form (per-client counters never fed back,
   a running mean over an uncleared list, one dropout mask for all T products) is ``neumann: code``,
   kept for comparison only (docs/fidelity.md#aggitd).
3. FedOut: h = mean_i [∇_x F_i(x, y^N) - ∇_x∇_y G_i(x, y^N) P] (1 round); τ local steps
   x_i <- x_i - α (h - ∇_x F_i(x, y^N; ξ) + ∇_x F_i(x_i, y^N; ξ)) with the *same* sample ξ in both
   terms (docs/fidelity.md#aggitd); x = mean_i x_i (1 round).

Rounds per outer iteration: 2N + T + 3 (svrg), N + T + 3 (sgd) (Table 1 of Xiao & Ji (ICML 2023); repo).

LFedNest (``local_hypergrad: true``): after FedInn,
each client of S runs τ times, with only local quantities at its own x_i:
v_i = ∇_y F_i(x_i, y); P_i = λ Σ_{j=0}^{T} (I - λ ∇²_y G_i(x_i, y))^j v_i;
h_i = ∇_x F_i(x_i, y) - ∇_x∇_y G_i(x_i, y) P_i; x_i <- x_i - α h_i; then x = mean_i x_i (1 round).
Rounds: 2N + 1 (svrg), N + 1 (sgd). The estimator is biased under heterogeneity.

Outer step schedule (ours, not the paper's): ``outer_lr_schedule`` (constant, the paper's; inverse_sqrt;
inverse) scales α by a factor of the outer iteration t, ``outer_lr_t0`` its t0 (:meth:`outer_lr`).

Hyperparameters (docs/fidelity.md#aggitd): N = 1 (``inner_ep``), T = 5 (``neumann``), λ = 0.01,
β = 0.003, α = 0.01, 5 local lower epochs, batch 64, τ ∈ {1, 5}, C = 0.1. ``neumann: random`` is
the Ghadimi-Wang form P = λ T Π_{t=1}^{T'} (I - λ H̄_t) p_0 with T' ~ U{0..T-1}; it charges the T'
rounds it actually runs.

Run batches (fbo_cli/grids/run_batches.py, docs/fidelity.md#batches): every variant (any τ, LFedNest, every FedIHGP);
each oracle call serves the R runs in one call where the task folds it (hyperrep: every call, the run dimension
written out; hyper-cleaning: the SVRG pair and the means), each fold checked against the runs' calls alone
(``same_bits``), so each run's numbers are identical bit for bit to the run alone on the CPU (tested;
tests/grids/test_batch_calls.py: the calls per outer iteration stay flat in R).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import SCHEDULES, BilevelAlgorithm, bounded
from .batching import Batching


class FedNest(BilevelAlgorithm):
    paper: ClassVar[str] = "Tarzanagh et al., ICML 2022 (baseline of FBO-AggITD)"
    rounds: ClassVar[str] = "2N+T+3 (svrg), N+T+3 (sgd); local: 2N+1, N+1"
    tasks: ClassVar[tuple[str, ...]] = ("hyperrep", "hyperclean")

    @dataclass
    class HP:
        N: int = bounded(1, ge=0, le=1000, doc="FedInn rounds per outer iteration")
        T: int = bounded(5, ge=0, le=1000, doc="Neumann terms / HessIV rounds")
        lam: float = bounded(0.01, doc="λ, Neumann step")
        inner_lr: float = bounded(0.003, doc="β, lower-level (inner) local step size")
        outer_lr: float = bounded(0.01, doc="α, upper-level (outer) local step size")
        lower_epochs: int = bounded(5, ge=1, le=1000, doc="local epochs of each lower-level (FedInn) round")
        batch_size: int = bounded(64, ge=1, doc="minibatch size of every stochastic oracle (per client)")
        tau: int = bounded(1, ge=1, le=1000, doc="local upper steps")
        lower_solver: str = bounded("svrg", choices=("svrg", "sgd"),
                                     doc="svrg (FedInn with SVRG, Alg. 2) | sgd (FedAvg)")
        local_hypergrad: bool = bounded(False, doc="True: LFedNest")
        neumann: str = bounded("sum", choices=("sum", "random", "code"),
                               doc="sum (deterministic, the paper's FedIHGP) | random (Ghadimi-Wang) | code (the "
                                   "public repository's)")
        outer_lr_schedule: str = bounded("constant", choices=tuple(SCHEDULES),
                                         doc="α_t = α · factor(t): constant (the paper) | inverse_sqrt: √(t0/(t0+t)) |"
                                             " inverse: t0/(t0+t)")
        outer_lr_t0: float = bounded(1.0, gt=0, doc="t0 of the outer step schedule (outer iterations)")

    aliases: ClassVar[dict[str, str]] = {"local_steps": "tau", "lower_lr": "inner_lr", "upper_lr": "outer_lr",
                                         "neumann_lr": "lam", "neumann_steps": "T", "lower_rounds": "N"}

    # fbo_cli/grids/run_batches.py: every variant (any tau, LFedNest, every FedIHGP)
    batch: ClassVar[Batching] = BilevelAlgorithm.batch.but(on=True, state=("x", "y"), fixed=("outer_lr_t0",))

    def rounds_per_iteration(self) -> int | None:
        hp = self.hp
        lower = (2 if hp.lower_solver == "svrg" else 1) * hp.N
        if hp.local_hypergrad:
            return lower + 1
        return None if hp.neumann == "random" else lower + hp.T + 3

    def step(self) -> None:
        hp, led, data = self.hp, self.ledger, self.fed.data
        x, y = self.x, self.y
        dx, dy = x.shape[-1], y.shape[-1]
        for _ in range(hp.N):  # FedInn
            S = self.fed.sample()
            a, gfn, enc = self.task.lower_view(x, data.split("train", S))
            q = None
            if hp.lower_solver == "svrg":
                q = self.lower_anchor(a, gfn, enc, y)
                led.comm(len(S), dy)
            y = self.cmean(self.local_lower(a, gfn, enc, y, q, hp.inner_lr, hp.lower_epochs, hp.batch_size))
            led.comm(len(S), dy)
        S = self.fed.sample()
        M = len(S)
        train, val = data.split("train", S), data.split("val", S)
        if hp.local_hypergrad:
            self.x = self.cmean(self._local_outer(x, y, train, val))
        else:
            P = self._fedihgp(x, y, train, val, M, dy)
            _, self.x = self.upper_round(x, y, train, val, P, hp.tau, self.outer_lr(), same_sample=True)
            led.comm(M, dx)  # h
        led.comm(M, dx)
        self.y = y

    def _fedihgp(self, x, y, train, val, M: int, dy: int) -> torch.Tensor:
        """Globally aggregated Neumann HessIV estimate (docs/fidelity.md#aggitd)."""
        hp, led = self.hp, self.ledger
        a, gfn, enc = self.task.lower_view(x, train)
        p = self.grad_mean(self.task.f, 1, x, y, self.noise(val.full()))  # p_0
        led.comm(M, dy)
        if hp.neumann == "random":
            Tp = int(torch.randint(max(hp.T, 1), (1,), generator=self.fed.gen, device=self.fed.gen.device))
            for _ in range(Tp):
                p = p - hp.lam * self.hvp_mean(gfn, a, y, self.noise(enc.full()), p)
                led.comm(M, dy)
            return hp.lam * hp.T * p
        if hp.neumann == "code":
            return self._fedihgp_code(gfn, a, y, enc, p, M, dy)
        acc = p.clone()
        for _ in range(hp.T):
            p = p - hp.lam * self.hvp_mean(gfn, a, y, self.noise(enc.full()), p)
            led.comm(M, dy)
            acc = acc + p
        return hp.lam * acc

    def _fedihgp_code(self, gfn, a, y, enc, v, M: int, dy: int) -> torch.Tensor:
        """The public FedNest code's ``fedIHGP`` (``hvp_method='global_batch'``), reproduced for
        comparison (``neumann: code``). Each client keeps its own counter ``c_i <- (I - λH_i) c_i`` from
        ``c_i = v`` (never fed the aggregate back), with one dropout mask for all T products; the server
        list ``p_locals`` is never cleared, so ``p_k`` is the mean of all entries so far:
        ``p_k = (1/k) Σ_{j=1..k} (p_{j-1} + mean_i c_i^(j))``, ``p_0 = v``; ``P = λ p_T``. For small λ
        this weighs v by about 3.3 at T = 5, against ``T + 1 = 6`` for the paper's FedIHGP."""
        hp, led = self.hp, self.ledger
        batch = self.noise(enc.full())  # the code computes d_in_d_y once per client (item d)
        c = self.spread(v, M)
        p, total = v, torch.zeros_like(v)
        for k in range(1, hp.T + 1):
            c = c - hp.lam * self.hvp(gfn, a, y, batch, c)
            total = total + p + self.cmean(c)
            p = total / k
            led.comm(M, dy)
        return hp.lam * p

    def _local_outer(self, x, y, train, val) -> torch.Tensor:
        """LFedNest's fully local hypergradient steps (docs/fidelity.md#aggitd); returns ``[M, dx]``."""
        hp, f, g = self.hp, self.task.f, self.task.g
        xi = self.spread(x, train.M)
        lr = self.outer_lr()
        for _ in range(hp.tau):
            v = self.grad(f, 1, xi, y, self.noise(val.full()))
            acc, p = v.clone(), v
            for _ in range(hp.T):
                p = p - hp.lam * self.hvp(g, xi, y, self.noise(train.full()), p)
                acc = acc + p
            xi = xi - lr * self.hypergradient(xi, y, hp.lam * acc, train, val).h
        return xi
