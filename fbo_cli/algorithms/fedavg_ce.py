"""FedAvg on binary cross-entropy, evaluated by test AUC: the non-AUC baseline of the ``auc`` task.

Not in CODASCA (Yuan, Guo, Xu, Ying & Yang, ICML 2021): a FedAvg+BCE row is not in the paper, so it is
labelled 'extra'; it is
what a user expects to compare AUC maximization against. Reference: McMahan, Moore, Ramage,
Hampson, Agüera y Arcas, "Communication-Efficient Learning of Deep Networks from Decentralized
Data", AISTATS 2017 (FedAvg), with all K clients participating, as CODA+/CODASCA do.

One call of ``step()`` is one communication round:

1. every client k runs I local SGD steps ``w^k <- w^k - eta (∇_w BCE(w^k; z) + wd w^k)`` on its
   own minibatches (the same per-client epoch sampler as CODA+/CODASCA);
2. ``w <- mean_k w^k`` (uniform, as CODA+), broadcast.

Step schedule: as CODA+/CODASCA, ``eta / decay^floor(t_r / T0)`` (t_r local iterations before the
round), so the three methods see the same step sizes. Rounds per outer iteration: 1; payload dw
floats per client and direction.

Hyperparameters (CODA+'s defaults): eta = 0.1, I = 32, T0 = 2000, decay = 3, batch 32, wd = 0.

Run batches (docs/fidelity.md#batches): as CODA+ (the same sampler and machinery, ``ClientRuns``): runs that
differ in eta or weight_decay (not decay) step together, identical bit for bit to the run alone on the CPU
with the mlp's closed-form gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import bounded
from .batching import Batching
from .client_runs import ClientRuns
from .codasca import AUC_SEEDS, EpochSampler


class FedAvgCE(ClientRuns):
    aliases: ClassVar[dict[str, str]] = {"local_steps": "I"}
    paper: ClassVar[str] = "McMahan et al., AISTATS 2017 (extra baseline for CODASCA)"
    tasks: ClassVar[tuple[str, ...]] = ("auc",)
    rounds: ClassVar[str] = "1 round of I local iterations"
    batch: ClassVar[Batching] = Batching(state=("vk",), fixed=("decay",), seeds=AUC_SEEDS, clients=("vk",))

    @dataclass
    class HP:
        eta: float = bounded(0.1, gt=0, doc="step size (as CODASCA's eta_l), divided by decay at every stage")
        I: int = bounded(32, ge=1, le=100_000, doc="communication window: local iterations per round")
        T0: int = bounded(2000, ge=1, doc="stage length in local iterations")
        decay: float = bounded(3.0, gt=0, doc="the step is divided by this at every stage")
        batch_size: int = bounded(32, ge=1, doc="local minibatch")
        weight_decay: float | None = bounded(None, doc="decoupled weight decay on w (None: 0)")

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)
        self.K = task.idx.shape[0]
        v0, self.a0 = task.init(fed.gen)
        self.vk = v0.expand(self.K, -1).clone()
        self.sampler = EpochSampler(task.mask, hp.batch_size, fed.gen)
        self.t = 0

    @property
    def wd(self):
        return self.hp.weight_decay or 0.0

    def rounds_per_iteration(self) -> int:
        return 1

    def comm_round(self) -> None:
        eta, wd = self.hp.eta / self.hp.decay ** (self.t // self.hp.T0), self.wd
        for _ in range(self.hp.I):
            pos, valid = self.sampler.next()
            batch = self.client_batch(pos, valid)
            self.ledger.oracle("grads", self.sampler.active, self.sampler.rows)
            g = self.task.grads("bce", self.vk, self.a0.expand(len(self.vk), -1), batch)[0]
            if wd:  # w^k <- w^k - eta (g + wd w^k), in place on the clients' own copies
                self.scale(self.vk, 1.0 - eta * wd)
            self.sub_(self.vk, g, eta)
            self.t += 1
        self.vk = self.spread(self.cmean(self.vk), self.K)
        self.ledger.comm(self.K, self.task.dw)

    def evaluate(self) -> dict[str, float]:
        out = self.task.evaluate(self.vk.mean(0))
        out["local_iters"] = self.t
        return out

    def state(self) -> dict[str, torch.Tensor]:
        return {"v": self.vk}
