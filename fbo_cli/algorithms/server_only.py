"""Server-only SGD: the yardstick of the ``hfl`` task that shows whether the clients help at all.

Reference: the server half of ZO-HFL (Qiu, Kim & Yousefian, arXiv 2504.01839, Alg. 1 lines 7-8)
with the clients' penalty term removed: the server trains on its own data alone, with the same
step-size schedule, minibatch and initial model x̂_0 (the task's, optionally pre-trained) as ZO-HFL.

One round r (no client takes part, nothing is communicated):

1. draw a minibatch ξ_r of ``server_batch`` rows of the server's data (i.i.d. uniform; 0: all rows);
2. x̂_{r+1} = x̂_r - γ_r ∇f̃1(x̂_r; ξ_r), γ_r = γ/√(r+1) (Alg. 1 line 8 with ĝ = ∇f̃1).

Rounds per iteration: 1 (to share the x axis of the other methods), 0 floats sent.
Hyperparameters: γ = 0.01, B = 64 (ZO-HFL's defaults).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ._hfl import HFLAlgorithm
from .base import bounded


class ServerOnly(HFLAlgorithm):
    paper: ClassVar[str] = "yardstick: ZO-HFL's server step without clients (Qiu, Kim & Yousefian, arXiv 2504.01839)"
    rounds: ClassVar[str] = "1 (nothing sent)"

    @dataclass
    class HP:
        server_lr: float = bounded(0.01, doc="γ: γ_r = γ/√(r+1)")
        server_batch: int = bounded(64, doc="B of ξ_r (0: the full server data)")

    def step(self) -> None:
        task, hp, gen = self.task, self.hp, self.fed.gen
        srv = task.server_rows
        if len(srv):
            if hp.server_batch > 0:
                pick = torch.randint(len(srv), (hp.server_batch,), generator=gen, device=gen.device)
                srv = srv[pick.to(srv.device)]
            self.x = self.x - hp.server_lr / math.sqrt(self.r + 1) * task.f1_grad(self.x, srv)
            self.ledger.oracle("grads", 1, len(srv))
        self.ledger.comm(0, 0)
        self.r += 1
