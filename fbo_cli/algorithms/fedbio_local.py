"""FedBiO-Local: federated bilevel optimization with a *local* lower level problem per client.

Reference: Junyi Li, Feihu Huang, Heng Huang, "Communication-Efficient Federated Bilevel Optimization
with Local and Global Lower Level Problems", arXiv 2302.06701 (NeurIPS 2023), Algorithm 3.

Problem (eq. 5): ``min_x (1/M) Σ_m f^(m)(x, y_x^(m))``, ``y_x^(m) = argmin_y g^(m)(x, y)``: the upper
variable x is federated, every client keeps its own lower variable y^(m) (never averaged). Every
client takes part in every round (no client sampling). State: ``x^(m)`` stacked ``[M, p]``,
``y^(m)`` stacked ``[M, d]``.

One call of :meth:`step` is one communication round = I local iterations t; at every t, every
client m in parallel (Alg. 3):

1. draws mutually independent minibatches B_y (lower data, size ``batch_size_y``) and
   B_x = {ξ_f (upper data), ξ_g, ξ_1..ξ_Q (lower data)} (size ``batch_size``) (line 4);
2. ω_t = ∇_y g^(m)(x_t, y_t; B_y) and ν_t = Φ^(m)(x_t, y_t; B_x), the Neumann estimate of eq. (6):
   ``Φ = ∇_x f(ξ_f) - τ ∇_xy g(ξ_g) Σ_{q=0}^{Q} Π_{j=1}^{q} (I - τ ∇²_yy g(ξ_j)) ∇_y f(ξ_f)`` (line 5;
   Q HVPs, one JVP, the same ξ_f for ∇_x f and ∇_y f; :func:`neumann.neumann_hypergrad`);
3. ŷ_{t+1} = y_t - γ ω_t, x̂_{t+1} = x_t - η ν_t (line 6);
4. if t mod I = 0 (I = ``local_steps``): x_{t+1} = mean_j x̂_{t+1}^(j) (one round, p floats up and
   down per client), y_{t+1} = ŷ_{t+1} (local; lines 7-10).

Rounds per call: 1 (the paper's R = T/I). The evaluation after a call sees the synchronized x̄ and
every client's own head.

Samples (ledger ``samples``): the data points drawn, b_y + (Q+2) b per client per iteration. The
oracle counters count calls per client: 2 gradients (∇_y g; ∇f w.r.t. (x, y) at once), Q HVPs and
1 JVP per iteration.

Hyperparameters (the paper gives theory constants only, Thm 3; defaults as in docs/fidelity.md#local-lower):
I = 5, b = 64 (b_y = b), γ = 0.05 (constant lower step, Thm 3: γ = 1/(2L); recommended 0.1, which
needs L_g < 20), η = 0.003 (recommended 0.05), Neumann τ = 0.05 and Q = 10 (recommended 0.1 and 5).
The series converges for τ < 2/L_g, and τ(Q + 1) sets how much of the implicit term it keeps
(``fbo diagnose truncation`` measures it). Why each default differs from the recommended value, and
the experiments' tuned values: docs/fidelity.md#local-lower.

Run batches (fbo_cli/grids/run_batches.py, docs/fidelity.md#batches): the client state ``[R, M, d]``, every oracle call
folded over the ``R*M`` rows with the minibatches drawn once; each run's numbers are identical bit for bit to
the run alone on the CPU (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ._client_state import ClientStateAlgorithm
from .base import bounded
from .batching import Batching


class FedBiOLocal(ClientStateAlgorithm):
    aliases: ClassVar[dict[str, str]] = {"neumann_lr": "neumann_step", "neumann_steps": "Q"}
    paper: ClassVar[str] = "Li, Huang & Huang, arXiv 2302.06701 / NeurIPS 2023, Alg. 3 (FedBiO)"
    rounds: ClassVar[str] = "1 per I local iterations"
    # fbo_cli/grids/run_batches.py: the client copies [M, d] become [R, M, d]
    batch: ClassVar[Batching] = Batching(state=("x", "y"))

    @dataclass
    class HP:
        local_steps: int = bounded(5, ge=1, doc="I, local iterations per communication round")
        batch_size: int = bounded(64, ge=1, doc="b = b_x: every upper-side minibatch (ξ_f, ξ_g, ξ_j)")
        batch_size_y: int | None = bounded(None, ge=1, doc="b_y of B_y (None: = batch_size)")
        lower_lr: float = bounded(0.05, doc="γ, lower (y) step (recommended 0.1; needs γ < 2/L_g; "
                                            "docs/fidelity.md#local-lower)")
        upper_lr: float = bounded(0.003, doc="η, upper (x) step (recommended 0.05; docs/fidelity.md#local-lower)")
        neumann_step: float = bounded(0.05, doc="τ of eq. (6) (must be < 2/L_g; docs/fidelity.md#local-lower)")
        Q: int = bounded(10, ge=0, le=1000,
                         doc="Neumann terms (Hessian samples) of eq. (6) (docs/fidelity.md#local-lower)")

    def draw_x(self, b: int) -> dict:
        """B_x = {ξ_f, ξ_g, ξ_1..ξ_Q} (eq. 6), mutually independent."""
        return {"f": self.draw("val", b), "g": self.draw("train", b),
                "H": [self.draw("train", b) for _ in range(self.hp.Q)]}

    def step(self) -> None:
        hp = self.hp
        by = hp.batch_size_y or hp.batch_size
        for _ in range(hp.local_steps):
            self.t += 1
            Bx, By = self.draw_x(hp.batch_size), self.draw("train", by)  # line 4
            omega = self.grad_y(self.x, self.y, By)  # line 5
            nu = self.neumann(self.x, self.y, Bx, hp.neumann_step)
            self.y = self.y - hp.lower_lr * omega  # line 6
            self.x = self.x - hp.upper_lr * nu
        self.x = self.to_clients(self.x.mean(-2))  # line 8: t mod I = 0
        self.ledger.comm(self.M, self.x.shape[-1])
