"""The reproduction, driven by the specs' ``paper:`` and ``order:`` keys
(:func:`fbo_cli.report.papers.reproduction_specs`): what it runs (:func:`plan`: per spec, ``fbo tune``
where the spec has tuning grids, then ``fbo compare``; the report last) and what it costs before anything
runs (:func:`spec_cost`, ``fbo cost``). A new spec joins by naming its paper; no list to keep by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .spec import load_spec


@dataclass(frozen=True)
class Step:
    spec: str
    tune: bool  # the spec has tuning grids: `fbo tune` before `fbo compare`


def plan(paper: str | None = None) -> list[Step]:
    """The reproduction's steps, papers in report order, each paper's specs by their ``order:``."""
    from .report.papers import reproduction_specs
    from .spec import has_tuning

    return [Step(s, has_tuning(s)) for s in reproduction_specs(paper)]


def spec_cost(spec: str | Path, overrides: dict[str, Any], todo: bool = False,
              batch: str | int = "auto") -> dict[str, Any]:
    """What regenerating ``spec`` costs: its tuning runs (the grid, and what a tuning adds, expected and at
    most; :func:`fbo_cli.tune.tuning_estimate`) and its compared runs at the tuned values, in core-seconds
    estimated from finished runs of their kind plus each run's start-up. With ``todo``, only the runs not
    finished under the results folder count. ``batch``: the runs in run batches as ``--batch`` groups them
    (:func:`fbo_cli.batch.cost_shares`)."""
    from .batch import cost_shares
    from .results import RUN_STARTUP_S, estimate_cost, todo_runs
    from .tune import tune_cells, tune_spec, tuning_estimate

    exp0 = load_spec(spec, overrides, use_tuned=False)
    tcells, est = [], None
    if any(a.tune for a in exp0.algorithms):
        ts = tune_spec(exp0)
        pairs = tune_cells(exp0, ts, overrides)
        tcells = list({c.cfg.run_dir: c for c, _ in pairs}.values())  # rows that share runs count them once
        if todo:
            tcells = todo_runs(tcells, False)
        est = tuning_estimate(exp0, ts, overrides, pairs, tcells, batch=batch)
    exp = load_spec(spec, overrides)  # the compared runs at the tuned values, where tuning has run
    cells = list({c.cfg.run_dir: c for c in exp.cells}.values())
    if todo:
        cells = todo_runs(cells, False)
    secs, unknown = estimate_cost(cells, shares=cost_shares(cells, batch))
    secs += len(cells) * RUN_STARTUP_S
    t_exp, t_max = (est["expected_core_s"], est["largest_core_s"]) if est else (0.0, 0.0)
    return {"name": exp.name, "compared": len(cells), "tuning": f"{len(tcells)} / {est['expected']} / "
            f"{est['largest']}" if est else "0", "expected_s": secs + t_exp, "largest_s": secs + t_max,
            "unknown": unknown + (est["unknown"] if est else 0)}
