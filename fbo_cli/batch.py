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
from .errors import UsageError
from .results import CHECKPOINT, make_dirs, remove_temp_files, run_lock, run_status, write_csv, write_yaml

AUTO_MAX = 16  # --batch auto: at most this many runs in one batch


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
    """A task's oracles for the batched algorithm: batches of ``M`` client rows are repeated R times (run-major),
    per-run globals ``[R, d]`` spread to ``[R*M, d]``; the ``_mean`` oracles give per-run means ``[R, d]``."""

    def __init__(self, inner, algo):
        self.o, self.algo = inner, algo

    def __getattr__(self, k):
        return getattr(self.o, k)

    def _fit(self, batch, *ts):
        R, M = self.algo.runs, batch["w"].shape[0]
        N = R * M
        cache = self.algo._batch_cache
        hit = cache.get(id(batch))
        if hit is None or hit[0] is not batch:
            rep = {k: v.repeat(R, *[1] * (v.dim() - 1)) for k, v in batch.items()}
            if len(cache) > 16:
                cache.clear()
            cache[id(batch)] = hit = (batch, rep)
        out = [t if t.dim() < 2 or t.shape[0] == N else t.repeat_interleave(M, 0) for t in ts]
        return hit[1], out

    def _means(self, t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(0, (self.algo.runs, -1)).mean(1)

    def grad(self, argnum, a, b, batch):
        batch, (a, b) = self._fit(batch, a, b)
        return self.o.grad(argnum, a, b, batch)

    def grads(self, a, b, batch):
        batch, (a, b) = self._fit(batch, a, b)
        return self.o.grads(a, b, batch)

    def svrg(self, a, b1, b0, batch):
        batch, (a, b1, b0) = self._fit(batch, a, b1, b0)
        return self.o.svrg(a, b1, b0, batch)

    def hvp(self, a, b, batch, v):
        batch, (a, b, v) = self._fit(batch, a, b, v)
        return self.o.hvp(a, b, batch, v)

    def head_hvp(self, a, b, batch, v):
        batch, (a, b, v) = self._fit(batch, a, b, v)
        return self.o.head_hvp(a, b, batch, v)

    def cross(self, a, b, batch, v):
        batch, (a, b, v) = self._fit(batch, a, b, v)
        return self.o.cross(a, b, batch, v)

    def grad_mean(self, argnum, a, b, batch):
        return self._means(self.grad(argnum, a, b, batch))

    def hvp_mean(self, a, b, batch, v):
        return self._means(self.hvp(a, b, batch, v))

    def cross_mean(self, a, b, batch, v):
        return self._means(self.cross(a, b, batch, v))


class _TaskView:
    """The task as the batched algorithm sees it: the same task, its oracles wrapped in :class:`_RunOracles`."""

    def __init__(self, task, algo):
        self._task, self._algo = task, algo

    def __getattr__(self, k):
        return getattr(self._task, k)

    def oracles(self, fn):
        return _RunOracles(self._task.oracles(fn), self._algo)


def stacked(algo, hps: Sequence[Any]):
    """The batched copy of a freshly built ``algo`` for runs with hyperparameters ``hps`` (one seed): its
    ``batch_state`` carries a leading run dimension; the float hyperparameters that differ are Rates."""
    R = len(hps)
    b = copy.copy(algo)
    b.runs = R
    b._batch_cache = {}
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
        if k not in ckpt.REBUILT and k != "runs" and isinstance(v, (bool, int, float)):
            setattr(view, k, v)
    view.hp = hp


# --------------------------------------------------------------------------------------------------
# grouping


def batchable(cfg: RunConfig) -> bool:
    return bool(getattr(cfg.entry.cls, "batches", False))


def _key(cfg: RunConfig) -> str:
    """What the runs of one batch share: everything but the seed and the free float hyperparameters."""
    d = cfg.as_dict()
    d.pop("seed")
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


def group_batches(configs: Sequence[RunConfig], batch: str | int = "auto") -> list[list[int]]:
    """The indices of ``configs`` in batches: runs of an algorithm that batches, with the same task, data
    settings and integer/string hyperparameters (differing only in float hyperparameters and/or seed) go
    together, at most R per batch (``auto``: :data:`AUTO_MAX`; ``off`` or 1: every run alone); within a batch
    the runs of one seed stand together. The batches come in the order of their first run."""
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
        idx = sorted(idx, key=lambda i: (configs[i].run.seed, i))
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
            runs = []
            for i in idx:
                note = held.enter_context(_run_log(cfgs[i].run_dir, log))
                (cfgs[i].run_dir / CHECKPOINT).unlink(missing_ok=True)
                note(f"start: {cfgs[i].task}/{cfgs[i].algo} {cfgs[i].run_id} (in a batch of {len(idx)} "
                     f"runs of seed {cfgs[i].run.seed})", show=False)
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
