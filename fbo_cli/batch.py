"""Run batches: R runs of one algorithm on one task that differ only in float hyperparameters (step sizes,
momentum weights, ...) and/or in the seed, stepped together in one process.

The runs of a batch that share their seed share everything but their float hyperparameters: the data
(the partition and the hyper-cleaning label noise are drawn from the seed), the task, the initial iterate
and every random draw (the client sets, minibatches and dropout masks do not depend on the iterate). They
form one *seed group*, stepped as one computation: the run dimension is folded into the client dimension,
so the client-stacked state ``[M, d]`` of a run alone becomes ``[R*M, d]`` (run-major), the global
iterates ``[d]`` become ``[R, d]`` (``Algorithm.batch_state``), the server's mean is a mean per run
(``Algorithm.cmean``), the float hyperparameters that differ are :class:`Rate` s (one number per run,
multiplied into a tensor as a ``[R*M, 1]`` column), and every minibatch is drawn once from the group's one
generator (what each run draws alone) and repeated for the R runs by the oracles (:class:`_RunOracles`).
The ledger is the group's (each run's own is equal to it: the same draws, the same charges).
The seed groups of a batch run one after the other in the same process.

Each run keeps its own run directory, written as the runner writes a run alone (``config.yaml``,
``metrics.csv`` at every evaluation, checkpoints every ``checkpoint_every`` outer iterations,
``summary.json`` last, through :func:`fbo_cli.runner.finish`), so reports, resume and ``fbo check`` work
unchanged above it. A run that diverges (the runner's rule, per run) ends there, its summary is written,
and its rows leave the batch; the others go on. A run already finished is reused; one with a checkpoint, or
whose directory another process holds, runs alone (:func:`fbo_cli.runner.execute`) after the batch.

What batches, and how close a batched run is to the same run alone: docs/fidelity.md ("Run batches").
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Sequence

import torch

from . import checkpoint as ckpt
from .config import RunConfig
from .data.split import Split
from .errors import UsageError
from .results import CHECKPOINT, make_dirs, remove_temp_files, run_lock, run_status, write_csv, write_yaml

AUTO_MAX = 16  # --batch auto: at most this many runs in one batch
BATCH: str | int = "auto"  # what run_cells groups by default (auto | off | R): `--batch` of tune and compare


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
        return Rate([f(a, other) for a in self.v])

    def _rop(self, other, f) -> Any:
        if isinstance(other, torch.Tensor):
            return f(other, self.col(other))
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
    rows (*folded*): the batch's ``M``-row entries repeated R times, run-major. Any other call (per-run
    globals ``[R, d]``, alone or beside stacked ones) is made run by run, each run's call exactly the call of
    the run alone (its rows, its global, the batch); the results are stacked back (``[R*M, ...]``, or ``[R, d]``
    for the ``_mean`` oracles). A batch entry with ``R*M`` rows carries per-run values already (the features of
    an encoded split, :class:`RunSplit`)."""

    def __init__(self, inner, algo):
        self.o, self.algo = inner, algo

    def __getattr__(self, k):
        return getattr(self.o, k)

    def _call(self, name: str, batch, ts: list, put: Callable, mean: bool = False):
        """``put(ts, batch)`` -> the inner call's arguments; ``ts`` the tensor arguments in order."""
        R, M = self.algo.runs, batch["w"].shape[0]
        N = R * M
        if R > 1 and all(t.dim() >= 2 and t.shape[0] == N for t in ts) and not mean:
            return getattr(self.o, name)(*put(ts, self._repeat(batch, R, N)))
        outs = []
        rows = [None if t.dim() < 2 else t.split(M) if t.shape[0] == N and M > 1 else rows_of(self.algo, t)
                for t in ts]
        for r in range(R):
            tr = [t if rw is None else rw[r] for t, rw in zip(ts, rows)]
            br = batch if N == M else {k: (v[r * M:(r + 1) * M] if v.shape[0] == N else v) for k, v in batch.items()}
            outs.append(getattr(self.o, name)(*put(tr, br)))
        return torch.stack(outs) if mean else torch.cat(outs)

    def _repeat(self, batch, R: int, N: int):
        cache = self.algo._batch_cache
        hit = cache.get(id(batch))
        if hit is None or hit[0] is not batch:
            rep = {k: (v if v.shape[0] == N else v.repeat(R, *[1] * (v.dim() - 1))) for k, v in batch.items()}
            if len(cache) > 16:
                cache.clear()
            cache[id(batch)] = hit = (batch, rep)
        return hit[1]

    def grad(self, argnum, a, b, batch):
        return self._call("grad", batch, [a, b], lambda t, bt: (argnum, t[0], t[1], bt))

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
        return self._call("grad_mean", batch, [a, b], lambda t, bt: (argnum, t[0], t[1], bt), mean=True)

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

    def _batch(self, pos, flat, m):
        M, n = self.mask.shape
        R, flat = self.runs, flat.reshape(-1)
        take = lambda t: t.reshape(M * n, -1).index_select(0, flat).view(*pos.shape, *t.shape[2:])  # noqa: E731
        w = m.to(self.X.dtype)
        w = w / w.sum(1, keepdim=True).clamp_(min=1)
        X = self.X.reshape(R, M * n, -1).index_select(1, flat).view(R * M, pos.shape[1], *self.X.shape[2:])
        out = {"X": X, "y": take(self.y), "w": w}
        out.update({k: take(v) for k, v in self.extra.items()})
        return out


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


class _TaskView:
    """The task as the batched algorithm sees it: the same task, its oracles wrapped in :class:`_RunOracles`,
    its lower view made run by run (a :class:`RunSplit` where the task encodes)."""

    def __init__(self, task, algo):
        self._task, self._algo = task, algo

    def __getattr__(self, k):
        return getattr(self._task, k)

    def oracles(self, fn):
        return _RunOracles(self._task.oracles(fn), self._algo)

    def lower_view(self, x, split):
        if not self._task.reuse:
            return self._task.lower_view(x, split)
        views = [self._task.lower_view(xr, split) for xr in rows_of(self._algo, x)]
        a, fn, _ = views[0]
        return a, fn, RunSplit(torch.cat([v[2].X for v in views]), split.y, split.mask, split.extra, len(views))


def stacked(algo, hps: Sequence[Any]):
    """The batched copy of a freshly built ``algo`` for runs with hyperparameters ``hps`` (one seed): its
    ``batch_state`` carries a leading run dimension; the float hyperparameters that differ are Rates."""
    R = len(hps)
    b = copy.copy(algo)
    b.batched, b.runs = True, R
    b._batch_cache, b._rows_cache = {}, {}
    if hasattr(algo.task, "feat_keep"):  # hyperrep's encodings: the last few of every run
        algo.task.feat_keep = 3 * R
    b.task = _TaskView(algo.task, b)
    b.hp = replace(hps[0], **{f.name: Rate([getattr(h, f.name) for h in hps]) for f in fields(hps[0])
                              if len({repr(getattr(h, f.name)) for h in hps}) > 1})
    for k in type(algo).batch_state:
        v = getattr(algo, k, None)
        if v is not None:
            setattr(b, k, v.unsqueeze(0).repeat(R, *[1] * v.dim()))
    return b


def keep_runs(b, keep: list[int]) -> None:
    """Only the runs at positions ``keep`` stay in the batched algorithm ``b``."""
    idx = torch.tensor(keep, dtype=torch.long)
    for k in type(b).batch_state:
        v = getattr(b, k, None)
        if v is not None:
            setattr(b, k, v.index_select(0, idx.to(v.device)))
    b.hp = replace(b.hp, **{f.name: getattr(b.hp, f.name).select(keep) for f in fields(b.hp)
                            if isinstance(getattr(b.hp, f.name), Rate)})
    b.runs = len(keep)
    b._batch_cache.clear()
    b._rows_cache.clear()


def finite_runs(b) -> list[bool]:
    ok = torch.ones(b.runs, dtype=torch.bool)
    for k in type(b).batch_state:
        v = getattr(b, k, None)
        if v is not None:
            ok &= torch.isfinite(v.flatten(1)).all(1).cpu()
    return ok.tolist()


def show(b, view, pos: int, hp) -> None:
    """Write run ``pos`` of the batched ``b`` into ``view`` (the seed's algorithm as built alone), so that its
    ``evaluate()`` and a checkpoint of it are that run's."""
    for k in type(b).batch_state:
        v = getattr(b, k, None)
        setattr(view, k, None if v is None else v[pos].clone())
    for k, v in vars(b).items():
        if k not in ckpt.REBUILT and k not in ("runs", "batched") and isinstance(v, (bool, int, float)):
            setattr(view, k, v)
    view.hp = hp


# --------------------------------------------------------------------------------------------------
# grouping


def batchable(cfg: RunConfig) -> bool:
    cls = cfg.entry.cls
    return bool(getattr(cls, "batches", False)) and cls.can_batch(cfg.hp)


def _key(cfg: RunConfig) -> str:
    """What the runs of one batch share: everything but the free float hyperparameters."""
    d = cfg.as_dict()
    fixed = set(cfg.entry.cls.batch_fixed)
    d["hp"] = {k: (v if (k in fixed or not isinstance(v, float)) else "<float>") for k, v in d["hp"].items()}
    return json.dumps(d, sort_keys=True, default=str)


def parse_batch(batch: str | int) -> str | int:
    """``auto``, ``off`` or a positive integer R (``--batch``)."""
    s = str(batch).strip().lower()
    if s in ("auto", "off"):
        return s
    try:
        r = int(s)
    except ValueError:
        r = 0
    if r < 1:
        raise UsageError(f"--batch must be auto, off or a positive number of runs; got {batch!r}")
    return r


def use_batch(batch: str | int) -> None:
    """``--batch`` of ``fbo tune`` and ``fbo compare``: the grouping every executor uses from now on."""
    global BATCH
    BATCH = parse_batch(batch)


def group_batches(configs: Sequence[RunConfig], batch: str | int = "auto") -> list[list[int]]:
    """The indices of ``configs`` in batches: runs of an algorithm that batches, with the same seed, task, data
    settings and integer/string hyperparameters (differing only in float hyperparameters) go together, at most
    R per batch (``auto``: :data:`AUTO_MAX`; ``off`` or 1: every run alone). A batch holds one seed: the runs
    of a seed share their draws, those of two seeds nothing (their data differ), so two seeds are two tasks
    an executor may run in parallel (:func:`execute_batch` itself takes runs of several seeds, one seed group
    after the other). The batches come in the order of their first run."""
    batch = parse_batch(batch)
    cap = 1 if batch == "off" else AUTO_MAX if batch == "auto" else batch
    classes: dict[str, list[int]] = {}
    out: list[tuple[int, list[int]]] = []
    for i, c in enumerate(configs):
        if cap == 1 or not batchable(c):
            out.append((i, [i]))
        else:
            classes.setdefault(_key(c), []).append(i)
    for idx in classes.values():
        for j in range(0, len(idx), cap):
            chunk = idx[j:j + cap]
            out.append((min(chunk), chunk))
    return [g for _, g in sorted(out)]


# --------------------------------------------------------------------------------------------------
# execution


@dataclass
class _Run:
    cfg: RunConfig
    note: Callable
    rows: list = field(default_factory=list)
    train_time: float = 0.0
    eval_time: float = 0.0
    summary: dict | None = None


def execute_batch(cfgs: Sequence[RunConfig], reuse: bool = True, fresh: bool = False, wait: bool = True,
                  log: Callable[[str], None] | None = None,
                  on_eval: Callable[[int, dict], None] | None = None) -> list[dict]:
    """Run ``cfgs`` (runs of one batch, :func:`group_batches`) and return their summaries, in order. A run that
    fails, or is interrupted, raises as :func:`fbo_cli.runner.execute` does once the batch has written every
    run's record (a bug: each run's ``summary.json`` says ``failed``)."""
    from .provenance import stale_reason
    from .runner import RunBusy, _run_log, execute

    out: list[dict | None] = [None] * len(cfgs)
    alone: list[int] = []
    if len(cfgs) == 1 or not all(batchable(c) for c in cfgs):
        alone = list(range(len(cfgs)))
    with contextlib.ExitStack() as held:
        todo: list[int] = []
        for i, c in enumerate(cfgs):
            if i in alone:
                continue
            make_dirs(c.run_dir)
            if not held.enter_context(run_lock(c.run_dir, wait=False)):
                alone.append(i)
                continue
            state, summary, why = run_status(c.run_dir)
            if reuse and state == "finished" and summary.get("status") in ("done", "diverged") \
                    and not stale_reason(c, summary):
                out[i] = {**summary, "reused": True}
                continue
            if not fresh and (c.run_dir / CHECKPOINT).is_file():
                alone.append(i)  # resumes from its checkpoint, alone
                continue
            todo.append(i)
        by_seed: dict[int, list[int]] = {}
        for i in todo:
            by_seed.setdefault(cfgs[i].run.seed, []).append(i)
        for idx in by_seed.values():
            if len(idx) == 1:  # nothing to share: the run alone
                alone.append(idx[0])
                continue
            runs = []
            for i in idx:
                note = held.enter_context(_run_log(cfgs[i].run_dir, log))
                (cfgs[i].run_dir / CHECKPOINT).unlink(missing_ok=True)
                note(f"start: {cfgs[i].task}/{cfgs[i].algo} {cfgs[i].run_id} (in a batch of {len(todo)} runs, "
                     f"{len(idx)} of seed {cfgs[i].run.seed} stepped together)", show=False)
                runs.append(_Run(cfgs[i], note))
            emit = (lambda k, row, idx=idx: on_eval(idx[k], row)) if on_eval else None
            for i, s in zip(idx, _run_group(runs, emit), strict=True):
                out[i] = s
    for i in sorted(alone):
        try:
            out[i] = execute(cfgs[i], reuse=reuse, fresh=fresh, wait=wait, log=log)
        except RunBusy:
            out[i] = {"status": "busy"}
    return out  # type: ignore[return-value]


def _run_group(runs: list[_Run], on_eval) -> list[dict]:
    """Step the runs of one seed to the end of their budget (:func:`fbo_cli.runner._loop`, run by run)."""
    from .runner import Interrupted, _save_checkpoint, _Stop, _StopNow, build, diverged, finish

    cfg0 = runs[0].cfg
    r = cfg0.run
    for run in runs:
        remove_temp_files(run.cfg.run_dir)
        (run.cfg.run_dir / "summary.json").unlink(missing_ok=True)
    bt = build(cfg0)
    view, led = bt.algo, bt.ledger
    base = ckpt.baseline(view)
    algo = stacked(view, [run.cfg.hp for run in runs])
    for run in runs:
        write_yaml(run.cfg.run_dir / "config.yaml", {**run.cfg.as_dict(), "device_used": str(bt.device)})
    active = list(range(len(runs)))  # the runs still in the batch; position p holds run active[p]

    def evaluate(k: int) -> dict:
        run = runs[k]
        show(algo, view, active.index(k), run.cfg.hp)
        t0 = time.perf_counter()
        m = view.evaluate()
        run.eval_time += time.perf_counter() - t0
        row = {**led.as_dict(), "train_time": round(run.train_time, 4), **m}
        run.rows.append(row)
        write_csv(run.cfg.run_dir / "metrics.csv", run.rows)
        if on_eval:
            on_eval(k, row)
        return row

    def save(k: int) -> None:
        run = runs[k]
        show(algo, view, active.index(k), run.cfg.hp)
        _save_checkpoint(run.cfg.run_dir / CHECKPOINT, run.cfg, bt, base, run.rows, run.train_time, run.eval_time)

    def end(k: int, status: str, why: str | None = None, failure: Exception | None = None) -> None:
        run = runs[k]
        try:
            run.summary = finish(run.cfg, run.rows, status, why, failure, led, view.rounds_per_iteration(),
                                 run.train_time, run.eval_time, bt.device, True)
        except Exception:  # the failure, raised again after its record is written
            run.summary = {"status": "failed", "error": f"{type(failure).__name__}: {failure}"}
        run.note(f"end: {status}" + (f" ({why})" if why else "") + f", {led.rounds} rounds", show=False)

    def drop(gone: dict[int, str]) -> None:
        for k, why in gone.items():
            end(k, "diverged", why)
        keep = [p for p, k in enumerate(active) if k not in gone]
        active[:] = [active[p] for p in keep]
        if active:
            keep_runs(algo, keep)

    with _Stop() as stop:
        try:
            first = {k: evaluate(k) for k in active}
            while active and led.rounds < r.rounds:
                if r.max_iters is not None and led.iterations >= r.max_iters:
                    break
                if r.time_limit is not None and runs[active[0]].train_time >= r.time_limit:
                    break
                t0 = time.perf_counter()
                algo.step()
                led.iterations += 1
                ok = finite_runs(algo)
                dt = (time.perf_counter() - t0) / len(active)  # each run's share of the batch's time
                for k in active:
                    runs[k].train_time += dt
                gone = {k: "the iterate has NaN/inf entries" for p, k in enumerate(active) if not ok[p]}
                if led.iterations % r.eval_every == 0:
                    for k in active:
                        if k not in gone and (why := diverged(evaluate(k), first[k])):
                            gone[k] = why
                if gone:
                    drop(gone)
                if stop.flag:
                    for k in active:
                        save(k)
                    raise Interrupted(runs[active[0]].cfg.run_dir if active else cfg0.run_dir, led.iterations)
                if led.iterations % r.checkpoint_every == 0:
                    for k in active:
                        save(k)
            for k in active:
                if runs[k].rows[-1]["iterations"] != led.iterations:
                    evaluate(k)
            for k in list(active):
                end(k, "done")
        except Interrupted:
            raise
        except _StopNow:
            raise Interrupted(cfg0.run_dir, led.iterations, now=True) from None
        except Exception as e:  # a bug: every run still in the batch records it, then it propagates
            for k in active:
                if runs[k].summary is None:
                    end(k, "failed", failure=e)
            raise
    return [run.summary for run in runs]  # type: ignore[misc]
