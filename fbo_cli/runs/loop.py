"""The run loop: one loop for R >= 1 runs. A run alone is a batch of one.

:func:`run` steps a list of :class:`Member` s (each a run: its config, its :class:`~fbo_cli.runs.rundir.RunDir`, its
rows and timers) with an adapter, :class:`Steps` (a run alone: its algorithm) or :class:`Stacked` (the runs of a
batch stepped as one algorithm, :mod:`fbo_cli.algorithms.runs_as_clients`). The rules exist here once, checked
after each outer iteration in this order: the budget (:func:`budget_left`), the ledger
(:func:`~fbo_cli.runs.ledger_check.check_rounds`), NaN/inf in a run's iterate, the evaluation
(:func:`~fbo_cli.runs.schedule.evaluation_due`) and divergence against the run's first row (:func:`diverged`: the
run ends there, ``diverged``, and leaves the batch), the stop signal (SIGINT/SIGTERM: each run's checkpoint, then
:class:`Interrupted`; a second signal inside an iteration: :class:`StopNow`, no checkpoint of a half-updated
state), the periodic checkpoint (every ``checkpoint_every`` outer iterations), and at the end the final evaluation
and each run's completion record (:meth:`~fbo_cli.runs.rundir.RunDir.finish`). The adapter says only how the
runs step, are checked for NaN/inf, evaluated, shown for a checkpoint, dropped, and what a failure does: a run
alone records it and raises it; a batch sends its runs still in it back to run alone from round 0
(:mod:`fbo_cli.grids.run_batches`).

Divergence rule: a run stops with status ``diverged`` (keeping its rows) when its iterate or a metric becomes
NaN/inf, or when a loss it reports (every metric named ``*loss``) exceeds ``DIVERGED_FACTOR`` (1000) times
``max(its first evaluation, 1)``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import platform
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import __version__
from ..algorithms.runs_as_clients import evaluate_runs, finite_runs, keep_runs, show
from ..algorithms.seed_runs import SeedsDiffer
from ..errors import UsageError
from ..sim.federation import Ledger
from ..tasks import TASKS
from .config import RunConfig
from .identity import fingerprint
from .ledger_check import check_rounds
from .rundir import RunDir
from .schedule import evaluation_due
from .table import read_columns

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


class StopNow(BaseException):
    """A second SIGINT/SIGTERM while the first waits for the outer iteration to end: stop at once."""


class Flag:
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


STOP = Flag()
"""Set by SIGINT/SIGTERM during a run, and by a SIGINT that arrives before a run's loop has taken the
signal over (a Ray worker's task installs a handler that sets it, since Ray delivers its gentle
cancel as SIGINT): the loop stops at its next check."""


class Stop:
    """SIGINT/SIGTERM set a flag the loop checks after each outer iteration (main thread only); a second one
    while the flag is set stops the run at once, inside its iteration (:class:`StopNow`): a long outer
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
            raise StopNow
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


class LogFile(logging.FileHandler):
    """run.log's handler: a write that fails (a full disk) fails the run, as any other write of it does,
    instead of logging's "--- Logging error ---" traceback on stderr and a log with lines missing."""

    def handleError(self, record) -> None:
        raise  # noqa: PLE0704  (called inside emit's except: the OSError)


@contextlib.contextmanager
def run_log(run_dir, log: Callable[[str], None] | None):
    """A ``note(msg, show=True)`` that logs to ``run_dir/run.log`` (appended, timestamped, through :mod:`logging`)
    and passes the message on to ``log`` (the CLI prints it); a run alone and the runs of a batch write it."""
    logger = logging.getLogger(f"fbo.run.{run_dir.name}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        handler = LogFile(run_dir / "run.log", encoding="utf-8")
    except OSError as e:  # an existing run directory we may not write to
        raise UsageError(f"cannot write {run_dir / 'run.log'}: {e.strerror or e}", kind="unwritable",
                         field="permission" if isinstance(e, PermissionError) else "os", path=run_dir / "run.log",
                         value=e.errno) from None
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


def budget_left(r, led: Ledger, train_time: float) -> bool:
    """Whether a run (or a run batch, by its common ledger) takes another outer iteration: rounds, iterations
    (``max_iters``) and training time (``time_limit``) are all left."""
    return (led.rounds < r.rounds and (r.max_iters is None or led.iterations < r.max_iters)
            and (r.time_limit is None or train_time < r.time_limit))


@dataclass
class Member:
    """One run of the loop: its config and directory, its evaluations so far (resumed ones too), its timers, the
    callbacks of its evaluations (``on_eval(row)``) and of its run log (``note``), and its summary once it ends."""

    cfg: RunConfig
    rundir: RunDir
    on_eval: Callable[[dict], None] | None = None
    note: Callable | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    train_time: float = 0.0
    eval_time: float = 0.0
    summary: dict | None = None


class Steps:
    """The loop's adapter for a run alone (a batch of one): ``algo`` steps; ``view`` (the plain algorithm) answers
    the ledger check and ``rounds_per_iteration``; ``led`` is the ledger the budget reads; ``builds[k]`` and
    ``bases[k]`` are member k's build (its ledger, device, the algorithm its checkpoint snapshots) and checkpoint
    baseline. ``active`` (set by :func:`run`): the members still stepping, position p holding member active[p]."""

    passthrough: tuple[type[BaseException], ...] = ()  # exceptions the loop lets through as they are
    batch_runs: int | None = None

    def __init__(self, b, base, resumed: int | None = None):
        self.algo = self.view = b.algo
        self.led = b.ledger
        self.builds, self.bases, self.resumed = [b], [base], resumed
        self.active: list[int] = [0]

    def finite(self) -> list[bool]:
        """Per position: its iterate has no NaN/inf entry."""
        return [all(bool(torch.isfinite(t).all()) for t in self.algo.state().values())]

    def evaluate(self, ks: list[int]) -> list[dict[str, float]]:
        return [self.algo.evaluate()]

    def show(self, k: int) -> None:
        """Put member k's state into ``builds[k].algo`` (what its checkpoint snapshots): alone it is there."""

    def keep(self, positions: list[int]) -> None:
        """Only the runs at ``positions`` step on."""

    def end(self, members: list[Member], k: int, status: str, why: str | None = None,
            failure: Exception | None = None) -> None:
        """Member k's completion record (:func:`finish`; ``failure``: recorded, then raised)."""
        m, b = members[k], self.builds[k]
        m.summary = finish(m, status, why, failure, b.ledger, self.view.rounds_per_iteration(), b.device,
                           self.resumed, self.batch_runs)

    def failed(self, members: list[Member], e: Exception) -> list[dict | None]:
        """A step, an evaluation or a checkpoint raised: a run alone is ``failed`` (recorded, then raised)."""
        self.end(members, 0, "failed", None, e)
        return [members[0].summary]

    def drop(self, members: list[Member], gone: dict[int, str]) -> None:
        """The members ``gone`` diverged (why): each ends, and the others step on."""
        for k, why in gone.items():
            self.end(members, k, "diverged", why)
        keep = [p for p, k in enumerate(self.active) if k not in gone]
        self.active[:] = [self.active[p] for p in keep]
        if self.active:
            self.keep(keep)

    def save(self, members: list[Member], k: int) -> None:
        m = members[k]
        self.show(k)
        m.rundir.save_checkpoint(m.cfg, self.builds[k], self.bases[k], m.rows, m.train_time, m.eval_time)


class Stacked(Steps):
    """The adapter for the runs of a batch stepped as one algorithm (``algo``, :func:`~fbo_cli.algorithms.
    runs_as_clients.stacked` or ``stacked_seeds``; ``view``: the first run's algorithm as built alone; ``hps``: each
    run's hyperparameters; ``seeds``: a seed batch, each run evaluated by its own build). A member's summary that
    cannot be written is its own failure; a failure of the batch sends its members still in it to run alone."""

    passthrough = (SeedsDiffer,)

    def __init__(self, algo, view, led, builds, bases, hps, seeds: bool, resumed: int | None = None):
        self.algo, self.view, self.led = algo, view, led
        self.builds, self.bases, self.hps, self.seeds, self.resumed = builds, bases, hps, seeds, resumed
        self.batch_runs = len(builds)
        self.active = list(range(len(builds)))

    def finite(self) -> list[bool]:
        return finite_runs(self.algo)

    def evaluate(self, ks: list[int]) -> list[dict[str, float]]:
        pos = self.active.index
        if self.seeds:  # each run by its own build (its data)
            return [evaluate_runs(self.algo, self.builds[k].algo, [pos(k)], [self.hps[k]])[0] for k in ks]
        return evaluate_runs(self.algo, self.view, [pos(k) for k in ks], [self.hps[k] for k in ks])

    def show(self, k: int) -> None:
        show(self.algo, self.builds[k].algo, self.active.index(k), self.hps[k])

    def keep(self, positions: list[int]) -> None:
        keep_runs(self.algo, positions)

    def end(self, members, k, status, why=None, failure=None) -> None:
        try:
            super().end(members, k, status, why, failure)
        except Exception as e:  # its record could not be written: its failure alone
            members[k].summary = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        members[k].note(f"end: {status}" + (f" ({why})" if why else "") + f", {self.led.rounds} rounds", show=False)

    def failed(self, members, e) -> list[dict | None]:
        for k in self.active:  # one run's bug or all runs': each run still in the batch runs again alone
            members[k].note(f"the batch failed ({type(e).__name__}: {e}); this run runs again alone", show=False)
            members[k].rundir.drop_checkpoint()
        return [None if k in self.active else m.summary for k, m in enumerate(members)]


def evaluate(members: list[Member], steps: Steps, ks: list[int]) -> dict[int, dict]:
    """Evaluate members ``ks`` (each its share of the pass's time): a row each, appended to its ``metrics.csv``."""
    if not ks:
        return {}
    t0 = time.perf_counter()
    ms = steps.evaluate(ks)
    dt = (time.perf_counter() - t0) / len(ks)
    rows = {}
    for k, metrics in zip(ks, ms, strict=True):
        m = members[k]
        m.eval_time += dt
        rows[k] = row = {**steps.builds[k].ledger.as_dict(), "train_time": round(m.train_time, 4), **metrics}
        m.rows.append(row)
        m.rundir.append(m.rows)
        if m.on_eval:
            m.on_eval(row)
    return rows


def step_loop(algo, steps: Steps, members: list[Member], stop: Stop) -> str:
    """Step ``algo`` until a budget is spent or no member is left (``done``), or a signal asked to stop
    (``interrupted``), checking the rules after each outer iteration; a member that diverges ends on the way."""
    r, led, view, active = members[0].cfg.run, steps.led, steps.view, steps.active
    while active and budget_left(r, led, members[active[0]].train_time):
        t0, before = time.perf_counter(), led.rounds
        algo.step()
        led.iterations += 1
        check_rounds(view, led, before)
        ok = steps.finite()
        dt = (time.perf_counter() - t0) / len(active)  # each run's share of the step's time
        for k in active:
            members[k].train_time += dt
        gone = {k: "the iterate has NaN/inf entries" for p, k in enumerate(active) if not ok[p]}
        if evaluation_due(r, led, members[active[0]].rows[-1]["rounds"], view.rounds_per_iteration()):
            for k, row in evaluate(members, steps, [k for k in active if k not in gone]).items():
                if why := diverged(row, members[k].rows[0]):
                    gone[k] = why
        if gone:
            steps.drop(members, gone)
            if not active:
                return "done"
        if stop.flag:
            return "interrupted"
        if led.iterations % r.checkpoint_every == 0:
            for k in active:
                steps.save(members, k)
    return "done"


def run(members: list[Member], steps: Steps) -> list[dict | None]:
    """Run ``members`` to the end of their budget with ``steps`` (members with no rows are evaluated first; resumed
    ones carry theirs): their summaries, in order (``None``: a member the failed batch sends to run alone)."""
    led, active = steps.led, steps.active
    with Stop() as stop:
        try:
            evaluate(members, steps, [k for k in active if not members[k].rows])
            status = step_loop(steps.algo, steps, members, stop)
            if status == "done":
                evaluate(members, steps, [k for k in active if members[k].rows[-1]["iterations"] != led.iterations])
        except (Interrupted, *steps.passthrough):
            raise
        except StopNow:  # inside an iteration: its state is half-updated, so no checkpoint of it
            raise Interrupted(members[0].rundir.path, led.iterations, now=True) from None
        except Exception as e:  # a bug, not bad input
            return steps.failed(members, e)
        if status == "done":
            for k in list(active):
                steps.end(members, k, "done")
            return [m.summary for m in members]
    for k in active:
        steps.save(members, k)
    raise Interrupted(members[active[0]].rundir.path, led.iterations)


def finish(m: Member, status: str, why: str | None, failure: Exception | None, led: Ledger,
           rounds_per_iteration: int | None, device, resumed: int | None = None,
           batch_runs: int | None = None) -> dict:
    """Member ``m``'s summary from its rows, written with its final ``metrics.csv`` and ``curves.png``
    (:meth:`~fbo_cli.runs.rundir.RunDir.finish`); raises ``failure`` after writing it (``batch_runs``: how many
    stepped together, its times its share)."""
    import pandas as pd

    cfg, rows = m.cfg, m.rows
    r, metric = cfg.run, TASKS[cfg.task].metric
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
        "train_time_s": round(m.train_time, 3), "eval_time_s": round(m.eval_time, 3),
        "seconds_per_round": round(m.train_time / max(led.rounds, 1), 5),
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
    title = f"{summary['label']} on {cfg.task}/{r.dataset} ({r.partition}, seed {r.seed})"
    m.rundir.finish(summary, rows, df, title, r.keep_checkpoint)
    if failure is not None:
        raise failure
    return summary
