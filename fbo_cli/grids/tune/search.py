"""The search: run the grid, extend a choice at a grid's edge, confirm a choice next to a rejected value,
check the ranking at the evaluation budget, and write the record; and the two commands that start from a
recorded tuning (``--relabel``, ``--ranking-only``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from ...errors import UsageError
from ...runs.rundir import atomic_write, write_yaml
from ...runs.table import fmt_num
from ..executors import GridOptions
from ..plan import check_metrics
from ..spec import Cell, Experiment, TuneSpec, claim_folder, load_spec
from ..spec_types import Choice, chosen_on_disk
from .grid import confirm_seeds, margin_seeds, point_error, tune_cells, tune_spec, tuning_plan, tuning_todo
from .record import keep_the_rest, recorded_runs, recorded_tuning, stale_records, write_partial, write_record
from .rules import (
    RANKING_TOP,
    VETO_GRIDS,
    choose,
    collect_tuning,
    extensions,
    key_values,
    margin_probes,
    plain,
    point_name,
    unconfirmed,
)


def run_tuning(spec_path: str | Path, overrides: dict[str, Any], grid: GridOptions | None = None,
               rerun: bool = False, console=None, ranking_check: bool = True, accept_code_change: bool = False,
               algorithms: list[str] | None = None, settings: list[str] | None = None) -> Path:
    """Tune the spec (``algorithms``, ``settings``: only these of it, :func:`fbo_cli.grids.select.select`; the
    record keeps the rest's recorded tuning, :func:`.record.keep_the_rest`) and write its record."""
    from ..executors import run_cells
    from ..plan import todo_cost_line
    from ..select import select

    full = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(full)
    subset = bool(algorithms or settings)
    exp = select(full, algorithms, settings)
    if subset and ts.setting and ts.setting not in [s.name for s in exp.settings]:
        raise UsageError(f"{full.name} is tuned on setting '{ts.setting}' only (its values serve every setting): "
                         f"select that one, or no setting", kind="unsupported", field="setting", value=ts.setting)
    outdir = exp.out_root / "compare" / exp.name
    claim_folder(exp, outdir, write=False)
    recorded = {} if rerun else recorded_runs(exp, ts)
    extended: dict[tuple[str, str], list[dict]] = {}
    confirm: dict[tuple[str, str], list[dict]] = {}  # choices next to a rejected value, run on more seeds
    margin: dict[tuple[str, str], list[dict]] = {}  # the steps between a choice and an unstable value
    invalid: dict[tuple[str, str], list[tuple[dict, str]]] = {}  # extensions outside a key's valid range
    grid = grid or GridOptions()
    checked = False
    say = (lambda m: console.print(m, highlight=False)) if console is not None else (lambda m: None)  # noqa: E731
    while True:  # run the grid; while a choice sits at an edge, run one more point beyond it
        cells = tune_cells(exp, ts, overrides, extended, confirm, margin)
        plan = tuning_plan(cells, rerun, accept_code_change)
        todo = tuning_todo(cells, recorded, rerun, plan=plan)
        if console is not None:
            for d, why in plan.stale.items():
                console.print(f"{exp.name}: {d}: {why}; it runs again (--accept-code-change keeps it)", highlight=False)
        if todo and console is not None:
            console.print(f"{exp.name}: tuning, {todo_cost_line(todo, grid.jobs, grid.batch)}", highlight=False)
        if todo:
            if not checked:
                # the tuning runs themselves: tune.set may change what they log
                check_metrics(replace(exp, cells=[c for c, _ in cells], metrics=[ts.score]))
                grid.check_cluster()
                checked = True
            # what has run so far, before each batch: a tuning stopped in it resumes from here elsewhere
            claim_folder(exp, outdir)
            write_partial(outdir, ts, collect_tuning(cells, ts, extended, recorded, margin, plan.states()))
            plan.record(todo, run_cells(todo, grid, console=console, rerun=rerun,
                                        title=f"{exp.name}: tuning runs" + (" (grid extensions)" if extended else "")))
        rerun = False  # a rerun redoes the spec's grid once, not the extensions' earlier runs
        table = collect_tuning(cells, ts, extended, recorded, margin, plan.states())
        chosen, finished = next_wave(exp, ts, overrides, table, extended, confirm, margin, invalid, say)
        if finished:
            break
    if why := failed_tuning(table, chosen):
        raise UsageError(f"{exp.name}: {why}", kind="failed", field="tuning", value=why)
    if console is not None:
        for line in stale_records(table, recorded):
            console.print(f"{exp.name}: warning: {line}", highlight=False)
    extra_seeds = confirm_seeds(exp, ts)
    for (a, st), pts in confirm.items():  # say so where the choice survived its confirmation seeds
        c = chosen[a][st]
        if c.values in pts:
            c.notes["stable_edge"] += f" (and the choice is stable on seeds {', '.join(map(str, extra_seeds))})"
    probed = lambda c, p: p in margin.get((c.algorithm, c.setting), [])  # noqa: E731
    ranking = (check_ranking(exp, ts, overrides, [(c, p) for c, p in cells if c.seed in ts.seeds and not probed(c, p)],
                             table[~table.grid.isin(VETO_GRIDS)], extended, grid, console) if ranking_check else None)
    if subset:  # the rest of the spec keeps its recorded tuning
        table, chosen, extended, confirm, margin, ranking = keep_the_rest(exp, ts, table, chosen, extended, confirm,
                                                                          margin, ranking)
        exp = full
    claim_folder(exp, outdir)
    write_record(exp, spec_path, ts, outdir, table, chosen, extended, confirm, extra_seeds, ranking, margin)
    return outdir


def next_wave(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any], table: pd.DataFrame,
              extended: dict, confirm: dict, margin: dict, invalid: dict, say=lambda m: None) -> tuple[dict, bool]:
    """The tuning's rules after a wave of runs (``table``): ``(chosen, finished)``. Unless finished, the next
    wave's points are added to ``extended`` (a choice at a grid's edge: one more value beyond it), else to
    ``margin`` (a choice next to an unstable value: the step between them), else to ``confirm`` (a choice next
    to a rejected value: more seeds); a point beyond a key's valid range goes to ``invalid``. ``say``: the
    message for each. :func:`run_tuning` runs the waves; ``fbo tune --dry-run`` replays them on recorded runs."""
    chosen = choose(table, ts, invalid)
    more = []
    for key, point in extensions(table, chosen, ts, extended, invalid):
        why = point_error(exp, ts, overrides, key, point)
        if why:  # beyond the key's valid range (e.g. a momentum weight c alpha^2 > 1): not a grid point
            invalid.setdefault(key, []).append((point, why))
        else:
            more.append((key, point))
    if more:
        for key, point in more:
            extended.setdefault(key, []).append(point)
            say(f"{exp.name}: {key[0]}, {key[1]}: the choice is at the grid's edge; trying "
                + ", ".join(f"{k}={fmt_num(v)}" for k, v in point.items()))
        return chosen, False
    if any(invalid.values()):
        chosen = choose(table, ts, invalid)
    probes = margin_probes(table, chosen, ts, margin)  # then the margin of a choice next to an unstable value
    for key, point in probes:
        margin.setdefault(key, []).append(point)
        say(f"{exp.name}: {key[0]}, {key[1]}: the choice is next to an unstable value; checking its margin at "
            f"{point_name(point)} on seeds {', '.join(map(str, margin_seeds(exp, ts)))}")
    if probes:
        return chosen, False
    to_confirm = [(k, p) for k, p in unconfirmed(chosen) if p not in confirm.get(k, [])]  # then its confirmation
    for key, point in to_confirm:
        confirm.setdefault(key, []).append(point)
        say(f"{exp.name}: {key[0]}, {key[1]}: the choice is next to a rejected value; confirming it on seeds "
            f"{', '.join(map(str, confirm_seeds(exp, ts)))}")
    return chosen, not to_confirm


def failed_tuning(table: pd.DataFrame, chosen: dict) -> str | None:
    """Why nothing could be chosen for an (algorithm, setting) whose every grid point was rejected because its
    runs failed with an error (a bug, not a divergence), naming the first error; None when there is none."""
    import json

    for a, per in chosen.items():
        for st, c in per.items():
            g = table[(table.algorithm == a) & (table.setting == st)]
            if "none" not in c.notes or not len(g) or not (g.status == "failed").all():
                continue
            try:
                err = json.loads((Path(g.run_dir.iloc[0]) / "summary.json").read_text()).get("error")
            except (OSError, ValueError):
                err = None
            return (f"{a}, setting {st}: every grid point was rejected because its runs failed with an error, "
                    f"not a divergence: {err or 'see run.log'} (in {g.run_dir.iloc[0]}); nothing was chosen")
    return None


def check_ranking(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any], cells: list[tuple[Cell, dict]],
                  table: pd.DataFrame, extended: dict, grid: GridOptions, console=None):
    """The ranking check (:mod:`fbo_cli.grids.tune`): ``(ranking.csv's rows, {"algo | setting": verdict})``, or
    None when every tuning run already had its setting's evaluation budget."""
    from ..executors import run_cells
    from ..plan import make_plan

    full = replace(ts, rounds=None)
    at_budget = tune_cells(exp, full, overrides, extended)
    if not any(c.cfg.run.rounds < f.cfg.run.rounds for (c, _), (f, _) in zip(cells, at_budget)):
        return None
    agg = table.groupby(["algorithm", "setting", "point"], sort=False).agg(
        score=("score", "mean"), rejected=("rejected", "any")).reset_index()
    top: dict[tuple[str, str], list[str]] = {}
    for (a, s), g in agg[~agg.rejected].groupby(["algorithm", "setting"], sort=False):
        top[(a, s)] = list(g.sort_values("score", ascending=ts.mode == "min", kind="stable").point[:RANKING_TOP])
    pick = [(c, p) for c, p in at_budget if point_name(p) in top.get((c.algorithm, c.setting), [])]
    plan = make_plan([c for c, _ in pick])
    if todo := plan.todo:
        plan.record(todo, run_cells(todo, grid, console=console, rerun=False,
                                    title=f"{exp.name}: ranking check at the evaluation budget"))
    at_full = collect_tuning(pick, full, extended, states=plan.states())
    rows, verdicts = [], {}
    for (a, s), points in top.items():
        g = at_full[(at_full.algorithm == a) & (at_full.setting == s)]
        full_agg = g.groupby("point", sort=False).agg(score=("score", "mean"), rejected=("rejected", "any"))
        ok = full_agg[~full_agg.rejected]
        best = (ok.score.idxmin() if ts.mode == "min" else ok.score.idxmax()) if len(ok) else None
        choice = points[0]
        for p in points:
            short = float(agg[(agg.algorithm == a) & (agg.setting == s) & (agg.point == p)].score.iloc[0])
            rows.append({"algorithm": a, "setting": s, "point": p, "short_score": short,
                         "full_score": float(full_agg.score.get(p, float("nan"))),
                         "full_rejected": bool(full_agg.rejected.get(p, True)), "chosen": p == choice})
        verdicts[f"{a} | {s}"] = {"top": points, "best_at_budget": best, "holds": best == choice}
    return pd.DataFrame(rows), verdicts


def relabel(spec_path: str | Path, overrides: dict[str, Any]) -> tuple[Path, int]:
    """``fbo tune --relabel``: the notes of a recorded tuning (``tuned.yaml``) recomputed under today's
    rules from its ``tuning.csv``, running nothing. An extension that was never run because it is not a
    valid configuration (tried before points were checked before running, e.g. FedBiOAcc's c = 8.1
    under c alpha_1^2 <= 1) leaves the table and becomes the reason of a 'last valid value' note. The
    chosen values must stay those recorded; otherwise it refuses (re-tune instead). Returns the folder
    and the number of invalid points found."""
    exp = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(exp)
    outdir, tuned, table = recorded_tuning(exp)
    invalid: dict[tuple[str, str], list[tuple[dict, str]]] = {}
    drop = []
    for i, r in table[table.status == "not run"].iterrows():
        keys = key_values(ts.grids.get(r.algorithm) or {})
        point = {k: plain(r[k]) for k in keys if k in r and not pd.isna(r[k])}
        why = point_error(exp, ts, overrides, (r.algorithm, r.setting), point)
        if why:
            invalid.setdefault((r.algorithm, r.setting), []).append((point, why))
            drop.append(i)
    table = table.drop(index=drop)
    chosen = choose(table, ts, invalid)
    seeds = ", ".join(map(str, confirm_seeds(exp, ts)))
    for key, info in (tuned.get("confirmed") or {}).items():
        a, st = key.split(" | ")
        c = chosen.get(a, {}).get(st)
        if c is not None and c.notes.get("stable_edge") and c.values in info["points"]:
            c.notes["stable_edge"] += f" (and the choice is stable on seeds {seeds})"
    values = lambda per: {a: {st: Choice.of(c).values for st, c in p.items()} for a, p in per.items()}  # noqa: E731
    if values(chosen) != values(tuned.get("chosen") or {}):
        raise UsageError(f"--relabel: today's rules choose differently from {outdir / 'tuned.yaml'}; "
                         "re-tune with `fbo tune` instead",
                         kind="failed", field="--relabel", path=outdir / 'tuned.yaml')
    tuned["chosen"] = chosen_on_disk(chosen)
    atomic_write(outdir / "tuning.csv", table.to_csv(index=False))
    write_yaml(outdir / "tuned.yaml", tuned)
    return outdir, len(drop)


def ranking_only(spec_path: str | Path, overrides: dict[str, Any], grid: GridOptions | None = None,
                 console=None) -> Path:
    """``fbo tune --ranking-only``: the ranking check of a tuning recorded without it (:mod:`fbo_cli.grids.tune`),
    from its ``tuning.csv``: the top 3 accepted points of each (algorithm, setting) run at the evaluation
    budget on the tuning seeds; ``ranking.csv`` and ``tuned.yaml``'s ``ranking_check`` record the verdicts.
    The grid itself is not run again, and the choices stay as recorded."""
    exp = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(exp)
    outdir, tuned, table = recorded_tuning(exp)
    extended = {tuple(k.split(" | ")): pts for k, pts in (tuned.get("extended") or {}).items()}
    cells = tune_cells(exp, ts, overrides, extended)
    ranking = check_ranking(exp, ts, overrides, [c for c in cells if c[0].seed in ts.seeds],
                            table[~table.grid.isin(VETO_GRIDS)], extended, grid or GridOptions(), console)
    if ranking is None:
        raise UsageError(f"{exp.name} was tuned at its evaluation budget: there is no ranking to check",
                         kind="unsupported", field="--ranking-only")
    atomic_write(outdir / "ranking.csv", ranking[0].to_csv(index=False))
    tuned["ranking_check"] = ranking[1]
    write_yaml(outdir / "tuned.yaml", tuned)
    return outdir
