"""The Ray executor (``--executor ray``): a local Ray started on demand or a cluster, the run directory's files
shipped both ways, interruption, and the reaping of what a killed driver of fbo's own left behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...files import atomic_write, started_at, temp_folder
from .common import Executor, Work, label, run_unit

RAY_HINT = "pip install -e '.[ray]' in the repository (make setup does it)"


def import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed: {RAY_HINT}",
                         kind="unsupported", field="--executor", value="ray") from None
    return ray


def ray_task(task: str, algo: str, layers: list[tuple], threads: int, files_in: list[dict[str, bytes]],
             rerun: bool) -> list[tuple[dict, dict[str, bytes]]]:
    """On a Ray worker: run one unit (a run, or a batch) in a temporary out_dir seeded with ``files_in`` (a
    checkpoint to resume, per run), return each run's summary and run directory's files."""
    import shutil

    import torch

    from ...runs.config import resolve
    from ...runs.runner import STOP

    STOP.clear()  # Ray's gentle cancel is a SIGINT: from here on it asks the run to checkpoint and return
    signal.signal(signal.SIGINT, lambda *_: STOP.set())
    torch.set_num_threads(threads)
    tmp = temp_folder("ray")  # a killed worker's: `fbo clean --temp` removes it once this process is gone
    try:
        cfgs = [resolve(task, algo, *ly, {"out_dir": str(tmp), "threads": threads}) for ly in layers]
        for cfg, fin in zip(cfgs, files_in, strict=True):
            cfg.run_dir.mkdir(parents=True, exist_ok=True)
            for name, data in fin.items():
                atomic_write(cfg.run_dir / name, data)
        res = run_unit(cfgs, rerun, True)
        files = [{p.name: p.read_bytes() for p in cfg.run_dir.iterdir() if p.is_file() and p.name != ".lock"}
                 for cfg in cfgs]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import ray

    node = ray.get_runtime_context().get_node_id()
    for f in files:
        if "run.log" in f:  # where it ran, for the record (run.log's own time format)
            import datetime

            now = datetime.datetime.now().isoformat(sep=" ", timespec="milliseconds").replace(".", ",")
            f["run.log"] += f"{now} ran on Ray node {node[:12]} ({os.uname().nodename}, pid {os.getpid()})\n".encode()
    return list(zip(res, files))


_SESSION = re.compile(r"^(/.*/session_\d{4}-\d\d-\d\d_[\d-]+_\d+_\d+)(/|$)")
FBO_DRIVER = "fbo-driver"  # in a Ray session folder fbo's driver started: "<pid> <start time>"


def mark_session(ray) -> None:
    """Mark the local Ray session this driver has just started (never a cluster it joined, e.g. one of
    ``ray start --head``) as fbo's: only such a session's processes are ever reaped."""
    try:
        node = ray._private.worker._global_node
        if node is None or not node.head:
            return
        atomic_write(Path(node.get_session_dir_path(), FBO_DRIVER), f"{os.getpid()} {started_at(os.getpid())}\n")
    except (AttributeError, OSError, UsageError):
        pass


def _fbo_driver_dead(session: str) -> bool:
    """The session was started by an fbo driver (its mark) that is no longer running."""
    try:
        pid, start = Path(session, FBO_DRIVER).read_text().split()
    except (OSError, ValueError):
        return False  # not fbo's session (a `ray start` cluster, another program's Ray): never touched
    return started_at(int(pid)) != start


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
    from ...runs.rundir import CHECKPOINT

    (run_dir / "summary.json").unlink(missing_ok=True)
    for name in sorted(files, key=lambda n: n == "summary.json"):
        atomic_write(run_dir / name, files[name])
    if "summary.json" in files and not keep_checkpoint and _ended(files["summary.json"]):
        (run_dir / CHECKPOINT).unlink(missing_ok=True)  # a failed run keeps its last good checkpoint


def _ended(summary: bytes) -> bool:
    import json

    from ...runs.rundir import ENDINGS

    try:
        return json.loads(summary).get("status") in ENDINGS
    except (ValueError, AttributeError):
        return False


def check_reachable(address: str, timeout: float = 5.0) -> None:
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
                         f"`ray start --head`, or leave --address out for a local Ray",
                         kind="not_found", field="--address", value=address) from None
    if len(head) < 9 or head[3] != 0x04:
        raise UsageError(f"--address {address}: something answers there, but not a Ray cluster's GCS (no gRPC); "
                         f"the head node's address is what `ray start --head` prints (port 6379 by default)",
                         kind="bad_value", field="--address", value=address)


def _auto_address(ray) -> str:
    """``--address auto``: the address of the cluster ``ray start`` started on this node (Ray's own lookup),
    so that it is checked before Ray connects: a stale address would leave Ray waiting, then abort."""
    try:
        found = ray._private.services.get_ray_address_from_environment("auto", None)
    except ConnectionError:
        raise UsageError("--address auto: no Ray cluster runs on this node; start one with `ray start --head`, "
                         "or leave --address out for a local Ray",
                         kind="not_found", field="--address", value="auto") from None
    except AttributeError:  # another Ray version: let Ray look
        return "auto"
    return found or "auto"


def checked_address(ray, address: str | None) -> str | None:
    """The cluster address Ray is to join (``auto`` looked up), a UsageError where nothing or not Ray answers
    there: the executor's check when it starts, and :meth:`GridOptions.check_cluster`'s before a grid writes."""
    if address == "auto":
        address = _auto_address(ray)
    if address and not address.startswith("ray://"):
        check_reachable(address)
    return address


class Ray(Executor):
    """Each work a Ray task (``cpus``/``gpus`` each) on a local Ray started on demand (``jobs`` runs at a time) or
    the cluster at ``address``. The driver holds the runs' locks while their task is in flight (a run another
    process holds is busy, or waited for on the second pass); a finished run is reused without a task; the run
    directory's files travel both ways. Ctrl-C is a flag read between one-second waits (:func:`ctrl_c_flag`);
    :meth:`cancel` brings the checkpoints of the runs in flight home (:meth:`_bring_home`)."""

    suffix = " (ray)"
    afresh = "in a fresh Ray worker"

    def __init__(self, address: str | None, cpus: int, gpus: float, jobs: int, console=None):
        self.address, self.cpus, self.gpus, self.jobs, self.console = address, cpus, gpus, jobs, console
        self.pending: list[Work] = []
        self.inflight: dict[Any, Work] = {}  # task ref -> its work
        self.locks: dict[int, int] = {}  # cell index -> its run's lock, held while its task is in flight
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> Ray:
        self.ray = self._start()
        self.remote = self.ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0)(ray_task)
        self.interrupts = self.stack.enter_context(ctrl_c_flag())
        return self

    def _start(self):
        ray = import_ray()  # the options were checked when the GridOptions was made
        address, console = self.address, self.console
        started = not ray.is_initialized()
        if started:  # a local Ray (--jobs runs at a time when > 1), or the cluster at --address
            address = checked_address(ray, address)
            if not address and (reaped := reap_orphaned_ray()) and console is not None:
                console.print(f"reaped {len(reaped)} Ray process(es) ({sum(r for *_, r in reaped) // 1024} MB) left "
                              f"by an earlier local Ray whose driver was killed: "
                              f"{', '.join(f'{n} ({p})' for p, n, _ in reaped)}", markup=False, highlight=False)
            kw = {"address": address} if address else ({"num_cpus": self.jobs * self.cpus} if self.jobs > 1 else {})
            try:
                ray.init(log_to_driver=False, include_dashboard=False, configure_logging=False, **kw)
            except (ConnectionError, ValueError, RuntimeError) as e:
                why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                raise UsageError(f"Ray did not start{f' at --address {address}' if address else ''}: {why}"
                                 + ("; --address auto joins a cluster that `ray start --head` started on this node"
                                    if address == "auto" else ""), kind="failed", field="ray", value=why) from None
            if not address:
                mark_session(ray)
        have = ray.cluster_resources()
        for what, need in (("CPU", self.cpus), ("GPU", self.gpus)):
            if need and have.get(what, 0) < need:  # Ray would wait for them for ever
                if started:
                    ray.shutdown()
                raise UsageError(f"each run asks for {need:g} {what}(s) (--{what.lower()}s-per-run), but the Ray "
                                 f"cluster has {have.get(what, 0):g}",
                                 kind="unsupported", field=f"--{what.lower()}s-per-run", value=need)
        return ray

    def submit(self, work: Work) -> None:
        self.pending.append(work)

    def results(self):
        import time

        while self.pending or self.inflight:
            if self.interrupts:
                raise KeyboardInterrupt
            for w in list(self.pending):  # submit every work whose locks we get
                yield from self._launch(w)
            if not self.inflight:
                time.sleep(0.5)  # every remaining run is held by another process
                continue
            done, _ = self.ray.wait(list(self.inflight), num_returns=1, timeout=1.0)
            for ref in done:
                yield self._collect(ref)

    def _launch(self, w: Work):
        """Take the runs' locks (all, or none: busy, or left pending when ``w.wait``); yield the runs finished
        already (reused), start a task for the others."""
        from ...runs.rundir import CHECKPOINT, ended, lock_run, run_status

        fds = [lock_run(c.cfg.run_dir, wait=False) for c in w.cells]
        if any(fd is None for fd in fds):
            for fd in fds:
                if fd is not None:
                    os.close(fd)
            if not w.wait:
                self.pending.remove(w)
                yield w, [{"status": "busy"}] * len(w.cells)
            return
        self.pending.remove(w)
        todo, files_in, reused = [], [], []
        for k, (c, fd) in enumerate(zip(w.cells, fds)):
            state, summary, why = run_status(c.cfg.run_dir)
            if not w.rerun and ended(state, summary):
                os.close(fd)
                reused.append((w.part([k]), [{**summary, "reused": True}]))
                continue
            if state == "corrupt":
                self.listener.say(f"{c.cfg.run_dir}: {why}; running it again")
            ck = c.cfg.run_dir / CHECKPOINT
            files_in.append({CHECKPOINT: ck.read_bytes()} if ck.is_file() and not w.rerun else {})
            todo.append(k)
            self.locks[w.index[k]] = fd
        if todo:
            w = w.part(todo)
            c0 = w.cells[0].cfg
            self.inflight[self.remote.remote(c0.task, c0.algo_ref, [c.layers for c in w.cells], self.cpus, files_in,
                                             w.rerun)] = w
        yield from reused  # every lock is where it belongs by now

    def _collect(self, ref) -> tuple[Work, list[dict] | None]:
        """A finished (or interrupted) task's summaries, one per run (``None``: its worker died); their files land
        in the run directories."""
        w = self.inflight.pop(ref)
        fds = [self.locks.pop(i) for i in w.index]
        try:
            got = self.ray.get(ref)
        except Exception as e:  # the worker died, or the task raised
            for fd in fds:
                os.close(fd)
            if isinstance(e, _lost(self.ray)):
                return w, None
            return w, [_failed(e)] * len(fds)
        out = []
        for c, (s, files), fd in zip(w.cells, got, fds, strict=True):
            try:
                if "config.yaml" in files:  # the driver's paths, not the worker's temporary out_dir
                    import yaml

                    used = (yaml.safe_load(files["config.yaml"]) or {}).get("device_used")
                    files["config.yaml"] = yaml.safe_dump({**c.cfg.as_dict(), "device_used": used},
                                                          sort_keys=False).encode()
                _land(c.cfg.run_dir, files, c.cfg.run.keep_checkpoint)
            except Exception as e:
                s = _failed(e)
            finally:
                os.close(fd)
            out.append(s)
        return w, out

    def cancel(self, why: BaseException) -> str | None:
        self.pending.clear()
        if not isinstance(why, KeyboardInterrupt):  # an error: the tasks in flight are left to Ray
            return None
        self.interrupts[:] = self.interrupts or [1]  # the first Ctrl-C; a second one gives the runs up
        return self._bring_home()

    def close(self) -> None:
        for fd in self.locks.values():
            os.close(fd)
        self.locks.clear()
        self.stack.close()

    def _bring_home(self, patience: float = 120.0) -> str:
        """After Ctrl-C: ask every task in flight to stop (SIGINT in its worker: the run writes its checkpoint
        and returns), land what comes back within ``patience`` seconds or until a second Ctrl-C
        (``interrupts`` grows), force-cancel the rest. What happened, in one sentence."""
        import time

        ray, inflight = self.ray, self.inflight
        home: list[str] = []
        lost: list[str] = []  # cancelled before the run took the signal over, or no answer in time
        for ref in inflight:
            ray.cancel(ref, force=False)
        self.listener.say(f"interrupted: bringing home the checkpoints of {len(inflight)} run(s) in flight "
                          f"(Ctrl-C again to give them up)")
        deadline = time.monotonic() + patience
        try:
            while inflight and time.monotonic() < deadline and len(self.interrupts) < 2:
                done, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
                for ref in done:
                    w, res = self._collect(ref)
                    for c, s in zip(w.cells, res or [{"status": "failed"}] * len(w.cells)):
                        (lost if s["status"] == "failed" else home).append(label(c))
        except KeyboardInterrupt:
            pass
        lost += [label(c) for w in inflight.values() for c in w.cells]
        for ref in inflight:
            ray.cancel(ref, force=True)
        inflight.clear()
        msg = (f"interrupted: {len(home)} run(s) in flight wrote their checkpoints into their run directories"
               if home else "interrupted")
        if lost:
            names = ", ".join(lost[:4]) + (", ..." if len(lost) > 4 else "")
            msg += f"; what {len(lost)} run(s) did since their last checkpoint is lost ({names})"
        return msg + "; run the same command again to continue"


def _failed(e: Exception) -> dict[str, Any]:
    return {"status": "failed", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}


def _lost(ray) -> tuple[type, ...]:
    """Ray's errors of a task whose worker (or node) died under it, not of the task itself: the driver retries it
    once (Ray's own retry is off, so that there is one)."""
    names = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError")
    return tuple(t for n in names if isinstance(t := getattr(ray.exceptions, n, None), type))


@contextlib.contextmanager
def ctrl_c_flag():
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


