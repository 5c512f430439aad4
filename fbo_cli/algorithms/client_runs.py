"""The run dimension of algorithms whose clients keep their own state between rounds (CODA+, CODASCA, FedAvg-CE):
what lets their step read as the paper's box, the same code for a run alone and for R runs in a batch
(fbo_cli/grids/run_batches.py, docs/fidelity.md#batches).

The clients' state ``[K, ...]`` (``batch.clients``) is ``[R*K, ...]`` within a round (run-major, every client a row: one
gradient call over all rows) and ``[R, K, ...]`` between rounds (what :func:`fbo_cli.algorithms.runs_as_clients.show`
hands each run back: its evaluation, checkpoint and divergence check). A step writes plain tensor operations on the rows
and the globals (``[d]``; ``[R, d]`` in a batch) with the base's ``spread``, ``cmean`` and ``first_row``, and, where a
line of the paper is an in-place ``t ± a·x`` whose ``a`` may be each run's own number (a
:class:`~fbo_cli.algorithms.runs_as_clients.Rate`), :meth:`ClientRuns.add_` / :meth:`ClientRuns.sub_`, which keep the
rounding of ``torch.add_(x, alpha=a)`` run by run.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from .base import Algorithm
from .batching import Batching
from .runs_as_clients import Rate


class ClientRuns(Algorithm):
    """Base of the algorithms whose clients keep state between rounds (``K`` clients, ``self.K``); ``step()`` is one
    :meth:`comm_round`."""

    batch: ClassVar[Batching] = Batching()

    def step(self) -> None:
        self._fold(True)
        self.comm_round()
        self._fold(False)

    def comm_round(self) -> None:
        raise NotImplementedError

    def _fold(self, fold: bool) -> None:
        if self.batched:
            for k in type(self).batch.clients:
                v = getattr(self, k, None)
                if v is not None:
                    setattr(self, k, v.flatten(0, 1) if fold else v.unflatten(0, (self.runs, -1)))

    def client_batch(self, pos: torch.Tensor, valid: torch.Tensor):
        """The clients' minibatch ``[K, B, ...]`` (:meth:`fbo_cli.tasks.auc.AUC.batch`); in a batch repeated for
        the R runs, ``[R*K, B, ...]``."""
        b = self.task.batch(pos, valid)
        if self.batched:
            b = {k: v.repeat(self.runs, *[1] * (v.dim() - 1)) for k, v in b.items()}
        return b

    def at_clients(self, v: torch.Tensor) -> torch.Tensor:
        """The global ``v`` as every client holds it, against client rows: alone ``v [d]`` itself (it broadcasts), in
        a batch each run's ``[R, d]`` repeated for its K rows."""
        return self.spread(v, self.K) if self.batched else v

    def add_(self, t: torch.Tensor, x: torch.Tensor, a) -> torch.Tensor:
        """``t += a x`` in place, as ``t.add_(x, alpha=a)`` rounds it (one fused step); ``t`` client rows, ``x`` client
        rows or a global. ``a`` a :class:`Rate` (the runs' own numbers): run by run, each run's rows exactly the call of
        the run alone."""
        return self._axpy(torch.Tensor.add_, t, x, a)

    def sub_(self, t: torch.Tensor, x: torch.Tensor, a) -> torch.Tensor:
        """``t -= a x`` in place (:meth:`add_`)."""
        return self._axpy(torch.Tensor.sub_, t, x, a)

    def scale(self, t: torch.Tensor, c) -> torch.Tensor:
        """``t *= c`` in place (``c`` a Rate: each run's rows by its own number, rows run-major)."""
        return t.mul_(c.col(t) if isinstance(c, Rate) else c)

    def _axpy(self, op, t: torch.Tensor, x: torch.Tensor, a) -> torch.Tensor:
        if not self.batched:
            return op(t, x, alpha=a)
        # the runs' view [R, K, d] of the rows, a global [R, d] as [R, 1, d] (with K = 1 both are [R, 1, d])
        tv = t.unflatten(0, (self.runs, -1))
        xv = x.unflatten(0, (self.runs, -1)) if x.shape[0] == t.shape[0] else x.unsqueeze(-2)
        if not isinstance(a, Rate):
            op(tv, xv, alpha=a)
        else:
            for r, ar in enumerate(a.v):
                op(tv[r], xv[r], alpha=ar)
        return t

    # the old API (before the step was written in the paper's words): kept so that a user's subclass written
    # against it runs unchanged; new code writes add_/sub_/at_clients
    def runs_view(self, t: torch.Tensor) -> torch.Tensor:
        """Client rows ``[K, d]``; in a batch ``[R*K, d]`` as the view ``[R, K, d]``."""
        return t.unflatten(0, (self.runs, -1)) if self.batched else t

    def rows(self, t: torch.Tensor) -> torch.Tensor:
        """The client rows of a :meth:`runs_view`: ``[K, d]``; in a batch ``[R, K, d]`` as ``[R*K, d]``."""
        return t.flatten(0, 1) if self.batched else t

    def glob(self, v: torch.Tensor) -> torch.Tensor:
        """A global ``[d]`` against :meth:`runs_view` rows; in a batch ``[R, d]`` as ``[R, 1, d]``."""
        return v.unsqueeze(-2) if self.batched else v

    def axpy(self, t: torch.Tensor, x: torch.Tensor, alpha, sub: bool = False) -> torch.Tensor:
        """``t += alpha x`` (``sub``: ``-=``) in place on :meth:`runs_view` / :meth:`glob` forms; a Rate run by run."""
        op = torch.Tensor.sub_ if sub else torch.Tensor.add_
        if not isinstance(alpha, Rate):
            return op(t, x, alpha=alpha)
        for r, a in enumerate(alpha.v):
            op(t[r], x[r], alpha=a)
        return t
