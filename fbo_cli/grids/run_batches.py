"""Run batches: R runs of one algorithm on one task that differ only in float hyperparameters (step sizes,
momentum weights, ...) and/or in the seed, stepped together in one process.

The runs of a batch that share their seed share everything but their float hyperparameters: the data
(the partition and the hyper-cleaning label noise are drawn from the seed), the task, the initial iterate
and every random draw (the client sets, minibatches and dropout masks do not depend on the iterate). They
form one *seed group*, stepped as one computation: the run dimension is folded into the client dimension,
so the client-stacked state ``[M, d]`` of a run alone becomes ``[R*M, d]`` (run-major), the global
iterates ``[d]`` become ``[R, d]`` (``Algorithm.batch.state``), the server's mean is a mean per run
(``Algorithm.cmean``), the float hyperparameters that differ are :class:`Rate` s (one number per run,
multiplied into a tensor as a ``[R*M, 1]`` column), and every minibatch is drawn once from the group's one
generator (what each run draws alone) and repeated for the R runs by the oracles
(:mod:`fbo_cli.algorithms.runs_as_clients`).
The ledger is the group's (each run's own is equal to it: the same draws, the same charges).
The seed groups of a batch run one after the other in the same process.

A seed group steps in the one run loop (:func:`fbo_cli.runs.loop.run`, :class:`~fbo_cli.runs.loop.Stacked`), the
loop of a run alone, so each run keeps its own run directory written as a run alone's (``config.yaml``,
``metrics.csv`` at every evaluation, checkpoints every ``checkpoint_every`` outer iterations,
``summary.json`` last), and reports, resume and ``fbo check`` work
unchanged above it. A run that diverges (the loop's rule, per run) ends there, its summary is written,
and its rows leave the batch; the others go on. A run already finished is reused; the runs of one seed that
hold checkpoints of one iteration resume as a batch (:mod:`fbo_cli.grids.batch_resume`); another with a
checkpoint, or one whose directory another process holds, runs alone (:func:`fbo_cli.runs.runner.execute`)
after the batch. A user's class batches only once its batch is shown equal to its runs alone
(:mod:`fbo_cli.grids.batch_check`).

What batches, and how close a batched run is to the same run alone: docs/fidelity.md#batches ("Run batches").
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import json
import textwrap
from pathlib import Path
from typing import Callable, Sequence

from ..algorithms.batching import says
from ..algorithms.runs_as_clients import stacked
from ..algorithms.seed_runs import SeedsDiffer, stacked_seeds
from ..errors import UsageError
from ..runs import checkpoint as ckpt
from ..runs import loop
from ..runs.config import RunConfig
from ..runs.cost import evidence_roots
from ..runs.loop import Interrupted, Member, Stacked, run_log
from ..runs.rundir import RunDir, make_dirs
from .batch_resume import ResumeApart, put_states, restore_runs

AUTO_MAX = 16  # --batch auto: at most this many runs in one batch

# --------------------------------------------------------------------------------------------------
# grouping


def batchable(cfg: RunConfig) -> bool:
    cls = cfg.entry.cls
    return cls.batch.on and cls.can_batch(cfg.hp) and state_refusal(cls) is None


def _self_writes(node: ast.AST) -> set[str]:
    """The attributes of ``self`` that one statement or call writes: ``self.a = ...``, ``self.a += ...``,
    ``self.a[i] = ...``, ``self.a.mul_(...)`` (an in-place op); ``setattr(self, ...)``: ``'?'``."""
    def attr(t):
        if isinstance(t, ast.Subscript):
            t = t.value
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
            return t.attr
        return None

    targets: list = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id == "setattr" and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id == "self":
            return {"?"}
        if isinstance(f, ast.Attribute) and f.attr.endswith("_") and not f.attr.endswith("__"):
            targets = [f.value]
    flat = []
    for t in targets:
        flat.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
    return {a for a in map(attr, flat) if a}


@functools.lru_cache(maxsize=64)
def state_refusal(cls: type) -> str | None:
    """Why runs of a user's algorithm (a class outside fbo) may not step in a run batch, or None. A batch carries
    per run only the attributes ``batch.state`` names (:func:`fbo_cli.algorithms.runs_as_clients.stacked`; a
    checkpoint of a batched run holds them and nothing else of its own), so a user's class batches only when every
    attribute its own methods write after ``__init__`` is declared there, and when it writes attributes at all, its
    class declares its state itself (``batch``, or the old ``batch_state``:
    :func:`fbo_cli.algorithms.batching.says`; what ``__init__`` computes from a float hyperparameter would be the
    first run's in every run). A class that writes none (a changed step rule, ``outer_lr``) batches as its parent
    does. What is found by reading the source of the user's classes (``self.a = ...``, ``self.a += ...``,
    ``self.a[i] = ...``, ``self.a.mul_(...)``, ``setattr``)."""
    user = [c for c in cls.__mro__ if c is not object and not c.__module__.startswith("fbo_cli")]
    if not user or not cls.batch.on:
        return None
    writes: dict[str, set[str]] = {}
    for c in user:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(c)))
        except (OSError, TypeError, SyntaxError):
            return f"the source of {c.__name__} cannot be read, so its per-run state cannot be checked"
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    for a in _self_writes(node):
                        writes.setdefault(a, set()).add(fn.name)
    if not writes:
        return None
    if "?" in writes:
        return "it sets attributes with setattr(self, ...), so its per-run state cannot be checked"
    declared = set(cls.batch.state)
    if not any(says(c, "state") for c in user):
        names = ", ".join(f"self.{a}" for a in sorted(writes))
        return (f"it keeps state of its own ({names}) and declares no batch_state; a run batch carries per run "
                f"only batch_state (declare it, e.g. batch_state = {cls.__mro__[len(user)].__name__}.batch_state "
                f"+ (\"{sorted(writes)[0]}\",), to batch it)")
    missing = sorted(a for a, where in writes.items() if where - {"__init__"} and a not in declared)
    if missing:
        return (f"its methods write {', '.join(f'self.{a}' for a in missing)}, which its batch_state "
                f"({', '.join(cls.batch.state)}) does not declare")
    return None


def seeds_batch(cfg: RunConfig) -> bool:
    """Whether runs like ``cfg`` of other seeds may step in its batch (a seed batch: each run its own data,
    generator and ledger, :func:`fbo_cli.algorithms.seed_runs.stacked_seeds`). A user's subclass batches seeds
    only where it says so itself (``batch`` or ``batch_seeds`` in its class body): its step may read the seed's data
    some other way."""
    cls = cfg.entry.cls
    user = [c for c in cls.__mro__ if c is not object and not c.__module__.startswith("fbo_cli")]
    if user and not any(says(c, "seeds") for c in user):
        return False
    return batchable(cfg) and cls.can_batch_seeds(cfg.hp, cfg.run)


def seeds_line(cls: type) -> str:
    """What ``fbo show`` says of an algorithm's seeds in run batches."""
    if not cls.batch.on:
        return "run batches: none (its runs run alone)"
    if cls.batch.seeds is True:
        return ("run batches: float steps of one seed, and the seeds of a cell in one batch where every client takes "
                "part in every round (each run its own data and draws, bit for bit the run alone): with --batch R, "
                f"and with --batch auto where the batch bench measured a gain of at least {AUTO_SEEDS_MIN}x")
    return f"run batches: float steps of one seed; its seeds never share a batch: {cls.batch.seeds}"


AUTO_SEEDS_MIN = 1.2  # --batch auto: seeds share a batch where the batch bench measured at least this step ratio


def seeds_gain(cfg: RunConfig, roots: tuple | None = None) -> tuple[bool, str]:
    """Whether ``--batch auto`` steps runs like ``cfg`` of several seeds in one batch, and why: where the batch bench
    of the run's device (docs/results/bench/batch.csv, its cuda/ table on a GPU) measured R seeds in one batch at
    least :data:`AUTO_SEEDS_MIN` times faster than one by one. On a CPU a seed batch shares no work between its
    runs (each run draws and gathers its own minibatches; the products fold but do not shrink), so it gains only
    the calls' overhead, and two seeds alone are two tasks ``--jobs`` runs in parallel; on a GPU, whose small steps
    are launch-bound, the folded step is the gain (not measured there yet: batched, tests/gpu_batch_check.sh)."""
    import torch

    if not seeds_batch(cfg):
        return False, "the algorithm does not batch seeds here"
    dev = cfg.run.device
    cuda = dev.startswith("cuda") or (dev == "auto" and torch.cuda.is_available())
    speed = batch_speedups(tuple(str(r) for r in (evidence_roots() if roots is None else roots)),
                           BATCH_BENCH_CUDA if cuda else BATCH_BENCH)
    ratio = speed.get((cfg.task, cfg.algo), (0, 0.0, 0.0, None))[3]
    if ratio is None:
        return cuda, ("no seed batch measured on a GPU: batched (launch-bound steps)" if cuda else
                      "no seed batch measured on a CPU: seeds one after the other or in parallel")
    where = "GPU" if cuda else "CPU"
    return ratio >= AUTO_SEEDS_MIN, f"the batch bench measured {ratio:g}x for a seed batch on a {where}"


def _key(cfg: RunConfig, seeds: bool = False) -> str:
    """What the runs of one batch share: everything but the free float hyperparameters (and with ``seeds``, the
    seed: :func:`seeds_batch`)."""
    d = cfg.as_dict()
    fixed = set(cfg.entry.cls.batch.fixed)
    d["hp"] = {k: (v if (k in fixed or not isinstance(v, float)) else "<float>") for k, v in d["hp"].items()}
    if seeds:
        d["seed"] = "<seed>"
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
        raise UsageError(f"--batch must be auto, off or a positive number of runs; got {batch!r}",
                         kind="bad_value", field="--batch", value=batch)
    return r


def group_batches(configs: Sequence[RunConfig], batch: str | int = "auto", roots: tuple | None = None
                  ) -> list[list[int]]:
    """The indices of ``configs`` in batches: runs of an algorithm that batches, with the same seed, task, data
    settings and integer/string hyperparameters (differing only in float hyperparameters) go together, at most
    R per batch (``auto``: :data:`AUTO_MAX`, and only runs whose algorithm gains from it, ``auto_batch``;
    ``off`` or 1: every run alone). A batch holds one seed, but where the algorithm batches seeds
    (:func:`seeds_batch`: then the seeds of a cell step together, each run with its own data and draws) and
    ``batch`` is R, or ``auto`` where a seed batch gains on the run's device (:func:`seeds_gain`, from the batch
    bench's tables under ``roots``, default the evidence's): the runs
    of a seed share their draws, those of two seeds nothing (their data differ), so two seeds are otherwise two
    tasks an executor may run in parallel (:func:`execute_batch` itself takes runs of several seeds, one seed group
    after the other). The batches come in the order of their first run."""
    batch = parse_batch(batch)
    cap = 1 if batch == "off" else AUTO_MAX if batch == "auto" else batch
    classes: dict[str, list[int]] = {}
    out: list[tuple[int, list[int]]] = []
    for i, c in enumerate(configs):
        if cap == 1 or not batchable(c) or (batch == "auto" and not c.entry.cls.auto_batch(c.hp, c.task)):
            out.append((i, [i]))
        else:
            seeds = seeds_batch(c) and (batch != "auto" or seeds_gain(c, roots)[0])
            classes.setdefault(_key(c, seeds), []).append(i)
    for idx in classes.values():
        for j in range(0, len(idx), cap):
            chunk = idx[j:j + cap]
            out.append((min(chunk), chunk))
    return [g for _, g in sorted(out)]


# --------------------------------------------------------------------------------------------------
# what a batch costs (``fbo cost``, the cost lines of tune and compare)

# the batch bench's table (`fbo bench --batch R --out docs/results/bench`), under the evidence roots; on a GPU its
# CUDA table (`fbo bench --batch 64 --device cuda --out docs/results/bench/cuda`: an H100, tests/gpu_batch_check.sh)
BATCH_BENCH = Path("bench") / "batch.csv"
BATCH_BENCH_CUDA = Path("bench") / "cuda" / "batch.csv"


@functools.lru_cache(maxsize=8)
def batch_speedups(roots: tuple[str, ...], table: Path = BATCH_BENCH
                   ) -> dict[tuple[str, str], tuple[int, float, float, float | None]]:
    """(task, algorithm) -> (R, the ratio of the training step of R runs one by one to the same R runs as one
    batch, the same ratio of their evaluations, the step ratio of R seeds in one batch or None where not measured)
    of the batch bench's CPU cases (``batch.csv`` under ``roots``, the first that has one; a table without the
    batch's evaluation times: evaluations as alone)."""
    import csv

    for root in roots:
        f = Path(root) / table
        if f.is_file():
            out = {}
            for row in csv.DictReader(f.read_text().splitlines()):
                try:
                    ev = float(row["s_eval"]) / float(row["s_eval_batched_per_run"]) \
                        if row.get("s_eval_batched_per_run") else 1.0
                    seeds = float(row["seeds_step_ratio"]) if row.get("seeds_step_ratio") else None
                    out.setdefault((row["task"], row["algo"]), (int(row["R"]), float(row["step_ratio"]), ev, seeds))
                except (KeyError, ValueError, TypeError, ZeroDivisionError):
                    continue
            return out
    return {}


def batch_share(n: int, R: int, ratio: float) -> float:
    """The training time of a run stepped in a batch of ``n`` runs, as a share of its time alone, from the
    bench's ``ratio`` at ``R`` runs: a batch's step costs ``s + p n`` (a part ``s`` shared by its runs, a part
    ``p`` per run; ``s + p`` = 1, the run alone), fitted to ``(s + p R) / R = 1 / ratio``; no gain is assumed
    beyond the ``R`` measured (``n`` above it counts as ``R``)."""
    if n < 2 or R < 2 or ratio <= 0:
        return 1.0
    s = (1 - 1 / ratio) / (1 - 1 / R)
    return s / min(n, R) + (1 - s)


def cost_shares(cells: Sequence, batch: str | int, roots: tuple[Path, ...] | None = None,
                device: str | None = None) -> list[tuple[float, float]]:
    """Per cell, the shares of its training and of its evaluation time alone that it costs when ``cells`` run with
    ``--batch batch`` (grouped as the executors group them, :func:`group_batches`): :func:`batch_share` from the
    batch bench of its (task, algorithm) on ``device`` (cpu or cuda; default: this machine's), none measured: no
    gain. A batch of several seeds is priced by the bench's seeds column (its evaluations run by run), or where that
    was not measured as its seeds' groups one after the other."""
    import torch

    shares = [(1.0, 1.0)] * len(cells)
    if not cells or parse_batch(batch) == "off":
        return shares
    cuda = (device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    speed = batch_speedups(tuple(str(r) for r in (evidence_roots() if roots is None else roots)),
                           BATCH_BENCH_CUDA if cuda else BATCH_BENCH)
    for g in group_batches([c.cfg for c in cells], batch, roots):
        R, step, ev, seeds = speed.get((cells[g[0]].cfg.task, cells[g[0]].cfg.algo), (1, 1.0, 1.0, None))
        by_seed: dict[int, list[int]] = {}
        for i in g:
            by_seed.setdefault(cells[i].cfg.run.seed, []).append(i)
        if len(by_seed) > 1 and seeds:
            for i in g:
                shares[i] = (batch_share(len(g), R, seeds), 1.0)
            continue
        for part in by_seed.values():
            for i in part:
                shares[i] = (batch_share(len(part), R, step), batch_share(len(part), R, ev))
    return shares


# --------------------------------------------------------------------------------------------------
# execution


def execute_batch(cfgs: Sequence[RunConfig], reuse: bool = True, fresh: bool = False, wait: bool = True,
                  log: Callable[[str], None] | None = None,
                  on_eval: Callable[[int, dict], None] | None = None) -> list[dict]:
    """Run ``cfgs`` (runs of one batch, :func:`group_batches`) and return their summaries, in order. One run's
    failure never fails its partners: when a batched step raises, the runs still in the batch run again alone
    from round 0, where each fails or finishes on its own; a run that fails alone is a ``failed`` summary (with
    its ``error``; its ``summary.json`` records it) and the others go on. An interruption raises
    (:class:`fbo_cli.runs.runner.Interrupted`) once every run's checkpoint is written."""
    from ..runs.identity import stale_reason
    from ..runs.runner import RunBusy, execute
    from .batch_check import refusal

    out: list[dict | None] = [None] * len(cfgs)
    alone: list[int] = []
    again: set[int] = set()  # runs of a batch that failed, run again alone
    back: list[int] = []  # runs with a checkpoint
    dirs: dict[int, RunDir] = {}
    if len(cfgs) == 1 or not all(batchable(c) for c in cfgs):
        alone = list(range(len(cfgs)))
    with contextlib.ExitStack() as held:
        todo: list[int] = []
        for i, c in enumerate(cfgs):
            if i in alone:
                continue
            make_dirs(c.run_dir)
            rd = dirs[i] = RunDir(c.run_dir)  # its state read once, under the lock
            if not held.enter_context(rd.lock(wait=False)):
                alone.append(i)
                continue
            st = rd.state()
            if reuse and st.ended and not stale_reason(c, st.summary):
                out[i] = {**st.summary, "reused": True}
                continue
            if not fresh and rd.checkpoint.is_file():  # resumes from its checkpoint: with the runs of
                if seeds_batch(c):  # its seed as a batch (batch_resume), alone where the algorithm batches seeds
                    alone.append(i)
                else:
                    back.append(i)
                continue
            todo.append(i)
        by_seed: dict[int | str | tuple, list[int]] = {}
        for i in todo:  # a seed group: the runs of one seed, or of every seed where the algorithm batches seeds
            by_seed.setdefault("seeds" if seeds_batch(cfgs[i]) else cfgs[i].run.seed, []).append(i)
        for i in back:
            by_seed.setdefault(("resume", cfgs[i].run.seed), []).append(i)
        for key, idx in by_seed.items():
            if len(idx) == 1:  # nothing to share: the run alone
                alone.append(idx[0])
                continue
            # a user's class: its batch shown equal to its runs alone
            if why := refusal([cfgs[i] for i in idx], execute_batch):
                for i in idx:
                    with run_log(cfgs[i].run_dir, log) as note:
                        note(f"{cfgs[i].algo}: {why}")
                alone.extend(idx)
                continue
            runs = []
            seeds = sorted({cfgs[i].run.seed for i in idx})
            which = f"of seed {seeds[0]}" if len(seeds) == 1 else f"of seeds {', '.join(map(str, seeds))}"
            resume = isinstance(key, tuple)
            for i in idx:
                note = held.enter_context(run_log(cfgs[i].run_dir, log))
                rd = dirs[i]
                if not resume:
                    rd.drop_checkpoint()
                note(f"{'resume' if resume else 'start'}: {cfgs[i].task}/{cfgs[i].algo} {cfgs[i].run_id} (in a batch "
                     f"of {len(idx) if resume else len(todo)} runs, {len(idx)} {which} stepped together)", show=False)
                runs.append(Member(cfgs[i], rd, note=note))
            groups = [(idx, runs)]
            while groups:
                idx, runs = groups.pop(0)
                emit = (lambda k, row, idx=idx: on_eval(idx[k], row)) if on_eval else None
                try:
                    done = run_group(runs, emit, resume)
                except ResumeApart as e:  # their checkpoints resume alone
                    for run in runs:
                        run.note(f"resumes alone ({e})", show=False)
                    alone.extend(idx)
                    continue
                except SeedsDiffer as e:  # one seed after the other
                    by = {}
                    for i, run in zip(idx, runs):
                        by.setdefault(run.cfg.run.seed, []).append((i, run))
                    for run in runs:  # from round 0 (a checkpoint the seed batch wrote goes)
                        run.note(f"its seeds step one after the other ({e})", show=False)
                        run.rundir.drop_checkpoint()
                    groups[:0] = [([i for i, _ in g], [run for _, run in g]) for g in by.values() if len(g) > 1]
                    alone.extend(g[0][0] for g in by.values() if len(g) == 1)
                    continue
                for i, s in zip(idx, done, strict=True):
                    if s is None:  # the batch failed: this run again alone, from round 0 (its failure is its own)
                        alone.append(i)
                        again.add(i)
                    else:
                        out[i] = s
    for i in sorted(alone):
        try:
            out[i] = execute(cfgs[i], reuse=reuse, fresh=fresh or i in again, wait=wait, log=log)
        except RunBusy:
            out[i] = {"status": "busy"}
        except Interrupted:
            raise
        except UsageError as e:
            out[i] = {"status": "failed", "error": str(e)}
        except Exception as e:  # recorded in its summary.json (failed); the other runs go on
            out[i] = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    return out  # type: ignore[return-value]


def run_group(runs: list[Member], on_eval, resume: bool = False) -> list[dict | None]:
    """Step the runs of one seed group to the end of their budget: the run loop (:func:`fbo_cli.runs.loop.run`)
    with the group stacked as one algorithm (:class:`fbo_cli.runs.loop.Stacked`); a run still in the batch when a
    step raised is ``None`` (to run again alone). Runs of one seed share one build (its data, generator and
    ledger); runs of several seeds (a seed batch) are each built as alone and evaluated each by its own build."""
    from ..runs.runner import build

    for k, run in enumerate(runs):
        run.rundir.begin()
        run.rows, run.train_time, run.eval_time = [], 0.0, 0.0
        run.on_eval = (lambda row, k=k: on_eval(k, row)) if on_eval else None
    seeds = len({run.cfg.run.seed for run in runs}) > 1
    bts = [build(run.cfg) for run in runs] if seeds else [build(runs[0].cfg)] * len(runs)
    bt, view = bts[0], bts[0].algo
    bases = [ckpt.baseline(b.algo) for b in bts] if seeds else [ckpt.baseline(view)] * len(runs)
    hps = [run.cfg.hp for run in runs]
    back = restore_runs(runs, bt) if resume and not seeds else None  # each run's checkpoint: (states, iteration)
    algo = stacked_seeds([b.algo for b in bts], hps) if seeds else stacked(view, hps)
    if back:
        put_states(algo, back[0])
    for run in runs:
        run.rundir.write_config(run.cfg, bt.device)
    return loop.run(runs, Stacked(algo, view, algo.ledger if seeds else bt.ledger, bts, bases, hps, seeds,
                                  back[1] if back else None))
