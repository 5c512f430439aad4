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
from .common import GridInterrupted, _label, _one, _one_batch, _progress, _report

RAY_HINT = "pip install -e '.[ray]' in the repository (make setup does it)"


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
        res = [_one(cfgs[0], rerun, True)] if len(cfgs) == 1 else _one_batch(cfgs, rerun, True)
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

    from ...runs.rundir import CHECKPOINT, ended, lock_run, run_status

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
                        if not rerun and ended(state, summary):
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
