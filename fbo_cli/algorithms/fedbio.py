"""FedBiO and FedBiOAcc: federated bilevel optimization with a *global* lower level (problem (1)).

Reference: Junyi Li, Feihu Huang, Heng Huang, "Communication-Efficient Federated Bilevel
Optimization with Local and Global Lower Level Problems", arXiv 2302.06701 (2023); NeurIPS 2023.

Both algorithms solve three federated problems at once with local steps and periodic averaging:
the upper problem in x, the lower problem in y, and the quadratic (4)
``min_u (1/M) Σ_m ½ uᵀ∇²_y g^(m) u - ⟨∇_y f^(m), u⟩`` whose solution u* = [∇²_y g]⁻¹ ∇_y f (global
averages) makes ``(1/M) Σ_m ∇_x f^(m) - ∇_xy g^(m) u*`` the hypergradient (eq. 2). No Neumann
series and no extra communication for the hypergradient: u is one more averaged iterate.

Per client m (superscripts dropped), with mutually independent minibatches B_y, B_g1, B_g2 of the
client's training split and B_f1, B_f2 of its validation split (B_y of size b_y = ``batch_size``,
B_x = {B_g1, B_g2, B_f1, B_f2} of size b_x = ``upper_batch_size``, equal by default):

* ``ω(x, y; B_y)      = ∇_y g(x, y; B_y)``                                   (lower gradient)
* ``µ(x, y, u; B)     = ∇_x f(x, y; B_f1) - ∇_xy g(x, y; B_g1) u``            (hypergradient estimate)
* ``p(x, y, u; B)     = ∇²_y g(x, y; B_g2) u - ∇_y f(x, y; B_f2)``            (gradient of (4) in u)

FedBiO (Alg. 1), iteration t = 1..T:

1. sample B_y, B_x = {B_g1, B_g2, B_f1, B_f2} (line 4);
2. ω_t = ω(x_t, y_t; B_y) (line 5); ν_t = µ(x_t, y_t, u_t; B_x) (line 6);
3. ŷ = y_t - γ_t ω_t, x̂ = x_t - η_t ν_t (line 7); û = u_t - τ_t p(x_t, y_t, u_t; B_x) (line 13, written
   there as τ_t ∇_y f + (I - τ_t ∇²_y g) u_t): all three at the same old point (x_t, y_t, u_t);
4. if t mod I == 0: x, y, u <- client means of x̂, ŷ, û (lines 8-9, 14-15; one round); else keep.

FedBiOAcc (Alg. 2): first ω_1, ν_1, q_1 = ω, µ, p at (x_1, y_1, u_1) on a first batch of size b_1
(line 2; local, no communication); then for t = 1..T:

1. ŷ = y_t - γ α_t ω_t, x̂ = x_t - η α_t ν_t, û = u_t - τ α_t q_t (line 4);
2. if t mod I == 0: x_{t+1}, y_{t+1}, u_{t+1} <- client means (line 6), else the local values (line 8);
3. sample fresh B_y, B_x (docs/fidelity.md#fedbio) and update, with the *same* batches at the
   new and the old point (lines 10-12; µ_s and p_s entirely at (x_s, y_s, u_s)):
   ω̂ = ω(z_{t+1}) + (1 - c_ω α_t²)(ω_t - ω(z_t)),  ν̂ = µ(z_{t+1}) + (1 - c_ν α_t²)(ν_t - µ(z_t)),
   q̂ = p(z_{t+1}) + (1 - c_u α_t²)(q_t - p(z_t));
4. if t mod I == 0: ω, ν, q <- client means of ω̂, ν̂, q̂ (line 14), else keep.

The old point z_t at a sync step is the client's own pre-averaging iterate (x_t^(m), y_t^(m), u_t^(m)).

One runner step (outer iteration) = one communication round = I local iterations and the averaging
that ends them; state between rounds is global (all clients hold the averages), so ``participation``
< 1 (our extension; the paper has full participation) starts each sampled client from it.

Rounds per outer iteration: 1 (the paper counts T/I rounds). Floats per client each way: p + 2d
(FedBiO: x, y, u), 2p + 4d (FedBiOAcc: x, y, u, ν, ω, q), p = dim x, d = dim y. FedBiOAcc's round
is, literally, two exchanges (the momenta at the new point need the averaged iterate first); the
paper counts it as one round and so do we. Oracles per iteration and client: FedBiO 3 gradients
(B_y, B_f1, B_f2), 1 JVP (B_g1), 1 HVP (B_g2); FedBiOAcc twice that (new and old point).

Hyperparameters (the paper has no experiments):
b = 64, I = 5, γ (lower) = 0.03, η (upper) = 100 (per-example weight logits; use ~0.05 for a
representation; `fbo tune` chooses it per experiment), τ (u) = 0.03, u_1 = 0; schedule
α_t = δ = 1 constant (Thms 1, 2 use constants / δ/(u0+t)^{1/3}: ``schedule: cbrt``), FedBiOAcc
c_ω = c_ν = c_u = 0.1 (momentum 1 - cα² = 0.9), first batch b_1 = 4b. γ = τ = 0.03, not the
recommended 0.1: both the lower step and the u-step are gradient steps on quadratics whose curvature is
the lower Hessian, so they need γL, τL < 2 (measurements and the experiments' tuned values:
docs/fidelity.md#fedbio).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..errors import UsageError
from ..sim.blockstack import BlockStack
from ..sim.federation import Batch
from .base import BilevelAlgorithm, bounded
from .batching import Batching
from .pool_sampler import RowSampler
from .storm import check_schedule, step_factor, storm


@dataclass
class Draw:
    """One client-stacked sample ξ = (B_y, B_g1, B_g2, B_f1, B_f2) (with its dropout masks, if any)."""

    By: Batch
    Bg1: Batch
    Bg2: Batch
    Bf1: Batch
    Bf2: Batch


class _GlobalLowerBase(BilevelAlgorithm):
    """Shared machinery of FedBiO and FedBiOAcc: batches, the three oracles ω, µ, p, checks."""
    aliases: ClassVar[dict[str, str]] = {"neumann_lr": "aux_lr"}  # local_steps, lower_lr, upper_lr: its own keys
    # hyperrep (a representation, not per-example weights): its hyperrep specs' setting and the steps `fbo tune`
    # chose there (fedbio_local_hyperrep_mnist, fedbio_global_head_control: lower_lr = aux_lr = 0.05, upper_lr
    # 0.16 on MNIST, 0.32 on Fashion-MNIST; 0.16 is stable on both)
    task_defaults: ClassVar[dict[str, dict]] = {"hyperrep": {"clients": 10, "partition": "dirichlet", "alpha": 0.5,
                                                             "lower_lr": 0.05, "aux_lr": 0.05, "upper_lr": 0.16}}

    tasks: ClassVar[tuple[str, ...]] = ("hyperclean", "hyperrep")
    run_defaults: ClassVar[dict] = {"participation": 1.0}  # the paper: every client in every round
    # fbo_cli/grids/run_batches.py; α_t is one number per iteration; seeds: each seed's minibatches and x's owners
    # its own (fbo_cli/algorithms/seed_runs.py)
    batch: ClassVar[Batching] = Batching(state=("x", "y", "u"), fixed=("delta", "u0"), seeds=True)

    def __init__(self, task, hp, fed):
        check_schedule(hp.schedule, hp.delta, hp.u0)
        if getattr(task, "local_lower", False):
            raise UsageError(f"'{self.name}' solves problem (1) with a global lower level; "
                             f"for per-client heads (lower: local) use '{self.name}-local'",
                             kind="unsupported", field="lower", value="local")
        super().__init__(task, hp, fed)
        self.u = torch.zeros_like(self.y)  # u_1 = 0
        self.t = 1  # the paper's iteration counter t (for α_t)

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "y": self.y, "u": self.u}

    def rounds_per_iteration(self) -> int:
        return 1

    def alpha(self, t: int) -> float:
        return step_factor(self.hp.schedule, t, self.hp.delta, self.hp.u0)

    def draw(self, train: RowSampler, val: RowSampler, b: int, bx: int) -> Draw:
        """Mutually independent minibatches: B_y of size b_y = ``b``, and B_x = {B_g1, B_g2, B_f1, B_f2}
        of size b_x = ``bx`` (Alg. 1 line 4). ``shared_batches`` (docs/fidelity.md#fedbio): one
        training batch (size b) for B_y, B_g1, B_g2 and one validation batch (size b_x) for B_f1, B_f2."""
        gen, nz = self.fed.gen, self.noise
        if self.hp.shared_batches:
            bt, bv = nz(train.sample(gen, b)), nz(val.sample(gen, bx))
            return Draw(bt, bt, bt, bv, bv)
        return Draw(nz(train.sample(gen, b)), nz(train.sample(gen, bx)), nz(train.sample(gen, bx)),
                    nz(val.sample(gen, bx)), nz(val.sample(gen, bx)))

    # the three stochastic oracles (each [M, ·]) ----------------------------------------------------
    def omega(self, X, Y, d: Draw) -> torch.Tensor:
        return self.grad(self.task.g, 1, X, Y, d.By)

    def mu(self, X, Y, U, d: Draw) -> torch.Tensor:
        return self.grad(self.task.f, 0, X, Y, d.Bf1) - self.cross(self.task.g, X, Y, d.Bg1, U)

    def pu(self, X, Y, U, d: Draw) -> torch.Tensor:
        return self.hvp(self.task.g, X, Y, d.Bg2, U) - self.grad(self.task.f, 1, X, Y, d.Bf2)

    def _round_setup(self):
        S = self.fed.sample()
        data = self.fed.data
        train, val = RowSampler.of(data, "train", S), RowSampler.of(data, "val", S)
        M = len(S)
        b = self.hp.batch_size
        bx = self.hp.upper_batch_size or b
        stack = lambda v: self.spread(v, M)
        return M, train, val, b, bx, stack, self._stack_x(S)

    def _stack_x(self, S: torch.Tensor):
        """The clients' copies of an x-shaped global (x, FedBiOAcc's ν): a :class:`BlockStack` where each
        coordinate of x belongs to one client (hyper-cleaning's fast oracles), else dense as ``spread``."""
        owner = getattr(self.task, "x_owner", None)
        if owner is None:
            return lambda v: self.spread(v, len(S))
        pos = torch.zeros(self.fed.data.num_clients, dtype=torch.long, device=owner.device)
        pos[S] = torch.arange(len(S), device=owner.device)
        row = pos[owner]
        return lambda v: BlockStack.spread(v, len(S), row)

    def cmean(self, X):
        return super().cmean(X.dense() if isinstance(X, BlockStack) else X)

    def first_row(self, X):
        if isinstance(X, BlockStack):
            return X.first_rows() if self.batched else X.first_rows()[0]
        return super().first_row(X)


class FedBiO(_GlobalLowerBase):
    paper: ClassVar[str] = "Li, Huang & Huang, arXiv 2302.06701 / NeurIPS 2023 (FedBiO), Alg. 1"
    rounds: ClassVar[str] = "1 per I local iterations (T/I in all)"

    @dataclass
    class HP:
        local_steps: int = bounded(5, ge=1, le=100_000, doc="I, local iterations between averaging rounds")
        batch_size: int = bounded(64, ge=1, doc="b = b_y of B_y (and b_x unless upper_batch_size is set)")
        upper_batch_size: int | None = bounded(None, ge=1,
                                               doc="b_x of B_x = {B_g1, B_g2, B_f1, B_f2} (None: = batch_size)")
        lower_lr: float = bounded(0.03, doc="γ (stable for the lower Hessian's L ≲ 60; docs/fidelity.md#fedbio)")
        upper_lr: float = bounded(100.0, doc="η, upper-level (x) step")
        aux_lr: float = bounded(0.03, doc="τ, step of the quadratic (4) in u (needs τL < 2 like γ)")
        schedule: str = bounded("const", doc="const: γ_t = γ δ, ... | cbrt: times δ/(u0+t)^{1/3}")
        delta: float = bounded(1.0, doc="δ of the step factor α_t: δ (const) or δ/(u0+t)^{1/3} (cbrt)")
        u0: float = bounded(0.0, doc="u0 of the cbrt step factor δ/(u0+t)^{1/3}")
        shared_batches: bool = bounded(False, doc="one train + one val batch per iteration (docs/fidelity.md#fedbio)")

    def step(self) -> None:
        hp = self.hp
        M, train, val, b, bx, stack, stack_x = self._round_setup()
        X, Y, U = stack_x(self.x), stack(self.y), stack(self.u)
        for _ in range(hp.local_steps):
            a = self.alpha(self.t)
            d = self.draw(train, val, b, bx)  # line 4
            w = self.omega(X, Y, d)  # line 5
            nu = self.mu(X, Y, U, d)  # line 6
            q = self.pu(X, Y, U, d)  # line 13 (at the same old point)
            X, Y, U = X - hp.upper_lr * a * nu, Y - hp.lower_lr * a * w, U - hp.aux_lr * a * q  # lines 7, 13
            self.t += 1
        self.x, self.y, self.u = self.cmean(X), self.cmean(Y), self.cmean(U)  # lines 9, 15
        self.ledger.comm(M, self.task.dx + 2 * self.task.dy)


class FedBiOAcc(_GlobalLowerBase):
    paper: ClassVar[str] = "Li, Huang & Huang, arXiv 2302.06701 / NeurIPS 2023 (FedBiO), Alg. 2"
    rounds: ClassVar[str] = "1 per I local iterations (T/I in all)"
    batch: ClassVar[Batching] = _GlobalLowerBase.batch.but(state=("x", "y", "u", "om", "nu", "q"))

    @dataclass
    class HP:
        local_steps: int = bounded(5, ge=1, le=100_000, doc="I, local iterations between averaging rounds")
        batch_size: int = bounded(64, ge=1, doc="b = b_y of B_y (and b_x unless upper_batch_size is set)")
        upper_batch_size: int | None = bounded(None, ge=1, doc="b_x of B_x (None: = batch_size)")
        first_batch: int | None = bounded(None, ge=1, doc="b_1 of the initial estimators (None: 4 b)")
        lower_lr: float = bounded(0.03, doc="γ (stable for the lower Hessian's L ≲ 60; docs/fidelity.md#fedbio)")
        upper_lr: float = bounded(100.0, doc="η, upper-level (x) step")
        aux_lr: float = bounded(0.03, doc="τ, step of the quadratic (4) in u")
        c_omega: float = bounded(0.1, doc="c_ω: momentum weight of ω is 1 - c_ω α_t²")
        c_nu: float = bounded(0.1, doc="c_ν: momentum weight of ν is 1 - c_ν α_t²")
        c_u: float = bounded(0.1, doc="c_u: momentum weight of u is 1 - c_u α_t²")
        schedule: str = bounded("const", doc="const: α_t = δ | cbrt: α_t = δ/(u0+t)^{1/3} (Thm 2)")
        delta: float = bounded(1.0, doc="δ of the step factor α_t: δ (const) or δ/(u0+t)^{1/3} (cbrt)")
        u0: float = bounded(0.0, doc="u0 of the cbrt step factor δ/(u0+t)^{1/3}")
        shared_batches: bool = bounded(False, doc="one train + one val batch per iteration (docs/fidelity.md#fedbio)")

    @classmethod
    def check(cls, hp) -> None:
        """The momentum weights ``1 - c α_t²`` must lie in [0, 1]: ``c α_1² <= 1`` (α_1 is the largest α_t of
        both schedules), checked before any data loads (and by ``fbo tune`` before it extends a grid)."""
        check_schedule(hp.schedule, hp.delta, hp.u0)
        a1 = step_factor(hp.schedule, 1, hp.delta, hp.u0)
        for key in ("c_omega", "c_nu", "c_u"):
            c = getattr(hp, key)
            if c * a1 * a1 > 1:
                raise UsageError(f"'{key}' * alpha_1^2 = {c * a1 * a1:.3g} > 1: the momentum weight "
                                 f"1 - c alpha_t^2 must lie in [0, 1] (lower {key} or delta)",
                                 kind="bad_value", field=key, value=c)

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)
        self.om = self.nu = self.q = None  # global momenta after the first round

    def state(self) -> dict[str, torch.Tensor]:
        s = super().state()
        if self.om is not None:
            s.update(omega=self.om, nu=self.nu, q=self.q)
        return s

    def step(self) -> None:
        hp = self.hp
        M, train, val, b, bx, stack, stack_x = self._round_setup()
        X, Y, U = stack_x(self.x), stack(self.y), stack(self.u)
        if self.om is None:  # line 2: local initial estimators on a first batch of size b_1
            b1 = hp.first_batch or 4 * b
            d = self.draw(train, val, b1, hp.first_batch or 4 * bx)
            W, N, Q = self.omega(X, Y, d), self.mu(X, Y, U, d), self.pu(X, Y, U, d)
        else:
            W, N, Q = stack(self.om), stack_x(self.nu), stack(self.q)
        for j in range(hp.local_steps):
            a = self.alpha(self.t)
            Xn, Yn, Un = X - hp.upper_lr * a * N, Y - hp.lower_lr * a * W, U - hp.aux_lr * a * Q  # line 4
            sync = j == hp.local_steps - 1
            if sync:  # line 6
                Xn, Yn, Un = stack_x(self.cmean(Xn)), stack(self.cmean(Yn)), stack(self.cmean(Un))
            d = self.draw(train, val, b, bx)  # fresh B_y, B_x, reused at both points
            W = storm(self.omega(Xn, Yn, d), W, self.omega(X, Y, d), hp.c_omega * a * a)  # line 10
            N = storm(self.mu(Xn, Yn, Un, d), N, self.mu(X, Y, U, d), hp.c_nu * a * a)  # line 11
            Q = storm(self.pu(Xn, Yn, Un, d), Q, self.pu(X, Y, U, d), hp.c_u * a * a)  # line 12
            X, Y, U = Xn, Yn, Un
            self.t += 1
        self.x, self.y, self.u = self.first_row(X), self.first_row(Y), self.first_row(U)  # identical after line 6
        self.om, self.nu, self.q = self.cmean(W), self.cmean(N), self.cmean(Q)  # line 14
        self.ledger.comm(M, 2 * self.task.dx + 4 * self.task.dy)
