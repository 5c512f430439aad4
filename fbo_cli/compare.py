"""``fbo compare``: run an experiment grid (algorithms x settings x seeds) and aggregate it.

The spec is validated in full before the first run (keys, names, metric names against the task's
metrics, the reference's shape). Runs already finished (``summary.json`` is the completion record of
the ``metrics.csv`` beside it, see :func:`fbo_cli.results.run_status`) are reused, partial runs
resume from their checkpoint, corrupt ones are reported and redone; runs execute through
:func:`fbo_cli.executors.run_cells` (serial, processes or Ray). Rows are keyed by algorithm
(``algo`` + its ``set``; display names must be unique) and setting. Output in
``results/compare/<name>/``: ``table.md`` and ``table.csv`` (mean and spread over seeds, the paper's
numbers beside ours), ``runs.csv`` (one row per run), ``curves.png`` (headline metric against the
spec's x axis: one line per algorithm, mean over seeds with a min-max band, a panel per setting).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import UsageError
from .results import (
    METRIC_LABELS,
    X_AXES,
    atomic_write,
    cost_line,
    fmt_num,
    lower_is_better,
    md_row,
    read_metrics,
    rounds_to_target,
    run_status,
    save_figure,
    todo_runs,
)
from .spec import (  # noqa: F401  (load_spec, check_metrics: the public API compare has always had)
    BANDS,
    Cell,
    Experiment,
    check_metrics,
    claim_folder,
    edge_note,
    load_spec,
    tuned_entry,
    tuned_layer,
)


def run_experiment(exp: Experiment, jobs: int = 1, rerun: bool = False, no_run: bool = False, console=None,
                   executor: str | None = None, address: str | None = None, cpus_per_run: int = 1,
                   gpus_per_run: float = 0) -> Path:
    """Run the grid's unfinished runs (all of them with ``rerun``), then write the report. Returns the
    report's folder; ``exp.incomplete`` counts the cells that failed or have no finished run."""

    from .executors import run_cells

    outdir = exp.out_root / "compare" / exp.name
    if not no_run:
        claim_folder(exp, outdir, write=False)
        check_metrics(exp)
        claim_folder(exp, outdir)
        todo = todo_runs(exp.cells, rerun)
        if todo and console is not None:
            console.print(f"{exp.name}: {cost_line(todo, jobs)}", highlight=False)
        if todo:
            res = run_cells(todo, executor=executor or ("serial" if jobs == 1 else "processes"), jobs=jobs,
                      address=address, cpus_per_run=cpus_per_run, gpus_per_run=gpus_per_run, console=console,
                      rerun=rerun, title=f"{exp.name}: runs")
            exp.outcomes.update({c.cfg.run_dir: r for c, r in zip(todo, res)})
    write_report(exp, outdir, no_run=no_run,  # a corrupt run directory is named with the reason it is not counted
                 warn=(lambda m: console.print(m, style="yellow", markup=False, highlight=False)) if console else None)
    return outdir


# --------------------------------------------------------------------------------------------------
# Aggregation


def collect(exp: Experiment, warn=None) -> tuple[pd.DataFrame, dict[tuple[str, str, int], pd.DataFrame]]:
    """One row per cell (``status``: done, diverged, failed, or ``not run`` for a run without a
    finished, consistent run directory), and the metrics of the finished runs. Only a run whose
    ``summary.json`` is the completion record of its ``metrics.csv`` is aggregated; a corrupt run
    directory is reported through ``warn`` and counted as not run."""
    rows, curves = [], {}
    for c in exp.cells:
        d = c.cfg.run_dir
        state, s, why = run_status(d)
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
            rows.append({**base, "status": "not run"})
            continue
        if s.get("status") == "failed" or m is None or m.empty:
            rows.append({**base, "status": "failed", "error": s.get("error")})
            continue
        curves[(c.algorithm, c.setting, c.seed)] = m
        budget = c.cfg.run.rounds
        within = m[m["rounds"] <= budget] if (m["rounds"] <= budget).any() else m
        series = within[exp.metric]
        row = {**base, "status": s["status"],
               "rounds_to_target": rounds_to_target(m, exp.metric, exp.target),
               "iterations_to_target": rounds_to_target(m, exp.metric, exp.target, x="iterations"),
               "final": float(series.iloc[-1]),
               "best": float(series.min() if lower_is_better(exp.metric) else series.max()),
               "final_mean_last5": float(series.tail(5).mean()),
               "rounds": int(within["rounds"].iloc[-1]), "iterations": int(within["iterations"].iloc[-1]),
               "train_time_s": s.get("train_time_s"), "seconds_per_round": s.get("seconds_per_round")}
        for k in m.columns:
            if k not in row and m[k].dtype.kind in "fi":
                row[f"final_{k}" if k in ("rounds", "iterations") else k] = float(within[k].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows), curves


def _ms(v: pd.Series) -> str:
    """``mean ± std`` over seeds as text (fractions stay fractions, as in metrics.csv); ``-`` when empty."""
    v = v.dropna().astype(float)
    if v.empty:
        return "-"
    if (v == v.round()).all() and v.abs().max() >= 10:  # counts (rounds, iterations): whole numbers
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
    for s in exp.settings:
        for a in exp.algorithms:
            cell = runs[(runs.algorithm == a["name"]) & (runs.setting == s["name"])]
            g = cell[cell.status == "done"]  # the rule: means over the runs that finished 'done'
            row = {"setting": s["name"], "algorithm": a["name"], "seeds": len(g),
                   "diverged": int((cell.status == "diverged").sum()), "failed": int((cell.status == "failed").sum()),
                   "not run": int((cell.status == "not run").sum())}
            num = dict(row)
            col = lambda k, g=g: g[k] if k in g else pd.Series(dtype=float)

            def put(name: str, v: pd.Series, text: str | None = None, row=row, num=num) -> None:
                v = v.dropna().astype(float)
                row[name] = _ms(v) if text is None else text
                num[name] = v.mean() if len(v) else math.nan
                num[f"{name} std"] = v.std(ddof=1) if len(v) > 1 else math.nan
                num[f"{name} n"] = len(v)

            if exp.target is not None:
                hit = col("rounds_to_target").dropna()
                put("rounds to target", hit, ("-" if g.empty else _ms(hit) if len(hit) else "never")
                    + f" ({len(hit)}/{len(g)})")
                its = col("iterations_to_target")
                put("iterations to target", its, None if len(hit) else "never")
            put("final", col("final"))
            put("best", col("best"))
            for m in exp.metrics:
                if m != exp.metric:
                    put(m, g[m] if m in g else pd.Series(dtype=float))
            ref = (exp.reference.get(a["name"]) or {}).get(s["name"]) or {}
            for k, v in ref.items():
                row[f"paper {k}"] = num[f"paper {k}"] = v
            out.append(row)
            nums.append(num)
    return pd.DataFrame(out), pd.DataFrame(nums)


def _to_markdown(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = [md_row(cols), "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append(md_row("" if (isinstance(v, float) and math.isnan(v)) else fmt_num(v) for v in r))
    return "\n".join(lines)


def table_markdown(exp: Experiment, table: pd.DataFrame) -> str:
    """The table's Markdown without its title: what the columns and the rule mean, the table, and how
    the hyperparameters were chosen (``table.md`` is this under the experiment's title)."""
    low = lower_is_better(exp.metric)
    head = [f"Task `{exp.task}`, metric `{exp.metric}` "
            + ("(lower is better)" if low else "(a fraction, as in metrics.csv)")
            + f", seeds {exp.seeds}; mean ± standard deviation over seeds. 'final' is the last evaluation within the "
              f"round budget; 'best' the best evaluation (the {'lowest' if low else 'highest'})."
            + (f" 'rounds to target': first communication round with {exp.metric} {'≤' if low else '≥'} {exp.target} "
               "(mean over the seeds that reach it; reached/total)." if exp.target is not None else "")
            + (" Columns 'paper ...' are the paper's numbers." if exp.reference else "")
            + " Rule: means, spreads and 'seeds' count only the runs that finished with status done; diverged runs "
              "(a NaN/inf, or a loss above 1000 x max(its first value, 1)), failed runs and runs not run are left "
              "out of them and counted in their columns; a cell without a done run shows '-'.", ""]
    return "\n".join(head) + "\n" + _to_markdown(table) + "\n" + tuned_note(exp)


def write_report(exp: Experiment, outdir: Path, no_run: bool = False, warn=None) -> str:
    """Write the experiment's table, runs and figures into ``outdir``; returns the table's Markdown
    (without its title)."""
    runs, curves = collect(exp, warn)
    exp.incomplete = int(runs.status.isin(["failed", "not run"]).sum())
    if no_run and not (runs.status != "not run").any():
        raise UsageError(f"no finished runs for experiment '{exp.name}' (run it without --no-run)")
    table, numbers = summarize(exp, runs)
    md = table_markdown(exp, table)
    atomic_write(outdir / "table.md", f"# {exp.title or exp.name}\n\n" + md)
    atomic_write(outdir / "table.csv", numbers.to_csv(index=False))
    atomic_write(outdir / "runs.csv", runs.to_csv(index=False))
    if plot_experiment(exp, curves, outdir / "curves.png", runs) < ZOOM_BELOW:  # ends squeezed together
        plot_experiment(exp, curves, outdir / "curves_zoom.png", runs, tail=0.5)
    else:
        (outdir / "curves_zoom.png").unlink(missing_ok=True)
    for xa in exp.x_also:
        plot_experiment(replace(exp, x=xa), curves, outdir / f"curves_{xa}.png", runs)
    return md


def tuning_budget_note(exp: Experiment) -> str:
    """'' when the tuning ran at the evaluation budget; else what the ranking check found, or a warning
    that says both budgets when there was none."""
    if not exp.tuned or not isinstance(exp.tuned.get("rounds"), int):
        return ""
    budgets = sorted({c.cfg.run.rounds for c in exp.cells})
    if exp.tuned["rounds"] >= budgets[-1]:
        return ""
    head = f"Tuned at {exp.tuned['rounds']} rounds, evaluated at {', '.join(map(str, budgets))}"
    check = exp.tuned.get("ranking_check")
    if isinstance(check, dict) and check:
        failed = [k for k, v in check.items() if not (isinstance(v, dict) and v.get("holds"))]
        if not failed:
            return (f"{head}; the ranking check holds: each choice is still the best of its top "
                    f"{len(next(iter(check.values())).get('top', []))} points at the evaluation budget (ranking.csv).")
        return (f"**{head}; the ranking check fails for {'; '.join(failed)}**: at the evaluation budget another of "
                f"the top points scores better than the choice (ranking.csv).")
    return (f"**{head}**: the ranking of the grid was not checked at the evaluation budget, so a late instability "
            f"or a late change of order may be missed.")


def tuned_note(exp: Experiment) -> str:
    """What the table's hyperparameters are and how they were chosen (Markdown)."""
    rows = []
    for a in exp.algorithms:
        for s in exp.settings:
            vals = tuned_layer(exp.tuned, a["name"], s["name"])
            keys = list((a.get("tune") or {}))
            if vals:
                edge = edge_note(tuned_entry(exp.tuned, a["name"], s["name"]))
                how = "tuned" + (f" ({edge})" if edge else "")
                rows.append((a["name"], s["name"], ", ".join(f"{k}={fmt_num(v)}" for k, v in vals.items()), how))
            elif keys:
                fixed = {k: v for k, v in (a.get("set") or {}).items()}
                text = ", ".join(f"{k}={fmt_num(v)}" for k, v in fixed.items()) or "defaults"
                none = (tuned_entry(exp.tuned, a["name"], s["name"]) or {}).get("_none") if exp.tuned else None
                rows.append((a["name"], s["name"], text,
                             f"**not tuned: {none}**; the spec's values stand" if none
                             else "not tuned yet (run `fbo tune`)"))
    if not rows:
        return ""
    if exp.tuned and exp.tuned.get("setting") and len(exp.settings) > 1:  # tuned once: one row per algorithm
        per: dict[str, set] = {}
        for r in rows:
            per.setdefault(r[0], set()).add(r[2:])
        if all(len(v) == 1 for v in per.values()):
            rows = [(a, f"every setting (tuned at {exp.tuned['setting']})", *next(iter(v))) for a, v in per.items()]
    out = [""]
    if exp.tuned:
        out += [f"**Hyperparameters.** Tuned by `fbo tune`: {exp.tuned.get('procedure', '')}."
                + (f" {short}" if (short := tuning_budget_note(exp)) else ""), ""]
    else:
        out += ["**Hyperparameters.**", ""]
    out += ["| algorithm | setting | values | how chosen |", "|---|---|---|---|"]
    out += [md_row(r) for r in rows]
    return "\n".join(out) + "\n"


ZOOM_BELOW = 0.15  # a second figure of the last half when the lines' ends span less than this share of the axis
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}  # two-sided t quantiles


def plot_experiment(exp: Experiment, curves: dict, path: Path, runs: pd.DataFrame | None = None,
                    tail: float | None = None) -> float:
    """Mean over the done runs with a band (``exp.band``); a diverged run is drawn thin, ending in an x
    at its divergence point; a panel without any finished run says so. ``tail``: only the last part of
    the x axis (from that share of its end), each panel's y axis fitted to it. Returns how squeezed the
    ends are: the smallest, over panels with two or more lines, of the spread of the lines' last values
    over the panel's y range (1.0 when there is nothing to compare)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    settings = [s["name"] for s in exp.settings]
    n = len(settings)
    ncol = min(n, 3 if n != 4 else 2)
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(max(5.0 * ncol, 9.0), 3.7 * nrow + 0.4), squeeze=False,
                             sharey=tail is None)
    squeeze = 1.0
    for k, s in enumerate(settings):
        ax = axes[k // ncol][k % ncol]
        drawn = False
        lines: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (x, mean, lo, hi)
        for j, a in enumerate(exp.algorithms):
            st = {} if runs is None or runs.empty else {
                int(r.seed): r.status for r in runs[(runs.algorithm == a["name"]) & (runs.setting == s)].itertuples()}
            mine = {key[2]: curves[key] for key in curves if key[0] == a["name"] and key[1] == s}
            mine = {k: r for k, r in mine.items() if exp.x in r and exp.metric in r and len(r)}
            for seed, r in mine.items():
                if st.get(seed) == "diverged":
                    ok = r[np.isfinite(r[exp.metric].to_numpy(float))]
                    ax.plot(ok[exp.x], ok[exp.metric], color=f"C{j}", lw=0.7, ls="--")
                    if len(ok):
                        ax.plot(ok[exp.x].iloc[-1], ok[exp.metric].iloc[-1], "x", color=f"C{j}", ms=8, mew=2)
                    drawn = True
            done = [r for k, r in mine.items() if st.get(k, "done") == "done"]
            bad = {k: sum(v == k for v in st.values()) for k in ("diverged", "failed", "not run")}
            note = ", ".join(f"{n} {k}" for k, n in bad.items() if n)
            if not done:
                if note:
                    ax.plot([], [], color=f"C{j}", lw=1.6, label=f"{a['name']} (n=0, {note})")
                continue
            drawn = True
            grid = np.asarray(max(done, key=len)[exp.x], dtype=float)
            ys = np.stack([np.interp(grid, r[exp.x].to_numpy(float), r[exp.metric].to_numpy(float),
                                     right=np.nan) for r in done])
            with warnings.catch_warnings():  # a grid point no run reached (all NaN) stays a gap
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, lo, hi = np.nanmean(ys, 0), np.nanmin(ys, 0), np.nanmax(ys, 0)
                if exp.band != "minmax" and len(done) > 1:  # ± one std, or a 95% t-interval of the mean
                    half = np.nanstd(ys, 0, ddof=1) * (1.0 if exp.band == "std" else
                                                       T95.get(len(done) - 1, 1.96) / np.sqrt(len(done)))
                    lo, hi = mean - half, mean + half
            lines.append((grid, mean, lo, hi))
            ax.plot(grid, mean, color=f"C{j}", lw=1.6,
                    label=f"{a['name']} (n={len(done)}" + (f", {note})" if note else ")"))
            if len(done) > 1:
                ax.fill_between(grid, lo, hi, color=f"C{j}", alpha=0.18, lw=0)
        if not drawn:
            ax.text(0.5, 0.5, "no finished runs", transform=ax.transAxes, ha="center", va="center", color="0.4")
        ends = [m[np.isfinite(m)][-1] for _, m, _, _ in lines if np.isfinite(m).any()]
        if len(ends) > 1:
            span = np.ptp(np.concatenate([np.r_[lo[np.isfinite(lo)], hi[np.isfinite(hi)]] for _, _, lo, hi in lines]))
            squeeze = min(squeeze, float(np.ptp(ends) / span) if span > 0 else 1.0)
        if tail is not None and lines:  # the last part only, y fitted to what is visible there
            cut = tail * max(float(np.nanmax(x)) for x, _, _, _ in lines)
            seen = np.concatenate([np.r_[m[x >= cut], lo[x >= cut], hi[x >= cut]] for x, m, lo, hi in lines])
            seen = seen[np.isfinite(seen)]
            if len(seen):
                pad = 0.08 * max(float(np.ptp(seen)), 1e-6)
                ax.set_ylim(float(seen.min()) - pad, float(seen.max()) + pad)
            ax.set_xlim(left=cut)
        if exp.target is not None:
            ax.axhline(exp.target, color="0.5", ls=":", lw=1, label=f"target {exp.target:g}")
        ax.set_title(s, fontsize=10)
        ax.set_xlabel(X_AXES[exp.x])
        if exp.x in ("samples", "floats_up"):  # counts over decades: a linear axis puts every curve in its first 5%
            ax.set_xscale("symlog", linthresh=1.0)
        elif exp.x in ("rounds", "iterations"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if k % ncol == 0:
            ax.set_ylabel(METRIC_LABELS.get(exp.metric, exp.metric))
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(fontsize=9 if n > 1 else 10, frameon=tail is not None, framealpha=0.85,
                  loc="lower right" if tail is None else "best")
    for k in range(n, nrow * ncol):
        axes[k // ncol][k % ncol].set_visible(False)
    zoom = f" (zoom: the last {1 - tail:.0%} of the x axis)" if tail is not None else ""
    fig.suptitle(f"{exp.title or exp.name}{zoom}\nlines: mean over the seeds' done runs; shaded bands: "
                 f"{BANDS[exp.band]}; dashed with x: a diverged run", fontsize=10)
    save_figure(fig, path)
    return squeeze


