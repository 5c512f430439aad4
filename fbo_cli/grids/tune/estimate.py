"""What a tuning will cost before it runs (``fbo tune --dry-run``, ``fbo reproduce --dry-run``)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...runs.cost import PROCESS_STARTUP_S, RUN_STARTUP_S, parallel
from ..spec import Cell, Experiment, TuneSpec, load_spec
from .grid import tune_cells, tune_spec, tuning_todo
from .record import recorded_runs
from .rules import CONFIRM_SEEDS, MARGIN_SEEDS, MAX_EXTENSIONS, RANKING_TOP

# what the committed tunings (docs/results/compare/*/tuned.yaml, 76 algorithm-setting pairs) ran beyond their
# grids, per (algorithm, setting): 1.3 extension points and 0.74 confirmed choices on average
EXPECTED_EXTENSIONS, EXPECTED_CONFIRMATIONS = 1.3, 0.74


def tuning_estimate(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any], cells: list[tuple[Cell, dict]],
                    todo: list[Cell], jobs: int = 1, batch: str | int = "off") -> dict[str, Any]:
    """What a tuning will run, before it runs: its grid runs still to do, and beyond them the runs it may add
    (extensions of a choice at a grid's edge, confirmations of a choice next to a rejected value, the ranking
    check at the evaluation budget): the expected number (from the committed tunings' averages) and the
    largest (every pair extended :data:`MAX_EXTENSIONS` times, every point confirmed once on
    :data:`CONFIRM_SEEDS` seeds, a margin probe per pair on :data:`MARGIN_SEEDS` seeds or the tuning seeds, the
    ranking check's top :data:`RANKING_TOP` points), with their time: the
    cost model's seconds per run plus the fixed start-up; the grid's runs in run batches (``batch``,
    :func:`fbo_cli.grids.run_batches.cost_shares`), the runs a tuning adds one by one. Where no run of the grid's kind
    has run here, the runs it adds have no estimate either (counted in ``unknown``)."""
    from ...runs.cost import estimate_cost
    from ..run_batches import cost_shares

    pairs = {(c.algorithm, c.setting) for c, _ in cells}
    n_seeds = len(ts.seeds)
    per_pair = {k: len({str(p) for c, p in cells if (c.algorithm, c.setting) == k}) for k in pairs}
    secs, unknown = estimate_cost([c for c, _ in cells])
    known = len(cells) - unknown
    run_s = secs / known if known else 0.0  # a tuning run's mean cost
    budget = tune_cells(exp, replace(ts, rounds=None), overrides)
    ranking = any(c.cfg.run.rounds < f.cfg.run.rounds for (c, _), (f, _) in zip(cells, budget))
    full_s = (estimate_cost([c for c, _ in budget])[0] / max(len(budget) - estimate_cost([c for c, _ in budget])[1], 1)
              if ranking else 0.0)
    rank_runs = len(pairs) * RANKING_TOP * n_seeds if ranking else 0
    exp_more = len(pairs) * (EXPECTED_EXTENSIONS * n_seeds + EXPECTED_CONFIRMATIONS * CONFIRM_SEEDS)
    max_more = sum(MAX_EXTENSIONS * n_seeds + (n + MAX_EXTENSIONS) * CONFIRM_SEEDS + max(n_seeds, MARGIN_SEEDS)
                   for n in per_pair.values())
    todo_s, _ = estimate_cost(todo, shares=cost_shares(todo, batch))
    todo_alone_s = estimate_cost(todo)[0] if batch != "off" else todo_s
    out = {"grid": len(cells), "todo": len(todo), "ranking": rank_runs,
           "expected": len(todo) + round(exp_more) + rank_runs, "largest": len(todo) + max_more + rank_runs,
           "run_s": run_s, "full_s": full_s, "unknown": unknown + (0 if known else round(exp_more) + rank_runs)}
    # wall time: the grid's runs over the jobs as loaded now (:func:`parallel`), then the waves a tuning adds one
    # after the other (a point beyond an edge at a time, up to MAX_EXTENSIONS, the confirmations, the ranking
    # check), each with at most one run per (algorithm, setting) and seed in flight
    p_grid, out["parallel"] = parallel(max(jobs, 1))
    p_more = parallel(max(1, min(jobs, len(pairs) * n_seeds)))[0]
    grid_s = todo_s + len(todo) * RUN_STARTUP_S
    for k, more in (("expected", exp_more), ("largest", max_more)):
        out[f"{k}_core_s"] = todo_s + more * run_s + rank_runs * full_s + out[k] * RUN_STARTUP_S
        out[f"{k}_s"] = (grid_s / p_grid + (out[f"{k}_core_s"] - grid_s) / p_more
                         + PROCESS_STARTUP_S * (1 + (jobs if jobs > 1 else 0)))
    ranked = 1 if rank_runs else 0
    out["waves"] = (1 if todo else 0) + math.ceil(EXPECTED_EXTENSIONS) + 1 + ranked  # + the confirmations
    out["max_waves"] = (1 if todo else 0) + MAX_EXTENSIONS + 2 + ranked  # + a margin probe, the confirmations
    out["expected_alone_core_s"] = out["expected_core_s"] - todo_s + todo_alone_s  # every run one by one
    return out


def estimate_text(e: dict[str, Any], jobs: int) -> str:
    """The estimate in words (``fbo tune --dry-run``)."""
    mins = lambda s: "?" if s != s else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"  # noqa: E731
    waves = f"in about {e['waves']} waves run one after the other (at most {e['max_waves']})"
    if not e["todo"]:
        return (f"nothing left to run in the grid (its {e['grid']} runs are finished or recorded); extensions, "
                f"confirmations and the ranking check may still add up to {e['largest']} runs "
                f"({mins(e['largest_s'])} {e['parallel']}, {waves})")
    return (f"{e['todo']} of {e['grid']} grid runs to do; with the runs a tuning adds (extensions at a grid's edge, "
            f"confirmations, {e['ranking']} ranking-check runs at the evaluation budget) expect about "
            f"{e['expected']} runs in {mins(e['expected_s'])}, at most {e['largest']} runs in {mins(e['largest_s'])}"
            f" of wall time {e['parallel']}, {waves} (start-up included: {PROCESS_STARTUP_S:g} s per "
            f"process, {RUN_STARTUP_S:g} s per run)"
            + (f"; {e['unknown']} grid run(s) of a kind never run here have no cost estimate" if e["unknown"] else ""))


def dry_run_text(spec_path: str | Path, overrides: dict[str, Any], rerun: bool, jobs: int,
                 batch: str | int = "auto") -> str:
    """``fbo tune --dry-run``: how many tuning runs are left and what they cost; runs nothing. Where every run so
    far is finished or recorded, today's rules are replayed on them (:func:`.search.next_wave`) up to the first
    wave that would run: a tuning recorded under older rules may still add extensions or margin probes."""
    from ..plan import todo_cost_line
    from .rules import collect_tuning
    from .search import next_wave

    exp = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(exp)
    recorded = {} if rerun else recorded_runs(exp, ts)
    extended: dict = {}
    confirm: dict = {}
    margin: dict = {}
    invalid: dict = {}
    cells = tune_cells(exp, ts, overrides)
    todo = tuning_todo(cells, recorded, rerun)
    replayed = False
    while not todo and not rerun:  # everything so far finished or recorded: the rules' next wave
        table = collect_tuning(cells, ts, extended, recorded, margin)
        if next_wave(exp, ts, overrides, table, extended, confirm, margin, invalid)[1]:
            break
        cells, replayed = tune_cells(exp, ts, overrides, extended, confirm, margin), True
        todo = tuning_todo(cells, recorded, rerun)
    done = exp.out_root / "compare" / exp.name / "tuned.yaml"
    if not todo and not rerun and done.is_file():  # a finished tuning adds no run under today's rules
        return (f"{exp.name} tuning: finished ({done}); nothing left to run (--rerun runs it again; an edit of a "
                "user's algorithm makes its runs stale and they run again)")
    if replayed and todo:
        new = {c.cfg.run_dir for c in todo}
        kinds = collect_tuning([(c, p) for c, p in cells if c.cfg.run_dir in new], ts, extended, recorded, margin).grid
        what = ", ".join(f"{n} {k}" for k, n in kinds.value_counts().items())
        return (f"{exp.name} tuning: its grid is finished or recorded; under today's rules it adds {len(todo)} "
                f"run(s) now ({what}; {todo_cost_line(todo, jobs, batch)}), and may add more after them")
    return f"{exp.name} tuning: {estimate_text(tuning_estimate(exp, ts, overrides, cells, todo, jobs, batch), jobs)}"

