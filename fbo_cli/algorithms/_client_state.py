"""The family of algorithms that keep a copy of every variable on every client (FedBiO-Local,
FedBiOAcc-Local, AdaFBiO): the shared state, the per-client oracles and the local Neumann
hypergradient (FedBiO eq. (6), AdaFBiO eq. (13)), and the checks their hyperparameters share.

In a run batch (fbo_cli/grids/run_batches.py) their client-stacked state ``[M, d]`` carries the run dimension in front,
``[R, M, d]`` (what ``show`` hands each run back is its ``[M, d]``), and their steps are written for both
shapes: the client dimension is ``-2`` (:meth:`ClientStateAlgorithm.to_clients`, ``mean(-2)``). Every
oracle call is *folded*: the rows ``[R, M', d]`` flattened to ``[R*M', d]``, the minibatches (drawn once,
``M'`` rows) repeated R times (:meth:`ClientStateAlgorithm.fold`; the Neumann factors' batches are read per
product, :func:`fbo_cli.algorithms.neumann.take`), one call of the task's own oracles over all rows, each row
the very computation of the run alone (docs/fidelity.md#batches).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..errors import UsageError
from ..sim.federation import Batch
from .base import Algorithm
from .neumann import neumann_hypergrad


class ClientStateAlgorithm(Algorithm):
    """Base of the algorithms that keep a copy of every variable on every client (all clients in
    every round): ``x [M, dx]`` copies of the upper variable and the lower state ``y [M, dy]``
    (a personal head per client when the task has ``local_lower``, else copies of the shared y).
    Provides fixed minibatch draws with honest sample accounting and charged vectorized oracles."""

    tasks: ClassVar[tuple[str, ...]] = ("hyperrep",)
    needs_local_lower: ClassVar[bool] = True
    # run settings these algorithms assume (full participation); the runner does not read this
    run_defaults: ClassVar[dict] = {"participation": 1.0}

    def __init__(self, task, hp, fed):
        if fed.participation < 1.0:
            raise UsageError(f"'{self.name}' runs every client in every round (the paper samples no "
                             f"clients): set participation=1 (got {fed.participation})",
                             kind="unsupported", field="participation", value=fed.participation)
        local = bool(getattr(task, "local_lower", False))
        if self.needs_local_lower and not local:
            raise UsageError(f"'{self.name}' solves a lower level per client (FedBiO eq. 5): run it with "
                             f"lower=local (per-client heads)", kind="unsupported", field="lower", value="global")
        super().__init__(task, hp, fed)
        self.local = local
        data = fed.data
        self.M = data.num_clients
        x, y = task.init(fed.gen)
        self.x = x.expand(self.M, -1).clone()
        self.y = y.clone() if y.dim() == 2 else y.expand(self.M, -1).clone()
        self.train, self.val = data.split("train"), data.split("val")
        self.t = 0  # local iterations done

    # data ----------------------------------------------------------------------------------------
    def draw(self, which: str, batch_size: int) -> Batch:
        """One fresh minibatch per client (with the task's random masks, frozen in the batch so that
        both STORM points see the same ones); its data points are charged to ``samples``."""
        split = self.train if which == "train" else self.val
        b = self.task.noise(self.fed.gen, split.sample(self.fed.gen, batch_size))
        self.ledger.samples += int((b["w"] > 0).sum())
        return b

    def charge(self, kind: str, calls: int) -> None:
        self.ledger.oracle(kind, calls // self.runs)  # a run batch's rows are R times a run's

    # the run dimension (fbo_cli/grids/run_batches.py): alone these return their argument -----------------------
    def rows(self, t: torch.Tensor) -> torch.Tensor:
        """Client-stacked rows ``[M, d]`` of ``t``: in a batch ``[R*M, d]`` of ``[R, M, d]`` (run-major)."""
        return t if t.dim() == 2 else t.flatten(0, -2)

    @staticmethod
    def unrows(t: torch.Tensor, lead: torch.Size) -> torch.Tensor:
        """Inverse of :meth:`rows`: ``t [R*M, d]`` as ``[*lead, d]``."""
        return t if len(lead) == 1 else t.reshape(*lead, -1)

    def fold(self, b: Batch) -> Batch:
        """A minibatch of ``M`` rows (drawn once for the runs) for rows ``[R*M, ...]``: repeated R times."""
        if not self.batched:
            return b
        return {k: v.repeat(self.runs, *[1] * (v.dim() - 1)) for k, v in b.items()}

    def to_clients(self, t: torch.Tensor) -> torch.Tensor:
        """Every client's copy of the broadcast ``t [d]`` (``[R, d]`` in a batch): ``[M, d]`` (``[R, M, d]``)."""
        return t.unsqueeze(-2).expand(*t.shape[:-1], self.M, t.shape[-1]).clone()

    def oracles(self, fn):
        """The task's oracles; in a run batch the task's own (not the per-run ones of
        ``fbo_cli.algorithms.runs_as_clients``): the
        calls here are folded, every tensor row-stacked."""
        return (self.task._task if self.batched else self.task).oracles(fn)

    def encode(self, x: torch.Tensor, batches: list[Batch]) -> list[Batch]:
        """The batches with ``X`` replaced by each client's features under its own ``x [M, dx]``
        (tasks with ``reuse``: g depends on x only through them), encoded in one call. In a run batch the
        batches may hold the rows drawn once (``x [R*M, dx]``): ``X`` is repeated for the runs, the rest stays."""
        n = [b["X"].shape[1] for b in batches]
        X = torch.cat([b["X"] for b in batches], 1)
        if X.shape[0] != x.shape[0]:
            X = X.repeat(x.shape[0] // X.shape[0], *[1] * (X.dim() - 1))
        H = torch.vmap(self.task.encode)(x, X)
        return [{**b, "X": h} for b, h in zip(batches, H.split(n, 1), strict=True)]

    def grad_y(self, x, y, b: Batch) -> torch.Tensor:
        lead = x.shape[:-1]
        x, y, b = self.rows(x), self.rows(y), self.fold(b)
        self.charge("grads", x.shape[0])
        if self.task.reuse:  # g depends on x only through the encoded batch
            fn, a, b = self.task.g_enc, x.new_zeros(0), self.encode(x, [b])[0]
        else:
            fn, a = self.task.g, x
        return self.unrows(self.oracles(fn).grad(1, a, y, b), lead)  # the task's closed form, where it has one

    def neumann(self, x, y, bx: dict, step: float, mode: str = "sum", k=None) -> torch.Tensor:
        H, fn, arg = bx["H"], None, None
        K = len(H) + 1  # eq. (13)'s K: the scale K ϑ, even when only max(k) factors are computed
        if mode == "random":  # only the factors some client reaches are computed (none when all k = 0)
            H = H[:int(k.max())]
            k = k.repeat(self.runs) if self.batched else k
        lead = x.shape[:-1]
        x, y = self.rows(x), self.rows(y)  # H as drawn: each product takes its rows (neumann.take)
        if self.task.reuse and H:
            H, fn, arg = self.encode(x, H), self.task.g_enc, x.new_zeros(0)
        return self.unrows(neumann_hypergrad(self.task.f, self.task.g, x, y, self.fold(bx["f"]), self.fold(bx["g"]),
                                             H, step, mode, k, charge=self.charge, hess_fn=fn, hess_arg=arg, K=K,
                                             oracles=self.oracles), lead)

    # evaluation ----------------------------------------------------------------------------------
    def x_bar(self) -> torch.Tensor:
        return self.x.mean(0)

    def heads(self) -> torch.Tensor:
        return self.y if self.local else self.y.mean(0)

    def eval_point(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x_bar(), self.heads()

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "y": self.y}

    def rounds_per_iteration(self) -> int:
        return 1
