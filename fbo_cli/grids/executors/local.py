"""The serial and the process-pool executors (``--executor serial | processes``)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures import wait as first_done
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

from ...errors import UsageError
from .common import _label, _one, _one_batch, _progress, _report


def _run_serial(cells, console, rerun, title, units) -> list[dict]:
    out: list[dict | None] = [None] * len(cells)
    with _progress(console) as prog:
        overall = prog.add_task(f"{title}", total=len(cells), info="")
        say = lambda m: prog.console.print(m, markup=False, highlight=False)  # noqa: E731
        for wait in (False, True):  # second pass: the runs another process held
            for unit in units:
                unit = [i for i in unit if out[i] is None or out[i]["status"] == "busy"]
                if len(unit) > 1:
                    c0 = cells[unit[0]]
                    bar = prog.add_task(f"{c0.algorithm} · batch of {len(unit)}", total=c0.cfg.run.rounds,
                                        info="rounds")
                    on_eval = lambda k, row, bar=bar, total=c0.cfg.run.rounds: prog.update(
                        bar, completed=min(row["rounds"], total))
                    res = _one_batch([cells[i].cfg for i in unit], rerun and not wait, wait, on_eval, log=say)
                    prog.remove_task(bar)
                    for i, s in zip(unit, res, strict=True):
                        out[i] = s
                        if s["status"] == "interrupted":
                            raise KeyboardInterrupt
                        if s["status"] != "busy":
                            _report(prog, overall, cells[i], s)
                    continue
                if not unit:
                    continue
                i = unit[0]
                c = cells[i]
                bar = prog.add_task(_label(c), total=c.cfg.run.rounds, info="rounds")
                on_eval = lambda row, bar=bar, total=c.cfg.run.rounds: prog.update(
                    bar, completed=min(row["rounds"], total))
                out[i] = s = _one(c.cfg, rerun and not wait, wait, on_eval, log=say)
                prog.remove_task(bar)
                if s["status"] == "interrupted":
                    raise KeyboardInterrupt
                if s["status"] != "busy":
                    _report(prog, overall, c, s)
    return out  # type: ignore[return-value]


def _overall(prog, overall, out: list, inflight: dict) -> None:
    """The overall bar's count: the runs finished plus the share of each unit in flight that is done (its rounds
    over its budget, times its runs), so that its count moves and its time left is estimated from the runs'
    rounds while they run, not only from their ends (three runs on two jobs have no end for a long while)."""
    done = sum(1 for s in out if s is not None and s["status"] != "busy")
    prog.update(overall, completed=done + sum(inflight.values()))


_ROUNDS = None  # a pool worker's queue for its units' rounds: (pool, unit, rounds), drawn as the driver's bars
_STOP_EVENT = None  # a pool worker's: the driver sets it when the grid stops
_STOPPED = False  # a pool worker's: a signal or an interrupted run of its own told it to stop; it starts no more


def _die_with_parent(parent: int, rounds=None, stop=None) -> None:
    """Pool initializer: SIGTERM this worker when its parent dies (Linux ``PR_SET_PDEATHSIG``; the
    runner then writes its checkpoint and stops), and exit at once if the parent is already gone; ``rounds``:
    the queue the worker's runs report their rounds on; ``stop``: the driver's event of a stopped grid. Outside a
    run, SIGINT and SIGTERM only mark the worker stopped (no traceback, no run started after them); they were
    held blocked since the driver spawned it (:func:`_signals_held`), so one that came during its start-up is
    answered here."""
    global _ROUNDS, _STOP_EVENT
    _ROUNDS, _STOP_EVENT = rounds, stop
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1

    def told(signum, frame):
        global _STOPPED
        _STOPPED = True
        if os.getppid() != parent:  # the driver died: do not linger
            os._exit(0)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, told)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if os.getppid() != parent:
        os._exit(0)


def _stopped() -> bool:
    """This worker was told to stop (a signal, an interrupted run) or the driver stopped the grid."""
    return _STOPPED or (_STOP_EVENT is not None and _STOP_EVENT.is_set())


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM held (blocked, never lost) in this thread while it spawns a pool's workers: a worker
    inherits the block and starts with it, until its initializer has its own handler in place (a Ctrl-C during
    its imports prints no traceback); here they are delivered when the block ends."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _worker(task: str, algo: str, layers: list[tuple], threads: int, rerun: bool, wait: bool,
            parent: int, tag: tuple = ()) -> list[dict]:
    """The runs of one unit (one run, or a batch), in a pool's process; its rounds go to the driver's queue
    under ``tag`` (its pool and unit) at every evaluation (a batch's first run speaks for it)."""
    import torch

    from ...runs.config import resolve

    global _STOPPED
    if _stopped():  # queued before the stop (the pool hands a worker its next unit ahead): never started
        return [{"status": "interrupted", "error": "not started: the grid was stopped"}] * len(layers)
    torch.set_num_threads(threads)
    try:
        cfgs = [resolve(task, algo, *ly) for ly in layers]
    except UsageError as e:
        return [{"status": "failed", "error": str(e)}] * len(layers)
    q = _ROUNDS

    def said(row):
        with contextlib.suppress(Exception):  # a lost progress report never fails a run
            q.put_nowait((*tag, int(row["rounds"])))

    one = (lambda row: said(row)) if q is not None and tag else None
    batch = (lambda k, row: k == 0 and said(row)) if one else None
    s = [_one(cfgs[0], rerun, wait, one)] if len(cfgs) == 1 else _one_batch(cfgs, rerun, wait, batch)
    if os.getppid() != parent:  # the driver died: do not linger
        os._exit(0)
    if any(x.get("status") == "interrupted" for x in s):
        _STOPPED = True
    return s


@contextlib.contextmanager
def _stopping(pool: ProcessPoolExecutor, stop=None):
    """The pool, shut down as it is left: after its work, waiting for it; on a stop (Ctrl-C, SIGTERM, an error),
    with its queued runs cancelled, so that no run starts after the stop, the runs in progress told to stop (a
    SIGTERM to this process alone is passed on to the workers; Ctrl-C reached them with the process group) and
    waited for while they write their checkpoints. ``stop`` (the workers' event) is set first: a unit the pool
    had already handed to a worker is not started either."""
    from ...errors import Terminated

    try:
        yield pool
    except BaseException as e:
        if stop is not None:
            stop.set()
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs if isinstance(e, Terminated) or not isinstance(e, KeyboardInterrupt) else ():
            with contextlib.suppress(OSError, ValueError):
                if p.is_alive():
                    os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                p.join(timeout=120)
        raise
    pool.shutdown(wait=True)


def _run_processes(cells, jobs, console, rerun, title, units) -> list[dict]:
    threads = max(1, (os.cpu_count() or 1) // jobs)
    out: list[dict | None] = [None] * len(cells)
    ctx = get_context("spawn")
    rounds_q = ctx.Queue()
    stop = ctx.Event()  # set when the grid stops: the workers start no unit after it
    with _progress(console) as prog:
        overall = prog.add_task(title, total=len(cells), info="")
        lost: dict[tuple, int] = {}  # how often a unit's worker died under it
        bars: dict[tuple, int] = {}  # (pool, unit) -> its bar of rounds, from its first report to its end
        inflight: dict[tuple, float] = {}  # (pool, unit) -> the runs' worth of it done (the overall bar's count)
        pools = 0
        for wait in (False, True):
            todo = [u for u in ([i for i in unit if out[i] is None or out[i]["status"] == "busy"] for unit in units)
                    if u]
            while todo:
                broken = []
                pools += 1

                def show(todo=todo, pool_no=pools):
                    """Draw the rounds the workers reported (of this pool's units; an older pool's are dropped)."""
                    while True:
                        try:
                            p, k, r = rounds_q.get_nowait()
                        except (queue.Empty, OSError, ValueError):
                            return
                        if p != pool_no:
                            continue
                        c0 = cells[todo[k][0]]
                        if (p, k) not in bars:
                            what = _label(c0) if len(todo[k]) == 1 else f"{c0.algorithm} · batch of {len(todo[k])}"
                            bars[(p, k)] = prog.add_task(what, total=c0.cfg.run.rounds, info="rounds")
                        prog.update(bars[(p, k)], completed=min(r, c0.cfg.run.rounds))
                        inflight[(p, k)] = min(r, c0.cfg.run.rounds) / c0.cfg.run.rounds * len(todo[k])
                        _overall(prog, overall, out, inflight)

                with _stopping(ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_die_with_parent,
                                                   initargs=(os.getpid(), rounds_q, stop)), stop) as pool:
                    with _signals_held():  # the workers are spawned here
                        futs = {pool.submit(_worker, cells[u[0]].cfg.task, cells[u[0]].cfg.algo_ref,
                                            [cells[i].layers for i in u], threads, rerun and not wait, wait,
                                            os.getpid(), (pools, k)): k for k, u in enumerate(todo)}
                    pending = set(futs)
                    while pending:
                        done, pending = first_done(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                        show()
                        for fut in done:
                            k = futs[fut]
                            bar = bars.pop((pools, k), None)
                            if bar is not None:
                                prog.remove_task(bar)
                            if inflight.pop((pools, k), None) is not None:
                                _overall(prog, overall, out, inflight)  # its runs are counted whole below
                            try:
                                res = fut.result()
                            except BrokenProcessPool:  # a worker was killed (the OOM killer, kill -9): the pool is lost
                                key = tuple(todo[k])
                                lost[key] = lost.get(key, 0) + 1
                                if lost[key] < 2:
                                    broken.append(todo[k])
                                    continue
                                src = cells[todo[k][0]].cfg.source.rpartition(":")[0]
                                res = [{"status": "failed", "error": "its worker process died twice (killed: out of "
                                        "memory? kill -9?" + (f"; or {src}, the user's code it was running, "
                                                             "ended it (os._exit?)" if src else "")
                                        + "); run the same command again to resume it from its "
                                        "checkpoint"}] * len(todo[k])
                            for i, s in zip(todo[k], res, strict=True):
                                out[i] = s
                                if s["status"] == "interrupted":
                                    raise KeyboardInterrupt
                                if s["status"] != "busy":
                                    _report(prog, overall, cells[i], s, say_resume=True)
                if broken:
                    users = sorted({cells[u[0]].cfg.source.rpartition(":")[0] for u in broken} - {""})
                    prog.console.print(f"a worker process died: {len(broken)} task(s) in flight go on in a fresh "
                                       f"pool (a run whose worker dies twice is counted as failed)"
                                       + (f"; it ran user code: {', '.join(users)}" if users else ""), highlight=False)
                todo = broken
    return out  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# ray


