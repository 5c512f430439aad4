"""AdaFBiO: fast adaptive federated bilevel optimization (STORM estimators, local steps, adaptive
matrices shared by the server).

Reference: Feihu Huang, "Fast Adaptive Federated Bilevel Optimization", arXiv 2211.01122 (2022),
Algorithm 1, eqs. (6)-(13).

Problem (1): x and y global, ``min_x (1/M) Σ_m f^m(x, y*(x))``, ``y*(x) = argmin_y (1/M) Σ_m g^m(x, y)``.
Every client keeps copies ``x^m [M, d]``, ``y^m``, and STORM estimators ``v^m`` (lower gradient) and
``w^m`` (hypergradient); every client takes part in every round. Per-client heads (``lower=local``,
the special case (2)/(3)): y = (y^1; ...; y^M) is still one global variable of problem (1), each
client's losses touch only its own block, and the algorithm runs unchanged on it, so averaging moves
block m by 1/M of its owner's progress (docs/fidelity.md#local-lower). We store it exactly and in O(M d_y): block m as
held by its owner (``y``, ``v``) and as held by every other client (``y_oth``, ``v_oth``, the same on
all of them: they only ever apply the broadcast quantities).

Iteration t = 1..T (one call of :meth:`step` = q iterations = one round, ending with the sync):

1. η_t = eta_k / (eta_n + t)^{1/3}; α_{t+1} = min(1, c1 η_t²), β_{t+1} = min(1, c2 η_t²)
   (Thm 1 schedule).
2. If t mod q = 0 (sync; lines 5-8): the server averages x̄_t, ȳ_t, v̄_t, w̄_t, generates A_t, B_t
   (line 6, below), and sets x_{t+1} = x̄_t - η_t γ A_t^{-1} w̄_t, y_{t+1} = ȳ_t - η_t λ B_t^{-1} v̄_t
   (lines 7-8, the closed form eq. (12)) on every client. ``sync_estimators`` (default):
   every client's v, w restart from v̄_t, w̄_t.
   Else (lines 11-13): x_{t+1}^m = x_t^m - η_t γ A_t^{-1} w_t^m, y_{t+1}^m = y_t^m - η_t λ B_t^{-1} v_t^m.
3. Every client (lines 17-19) draws ξ̄ = {ξ, ζ_0, ..., ζ_{K-1}} and ζ (K+2 minibatches) and its own
   Neumann index k ~ U{0..K-1}, and with the *same* draws at the new point (x_{t+1}^m, y_{t+1}^m) and
   its own old, pre-average point (x_t^m, y_t^m) (one vectorized call over the stacked pair):
   v_{t+1} = ∇_y g(new; ζ) + (1 - α_{t+1})(v_t - ∇_y g(old; ζ))                       (8)
   w_{t+1} = ∇̄f(new; ξ̄) + (1 - β_{t+1})(w_t - ∇̄f(old; ξ̄))                           (9)
   with ∇̄f(x, y; ξ̄) = ∇_x f(ξ) - ∇_xy g(ζ_0) K ϑ Π_{i=1}^{k} (I - ϑ ∇²_yy g(ζ_i)) ∇_y f(ξ)   (13)
   (the local Hessian only, as the paper does; ``neumann: sum`` is the deterministic truncation
   ϑ Σ_{j<K} Π (I - ϑ H_j), an ablation).

Adaptive matrices (line 6; the matrices change only at syncs, line 13), a_0 = 0, b_0 = 0:

* ``adam`` (line 6): a_t = ϱ a + (1-ϱ) w̄_t², A_t = diag(√a_t + ρ); b_t = ϱ b + (1-ϱ) ||v̄_t||,
  B_t = (b_t + ρ) I (b_t is a norm, not squared);
* ``adabelief`` (eqs. 6-7): the same with w̄_t - w̄_{t0}, ||v̄_t - v̄_{t0}||, t0 = the previous sync
  (the first sync uses the initial averages w̄_1, v̄_1);
* ``none`` (Thm 2): A_t = I, B_t = I.

Initialization (line 2): v_1^m, w_1^m average q independent draws each (q(K+2) minibatches).
A_1, B_1 (unspecified in the paper): ``init_matrices: average`` spends one extra
round to average w_1, v_1 and applies the rule with reference 0 (a_1 = (1-ϱ) w̄_1², b_1 = (1-ϱ)||v̄_1||;
adam and adabelief coincide); ``identity``: A_1 = I, B_1 = I, no round. ``adaptive: none`` needs none.

Rounds: 1 per call (per q iterations; the paper's T/q), plus the initial round of
``init_matrices: average``. Floats per client and round: up x, w, y, v (2(d+p); with per-client
heads p is one block: the other blocks are known to the server); down x, y (+ A_t diagonal and B_t
when adaptive) (+ w̄, v̄ with ``sync_estimators``). Samples: (K+2) minibatches per client per
iteration and q(K+2) at the start, as the paper counts them (Remark 2); every draw serves both STORM
points. Oracle calls count what is evaluated (2 points, only k_i HVPs for client i).

Hyperparameters (the paper gives none): q = 5, b = 64, K = 10,
η_t = 1/(27+t)^{1/3} (eta_k = 1, eta_n = 27), c1 = c2 = 4.5 (α_1 = β_1 = 0.5), ϱ = 0.9 constant,
adaptive = adam, ρ = 1e-2 (recommended 1e-3), λ = 3e-2 (recommended 0.1), γ = 3e-4 (recommended
grid 1e-3..3e-2), ϑ = 0.05 (recommended 1e-2). In expectation over k the estimator is the series
ϑ Σ_{k<K} (I - ϑH)^k: ϑ K sets how much of the implicit term it keeps, and ϑ < 2/L_g keeps it
convergent. Why each default differs from the recommended value, and the experiments' tuned values:
docs/fidelity.md#fedbio. With ``adaptive: none`` γ and λ are plain learning rates (times η_t), so
their grids sit higher.

Run batches (fbo_cli/grids/run_batches.py, docs/fidelity.md#batches): R runs of one seed that differ in γ, λ, ϑ, ρ or ϱ
step together, their client state ``[R, M, d]``, every oracle call folded over the ``R*M`` rows with the
minibatches and k drawn once, the adaptive matrices per run (``a``, ``A`` ``[R, p]``; ``b``, ``B`` ``[R]``,
float64); η_t's ``eta_k``, ``eta_n`` and the momentum constants ``c1``, ``c2`` are shared (``batch.fixed``).
Each run's numbers are identical bit for bit to the run alone on the CPU (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..errors import UsageError
from ._client_state import ClientStateAlgorithm
from .base import bounded
from .batching import Batching
from .storm import pair, storm, twice, unpair

ADAPTIVE = ("adam", "adabelief", "none")


class AdaFBiO(ClientStateAlgorithm):
    aliases: ClassVar[dict[str, str]] = {"local_steps": "q", "lower_lr": "lambda_y", "upper_lr": "gamma_x",
                                         "neumann_lr": "neumann_step", "neumann_steps": "K"}
    # its hyperrep specs: 10 clients (all taking part; 100 would cost hours at the default budget)
    task_defaults: ClassVar[dict[str, dict]] = {"hyperrep": {"clients": 10}}
    paper: ClassVar[str] = "Huang, arXiv 2211.01122 (2022), Alg. 1 (AdaFBiO)"
    rounds: ClassVar[str] = "1 per q local iterations (+1 at the start with init_matrices=average)"
    tasks: ClassVar[tuple[str, ...]] = ("hyperrep", "hyperclean")
    needs_local_lower: ClassVar[bool] = False
    # fbo_cli/grids/run_batches.py: the client copies [M, d] become [R, M, d], the adaptive matrices [R, d_x] and [R]
    batch: ClassVar[Batching] = Batching(
        state=("x", "y", "v", "w", "y_oth", "v_oth", "a", "b", "A", "B", "w_ref", "v_ref"),
        fixed=("eta_k", "eta_n", "c1", "c2"))  # η_t, α_t, β_t: one number an iteration

    @dataclass
    class HP:
        q: int = bounded(5, ge=1, le=100_000, doc="local iterations per round (sync when t mod q = 0)")
        batch_size: int = bounded(64, ge=1, doc="b: every minibatch (ξ, ζ_0..ζ_{K-1}, ζ)")
        K: int = bounded(10, ge=1, le=1000, doc="Neumann order: k ~ U{0..K-1}")
        neumann_step: float = bounded(0.05, doc="ϑ (replaces 1/L_g; must be < 2/L_g; docs/fidelity.md#fedbio)")
        neumann: str = bounded("random", choices=("random", "sum"),
                               doc="random (eq. 13) | sum (deterministic truncation, ablation)")
        gamma_x: float = bounded(3e-4, doc="γ, x step (tuning grid 1e-3..3e-2)")
        lambda_y: float = bounded(3e-2, doc="λ, y step (tuning grid 1e-2..3e-1)")
        adaptive: str = bounded("adam", choices=ADAPTIVE, doc="adam | adabelief | none")
        rho_decay: float = bounded(0.9, ge=0, lt=1, doc="ϱ, second-moment decay (constant)")
        rho_floor: float = bounded(1e-2, doc="ρ (tuning grid 1e-4..1e-2)")
        eta_k: float = bounded(1.0, gt=0, doc="η_t = eta_k / (eta_n + t)^(1/3)")
        eta_n: float = bounded(27.0, gt=-1, doc="n of the step η_t = eta_k / (eta_n + t)^(1/3)")
        c1: float = bounded(4.5, doc="α_{t+1} = min(1, c1 η_t²): momentum weight of v")
        c2: float = bounded(4.5, doc="β_{t+1} = min(1, c2 η_t²): momentum weight of w")
        sync_estimators: bool = bounded(True,
                                        doc="v, w restart from their averages at a sync (docs/fidelity.md#fedbio)")
        init_matrices: str = bounded("average", choices=("average", "identity"),
                                     doc="average (one extra round) | identity")

    def __init__(self, task, hp, fed):
        if hp.rho_floor <= 0 and hp.adaptive != "none":
            raise UsageError(f"rho_floor must be > 0, got {hp.rho_floor}",
                             kind="bad_value", field="rho_floor", value=hp.rho_floor)
        super().__init__(task, hp, fed)
        self.v: torch.Tensor | None = None
        self.w: torch.Tensor | None = None
        if self.local:  # block m as held by the other clients (see the module docstring)
            self.y_oth = self.y.clone()
            self.v_oth = torch.zeros_like(self.y)
        # A_t (diagonal) and B_t: tensors from the start (A = 1, B = 1 divide exactly as the numbers 1 do), so that
        # a run batch stacks them; b_t and B_t in float64 on the CPU (0-dim: they divide as the Python floats do)
        self.a = torch.zeros(self.x.shape[1], device=self.x.device, dtype=self.x.dtype)
        self.A = torch.ones_like(self.a)
        self.b = torch.zeros((), dtype=torch.float64)
        self.B = torch.ones((), dtype=torch.float64)
        self.w_ref = torch.zeros_like(self.a)  # w̄_{t0}, v̄_{t0} (adabelief; 0 before the first sync)
        self.v_ref = torch.zeros_like(self.y_bar())

    # schedules -----------------------------------------------------------------------------------
    def eta(self, t: int) -> float:
        return self.hp.eta_k / (self.hp.eta_n + t) ** (1.0 / 3.0)

    # averages over clients (exact block semantics for per-client heads) --------------------------
    def y_bar(self) -> torch.Tensor:
        """ȳ: ``[dy]`` (shared y) or ``[M, dy]`` (block m of the average of all clients' y)."""
        if not self.local:
            return self.y.mean(-2)
        return (self.y + (self.M - 1) * self.y_oth) / self.M

    def v_bar(self) -> torch.Tensor:
        if not self.local:
            return self.v.mean(-2)
        return (self.v + (self.M - 1) * self.v_oth) / self.M

    def bcast(self, t: torch.Tensor) -> torch.Tensor:
        """What every client holds after a broadcast of a y-shaped server quantity."""
        return t.clone() if self.local else self.to_clients(t)

    def over_B(self, t: torch.Tensor) -> torch.Tensor:
        """``t / B_t``; in a run batch each run's rows over its own B_t (the float32 number a run alone divides by)."""
        if not self.batched:
            return t / self.B
        return t / self.B.to(t.device, t.dtype).view(-1, *[1] * (t.dim() - 1))

    def norm(self, t: torch.Tensor) -> torch.Tensor | float:
        """``||t||`` (all entries); in a run batch each run's, ``[R]`` float64 (as ``float()`` gives it alone)."""
        if not self.batched:
            return float(torch.linalg.vector_norm(t))
        return torch.linalg.vector_norm(t.reshape(self.runs, -1), dim=1).double().cpu()

    # adaptive matrices (line 6) -------------------------------------------------------------------
    def matrices(self, wb: torch.Tensor, vb: torch.Tensor, ref: bool = True) -> None:
        hp = self.hp
        if hp.adaptive == "none":
            return
        r = hp.rho_decay
        dw = wb - self.w_ref if (hp.adaptive == "adabelief" and ref) else wb
        dv = vb - self.v_ref if (hp.adaptive == "adabelief" and ref) else vb
        self.a = r * self.a + (1 - r) * dw * dw
        self.b = r * self.b + (1 - r) * self.norm(dv)
        self.A = self.a.sqrt() + hp.rho_floor
        self.B = self.b + hp.rho_floor
        self.w_ref, self.v_ref = wb, vb

    # draws and estimators -------------------------------------------------------------------------
    def draw_sample(self) -> tuple[dict, dict, torch.Tensor]:
        """ξ̄ = {ξ, ζ_0..ζ_{K-1}}, ζ and the per-client index k (line 17)."""
        hp = self.hp
        bx = {"f": self.draw("val", hp.batch_size), "g": self.draw("train", hp.batch_size),
              "H": [self.draw("train", hp.batch_size) for _ in range(hp.K - 1)]}
        bz = self.draw("train", hp.batch_size)
        gen = self.fed.gen
        k = torch.randint(hp.K, (self.M,), generator=gen, device=gen.device).to(self.x.device)  # one per client
        return bx, bz, k

    def hypergrad(self, x, y, bx: dict, k: torch.Tensor) -> torch.Tensor:
        return self.neumann(x, y, bx, self.hp.neumann_step, self.hp.neumann, k)

    def _init(self) -> None:
        hp = self.hp
        v = w = 0.0
        for _ in range(hp.q):  # line 2: q(K+2) samples
            bx, bz, k = self.draw_sample()
            v = v + self.grad_y(self.x, self.y, bz) / hp.q
            w = w + self.hypergrad(self.x, self.y, bx, k) / hp.q
        self.v, self.w = v, w
        if hp.adaptive != "none" and hp.init_matrices == "average":
            self.matrices(self.w.mean(-2), self.v_bar(), ref=False)
            self.ledger.comm(self.M, self.x.shape[-1] + self.y.shape[-1], self.x.shape[-1] + 1)

    # one round --------------------------------------------------------------------------------------
    def step(self) -> None:
        hp = self.hp
        if self.v is None:
            self._init()
        dx, dy = self.x.shape[-1], self.y.shape[-1]
        for _ in range(hp.q):
            self.t += 1
            t, eta = self.t, self.eta(self.t)
            v, w = self.v, self.w
            if t % hp.q == 0:  # lines 5-8
                xb, wb, yb, vb = self.x.mean(-2), w.mean(-2), self.y_bar(), self.v_bar()
                self.matrices(wb, vb)
                x_new = self.to_clients(xb - eta * hp.gamma_x * wb / self.A)
                y_new = self.bcast(yb - self.over_B(eta * hp.lambda_y * vb))
                if self.local:
                    y_oth_new = y_new.clone()
                if hp.sync_estimators:
                    w = wb.unsqueeze(-2).expand_as(w)
                    v = self.bcast(vb)
                    if self.local:
                        self.v_oth = vb.clone()
                down = dx + dy + (dx + 1 if hp.adaptive != "none" else 0)
                down += dx + dy if hp.sync_estimators else 0
                self.ledger.comm(self.M, 2 * (dx + dy), down)
            else:  # lines 11-13
                x_new = self.x - eta * hp.gamma_x * w / self.A.unsqueeze(-2)
                y_new = self.y - self.over_B(eta * hp.lambda_y * v)
                if self.local:
                    y_oth_new = self.y_oth - self.over_B(eta * hp.lambda_y * self.v_oth)
            # lines 16-19: STORM with the same draws at the new and the old point
            alpha, beta = min(1.0, hp.c1 * eta * eta), min(1.0, hp.c2 * eta * eta)
            bx, bz, k = self.draw_sample()
            X, Y = pair(x_new, self.x), pair(y_new, self.y)
            g_new, g_old = unpair(self.grad_y(X, Y, twice(bz)))
            h_new, h_old = unpair(self.hypergrad(X, Y, {"f": twice(bx["f"]), "g": twice(bx["g"]),
                                                        "H": [twice(b) for b in bx["H"]]}, torch.cat([k, k])))
            self.v = storm(g_new, v, g_old, alpha)
            self.w = storm(h_new, w, h_old, beta)
            if self.local:  # other clients' gradients w.r.t. block m vanish at both points
                self.v_oth = (1.0 - alpha) * self.v_oth
                self.y_oth = y_oth_new
            self.x, self.y = x_new, y_new

    def state(self) -> dict[str, torch.Tensor]:
        out = super().state()
        if self.v is not None:
            out.update(v=self.v, w=self.w)
        return out
