"""Timing one case: seconds per outer iteration (fast and generic paths, alternating), its FLOPs, the
machine's sgemm rate measured between the case's own iterations, peak memory, evaluation seconds; the
growth sweeps; a case run in a forked process (its own peak RSS)."""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from ..runs.config import resolve
from ..runs.runner import build

FAST_TASKS = ("hyperrep", "hyperclean", "auc")  # tasks with a closed-form path (``fast``)


class Sgemm:
    """``torch.matmul`` of two ``n x n`` fp32 matrices: ``tick()`` times one product, ``rate`` is the best
    GFLOP/s so far. A case times its own products between its iterations, so that its efficiency is
    measured against the machine in the same window (the load of a shared machine drifts)."""

    def __init__(self, device: torch.device, n: int = 2048):
        g = torch.Generator(device=device).manual_seed(0)
        self.a, self.b = (torch.rand(n, n, generator=g, device=device) for _ in range(2))
        self.device, self.n, self.best = device, n, float("inf")

    def tick(self) -> None:
        self.best = min(self.best, _timed(lambda: self.a @ self.b, self.device))

    @property
    def rate(self) -> float:
        return 2 * self.n ** 3 / self.best / 1e9


def sgemm_rate(device: torch.device, n: int = 2048, reps: int = 5) -> float:
    """GFLOP/s of ``torch.matmul`` on two ``n x n`` fp32 matrices (best of ``reps``)."""
    s = Sgemm(device, n)
    for _ in range(reps + 1):
        s.tick()
    return s.rate


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak(device) -> int:
    """Start a peak-memory window; returns the baseline (bytes)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        pass
    return _rss_kb("VmRSS") * 1024


def _peak(device, base: int) -> float:
    """MB of peak memory above ``base`` since ``_reset_peak``."""
    now = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else _rss_kb("VmHWM") * 1024
    return max(0, now - base) / 2 ** 20


def _has_fast(task: str) -> bool:
    """Whether ``task`` has a closed-form path (a ``fast`` parameter) in the code that runs: an older tree
    timed by ``--against`` may not have it yet."""
    import dataclasses

    from ..tasks import TASKS

    params = getattr(TASKS.get(task), "Params", None)
    return task in FAST_TASKS and params is not None and any(f.name == "fast" for f in dataclasses.fields(params))


def _build(case: dict, device: str, fast: bool | None):
    keys = {**(case.get("set") or {}), "threads": None, "device": device}
    if fast is not None:
        keys["fast"] = fast
    return build(resolve(case["task"], case["algo"], keys))


def _flops(algo) -> float:
    with FlopCounterMode(display=False) as fc:
        algo.step()
    return float(fc.get_total_flops())


class _ProductClock(TorchDispatchMode):
    """Seconds spent inside the matrix products (the ops whose FLOPs :class:`FlopCounterMode` counts), on the CPU."""

    def __init__(self):
        super().__init__()
        self.s = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket not in flop_registry:
            return func(*args, **(kwargs or {}))
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.s += time.perf_counter() - t0
        return out


def product_share(algo, steps: int = 2) -> float:
    """The share of an outer iteration of ``algo`` spent in its matrix products (CPU): the least time of ``steps``
    iterations under a clock that stops with each product (the dispatch's own overhead falls outside it) over the
    least whole time of as many plain iterations, each right after one of them (hfl's work grows with the round)."""
    prod, whole = float("inf"), float("inf")
    for _ in range(steps):
        with _ProductClock() as clock:
            algo.step()
        prod = min(prod, clock.s)
        t0 = time.perf_counter()
        algo.step()
        whole = min(whole, time.perf_counter() - t0)
    return prod / whole


def time_case(case: dict, iters: int, device: str = "cpu", generic: bool = True, min_s: float = 0.0) -> dict:
    """Time one case (fast path, and the generic path when the task has one and ``generic``): at least
    ``iters`` rounds of alternating iterations, more while less than ``min_s`` seconds have gone by
    (at most ``4 iters``; cheap cases get more samples for their minimum)."""
    has_fast = _has_fast(case["task"])
    b = _build(case, device, True if has_fast else None)
    dev = b.device
    base = _reset_peak(dev)
    b = _build(case, device, True if has_fast else None)  # built again inside the memory window
    algo, led = b.algo, b.ledger
    algo.step()  # warm-up (a first iteration may do more: FedBiOAcc's and AdaFBiO's first estimators)
    flops = _flops(algo)  # the second iteration
    mem = _peak(dev, base)

    def third():  # a fresh build after two iterations: its next step is the same iteration every time
        a = _build(case, device, True if has_fast else None).algo
        a.step()
        a.step()
        return a

    grows = getattr(algo, "work_grows", case["task"] == "hfl")  # (an older tree under --against lacks it)
    if grows:  # hfl: ceil(tau sqrt(r + 1)) local steps in round r; time and count the third iteration
        a3 = third()
        r1 = a3.ledger.rounds
        flops = _flops(a3)
        rounds = a3.ledger.rounds - r1
    paths = {"fast": algo}
    flops_g = float("nan")
    if has_fast and generic:
        paths["generic"] = _build(case, device, False).algo
        flops_g = _flops(paths["generic"])
    times: dict[str, list[float]] = {k: [] for k in paths}
    r0 = led.rounds
    sg = Sgemm(dev)
    sg.tick()
    t0, done = time.perf_counter(), 0
    while done < iters or (time.perf_counter() - t0 < min_s and done < 4 * iters):
        for k, a in paths.items():  # alternate, so that both paths (and sgemm) see the same load
            times[k].append(_timed((third() if grows and k == "fast" else a).step, dev))
        sg.tick()
        done += 1
    if not grows:
        rounds = (led.rounds - r0) / done
    ev, ev_test = eval_seconds(algo, dev)
    t = min(times["fast"])
    tg = min(times["generic"]) if "generic" in times else float("nan")
    return {"case": case["name"], "task": case["task"], "algo": case["algo"], "device": dev.type,
            "s_per_iteration": t, "rounds_per_iteration": rounds, "s_per_round": t / max(rounds, 1e-9),
            "gflop": flops / 1e9, "gflops": flops / t / 1e9, "generic_s": tg, "generic_gflop": flops_g / 1e9,
            "speedup": tg / t, "peak_mb": mem, "eval_s": ev, "eval_test_s": ev_test,
            "eval_per_iteration": (ev if ev_test != ev_test else ev_test) / t, "sgemm_gflops": sg.rate}


def eval_seconds(algo, dev, reps: int = 3) -> tuple[float, float]:
    """(seconds of one evaluation with the task's default metrics, the same with the test metrics only),
    min over ``reps``; the second is NaN for a task without an ``eval`` selection (hyperrep has one: the
    compared runs of a spec need only the test set, tuning runs also the validation splits)."""
    ev = min(_timed(algo.evaluate, dev) for _ in range(reps))
    task = algo.task
    if getattr(task, "eval_on", ("test",)) == ("test",):
        return ev, float("nan")
    keep, task.eval_on = task.eval_on, ("test",)
    try:
        return ev, min(_timed(algo.evaluate, dev) for _ in range(reps))
    finally:
        task.eval_on = keep



def growth_case(case: dict, iters: int, device: str = "cpu") -> dict:
    t0 = time.perf_counter()
    b = _build(case, device, True)
    build_s = time.perf_counter() - t0
    algo, dev, data = b.algo, b.device, b.task.data
    flops = _flops(algo)
    sg = Sgemm(dev)
    sg.tick()
    ts = []
    for _ in range(iters):
        ts.append(_timed(algo.step, dev))
        sg.tick()

    def sample_gather():
        S = algo.fed.sample()
        data.split("train", S), data.split("val", S)

    sgt = min(_timed(sample_gather, dev) for _ in range(5))
    t = min(ts)
    return {"sweep": case["sweep"], "case": case["name"], "clients": data.num_clients,
            "participating": case["M"], "examples_per_client": int(data.train_mask.sum() + data.val_mask.sum())
            // data.num_clients, "s_per_iteration": t, "s_per_participant": t / case["M"], "gflop": flops / 1e9,
            "gflops": flops / t / 1e9, "sample_gather_ms": sgt * 1e3, "build_s": build_s, "sgemm_gflops": sg.rate}


def _child(fn, args, conn) -> None:
    torch.set_num_threads(args[-1])
    try:
        conn.send(fn(*args[:-1]))
    except Exception as e:  # report, do not hang the parent
        conn.send({"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
    conn.close()


def isolated(fn, args: tuple, device: str, threads: int):
    """Run ``fn(*args)`` in a forked process on the CPU (own peak RSS, own allocator), in-process on CUDA."""
    if device == "cuda" or not hasattr(mp, "get_context"):
        return fn(*args)
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(fn, (*args, threads), send))
    p.start()
    send.close()
    out = recv.recv()
    p.join()
    if "error" in out:
        raise RuntimeError(out["error"])
    return out


# --------------------------------------------------------------------------------------------------
