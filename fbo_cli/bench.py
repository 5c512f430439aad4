"""``make bench``: cost per outer iteration of every algorithm, measured against the machine.

For each case: seconds per outer iteration (min over ``iters`` timed iterations after a warm-up, more
for a cheap case, up to ``--min-seconds``) and
per communication round, the FLOPs of one iteration (``torch.utils.flop_counter.FlopCounterMode`` on the
second iteration: a first one may do more, as FedBiOAcc's and AdaFBiO's first estimators do; where an
iteration's work grows over a run (``Algorithm.work_grows``: ``hfl``'s ``ceil(tau sqrt(r + 1))`` local steps)
every timed iteration is the same one, the third, each of a fresh build, and its FLOPs are counted there),
the achieved GFLOP/s, and the **efficiency**: achieved GFLOP/s over the
machine's own sgemm rate (``torch.matmul`` of two 2048² fp32 matrices, same thread count), measured
between the case's own timed iterations (best of those), so that the ratio is stable on a noisy
machine whose load drifts during the run. Cases whose task has a fast path
(``fast``: hyperrep and auc with the mlp, hyperclean) are also timed with ``fast=false`` (the generic
``torch.func`` path), alternating fast and generic iterations in one process: ``speedup`` is their
ratio. Peak memory: on the CPU each case runs in a forked process and reports its peak RSS above the
RSS it started with (``/proc/self/clear_refs``, ``VmHWM``), for the fast path; on CUDA
``torch.cuda.max_memory_allocated``.

Cases: the setting of Xiao & Ji (ICML 2023) (MNIST-size MLP on Fashion-MNIST, 100 clients, iid, participation 0.1
and 1.0) for ``fednest`` and ``aggitd``, every case of ``experiments/bench.yaml``, and two growth
sweeps of FedNest (fast path): participating clients 10, 20, 50, 100 (of 100), and total clients
100, 1,000, 10,000 at C = 0.01 (the same 60,000 examples dealt out, so the participating clients
hold 600 examples in all; ``sample+gather`` times drawing the clients and gathering their splits).
For scale, a per-client-loop FedNest iteration written like the public FedNest code, and a whole
FedNest run (500 rounds, IID, tau = 1, C = 0.1) at each tool's evaluation cadence: fbo measured whole,
the loop reference as its iteration and its evaluation (test and training sets, as the public code
does after every outer iteration) times their counts. Evaluation: ``eval s`` with the task's default
metrics, ``eval s, test only`` with the test set alone (hyperrep's ``eval: test``, what a spec's
compared runs need), and ``eval / iteration`` (the cheaper of the two over an outer iteration).

Writes ``results/bench/bench.csv``, ``growth.csv`` and ``bench.md`` (in ``results/bench/cuda/`` with
``--device cuda``). Usage: ``fbo bench [--quick] [--device cpu|cuda] [--threads N]
[--only SUBSTRINGS] [--profile]``. ``--profile`` writes ``profile.md`` instead of the bench: for each case of
``PROFILE`` (FedNest and FBO-AggITD in Xiao & Ji's ICML 2023 setting at C = 0.1, FedBiO and FedAvg on
hyper-cleaning, CODASCA on synth-c100, ZO-HFL) the split of an outer iteration into sampling, oracles and
the rest (``phases``: plain timers, no profiler), then the ``torch.profiler`` table (self time by operator
and input shapes) of one outer iteration.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing as mp
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import pandas as pd
import torch
import yaml
from torch.utils.flop_counter import FlopCounterMode

from .config import resolve
from .results import atomic_write, code_commit
from .runner import build

DATA = {"dataset": "fashion-mnist", "partition": "iid"}
SPINE = [
    {"name": f"{a}-mlp-fmnist-m100-C{c}", "task": "hyperrep", "algo": a,
     "set": {**DATA, "clients": 100, "participation": c}}
    for a in ("fednest", "aggitd") for c in (0.1, 1.0)
]
GROWTH_M = [{"name": f"fednest-m100-M{m}", "task": "hyperrep", "algo": "fednest", "sweep": "participating",
             "M": m, "set": {**DATA, "clients": 100, "participation": m / 100}} for m in (10, 20, 50, 100)]
GROWTH_N = [{"name": f"fednest-m{n}-C0.01", "task": "hyperrep", "algo": "fednest", "sweep": "total",
             "M": n // 100, "set": {**DATA, "clients": n, "participation": 0.01}} for n in (100, 1000, 10_000)]
FAST_TASKS = ("hyperrep", "hyperclean", "auc")
PROFILE = ("fednest-mlp-fmnist-m100-C0.1", "aggitd-mlp-fmnist-m100-C0.1", "fedbio-hyperclean-fmnist-M10-I5",
           "fedavg-noisy-hyperclean-fmnist-M10-I5", "codasca-synth-K16-I32", "zohfl-fmnist-a1000-b0.9")


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

    from .tasks import TASKS

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


def whole_run_fednest(data, rounds: int = 500, reps: int = 2) -> dict:
    """Seconds of a whole FedNest run (IID, tau = 1, 100 clients, C = 0.1: 10 rounds per outer iteration)
    at each tool's evaluation cadence: fbo evaluates the test set after every outer iteration (as the
    Table 2 specs do) and the public code evaluates test *and* training accuracy after every outer
    iteration (``test_img`` over the test set and the training set). Ours is measured whole (every step
    and every evaluation); the public code's is its per-client-loop iteration (:func:`loop_fednest_iteration`)
    and its evaluation (:func:`loop_fednest_eval`) measured once each and multiplied by the count. Ours is
    the faster of ``reps`` whole runs, as the public code's iteration is the fastest of its intervals."""
    iters = rounds // 10
    b = _build({**SPINE[0], "set": {**SPINE[0]["set"], "eval": "test"}}, "cpu", True)
    algo = b.algo
    algo.step()
    algo.evaluate()  # warm-up
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        algo.evaluate()
        for _ in range(iters):
            algo.step()
            algo.evaluate()
        runs.append(time.perf_counter() - t0)
    ours = min(runs)
    loop_fednest_iteration(data)
    it = min(loop_fednest_iteration(data, gen=torch.Generator().manual_seed(k)) for k in range(2))
    ev = min(loop_fednest_eval(data) for _ in range(2))
    ref = iters * it + (iters + 1) * ev
    return {"rounds": rounds, "iterations": iters, "ours_s": ours, "ours_runs_s": runs, "ref_iteration_s": it,
            "ref_eval_s": ev, "ref_s": ref, "ratio": ref / ours}



PUBLIC_ARGS = ["--hlr", "0.01", "--lr", "0.01", "--outer_tau", "1", "--round", "10000000", "--local_bs", "64",
               "--iid", "--gpu", "-1"]  # reproduce/fig2.sh, FedNest, tau = 1, IID (the whole-run line's setting)


def public_fednest(checkout: Path, mnist_raw: Path, iters: int = 4, timeout: float = 3600) -> dict:
    """Seconds per outer iteration of the public FedNest code (``main_hr.py`` of mc-nya/FedNest, the code
    FBO-AggITD's experiments build on) at the whole-run line's setting: MNIST, IID, 100 clients, C = 0.1,
    tau = 1, local batch 64 (its ``reproduce/fig2.sh``), one CPU thread. Timed between its own
    per-iteration prints, each after the iteration's training and its ``test_img`` of the test and the
    training set, so start-up and data loading are left out; the minimum over ``iters - 1`` intervals.
    The checkout is copied to a temporary folder beside a link to fbo's MNIST idx files (the code reads
    ``../data/mnist/``); two imports it never uses (``cv2.log``, ``importlib_metadata.requires``) are
    stubbed on its path. Nothing of the code is edited."""
    import subprocess
    import tempfile

    from .witness import prepared  # the same copy, data link and stubs as the witness runs

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cwd = prepared(checkout, mnist_raw, root)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONPATH": str(root / "stubs")}
        cmd = [sys.executable, "-u", "main_hr.py", *PUBLIC_ARGS, "--epochs", str(iters),
               "--output", str(root / "log.yaml")]
        stamps, t0 = [], time.perf_counter()
        with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                if "Comm round:" in line:
                    stamps.append(time.perf_counter())
                if time.perf_counter() - t0 > timeout:
                    proc.kill()
                    break
        if proc.returncode or len(stamps) < 2:
            raise RuntimeError(f"the public FedNest code stopped after {len(stamps)} outer iteration(s), "
                               f"exit code {proc.returncode}")
    per = min(b - a for a, b in zip(stamps, stamps[1:]))
    return {"public_iteration_s": per, "public_startup_s": stamps[0] - t0 - per, "public_iters": len(stamps)}


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


def _phase_hooks(algo) -> list[tuple[object, str, str]]:
    """``(owner, attribute, phase)`` of the functions whose time ``phases`` attributes: drawing and gathering
    minibatches, and the oracles (gradients and Hessian products of every task)."""
    from .algorithms.codasca import EpochSampler
    from .algorithms.pool_sampler import RowSampler
    from .data import FederatedData
    from .data.split import Split

    task = algo.task
    hooks = [(RowSampler, "sample", "sampling"), (Split, "sample", "sampling"), (EpochSampler, "next", "sampling"),
             (FederatedData, "split", "sampling"), (task, "batch_rows", "sampling"), (task, "gather", "sampling")]
    hooks += [(algo, n, "oracles") for n in ("grad", "grad_diff", "hvp", "cross", "grad_mean", "hvp_mean",
                                              "cross_mean", "hypergrad", "upper_round")]
    hooks += [(task, n, "oracles") for n in ("grads", "ce_grad")]
    return [h for h in hooks if callable(getattr(h[0], h[1], None))]


def phases(algo, device, iters: int = 10) -> dict[str, float]:
    """Seconds per outer iteration spent drawing minibatches, in the oracles, and elsewhere (the updates, the
    averaging, the bookkeeping): ``iters`` iterations timed by ``perf_counter`` around the functions of
    ``_phase_hooks``, outermost call only (``torch.profiler`` inflates some operators, e.g. row gathers,
    several-fold on the CPU). On CUDA the phases are timed with a synchronisation around each call."""
    dev = torch.device(device)
    spent = {"sampling": 0.0, "oracles": 0.0}
    depth = [0]
    saved = []

    def wrap(fn, phase):
        def timed(*a, **k):
            if depth[0]:
                return fn(*a, **k)
            depth[0] += 1
            _sync(dev)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                _sync(dev)
                spent[phase] += time.perf_counter() - t0
                depth[0] -= 1
        return timed

    for owner, name, phase in _phase_hooks(algo):
        saved.append((owner, name, owner.__dict__.get(name)))  # None: inherited (a class) or a method (an instance)
        setattr(owner, name, wrap(getattr(owner, name), phase))
    try:
        algo.step()
        spent.update(sampling=0.0, oracles=0.0)
        total = sum(_timed(algo.step, dev) for _ in range(iters))
    finally:
        for owner, name, orig in reversed(saved):
            if orig is None:
                delattr(owner, name)  # the inherited or class method shows through again
            else:
                setattr(owner, name, orig)
    out = {k: v / iters for k, v in spent.items()}
    out["other"] = total / iters - out["sampling"] - out["oracles"]
    out["total"] = total / iters
    return out


DRAW_OPS = ("aten.rand", "aten.uniform_", "aten.random_", "aten.topk", "aten.sort", "aten.index_select",
            "aten.randperm", "aten.normal_")


def _sig(x):
    """A hashable signature of an operator's arguments: tensors by shape and dtype, generators by kind."""
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), x.dtype)
    if isinstance(x, (list, tuple)):
        return tuple(_sig(v) for v in x)
    return "gen" if isinstance(x, torch.Generator) else x


def floor_ms(algo, device, sgemm: float) -> dict[str, float]:
    """What an outer iteration costs at least while it keeps today's numbers, with torch's kernels: its random
    draws, the selections and the row gathers they make (the ``DRAW_OPS`` of one iteration, recorded by a
    dispatch mode, each distinct operator and shapes then replayed alone on copies of its inputs, warm in
    the cache, so a lower bound), plus the iteration's FLOPs at the sgemm rate."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict = {}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket)
            if name in DRAW_OPS:
                key = (func, _sig(args), _sig(sorted((kwargs or {}).items())))
                seen.setdefault(key, [0, args, kwargs or {}])[0] += 1
            return func(*args, **(kwargs or {}))

    with FlopCounterMode(display=False) as fc, Record():
        algo.step()
    dev = torch.device(device)
    draws = 0.0
    for (func, _, _), (count, args, kwargs) in seen.items():
        args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        kw = {k: torch.Generator(device=v.device) if isinstance(v, torch.Generator) else v for k, v in kwargs.items()}

        def ten(func=func, args=args, kw=kw):
            for _ in range(10):
                func(*args, **kw)

        ten()
        draws += count * min(_timed(ten, dev) for _ in range(5)) / 10
    gemm = fc.get_total_flops() / (sgemm * 1e9)
    return {"draws_ms": 1e3 * draws, "flops_ms": 1e3 * gemm, "floor_ms": 1e3 * (draws + gemm)}


def profile_case(case: dict, device: str = "cpu", rows: int = 25) -> str:
    """Markdown: where one outer iteration's time goes (``phases``), then the ``torch.profiler`` table of one
    outer iteration (after one warm-up iteration)."""
    from torch.profiler import ProfilerActivity, profile

    algo = _build(case, device, None).algo
    ph = phases(algo, device)
    phase_md = "\n".join(["| phase | ms / iteration | share |", "|---|---|---|"]
                          + [f"| {k} | {1e3 * v:.2f} | {v / ph['total']:.0%} |" for k, v in ph.items()])
    fl = floor_ms(algo, device, sgemm_rate(torch.device(device)))
    phase_md += (f"\n\nFloor (``floor_ms``: what the iteration costs at least with the same numbers): its random "
                 f"draws, selections and row gathers alone {fl['draws_ms']:.2f} ms + its FLOPs at the sgemm rate "
                 f"{fl['flops_ms']:.2f} ms = {fl['floor_ms']:.2f} ms, {fl['floor_ms'] / (1e3 * ph['total']):.0%} of "
                 "the iteration above")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=acts, record_shapes=True) as prof:
        algo.step()
        _sync(torch.device(device))
    wall = time.perf_counter() - t0
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    table = prof.key_averages(group_by_input_shape=True).table(
        sort_by=key, row_limit=rows, max_name_column_width=40, max_shapes_column_width=70)
    by_op = prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=40)
    return (f"## {case['name']}\n\n`{case['task']}` / `{case['algo']}`, set {case.get('set')}\n\n"
            f"Where the time goes (10 iterations, no profiler; sampling: drawing and gathering minibatches; "
            f"oracles: gradients and Hessian products):\n\n{phase_md}\n\nOne iteration, "
            f"{wall:.3f} s under the profiler\n\nBy operator:\n\n```\n{by_op}\n```\n\n"
            f"By operator and input shapes:\n\n```\n{table}\n```\n")


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
# Before and after: the same cases on two versions of the code, alternating fresh processes.

AB_CASES = ("codaplus-synth", "codasca-synth", "fedavg-ce-synth", "codasca-fmnist-cnn", "zohfl-fmnist",
            "fedavg-fmnist", "fedbio-hyperclean", "fedbioacc-hyperclean", "fedavg-noisy", "fedavg-clean")


def _git(*args: str) -> str:
    """``git`` in this checkout (bench's own: an older tree's results.py, loaded under --against, has no helper)."""
    import subprocess

    return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parents[1], check=True,
                          capture_output=True, text=True).stdout.strip()


def is_revision(rev: str) -> bool:
    import subprocess

    try:
        return bool(_git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"))
    except (OSError, subprocess.CalledProcessError):
        return False


def _code_tree(against: str, tmp: Path) -> tuple[Path, str]:
    """``(folder whose fbo_cli/ is the code to compare, its name)``: ``against`` is a checkout (a folder with
    ``fbo_cli/``) or a git revision of this repository, whose ``fbo_cli/`` is exported to ``tmp``."""
    import subprocess
    import tarfile

    if (Path(against) / "fbo_cli").is_dir():
        return Path(against).resolve(), str(against)
    archive = tmp / "before.tar"
    try:
        sha = _git("rev-parse", "--short", f"{against}^{{commit}}")
        _git("archive", "-o", str(archive), sha, "fbo_cli")
    except (OSError, subprocess.CalledProcessError) as e:
        raise ValueError(f"--against {against}: neither a checkout with fbo_cli/ nor a git revision here") from e
    with tarfile.open(archive) as t:
        t.extractall(tmp / "before", filter="data")
    return tmp / "before", f"commit {sha}"


# This bench (argv[2]) on the code in argv[1]: that tree's fbo_cli first on the path (ahead of the working
# directory and of an editable install), this file loaded as its fbo_cli.bench, so that both sides are timed
# by the same instrument (an older tree may lack results.code_commit, which only labels the output)
_AB_CHILD = """import importlib.util, sys
from pathlib import Path
root, src = Path(sys.argv.pop(1)).resolve(), sys.argv.pop(1)
sys.path.insert(0, str(root))
import fbo_cli, fbo_cli.results
assert Path(fbo_cli.__file__).resolve().parent == root / "fbo_cli", fbo_cli.__file__
fbo_cli.results.code_commit = getattr(fbo_cli.results, "code_commit", lambda: "")
spec = importlib.util.spec_from_file_location("fbo_cli.bench", src)
bench = sys.modules["fbo_cli.bench"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
bench.main(sys.argv[1:])
"""


def ab_bench(against: str, only: list[str], rounds: int, threads: int, out: Path, con,
             after: Path | None = None, bench_file: str = __file__) -> pd.DataFrame:
    """Time ``only`` (substrings of case names) on the code of ``against`` ("before") and on this code
    ("after"): ``rounds`` rounds, each running this bench (``--only``) on both sides' code in fresh processes,
    before then after in odd rounds and the other way round in even ones, so that both see the same machine
    over the same minutes and neither always goes first. Keeps each case's fastest
    iteration over the rounds and its spread (slowest round's minimum over fastest), and writes
    ``ab.csv`` and ``ab.md``. The cases are those of this tree's ``experiments/bench.yaml``; ``after`` is
    this code's checkout and ``bench_file`` this file unless given (a test gives its own)."""
    import subprocess
    import tempfile

    here = after or Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        before, label = _code_tree(against, tmp)
        frames, skipped = [], {}
        for r in range(rounds):
            for side, root in (("before", before), ("after", here))[::1 if r % 2 == 0 else -1]:
                con.print(f"round {r + 1}/{rounds}: {side} ({label if side == 'before' else 'this code'}) ...",
                          style="dim")
                dest = tmp / f"{side}{r}"
                cmd = [sys.executable, "-c", _AB_CHILD, str(root), bench_file, "--only", ",".join(only),
                       "--out", str(dest), "--threads", str(threads)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode or not (dest / "bench.csv").is_file():
                    raise RuntimeError(f"the {side} bench failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
                for line in proc.stdout.splitlines():  # a case that fails on one side is reported, not hidden
                    if line.startswith("skipped "):
                        skipped.setdefault(line.split()[1].rstrip(":"), f"{side}: {line}")
                df = pd.read_csv(dest / "bench.csv")
                df["side"], df["round"] = side, r
                frames.append(df)
    runs = pd.concat(frames, ignore_index=True)
    runs["eff"] = runs["gflops"] / runs["sgemm_gflops"]
    best = runs.groupby(["case", "side"]).agg(s=("s_per_iteration", "min"), worst=("s_per_iteration", "max"),
                                              eff=("eff", "max")).unstack("side")
    rows = []
    for case in [c for c in dict.fromkeys(runs["case"]) if c in best.index]:
        b = best.loc[case]
        if b.isna().any():  # timed on one side only
            skipped.setdefault(case, "timed on one side only")
            continue
        rows.append({"case": case, "before_s": b[("s", "before")], "after_s": b[("s", "after")],
                     "speedup": b[("s", "before")] / b[("s", "after")],
                     "before_spread": b[("worst", "before")] / b[("s", "before")],
                     "after_spread": b[("worst", "after")] / b[("s", "after")],
                     "before_efficiency": b[("eff", "before")], "after_efficiency": b[("eff", "after")]})
    ab = pd.DataFrame(rows)
    md = [f"**fbo bench --against: {label} (before) and {code_commit().lstrip(', ') or 'this code'} (after), "
          f"{rounds} alternating rounds of fresh processes, torch {torch.__version__}, {threads} thread(s)**", "",
          "| case | before s / iteration | after s / iteration | speedup | efficiency before → after | "
          "spread before, after |", "|---|---|---|---|---|---|"]
    md += [f"| {r.case} | {r.before_s:.4f} | {r.after_s:.4f} | {r.speedup:.2f}x | {r.before_efficiency:.0%} → "
           f"{r.after_efficiency:.0%} | {r.before_spread:.2f}, {r.after_spread:.2f} |" for r in ab.itertuples()]
    md += ["", "Both sides timed by this bench, each on its own code. Each side's fastest iteration over the rounds "
           "(each round's own minimum of at least 3 iterations); spread: its slowest round over its fastest, the "
           "machine's noise in this window."]
    md += [f"Not compared: {c} ({why})." for c, why in skipped.items()]
    for c, why in skipped.items():
        con.print(f"[red]not compared: {c} ({why})[/red]")
    atomic_write(out / "ab.csv", ab.to_csv(index=False))
    atomic_write(out / "ab.md", "\n".join(md) + "\n")
    return ab


# --------------------------------------------------------------------------------------------------
# A per-client-loop FedNest outer iteration, structured like the public reference code, for scale.


class _MLP(torch.nn.Module):
    def __init__(self, d=784, h=200, c=10):
        super().__init__()
        self.fc1, self.drop, self.head = torch.nn.Linear(d, h), torch.nn.Dropout(0.5), torch.nn.Linear(h, c)

    def forward(self, X):
        return self.head(torch.relu(self.drop(self.fc1(X.flatten(1)))))


def loop_fednest_eval(data, bs: int = 128) -> float:
    """The public FedNest code's evaluation after an outer iteration, for scale: ``test_img`` (a
    ``DataLoader`` of batch ``bs`` through the ``nn.Module``, loss summed and argmax counted per batch) on
    the test set and on the training set; returns seconds."""
    net = _MLP(data.X[0].numel()).eval()
    F = torch.nn.functional
    t0 = time.perf_counter()
    with torch.no_grad():
        for X, y in ((data.X_test, data.y_test), (data.X, data.y)):
            loss, right = 0.0, 0
            for i in range(0, len(X), bs):
                out = net(X[i:i + bs])
                loss += F.cross_entropy(out, y[i:i + bs], reduction="sum").item()
                right += int((out.argmax(1) == y[i:i + bs]).sum())
    return time.perf_counter() - t0


def loop_fednest_iteration(data, participation=0.1, epochs=5, bs=64, T=5, lam=0.01, lr_in=0.003, lr_out=0.01,
                           reg=0.01, gen=None) -> float:
    """One FedNest outer iteration (N = 1, tau = 1) with a Python loop over clients; returns seconds."""
    gen = gen or torch.Generator().manual_seed(0)
    net = _MLP(data.X[0].numel())
    F = torch.nn.functional
    m = data.num_clients
    t0 = time.perf_counter()

    def clients():
        return torch.randperm(m, generator=gen)[:max(1, int(participation * m))].tolist()

    def rows(i, which):
        idx, mask = (data.train_idx, data.train_mask) if which == "train" else (data.val_idx, data.val_mask)
        return idx[i][mask[i]]

    def g_loss(model, X, y):
        return F.cross_entropy(model(X), y) + 0.5 * reg * sum((p * p).sum() for p in model.head.parameters())

    head = list(net.head.parameters())
    # FedInn (SVRG): anchor round, then local steps per client, then model averaging
    S = clients()
    anchors = []
    for i in S:
        r = rows(i, "train")
        anchors.append(torch.autograd.grad(g_loss(net, data.X[r], data.y[r]), head))
    q = [sum(a[k] for a in anchors) / len(S) for k in range(len(head))]
    new_heads = []
    for i in S:
        local = copy.deepcopy(net)
        lh = list(local.head.parameters())
        r = rows(i, "train")
        for _ in range(epochs):
            perm = r[torch.randperm(len(r), generator=gen)]
            for s in range(0, len(perm), bs):
                b = perm[s:s + bs]
                g1 = torch.autograd.grad(g_loss(local, data.X[b], data.y[b]), lh)
                g0 = torch.autograd.grad(g_loss(net, data.X[b], data.y[b]), head)
                with torch.no_grad():
                    for p, a, c, qq in zip(lh, g1, g0, q):
                        p -= lr_in * (a - c + qq)
        new_heads.append([p.detach().clone() for p in lh])
    with torch.no_grad():
        for k, p in enumerate(head):
            p.copy_(sum(h[k] for h in new_heads) / len(S))
    # FedIHGP and FedOut
    S = clients()
    v = None
    for i in S:
        r = rows(i, "val")
        gi = torch.autograd.grad(F.cross_entropy(net(data.X[r]), data.y[r]), head)
        v = gi if v is None else [a + b for a, b in zip(v, gi)]
    p = [a / len(S) for a in v]
    acc = [a.clone() for a in p]
    for _ in range(T):
        hv = None
        for i in S:
            r = rows(i, "train")
            gr = torch.autograd.grad(g_loss(net, data.X[r], data.y[r]), head, create_graph=True)
            hvi = torch.autograd.grad(sum((a * b).sum() for a, b in zip(gr, p)), head)
            hv = hvi if hv is None else [a + b for a, b in zip(hv, hvi)]
        p = [a - lam * b / len(S) for a, b in zip(p, hv)]
        acc = [a + b for a, b in zip(acc, p)]
    body = [net.fc1.weight, net.fc1.bias]
    hs = []
    for i in S:
        r, rv = rows(i, "train"), rows(i, "val")
        direct = torch.autograd.grad(F.cross_entropy(net(data.X[rv]), data.y[rv]), body)
        gr = torch.autograd.grad(g_loss(net, data.X[r], data.y[r]), head, create_graph=True)
        ind = torch.autograd.grad(sum((a * lam * b).sum() for a, b in zip(gr, acc)), body)
        hs.append([d - c for d, c in zip(direct, ind)])
    new = []
    for _ in S:
        local = copy.deepcopy(net)
        with torch.no_grad():
            for prm, k in zip([local.fc1.weight, local.fc1.bias], range(2)):
                prm -= lr_out * sum(h[k] for h in hs) / len(S)
        new.append([local.fc1.weight.detach().clone(), local.fc1.bias.detach().clone()])
    with torch.no_grad():
        for k, prm in enumerate(body):
            prm.copy_(sum(n[k] for n in new) / len(S))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=3, help="timed outer iterations per case and path (min is kept)")
    ap.add_argument("--min-seconds", type=float, default=4.0,
                    help="keep timing a case (up to 4x --iters) until this many seconds have gone by")
    ap.add_argument("--quick", action="store_true",
                    help="the FedNest and FBO-AggITD cases and the growth sweeps only, 2 iterations (a few minutes)")
    ap.add_argument("--cases", default="experiments/bench.yaml")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", default=None, help="output folder [default: results/bench, results/bench/cuda for cuda]")
    ap.add_argument("--profile", action="store_true",
                    help="instead of the bench: where an iteration's time goes and torch.profiler tables, for "
                    + ", ".join(PROFILE) + " (profile.md)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1: one core per run, as `compare --jobs 2` uses on 2 cores; "
                         "more threads on a loaded machine oversubscribe and time noise)")
    ap.add_argument("--public-fednest", default="",
                    help="a checkout of github.com/mc-nya/FedNest: time its outer iteration beside the whole run")
    ap.add_argument("--mnist-raw", default="data/MNIST/raw", help="MNIST idx files for --public-fednest")
    ap.add_argument("--against", default="",
                    help="a git revision or a checkout: instead of the bench, time the latency-bound cases ("
                    + ", ".join(AB_CASES) + "; or --only) on that code and on this code, alternating fresh "
                    "processes, and write ab.md")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of --against")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.out is None:  # a GPU bench sits beside the CPU one (the report shows both)
        args.out = "results/bench/cuda" if args.device == "cuda" else "results/bench"
    iters = 2 if args.quick and args.iters == 3 else args.iters

    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 160)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        con.print("[red]--device cuda: no CUDA device available[/red]")
        raise SystemExit(2)
    if args.against:
        try:
            ab = ab_bench(args.against, args.only.split(",") if args.only else list(AB_CASES), args.rounds,
                          args.threads, Path(args.out), con)
        except (ValueError, RuntimeError) as e:
            con.print(f"[red]{e}[/red]")
            raise SystemExit(2 if isinstance(e, ValueError) else 1) from None
        for r in ab.itertuples():
            con.print(f"{r.case}: {r.before_s:.4f} -> {r.after_s:.4f} s / iteration ({r.speedup:.2f}x)")
        con.print(f"written: {args.out}/ab.md, ab.csv")
        return
    cases, growth = list(SPINE), GROWTH_M + GROWTH_N
    if args.profile:
        every = cases + ((yaml.safe_load(Path(args.cases).read_text()) or {}).get("cases") or []
                         if Path(args.cases).is_file() else [])
        md = [f"# fbo bench --profile: torch {torch.__version__}, {dev.type}, {args.threads} thread(s)", ""]
        for name in PROFILE:
            c = next((c for c in every if c["name"] == name), None)
            if c is None or (args.only and not any(k in name for k in args.only.split(","))):
                continue
            con.print(f"profiling {name} ...", style="dim")
            try:
                md.append(isolated(profile_case, (c, args.device), args.device, args.threads))
            except Exception as e:
                con.print(f"[red]skipped {name}: {e}[/red]")
        atomic_write(Path(args.out) / "profile.md", "\n".join(md) + "\n")
        con.print(f"written: {args.out}/profile.md")
        return
    if not args.quick and Path(args.cases).is_file():
        cases += (yaml.safe_load(Path(args.cases).read_text()) or {}).get("cases") or []
    if args.only:
        keys = args.only.split(",")
        cases = [c for c in cases if any(k in c["name"] for k in keys)]
        growth = [c for c in growth if any(k in c["name"] for k in keys)]
    _build(SPINE[0], args.device, True)  # load Fashion-MNIST once; forked cases inherit the cache
    sgemm = sgemm_rate(dev)
    con.print(f"sgemm (2048² fp32, {args.threads} thread(s), {dev.type}): {sgemm:.1f} GFLOP/s", style="dim")
    rows, grows, whole = [], [], None
    for c in cases:
        con.print(f"timing {c['name']} ...", style="dim")
        try:
            rows.append(isolated(time_case, (c, iters, args.device, True, args.min_seconds), args.device,
                                 args.threads))
        except Exception as e:  # a missing dataset or a broken case must not hide the others
            con.print(f"[red]skipped {c['name']}: {e}[/red]")
    for c in growth:
        con.print(f"timing {c['name']} ...", style="dim")
        try:
            grows.append(isolated(growth_case, (c, iters, args.device), args.device, args.threads))
        except Exception as e:
            con.print(f"[red]skipped {c['name']}: {e}[/red]")
    if not args.quick and dev.type == "cpu" and any(c["name"] == SPINE[0]["name"] for c in cases):
        data = build(resolve("hyperrep", "fednest", SPINE[0]["set"])).task.data
        loop_fednest_iteration(data)  # warm-up
        t = min(loop_fednest_iteration(data, gen=torch.Generator().manual_seed(k)) for k in range(2))
        rows.append({"case": "fednest-per-client-loop-reference-C0.1", "task": "hyperrep", "algo": "fednest",
                     "device": "cpu", "s_per_iteration": t, "rounds_per_iteration": 10, "s_per_round": t / 10})
        con.print("timing a whole FedNest run (500 rounds) and the per-client-loop reference's ...", style="dim")
        whole = whole_run_fednest(data)
        if args.public_fednest:
            con.print(f"timing the public FedNest code in {args.public_fednest} ...", style="dim")
            try:
                whole.update(public_fednest(Path(args.public_fednest), Path(args.mnist_raw)))
            except (OSError, RuntimeError) as e:
                con.print(f"[red]the public FedNest code: {e}[/red]")
    sgemm = max(sgemm, sgemm_rate(dev))  # again at the end: the better of the two
    df, gf = pd.DataFrame(rows), pd.DataFrame(grows)
    for frame in (df, gf):  # each case against the sgemm rate measured between its own iterations
        if len(frame):
            if "sgemm_gflops" not in frame:
                frame["sgemm_gflops"] = float("nan")
            frame["sgemm_gflops"] = frame["sgemm_gflops"].fillna(sgemm)
            frame["efficiency"] = frame["gflops"] / frame["sgemm_gflops"]
    if len(gf):
        for _, g in gf.groupby("sweep"):
            gf.loc[g.index, "vs_first"] = g["s_per_iteration"] / g["s_per_iteration"].iloc[0]
    title = (f"fbo bench: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
             f"{dev.type}{f' ({torch.cuda.get_device_name(dev)})' if dev.type == 'cuda' else ''}, "
             f"{torch.get_num_threads()} thread(s), sgemm {sgemm:.1f} GFLOP/s{code_commit()}")
    md = [f"**{title}**", ""]
    cols = [("case", "case", "{}"), ("s / iteration", "s_per_iteration", "{:.3f}"),
            ("rounds", "rounds_per_iteration", "{:g}"), ("s / round", "s_per_round", "{:.4f}"),
            ("GFLOP", "gflop", "{:.2f}"), ("GFLOP/s", "gflops", "{:.1f}"), ("sgemm GFLOP/s", "sgemm_gflops", "{:.1f}"),
            ("efficiency", "efficiency", "{:.0%}"),
            ("generic s", "generic_s", "{:.3f}"), ("generic GFLOP", "generic_gflop", "{:.2f}"),
            ("fast / generic", "speedup", "{:.2f}x"), ("peak MB", "peak_mb", "{:.0f}"), ("eval s", "eval_s", "{:.3f}"),
            ("eval s, test only", "eval_test_s", "{:.3f}"), ("eval / iteration", "eval_per_iteration", "{:.2f}")]
    gcols = [("sweep", "sweep", "{}"), ("clients", "clients", "{}"), ("participating", "participating", "{}"),
             ("examples / client", "examples_per_client", "{}"), ("s / iteration", "s_per_iteration", "{:.3f}"),
             ("vs first", "vs_first", "{:.2f}x"), ("s / participant", "s_per_participant", "{:.4f}"),
             ("GFLOP", "gflop", "{:.2f}"), ("efficiency", "efficiency", "{:.0%}"),
             ("sample+gather ms", "sample_gather_ms", "{:.2f}"), ("build s", "build_s", "{:.2f}")]
    for frame, spec, name in ((df, cols, title), (gf, gcols, "growth (FedNest, fast path)")):
        if not len(frame):
            continue
        t = Table(title=name)
        for head, _, _ in spec:
            t.add_column(head, justify="left" if head in ("case", "sweep") else "right", no_wrap=True)
        fmt = lambda r, spec=spec: [("" if pd.isna(r.get(k)) else f.format(r[k])) for _, k, f in spec]
        for _, r in frame.iterrows():
            t.add_row(*fmt(r))
        con.print(t)
        md += ["| " + " | ".join(h for h, _, _ in spec) + " |", "|" + "---|" * len(spec)]
        md += ["| " + " | ".join(fmt(r)) + " |" for _, r in frame.iterrows()] + [""]
    notes = []
    get = lambda name, col="s_per_iteration": df.loc[df.case == name, col] if len(df) else pd.Series(dtype=float)
    for a, label in (("fednest", "FedNest"), ("aggitd", "FBO-AggITD")):
        for c in ("0.1", "1.0"):
            r = get(f"{a}-mlp-fmnist-m100-C{c}", "speedup")
            e = get(f"{a}-mlp-fmnist-m100-C{c}", "efficiency")
            if len(r):
                notes.append(f"{label}, C = {c}: fast path {r.iloc[0]:.2f}x the generic path, "
                             f"{e.iloc[0]:.0%} of sgemm")
    a, ref = get("fednest-mlp-fmnist-m100-C0.1"), get("fednest-per-client-loop-reference-C0.1")
    if len(a) and len(ref):
        notes.append(f"FedNest, C = 0.1: per-client-loop reference / vectorized = {ref.iloc[0] / a.iloc[0]:.1f}x")
    if whole:
        notes.append(f"FedNest, a whole run (IID, tau = 1, 100 clients, C = 0.1, {whole['rounds']} rounds, "
                     f"{whole['iterations']} outer iterations, each tool evaluating after every one): fbo "
                     f"{whole['ours_s']:.2f} s (test set; the faster of {len(whole['ours_runs_s'])} whole runs: "
                     f"{', '.join(f'{t:.2f}' for t in whole['ours_runs_s'])} s); the per-client-loop reference "
                     f"{whole['ref_s']:.1f} s "
                     f"({whole['ref_iteration_s']:.3f} s per iteration, {whole['ref_eval_s']:.3f} s per evaluation of "
                     f"the test and training sets, as the public code does) = {whole['ratio']:.1f}x")
        if "public_iteration_s" in whole:
            pub = whole["public_iteration_s"] * whole["iterations"]
            notes.append(f"FedNest, the same whole run in the public FedNest code (mc-nya/FedNest main_hr.py, MNIST, "
                         f"{' '.join(PUBLIC_ARGS)}, 1 thread): {whole['public_iteration_s']:.2f} s per outer iteration "
                         f"with its evaluation (test and training sets), {pub:.0f} s for {whole['iterations']} "
                         f"(start-up and data loading, {whole['public_startup_s']:.0f} s, left out) = "
                         f"{pub / whole['ours_s']:.0f}x fbo's whole run")
    for n in notes:
        con.print(n)
    out = Path(args.out)
    atomic_write(out / "bench.csv", df.to_csv(index=False))
    atomic_write(out / "growth.csv", gf.to_csv(index=False))
    atomic_write(out / "bench.md", "\n".join(md + notes) + "\n")
    con.print(f"written: {out}/bench.csv, growth.csv, bench.md")


if __name__ == "__main__":
    main()
