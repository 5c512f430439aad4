"""Where the runs of a grid execute: ``serial`` (this process), ``processes`` (a local process pool,
``--jobs``) or ``ray`` (Ray tasks on a local Ray started on demand, or on a cluster).

One call, :func:`run_cells`, used by ``fbo compare`` and ``fbo tune``. Every executor runs the same
:func:`fbo_cli.runner.execute` on the same config, so choosing one never changes a number (a run's
torch threads are the CPUs it holds unless the config sets ``threads``; set it to pin them).

Each run holds its run directory's lock (``.lock``) while it runs, so two processes never run the
same run at once: a run locked by another process is left for the end of the grid, then waited
for and reused when the other process finished it (or run, when it did not).

Run batches: the runs of a grid that may step together (:func:`fbo_cli.batch.group_batches`, ``--batch``) are
one task of every executor (a process, a Ray task), :func:`fbo_cli.batch.execute_batch`; each run's directory is
written as the run alone writes it.

Ray: the worker runs in a temporary ``out_dir`` on its node and returns the run directory's files
(bytes) to the driver, which writes them atomically into the real run directory, ``summary.json``
last; a partial run's checkpoint travels to the worker the same way. No shared file system is
needed; the driver holds the run's lock while its task is in flight. A task whose worker dies is
retried once by Ray, then recorded as failed with its error.

Ray under interruption: Ctrl-C (a flag the driver reads between its one-second waits, never an exception
raised inside Ray) cancels the tasks in flight gently (Ray delivers SIGINT to the worker,
whose run writes its checkpoint and returns), waits for them, and lands each checkpoint in its run
directory; :class:`GridInterrupted` then says which runs came home and which were lost (a second
Ctrl-C, or a worker that does not answer in time). The worker's temporary folder
(``fbo-ray-<pid>-*``) goes on every exit path of the task; the folders of workers that were killed
outright are removed by the next task on that node. A local Ray whose driver was killed (``kill -9``)
leaves agents behind that ignore SIGTERM; the next local start reaps them (:func:`reap_orphaned_ray`),
and says so, as ``fbo clean --yes`` does. Only a session fbo itself started is ever reaped: the driver
writes ``fbo-driver`` (its pid and start time) into the session folder of the local Ray it starts, and
the reaper acts only on processes whose session folders all carry that mark and whose driver is gone; a
cluster of ``ray start --head`` (no mark) is never touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Protocol, Sequence

from .errors import UsageError

EXECUTORS = ("serial", "processes", "ray")
RAY_HINT = "pip install -e '.[ray]' in the repository (make setup does it)"


@dataclass(frozen=True)
class GridOptions:
    """How a grid's runs execute (``fbo compare``, ``fbo tune``, ``fbo reproduce``): built and checked once,
    when made (a :class:`UsageError` naming the option), then passed down to :func:`run_cells`."""

    jobs: int = 1  # runs in parallel
    executor: str | None = None  # serial | processes | ray; None: serial for one job, else processes
    address: str | None = None  # Ray: the cluster to join (auto, HOST:PORT, ray://HOST:PORT); None: a local Ray
    cpus_per_run: int = 1  # Ray: CPUs per run (its torch threads)
    gpus_per_run: float = 0.0  # Ray: GPUs per run
    batch: str | int = "auto"  # run batches (fbo_cli/batch.py): auto | off | R runs stepped together in one task

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {self.jobs}")
        if self.executor is not None and self.executor not in EXECUTORS:
            raise UsageError(f"--executor must be one of {', '.join(EXECUTORS)}, got '{self.executor}'")
        if (self.address or self.cpus_per_run != 1 or self.gpus_per_run) and self.executor != "ray":
            raise UsageError("--address, --cpus-per-run and --gpus-per-run go with --executor ray")
        if self.cpus_per_run < 1 or not self.gpus_per_run >= 0:
            raise UsageError(f"--cpus-per-run must be >= 1 and --gpus-per-run >= 0, got {self.cpus_per_run}, "
                             f"{self.gpus_per_run}")
        a = self.address
        if a and a != "auto" and not a.startswith("ray://"):
            host, _, port = a.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise UsageError(f"--address must be HOST:PORT (the head node's GCS, e.g. 10.0.0.5:6379), "
                                 f"ray://HOST:PORT or auto; got '{a}'")
        from .batch import parse_batch

        object.__setattr__(self, "batch", parse_batch(self.batch))
        if self.executor == "ray":
            _import_ray()

    @property
    def runner(self) -> str:
        """The executor that runs the grid: the one named, else serial for one job and processes for more."""
        return self.executor or ("serial" if self.jobs == 1 else "processes")


class GridInterrupted(KeyboardInterrupt):
    """Ctrl-C during a Ray grid; ``str()`` says truthfully what became of the runs in flight."""


class CellLike(Protocol):  # compare.Cell
    algorithm: str
    setting: str
    seed: int
    cfg: Any
    layers: tuple


def _label(c: CellLike) -> str:
    return f"{c.algorithm} · {c.setting} · seed {c.seed}"


def _progress(console):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column

    # the bar, the count and the times keep their room at 80 columns; the last run's note comes last and
    # is cut first (never wrapped)
    keep = lambda w: Column(no_wrap=True, min_width=w)  # noqa: E731
    cut = lambda w: Column(no_wrap=True, overflow="ellipsis", max_width=w)  # noqa: E731
    return Progress(TextColumn("{task.description}", style="bold", markup=False, table_column=cut(24)),
                    BarColumn(bar_width=16, table_column=keep(16)), MofNCompleteColumn(table_column=keep(7)),
                    TimeElapsedColumn(table_column=keep(7)), TextColumn("left", table_column=keep(4)),
                    TimeRemainingColumn(table_column=keep(7)),
                    TextColumn("{task.fields[info]}", markup=False, table_column=cut(40)),
                    console=console)


def run_cells(cells: Sequence[CellLike], grid: GridOptions | None = None, console=None, rerun: bool = False,
              title: str = "runs", **options) -> list[dict[str, Any]]:
    """Run ``cells`` (anything with ``cfg``, ``layers``, ``algorithm``, ``setting``, ``seed``) as ``grid``
    says (or :class:`GridOptions` of ``options``), compatible runs stepped together as run batches
    (``grid.batch``; :mod:`fbo_cli.batch`); returns one summary per cell, in order (``status``: done,
    diverged, failed or interrupted; ``error`` for failed). Finished runs are reused unless ``rerun``;
    partial runs resume from their checkpoint (``rerun`` starts them again)."""
    from . import batch as batching

    g = grid or GridOptions(**options)
    units = batching.group_batches([c.cfg for c in cells], g.batch)
    if g.runner == "ray":
        return _run_ray(cells, g.address, g.cpus_per_run, g.gpus_per_run, console, rerun, title, g.jobs, units)
    if g.runner == "serial" or g.jobs == 1:
        return _run_serial(cells, console, rerun, title, units)
    return _run_processes(cells, g.jobs, console, rerun, title, units)


def _one(cfg, rerun: bool, wait: bool, on_eval=None, log=None) -> dict[str, Any]:
    from .runner import Interrupted, RunBusy, execute

    try:
        return execute(cfg, on_eval=on_eval, reuse=not rerun, fresh=rerun, wait=wait, log=log)
    except RunBusy:
        return {"status": "busy"}
    except Interrupted as e:
        return {"status": "interrupted", "error": str(e)}
    except UsageError as e:
        return {"status": "failed", "error": str(e)}
    except Exception as e:  # a bug: recorded in the run's summary.json; the grid goes on
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


def _one_batch(cfgs, rerun: bool, wait: bool, on_eval=None, log=None) -> list[dict[str, Any]]:
    """:func:`_one` for the runs of a batch (:func:`fbo_cli.batch.execute_batch`): one summary per run."""
    from .batch import execute_batch
    from .runner import Interrupted

    try:
        return execute_batch(cfgs, reuse=not rerun, fresh=rerun, wait=wait, log=log, on_eval=on_eval)
    except Interrupted as e:
        return [{"status": "interrupted", "error": str(e)}] * len(cfgs)
    except UsageError as e:
        return [{"status": "failed", "error": str(e)}] * len(cfgs)
    except Exception as e:  # a bug: recorded in each run's summary.json; the grid goes on
        return [{"status": "failed", "error": f"{type(e).__name__}: {e}"}] * len(cfgs)


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


def _report(prog, overall, c, s, say_resume: bool = False) -> None:
    if s["status"] == "failed":
        from rich.text import Text

        prog.console.print(Text(f"{_label(c)}: failed: {s.get('error')}", style="red"), highlight=False)
    elif say_resume and s.get("resumed_from_iteration") is not None and not s.get("reused"):
        prog.console.print(f"{_label(c)}: resumed from its checkpoint at outer iteration "
                           f"{s['resumed_from_iteration']}", markup=False, highlight=False)
    prog.update(overall, advance=1, info=f"last: {c.algorithm} · {c.setting} · s{c.seed}: {s['status']}")


# --------------------------------------------------------------------------------------------------
# processes


def _die_with_parent(parent: int) -> None:
    """Pool initializer: SIGTERM this worker when its parent dies (Linux ``PR_SET_PDEATHSIG``; the
    runner then writes its checkpoint and stops), and exit at once if the parent is already gone."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:
        os._exit(0)


def _worker(task: str, algo: str, layers: list[tuple], threads: int, rerun: bool, wait: bool,
            parent: int) -> list[dict]:
    """The runs of one unit (one run, or a batch), in a pool's process."""
    import torch

    from .config import resolve

    torch.set_num_threads(threads)
    try:
        cfgs = [resolve(task, algo, *ly) for ly in layers]
    except UsageError as e:
        return [{"status": "failed", "error": str(e)}] * len(layers)
    s = [_one(cfgs[0], rerun, wait)] if len(cfgs) == 1 else _one_batch(cfgs, rerun, wait)
    if os.getppid() != parent:  # the driver died: do not linger
        os._exit(0)
    return s


def _run_processes(cells, jobs, console, rerun, title, units) -> list[dict]:
    threads = max(1, (os.cpu_count() or 1) // jobs)
    out: list[dict | None] = [None] * len(cells)
    with _progress(console) as prog:
        overall = prog.add_task(title, total=len(cells), info="")
        lost: dict[tuple, int] = {}  # how often a unit's worker died under it
        for wait in (False, True):
            todo = [u for u in ([i for i in unit if out[i] is None or out[i]["status"] == "busy"] for unit in units)
                    if u]
            while todo:
                broken = []
                with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                         initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
                    futs = {pool.submit(_worker, cells[u[0]].cfg.task, cells[u[0]].cfg.algo_ref,
                                        [cells[i].layers for i in u], threads, rerun and not wait, wait,
                                        os.getpid()): k for k, u in enumerate(todo)}
                    for fut in as_completed(futs):
                        k = futs[fut]
                        try:
                            res = fut.result()
                        except BrokenProcessPool:  # a worker was killed (the OOM killer, kill -9): the pool is lost
                            key = tuple(todo[k])
                            lost[key] = lost.get(key, 0) + 1
                            if lost[key] < 2:
                                broken.append(todo[k])
                                continue
                            res = [{"status": "failed", "error": "its worker process was killed twice (out of memory? "
                                    "kill -9?); run the same command again to resume it from its checkpoint"}
                                   ] * len(todo[k])
                        for i, s in zip(todo[k], res, strict=True):
                            out[i] = s
                            if s["status"] == "interrupted":
                                raise KeyboardInterrupt
                            if s["status"] != "busy":
                                _report(prog, overall, cells[i], s, say_resume=True)
                if broken:
                    prog.console.print(f"a worker process died: {len(broken)} task(s) in flight go on in a fresh "
                                       f"pool (a run whose worker dies twice is counted as failed)", highlight=False)
                todo = broken
    return out  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# ray


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def _ray_task(task: str, algo: str, layers: list[tuple], threads: int, files_in: list[dict[str, bytes]],
              rerun: bool) -> list[tuple[dict, dict[str, bytes]]]:
    """On a Ray worker: run one unit (a run, or a batch) in a temporary out_dir seeded with ``files_in`` (a
    checkpoint to resume, per run), return each run's summary and run directory's files."""
    import tempfile

    import torch

    from .config import resolve
    from .runner import STOP

    STOP.clear()  # Ray's gentle cancel is a SIGINT: from here on it asks the run to checkpoint and return
    signal.signal(signal.SIGINT, lambda *_: STOP.set())
    torch.set_num_threads(threads)
    _reap_temp_folders()
    with tempfile.TemporaryDirectory(prefix=f"fbo-ray-{os.getpid()}-") as tmp:
        cfgs = [resolve(task, algo, *ly, {"out_dir": tmp, "threads": threads}) for ly in layers]
        for cfg, fin in zip(cfgs, files_in, strict=True):
            cfg.run_dir.mkdir(parents=True, exist_ok=True)
            for name, data in fin.items():
                (cfg.run_dir / name).write_bytes(data)
        res = [_one(cfgs[0], rerun, True)] if len(cfgs) == 1 else _one_batch(cfgs, rerun, True)
        files = [{p.name: p.read_bytes() for p in cfg.run_dir.iterdir() if p.is_file() and p.name != ".lock"}
                 for cfg in cfgs]
    import ray

    node = ray.get_runtime_context().get_node_id()
    for f in files:
        if "run.log" in f:  # where it ran, for the record (run.log's own time format)
            import datetime

            now = datetime.datetime.now().isoformat(sep=" ", timespec="milliseconds").replace(".", ",")
            f["run.log"] += f"{now} ran on Ray node {node[:12]} ({os.uname().nodename}, pid {os.getpid()})\n".encode()
    return list(zip(res, files))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temp_folders() -> list[Path]:
    """The ``fbo-ray-<pid>-*`` folders of this node's workers that died without cleaning up."""
    import tempfile

    return [d for d in sorted(Path(tempfile.gettempdir()).glob("fbo-ray-*-*"))
            if (m := re.fullmatch(r"fbo-ray-(\d+)-[a-z0-9_]{8}", d.name)) and not d.is_symlink() and d.is_dir()
            and d.lstat().st_uid == os.getuid() and not _alive(int(m.group(1)))]


def _reap_temp_folders() -> None:
    import shutil

    for d in stale_temp_folders():
        shutil.rmtree(d, ignore_errors=True)


_SESSION = re.compile(r"^(/.*/session_\d{4}-\d\d-\d\d_[\d-]+_\d+_\d+)(/|$)")
FBO_DRIVER = "fbo-driver"  # in a Ray session folder fbo's driver started: "<pid> <start time>"


def _started_at(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat), None when it is gone: a
    pid with another start time is another process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def mark_session(ray) -> None:
    """Mark the local Ray session this driver has just started (never a cluster it joined, e.g. one of
    ``ray start --head``) as fbo's: only such a session's processes are ever reaped."""
    try:
        node = ray._private.worker._global_node
        if node is None or not node.head:
            return
        Path(node.get_session_dir_path(), FBO_DRIVER).write_text(f"{os.getpid()} {_started_at(os.getpid())}\n")
    except (AttributeError, OSError):
        pass


def _fbo_driver_dead(session: str) -> bool:
    """The session was started by an fbo driver (its mark) that is no longer running."""
    try:
        pid, start = Path(session, FBO_DRIVER).read_text().split()
    except (OSError, ValueError):
        return False  # not fbo's session (a `ray start` cluster, another program's Ray): never touched
    return _started_at(int(pid)) != start


def orphaned_ray() -> list[tuple[int, str, int]]:
    """Ray processes of this user left by a local Ray that an fbo driver started and that driver died:
    orphans (parent 1) whose open files lie only in Ray session folders marked by fbo (:func:`mark_session`)
    whose driver is gone. A session without fbo's mark (``ray start --head``, another program) is never
    listed. (pid, name, RSS kB)."""
    found = []
    uid = os.getuid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            st = (proc / "status").read_text()
            if f"Uid:\t{uid}\t" not in st or "\nPPid:\t1\n" not in st or "\nState:\tZ" in st:
                continue
            name = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            if "ray" not in name:
                continue
            sessions = {m.group(1) for fd in (proc / "fd").iterdir() if (m := _SESSION.search(os.readlink(fd)))}
        except OSError:
            continue
        if sessions and all(_fbo_driver_dead(s) for s in sessions):
            rss = re.search(r"VmRSS:\s+(\d+)", st)
            found.append((int(proc.name), name, int(rss.group(1)) if rss else 0))
    return found


def reap_orphaned_ray() -> list[tuple[int, str, int]]:
    """SIGKILL what :func:`orphaned_ray` finds (they ignore SIGTERM), again while their children become
    orphans in turn; returns them."""
    import time

    found: list[tuple[int, str, int]] = []
    for _ in range(10):
        more = orphaned_ray()
        if not more:
            break
        for pid, _, _ in more:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        found += more
        time.sleep(0.5)
    return found


def _land(run_dir: Path, files: dict[str, bytes], keep_checkpoint: bool) -> None:
    """Write a worker's files into the real run directory, the completion record last."""
    from .results import CHECKPOINT, atomic_write

    (run_dir / "summary.json").unlink(missing_ok=True)
    for name in sorted(files, key=lambda n: n == "summary.json"):
        atomic_write(run_dir / name, files[name])
    if "summary.json" in files and not keep_checkpoint and _ended(files["summary.json"]):
        (run_dir / CHECKPOINT).unlink(missing_ok=True)  # a failed run keeps its last good checkpoint


def _ended(summary: bytes) -> bool:
    import json

    try:
        return json.loads(summary).get("status") in ("done", "diverged")
    except (ValueError, AttributeError):
        return False


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A Ray address HOST:PORT that does not answer within ``timeout`` seconds is bad input, not a hang."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout) as s:
            # Ray's GCS speaks gRPC (HTTP/2): to HTTP/2's preface and an empty SETTINGS frame it answers with
            # a SETTINGS frame; anything else (a web server, a database) would leave ray.init waiting for ever
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            head = b""
            while len(head) < 9:
                more = s.recv(9 - len(head))
                if not more:
                    break
                head += more
    except (OSError, ValueError) as e:
        raise UsageError(f"--address {address}: no Ray cluster answers there ({e.strerror or e}); start one with "
                         f"`ray start --head`, or leave --address out for a local Ray") from None
    if len(head) < 9 or head[3] != 0x04:
        raise UsageError(f"--address {address}: something answers there, but not a Ray cluster's GCS (no gRPC); "
                         f"the head node's address is what `ray start --head` prints (port 6379 by default)")


def _auto_address(ray) -> str:
    """``--address auto``: the address of the cluster ``ray start`` started on this node (Ray's own lookup),
    so that it is checked before Ray connects: a stale address would leave Ray waiting, then abort."""
    try:
        found = ray._private.services.get_ray_address_from_environment("auto", None)
    except ConnectionError:
        raise UsageError("--address auto: no Ray cluster runs on this node; start one with `ray start --head`, "
                         "or leave --address out for a local Ray") from None
    except AttributeError:  # another Ray version: let Ray look
        return "auto"
    return found or "auto"


def _run_ray(cells, address, cpus_per_run, gpus_per_run, console, rerun, title, jobs, units) -> list[dict]:
    import time

    from .results import CHECKPOINT, lock_run, run_status

    ray = _import_ray()  # the options were checked when the GridOptions was made
    started = not ray.is_initialized()
    if started:  # a local Ray (--jobs runs at a time when > 1), or the cluster at --address
        if address == "auto":
            address = _auto_address(ray)
        if address and not address.startswith("ray://"):
            _check_reachable(address)
        if not address and (reaped := reap_orphaned_ray()) and console is not None:
            console.print(f"reaped {len(reaped)} Ray process(es) ({sum(r for *_, r in reaped) // 1024} MB) left by an "
                          f"earlier local Ray whose driver was killed: "
                          f"{', '.join(f'{n} ({p})' for p, n, _ in reaped)}", markup=False, highlight=False)
        kw = {"address": address} if address else ({"num_cpus": jobs * cpus_per_run} if jobs > 1 else {})
        try:
            ray.init(log_to_driver=False, include_dashboard=False, configure_logging=False, **kw)
        except (ConnectionError, ValueError, RuntimeError) as e:
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise UsageError(f"Ray did not start{f' at --address {address}' if address else ''}: {why}"
                             + ("; --address auto joins a cluster that `ray start --head` started on this node"
                                if address == "auto" else "")) from None
        if not address:
            mark_session(ray)
    have = ray.cluster_resources()
    for what, need in (("CPU", cpus_per_run), ("GPU", gpus_per_run)):
        if need and have.get(what, 0) < need:  # Ray would wait for them for ever
            if started:
                ray.shutdown()
            raise UsageError(f"each run asks for {need:g} {what}(s) (--{what.lower()}s-per-run), but the Ray cluster "
                             f"has {have.get(what, 0):g}")
    remote = ray.remote(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=1)(_ray_task)
    out: list[dict | None] = [None] * len(cells)
    pending = [list(u) for u in units]
    locks: dict[int, int] = {}
    inflight: dict[Any, list[int]] = {}
    with _progress(console) as prog, _ctrl_c() as interrupts:
        overall = prog.add_task(f"{title} (ray)", total=len(cells), info="")
        try:
            while (pending or inflight) and not interrupts:
                for unit in list(pending):  # submit every unit whose locks we get (all of them)
                    fds = [lock_run(cells[i].cfg.run_dir, wait=False) for i in unit]
                    if any(fd is None for fd in fds):
                        for fd in fds:
                            if fd is not None:
                                os.close(fd)
                        continue
                    pending.remove(unit)
                    todo, files_in = [], []
                    for i, fd in zip(unit, fds):
                        c = cells[i]
                        state, summary, why = run_status(c.cfg.run_dir)
                        if not rerun and state == "finished" and summary.get("status") in ("done", "diverged"):
                            os.close(fd)
                            out[i] = summary
                            _report(prog, overall, c, summary)
                            continue
                        if state == "corrupt":
                            prog.console.print(f"{c.cfg.run_dir}: {why}; running it again", markup=False,
                                               highlight=False)
                        ck = c.cfg.run_dir / CHECKPOINT
                        files_in.append({CHECKPOINT: ck.read_bytes()} if ck.is_file() and not rerun else {})
                        todo.append(i)
                        locks[i] = fd
                    if todo:
                        c0 = cells[todo[0]].cfg
                        ref = remote.remote(c0.task, c0.algo_ref, [cells[i].layers for i in todo], cpus_per_run,
                                            files_in, rerun)
                        inflight[ref] = todo
                if not inflight:
                    time.sleep(0.5)  # every remaining run is held by another process
                    continue
                done, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
                for ref in done:
                    unit = inflight.pop(ref)
                    for i, s in zip(unit, _collect(ray, ref, [cells[i] for i in unit], [locks.pop(i) for i in unit])):
                        out[i] = s
                        _report(prog, overall, cells[i], s, say_resume=True)
            if interrupts:
                raise KeyboardInterrupt
        except KeyboardInterrupt:  # our handler's flag, or a KeyboardInterrupt off the main thread
            interrupts[:] = interrupts or [1]  # the first Ctrl-C; a second one gives the runs up
            raise GridInterrupted(_bring_home(ray, inflight, locks, cells, prog, interrupts)) from None
        finally:
            for fd in locks.values():
                os.close(fd)
    return out  # type: ignore[return-value]


def _collect(ray, ref, cs: list, lock_fds: list[int]) -> list[dict]:
    """A finished (or interrupted) task's summaries, one per run; their files land in the run directories."""
    try:
        got = ray.get(ref)
    except Exception as e:  # the worker died twice, or the task raised
        for fd in lock_fds:
            os.close(fd)
        return [{"status": "failed", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}] * len(cs)
    out = []
    for c, (s, files), fd in zip(cs, got, lock_fds, strict=True):
        try:
            if "config.yaml" in files:  # the driver's paths, not the worker's temporary out_dir
                import yaml

                used = (yaml.safe_load(files["config.yaml"]) or {}).get("device_used")
                files["config.yaml"] = yaml.safe_dump({**c.cfg.as_dict(), "device_used": used},
                                                      sort_keys=False).encode()
            _land(c.cfg.run_dir, files, c.cfg.run.keep_checkpoint)
        except Exception as e:
            s = {"status": "failed", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        finally:
            os.close(fd)
        out.append(s)
    return out


@contextlib.contextmanager
def _ctrl_c():
    """While a Ray grid runs, SIGINT appends to the yielded list instead of raising KeyboardInterrupt
    (main thread only). The driver's loop checks the list between its one-second waits. A
    KeyboardInterrupt raised inside Ray's own code can be swallowed there ("Exception ignored in ..."),
    and the grid then runs on as if nobody had asked; a flag cannot be lost."""
    hits: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield hits
        return
    old = signal.signal(signal.SIGINT, lambda *_: hits.append(1))
    try:
        yield hits
    finally:
        signal.signal(signal.SIGINT, old)


def _bring_home(ray, inflight: dict, locks: dict, cells, prog, interrupts: list, patience: float = 120.0) -> str:
    """After Ctrl-C: ask every task in flight to stop (SIGINT in its worker: the run writes its checkpoint
    and returns), land what comes back within ``patience`` seconds or until a second Ctrl-C
    (``interrupts`` grows), force-cancel the rest. What happened, in one sentence."""
    import time

    home: list[str] = []
    lost: list[str] = []  # cancelled before the run took the signal over, or no answer in time
    for ref in inflight:
        ray.cancel(ref, force=False)
    prog.console.print(f"interrupted: bringing home the checkpoints of {len(inflight)} run(s) in flight "
                       f"(Ctrl-C again to give them up)", highlight=False)
    deadline = time.monotonic() + patience
    try:
        while inflight and time.monotonic() < deadline and len(interrupts) < 2:
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in done:
                unit = inflight.pop(ref)
                for i, s in zip(unit, _collect(ray, ref, [cells[i] for i in unit], [locks.pop(i) for i in unit])):
                    (lost if s["status"] == "failed" else home).append(_label(cells[i]))
    except KeyboardInterrupt:
        pass
    lost += [_label(cells[i]) for unit in inflight.values() for i in unit]
    for ref in inflight:
        ray.cancel(ref, force=True)
    inflight.clear()
    msg = (f"interrupted: {len(home)} run(s) in flight wrote their checkpoints into their run directories"
           if home else "interrupted")
    if lost:
        names = ", ".join(lost[:4]) + (", ..." if len(lost) > 4 else "")
        msg += f"; what {len(lost)} run(s) did since their last checkpoint is lost ({names})"
    return msg + "; run the same command again to continue"
