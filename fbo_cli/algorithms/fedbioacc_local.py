"""FedBiOAcc-Local: FedBiO-Local with STORM momentum (local lower level per client).

Reference: Junyi Li, Feihu Huang, Heng Huang, "Communication-Efficient Federated Bilevel Optimization
with Local and Global Lower Level Problems", arXiv 2302.06701 (NeurIPS 2023), Algorithm 4 (titled
"FedBiO - Local Lower Level Problem" in the arXiv text, FedBiOAcc-Local in the NeurIPS abstract).

Problem (eq. 5) and state as in :mod:`fedbio_local`, plus each client's momentum estimators
ω^(m) ``[M, d]`` (lower gradient, never averaged) and ν^(m) ``[M, p]`` (hypergradient, averaged with x).

Initialization (line 2), every client m, at (x_1, y_1) with a first minibatch of size b_1
(``first_batch``): ω_1 = ∇_y g^(m)(x_1, y_1; B_y), ν_1 = Φ^(m)(x_1, y_1; B_x) (eq. 6).

One call of :meth:`step` = one communication round = I iterations t; at every t, every client:

1. ŷ_{t+1} = y_t - γ α_t ω_t, x̂_{t+1} = x_t - η α_t ν_t (line 4; the OCR's û/q term is a
   copy-paste artifact of Alg. 2 and is dropped);
2. if t mod I = 0: x_{t+1} = mean_j x̂_{t+1}^(j); else x_{t+1} = x̂_{t+1}; y_{t+1} = ŷ_{t+1} always
   (lines 5-9);
3. fresh B_y, B_x = {ξ_f, ξ_g, ξ_1..ξ_Q} (line 10), used at *both* points (x_{t+1}, y_{t+1}) and the
   client's own pre-average (x_t, y_t) (one vectorized call over the stacked pair):
   ω̂_{t+1} = ∇_y g(x_{t+1}, y_{t+1}; B_y) + (1 - c_ω α_t²)(ω_t - ∇_y g(x_t, y_t; B_y)) (line 11),
   ν̂_{t+1} = Φ(x_{t+1}, y_{t+1}; B_x) + (1 - c_ν α_t²)(ν_t - Φ(x_t, y_t; B_x)) (line 12);
4. if t mod I = 0: ν_{t+1} = mean_j ν̂_{t+1}^(j), ω_{t+1} = ω̂_{t+1} (local) (lines 13-17).

Rounds per call: 1 (the paper's R = T/I), carrying x and ν: 2p floats up and down per client. (x̄
must reach the clients before they can form ν̂ at it, so the round is two exchanges back to back;
the paper counts it as one round and so do we.) The initialization needs no communication.

Samples: data points drawn, b_y + (Q+2) b per client per iteration (each draw is used at both
points and counted once), plus the first batch. Oracle calls: every gradient/HVP/JVP twice.

Hyperparameters (docs/fidelity.md#local-lower): I = 5,
b = 64, b_y = b (``by_scale_M: true`` gives Thm 4's b_y = bM), b_1 = 4b, and as FedBiO-Local
γ = 0.05 (recommended 0.1), η = 0.003 (recommended 0.05), Neumann τ = 0.05 and Q = 10 (recommended
0.1 and 5; why: docs/fidelity.md#local-lower),
α_t = δ = 1 constant (``schedule: cbrt`` gives Thm 4's α_t = δ/(u0 + t)^{1/3}),
c_ω = c_ν = 0.1 (momentum 1 - c α_t² = 0.9). A weight c α_t² above 1 is clipped to 1 (the plain
estimator; the theory keeps it below 1).

Run batches (fbo_cli/grids/run_batches.py, docs/fidelity.md#batches): the client state ``[R, M, d]``, every oracle call
folded over the ``R*M`` rows with the minibatches drawn once; each run's numbers are identical bit for bit to
the run alone on the CPU (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ._client_state import ClientStateAlgorithm
from .base import bounded
from .batching import Batching
from .storm import check_schedule, pair, step_factor, storm, twice, unpair


class FedBiOAccLocal(ClientStateAlgorithm):
    aliases: ClassVar[dict[str, str]] = {"neumann_lr": "neumann_step", "neumann_steps": "Q"}
    paper: ClassVar[str] = "Li, Huang & Huang, arXiv 2302.06701 / NeurIPS 2023, Alg. 4 (FedBiO)"
    rounds: ClassVar[str] = "1 per I local iterations"
    # fbo_cli/grids/run_batches.py: the client copies [M, d] become [R, M, d]; α_t and the momentum weights one number
    batch: ClassVar[Batching] = Batching(state=("x", "y", "omega", "nu"), fixed=("delta", "u0", "c_omega", "c_nu"))

    @dataclass
    class HP:
        local_steps: int = bounded(5, ge=1, doc="I, local iterations per communication round")
        batch_size: int = bounded(64, ge=1, doc="b = b_x, minibatch of the upper-level estimators")
        batch_size_y: int | None = bounded(None, ge=1,
                                           doc="b_y (None: = batch_size, or batch_size * M with by_scale_M)")
        by_scale_M: bool = bounded(False, doc="Thm 4: b_y = b M")
        first_batch: int | None = bounded(None, ge=1, doc="b_1 of the initialization (None: 4 b)")
        lower_lr: float = bounded(0.05, doc="γ, lower (y) step (recommended 0.1; needs γ < 2/L_g; "
                                            "docs/fidelity.md#local-lower)")
        upper_lr: float = bounded(0.003, doc="η, upper (x) step (recommended 0.05; docs/fidelity.md#local-lower)")
        neumann_step: float = bounded(0.05, doc="τ of eq. (6) (must be < 2/L_g; docs/fidelity.md#local-lower)")
        Q: int = bounded(10, ge=0, le=1000, doc="Neumann terms of eq. (6) (docs/fidelity.md#local-lower)")
        schedule: str = bounded("const", doc="α_t: const (= delta) | cbrt (delta / (u0 + t)^(1/3))")
        delta: float = bounded(1.0, doc="δ of the step factor α_t: δ (const) or δ/(u0+t)^(1/3) (cbrt)")
        u0: float = bounded(0.0, doc="u0 of the cbrt step factor δ/(u0+t)^(1/3)")
        c_omega: float = bounded(0.1, ge=0, doc="c_ω: momentum weight c_ω α_t² of ω")
        c_nu: float = bounded(0.1, ge=0, doc="c_ν: momentum weight c_ν α_t² of ν")

    def __init__(self, task, hp, fed):
        check_schedule(hp.schedule, hp.delta, hp.u0)
        super().__init__(task, hp, fed)
        self.omega: torch.Tensor | None = None
        self.nu: torch.Tensor | None = None

    def by(self, b: int) -> int:
        hp = self.hp
        if hp.batch_size_y is not None:
            return hp.batch_size_y
        return b * self.M if hp.by_scale_M else b

    def draw_x(self, b: int) -> dict:
        return {"f": self.draw("val", b), "g": self.draw("train", b),
                "H": [self.draw("train", b) for _ in range(self.hp.Q)]}

    def _init(self) -> None:
        hp = self.hp
        b1 = hp.first_batch or 4 * hp.batch_size
        By, Bx = self.draw("train", self.by(b1)), self.draw_x(b1)
        self.omega = self.grad_y(self.x, self.y, By)
        self.nu = self.neumann(self.x, self.y, Bx, hp.neumann_step)

    def step(self) -> None:
        hp = self.hp
        if self.omega is None:
            self._init()
        for s in range(1, hp.local_steps + 1):
            self.t += 1
            a = step_factor(hp.schedule, self.t, hp.delta, hp.u0)
            y_new = self.y - hp.lower_lr * a * self.omega  # line 4
            x_new = self.x - hp.upper_lr * a * self.nu
            if s == hp.local_steps:  # line 6: t mod I = 0
                x_new = self.to_clients(x_new.mean(-2))
            By, Bx = self.draw("train", self.by(hp.batch_size)), self.draw_x(hp.batch_size)  # line 10
            X, Y = pair(x_new, self.x), pair(y_new, self.y)
            g_new, g_old = unpair(self.grad_y(X, Y, twice(By)))
            h_new, h_old = unpair(self.neumann(X, Y, {"f": twice(Bx["f"]), "g": twice(Bx["g"]),
                                                      "H": [twice(b) for b in Bx["H"]]}, hp.neumann_step))
            self.omega = storm(g_new, self.omega, g_old, min(1.0, hp.c_omega * a * a))  # line 11
            self.nu = storm(h_new, self.nu, h_old, min(1.0, hp.c_nu * a * a))  # line 12
            if s == hp.local_steps:  # line 14
                self.nu = self.to_clients(self.nu.mean(-2))
            self.x, self.y = x_new, y_new
        self.ledger.comm(self.M, 2 * self.x.shape[-1])

    def state(self) -> dict[str, torch.Tensor]:
        out = super().state()
        if self.nu is not None:
            out.update(omega=self.omega, nu=self.nu)
        return out
