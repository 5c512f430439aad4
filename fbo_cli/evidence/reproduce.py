"""The reproduction, driven by the specs' ``paper:`` and ``order:`` keys
(:func:`fbo_cli.evidence.report.papers.reproduction_specs`): what it runs (:func:`plan`: per spec, ``fbo tune``
where the spec has tuning grids, then ``fbo compare``; the report last) and what it costs before anything
runs (:func:`spec_cost`, ``fbo cost``). A new spec joins by naming its paper; no list to keep by hand."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..grids.spec import load_spec


@dataclass(frozen=True)
class Step:
    spec: str
    tune: bool  # the spec has tuning grids: `fbo tune` before `fbo compare`


def plan(paper: str | None = None) -> list[Step]:
    """The reproduction's steps, papers in report order, each paper's specs by their ``order:``; none found (a
    folder without the checkout's ``experiments/``) is a UsageError, not an empty reproduction."""
    from ..errors import UsageError
    from ..grids.spec import has_tuning
    from .report.papers import reproduction_specs

    steps = [Step(s, has_tuning(s)) for s in reproduction_specs(paper)]
    if not steps:
        raise UsageError(f"no reproduction specs (experiments/*.yaml naming their paper{': ' + paper if paper else ''})"
                         f" in {Path('experiments').absolute()}; run it in the fbo checkout", kind="not_found",
                         field="specs", path=Path("experiments").absolute())
    return steps


def spec_cost(spec: str | Path, overrides: dict[str, Any], todo: bool = False,
              batch: str | int = "auto", lanes: int | None = None) -> dict[str, Any]:
    """What regenerating ``spec`` costs: its tuning runs (the grid, and what a tuning adds, expected and at
    most; :func:`fbo_cli.grids.tune.tuning_estimate`) and its compared runs at the tuned values, in core-seconds
    estimated from finished runs of their kind plus each run's start-up. With ``todo``, only the runs not
    finished under the results folder count. ``batch``: the runs in run batches as ``--batch`` groups them
    (:func:`fbo_cli.grids.run_batches.cost_shares`). ``gpu_s``: the expected cost of its runs one by one on one GPU
    (:func:`gpu_ratio`; None where no bench case stands for them); ``gpu_lanes_s``: the wall time of the same on one
    GPU shared by ``lanes`` processes (default: the measured fit's, :data:`fbo_cli.runs.cost.GPU_LANES_FIT`) with
    their run batches priced by the CUDA batch bench (:func:`gpu_lanes_time`)."""
    from ..grids.plan import make_plan
    from ..grids.run_batches import cost_shares
    from ..grids.tune import tune_cells, tune_spec, tuning_estimate
    from ..runs.cost import RUN_STARTUP_S, estimate_cost

    exp0 = load_spec(spec, overrides, use_tuned=False)
    tcells, est = [], None
    if any(a.tune for a in exp0.algorithms):
        ts = tune_spec(exp0)
        pairs = tune_cells(exp0, ts, overrides)
        tcells = list({c.cfg.run_dir: c for c, _ in pairs}.values())  # rows that share runs count them once
        if todo:
            tcells = make_plan(tcells).todo
        est = tuning_estimate(exp0, ts, overrides, pairs, tcells, batch=batch)
    exp = load_spec(spec, overrides)  # the compared runs at the tuned values, where tuning has run
    cells = make_plan(exp.cells).todo if todo else list({c.cfg.run_dir: c for c in exp.cells}.values())
    secs, unknown = estimate_cost(cells, shares=cost_shares(cells, batch))
    secs += len(cells) * RUN_STARTUP_S
    solo = estimate_cost(cells)[0] + len(cells) * RUN_STARTUP_S + (est["expected_alone_core_s"] if est else 0.0)
    ratio = gpu_ratio([*tcells, *cells])
    t_exp, t_max = (est["expected_core_s"], est["largest_core_s"]) if est else (0.0, 0.0)
    gpu = None if ratio is None else solo * ratio
    lanes_s = None if gpu is None else gpu_lanes_time(gpu, [*tcells, *cells], batch, lanes)
    return {"name": exp.name, "compared": len(cells), "tuning": f"{len(tcells)} / {est['expected']} / "
            f"{est['largest']}" if est else "0", "expected_s": secs + t_exp, "largest_s": secs + t_max,
            "unknown": unknown + (est["unknown"] if est else 0), "gpu_s": gpu, "gpu_lanes_s": lanes_s}


def gpu_lanes_time(gpu_s: float, cells: list, batch: str | int, lanes: int | None = None) -> float:
    """The wall time on one GPU of runs whose one-by-one GPU price is ``gpu_s`` (:func:`gpu_ratio`), run by ``lanes``
    processes sharing it (:func:`fbo_cli.runs.cost.lane_gain`) with ``--batch batch``: the price times the share
    the batches leave of it (:func:`fbo_cli.grids.run_batches.cost_shares` from the CUDA batch bench; none measured: as
    alone),
    divided by the lanes' gain."""
    from ..grids.run_batches import cost_shares
    from ..runs.cost import GPU_LANES_FIT, estimate_cost, lane_gain

    cells = list({c.cfg.run_dir: c for c in cells}.values())
    alone = estimate_cost(cells)[0]
    share = estimate_cost(cells, shares=cost_shares(cells, batch, device="cuda"))[0] / alone if alone > 0 else 1.0
    return gpu_s * share / lane_gain(lanes or GPU_LANES_FIT[0])


BENCH_CPU, BENCH_GPU = Path("docs/results/bench/bench.md"), Path("docs/results/bench/cuda/bench.md")


def _bench_table(path: Path) -> dict[str, tuple[float, float]]:
    """case -> (s / iteration, eval s) of a committed `fbo bench` table (markdown)."""
    out: dict[str, tuple[float, float]] = {}
    head: list[str] = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if cols[:2] == ["case", "s / iteration"]:
            head = cols
        elif head and len(cols) == len(head) and not cols[0].startswith("---"):
            try:
                out[cols[0]] = (float(cols[1]), float(cols[head.index("eval s")] or 0))
            except ValueError:
                continue
    return out


@functools.lru_cache(maxsize=1)
def gpu_factors() -> dict[tuple[str, str], tuple[float, float]]:
    """(task, algorithm) -> (training, evaluation) seconds on one GPU per second on this CPU (1 thread): the
    committed CUDA bench (``docs/results/bench/cuda/bench.md``, an H100, runs one by one) against the CPU bench
    of the same cases (``docs/results/bench/bench.md``), the first case of each (task, algorithm)."""
    from ..bench.cases import load_cases

    root = Path(__file__).parents[2]  # the checkout
    cpu, gpu = _bench_table(root / BENCH_CPU), _bench_table(root / BENCH_GPU)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for c in load_cases(root / "experiments" / "bench.yaml").cases:
        if c["name"] in cpu and c["name"] in gpu and cpu[c["name"]][0] > 0:
            (tc, ec), (tg, eg) = cpu[c["name"]], gpu[c["name"]]
            out.setdefault((c["task"], c["algo"]), (tg / tc, eg / ec if ec > 0 else 1.0))
    return out


def gpu_ratio(cells: list) -> float | None:
    """What ``cells`` cost on one GPU, runs one by one, as a share of their cost on this CPU (runs one by one):
    the cost model's time of each run (:func:`fbo_cli.runs.cost.estimate_cost`) with its training and its
    evaluations scaled by :func:`gpu_factors`, over the runs whose (task, algorithm) both benches time; None
    when none is. A guide, not a measurement: the benches' cases stand for every run of their kind."""
    from ..runs.cost import estimate_cost

    f = gpu_factors()
    cells = [c for c in {c.cfg.run_dir: c for c in cells}.values() if (c.cfg.task, c.cfg.algo) in f]
    if not cells:
        return None
    cpu, _ = estimate_cost(cells)
    gpu, _ = estimate_cost(cells, shares=[f[c.cfg.task, c.cfg.algo][0] for c in cells],
                           eval_shares=[f[c.cfg.task, c.cfg.algo][1] for c in cells])
    return gpu / cpu if cpu > 0 else None
