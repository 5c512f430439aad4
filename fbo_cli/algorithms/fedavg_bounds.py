"""FedAvg bounds for federated data hyper-cleaning: the baselines a user expects beside the bilevel
methods (docs/fidelity.md#fedbio).

Reference: H. Brendan McMahan, Eider Moore, Daniel Ramage, Seth Hampson, Blaise Agüera y Arcas,
"Communication-Efficient Learning of Deep Networks from Decentralized Data", AISTATS 2017.

Both train the lower-level model y alone (no weights x, no validation data) by FedAvg on each
client's *training* split, with every example at weight 1:

* ``fedavg-noisy`` (``data: noisy``): on all training examples, noisy labels included: the lower
  bound (what the bilevel methods must beat);
* ``fedavg-clean`` (``data: clean``): on the clean training examples only (the noise mask is an
  oracle no real method has): the upper bound.

One round (outer iteration) on the sampled clients S:

1. every client starts from the global y and takes I local SGD steps
   ``y_i <- y_i - γ ∇_y [Σ_j w_j CE(y; a_j, b_j) + ν||y||²]`` on minibatches of size b drawn from its
   (clean) training examples, w_j = 1/|batch| (the loss of ``hyperclean`` with σ(x_j) replaced by 1);
2. ``y = mean_i y_i`` (1 round, dim y floats each way).

For evaluation the weights are reported as x = 0 (noisy: nothing flagged, F1 = 0) and, for the
oracle, x = -10 on the corrupted and +10 on the clean examples (F1 = 1 by construction).

Hyperparameters (matched to ``fedbio``'s defaults): I = 5, b = 64, γ = 0.03 (a gradient step on
the lower loss needs γL < 2; docs/fidelity.md#fedbio; the experiments tune γ).

Run batches (docs/fidelity.md#batches): runs that differ in γ step together, each run's training identical
bit for bit to the run alone on the CPU. The client sets and minibatches do not depend on y, so the runs of a
seed share them (drawn and gathered once); the gradient is one folded call over the R*M client rows (the runs'
heads side by side on the clients' shared features), the step and the mean over them at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..errors import UsageError
from .base import BilevelAlgorithm, bounded
from .batching import Batching
from .pool_sampler import RowSampler


class FedAvgBound(BilevelAlgorithm):
    paper: ClassVar[str] = "McMahan et al., AISTATS 2017 (baseline of AdaFBiO and FedBiO hyper-cleaning)"
    rounds: ClassVar[str] = "1"
    tasks: ClassVar[tuple[str, ...]] = ("hyperclean",)
    # fbo_cli/grids/run_batches.py: x is fixed, y carries the run dimension; seeds: each seed's minibatches its own
    # rows, one folded call all the same
    batch: ClassVar[Batching] = Batching(state=("y",), seeds=True)

    @dataclass
    class HP:
        data: str = bounded("noisy", choices=("noisy", "clean"),
                            doc="noisy: all training examples | clean: the clean ones only (oracle)")
        local_steps: int = bounded(5, ge=1, le=100_000, doc="I, local iterations between averaging rounds")
        batch_size: int = bounded(64, ge=1, doc="b, local minibatch")
        lower_lr: float = bounded(0.03, doc="γ, local step size")

    def __init__(self, task, hp, fed):
        if not hasattr(task, "noisy"):
            raise UsageError("the FedAvg bounds need the hyperclean task's noise mask",
                             kind="unsupported", field="task", value=getattr(task, "name", None))
        super().__init__(task, hp, fed)
        if hp.data == "clean":
            self.x = torch.where(task.noisy, -10.0, 10.0).to(self.x.dtype)

    def rounds_per_iteration(self) -> int:
        return 1

    def step(self) -> None:
        hp = self.hp
        S = self.fed.sample()
        train = RowSampler.of(self.fed.data, "train", S, drop="noisy" if hp.data == "clean" else None)
        Y = self.spread(self.y, len(S))
        x = self.x.new_zeros(len(Y), 0)  # g_fixed does not read x: empty client rows (in a batch the call folds)
        for _ in range(hp.local_steps):
            batch = train.sample(self.fed.gen, hp.batch_size)
            has = batch["w"].sum(1) > 0  # a client with no clean example sits out
            d = self.grad(self.task.g_fixed, 1, x, Y, batch, has)
            Y = Y - hp.lower_lr * d * self.per_row(has)[:, None].to(d.dtype)
        self.y = self.cmean(Y)
        self.ledger.comm(len(S), self.y.shape[-1])
