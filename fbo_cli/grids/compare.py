"""``fbo compare``: run an experiment grid (algorithms x settings x seeds) and aggregate it.

The spec is validated in full before the first run (keys, names, metric names against the task's
metrics, the reference's shape). Runs already finished (``summary.json`` is the completion record of
the ``metrics.csv`` beside it, see :func:`fbo_cli.runs.rundir.run_status`) are reused, partial runs
resume from their checkpoint, corrupt ones are reported and redone; runs execute through
:func:`fbo_cli.grids.executors.run_cells` (serial, processes or Ray). Rows are keyed by algorithm
(``algo`` + its ``set``; display names must be unique) and setting. Output in
``results/compare/<name>/``: ``table.md`` and ``table.csv`` (mean and spread over seeds, the paper's
numbers beside ours), ``runs.csv`` (one row per run), ``curves.png`` (headline metric against the
spec's x axis: one line per algorithm, mean over seeds with a min-max band, a panel per setting).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ..errors import UsageError
from ..runs.rundir import atomic_write, read_metrics, run_status
from ..runs.table import lower_is_better, run_row, to_markdown
from .executors import GridOptions
from .plan import check_metrics, plan_experiment  # noqa: F401  (check_metrics: compare's API)
from .plots import plot_experiment, t95  # noqa: F401  (compare's public API)
from .spec import (  # noqa: F401  (load_spec: the public API compare has always had)
    BANDS,
    Cell,
    Experiment,
    claim_folder,
    edge_note,
    load_spec,
    overrides_note,
    tuned_entry,
    tuned_layer,
)
from .spec_records import tuned_note, tuning_budget_note  # noqa: F401  (compare's API: the table's tuning notes)


def dry_run_lines(exp: Experiment, rerun: bool, jobs: int, batch: str | int = "auto") -> list[str]:
    """``fbo compare --dry-run``: the plan (:func:`~fbo_cli.grids.plan.plan_experiment`: the spec's checks the real
    run makes before it runs, what the reuse check found about code) and how many runs are left and what they cost;
    runs nothing and writes nothing (``--accept-code-change`` is a step of the real run)."""
    plan = plan_experiment(exp, rerun)
    exp.states = plan.states()  # a settling look after it (--until-settled) reads no run again
    return ([f"{exp.name}: {line}" for line in plan.notes()]
            + [f"{exp.name}: {len(exp.cells)} cells; {plan.cost_line(jobs, batch)}"])


def run_experiment(exp: Experiment, grid: GridOptions | None = None, rerun: bool = False, console=None,
                   accept_code_change: bool = False) -> Path:
    """Run the grid's unfinished runs (all of them with ``rerun``): the plan made once (:mod:`fbo_cli.grids.plan`),
    its runs executed, and the states the plan and the executors hold kept in ``exp.states`` for the report, which
    is the command's next step (:func:`report_experiment`: it then reads no run again). Returns the report's
    folder."""
    grid = grid or GridOptions()
    outdir = report_dir(exp)
    plan = prepare(exp, outdir, rerun, accept_code_change, grid, console)
    if plan.todo:
        execute(exp, plan, grid, rerun, console)
    exp.states = plan.states()  # what the report need not read again
    return outdir


def report_experiment(exp: Experiment, no_run: bool = False, console=None) -> Path:
    """The report of the grid's runs as they are (after :func:`run_experiment`, or alone: ``--no-run``): the table,
    runs and figures (:func:`write_report`; a corrupt run directory is named on ``console`` with the reason it is not
    counted) and the command line's record beside them. Returns its folder; ``exp.incomplete`` counts the cells
    that failed or have no finished run."""
    outdir = report_dir(exp)
    write_report(exp, outdir, no_run=no_run,
                 warn=(lambda m: console.print(m, style="yellow", markup=False, highlight=False)) if console else None)
    write_command_line(exp, outdir)
    return outdir


def report_dir(exp: Experiment) -> Path:
    """Where a compare writes its report: ``<out_root>/compare/<name>``."""
    return exp.out_root / "compare" / exp.name


def prepare(exp: Experiment, outdir: Path, rerun: bool, accept_code_change: bool, grid: GridOptions, console):
    """Before the runs: the results folder claimed, the plan made (its checks first), a code change accepted where
    asked (the one step that writes into run folders), and its notes and cost said."""
    claim_folder(exp, outdir, write=False)
    plan = plan_experiment(exp, rerun)
    if plan.todo:
        grid.check_cluster()
    claim_folder(exp, outdir)
    if accept_code_change:
        plan.accept()
    if console is not None:
        for line in plan.notes():
            console.print(f"{exp.name}: {line}", highlight=False)
        if plan.todo:
            console.print(f"{exp.name}: {plan.cost_line(grid.jobs, grid.batch)}", highlight=False)
    return plan


def execute(exp: Experiment, plan, grid: GridOptions, rerun: bool, console) -> None:
    """The plan's runs through the executors (:func:`fbo_cli.grids.executors.run_cells`); their summaries go into
    ``exp.outcomes`` and the plan (:meth:`~fbo_cli.grids.plan.Plan.record`)."""
    from .executors import run_cells

    todo = plan.todo
    res = run_cells(todo, grid, console=console, rerun=rerun, title=f"{exp.name}: runs")
    exp.outcomes.update({c.cfg.run_dir: r for c, r in zip(todo, res)})
    plan.record(todo, res)


COMMAND_LINE = "command_line.yaml"  # a compare's --set keys and --seeds, beside the table they made


def write_command_line(exp: Experiment, outdir: Path) -> None:
    """Record what the command line changed from the spec (``--set``, ``--seeds``) beside the table, so that
    ``fbo report --spec`` finds the runs of a compare made with them (their run ids hold the keys; the folder's
    name does not); a compare without them removes the record."""
    from ..runs.rundir import write_yaml

    rec = {**({"set": exp.overrides} if exp.overrides else {}), **({"seeds": exp.seeds} if exp.seeds_given else {})}
    if rec:
        write_yaml(outdir / COMMAND_LINE, rec)
    elif _own_record(outdir / COMMAND_LINE):
        (outdir / COMMAND_LINE).unlink()


def _own_record(p: Path) -> bool:
    """Whether ``p`` is a record :func:`write_command_line` wrote: a regular file (never a link) holding only its
    keys. Anything else by that name is not fbo's to remove."""
    import yaml

    if p.is_symlink() or not p.is_file():
        return False
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(doc, dict) and bool(doc) and set(doc) <= {"set", "seeds"}


def command_line(root: Path, name: str) -> tuple[dict, list[int] | None]:
    """(the ``--set`` keys, the ``--seeds`` or None) of the last compare of the spec named ``name`` under the
    results root ``root`` (:func:`write_command_line`); none recorded: ``({}, None)``."""
    from ..runs.config import load_yaml

    try:
        f = Path(root) / "compare" / name / COMMAND_LINE
        rec = load_yaml(f.read_bytes(), str(f)) if f.is_file() else {}
    except (UsageError, OSError):
        return {}, None
    rec = rec if isinstance(rec, dict) else {}
    sets, seeds = rec.get("set") or {}, rec.get("seeds")
    return (sets if isinstance(sets, dict) else {}), (seeds if isinstance(seeds, list) else None)


# --------------------------------------------------------------------------------------------------
# Aggregation


def collect(exp: Experiment, warn=None) -> tuple[pd.DataFrame, dict[tuple[str, str, int], pd.DataFrame]]:
    """One row per cell (``status``: done, diverged, collapsed (derived from the metrics, a finished run's row is
    :func:`fbo_cli.runs.table.run_row`), failed, or ``not run`` for a run without a finished, consistent run
    directory, with ``corrupt``: why, when its files fail their completion record), and the metrics of the
    finished runs. Only a run whose
    ``summary.json`` is the completion record of its ``metrics.csv`` is aggregated; a corrupt run
    directory is reported through ``warn`` and counted as not run. A run directory's state is read once per
    command: ``exp.states`` holds those the command has (the plan's and the executors',
    :meth:`fbo_cli.grids.plan.Plan.states`), and the ones read here join them."""
    rows, curves = [], {}
    known = exp.states
    for c in exp.cells:
        d = c.cfg.run_dir
        if d not in known:
            known[d] = run_status(d)
        state, s, why = known[d]
        m = read_metrics(d / "metrics.csv") if state == "finished" else None
        base = {"algorithm": c.algorithm, "setting": c.setting, "seed": c.seed, "algo": c.cfg.algo, "run_dir": str(d)}
        if state == "corrupt" and warn:
            warn(f"{d}: {why}; not aggregated (run compare again to redo it)")
        now = exp.outcomes.get(d) or {}
        if state != "finished" and now.get("status") == "failed":  # failed before writing its summary
            rows.append({**base, "status": "failed", "error": now.get("error")})
            continue
        if state != "finished" or (m is None and s.get("status") != "failed") or (
                m is not None and exp.metric not in m):
            rows.append({**base, "status": "not run", **({"corrupt": why} if state == "corrupt" else {})})
            continue
        if s.get("status") == "failed" or m is None or m.empty:
            rows.append({**base, "status": "failed", "error": s.get("error")})
            continue
        curves[(c.algorithm, c.setting, c.seed)] = m
        rows.append(run_row(m, s, c.cfg.run, exp.metric, exp.target, base))
    return pd.DataFrame(rows), curves


def grid_note(exp: Experiment, runs: pd.DataFrame) -> str | None:
    """A warning when the methods of one setting were evaluated on different round grids (their rounds to the
    target are then read at different resolutions; a verdict takes each crossing as the interval it is)."""
    if exp.target is None or "eval_grid" not in runs:
        return None
    for s, g in runs.dropna(subset=["eval_grid"]).groupby("setting", sort=False):
        per = g.groupby("algorithm", sort=False).eval_grid.first()
        if per.nunique() > 1:
            shown = ", ".join(f"{a} every {int(v)}" for a, v in per.items())
            return (f"{exp.name}: setting {s}: the methods were evaluated on different round grids ({shown} rounds): "
                    f"rounds to target are read at those resolutions; set eval_rounds (e.g. in the spec's base) to "
                    f"evaluate every method on one grid")
    return None


def same_runs(exp: Experiment) -> dict[tuple[str, str], list[str]]:
    """``{(algorithm, setting): [later algorithms whose runs there are the very same]}`` (e.g. an untuned
    "(tuned)" row that landed on the paper's steps): the table shows them as one row and the figure as one
    line, named by all of them, so that neither hides the other."""
    runs: dict[tuple[str, str], set] = {}
    for c in exp.cells:
        runs.setdefault((c.algorithm, c.setting), set()).add(c.cfg.run_dir)
    out: dict[tuple[str, str], list[str]] = {}
    for s in exp.settings:
        first: dict[frozenset, str] = {}
        for a in exp.algorithms:
            key = frozenset(runs.get((a.name, s.name), ()))
            if key in first:
                out.setdefault((first[key], s.name), []).append(a.name)
                out[(a.name, s.name)] = []  # shown under the first
            elif key:
                first[key] = a.name
    return out


def _shown_as(dups: dict, a: str, s: str) -> str | None:
    """The row name of ``a`` in setting ``s`` ("A = B" for the same runs), or None when it is merged away."""
    if (a, s) in dups and not dups[(a, s)]:
        return None
    return " = ".join([a, *dups.get((a, s), [])])


def _ms(v: pd.Series, counts: bool = False) -> str:
    """``mean ± std`` over seeds as text, one format per quantity: ``counts`` (rounds, iterations) as whole
    numbers, mean and spread alike; fractions stay fractions, as in metrics.csv; ``-`` when empty."""
    v = v.dropna().astype(float)
    if v.empty:
        return "-"
    if counts:
        f = lambda x: f"{x:.0f}"  # noqa: E731
    elif v.abs().max() < 10:  # fractions and losses: four decimals, mean and spread alike
        f = lambda x: f"{x:.4f}"  # noqa: E731
    else:
        f = lambda x: f"{x:.4g}"  # noqa: E731
    return f(v.iloc[0]) if len(v) == 1 else f"{f(v.mean())} ± {f(v.std(ddof=1))}"


def summarize(exp: Experiment, runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table as text (``table.md``: mean ± std) and as numbers (``table.csv``: for each quantity its
    mean, ``<q> std`` and ``<q> n``), one row per (setting, algorithm)."""
    out, nums = [], []
    dups = same_runs(exp)
    for s in exp.settings:
        for a in exp.algorithms:
            shown = _shown_as(dups, a.name, s.name)
            if shown is None:
                continue
            cell = runs[(runs.algorithm == a.name) & (runs.setting == s.name)]
            g = cell[cell.status == "done"]  # the rule: means over the runs that finished 'done'
            row = {"setting": s.name, "algorithm": shown, "seeds": len(g),
                   "diverged": int((cell.status == "diverged").sum()),
                   "collapsed": int((cell.status == "collapsed").sum()), "failed": int((cell.status == "failed").sum()),
                   "not run": int((cell.status == "not run").sum())}
            num = dict(row)
            col = lambda k, g=g: g[k] if k in g else pd.Series(dtype=float)

            def put(name: str, v: pd.Series, text: str | None = None, row=row, num=num) -> None:
                v = v.dropna().astype(float)
                row[name] = _ms(v, counts=name.endswith("to target")) if text is None else text
                num[name] = v.mean() if len(v) else math.nan
                num[f"{name} std"] = v.std(ddof=1) if len(v) > 1 else math.nan
                num[f"{name} n"] = len(v)

            if exp.target is not None:
                hit = col("rounds_to_target").dropna()
                put("rounds to target", hit, ("-" if g.empty else _ms(hit, counts=True) if len(hit) else "never")
                    + f" ({len(hit)}/{len(g)})")
                low = col("rounds_to_target_low").dropna()  # the resolution: crossed in (low, rounds]
                num["rounds to target low"] = low.mean() if len(low) else math.nan
                its = col("iterations_to_target")
                put("iterations to target", its, None if len(hit) else "never")
            put("final", col("final"))
            put("best", col("best"))
            for m in exp.metrics:
                if m != exp.metric:
                    put(m, g[m] if m in g else pd.Series(dtype=float))
            ref = (exp.reference.get(a.name) or {}).get(s.name) or {}
            for k, v in ref.items():
                row[f"paper {k}"] = num[f"paper {k}"] = v
            out.append(row)
            nums.append(num)
    return pd.DataFrame(out), pd.DataFrame(nums)


def table_markdown(exp: Experiment, table: pd.DataFrame) -> str:
    """The table's Markdown without its title: what the columns and the rule mean, the table, and how
    the hyperparameters were chosen (``table.md`` is this under the experiment's title)."""
    low, body = lower_is_better(exp.metric), to_markdown(table)
    head = [f"Task `{exp.task}`, metric `{exp.metric}` "
            + ("(lower is better)" if low else "(a fraction, as in metrics.csv)")
            + f", seeds {exp.seeds}; mean ± standard deviation over seeds. 'final' is the last evaluation within the "
              f"round budget; 'best' the best evaluation (the {'lowest' if low else 'highest'})."
            + (f" 'rounds to target': first communication round with {exp.metric} {'≤' if low else '≥'} {exp.target} "
               "(mean over the seeds that reach it; reached/total)." if exp.target is not None else "")
            + ((" Columns 'paper ...' are the paper's numbers" + (
                ", at the spec's own settings: beside runs made with the overrides below they are context, not a "
                "comparison." if overrides_note(exp) else ".")) if exp.reference else "")
            + (f" **Overridden on the command line: {overrides_note(exp)}.**" if overrides_note(exp) else "")
            + " Rule: means, spreads and 'seeds' count only the runs that finished with status done; diverged runs "
              "(a NaN/inf, or a loss above 1000 x max(its first value, 1)), collapsed runs (the headline metric fell "
              "to "
              "chance level and stayed there to the end), failed runs and runs not run are left "
              "out of them and counted in their columns; a cell without a done run shows '-'.", ""]
    return "\n".join(head) + "\n" + body + "\n" + tuned_note(exp)


def write_report(exp: Experiment, outdir: Path, no_run: bool = False, warn=None, plots: bool = True) -> str:
    """Write the experiment's table, runs and (``plots``) figures into ``outdir``; returns the table's
    Markdown (without its title)."""
    runs, curves = collect(exp, warn)
    exp.incomplete = int(runs.status.isin(["failed", "not run"]).sum())
    if no_run and not (runs.status != "not run").any():
        raise UsageError(f"no finished runs for experiment '{exp.name}' (run it without --no-run)", kind="not_found",
                         field="--no-run")
    if warn and (note := grid_note(exp, runs)):
        warn(note)
    table, numbers = summarize(exp, runs)
    md = table_markdown(exp, table)
    if plots:  # the figures beside the table: what their lines and bands are
        from .plots import caption

        md = md.rstrip("\n") + f"\n\nThe figures beside this table (curves.png): {caption(exp)}\n"
    atomic_write(outdir / "table.md", f"# {exp.title or exp.name}\n\n" + md)
    atomic_write(outdir / "table.csv", numbers.to_csv(index=False))
    atomic_write(outdir / "runs.csv", runs.to_csv(index=False))
    if not plots:
        return md
    if plot_experiment(exp, curves, outdir / "curves.png", runs) < ZOOM_BELOW:  # ends squeezed together
        plot_experiment(exp, curves, outdir / "curves_zoom.png", runs, tail=0.5)
    else:
        for fmt in ("png", "pdf", "svg"):
            (outdir / f"curves_zoom.{fmt}").unlink(missing_ok=True)
    for xa in exp.x_also:
        plot_experiment(replace(exp, x=xa), curves, outdir / f"curves_{xa}.png", runs)
    return md


ZOOM_BELOW = 0.15  # a second figure of the last half when the lines' ends span less than this share of the axis


