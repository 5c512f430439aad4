"""The runner: builds a run from its config and runs it alone, a batch of one of the run loop
(:mod:`fbo_cli.runs.loop`: budget, evaluation by :mod:`fbo_cli.runs.schedule`, divergence, the ledger check,
checkpoints and the stop signal), in its run directory (:class:`fbo_cli.runs.rundir.RunDir`).

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

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..algorithms.base import FederationView
from ..data import build_federated, load_dataset
from ..errors import UsageError
from ..sim.federation import Ledger
from ..tasks import TASKS
from . import checkpoint as ckpt
from . import loop
from .config import RunConfig
from .ledger_check import LedgerError  # noqa: F401  (the run loop's, imported from here)
from .loop import STOP, Interrupted, Member, Steps, run_log  # noqa: F401  (STOP, Interrupted: imported from here)
from .rundir import RunDir, prune_empty_run


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("device 'cuda' requested but no CUDA device is available; use --device cpu or auto",
                         kind="unsupported", field="device", value="cuda")
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


class RunBusy(UsageError):
    """Another process holds the run directory's lock."""


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
    rd = RunDir(run_dir)
    with rd.lock(wait=wait) as got:
        if not got:
            raise RunBusy(f"run directory {run_dir} is in use by another fbo process", kind="busy", path=run_dir)
        state, summary, why = st = rd.state()
        stale = None
        if reuse and st.ended:
            from .identity import stale_reason

            stale = stale_reason(cfg, summary)
            if not stale:
                return {**summary, "reused": True}
        with run_log(run_dir, log) as note:
            if state == "corrupt":
                note(f"{run_dir}: {why}; running it again")
            if stale:
                note(f"{run_dir}: {stale}; running it again")
                fresh = True
            if fresh:
                rd.drop_checkpoint()
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


def _execute(cfg: RunConfig, on_eval, write: bool, log) -> dict:
    """The run alone: its directory begun, its build (restored from its checkpoint where it has one that fits),
    then the loop (:func:`fbo_cli.runs.loop.run`) with this one member."""
    rd = RunDir(cfg.run_dir, write)
    rd.begin()
    b = build(cfg)
    m = Member(cfg, rd, on_eval)
    base, resumed = ckpt.baseline(b.algo), None
    c, why = rd.load_checkpoint(cfg, b)
    if why:
        if log:
            log(f"{rd.checkpoint}: {why}; starting from round 0")
        b = build(cfg)  # a failed restore may have written into the objects: build them again
        base = ckpt.baseline(b.algo)
    elif c is not None:
        m.rows, m.train_time, m.eval_time = list(c["rows"]), c["train_time"], c["eval_time"]
        resumed = b.ledger.iterations
        if log:
            log(f"resuming {rd.path} from its checkpoint at outer iteration {b.ledger.iterations} "
                f"(round {b.ledger.rounds})")
    rd.write_config(cfg, b.device)
    if m.rows:
        rd.append(m.rows)
        if on_eval:
            on_eval(m.rows[-1])
    return loop.run([m], Steps(b, base, resumed))[0]  # type: ignore[return-value]
