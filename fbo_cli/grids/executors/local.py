"""The serial and the process-pool executors (``--executor serial | processes``): :class:`Serial` runs each work
in this process, :class:`Processes` in a pool of spawned processes (``--jobs``) that block SIGINT until their
handler is set and die with their parent."""

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
from .common import Executor, Work, run_unit


class Serial(Executor):
    """Each work in this process, one after the other; the runs log to the driver's console themselves."""

    says_resume = False

    def __init__(self):
        self.queue: list[Work] = []

    def submit(self, work: Work) -> None:
        self.queue.append(work)

    def results(self):
        while self.queue:
            w = self.queue.pop(0)
            self.listener.rounds(w, 0)
            yield w, run_unit([c.cfg for c in w.cells], w.rerun, w.wait, lambda r, w=w: self.listener.rounds(w, r),
                              log=self.listener.say)

    def cancel(self, why: BaseException) -> None:
        self.queue.clear()


ROUNDS = None  # a pool worker's queue for its units' rounds: (work key, rounds), drawn as the driver's bars
_STOP_EVENT = None  # a pool worker's: the driver sets it when the grid stops
_STOPPED = False  # a pool worker's: a signal or an interrupted run of its own told it to stop; it starts no more


def _die_with_parent(parent: int, rounds=None, stop=None) -> None:
    """Pool initializer: SIGTERM this worker when its parent dies (Linux ``PR_SET_PDEATHSIG``; the
    runner then writes its checkpoint and stops), and exit at once if the parent is already gone; ``rounds``:
    the queue the worker's runs report their rounds on; ``stop``: the driver's event of a stopped grid. Outside a
    run, SIGINT and SIGTERM only mark the worker stopped (no traceback, no run started after them); they were
    held blocked since the driver spawned it (:func:`_signals_held`), so one that came during its start-up is
    answered here."""
    global ROUNDS, _STOP_EVENT
    ROUNDS, _STOP_EVENT = rounds, stop
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


def pool_worker(task: str, algo: str, layers: list[tuple], threads: int, rerun: bool, wait: bool,
                parent: int, tag: tuple = ()) -> list[dict]:
    """The runs of one work (one run, or a batch), in a pool's process; its rounds go to the driver's queue
    under ``tag`` (its work's key) at every evaluation (a batch's first run speaks for it)."""
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
    q = ROUNDS

    def said(rounds: int) -> None:
        with contextlib.suppress(Exception):  # a lost progress report never fails a run
            q.put_nowait((*tag, rounds))

    s = run_unit(cfgs, rerun, wait, said if q is not None and tag else None)
    if os.getppid() != parent:  # the driver died: do not linger
        os._exit(0)
    if any(x.get("status") == "interrupted" for x in s):
        _STOPPED = True
    return s


class Processes(Executor):
    """Each work in a pool of ``jobs`` spawned processes (``--jobs``), one pool per round of the driver's
    submissions (a pool a worker died in is broken: the driver's retry goes to a fresh one). On a stop (Ctrl-C,
    SIGTERM, an error) the queued work is cancelled, so that no run starts after the stop, the workers' stop event
    is set first (a work the pool had already handed to a worker is not started either), the runs in progress are
    told to stop (a SIGTERM to this process alone is passed on to the workers; Ctrl-C reached them with the process
    group) and waited for while they write their checkpoints."""

    afresh = "in a fresh pool"

    def __init__(self, jobs: int):
        self.jobs, self.threads = jobs, max(1, (os.cpu_count() or 1) // jobs)
        self.ctx = get_context("spawn")
        self.rounds_q = self.ctx.Queue()
        self.stop = self.ctx.Event()  # set when the grid stops: the workers start no work after it
        self.pool: ProcessPoolExecutor | None = None
        self.futs: dict = {}  # future -> its work

    def submit(self, w: Work) -> None:
        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=self.ctx, initializer=_die_with_parent,
                                            initargs=(os.getpid(), self.rounds_q, self.stop))
        c0 = w.cells[0].cfg
        with _signals_held():  # the workers are spawned here
            fut = self.pool.submit(pool_worker, c0.task, c0.algo_ref, [c.layers for c in w.cells], self.threads,
                                   w.rerun, w.wait, os.getpid(), (w.key,))
        self.futs[fut] = w

    def results(self):
        while self.futs:
            done, _ = first_done(set(self.futs), timeout=0.5, return_when=FIRST_COMPLETED)
            self._show()
            for fut in done:
                w = self.futs.pop(fut)
                try:
                    res = fut.result()
                except BrokenProcessPool:  # a worker was killed (the OOM killer, kill -9): the pool is lost
                    res = None
                yield w, res
        self.close()  # this round's pool: its work is done (or it broke)

    def _show(self) -> None:
        """Pass on the rounds the workers reported (of the work in flight; a late report of an ended one is dropped)."""
        flying = {w.key: w for w in self.futs.values()}
        while True:
            try:
                key, r = self.rounds_q.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            if key in flying:
                self.listener.rounds(flying[key], r)

    def cancel(self, why: BaseException) -> None:
        from ...errors import Terminated

        self.stop.set()
        pool, self.pool = self.pool, None
        self.futs.clear()
        if pool is None:
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs if isinstance(why, Terminated) or not isinstance(why, KeyboardInterrupt) else ():
            with contextlib.suppress(OSError, ValueError):
                if p.is_alive():
                    os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                p.join(timeout=120)

    def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True)
