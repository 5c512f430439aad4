"""The runner: builds a run from its config, steps the algorithm until the budget is spent, evaluates it
by :mod:`fbo_cli.runs.schedule` (``eval_every``, or a grid of ``eval_rounds``), and writes the run directory.

Divergence rule: a run stops with status ``diverged`` (keeping its rows) when its iterate or a
metric becomes NaN/inf, or when a loss it reports (every metric named ``*loss``) exceeds
``DIVERGED_FACTOR`` (1000) times ``max(its first evaluation, 1)``.

Checkpoints: every ``checkpoint_every`` outer iterations, and when SIGINT/SIGTERM arrive, the run
writes ``checkpoint.pt`` (the algorithm's evolving state, see :mod:`fbo_cli.runs.checkpoint`, the
generator states, the ledger, the metric rows and the timers) atomically. ``execute`` on a run with
a checkpoint continues from it, and the resumed run's ``metrics.csv`` is bit for bit the
uninterrupted run's on the CPU (timing columns aside). ``summary.json`` is written last, as the
completion record (see :mod:`fbo_cli.runs.rundir`); the checkpoint is then removed unless
``keep_checkpoint`` (a finished run is reused from its metrics, so the checkpoint would only take
disk space).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
import os
import platform
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import __version__
from ..algorithms.base import FederationView
from ..data import build_federated, load_dataset
from ..errors import UsageError
from ..sim.federation import Ledger
from ..tasks import TASKS
from . import checkpoint as ckpt
from .config import RunConfig
from .identity import fingerprint
from .ledger_check import LedgerError, check_rounds  # noqa: F401  (LedgerError: the run loop's, imported from here)
from .rundir import (
    CHECKPOINT,
    ENDINGS,
    atomic_write,
    ended,
    file_sha256,
    make_dirs,
    plot_run,
    prune_empty_run,
    remove_temp_files,
    run_lock,
    run_status,
    write_csv,
    write_json,
    write_yaml,
)
from .schedule import evaluation_due
from .table import read_columns


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("device 'cuda' requested but no CUDA device is available; use --device cpu or auto")
    return torch.device(name)


@dataclass
class Built:
    cfg: RunConfig
    task: Any
    algo: Any
    ledger: Ledger
    device: torch.device


@functools.cache
def keep_freed_memory() -> bool:
    """Keep the memory a step frees for the next step: glibc's malloc then serves every block from its heap (no
    block gets a mapping of its own) and keeps the heap's free top up to 2 GB instead of handing it back to the OS.
    A step allocates and frees the same large tensors every time (a batch's ``[R*M, d]`` client copies: tens of
    MB; glibc maps blocks above 32 MB always, smaller ones by a threshold it moves), and by default each such
    block comes back from the OS page by page, one page fault per 4 KB, on every step: without that Fig. 6's CNN
    steps 1.6x faster and FedBiO-Local's batch of 8 on hyperrep 1.7x (docs/fidelity.md#batches, "Memory").
    The process keeps its peak memory; where memory is kept changes no number. Once per process (every run's
    ``build``); False where the C library is not glibc (nothing changes there)."""
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def build(cfg: RunConfig) -> Built:
    """Data, task and algorithm of a run, seeded (everything but the loop)."""
    r = cfg.run
    keep_freed_memory()
    if r.threads:
        torch.set_num_threads(r.threads)
    device = pick_device(r.device)
    torch.manual_seed(r.seed)
    ds = load_dataset(r.dataset, r.data_dir, r.download)
    data = build_federated(ds, r.partition, r.clients, r.seed, device, r.val_frac, r.alpha, r.shards_per_client,
                           r.heldout_frac)
    if TASKS[cfg.task].client_major:
        data = data.client_major()
    task = TASKS[cfg.task](cfg.task_params, data)
    gen = torch.Generator(device=device).manual_seed(r.seed)
    ledger = Ledger()
    algo = cfg.entry.cls.__new__(cfg.entry.cls)
    algo.name = cfg.algo  # the registry key is the name, also in the messages __init__ may raise
    algo.__init__(task, cfg.hp, FederationView(data, r.participation, gen, ledger))
    return Built(cfg, task, algo, ledger, device)


DIVERGED_FACTOR = 1e3


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived during a run; its checkpoint is written (``now``: a second signal stopped the
    run inside an outer iteration; its last checkpoint stays, and the run resumes from there)."""

    def __init__(self, run_dir, iteration: int, now: bool = False):
        super().__init__(f"stopped inside outer iteration {iteration + 1}; the last checkpoint in {run_dir} stays; "
                         "run the same command again to continue from it" if now else
                         f"interrupted at outer iteration {iteration}; checkpoint written in {run_dir}; "
                         "run the same command again to continue")
        self.iteration = iteration


class _StopNow(BaseException):
    """A second SIGINT/SIGTERM while the first waits for the outer iteration to end: stop at once."""


class RunBusy(UsageError):
    """Another process holds the run directory's lock."""


def _finite(algo) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in algo.state().values())


def diverged(row: dict[str, Any], first: dict[str, Any]) -> str | None:
    """Why this evaluation row shows a diverged run (None if it does not)."""
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            return f"{k} is {v}"
    for k, v in row.items():
        f0 = first.get(k)
        if k.endswith("loss") and isinstance(v, float) and isinstance(f0, float) and math.isfinite(f0):
            if v > DIVERGED_FACTOR * max(f0, 1.0):
                return f"{k} = {v:.4g} > {DIVERGED_FACTOR:g} x max(initial {f0:.4g}, 1)"
    return None


class _Flag:
    """A flag a signal handler may set: a plain attribute, no lock (a ``threading.Event`` takes a lock
    that the interrupted code may hold)."""

    def __init__(self):
        self.on = False

    def set(self) -> None:
        self.on = True

    def clear(self) -> None:
        self.on = False

    def is_set(self) -> bool:
        return self.on


STOP = _Flag()
"""Set by SIGINT/SIGTERM during a run, and by a SIGINT that arrives before a run's loop has taken the
signal over (a Ray worker's task installs a handler that sets it, since Ray delivers its gentle
cancel as SIGINT): the loop stops at its next check."""


class _Stop:
    """SIGINT/SIGTERM set a flag the loop checks after each outer iteration (main thread only); a second one
    while the flag is set stops the run at once, inside its iteration (:class:`_StopNow`): a long outer
    iteration never holds Ctrl-C hostage."""

    def __init__(self):
        self.old: dict[int, Any] = {}
        self.signum: int | None = None
        self.answered = False  # the loop saw the flag (and stops the run itself)

    @property
    def flag(self) -> bool:
        self.answered = self.answered or STOP.is_set()
        return self.answered

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, self._set)
        return self

    def _set(self, signum, frame):
        if STOP.is_set():
            raise _StopNow
        STOP.set()
        self.signum = signum
        with contextlib.suppress(OSError):
            os.write(2, b"stopping after this outer iteration (its checkpoint is written); again to stop now\n")

    def __exit__(self, exc_type, *exc):
        for sig, h in self.old.items():
            signal.signal(sig, h)
        unanswered = STOP.is_set() and not self.answered and exc_type is None and self.signum is not None
        STOP.clear()  # this run has answered it, or
        if unanswered:  # it came after the loop's last look (the last evaluation, a batch's summaries): the
            signal.raise_signal(self.signum)  # handler outside the run has it (the command stops, exit 130)


def execute(cfg: RunConfig, on_eval: Callable[[dict[str, Any]], None] | None = None, write: bool = True,
            reuse: bool = False, wait: bool = True, log: Callable[[str], None] | None = None,
            fresh: bool = False) -> dict:
    """Run to the end of the budget, resuming from ``checkpoint.pt`` when there is one. Returns the
    summary (also written to ``summary.json``).

    Holds the run directory's lock while it runs: ``wait`` False raises :class:`RunBusy` when another
    process holds it. ``reuse``: a finished run (checked under the lock) is not run again; its summary
    is returned. ``fresh``: start from round 0 even when there is a checkpoint. SIGINT/SIGTERM write the
    checkpoint, then raise :class:`Interrupted`."""
    if not write:
        return _execute(cfg, on_eval, False, log)
    try:
        return _execute_locked(cfg, on_eval, reuse, wait, log, fresh)
    except RunBusy:
        raise
    except UsageError:
        prune_empty_run(cfg.run_dir)
        raise


def _execute_locked(cfg: RunConfig, on_eval, reuse: bool, wait: bool, log, fresh: bool) -> dict:
    run_dir = cfg.run_dir
    with run_lock(run_dir, wait=wait) as got:
        if not got:
            raise RunBusy(f"run directory {run_dir} is in use by another fbo process")
        state, summary, why = run_status(run_dir)
        stale = None
        if reuse and ended(state, summary):
            from .identity import stale_reason

            stale = stale_reason(cfg, summary)
            if not stale:
                return {**summary, "reused": True}
        with _run_log(run_dir, log) as note:
            if state == "corrupt":
                note(f"{run_dir}: {why}; running it again")
            if stale:
                note(f"{run_dir}: {stale}; running it again")
                fresh = True
            if fresh:
                (run_dir / CHECKPOINT).unlink(missing_ok=True)
            note(f"start: {cfg.task}/{cfg.algo} {cfg.run_id}", show=False)
            try:
                s = _execute(cfg, on_eval, True, note)
            except Interrupted as e:
                note(str(e))
                raise
            except UsageError:  # bad input found while building: nothing of this attempt stays
                if not (run_dir / "metrics.csv").exists():
                    (run_dir / "run.log").unlink(missing_ok=True)
                raise
            except Exception as e:
                note(f"failed: {type(e).__name__}: {e}")
                raise
            note(f"end: {s['status']}" + (f" ({s['diverged_because']})" if s.get("diverged_because") else "")
                 + f", {s['ledger']['rounds']} rounds, final {s['metric']} {s['final']}", show=False)
            return s


class _LogFile(logging.FileHandler):
    """run.log's handler: a write that fails (a full disk) fails the run, as any other write of it does,
    instead of logging's "--- Logging error ---" traceback on stderr and a log with lines missing."""

    def handleError(self, record) -> None:
        raise  # noqa: PLE0704  (called inside emit's except: the OSError)


@contextlib.contextmanager
def _run_log(run_dir, log: Callable[[str], None] | None):
    """A ``note(msg)`` that logs to ``run_dir/run.log`` (appended, timestamped, through :mod:`logging`)
    and passes the message on to ``log`` (the CLI prints it)."""
    logger = logging.getLogger(f"fbo.run.{run_dir.name}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        handler = _LogFile(run_dir / "run.log", encoding="utf-8")
    except OSError as e:  # an existing run directory we may not write to
        raise UsageError(f"cannot write {run_dir / 'run.log'}: {e.strerror or e}") from None
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)

    def note(msg: str, show: bool = True) -> None:
        logger.info(msg)
        if log and show:
            log(msg)

    try:
        yield note
    finally:
        logger.removeHandler(handler)
        handler.close()


def _code_key(cfg: RunConfig) -> str:
    """One string for the algorithm's and the task's code (a checkpoint of other code is not resumed)."""
    import json

    c = cfg.code
    return json.dumps([c["algorithm"], c["task"]], sort_keys=True)


def _save_checkpoint(path, cfg, b: Built, base, rows, train_time, eval_time) -> None:
    buf = io.BytesIO()
    torch.save({"run_id": cfg.run_id, "fbo": __version__, "code": _code_key(cfg), "algo": ckpt.snapshot(b.algo, base),
                "gen": b.algo.fed.gen.get_state(), "torch_rng": torch.get_rng_state(),
                "ledger": b.ledger.as_dict(), "rows": rows, "train_time": train_time, "eval_time": eval_time}, buf)
    atomic_write(path, buf.getvalue())


CHECKPOINT_KEYS = {"run_id": str, "fbo": str, "algo": dict, "gen": torch.Tensor, "torch_rng": torch.Tensor,
                   "ledger": dict, "rows": list, "train_time": (int, float), "eval_time": (int, float)}


def _load_checkpoint(path, cfg, b: Built) -> tuple[dict | None, str]:
    """(the checkpoint, '') after restoring it into ``b``; (None, why) when it is from another run or
    version (left alone), or (None, 'malformed: ...') when it is not a checkpoint of ours. Loading
    executes nothing: ``weights_only=True`` reads tensors and plain containers only."""
    try:
        c = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = (str(e).splitlines() or [""])[0][:120]  # an empty file's error has no text
        return None, f"malformed: not a readable fbo checkpoint ({type(e).__name__}: {first})"
    if not isinstance(c, dict):
        return None, "malformed: not a mapping"
    if c.get("run_id") != cfg.run_id or c.get("fbo") != __version__:
        return None, f"from another run or fbo version (run_id {c.get('run_id')!r}, fbo {c.get('fbo')!r})"
    if c.get("code", _code_key(cfg)) != _code_key(cfg):
        return None, "made by another version of the algorithm's or the task's code"
    bad = [k for k, t in CHECKPOINT_KEYS.items() if not isinstance(c.get(k), t)]
    if bad or not all(isinstance(r, dict) for r in c["rows"]):
        return None, f"malformed: missing or mistyped {', '.join(bad) or 'rows'}"
    try:
        ckpt.restore(b.algo, c["algo"], b.device)
        b.algo.fed.gen.set_state(c["gen"])
        torch.set_rng_state(c["torch_rng"])
        for k, v in c["ledger"].items():
            if not hasattr(b.ledger, k):
                raise KeyError(k)
            setattr(b.ledger, k, v)
    except Exception as e:  # a shape, a class, a key that does not fit this run's objects
        what = str(e).splitlines()[0][:120] if str(e) else ""
        return None, f"malformed: does not fit this run ({type(e).__name__}: {what})"
    return c, ""


def _execute(cfg: RunConfig, on_eval, write: bool, log) -> dict:
    r = cfg.run
    run_dir = cfg.run_dir
    ck_path = run_dir / CHECKPOINT
    if write:
        make_dirs(run_dir)
        remove_temp_files(run_dir)  # what a killed atomic write left behind (we hold the lock)
        (run_dir / "summary.json").unlink(missing_ok=True)  # no summary may vouch for this attempt's metrics
    b = build(cfg)
    algo, led = b.algo, b.ledger
    base = ckpt.baseline(algo)
    rows: list[dict[str, Any]] = []
    train_time = eval_time = 0.0
    resumed = None
    if write and ck_path.is_file():
        c, why = _load_checkpoint(ck_path, cfg, b)
        if c is None:
            if why.startswith("malformed"):  # moved aside, so that no later run trips on it again
                os.replace(ck_path, run_dir / "checkpoint.bad")
                why += f"; moved to {run_dir / 'checkpoint.bad'}"
            if log:
                log(f"{ck_path}: {why}; starting from round 0")
            b = build(cfg)  # a failed restore may have written into the objects: build them again
            algo, led = b.algo, b.ledger
            base = ckpt.baseline(algo)
        else:
            rows, train_time, eval_time = list(c["rows"]), c["train_time"], c["eval_time"]
            resumed = led.iterations
            if log:
                log(f"resuming {run_dir} from its checkpoint at outer iteration {led.iterations} "
                    f"(round {led.rounds})")
    if write:
        write_yaml(run_dir / "config.yaml", {**cfg.as_dict(), "device_used": str(b.device)})
        if rows:
            write_csv(run_dir / "metrics.csv", rows)
    if on_eval and rows:
        on_eval(rows[-1])

    def evaluate() -> dict[str, Any]:
        nonlocal eval_time
        t0 = time.perf_counter()
        m = algo.evaluate()
        eval_time += time.perf_counter() - t0
        row = {**led.as_dict(), "train_time": round(train_time, 4), **m}
        rows.append(row)
        if write:
            write_csv(run_dir / "metrics.csv", rows)
        if on_eval:
            on_eval(row)
        return row

    def save() -> None:
        if write:
            _save_checkpoint(ck_path, cfg, b, base, rows, train_time, eval_time)

    failure: Exception | None = None
    why: str | None = None

    def add_time(dt: float) -> None:
        nonlocal train_time
        train_time += dt

    with _Stop() as stop:
        try:
            if not rows:
                evaluate()
            status, why = _loop(algo, led, r, evaluate, add_time, lambda: train_time, rows, save, stop)
            if status == "done" and rows[-1]["iterations"] != led.iterations:
                evaluate()
        except Interrupted:
            raise
        except _StopNow:  # inside an iteration: its state is half-updated, so no checkpoint of it
            raise Interrupted(run_dir, led.iterations, now=True) from None
        except Exception as e:  # a bug, not bad input: record it in summary.json, then let it propagate
            status, failure = "failed", e
    if status == "interrupted":
        save()
        raise Interrupted(run_dir, led.iterations)

    return finish(cfg, rows, status, why, failure, led, algo.rounds_per_iteration(), train_time, eval_time,
                  b.device, write, resumed)


def finish(cfg: RunConfig, rows: list[dict], status: str, why: str | None, failure: Exception | None, led: Ledger,
           rounds_per_iteration: int | None, train_time: float, eval_time: float, device, write: bool,
           resumed: int | None = None, batch_runs: int | None = None) -> dict:
    """The run's summary from its rows, and (``write``) its final ``metrics.csv``, ``curves.png`` and
    ``summary.json`` (last); raises ``failure`` after writing it. One run alone and the runs of a batch
    (:mod:`fbo_cli.grids.run_batches`; ``batch_runs``: how many stepped together, its times its share) end here."""
    r, run_dir, metric = cfg.run, cfg.run_dir, TASKS[cfg.task].metric
    ck_path = run_dir / CHECKPOINT
    import pandas as pd

    df = pd.DataFrame(rows) if rows else pd.DataFrame({"rounds": [], metric: []})
    cols = read_columns(df, metric, r.target, r.rounds)
    summary = {
        "task": cfg.task, "algo": cfg.algo, "label": cfg.entry.label or cfg.algo, "run_id": cfg.run_id,
        "status": status, "seed": r.seed, "dataset": r.dataset, "partition": r.partition,
        "metric": metric,
        **{k: cols[k] for k in ("final", "best", "final_mean_last5")},
        "target": r.target,
        **{k: cols[k] for k in ("rounds_to_target", "rounds_to_target_low")},
        "eval_rounds": r.eval_rounds,
        "rounds_per_iteration": rounds_per_iteration,
        "ledger": led.as_dict(),
        "train_time_s": round(train_time, 3), "eval_time_s": round(eval_time, 3),
        "seconds_per_round": round(train_time / max(led.rounds, 1), 5),
        "device": str(device),
        "versions": {"fbo": __version__, "torch": torch.__version__, "python": platform.python_version()},
        "machine": ({"gpu": torch.cuda.get_device_name(torch.device(device))} if str(device).startswith("cuda")
                    else fingerprint()),
        "code": cfg.code,
    }
    if resumed is not None:
        summary["resumed_from_iteration"] = resumed
    if batch_runs:
        summary["batch_runs"] = batch_runs
    if why:
        summary["diverged_because"] = why
    if failure is not None:
        summary["error"] = f"{type(failure).__name__}: {failure}"
    if write:
        write_csv(run_dir / "metrics.csv", rows)
        if rows:
            title = f"{summary['label']} on {cfg.task}/{r.dataset} ({r.partition}, seed {r.seed})"
            plot_run(run_dir / "curves.png", df, title, metric)
        summary["metrics_sha256"] = file_sha256(run_dir / "metrics.csv")
        write_json(run_dir / "summary.json", summary)  # the completion record: last
        if not r.keep_checkpoint and status in ENDINGS:
            ck_path.unlink(missing_ok=True)  # a failed run keeps its last good checkpoint
    if failure is not None:
        raise failure
    return summary


def budget_left(r, led: Ledger, train_time: float) -> bool:
    """Whether a run (or a run batch, by its common ledger) takes another outer iteration: rounds, iterations
    (``max_iters``) and training time (``time_limit``) are all left."""
    return (led.rounds < r.rounds and (r.max_iters is None or led.iterations < r.max_iters)
            and (r.time_limit is None or train_time < r.time_limit))


def _loop(algo, led: Ledger, r, evaluate: Callable[[], dict], add_time: Callable[[float], None],
          train_time: Callable[[], float], rows: list[dict], save: Callable[[], None],
          stop: _Stop) -> tuple[str, str | None]:
    """Step until a budget is spent, evaluating by :func:`fbo_cli.runs.schedule.evaluation_due` (``rows``: the
    run's evaluations so far); returns the status (``done``, ``diverged`` or ``interrupted``) and, for ``diverged``,
    why."""
    while budget_left(r, led, train_time()):
        t0, before = time.perf_counter(), led.rounds
        algo.step()
        led.iterations += 1
        check_rounds(algo, led, before)
        ok = _finite(algo)
        add_time(time.perf_counter() - t0)
        if not ok:
            return "diverged", "the iterate has NaN/inf entries"
        if evaluation_due(r, led, rows[-1]["rounds"], algo.rounds_per_iteration()):
            why = diverged(evaluate(), rows[0])
            if why:
                return "diverged", why
        if stop.flag:
            return "interrupted", None
        if led.iterations % r.checkpoint_every == 0:
            save()
    return "done", None
