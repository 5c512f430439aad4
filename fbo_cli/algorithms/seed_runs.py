"""Seed batches: runs of several seeds of one cell in one batch, each with its own data, task, generator and ledger
(:func:`stacked_seeds`); the batched algorithm reads them through the wrappers here (its ``fed``, ``ledger`` and task),
so that each run draws and is charged as it is alone (docs/fidelity.md#batches, "Seed batches").
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .runs_as_clients import Rate, TaskView, stacked


class SeedsDiffer(ValueError):
    """The runs of several seeds cannot share a batch (their states' shapes do not pad alike): their seeds step
    one after the other."""


class Seeds:
    """The runs of a seed batch, each its algorithm as built alone (``views``: its data, task, generator and
    ledger); the wrappers below read them through this one list, so a run that leaves the batch leaves them all.
    ``sizes[r]``: the padded size -> run r's own size of each state dimension that differs by seed (hyper-cleaning's
    x has one coordinate per training example, a number the seed's partition sets)."""

    def __init__(self, views: Sequence[Any]):
        self.views = list(views)
        self.sizes: list[dict[int, int]] = [{} for _ in self.views]

    def keep(self, keep: Sequence[int]) -> None:
        self.views[:] = [self.views[i] for i in keep]
        self.sizes[:] = [self.sizes[i] for i in keep]

    def pad(self, vs: list[torch.Tensor]) -> torch.Tensor:
        """The runs' values stacked ``[R, ...]``, each zero-padded at the end of every dimension to the largest."""
        if len({v.dim() for v in vs}) > 1:
            raise SeedsDiffer("states of different ranks")
        top = [max(n) for n in zip(*(v.shape for v in vs))]
        for sizes, v in zip(self.sizes, vs):
            for n, m in zip(v.shape, top):
                if n != m and sizes.setdefault(m, n) != n:
                    raise SeedsDiffer(f"two sizes of one run padded to {m}")
        return torch.stack([torch.nn.functional.pad(v, [p for n, m in zip(reversed(v.shape), reversed(top))
                                                       for p in (0, m - n)]) for v in vs])

    def own(self, r: int, v: torch.Tensor) -> torch.Tensor:
        """Run r's own part of its padded value ``v``."""
        sizes = self.sizes[r]
        return v[tuple(slice(0, sizes.get(n, n)) for n in v.shape)] if sizes else v


class SeedGens:
    """The runs' own generators (``fed.gen`` of a seed batch): a sampler of a seed batch draws each run's rows
    from its run's generator, as the run alone draws them."""

    def __init__(self, s: Seeds):
        self.s = s

    @property
    def device(self):
        return self.s.views[0].fed.gen.device

    def __iter__(self):
        return (v.fed.gen for v in self.s.views)


class SeedLedger:
    """The runs' own ledgers: a round is charged to each; an oracle charge per client row (``charge_rows``) to
    the run that owns the rows (run-major). Rounds and iterations are the runs' common counts."""

    def __init__(self, s: Seeds):
        self.s = s

    @property
    def ledgers(self) -> list:
        return [v.ledger for v in self.s.views]

    @property
    def rounds(self) -> int:
        return self.s.views[0].ledger.rounds

    @property
    def iterations(self) -> int:
        return self.s.views[0].ledger.iterations

    @iterations.setter
    def iterations(self, n: int) -> None:
        for led in self.ledgers:
            led.iterations = n

    def comm(self, clients: int, up, down=None, rounds: int = 1) -> None:
        """``Ledger.comm`` of each run; ``up`` and ``down`` may be the runs' own numbers (a :class:`Rate`)."""
        at = lambda v, r: int(v.v[r]) if isinstance(v, Rate) else v  # noqa: E731
        for r, led in enumerate(self.ledgers):
            led.comm(clients, at(up, r), at(down, r), rounds)

    def charge_rows(self, kind: str, used: torch.Tensor, times: int = 1) -> None:
        leds = self.ledgers
        for led, u in zip(leds, used.unflatten(0, (len(leds), -1)), strict=True):
            led.charge_rows(kind, u, times)

    def oracle(self, *a, **k) -> None:  # a bulk charge names no run: such a step runs its seeds alone
        raise NotImplementedError("a bulk oracle charge in a seed batch")

    def as_dict(self) -> dict[str, int]:
        raise NotImplementedError("a seed batch's ledgers are the runs' own")


class SeedRows:
    """The minibatch samplers of the runs of a seed batch (``RowSampler.of`` on a seed batch's data): each run's
    minibatch drawn from its own rows with its own generator, the runs' batches stacked run-major (``[R*M, b]``)."""

    def __init__(self, samplers: list):
        self.samplers = samplers

    @property
    def M(self) -> int:
        return self.samplers[0].M

    def sample(self, gens: SeedGens, batch_size: int) -> dict[str, torch.Tensor]:
        """Each run's minibatch (``RowSampler.sample`` with its generator), gathered into the batch's rows."""
        ss = self.samplers
        if len({min(batch_size, s.mask.shape[1]) for s in ss}) > 1:  # larger than some seed's smallest split
            raise SeedsDiffer("minibatches of different sizes")
        M, b, d = ss[0].M, min(batch_size, ss[0].mask.shape[1]), ss[0].data
        new = lambda t: torch.empty(len(ss) * M, b, *t.shape[1:], dtype=t.dtype, device=t.device)  # noqa: E731
        out = {"X": new(d.X), "y": new(d.y), "w": torch.empty(len(ss) * M, b, dtype=d.X.dtype, device=d.X.device),
               **{k: new(t) for k, t in d.extra.items()}}
        for r, (s, g) in enumerate(zip(ss, gens, strict=True)):
            s.sample(g, batch_size, {k: v[r * M:(r + 1) * M] for k, v in out.items()})
        return out


class SeedData:
    """The data of a seed batch as its algorithm sees it: what the runs share (the number of clients) and their
    samplers (:class:`SeedRows`); anything else differs by seed and is read from each run's own data."""

    def __init__(self, s: Seeds):
        self.s = s

    @property
    def num_clients(self) -> int:
        return self.s.views[0].fed.data.num_clients

    def seed_rows(self, which: str, clients, drop: str | None) -> SeedRows:
        from .pool_sampler import RowSampler

        return SeedRows([RowSampler.of(v.fed.data, which, clients, drop) for v in self.s.views])


class SeedFed:
    """``fed`` of a seed batch: its data (:class:`SeedData`), the runs' generators and ledgers. Every client takes
    part in every round (:meth:`fbo_cli.algorithms.base.Algorithm.can_batch_seeds`): no client set is drawn."""

    def __init__(self, s: Seeds, participation: float):
        self.s, self.participation = s, participation
        self.data, self.gen, self.ledger = SeedData(s), SeedGens(s), SeedLedger(s)

    def sample(self) -> torch.Tensor:
        v = self.s.views[0].fed
        S = v.sample() if v.participation >= 1 else None  # all clients: no draw
        if S is None or len(S) != v.data.num_clients:
            raise NotImplementedError("a client draw in a seed batch")
        return S


class SeedTaskView(TaskView):
    """The task of a seed batch: the first run's for its losses and oracles (their data come in the batches),
    each run's own for what differs by seed (x's owners; the random masks, drawn from each run's generator)."""

    def __init__(self, task, algo, s: Seeds):
        super().__init__(task, algo)
        self._s = s

    @property
    def x_owner(self):
        owners = [v.task.x_owner for v in self._s.views]
        return None if owners[0] is None else self._s.pad(owners)

    def _sizes(self, k: str):
        n = [getattr(v.task, k) for v in self._s.views]
        return n[0] if len(set(n)) == 1 else Rate(n)

    @property
    def dx(self):  # the runs' own dimensions (what a round sends: Ledger.comm)
        return self._sizes("dx")

    @property
    def dy(self):
        return self._sizes("dy")

    def noise(self, gens, batch):
        from ..tasks.base import BilevelTask

        if type(self._task).noise is BilevelTask.noise:
            return batch
        views = self._s.views
        parts = [{k: v.chunk(len(views))[r] for k, v in batch.items()} for r in range(len(views))]
        outs = [v.task.noise(g, p) for v, g, p in zip(views, gens, parts, strict=True)]
        return {k: torch.cat([o[k] for o in outs]) for k in outs[0]}

    def lower_view(self, x, split):
        raise NotImplementedError("a task's lower view in a seed batch")


def stacked_seeds(views: Sequence[Any], hps: Sequence[Any]):
    """The batched algorithm of runs of several seeds, ``views`` each run's freshly built algorithm (its own data,
    task, generator and ledger), ``hps`` their hyperparameters: :func:`stacked` with each run's own initial
    ``batch.state``, its draws from each run's generator and its charges to each run's ledger."""
    b = stacked(views[0], hps)
    s = Seeds(views)
    b.seed_runs = s
    for k in type(b).batch.state:
        if getattr(views[0], k, None) is not None:
            setattr(b, k, s.pad([getattr(v, k) for v in views]))
    padded = {m for sizes in s.sizes for m in sizes}
    for k in type(b).batch.state:  # a padded size may not be a size all runs share (show could not tell them apart)
        if getattr(views[0], k, None) is not None and any(
                len(set(ns)) == 1 and ns[0] in padded for ns in zip(*(getattr(v, k).shape for v in views))):
            raise SeedsDiffer(f"{k} has a size all runs share that is also another state's padded size")
    b.fed = SeedFed(s, views[0].fed.participation)
    b.ledger = b.fed.ledger
    b.task = SeedTaskView(views[0].task, b, s)
    return b
