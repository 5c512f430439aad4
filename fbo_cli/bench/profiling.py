"""``fbo bench --profile``: where an outer iteration's time goes (sampling, oracles, the rest: plain timers
around the functions of :func:`_phase_hooks`, restored afterwards), its floor (its random draws and gathers
replayed alone, plus its FLOPs at the sgemm rate) and the ``torch.profiler`` tables."""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from .timing import _build, _sync, _timed, sgemm_rate


def _phase_hooks(algo) -> list[tuple[object, str, str]]:
    """``(owner, attribute, phase)`` of the functions whose time ``phases`` attributes: drawing and gathering
    minibatches, and the oracles (gradients and Hessian products of every task)."""
    from ..algorithms.codasca import EpochSampler
    from ..algorithms.pool_sampler import RowSampler
    from ..data import FederatedData
    from ..data.split import Split

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
    from .ops import aten_calls, device_busy_share

    calls = aten_calls(algo.step)
    phase_md += f"\n\naten calls per outer iteration (top-level operators, each a kernel launch on a GPU): {calls:,}"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=acts, record_shapes=True) as prof:
        algo.step()
        _sync(torch.device(device))
    wall = time.perf_counter() - t0
    busy = device_busy_share(prof, ph["total"])
    if busy is not None:
        phase_md += (f"\n\nGPU busy: its kernels take {busy:.0%} of an iteration's wall time ({ph['total'] * 1e3:.2f} "
                     "ms, no profiler)")
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    table = prof.key_averages(group_by_input_shape=True).table(
        sort_by=key, row_limit=rows, max_name_column_width=40, max_shapes_column_width=70)
    by_op = prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=40)
    return (f"## {case['name']}\n\n`{case['task']}` / `{case['algo']}`, set {case.get('set')}\n\n"
            f"Where the time goes (10 iterations, no profiler; sampling: drawing and gathering minibatches; "
            f"oracles: gradients and Hessian products):\n\n{phase_md}\n\nOne iteration, "
            f"{wall:.3f} s under the profiler\n\nBy operator:\n\n```\n{by_op}\n```\n\n"
            f"By operator and input shapes:\n\n```\n{table}\n```\n")
