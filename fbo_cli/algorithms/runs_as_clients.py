"""The batched algorithm of a run batch (:mod:`fbo_cli.grids.run_batches`): the algorithm of R runs of one seed with
the run dimension folded into the client dimension (:func:`stacked`, :func:`show`, :func:`keep_runs`), the runs' float
hyperparameters (:class:`Rate`), the oracles that serve R runs from one draw (:class:`_RunOracles`) and the per-run
encodings (:class:`RunSplit`); docs/fidelity.md#batches. A batch of several seeds: :mod:`.seed_runs`; the
algorithms whose clients keep state between rounds: :mod:`.client_runs`.
"""

from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Sequence

import torch

from ..data.split import Split
from ..sim.blockstack import BlockStack
from ..sim.federation import same_bits
from .base import REBUILT

# --------------------------------------------------------------------------------------------------
# the float hyperparameters of R runs


class Rate:
    """One float hyperparameter of the R runs of a batch. Arithmetic with numbers (and other Rates) stays in
    Python floats, run by run, as each run computes it alone; times a tensor whose rows are run-major
    (``[R*k, ...]``: k rows per run) it becomes the column of the runs' values in the tensor's dtype, so that
    every element sees the very float32 number a run alone multiplies by (a Python scalar is rounded to the
    tensor's dtype the same way)."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, values: Sequence[float]):
        self.v = tuple(float(x) for x in values)
        self._cols: dict[tuple, torch.Tensor] = {}

    def __repr__(self) -> str:
        return f"Rate{self.v}"

    def select(self, keep: Sequence[int]) -> "Rate":
        return Rate([self.v[i] for i in keep])

    def col(self, t: torch.Tensor) -> torch.Tensor:
        R, N = len(self.v), t.shape[0]
        if N % R:
            raise ValueError(f"a tensor of {N} rows in a batch of {R} runs")
        key = (N, t.dim(), t.dtype, t.device)
        if key not in self._cols:
            c = torch.tensor(self.v, dtype=t.dtype, device=t.device).repeat_interleave(N // R)
            self._cols[key] = c.view(N, *[1] * (t.dim() - 1))
        return self._cols[key]

    def _op(self, other, f) -> Any:
        if isinstance(other, Rate):
            return Rate([f(a, b) for a, b in zip(self.v, other.v, strict=True)])
        if isinstance(other, torch.Tensor):
            return f(self.col(other), other)
        if not isinstance(other, numbers.Number):  # e.g. a BlockStack: its own operator takes the Rate
            return NotImplemented
        return Rate([f(a, other) for a in self.v])

    def _rop(self, other, f) -> Any:
        if isinstance(other, torch.Tensor):
            return f(other, self.col(other))
        if not isinstance(other, numbers.Number):
            return NotImplemented
        return Rate([f(other, a) for a in self.v])

    def __mul__(self, o):
        return self._op(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._rop(o, lambda a, b: a * b)

    def __add__(self, o):
        return self._op(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._rop(o, lambda a, b: a + b)

    def __sub__(self, o):
        return self._op(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._rop(o, lambda a, b: a - b)

    def __truediv__(self, o):
        return self._op(o, lambda a, b: a / b)

    def __rtruediv__(self, o):
        return self._rop(o, lambda a, b: a / b)

    def __neg__(self):
        return Rate([-a for a in self.v])

    def __eq__(self, o):  # True when every run's value equals o (e.g. storm's ``weight == 1.0``)
        return all(a == (o.v[i] if isinstance(o, Rate) else o) for i, a in enumerate(self.v))

    def __float__(self):
        raise TypeError("a hyperparameter that differs between the runs of a batch is used as one number; "
                        "list it in the algorithm's batch_fixed")


# --------------------------------------------------------------------------------------------------
# the oracles of R runs: each client's minibatch, drawn once, repeated for the runs


class _RunOracles:
    """A task's oracles for the batched algorithm. Each client's minibatch (``M`` rows) is drawn once for the R
    runs. A call whose tensors are all client-stacked ``[R*M, ...]`` (FedBiO's) is one call over the ``R*M``
    rows (*folded*): the batch's ``M``-row entries repeated R times, run-major (but those the task's oracles
    name in ``shared_keys``: hyper-cleaning's features, which its products share between the runs). Any other
    call (per-run globals ``[R, d]``, alone or beside stacked ones) is made run by run, each run's call exactly
    the call of the run alone (its rows, its global, the batch); the results are stacked back (``[R*M, ...]``,
    or ``[R, d]`` for the ``_mean`` oracles). But a call the oracles name in ``run_globals`` takes the per-run
    globals beside the stacked rows as they are, in one call (``runs`` set to R; hyper-cleaning's SVRG pair, every
    hyperrep oracle, means ``[R, d]``), and one in ``fold_globals`` is one call at each run's globals repeated for
    its M rows (a ``_mean``: then each run's mean); both where that gives the bits of the calls run by run
    (:func:`fbo_cli.sim.federation.same_bits`, checked on the first call of each shape). The placeholder of a
    loss that takes no x (``task.takes_x``) is passed as it is. A batch entry with ``R*M`` rows carries per-run
    values already (the features of an encoded split, :class:`RunSplit`)."""

    def __init__(self, inner, algo, takes_x: bool = True):
        self.o, self.algo, self.takes_x = inner, algo, takes_x

    def __getattr__(self, k):
        return getattr(self.o, k)

    def _call(self, name: str, batch, ts: list, put: Callable, mean: bool = False, tag=None):
        """``put(ts, batch)`` -> the inner call's arguments; ``ts`` the tensor arguments in order; ``tag``: argnum."""
        R, M = self.algo.runs, batch["w"].shape[0]
        if self.algo.seed_runs is not None:  # a seed batch's draws: each run's own rows, stacked run-major
            M //= R
        N = R * M
        blocks = any(isinstance(t, BlockStack) for t in ts)  # FedBiO's copies of x: stacked, always folded
        xs = ts if self.takes_x else ts[1:]  # the tensors the call reads
        glob = M > 1 and name in getattr(self.o, "run_globals", ())  # per-run globals [R, d] it takes
        def run_by_run():
            outs = []
            parts = [None if t.dim() < 2 else t.split(M) if t.shape[0] == N and M > 1 else rows_of(self.algo, t)
                     for t in ts]
            for r in range(R):
                tr = [t if rw is None else rw[r] for t, rw in zip(ts, parts)]
                br = batch if N == M else {k: (v[r * M:(r + 1) * M] if v.shape[0] == N else v)
                                           for k, v in batch.items()}
                outs.append(getattr(self.o, name)(*put(tr, br)))
            return torch.stack(outs) if mean else torch.cat(outs)

        if (R > 1 or blocks) and all(t.dim() >= 2 and t.shape[0] in ((N, R) if glob else (N,)) for t in xs) \
                and (glob or not mean and any(t.shape[0] == N for t in xs)):
            def fold():
                o = copy.copy(self.o)
                o.runs = R
                return getattr(o, name)(*put(ts, self._repeat(batch, R, N)))
            key = ("runs", name, tag, getattr(self.o.fn, "__name__", ""), *(tuple(t.shape) for t in ts),
                   tuple(batch["w"].shape), tuple(batch["X"].shape), ts[-1].dtype, ts[-1].device)
            # the clients' rows stacked (all but per-run globals or a placeholder): always the runs' bits
            return fold() if blocks or (self.takes_x and not glob) else same_bits(key, fold, run_by_run)

        if R > 1 and M > 1 and not blocks and name in getattr(self.o, "fold_globals", ()) \
                and all(t.dim() == 2 and t.shape[0] in (N, R) for t in ts):
            def folded():  # the client oracle at each run's globals repeated for its M rows (then each run's mean)
                tr = [t if t.shape[0] == N else t.repeat_interleave(M, 0) for t in ts]
                out = getattr(self.o, name.removesuffix("_mean"))(*put(tr, self._repeat(batch, R, N)))
                return out.unflatten(0, (R, M)).mean(1) if mean else out
            key = (name, *(tuple(t.shape) for t in ts), tuple(batch["w"].shape), ts[0].dtype, ts[0].device)
            return same_bits(key, folded, run_by_run)
        return run_by_run()

    def _repeat(self, batch, R: int, N: int):
        cache = self.algo._batch_cache
        shared = getattr(self.o, "shared_keys", ())  # entries the task's oracles take unrepeated (the features)
        hit = cache.get((id(batch), shared))
        if hit is None or hit[0] is not batch:
            rep = {k: (v if v.shape[0] == N or k in shared else v.repeat(R, *[1] * (v.dim() - 1)))
                   for k, v in batch.items()}
            if len(cache) > 16:
                cache.clear()
            cache[(id(batch), shared)] = hit = (batch, rep)
        return hit[1]

    def grad(self, argnum, a, b, batch):
        return self._call("grad", batch, [a, b], lambda t, bt: (argnum, t[0], t[1], bt), tag=argnum)

    def grads(self, a, b, batch):
        raise NotImplementedError("grads in a run batch")

    def svrg(self, a, b1, b0, batch):
        return self._call("svrg", batch, [a, b1, b0], lambda t, bt: (t[0], t[1], t[2], bt))

    def hvp(self, a, b, batch, v):
        return self._call("hvp", batch, [a, b, v], lambda t, bt: (t[0], t[1], bt, t[2]))

    def head_hvp(self, a, b, batch, v):
        return self._call("head_hvp", batch, [a, b, v], lambda t, bt: (t[0], t[1], bt, t[2]))

    def cross(self, a, b, batch, v):
        return self._call("cross", batch, [a, b, v], lambda t, bt: (t[0], t[1], bt, t[2]))

    def grad_mean(self, argnum, a, b, batch):
        return self._call("grad_mean", batch, [a, b], lambda t, bt: (argnum, t[0], t[1], bt), mean=True, tag=argnum)

    def hvp_mean(self, a, b, batch, v):
        return self._call("hvp_mean", batch, [a, b, v], lambda t, bt: (t[0], t[1], bt, t[2]), mean=True)

    def cross_mean(self, a, b, batch, v):
        return self._call("cross_mean", batch, [a, b, v], lambda t, bt: (t[0], t[1], bt, t[2]), mean=True)


@dataclass
class RunSplit(Split):
    """The split of ``M`` clients with per-run features: ``X [R*M, n, ...]`` (run-major; the lower view of R
    runs' upper variables), ``y``, ``mask`` and extras ``[M, n]`` of the clients. Its draws are those of the
    ``M``-client split (the random keys follow ``mask``); a batch carries ``X`` for the R runs."""

    runs: int = 1

    def _rows_X(self, pos, flat):  # flat: [M*b] positions, the same for every run
        X, (M, n) = self.X, self.mask.shape
        return X.reshape(self.runs, M * n, -1).index_select(1, flat).view(self.runs * M, pos.shape[1], *X.shape[2:])


def rows_of(algo, t: torch.Tensor) -> tuple:
    """Each run's global of a per-run global ``[R, d]``: the same view objects for the same unchanged tensor (the
    task's caches, e.g. hyperrep's encodings, know a variable by identity)."""
    cache = algo._rows_cache
    hit = cache.get(id(t))
    if hit is None or hit[0] is not t or hit[1] != t._version:
        while len(cache) >= 16:  # the oldest first
            cache.pop(next(iter(cache)))
        cache[id(t)] = hit = (t, t._version, t.unbind(0))
    return hit[2]


class TaskView:
    """The task as the batched algorithm sees it: the same task, its oracles wrapped in :class:`_RunOracles`,
    its lower view made run by run (a :class:`RunSplit` where the task encodes)."""

    def __init__(self, task, algo):
        self._task, self._algo = task, algo

    def __getattr__(self, k):
        return getattr(self._task, k)

    def oracles(self, fn):
        return _RunOracles(self._task.oracles(fn), self._algo, self._task.takes_x(fn))

    def lower_view(self, x, split):  # the task's lower view (its placeholder, g_enc) of the runs' x [R, dx]
        if not self._task.reuse:
            return self._task.lower_view(x, split)
        H = self._task.encode_runs(x, split.X)
        return x.new_zeros(0), self._task.g_enc, RunSplit(H, split.y, split.mask, split.extra, len(x))


def stacked(algo, hps: Sequence[Any]):
    """The batched copy of a freshly built ``algo`` for runs with hyperparameters ``hps`` (one seed): its
    ``batch.state`` carries a leading run dimension; the float hyperparameters that differ are Rates."""
    R = len(hps)
    b = copy.copy(algo)
    b.batched, b.runs = True, R
    b._batch_cache, b._rows_cache = {}, {}
    if hasattr(algo.task, "feat_keep"):  # hyperrep's encodings: the last few of every run
        algo.task.feat_keep = 3 * R
    b.task = TaskView(algo.task, b)
    b.hp = replace(hps[0], **{f.name: Rate([getattr(h, f.name) for h in hps]) for f in fields(hps[0])
                              if len({repr(getattr(h, f.name)) for h in hps}) > 1})
    for k in type(algo).batch.state:
        v = getattr(algo, k, None)
        if v is not None:
            setattr(b, k, v.unsqueeze(0).repeat(R, *[1] * v.dim()))
    return b


def run_hp(hp, r: int):
    """Run ``r``'s own hyperparameters from a batch's ``hp`` (each Rate read at r); a run alone's are ``hp``."""
    return replace(hp, **{f.name: v.v[r] for f in fields(hp) if isinstance(v := getattr(hp, f.name), Rate)})


def keep_runs(b, keep: list[int]) -> None:
    """Only the runs at positions ``keep`` stay in the batched algorithm ``b``."""
    idx = torch.tensor(keep, dtype=torch.long)
    for k in type(b).batch.state:
        v = getattr(b, k, None)
        if v is not None:
            setattr(b, k, v.index_select(0, idx.to(v.device)))
    b.hp = replace(b.hp, **{f.name: getattr(b.hp, f.name).select(keep) for f in fields(b.hp)
                            if isinstance(getattr(b.hp, f.name), Rate)})
    b.runs = len(keep)
    if b.seed_runs is not None:
        b.seed_runs.keep(keep)
    b._batch_cache.clear()
    b._rows_cache.clear()


def finite_runs(b) -> list[bool]:
    ok = torch.ones(b.runs, dtype=torch.bool)
    for k in type(b).batch.state:
        v = getattr(b, k, None)
        if v is not None:
            ok &= torch.isfinite(v.reshape(v.shape[0], -1)).all(1).cpu()  # [R, ...], [R] too
    return ok.tolist()


def show(b, view, pos: int, hp) -> None:
    """Write run ``pos`` of the batched ``b`` into ``view`` (the seed's algorithm as built alone), so that its
    ``evaluate()`` and a checkpoint of it are that run's."""
    for k in type(b).batch.state:
        v = getattr(b, k, None)
        setattr(view, k, None if v is None else v[pos].clone() if b.seed_runs is None else
                b.seed_runs.own(pos, v[pos]).clone())
    for k, v in vars(b).items():
        if k not in REBUILT and k not in ("runs", "batched") and isinstance(v, (bool, int, float)):
            setattr(view, k, v)
    view.hp = hp


def evaluate_runs(b, view, positions: Sequence[int], hps: Sequence[Any]) -> list[dict[str, float]]:
    """The metrics of the runs at ``positions`` of the batched ``b`` (``hps``: their hyperparameters), each what its
    run alone evaluates: in one pass where ``view`` scores the task's ``evaluate`` at a point (``eval_point``, then
    ``more_metrics`` run by run) and the task scores several points at once (``evaluate_runs``: hyper-cleaning and
    hfl, within float rounding, docs/fidelity.md#batches), else run by run (bit for bit)."""
    from .base import Algorithm

    fused = len(positions) > 1 and type(view).evaluate is Algorithm.evaluate and hasattr(view.task, "evaluate_runs")
    out = []
    for p, hp in zip(positions, hps, strict=True):
        show(b, view, p, hp)
        out.append(view.eval_point() if fused else view.evaluate())
    if not fused:
        return out
    ms = view.task.evaluate_runs(*zip(*out))
    for i, (p, hp) in enumerate(zip(positions, hps)):
        show(b, view, p, hp)
        ms[i] = view.more_metrics(ms[i])
    return ms
