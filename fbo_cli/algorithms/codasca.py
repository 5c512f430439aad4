"""CODA+ and CODASCA: federated deep AUC maximization as a min-max problem.

Reference: Zhuoning Yuan, Zhishuai Guo, Yi Xu, Yiming Ying, Tianbao Yang, "Federated Deep AUC
Maximization for Heterogeneous Data with a Constant Communication Complexity", ICML 2021
(PMLR 139:12219-12229), arXiv 2102.04635.

Both are stagewise (Alg. 1 / Alg. 3): stage s solves the proximal subproblem (eq. 5)
``min_v max_alpha f(v, alpha) + gamma/2 ||v - v_0^s||^2`` (v = (w, a, b); no proximal term on alpha)
with a constant step, which is divided by 3 at the next stage (§6). One call of ``step()`` is one
**communication round** of ``I`` local iterations on all K clients (the paper's setting: every
machine participates; the run's ``participation`` is not used).

CODA+ (Alg. 2, DSG+), per local iteration t on every client k (vectorized over k), one minibatch z:

1. ``g_v = ∇_v F_k(v^k, alpha^k; z) + gamma (v^k - v_0)``, ``g_alpha = ∇_alpha F_k(v^k, alpha^k; z)``
   (both at the same point and minibatch: simultaneous GDA; Alg. 2 lines 4-5).
2. ``v^k <- v^k - eta g_v``, ``alpha^k <- alpha^k + eta g_alpha`` (Alg. 2 lines 4-5).
3. After I local iterations: ``v^k, alpha^k <- mean_k`` (Alg. 2 line 7, "communicate").

CODASCA (Alg. 4, DSGSCA+), round r from the broadcast point (v_{r-1}, alpha_{r-1}):

1. Local iterations t = 0..I-1 (Alg. 4 lines 5-6), with the SCAFFOLD corrections for both players:
   ``v^k <- v^k - eta_l (∇_v F_k^s(v^k, alpha^k; z) - c_v^k + c_v)``,
   ``alpha^k <- alpha^k + eta_l (∇_alpha F_k(v^k, alpha^k; z) - c_alpha^k + c_alpha)``.
2. Control variates (eq. 6 = eq. 7): ``c^k = (1/I) Σ_t`` (the gradients of step 1 before the
   correction) [``control: eq7``, the default], or
   ``c_v^k <- c_v^k - c_v + (v_{r-1} - v^k_{r,I}) / (I eta_l)``,
   ``c_alpha^k <- c_alpha^k - c_alpha + (alpha^k_{r,I} - alpha_{r-1}) / (I eta_l)`` [``control: eq6``, lines 8-9].
3. ``c = mean_k c^k``; ``v̄ = mean_k v^k_{r,I}``, ``ᾱ = mean_k alpha^k_{r,I}`` (Alg. 4 lines 10-11).
4. Server extrapolation: ``v_r = v_{r-1} + eta_g (v̄ - v_{r-1})``, same for alpha (lines 12-13);
   broadcast ``(v_r, alpha_r, c_v, c_alpha)`` (line 14).
   Control variates start at 0 in every stage (Alg. 4's initialization, once per DSGSCA+ call).

Stages (docs/fidelity.md#codasca): the step of a round is ``eta / decay^floor(t_r / T0)``, t_r the
number of local iterations done before the round, so a stage ends at the first round boundary at or
after a multiple of T0. At that boundary the proximal reference v_0 becomes the stage output:
``stage_output: average`` (the mean of all local iterates of the stage over t and k; CODA+'s
output in Alg. 2), ``random_round`` (the server iterate of a uniformly drawn round of the stage;
CODASCA's output in Alg. 4), ``last``, or ``paper`` (average for CODA+, random_round for CODASCA).
``stage_restart: last`` continues from the current iterate (the official code); ``output``
restarts from the stage output (Alg. 1 / Alg. 3). Defaults: average / last (docs/fidelity.md#codasca).

Rounds per outer iteration (= per communication round): 1. Payload per client and direction:
CODA+ ``dv + 1`` floats (v and alpha), CODASCA ``2 (dv + 1)`` (plus the control variates).

Presets (docs/fidelity.md#codasca): ``paper`` = eq. 2, alpha free, autograd dual
gradient, no clipping, no weight decay; ``code`` = AUC-margin loss, alpha in [0, 999], closed-form
dual gradient ``2(m + b - a) - 2 alpha``, elementwise clipping of the model gradient to
[-grad_clip, grad_clip] (before the correction and the proximal term), decoupled weight decay
``- eta wd w``. Control variates average the gradients actually applied (clipped).

Hyperparameters (§6; the experiments' grids in brackets): eta = 0.1 [0.1, 0.01,
0.001] (CODASCA's eta_l), eta_g = 1 [1.1, 1, 0.99, 0.999], gamma = 1/500 [1/500, 1/700, 1/1000]
(or ``inv_gamma``), T0 = 2000 [2000, 3000, 4000], decay 3, I = 32 [1, 32, 64, 128, 512, 1024],
local batch 32.

Run batches (docs/fidelity.md#batches): runs that differ in float hyperparameters (eta, gamma or inv_gamma,
weight_decay, eta_g; not decay or grad_clip) step together, each run's ``metrics.csv`` identical bit for bit
to the run alone on the CPU with the mlp's closed-form gradients (``fast``, the default). The epoch sampler's
permutations and the random-round draws do not depend on the iterate, so the runs of a seed share them; the
clients' state ``[K, ...]`` is ``[R*K, ...]`` within a round (one gradient call over the R*K rows, each client's
minibatch repeated for the runs) and ``[R, K, ...]`` between rounds
(:class:`fbo_cli.algorithms.client_runs.ClientRuns`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ..errors import UsageError
from .base import bounded
from .batching import Batching
from .client_runs import ClientRuns

OUTPUTS = ("average", "random_round", "last", "paper")
AUC_SEEDS = ("the AUC objective's gradients read the seed's positive ratio p (its imbalance subsampling is drawn per "
             "seed) and its random-round output draws per run")
RESTARTS = ("last", "output")


class EpochSampler:
    """Per-client minibatches of ``B`` positions: each client walks through a shuffled copy of its
    own data and reshuffles when fewer than ``B`` examples are left (a DataLoader with shuffle and
    ``drop_last=True`` per client, repeated). All clients at once: ``[K, B]``. The cursors are kept on
    the host (numpy: a handful of tiny operations per step that would each cost a torch dispatch);
    the permutations, drawn from the run's generator, stay on the device. ``active`` and ``rows`` count
    the clients with a row and the rows of the last draw (the ledger's oracle count)."""

    def __init__(self, mask: torch.Tensor, batch_size: int, gen: torch.Generator):
        self.mask, self.B, self.gen = mask, batch_size, gen
        self.counts = mask.sum(1).cpu().numpy()
        self.n = mask.shape[1]
        self.perm = torch.zeros_like(mask, dtype=torch.long)
        self.cursor = np.full(len(self.counts), 1 << 40, dtype=np.int64)  # a shuffle at the first draw
        self.ar = np.arange(batch_size)
        self.active = self.rows = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        # fewer than B examples left (a client with fewer than B in all: its whole split every step)
        need = self.cursor + self.B > self.counts
        dev = self.mask.device
        if need.any():  # keys for every client (the run's random stream), sorted only where needed
            keys = torch.rand(self.mask.shape, generator=self.gen, device=dev)
            rows = torch.as_tensor(np.flatnonzero(need), device=dev)
            self.perm[rows] = keys[rows].masked_fill_(~self.mask[rows], 2.0).argsort(1)
            self.cursor = np.where(need, 0, self.cursor)
        at = self.cursor[:, None] + self.ar
        valid = at < self.counts[:, None]
        self.active, self.rows = int(valid.any(1).sum()), int(valid.sum())
        pos = torch.gather(self.perm, 1, torch.as_tensor(np.minimum(at, self.n - 1), device=dev))
        self.cursor = self.cursor + self.B
        return pos, torch.as_tensor(valid, device=dev)


class CodaPlus(ClientRuns):
    aliases: ClassVar[dict[str, str]] = {"local_steps": "I"}
    paper: ClassVar[str] = "Yuan, Guo, Xu, Ying & Yang, ICML 2021 (CODASCA), Alg. 1/2"
    tasks: ClassVar[tuple[str, ...]] = ("auc",)
    rounds: ClassVar[str] = "1 round of I local iterations"
    scaffold: ClassVar[bool] = False
    # the stages and the clip are one number; the clients' iterates and control variates are per client
    batch: ClassVar[Batching] = Batching(
        state=("vk", "ak", "ref", "sum_v", "sum_a", "pick_v", "pick_a", "cvk", "cak", "cv", "ca"),
        fixed=("decay", "grad_clip"), seeds=AUC_SEEDS, clients=("vk", "ak", "cvk", "cak"))

    @dataclass
    class HP:
        eta: float = bounded(0.1, gt=0, doc="step size (CODASCA: eta_l), primal and dual")
        I: int = bounded(32, ge=1, le=100_000, doc="communication window: local iterations per round")
        T0: int = bounded(2000, ge=1, le=10**8, doc="stage length in local iterations")
        decay: float = bounded(3.0, gt=0, doc="the step is divided by this at every stage")
        gamma: float = bounded(2e-3, doc="proximal coefficient gamma of eq. 5 (1/500)")
        inv_gamma: float | None = bounded(None, doc="paper-style 1/gamma (500, 700, 1000); overrides gamma")
        batch_size: int = bounded(32, ge=1, doc="local minibatch")
        stage_output: str = bounded("average", choices=OUTPUTS, doc="average | random_round | last | paper")
        stage_restart: str = bounded("last", choices=RESTARTS, doc="last | output")
        dual_grad: str | None = bounded(None, choices=("autograd", "closed_form"),
                                        doc="autograd | closed_form (None: the task preset's)")
        grad_clip: float | None = bounded(None, doc="elementwise clip of the model gradient, 0 = off (None: preset)")
        weight_decay: float | None = bounded(None, doc="decoupled weight decay on w (None: preset)")

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)
        pre = task.preset
        self.dual_grad = hp.dual_grad or pre["dual_grad"]
        if self.dual_grad not in ("autograd", "closed_form"):
            raise UsageError(f"dual_grad must be autograd or closed_form; got '{self.dual_grad}'",
                             kind="bad_value", field="dual_grad", value=self.dual_grad)
        self.out_rule = hp.stage_output
        if self.out_rule == "paper":
            self.out_rule = "random_round" if self.scaffold else "average"
        K = task.idx.shape[0]
        self.K = K
        v0, a0 = task.init(fed.gen)
        self.vk = v0.expand(K, -1).clone()  # [K, dv]
        self.ak = a0.expand(K, -1).clone()  # [K, 1]
        self.ref = v0.clone()  # proximal reference v_0^s
        self.sampler = EpochSampler(task.mask, hp.batch_size, fed.gen)
        self.t = 0  # local iterations done
        self.stage = 0
        self._new_stage()

    @classmethod
    def can_batch(cls, hp) -> bool:
        return cls.batch.on and hp.inv_gamma != 0  # a zero inv_gamma falls back to gamma: not one rule for a Rate

    # the settings of the run (from hp, so that a run of a batch reads its own: Rates there)
    @property
    def gamma(self):
        return 1.0 / self.hp.inv_gamma if self.hp.inv_gamma else self.hp.gamma

    @property
    def clip(self):
        return self.task.preset["grad_clip"] if self.hp.grad_clip is None else self.hp.grad_clip

    @property
    def wd(self):
        return self.task.preset["weight_decay"] if self.hp.weight_decay is None else self.hp.weight_decay

    @property
    def eta(self):
        """The step of the stage: ``eta / decay^stage``."""
        return self.hp.eta / self.hp.decay ** self.stage if self.stage else self.hp.eta

    # stage bookkeeping -----------------------------------------------------------------------------
    def _new_stage(self) -> None:
        self.sum_v = torch.zeros_like(self.ref)
        self.n_sum = 0
        self.rounds_in_stage = 0
        self.pick_v, self.pick_a = self.cmean(self.vk), self.cmean(self.ak)
        self.sum_a = torch.zeros_like(self.pick_a)
        if self.scaffold:
            self.cvk = torch.zeros_like(self.vk)
            self.cak = torch.zeros_like(self.ak)
            self.cv = torch.zeros_like(self.ref)
            self.ca = torch.zeros_like(self.pick_a)

    def _stage_output(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.out_rule == "average" and self.n_sum:
            return self.sum_v / self.n_sum, self.sum_a / self.n_sum
        if self.out_rule == "random_round":
            return self.pick_v, self.pick_a
        return self.cmean(self.vk), self.cmean(self.ak)

    def _end_of_round(self) -> None:
        """Random-round reservoir, then a stage transition if a multiple of T0 was reached."""
        self.rounds_in_stage += 1
        if self.out_rule == "random_round":
            u = float(torch.rand((), generator=self.fed.gen, device=self.fed.gen.device))
            if u * self.rounds_in_stage < 1.0:  # keep this round with probability 1/r
                self.pick_v, self.pick_a = self.first_row(self.vk), self.first_row(self.ak)
        stage = self.t // self.hp.T0
        if stage == self.stage:
            return
        v_out, a_out = self._stage_output()
        self.ref = v_out.clone()
        if self.hp.stage_restart == "output":
            self.vk = self.spread(v_out, self.K)
            self.ak = self.spread(a_out, self.K)
        self.stage = stage
        self._new_stage()

    # one local iteration (Alg. 2 lines 3-5, Alg. 4 lines 4-6) -----------------------------------------------
    def local_grads(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``[K, dv]`` and ``[K, 1]``: every client's gradients of ``F_k^s`` at its own iterate on its
        next minibatch, as applied (clipping, closed-form dual, proximal term)."""
        pos, valid = self.sampler.next()  # z_t^k
        z = self.client_batch(pos, valid)
        self.ledger.oracle("grads", self.sampler.active, self.sampler.rows)
        gv, ga = self.task.grads("objective", self.vk, self.ak, z)  # ∇_v F_k(v^k, α^k; z), ∇_α F_k(v^k, α^k; z)
        if self.clip:  # the code preset: the model's part clipped elementwise
            gv[:, :self.task.dw].clamp_(-self.clip, self.clip)
        if self.dual_grad == "closed_form":
            ga = self.task.dual_closed_form(self.vk, self.ak)
        self.add_(gv, self.vk, self.gamma)  # ∇_v F_k^s = ∇_v F_k + γ (v^k - v_0)  (Alg. 2 line 4)
        self.sub_(gv, self.ref, self.gamma)
        return gv, ga

    def _apply(self, gv: torch.Tensor, ga: torch.Tensor, cv: torch.Tensor | None = None,
               ca: torch.Tensor | None = None) -> None:
        """``v^k <- v^k - η (g_v + cv)``, ``α^k <- α^k + η (g_α + ca)`` (``cv``, ``ca``: CODASCA's
        control-variate corrections ``c - c^k``), in place on the clients' own ``v^k``; the decoupled weight
        decay is ``w^k <- (1 - η wd) w^k`` first (the same as ``- η wd w^k`` in the step)."""
        eta = self.eta
        if self.wd:
            self.scale(self.vk[:, :self.task.dw], 1.0 - eta * self.wd)
        self.sub_(self.vk, gv, eta)  # v^k <- v^k - η ∇_v F_k^s  (Alg. 2 line 4)
        if cv is not None:
            self.sub_(self.vk, cv, eta)  # - η (c_v - c_v^k)  (Alg. 4 line 5)
            ga = ga + ca  # + (c_α - c_α^k)  (Alg. 4 line 6)
        self.ak = self.task.project_dual(self.ak + eta * ga)  # α^k <- α^k + η ∇_α F_k  (Alg. 2 line 5)
        self.t += 1
        self.sum_v += self.cmean(self.vk)  # the stage's average output (Alg. 2 line 11)
        self.sum_a += self.cmean(self.ak)
        self.n_sum += 1

    def comm_round(self) -> None:
        """Alg. 2 lines 2-8 for I iterations: local SGDA, then the clients' mean."""
        for _ in range(self.hp.I):
            gv, ga = self.local_grads()
            self._apply(gv, ga)
        self.vk = self.spread(self.cmean(self.vk), self.K)  # v^k = (1/K) Σ_k v^k  (line 7)
        self.ak = self.spread(self.cmean(self.ak), self.K)  # α^k = (1/K) Σ_k α^k  (line 8)
        self.ledger.comm(self.K, self.task.dv + 1)
        self._end_of_round()

    # runner interface ---------------------------------------------------------------------------
    def rounds_per_iteration(self) -> int:
        return 1

    def evaluate(self) -> dict[str, float]:
        v = self.vk.mean(0)
        out = self.task.evaluate(v)
        out.update({"local_iters": self.t, "stage": self.stage, "alpha": float(self.ak.mean())})
        return out

    def state(self) -> dict[str, torch.Tensor]:
        return {"v": self.vk, "alpha": self.ak}


class Codasca(CodaPlus):
    paper: ClassVar[str] = "Yuan, Guo, Xu, Ying & Yang, ICML 2021 (CODASCA), Alg. 3/4"
    scaffold: ClassVar[bool] = True

    @dataclass
    class HP(CodaPlus.HP):
        eta_g: float = bounded(1.0, gt=0, doc="global (server) step; > 1 extrapolates")
        control: str = bounded("eq7", choices=("eq6", "eq7"),
                               doc="eq7 (mean of the round's gradients) | eq6 (difference form)")

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)

    def comm_round(self) -> None:
        """Alg. 4 lines 3-14: round r from the broadcast point (v_{r-1}, α_{r-1})."""
        I, K, eta, eta_g, each = self.hp.I, self.K, self.eta, self.hp.eta_g, self.at_clients
        v_prev, a_prev = self.first_row(self.vk), self.first_row(self.ak)  # v_{r,0}^k = v_{r-1}, α_{r,0}^k = α_{r-1}
        corr_v, corr_a = each(self.cv) - self.cvk, each(self.ca) - self.cak  # c - c^k, fixed in the round
        sum_gv, sum_ga = torch.zeros_like(self.vk), torch.zeros_like(self.ak)
        for _ in range(I):  # line 3
            gv, ga = self.local_grads()
            sum_gv += gv
            sum_ga += ga
            self._apply(gv, ga, corr_v, corr_a)  # lines 5-6
        if self.hp.control == "eq7":  # c^k = (1/I) Σ_t ∇F_k^s  (eq. 7)
            self.cvk, self.cak = sum_gv / I, sum_ga / I
        else:  # lines 8-9 (eq. 6)
            self.cvk = self.cvk - each(self.cv) + (each(v_prev) - self.vk) / (I * eta)
            self.cak = self.cak - each(self.ca) + (self.ak - each(a_prev)) / (I * eta)
        self.cv, self.ca = self.cmean(self.cvk), self.cmean(self.cak)  # c = (1/K) Σ_k c^k  (line 10)
        v = v_prev + eta_g * (self.cmean(self.vk) - v_prev)  # v_r = v_{r-1} + η_g (mean_k v_{r,I}^k - v_{r-1})  (11-12)
        a = self.task.project_dual(a_prev + eta_g * (self.cmean(self.ak) - a_prev))  # the same for α  (lines 11, 13)
        self.vk, self.ak = self.spread(v, K), self.spread(a, K)  # broadcast v_r, α_r (c_v, c_α kept)  (line 14)
        self.ledger.comm(self.K, 2 * (self.task.dv + 1))
        self._end_of_round()
