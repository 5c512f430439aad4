"""FBO-AggITD: federated bilevel optimization with aggregated iterative differentiation.

Reference: Peiyao Xiao and Kaiyi Ji, "Communication-Efficient Federated Hypergradient Computation
via Aggregated Iterative Differentiation", ICML 2023 (PMLR 202:38059-38086), arXiv 2302.04969.

One outer iteration k (Alg. 3) with one client set S (docs/fidelity.md#aggitd):

1. The server draws Q ~ U{0, ..., N}, shared by all clients (Alg. 1 line 1; §7 item 6).
2. For t = 0, ..., N, at the global iterate y^t (Alg. 1 lines 2-14):
   a. if t == Q: r_i = ∇_y F_i(x, y^Q) on the validation split; the server sets z^Q = mean_i r_i
      (lines 5, 12);
   b. if t > Q: z_i = z^{t-1} - λ ∇²_y G_i(x, y^t) z^{t-1} (Hessian-vector product at the
      *server-averaged* y^t, applied to the broadcast z^{t-1}); z^t = mean_i z_i (lines 6, 13);
   c. if t < N: q_i = ∇_y G_i(x, y^t) (full train split), q^t = mean_i q_i (lines 4, 9), then
      One-Round-Lower (Alg. 2): τ_lower local SVRG steps
      y_i <- y_i - β (∇G_i(y_i; ζ) - ∇G_i(y^t; ζ) + q^t), and y^{t+1} = mean_i y_i (line 10).
      ``lower_solver: sgd`` (FBO-AggITD_SGD, Fig. 4) replaces Alg. 2 by FedAvg local SGD.
3. p = λ (N+1) z^N (line 15).
4. h_i = ∇_x F_i(x, y^N) - ∇_x∇_y G_i(x, y^N) p (line 17, JVP by reverse-over-reverse autograd);
   h = mean_i h_i (line 19).
5. One-Round-Upper (Alg. 4): τ local steps x_i <- x_i - α (h - ∇_x F_i(x, y^N; ξ_i)
   + ∇_x F_i(x_i, y^N; ξ_{i,ν})) with ξ_i ≠ ξ_{i,ν} (fresh dropout masks); x_{k+1} = mean_i x_i.
   y_{k+1} = y^N (warm start).

No graph is built across rounds: z, p and y^t are plain tensors (docs/fidelity.md#aggitd).

Rounds per outer iteration (Table 1): 2N + 3 = N x (anchor round + model-averaging round), one
round for z^N/p, one for h, one for x. With ``lower_solver: sgd``: N + 3 (the z uploads ride on the
model-averaging round).

Hyperparameters (docs/fidelity.md#aggitd): N = 1, λ = 0.01, inner (lower) step
β = 0.003, outer (upper) step α = 0.01, 5 local lower epochs of minibatch 64 (FedNest repo),
τ ∈ {1, 5} local upper steps ("Outer_ep"), participation C = 0.1.

Run batches (fbo_cli/grids/run_batches.py, docs/fidelity.md#batches): any τ; each oracle call serves the R runs
in one call where the task folds it, checked against the runs' calls alone (``same_bits``), so each run's numbers
are identical bit for bit to the run alone on the CPU (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import BilevelAlgorithm, bounded
from .batching import Batching


class AggITD(BilevelAlgorithm):
    aliases: ClassVar[dict[str, str]] = {"local_steps": "tau", "lower_lr": "inner_lr", "upper_lr": "outer_lr",
                                         "neumann_lr": "lam", "lower_rounds": "N"}
    paper: ClassVar[str] = "Xiao & Ji, ICML 2023 (FBO-AggITD)"
    rounds: ClassVar[str] = "2N+3 (svrg lower), N+3 (sgd lower)"
    tasks: ClassVar[tuple[str, ...]] = ("hyperrep", "hyperclean")

    @dataclass
    class HP:
        N: int = bounded(1, ge=0, le=1000, doc="lower-level federated rounds per outer iteration")
        lam: float = bounded(0.01, doc="λ, the HessIV (Neumann) step")
        inner_lr: float = bounded(0.003, doc="β, lower-level local step size")
        outer_lr: float = bounded(0.01, doc="α, upper-level local step size")
        lower_epochs: int = bounded(5, ge=1, le=1000, doc="local epochs of One-Round-Lower")
        batch_size: int = bounded(64, ge=1, doc="minibatch size of every stochastic oracle (per client)")
        tau: int = bounded(1, ge=1, le=1000, doc="local upper steps (\"Outer_ep\")")
        lower_solver: str = bounded("svrg", choices=("svrg", "sgd"), doc="svrg (Alg. 2) | sgd (FedAvg)")

    # fbo_cli/grids/run_batches.py: any number of local upper steps
    batch: ClassVar[Batching] = BilevelAlgorithm.batch.but(on=True, state=("x", "y"))

    def rounds_per_iteration(self) -> int:
        return (2 if self.hp.lower_solver == "svrg" else 1) * self.hp.N + 3

    def draw_Q(self) -> int:
        """Q ~ U{0, ..., N}, drawn by the server (Alg. 1 line 1)."""
        return int(torch.randint(self.hp.N + 1, (1,), generator=self.fed.gen, device=self.fed.gen.device))

    def step(self) -> None:
        hp, led, x = self.hp, self.ledger, self.x
        dx, dy = x.shape[-1], self.y.shape[-1]
        S = self.fed.sample()
        M = len(S)
        train, val = self.fed.data.split("train", S), self.fed.data.split("val", S)
        a, gfn, enc = self.task.lower_view(x, train)
        Q = self.draw_Q()
        y, z = self.y, None
        for t in range(hp.N + 1):
            if t == Q:  # lines 5, 12
                z = self.grad_mean(self.task.f, 1, x, y, self.noise(val.full()))
            elif t > Q:  # lines 6, 13
                z = z - hp.lam * self.hvp_mean(gfn, a, y, self.noise(enc.full()), z)
            if t < hp.N:
                ride = dy if t >= Q else 0  # r_i^t or z_i^t piggy-backs on the round
                if hp.lower_solver == "svrg":
                    q = self.lower_anchor(a, gfn, enc, y)  # lines 4, 9
                    led.comm(M, dy + ride)
                    yi = self.local_lower(a, gfn, enc, y, q, hp.inner_lr, hp.lower_epochs, hp.batch_size)
                    led.comm(M, dy)  # Alg. 2 line 8
                else:
                    yi = self.local_lower(a, gfn, enc, y, None, hp.inner_lr, hp.lower_epochs, hp.batch_size)
                    led.comm(M, dy + ride)
                y = self.cmean(yi)
        led.comm(M, dy)  # z^N (or r^N) up, p down
        p = hp.lam * (hp.N + 1) * z  # line 15
        # lines 16-19 (h_i, h = mean_i h_i) and Alg. 4 (tau local steps, x_{k+1} = mean_i x_i)
        _, self.x = self.upper_round(x, y, train, val, p, hp.tau, hp.outer_lr, same_sample=False, need_h=False)
        led.comm(M, dx)  # h
        led.comm(M, dx)
        self.y = y
