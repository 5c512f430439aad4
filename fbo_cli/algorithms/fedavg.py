"""Plain federated learning baselines of ZO-HFL's Table I (Qiu, Kim & Yousefian): FedAvg, FedProx, SCAFFOLD on ``hfl``.

References:
* FedAvg: H. B. McMahan, E. Moore, D. Ramage, S. Hampson, B. Agüera y Arcas, "Communication-Efficient
  Learning of Deep Networks from Decentralized Data", AISTATS 2017 (ZO-HFL's [19]).
* FedProx: T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi, A. Talwalkar, V. Smith, "Federated Optimization in
  Heterogeneous Networks", MLSys 2020 ([13]).
* SCAFFOLD: S. P. Karimireddy, S. Kale, M. Mohri, S. J. Reddi, S. U. Stich, A. T. Suresh, "SCAFFOLD:
  Stochastic Controlled Averaging for Federated Learning", ICML 2020, Alg. 1 with option II ([8]).
Setup as in Qiu, Kim & Yousefian, arXiv 2504.01839 §IV.

One communication round r, with S_r the participating clients and x the global model:

1. Each i ∈ S_r starts from y_i = x and runs K_r = ceil(τ√(r+1))·``steps_multiplier`` local SGD steps
   with γ̃_t = γ̃/(t+Γ), t from 0 in every round (the same number of local steps as one Alg. 2 call of
   ZO-HFL, §IV "the total number of local steps the same across the four methods"), on
   minibatches ζ_t of its own data:
   * FedAvg:   y_i <- y_i - γ̃_t ∇CE_i(y_i; ζ_t)
   * FedProx:  y_i <- y_i - γ̃_t (∇CE_i(y_i; ζ_t) + μ_prox (y_i - x))           (Li et al., eq. (2))
   * SCAFFOLD: y_i <- y_i - γ̃_t (∇CE_i(y_i; ζ_t) - c_i + c)                      (Alg. 1 line 10)
2. Server update:
   * FedAvg, FedProx: x <- x + η_g Σ_{i∈S_r} (N_i / Σ_{j∈S_r} N_j)(y_i - x), η_g = 1, i.e. the
     data-weighted average of the local models (McMahan et al., Alg. 1).
   * SCAFFOLD: c_i⁺ = c_i - c + (x - y_i) / Σ_t γ̃_t (option II, line 12, with the sum of the decaying
     step sizes in place of K·η_l); x <- x + η_g mean_{S_r}(y_i - x);
     c <- c + (|S_r|/m) mean_{S_r}(c_i⁺ - c_i) (lines 16-17); c = c_i = 0 initially.

The baselines see the clients' data only (docs/fidelity.md#zohfl); ``server_client: true`` adds the server's data as
one more, always participating client (an ablation, not the paper's setting).

Rounds per iteration: 1. Payload per participating client: FedAvg/FedProx d up and d down;
SCAFFOLD 2d up (Δy_i, Δc_i) and 2d down (x, c).

Hyperparameters (paper §IV where stated): τ = 20, γ̃ = 0.1, Γ = 1 (lr schedule "throughout the
experiments"), minibatch B = 64 (docs/fidelity.md#zohfl), η_g = 1; FedProx μ_prox = 0.01 (not given).

Run batches (fbo_cli/grids/run_batches.py; ``_hfl.py``): all three, runs differing in γ̃, Γ, η_g, μ_prox; identical bit
for bit
to each run alone on the CPU but for the evaluated losses and accuracy, within rounding (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..errors import UsageError
from ._hfl import HFLAlgorithm
from .base import bounded
from .batching import Batching


class FedAvg(HFLAlgorithm):
    paper: ClassVar[str] = "McMahan et al., AISTATS 2017 (baseline of ZO-HFL)"
    batch: ClassVar[Batching] = HFLAlgorithm.batch.but(on=True)  # _hfl.py: the runs' models side by side on the
    # local step's group axis

    @dataclass
    class HP:
        tau: float = bounded(20.0, gt=0, le=10_000, doc="τ: K_r = ceil(τ √(r+1)) local steps")
        steps_multiplier: int = bounded(1, ge=1, doc="2 matches ZO-HFL's two Alg. 2 calls (docs/fidelity.md#zohfl)")
        local_lr: float = bounded(0.1, doc="γ̃: local step γ̃_t = γ̃/(t+Γ) (decay) or γ̃ (constant)")
        Gamma: float = bounded(1.0, doc="Γ: offset of the decaying local step γ̃/(t+Γ)")
        lr_schedule: str = bounded("decay", choices=("decay", "constant"), doc="decay (γ̃/(t+Γ)) | constant (γ̃)")
        batch_size: int = bounded(64, doc="B (0: full local data)")
        server_lr: float = bounded(1.0, doc="η_g: the server step on the mean of the clients' updates")
        mu_prox: float = bounded(0.0, doc="FedProx's μ (0: FedAvg)")
        server_client: bool = bounded(False, doc="ablation: the server's data as one more client")

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)

    def local_steps(self, r: int) -> int:
        return super().local_steps(r) * self.hp.steps_multiplier

    def _local_round(self, S: torch.Tensor, correction: torch.Tensor | None = None):
        task, hp = self.task, self.hp
        table, counts = task.client_table(S, hp.server_client)
        K = len(counts)
        W0 = self.x.reshape(1, -1, task.nf).expand(K, -1, -1)  # [K, C, n]; a batch's [K, R·C, n]
        W, lr_sum = self.local(W0, W0, table, counts, self.local_steps(self.r), mu=hp.mu_prox,
                               correction=correction)
        return W.reshape(K, *self.x.shape), counts, lr_sum  # [K, d]; [K, R, d]

    def step(self) -> None:
        S = self.sample()
        Y, counts, _ = self._local_round(S)
        w = counts.to(Y.dtype) / counts.sum()
        x = self.x

        def server(r, hp, at):
            at(self.x).copy_(at(x) + hp.server_lr * (w[:, None] * (at(Y, 1) - at(x))).sum(0))

        self.x = x.clone()
        self.each_run(server)
        self.ledger.comm(len(S), self.task.d)
        self.put_personal(S, Y)
        self.r += 1


class FedProx(FedAvg):
    paper: ClassVar[str] = "Li et al., MLSys 2020 (baseline of ZO-HFL)"

    @dataclass
    class HP(FedAvg.HP):
        mu_prox: float = bounded(0.01, doc="μ of the proximal term (not given in ZO-HFL)")


class Scaffold(FedAvg):
    paper: ClassVar[str] = "Karimireddy et al., ICML 2020, option II (baseline of ZO-HFL)"

    batch: ClassVar[Batching] = FedAvg.batch.but(state=("x", "personal", "c", "ci"))

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)
        if hp.mu_prox:
            raise UsageError("scaffold takes no mu_prox (set it to 0)",
                             kind="unsupported", field="mu_prox", value=hp.mu_prox)
        n = task.m + (1 if hp.server_client else 0)
        self.c = torch.zeros_like(self.x)
        self.ci = torch.zeros(n, task.d, dtype=self.x.dtype, device=self.x.device)

    def step(self) -> None:
        task = self.task
        S = self.sample()
        idx = torch.cat([S, S.new_tensor([task.m])]) if self.hp.server_client else S
        k = len(idx)
        # -c_i + c: [k, C, n]; a batch's [k, R·C, n] (ci [R, n_c, d], c [R, d])
        corr = (self.c.unsqueeze(-2) - self.ci[..., idx, :]).movedim(-2, 0).reshape(k, -1, task.nf)
        Y, _, lr_sum = self._local_round(S, corr)
        x, c, ci = self.x, self.c, self.ci
        self.x, self.c = x.clone(), c.clone()

        def server(r, hp, at):
            Yr, ci_r = at(Y, 1), at(ci)
            ci_new = ci_r[idx] - at(c) + (at(x) - Yr) / self.of_run(lr_sum, r)  # option II
            at(self.x).copy_(at(x) + hp.server_lr * (Yr - at(x)).mean(0))
            at(self.c).copy_(at(c) + (k / ci_r.shape[0]) * (ci_new - ci_r[idx]).mean(0))
            ci_r[idx] = ci_new

        self.each_run(server)
        self.ledger.comm(len(S), 2 * task.d)
        self.put_personal(S, Y)
        self.r += 1

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "c": self.c}
