"""``fbo tune``: choose each method's hyperparameters on validation data, by a recorded procedure.

An experiment spec declares, per algorithm, the grid to search (``tune: {key: [values]}``; a key
``"a,b"`` sets both keys to each value, e.g. a lower step and the auxiliary step tied together), and
in a top-level ``tune:`` block how to search it:

```yaml
tune:
  seeds: [100]        # tuning seeds, disjoint from the evaluation seeds
  rounds: 40          # every tuning run's budget (communication rounds); budget: each setting's own
  score: upper_loss   # default: the task's validation quantity (held-out training data, never the test set)
  mode: min           # min | max (default: the task's)
  setting: "p=0.4"    # optional: tune on this setting only and use the values for every setting
  tail: 0.25          # the last quarter of the evaluations (at least 3): the score is their mean
  tolerance: 0.05     # reject a run whose score oscillates by more than this (relative) in that tail; off: no check
  set: {eval_every: 1}  # extra keys for the tuning runs
```

For every (algorithm, setting) the grid runs on the tuning seeds with the short budget (ordinary runs:
same run ids and cache as ``compare``, so an interrupted tuning continues). A grid point is
**rejected** when a run failed or diverged, when its score is not finite, when it ends no better than
its first evaluation (no progress), or when the score oscillates: over the tail window ``w_1..w_n``
of evaluations (the last ``tail`` share, at least 3), the oscillation
``(Σ|w_{k+1} - w_k| - |w_n - w_1|) / (2 mean|w|)`` (the up-and-down movement beyond the net trend,
relative to the level) exceeds ``tolerance``. Among the accepted points the best mean tail score over
the tuning seeds wins (ties: the first in grid order). Written to ``<out>/compare/<name>/``:
``tuned.yaml`` (the procedure and the chosen values), ``tuning.csv`` (every grid point's score,
oscillation, status and verdict) and ``tuning.png`` (the score against each tuned key, one line per
algorithm: the best score over the other keys at that value). ``fbo compare`` then runs the
evaluation seeds with the chosen values and says so in its table.

**Stability confirmation.** A choice next to a rejected value (the largest or smallest *stable*
value of a key) sits one grid step from instability, and one tuning seed may miss that: such a choice
runs on :data:`CONFIRM_SEEDS` more seeds (after the tuning seeds, never evaluation seeds), and if any
of those runs is rejected (failed, diverged, ...) the point is rejected and the next best is chosen
(and confirmed in turn when it too sits next to a rejected value). The confirmation runs veto a point;
they do not enter its score. ``tuned.yaml``'s ``confirmed`` lists each confirmed choice and its seeds.

**Ranking check.** When the tuning budget is shorter than a setting's evaluation budget, the top 3
accepted points of each (algorithm, setting) run again at the evaluation budget on the tuning seeds,
scored the same way: the check *holds* when the choice is still the best of them (a run that fails or
diverges there is rejected). ``ranking.csv`` has both scores of each point and ``tuned.yaml``'s
``ranking_check`` the verdicts, which ``fbo compare`` and the report state; ``--no-ranking-check``
skips it (``fbo compare`` then warns that the short budget was not checked).

**Resuming a recorded tuning.** Tuning runs are not committed evidence; their ``tuning.csv`` is. A
tuning resumed where the runs are absent (a fresh machine, the evidence copied into
``<out>/compare/<name>/``) takes each absent run's status, score, oscillation and cost from the
recorded ``tuning.csv`` when it was scored by the same rule (score, tail, budget), and runs only the
new points: a widened grid, its extensions, confirmations. ``tuning.csv`` marks those rows
``recorded``; ``--rerun`` runs everything again. An unfinished tuning keeps its record too: before
each batch of runs ``tuning.partial.csv`` (the table so far) and ``tuning.partial.yaml`` (its rule)
are rewritten, the report's evidence carries them, and the finished tuning removes them.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .config import load_yaml, resolve
from .errors import UsageError
from .executors import GridOptions
from .results import PROCESS_STARTUP_S, RUN_STARTUP_S, atomic_write, fmt_num, write_yaml
from .spec import Cell, Experiment, TuneSpec, algo_overrides, check_metrics, claim_folder, load_spec
from .spec_types import AlgorithmEntry, Choice, SettingEntry, chosen_on_disk


def grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    """The cross product of a grid; a key ``"a,b"`` sets ``a`` and ``b`` to the same value."""
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        point = {}
        for k, v in zip(keys, combo):
            for part in k.split(","):
                point[part.strip()] = v
        out.append(point)
    return out


def score_run(m: pd.DataFrame, score: str, tail: float, budget: int) -> tuple[float, float]:
    """(mean of the tail window, oscillation over it) of ``score`` in a run's metrics."""
    if score not in m or m.empty:
        return float("nan"), float("nan")
    m = m[m["rounds"] <= budget] if (m["rounds"] <= budget).any() else m
    w = m[score].to_numpy(float)[1:] if len(m) > 1 else m[score].to_numpy(float)  # row 0 is the start
    n = max(min(3, len(w)), math.ceil(tail * len(w)))  # at least 3 evaluations, to see an oscillation
    w = w[-n:]
    if not np.all(np.isfinite(w)):
        return float("nan"), float("nan")
    level = float(np.mean(np.abs(w))) or 1.0
    osc = (float(np.abs(np.diff(w)).sum()) - abs(float(w[-1] - w[0]))) / (2 * level) if len(w) > 1 else 0.0
    return float(np.mean(w)), osc


def tune_spec(exp: Experiment) -> TuneSpec:
    """The spec's tune block (parsed and validated by :func:`fbo_cli.spec.load_spec`)."""
    if exp.tune is None:
        raise UsageError(f"{exp.path}: no 'tune:' block (a mapping); see `fbo tune --help`")
    return exp.tune


def confirm_seeds(exp: Experiment, ts: TuneSpec) -> list[int]:
    """The seeds that confirm a choice next to a rejected value: the next ones after the tuning seeds,
    skipping the evaluation seeds."""
    out, s = [], max(ts.seeds)
    while len(out) < CONFIRM_SEEDS:
        s += 1
        if s not in exp.seeds and s not in ts.seeds:
            out.append(s)
    return out


def _layers(exp: Experiment, ts: TuneSpec, a: AlgorithmEntry, s: SettingEntry, point: dict, seed: int,
            overrides: dict) -> tuple:
    """The config layers of one tuning run: the spec's base, the setting's and the algorithm's keys, the
    grid point, the tune block's ``set``, the seed (and the tuning budget), the command line's overrides."""
    return (exp.base, s.set, a.set, point, ts.extra,
            {"seed": seed, "target": None, **({"rounds": ts.rounds} if ts.rounds else {})},
            algo_overrides(exp, a, overrides))


PARTIAL = ("tuning.partial.yaml", "tuning.partial.csv")  # an unfinished tuning's record (module docstring)


def _rule(ts: TuneSpec) -> dict[str, Any]:
    return {"score": ts.score, "tail": ts.tail, "rounds": ts.rounds or "budget"}


def recorded_runs(exp: Experiment, ts: TuneSpec) -> dict[str, dict]:
    """The runs of this spec's recorded tuning (``<out>/compare/<name>/tuning.csv``, and the record of an
    unfinished one, ``tuning.partial.csv``) that finished, by run directory, where they were scored by
    today's rule (same score, tail and budget); else nothing."""

    outdir = exp.out_root / "compare" / exp.name
    records = []
    try:
        _, tuned, table = _recorded(exp)
        records.append((tuned, table))
    except UsageError:
        pass
    meta, csv = (outdir / f for f in PARTIAL)
    if meta.is_file() and csv.is_file():
        records.append((load_yaml(meta.read_bytes(), str(meta)) or {}, pd.read_csv(csv, keep_default_na=False,
                                                                             na_values=[""])))
    keep = ["status", "score", "start", "oscillation", "train_time_s", "eval_time_s"]
    out: dict[str, dict] = {}
    for tuned, table in records:  # the unfinished tuning's record last: it is the newer
        if {k: tuned.get(k) for k in ("score", "tail", "rounds")} != _rule(ts):
            continue
        rows = table[table.status.isin(["done", "diverged", "failed"])]
        out.update({r["run_dir"]: {k: r[k] for k in keep if k in r} for _, r in rows.iterrows()})
    return out


def stale_records(table: pd.DataFrame, recorded: dict[str, dict], rtol: float = 1e-6) -> list[str]:
    """Runs scored from their files today whose score differs from the recorded tuning's score for the
    same run directory: the run was made again (same configuration, changed code or machine) after the
    record was written. Today's files decide; this says that the two disagreed."""
    out = []
    for _, r in table[~table.recorded.astype(bool)].iterrows():
        old = recorded.get(r.run_dir)
        if old is None or not np.isfinite(r.score) or not np.isfinite(old.get("score", np.nan)):
            continue
        if abs(r.score - old["score"]) > rtol * max(abs(r.score), abs(old["score"])):
            out.append(f"{r.algorithm}, {r.point}, seed {r.seed}: the run on disk scores {r.score:.6g}, the recorded "
                       f"tuning {old['score']:.6g} (the run was made again after the record; the run decides)")
    return out


def tuning_todo(cells: list[tuple[Cell, dict]], recorded: dict[str, dict], rerun: bool = False,
                accept: bool = False, stale: dict | None = None) -> list[Cell]:
    """The tuning runs still to run: unfinished (or stale: their user algorithm's code changed, unless
    ``accept``), and not in the recorded tuning (unless ``rerun``)."""
    from .results import todo_runs

    todo = todo_runs([c for c, _ in cells], rerun, accept, stale)
    return todo if rerun else [c for c in todo if str(c.cfg.run_dir) not in recorded]


# what the committed tunings (docs/results/compare/*/tuned.yaml, 76 algorithm-setting pairs) ran beyond their
# grids, per (algorithm, setting): 1.3 extension points and 0.74 confirmed choices on average
EXPECTED_EXTENSIONS, EXPECTED_CONFIRMATIONS = 1.3, 0.74


def tuning_estimate(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any], cells: list[tuple[Cell, dict]],
                    todo: list[Cell], jobs: int = 1) -> dict[str, Any]:
    """What a tuning will run, before it runs: its grid runs still to do, and beyond them the runs it may add
    (extensions of a choice at a grid's edge, confirmations of a choice next to a rejected value, the ranking
    check at the evaluation budget): the expected number (from the committed tunings' averages) and the
    largest (every pair extended :data:`MAX_EXTENSIONS` times, every point confirmed once on
    :data:`CONFIRM_SEEDS` seeds, the ranking check's top :data:`RANKING_TOP` points), with their time: the
    cost model's seconds per run plus the fixed start-up."""
    from .results import estimate_cost

    pairs = {(c.algorithm, c.setting) for c, _ in cells}
    n_seeds = len(ts.seeds)
    per_pair = {k: len({str(p) for c, p in cells if (c.algorithm, c.setting) == k}) for k in pairs}
    secs, unknown = estimate_cost([c for c, _ in cells])
    known = len(cells) - unknown
    run_s = secs / known if known else float("nan")  # a tuning run's mean cost
    budget = tune_cells(exp, replace(ts, rounds=None), overrides)
    ranking = any(c.cfg.run.rounds < f.cfg.run.rounds for (c, _), (f, _) in zip(cells, budget))
    full_s = (estimate_cost([c for c, _ in budget])[0] / max(len(budget) - estimate_cost([c for c, _ in budget])[1], 1)
              if ranking else 0.0)
    rank_runs = len(pairs) * RANKING_TOP * n_seeds if ranking else 0
    exp_more = len(pairs) * (EXPECTED_EXTENSIONS * n_seeds + EXPECTED_CONFIRMATIONS * CONFIRM_SEEDS)
    max_more = sum(MAX_EXTENSIONS * n_seeds + (n + MAX_EXTENSIONS) * CONFIRM_SEEDS for n in per_pair.values())
    todo_s, _ = estimate_cost(todo)
    out = {"grid": len(cells), "todo": len(todo), "ranking": rank_runs,
           "expected": len(todo) + round(exp_more) + rank_runs, "largest": len(todo) + max_more + rank_runs,
           "run_s": run_s, "full_s": full_s, "unknown": unknown}
    for k, more in (("expected", exp_more), ("largest", max_more)):
        out[f"{k}_core_s"] = todo_s + more * run_s + rank_runs * full_s + out[k] * RUN_STARTUP_S
        out[f"{k}_s"] = out[f"{k}_core_s"] / max(jobs, 1) + PROCESS_STARTUP_S * (1 + (jobs if jobs > 1 else 0))
    return out


def estimate_text(e: dict[str, Any], jobs: int) -> str:
    """The estimate in words (``fbo tune --dry-run``)."""
    mins = lambda s: "?" if s != s else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"  # noqa: E731
    if not e["todo"]:
        return (f"nothing left to run in the grid (its {e['grid']} runs are finished or recorded); extensions, "
                f"confirmations and the ranking check may still add up to {e['largest']} runs "
                f"({mins(e['largest_s'])} with {jobs} job{'s' if jobs > 1 else ''})")
    return (f"{e['todo']} of {e['grid']} grid runs to do; with the runs a tuning adds (extensions at a grid's edge, "
            f"confirmations, {e['ranking']} ranking-check runs at the evaluation budget) expect about "
            f"{e['expected']} runs in {mins(e['expected_s'])}, at most {e['largest']} runs in {mins(e['largest_s'])}"
            f" of wall time with {jobs} job{'s' if jobs > 1 else ''} (start-up included: {PROCESS_STARTUP_S:g} s per "
            f"process, {RUN_STARTUP_S:g} s per run)"
            + (f"; {e['unknown']} grid run(s) of a kind never run here have no cost estimate" if e["unknown"] else ""))


def dry_run_text(spec_path: str | Path, overrides: dict[str, Any], rerun: bool, jobs: int) -> str:
    """``fbo tune --dry-run``: how many tuning runs are left and what they cost; runs nothing."""
    exp = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(exp)
    cells = tune_cells(exp, ts, overrides)
    todo = tuning_todo(cells, {} if rerun else recorded_runs(exp, ts), rerun)
    return f"{exp.name} tuning: {estimate_text(tuning_estimate(exp, ts, overrides, cells, todo, jobs), jobs)}"


def chosen_rows(outdir: Path) -> tuple[str, list[tuple[str, str, str, str]]]:
    """The title and the rows (algorithm, setting, values, note) of the choices recorded in ``outdir``'s
    ``tuned.yaml``, as ``fbo tune`` prints them."""
    from .spec import edge_note

    tuned = load_yaml((outdir / "tuned.yaml").read_bytes(), str(outdir / "tuned.yaml"))
    rows = [(algo, setting, ", ".join(f"{k}={fmt_num(v)}" for k, v in vals.items() if not k.startswith("_")),
             vals.get("_none") or edge_note(vals))
            for algo, per in (tuned.get("chosen") or {}).items() for setting, vals in per.items()]
    return f"Chosen by fbo tune ({tuned['score']}, {tuned['mode']})", rows


def tune_cells(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any],
               extended: dict[tuple[str, str], list[dict]] | None = None,
               confirm: dict[tuple[str, str], list[dict]] | None = None) -> list[tuple[Cell, dict]]:
    """The tuning runs: every grid point, plus the points ``extended`` beyond a grid's edge, per
    (algorithm, setting), on every tuning seed; and the points to ``confirm`` on the confirmation seeds."""
    settings = [s for s in exp.settings if ts.setting is None or s.name == ts.setting]
    cells = []
    confirming = [(seed, True) for seed in confirm_seeds(exp, ts)] if confirm else []
    for seed, is_confirmation in [(seed, False) for seed in ts.seeds] + confirming:
        for s in settings:
            for a in exp.algorithms:
                if not ts.grids[a.name]:  # nothing to choose: the spec's values stand
                    continue
                key = (a.name, s.name)
                points = ((confirm or {}).get(key, []) if is_confirmation
                          else grid_points(ts.grids[a.name]) + (extended or {}).get(key, []))
                for point in points:
                    layers = _layers(exp, ts, a, s, point, seed, overrides)
                    try:
                        cfg = resolve(exp.task, a.algo, *layers)
                    except UsageError as e:
                        raise UsageError(f"algorithm '{a.name}', setting '{s.name}', grid point "
                                         f"{point}: {e}") from None
                    cells.append((Cell(a.name, s.name, seed, cfg, layers), point))
    return cells


def point_error(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any], key: tuple[str, str],
                point: dict) -> str | None:
    """Why a grid point of (algorithm, setting) is not a valid configuration (the checks that run before
    any data loads: declared bounds and the algorithm's ``check``), or None."""
    a = next(a for a in exp.algorithms if a.name == key[0])
    s = next(s for s in exp.settings if s.name == key[1])
    try:
        resolve(exp.task, a.algo, *_layers(exp, ts, a, s, point, ts.seeds[0], overrides))
    except UsageError as e:
        return str(e)
    return None


def run_tuning(spec_path: str | Path, overrides: dict[str, Any], grid: GridOptions | None = None,
               rerun: bool = False, console=None, ranking_check: bool = True, accept_code_change: bool = False) -> Path:
    from .executors import run_cells
    from .results import cost_line

    exp = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(exp)
    outdir = exp.out_root / "compare" / exp.name
    claim_folder(exp, outdir, write=False)
    recorded = {} if rerun else recorded_runs(exp, ts)
    extended: dict[tuple[str, str], list[dict]] = {}
    confirm: dict[tuple[str, str], list[dict]] = {}  # choices next to a rejected value, run on more seeds
    invalid: dict[tuple[str, str], list[tuple[dict, str]]] = {}  # extensions outside a key's valid range
    grid = grid or GridOptions()
    checked = False
    while True:  # run the grid; while a choice sits at an edge, run one more point beyond it
        cells = tune_cells(exp, ts, overrides, extended, confirm)
        stale: dict = {}
        todo = tuning_todo(cells, recorded, rerun, accept_code_change, stale)
        if console is not None:
            for d, why in stale.items():
                console.print(f"{exp.name}: {d}: {why}; it runs again (--accept-code-change keeps it)", highlight=False)
        if todo and console is not None:
            console.print(f"{exp.name}: tuning, {cost_line(todo, grid.jobs)}", highlight=False)
        if todo:
            if not checked:
                # the tuning runs themselves: tune.set may change what they log
                check_metrics(replace(exp, cells=[c for c, _ in cells], metrics=[ts.score]))
                checked = True
            # what has run so far, before each batch: a tuning stopped in it resumes from here elsewhere
            claim_folder(exp, outdir)
            write_yaml(outdir / PARTIAL[0], {**_rule(ts), "note": "an unfinished tuning's runs so far"})
            atomic_write(outdir / PARTIAL[1], collect_tuning(cells, ts, extended, recorded).to_csv(index=False))
            run_cells(todo, grid, console=console, rerun=rerun,
                      title=f"{exp.name}: tuning runs" + (" (grid extensions)" if extended else ""))
        rerun = False  # a rerun redoes the spec's grid once, not the extensions' earlier runs
        table = collect_tuning(cells, ts, extended, recorded)
        chosen = choose(table, ts, invalid)
        more = []
        for key, point in extensions(table, chosen, ts, extended, invalid):
            why = point_error(exp, ts, overrides, key, point)
            if why:  # beyond the key's valid range (e.g. a momentum weight c alpha^2 > 1): not a grid point
                invalid.setdefault(key, []).append((point, why))
            else:
                more.append((key, point))
        if not more and any(invalid.values()):
            chosen = choose(table, ts, invalid)
        if not more:
            to_confirm = [(k, p) for k, p in unconfirmed(chosen) if p not in confirm.get(k, [])]
            if not to_confirm:
                break
            for key, point in to_confirm:
                confirm.setdefault(key, []).append(point)
                if console is not None:
                    console.print(f"{exp.name}: {key[0]}, {key[1]}: the choice is next to a rejected value; "
                                  f"confirming it on seeds {confirm_seeds(exp, ts)}", highlight=False)
            continue
        for key, point in more:
            extended.setdefault(key, []).append(point)
            if console is not None:
                console.print(f"{exp.name}: {key[0]}, {key[1]}: the choice is at the grid's edge; trying "
                              + ", ".join(f"{k}={fmt_num(v)}" for k, v in point.items()), highlight=False)
    if console is not None:
        for line in stale_records(table, recorded):
            console.print(f"{exp.name}: warning: {line}", highlight=False)
    extra_seeds = confirm_seeds(exp, ts)
    for (a, st), pts in confirm.items():  # say so where the choice survived its confirmation seeds
        c = chosen[a][st]
        if c.values in pts:
            c.notes["stable_edge"] += f" (and the choice is stable on seeds {', '.join(map(str, extra_seeds))})"
    ranking = (check_ranking(exp, ts, overrides, [c for c in cells if c[0].seed in ts.seeds],
                             table[table.grid != "confirmation"], extended, grid, console) if ranking_check else None)
    claim_folder(exp, outdir)
    atomic_write(outdir / "tuning.csv", table.to_csv(index=False))
    for f in PARTIAL:  # the finished record below replaces the unfinished one
        (outdir / f).unlink(missing_ok=True)
    if ranking is not None:
        atomic_write(outdir / "ranking.csv", ranking[0].to_csv(index=False))
    write_yaml(outdir / "tuned.yaml", {
        "spec": str(spec_path), "procedure": procedure_text(ts), "score": ts.score, "mode": ts.mode,
        "seeds": ts.seeds, "rounds": ts.rounds or "budget", "tail": ts.tail,
        "tolerance": ts.tolerance if math.isfinite(ts.tolerance) else "off",
        "setting": ts.setting, "grids": ts.grids,
        "extended": {f"{a} | {s}": pts for (a, s), pts in extended.items()},
        "confirmed": {f"{a} | {s}": {"points": pts, "seeds": extra_seeds} for (a, s), pts in confirm.items()},
        "chosen": chosen_on_disk(chosen),
        **({"ranking_check": ranking[1]} if ranking is not None else {})})
    plot_tuning(table, ts, outdir / "tuning.png", exp.title or exp.name, {a.name: a.algo for a in exp.algorithms})
    return outdir


def relabel(spec_path: str | Path, overrides: dict[str, Any]) -> tuple[Path, int]:
    """``fbo tune --relabel``: the notes of a recorded tuning (``tuned.yaml``) recomputed under today's
    rules from its ``tuning.csv``, running nothing. An extension that was never run because it is not a
    valid configuration (tried before points were checked before running, e.g. FedBiOAcc's c = 8.1
    under c alpha_1^2 <= 1) leaves the table and becomes the reason of a 'last valid value' note. The
    chosen values must stay those recorded; otherwise it refuses (re-tune instead). Returns the folder
    and the number of invalid points found."""
    exp = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(exp)
    outdir, tuned, table = _recorded(exp)
    invalid: dict[tuple[str, str], list[tuple[dict, str]]] = {}
    drop = []
    for i, r in table[table.status == "not run"].iterrows():
        keys = _key_values(ts.grids.get(r.algorithm) or {})
        point = {k: _plain(r[k]) for k in keys if k in r and not pd.isna(r[k])}
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
                         "re-tune with `fbo tune` instead")
    tuned["chosen"] = chosen_on_disk(chosen)
    atomic_write(outdir / "tuning.csv", table.to_csv(index=False))
    write_yaml(outdir / "tuned.yaml", tuned)
    return outdir, len(drop)


def _recorded(exp: Experiment) -> tuple[Path, dict, pd.DataFrame]:
    """A recorded tuning: its folder, ``tuned.yaml`` and ``tuning.csv`` (older tables completed)."""

    outdir = exp.out_root / "compare" / exp.name
    if not (outdir / "tuned.yaml").is_file() or not (outdir / "tuning.csv").is_file():
        raise UsageError(f"no tuned.yaml and tuning.csv in {outdir} (run `fbo tune` first)")
    table = pd.read_csv(outdir / "tuning.csv", keep_default_na=False, na_values=[""])
    table["reason"] = table["reason"].astype(object).fillna("") if "reason" in table else ""
    if "grid" not in table:  # recorded before extensions were marked: every row a grid point
        table["grid"] = "spec"
    return outdir, load_yaml((outdir / "tuned.yaml").read_bytes(), str(outdir / "tuned.yaml")), table


def ranking_only(spec_path: str | Path, overrides: dict[str, Any], grid: GridOptions | None = None,
                 console=None) -> Path:
    """``fbo tune --ranking-only``: the ranking check of a tuning recorded without it (module docstring),
    from its ``tuning.csv``: the top 3 accepted points of each (algorithm, setting) run at the evaluation
    budget on the tuning seeds; ``ranking.csv`` and ``tuned.yaml``'s ``ranking_check`` record the verdicts.
    The grid itself is not run again, and the choices stay as recorded."""
    exp = load_spec(spec_path, overrides, use_tuned=False)
    ts = tune_spec(exp)
    outdir, tuned, table = _recorded(exp)
    extended = {tuple(k.split(" | ")): pts for k, pts in (tuned.get("extended") or {}).items()}
    cells = tune_cells(exp, ts, overrides, extended)
    ranking = check_ranking(exp, ts, overrides, [c for c in cells if c[0].seed in ts.seeds],
                            table[table.grid != "confirmation"], extended, grid or GridOptions(), console)
    if ranking is None:
        raise UsageError(f"{exp.name} was tuned at its evaluation budget: there is no ranking to check")
    atomic_write(outdir / "ranking.csv", ranking[0].to_csv(index=False))
    tuned["ranking_check"] = ranking[1]
    write_yaml(outdir / "tuned.yaml", tuned)
    return outdir


RANKING_TOP = 3  # the accepted points per (algorithm, setting) that the ranking check runs at the full budget


def check_ranking(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any], cells: list[tuple[Cell, dict]],
                  table: pd.DataFrame, extended: dict, grid: GridOptions, console=None):
    """The ranking check (module docstring): ``(ranking.csv's rows, {"algo | setting": verdict})``, or
    None when every tuning run already had its setting's evaluation budget."""
    from .executors import run_cells
    from .results import todo_runs

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
    todo = todo_runs([c for c, _ in pick], False)
    if todo:
        run_cells(todo, grid, console=console, rerun=False, title=f"{exp.name}: ranking check at the evaluation budget")
    at_full = collect_tuning(pick, full, extended)
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


MAX_EXTENSIONS = 6  # grid points added beyond one edge of one key, per (algorithm, setting)
CONFIRM_SEEDS = 2  # more seeds that a choice next to a rejected value must survive


def unconfirmed(chosen: dict[str, dict[str, Choice]]) -> list[tuple[tuple[str, str], dict]]:
    """The choices next to a rejected value (note ``stable_edge``), as ((algorithm, setting), point)."""
    return [((algo, setting), dict(c.values))
            for algo, per in chosen.items() for setting, c in per.items() if c.notes.get("stable_edge")]


def _beyond(values: list, v) -> Any:
    """The next value beyond ``v``, an end of ``values``, continuing the grid geometrically (the ratio of
    ``v`` to its neighbour); None where that has no meaning (non-numbers, signs, one value). Below a 0
    at the bottom of a grid of non-negative numbers (e.g. ``mu_prox: [0, 0.001, 0.01]``) it is minus the
    next value: not a valid setting of any key (``resolve`` rejects negative numbers), so the choice of 0
    is labelled the smallest valid value."""
    nums = sorted(set(values))
    if len(nums) < 2 or not all(isinstance(u, (int, float)) and not isinstance(u, bool) and u >= 0 for u in nums):
        return None
    if v == nums[0] == 0:
        return -nums[1]
    nums = [u for u in nums if u > 0]  # a 0 at the bottom does not set the ratio at the top
    if len(nums) < 2:
        return None
    nb = nums[1] if v == nums[0] else nums[-2]
    nxt = v * (v / nb)
    if all(isinstance(u, int) for u in nums):
        nxt = int(round(nxt))
        if nxt == v or nxt < 1:
            return None
    return _plain(float(f"{nxt:.3g}")) if not isinstance(nxt, int) else nxt


def _edges(g: pd.DataFrame, grid: dict[str, list], best: dict[str, Any]) -> list[tuple[str, Any, Any, str]]:
    """(grid key, chosen value, the value beyond it, "largest" or "smallest") for each key whose chosen
    value is the largest or smallest *accepted* value along that key (the other keys at their chosen
    values). The value beyond is the nearest one tried there (rejected, then), else the grid's geometric
    continuation (None where there is none)."""
    out = []
    for key in grid:
        parts = [p.strip() for p in key.split(",")]
        line = g
        for k in _key_values(grid):
            if k not in parts and k in line:
                line = line[line[k] == best[k]]
        tried = sorted(set(_plain(v) for v in line[parts[0]].dropna()))
        ok = sorted(set(_plain(v) for v in line[~line.rejected][parts[0]].dropna()))
        v = best.get(parts[0])
        if len(tried) < 2 or v not in ok:
            continue
        for side, at_end, past in (("largest", v == ok[-1], [u for u in tried if u > v]),
                                   ("smallest", v == ok[0], [u for u in tried if u < v][::-1])):
            if at_end:
                out.append((key, v, past[0] if past else _beyond(tried, v), side))
    return out


def extensions(df: pd.DataFrame, chosen: dict, ts: TuneSpec, extended: dict[tuple[str, str], list[dict]],
               invalid: dict[tuple[str, str], list[tuple[dict, str]]] | None = None,
               ) -> list[tuple[tuple[str, str], dict]]:
    """The points to run next: for each choice at an edge whose value beyond has not been tried yet (nor
    found invalid), that point (the chosen values with the edge key moved one step beyond); at most
    :data:`MAX_EXTENSIONS` per (algorithm, setting)."""
    more = []
    for algo, per in chosen.items():
        for setting, c in per.items():
            c = Choice.of(c)  # a tuned.yaml's mapping, too
            if len(extended.get((algo, setting), [])) >= MAX_EXTENSIONS:
                continue
            g = df[(df.algorithm == algo) & (df.setting == setting)]
            known = [p for p, _ in (invalid or {}).get((algo, setting), [])]  # not valid configurations
            if "none" in c.notes:  # every point rejected: below the grid, if every rejection was instability
                point = _below_unstable(g, ts.grids[algo])
                if point is not None and point not in known:
                    more.append(((algo, setting), point))
                continue
            best = dict(c.values)
            for key, _, nxt, _ in _edges(g, ts.grids[algo], best):
                if nxt is None:
                    continue
                point = dict(best)
                for part in key.split(","):
                    point[part.strip()] = nxt
                if point not in known and not ((g[list(point)] == pd.Series(point)).all(axis=1)).any():
                    more.append(((algo, setting), point))
    return more


UNSTABLE = ("diverged", "oscillates", "non-finite score")  # rejections that say "the step is too large"


def _below_unstable(g: pd.DataFrame, grid: dict[str, list]) -> dict | None:
    """When every point of a grid was rejected and every rejection says the steps are too large
    (diverged, oscillates, non-finite), the point with every key one geometric step below its smallest
    value tried; None otherwise (e.g. "no progress", which a too-small or a too-large step can cause), or
    when that point was tried already."""
    g = g[g.grid != "confirmation"] if "grid" in g else g
    if g.empty or not g.rejected.all() or not g.reason.str.split(" on seed").str[0].isin(UNSTABLE).all():
        return None
    point = {}
    for key in grid:
        parts = [p.strip() for p in key.split(",")]
        tried = sorted(set(_plain(v) for v in g[parts[0]].dropna()))
        nxt = _beyond(tried, tried[0]) if tried else None
        if nxt is None or (isinstance(nxt, (int, float)) and nxt < 0):
            return None
        point.update({p: nxt for p in parts})
    if ((g[list(point)] == pd.Series(point)).all(axis=1)).any():
        return None
    return point


def point_name(point: dict) -> str:
    """A grid point as tuning.csv and ranking.csv name it: ``key=value, ...``."""
    return ", ".join(f"{k}={v}" for k, v in point.items())


def collect_tuning(cells: list[tuple[Cell, dict]], ts: TuneSpec,
                   extended: dict[tuple[str, str], list[dict]] | None = None,
                   recorded: dict[str, dict] | None = None) -> pd.DataFrame:
    """Every tuning run's score and verdict; a run absent here but in ``recorded`` (see
    :func:`recorded_runs`) stands as recorded."""
    from .results import run_status

    rows = []
    for c, point in cells:
        extra = point in (extended or {}).get((c.algorithm, c.setting), [])
        state, s, _ = run_status(c.cfg.run_dir)
        status = (s or {}).get("status", "missing") if state == "finished" else "not run"
        mpath = c.cfg.run_dir / "metrics.csv"
        sc, osc, start = float("nan"), float("nan"), float("nan")
        cost = {"train_time_s": (s or {}).get("train_time_s"), "eval_time_s": (s or {}).get("eval_time_s")}
        old = (recorded or {}).get(str(c.cfg.run_dir)) if status == "not run" else None
        if old is not None:
            status, sc, start, osc = old["status"], old["score"], old["start"], old["oscillation"]
            cost = {k: old.get(k) for k in cost}
        elif status in ("done", "diverged") and mpath.is_file():
            m = pd.read_csv(mpath)
            sc, osc = score_run(m, ts.score, ts.tail, ts.rounds or c.cfg.run.rounds)
            start = float(m[ts.score].iloc[0]) if ts.score in m and len(m) else float("nan")
        rows.append({"algorithm": c.algorithm, "setting": c.setting, "seed": c.seed,
                     "point": point_name(point), **point,
                     "grid": ("confirmation" if c.seed not in ts.seeds else "extension" if extra else "spec"),
                     "status": status, "score": sc, "start": start, "oscillation": osc,
                     "run_dir": str(c.cfg.run_dir), "recorded": old is not None,
                     # what the run cost (the report sums them into its section's compute, tuning included)
                     **cost})
    if not rows:  # nothing to judge (e.g. a ranking check after every point was rejected)
        return pd.DataFrame(columns=["algorithm", "setting", "seed", "point", "grid", "status", "score", "start",
                                     "oscillation", "run_dir", "recorded", "train_time_s", "eval_time_s", "reason",
                                     "rejected"])
    df = pd.DataFrame(rows)
    # a grid point is judged over all its tuning seeds; "no progress": the score ends no better than it began
    stuck = (df.score >= df.start) if ts.mode == "min" else (df.score <= df.start)
    bad = (df.status != "done") | ~np.isfinite(df.score) | (df.oscillation > ts.tolerance) | stuck
    df["reason"] = np.where(df.status != "done", df.status,
                            np.where(~np.isfinite(df.score), "non-finite score",
                                     np.where(df.oscillation > ts.tolerance, "oscillates",
                                              np.where(stuck, "no progress", ""))))
    df["rejected"] = bad
    conf = (df.grid == "confirmation") & (df.reason != "")
    df.loc[conf, "reason"] = df.reason[conf] + " on seed " + df.seed[conf].astype(str)
    # a point is judged over all its runs: a rejected run (a confirmation run's too) rejects the point
    df["rejected"] = df.groupby(["algorithm", "setting", "point"], sort=False).rejected.transform("any")
    return df


def choose(df: pd.DataFrame, ts: TuneSpec, invalid: dict[tuple[str, str], list[tuple[dict, str]]] | None = None,
           ) -> dict[str, dict[str, Choice]]:
    """The best accepted point of each (algorithm, setting), with notes on how it sits in its grid:
    ``stable_edge`` (next to a rejected value, named), ``valid_edge`` (the last value of the key's
    valid range: the value beyond is not a valid configuration, named with the reason), ``at_grid_edge``
    (beyond the edge not tried yet), ``none`` (every point rejected)."""
    chosen: dict[str, dict[str, Choice]] = {}
    for (algo, setting), g in df.groupby(["algorithm", "setting"], sort=False):
        scored = g[g.grid != "confirmation"]  # confirmation runs veto a point; they do not score it
        agg = scored.groupby("point", sort=False).agg(score=("score", "mean"), rejected=("rejected", "any"))
        ok = agg[~agg.rejected]
        if ok.empty:
            chosen.setdefault(algo, {})[setting] = Choice(notes={"none": "every grid point was rejected"})
            continue
        best = ok.score.idxmin() if ts.mode == "min" else ok.score.idxmax()
        row = g[g.point == best].iloc[0]
        keys = [k for k in g.columns if k not in _NOT_PARAMS and not pd.isna(row[k])]
        vals = {k: _plain(row[k]) for k in keys}
        notes: dict[str, list[str]] = {}
        for key, v, nxt, side in _edges(g, ts.grids[algo], vals):
            col = key.split(",")[0].strip()
            beyond = g[g[col] == nxt] if nxt is not None else g.iloc[0:0]
            for k in _key_values(ts.grids[algo]):
                if k not in [p.strip() for p in key.split(",")] and k in beyond:
                    beyond = beyond[beyond[k] == vals[k]]
            bad = [why for p, why in (invalid or {}).get((algo, setting), [])
                   if all(p.get(part.strip()) == nxt for part in key.split(","))
                   and all(p.get(k) == vals.get(k) for k in p if k not in [q.strip() for q in key.split(",")])]
            if len(beyond) and beyond.rejected.any():
                why = next(r for r in beyond.reason if r)
                notes.setdefault("stable_edge", []).append(f"{key}={fmt_num(v)} is the {side} stable value: "
                                                           f"{key}={fmt_num(nxt)} {why}")
            elif bad:
                notes.setdefault("valid_edge", []).append(f"{key}={fmt_num(v)} is the {side} valid value: "
                                                          f"{key}={fmt_num(nxt)} is not valid ({bad[0]})")
            else:  # beyond the edge: not tried yet (or the extension limit, or no next value)
                notes.setdefault("at_grid_edge", []).append(key)
        chosen.setdefault(algo, {})[setting] = Choice(vals, {k: (", " if k == "at_grid_edge" else "; ").join(v)
                                                             for k, v in notes.items()})
    return chosen


def _key_values(grid: dict[str, list]) -> dict[str, list]:
    """Each single key of a grid with its values (a key "a,b" gives a and b the same values)."""
    return {part.strip(): values for k, values in grid.items() for part in k.split(",")}


_NOT_PARAMS = {"algorithm", "setting", "seed", "point", "status", "score", "start", "oscillation", "run_dir",
               "reason", "rejected", "grid", "train_time_s", "eval_time_s", "recorded"}


def _plain(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return int(v) if float(v).is_integer() and abs(v) > 1 else float(v)
    return v


def procedure_text(ts: TuneSpec) -> str:
    budget = f"{ts.rounds} communication rounds" if ts.rounds else "the setting's own evaluation budget"
    where = f"on setting '{ts.setting}' (values used for every setting)" if ts.setting else "per setting"
    oscillation = (f", and scores oscillating by more than {ts.tolerance:g} (relative up-and-down movement "
                   "beyond the trend) over that window" if math.isfinite(ts.tolerance)
                   else " (no oscillation check: tolerance off)")
    return (f"grid search {where}, tuning seeds {ts.seeds} (disjoint from the evaluation seeds), "
            f"{budget} each; score: {ts.mode} of the mean {ts.score} over the last "
            f"{ts.tail:.0%} of evaluations, at least 3 (validation data, never the test set), averaged over "
            f"the tuning seeds; rejected: failed or diverged runs, non-finite scores, no progress over the first "
            f"evaluation{oscillation}; a choice at a grid's edge is extended geometrically, one value at a time "
            f"(at most {MAX_EXTENSIONS}), until it is interior or the value beyond it is rejected (a grid whose every "
            f"point diverged or oscillated goes on below its smallest values); a choice next to a "
            f"rejected value must also survive {CONFIRM_SEEDS} more seeds, else the next best is chosen")


def plot_tuning(df: pd.DataFrame, ts: TuneSpec, path: Path, title: str, algo_of: dict | None = None) -> None:
    """The tuning grid: per key, the best score over the other keys at each value, a line per algorithm; a
    value whose every point was rejected is an x at the foot of the panel (it has no score)."""
    from matplotlib.ticker import LogLocator

    from . import plotstyle as ps

    df = df[df.grid != "confirmation"]  # their verdicts are in "rejected" already; their scores do not count
    keys = list(dict.fromkeys(k for g in ts.grids.values() for k in g))
    settings = list(dict.fromkeys(df.setting))
    ncol = min(3, len(keys))  # panels wrap after 3 keys; one block of rows per setting
    rows = math.ceil(len(keys) / ncol)
    fig, axes = ps.subplots(rows * len(settings), ncol, panel_h=2.1)
    for ax in axes.flat[len(keys) * len(settings):]:
        ax.set_visible(False)
    algos = list(ts.grids)
    styles = ps.row_styles([(a, (algo_of or {}).get(a, a)) for a in algos])  # each method's colour
    for i, s in enumerate(settings):
        for j, key in enumerate(keys):
            ax = axes[i * rows + j // ncol][j % ncol]
            col = key.split(",")[0].strip()
            for a in algos:
                if key not in ts.grids[a]:
                    continue
                st = styles[a]
                g = df[(df.algorithm == a) & (df.setting == s)]
                per = g.groupby("point", sort=False).agg(v=(col, "first"), score=("score", "mean"),
                                                         rejected=("rejected", "any"))
                ok = per[~per.rejected].groupby("v").score
                best = (ok.min() if ts.mode == "min" else ok.max()).sort_index()
                if len(best):
                    ax.plot(best.index, best.values, color=st["color"], marker=st["marker"], ls=st["ls"], label=a)
                rej = sorted(set(per[per.rejected].v) - set(best.index))
                if rej:
                    ax.plot(rej, [0.04] * len(rej), "x", color=st["color"], ms=6, mew=1.5, clip_on=False,
                            transform=ax.get_xaxis_transform(), label=f"{a}: every point rejected")
            vals = [v for a in algos for v in ts.grids[a].get(key, [])]
            if vals and min(vals) > 0 and max(vals) / min(vals) >= 10:
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(LogLocator(numticks=5))
                ax.xaxis.set_minor_formatter("")  # minor tick labels crowd the major ones
            ax.set_xlabel(key)
            ax.set_ylabel(f"{ts.score} ({ts.mode}; validation)")
            ax.set_title(s if len(settings) > 1 or ts.setting else key)
    ps.shared_legend(fig)
    ps.suptitle(fig, f"Tuning: {title}. Best {ts.score} over the other keys at each value; x at the foot: every "
                f"point at that value rejected")
    ps.save(fig, path)
