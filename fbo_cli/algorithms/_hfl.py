"""Shared machinery of the algorithms that run on the ``hfl`` task: ZO-HFL (Qiu, Kim & Yousefian,
arXiv 2504.01839) and the plain FL
baselines FedAvg, FedProx and SCAFFOLD.

* The global model ``x [d]`` starts at 0 (docs/fidelity.md#zohfl); one ``step()`` is one communication round r.
* Participating clients S_r come from a generator of their own, seeded by the run's seed, so that
  all four methods see the same sequence S_0, S_1, ... for a given seed (docs/fidelity.md#zohfl).
* Local steps per round and client: ``H_r = ceil(τ √(r+1))`` (Alg. 1/2 with ``H_{i,r} = τ√(r+1)``,
  §IV; rounded up); the baselines run the same number (docs/fidelity.md#zohfl).
* Local step sizes ``γ̃_t = γ̃ / (t + Γ)`` with ``γ̃ = 0.1, Γ = 1``, t restarting at 0 in every call
  (§IV "throughout the experiments"), or constant ``γ̃`` (``lr_schedule: constant``).
* :meth:`HFLAlgorithm.local` runs the local SGD of all participating clients at once: ``K`` clients,
  each with ``G`` models stacked as ``W [K, G·C, n]`` that share every minibatch (common random
  numbers), one ``bmm`` per step. Minibatches are ``B`` i.i.d. uniform draws from the client's rows,
  fresh at every step (the stochastic oracle of Alg. 2 line 3); ``batch_size: 0`` uses the client's
  full data at every step (deterministic, for tests and ablations).

Run batches (fbo_cli/grids/run_batches.py, docs/fidelity.md#batches): the R runs of a seed draw the same clients,
directions
and minibatches, so their models sit side by side on the group axis of :meth:`HFLAlgorithm.local`
(``[K, R·G·C, n]``, run-major) and share every minibatch and both products of a step; a step size that differs
between the runs moves each run's slice with its own number (``add_`` with ``alpha``, as alone). The server's
side (a few vectors ``[d]`` a round) runs run by run, the run alone's code on the run's rows
(:meth:`HFLAlgorithm.each_run`). Every run is identical bit for bit to the run alone on the CPU (tested), but for
the evaluated losses and accuracy: a batch scores its runs in one pass (``HFL.evaluate_runs``), within rounding.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..sim.federation import sample_clients
from .base import Algorithm
from .batching import Batching
from .runs_as_clients import Rate, run_hp


class HFLAlgorithm(Algorithm):
    # its subclasses' runs batch (FedAvg, ZO-HFL: ``on``); H_r is one number of local steps a round
    batch: ClassVar[Batching] = Batching(
        on=False, state=("x", "personal"), fixed=("tau",),
        seeds="its client sets come from a generator of its own and its minibatches from each seed's client tables, "
              "which a seed batch does not carry")
    tasks: ClassVar[tuple[str, ...]] = ("hfl",)
    rounds: ClassVar[str] = "1"
    work_grows: ClassVar[bool] = True  # ceil(tau sqrt(r + 1)) local steps in round r

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)
        self.x = task.init_x()
        self.r = 0
        self.personal = task.init_x().expand(task.m, -1).clone() if task.p.holdout > 0 else None
        self.client_gen = torch.Generator(device=fed.gen.device).manual_seed(fed.gen.initial_seed() + 7)

    def sample(self) -> torch.Tensor:
        """S_r: ``round(β m)`` clients uniformly without replacement, from the clients' own generator."""
        return sample_clients(self.client_gen, self.task.m, self.fed.participation, self.x.device)

    def rounds_per_iteration(self) -> int:
        return 1

    # schedules ---------------------------------------------------------------------------------------
    def local_steps(self, r: int) -> int:
        """``H_r = ceil(τ √(r+1))`` (docs/fidelity.md#zohfl)."""
        return max(1, math.ceil(self.hp.tau * math.sqrt(r + 1) - 1e-9))

    def local_lr(self, t: int) -> float:
        hp = self.hp
        return hp.local_lr / (t + hp.Gamma) if hp.lr_schedule == "decay" else hp.local_lr

    # local work --------------------------------------------------------------------------------------
    def local(self, W: torch.Tensor, anchor: torch.Tensor | None, table: torch.Tensor, counts: torch.Tensor,
              steps: int, groups: int = 1, mu: float = 0.0, correction: torch.Tensor | None = None,
              project: bool = False) -> tuple[torch.Tensor, float]:
        """``steps`` local SGD steps of ``K`` clients from ``W [K, G·C, n]``:
        ``W <- Π[W - γ̃_t (∇CE(W; ζ_t) + μ (W - anchor) + correction)]``; the ``G`` models of a client
        share its minibatch ζ_t. Returns the final ``W`` and ``Σ_t γ̃_t``. Charges one gradient oracle
        per model and step. In a run batch ``W`` is ``[K, R·G·C, n]`` (the R runs' G models, run-major), and
        ``γ̃_t``, ``μ`` and ``Σ_t γ̃_t`` may be Rates (one number per run)."""
        task, B = self.task, self.hp.batch_size
        K, RG = W.shape[0], self.runs * groups
        W = W.clone()
        if B > 0:
            rows = task.batch_rows(self.fed.gen, table, counts, steps, B)
            wb = torch.full((K, B), 1.0 / B, dtype=W.dtype, device=W.device)
        else:
            Xf, yf = task.gather(table)
            mask = torch.arange(table.shape[1], device=table.device)[None] < counts[:, None]
            wb = mask.to(W.dtype) / counts[:, None].to(W.dtype)
        lr_sum = 0.0
        for t in range(steps):
            lr = self.local_lr(t)
            Xb, yb = task.gather(rows[t]) if B > 0 else (Xf, yf)
            G = task.ce_grad(W, Xb, yb, wb, RG)
            if mu:
                self.axpy(G, W - anchor, mu, skip_zero=True)
            if correction is not None:
                G.add_(correction)
            self.axpy(W, G, -lr)
            if project:
                W = task.project(W, anchor, RG)
            lr_sum = lr_sum + lr
        n_used = int(B if B > 0 else counts.sum().item() / max(K, 1))
        self.ledger.oracle("grads", steps * K * groups, steps * K * groups * n_used)
        return W, lr_sum

    # helpers -------------------------------------------------------------------------------------------
    def axpy(self, Y: torch.Tensor, X: torch.Tensor, a, skip_zero: bool = False) -> None:
        """``Y += a X`` in place (``add_`` with ``alpha``: one rounding, as alone) for ``Y, X [K, R·G·C, n]``; a
        Rate ``a`` moves each run's slice with its own number (``skip_zero``: a run whose number is 0 is left
        alone, as a run alone skips the term)."""
        if not isinstance(a, Rate):
            if a or not skip_zero:
                Y.add_(X, alpha=a)
            return
        Yr, Xr = Y.view(Y.shape[0], self.runs, -1), X.view(X.shape[0], self.runs, -1)
        for r, ar in enumerate(a.v):
            if ar or not skip_zero:
                Yr[:, r].add_(Xr[:, r], alpha=ar)

    def each_run(self, fn) -> None:
        """The server's side of a round, run by run: ``fn(r, hp, at)`` with the run's index, its own
        hyperparameters and an ``at(t, axis=0)`` that gives the run's part of a batch tensor ``t`` (its row of a
        ``[R, ...]`` state, ``axis`` 1: its ``[K, ...]`` slice of a ``[K, R, ...]`` client result); alone,
        ``fn(0, hp, identity)`` once."""
        if not self.batched:
            fn(0, self.hp, lambda t, axis=0: t)
            return
        for r in range(self.runs):
            fn(r, run_hp(self.hp, r), lambda t, axis=0, r=r: t.select(axis, r))

    @staticmethod
    def of_run(v, r: int):
        """Run ``r``'s number of ``v`` (a Rate, or a float all the runs share)."""
        return v.v[r] if isinstance(v, Rate) else v

    def put_personal(self, S: torch.Tensor, Y: torch.Tensor) -> None:
        """The participants' last local models ``Y [K, d]`` (``[K, R, d]`` in a batch) as their personal models."""
        if self.personal is not None:
            if self.batched:
                self.personal[:, S] = Y[:len(S)].transpose(0, 1)
            else:
                self.personal[S] = Y[:len(S)]

    def as_stack(self, v: torch.Tensor) -> torch.Tensor:
        """``[K, G, d] -> [K, G·C, n]`` (the layout of :meth:`local`; ``d`` is class-major)."""
        K, G, _ = v.shape
        return v.reshape(K, G * self.task.C, self.task.nf)

    def from_stack(self, W: torch.Tensor, groups: int) -> torch.Tensor:
        """``[K, G·C, n] -> [K, G, d]``."""
        return W.reshape(W.shape[0], groups, -1)

    def eval_point(self) -> tuple[torch.Tensor]:
        return (self.x,)

    def more_metrics(self, out: dict[str, float]) -> dict[str, float]:
        if self.personal is not None:
            out["personal_acc"] = self.task.personal_acc(self.personal)
        return out

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x}
