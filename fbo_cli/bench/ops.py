"""Counting the aten operators an outer iteration calls (issue 64): on a GPU each is a kernel launch and some host
work, and a batch's step that calls its oracles run by run makes a number of them that grows with the runs. The
count is deterministic (the same code path makes the same calls), so it is measured on a loaded machine too,
where a clock is not."""

from __future__ import annotations

from typing import Callable


def aten_calls(fn: Callable[[], object]) -> int:
    """The aten operators ``fn()`` calls from Python: ``torch.profiler``'s CPU events named ``aten::`` that no other
    aten operator calls (a composite operator counts once, not its parts), on this thread's settings. Run it on
    one thread for counts that do not depend on the machine."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    n = 0
    for e in prof.events():
        if e.name.startswith("aten::"):
            p = e.cpu_parent
            while p is not None and not p.name.startswith("aten::"):
                p = p.cpu_parent
            n += p is None
    return n


def device_busy_share(prof, wall_s: float) -> float | None:
    """The share of ``wall_s`` (an iteration's uninstrumented wall time) that the device's kernels of one profiled
    iteration take (``torch.profiler``'s self device time, summed); None without a device."""
    from torch.autograd import DeviceType

    # the kernels' own events (as the profiler's table sums "Self CUDA time total"; the CPU events that launched
    # them carry the same time again)
    total_us = sum(e.self_device_time_total for e in prof.key_averages()
                   if e.device_type != DeviceType.CPU and not e.is_user_annotation)
    return total_us / 1e6 / wall_s if total_us and wall_s > 0 else None


def step_calls(algo, warm: int = 1) -> int:
    """:func:`aten_calls` of one ``algo.step()`` after ``warm`` steps (a batch's ``same_bits`` checks compare both
    ways on the first call of each shape: a warm step makes the steady calls)."""
    for _ in range(warm):
        algo.step()
    return aten_calls(algo.step)
