"""``fbo compare``: run an experiment grid (algorithms x settings x seeds) and aggregate it.

Runs already done (a ``summary.json`` in their run directory) are reused. Output in
``results/compare/<name>/``: ``table.md`` and ``table.csv`` (mean and spread over seeds, the paper's
numbers beside ours), ``runs.csv`` (one row per run), ``curves.png`` (headline metric against the
spec's x axis: one line per algorithm, mean over seeds with a min-max band, a panel per setting).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .config import RunConfig, load_config_file, resolve
from .errors import UsageError
from .results import METRIC_LABELS, X_AXES, atomic_write, read_summary, rounds_to_target, save_figure
from .tasks import TASKS


@dataclass
class Cell:
    algorithm: str  # display name from the spec
    setting: str
    seed: int
    cfg: RunConfig
    layers: tuple[dict[str, Any], ...]


@dataclass
class Experiment:
    name: str
    title: str
    task: str
    metric: str
    metrics: list[str]
    target: float | None
    x: str
    seeds: list[int]
    algorithms: list[dict[str, Any]]
    settings: list[dict[str, Any]]
    reference: dict[str, dict[str, dict[str, Any]]]
    cells: list[Cell] = field(default_factory=list)
    out_root: Path = Path("results")
    base: dict[str, Any] = field(default_factory=dict)
    tuned: dict[str, Any] | None = None  # the tuned.yaml of ``fbo tune``, when present


def _need(d: dict, key: str, kind, where: str):
    if key not in d:
        raise UsageError(f"{where}: missing required key '{key}'")
    if not isinstance(d[key], kind):
        raise UsageError(f"{where}: '{key}' must be a {kind.__name__ if isinstance(kind, type) else 'list'}")
    return d[key]


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None, seeds: list[int] | None = None,
              use_tuned: bool = True) -> Experiment:
    """The experiment of a spec file, its cells resolved (and validated). With ``use_tuned``, the values
    chosen by ``fbo tune`` (``<out>/compare/<name>/tuned.yaml``) override the spec's for the keys they
    name."""
    from .tune import tuned_layer

    spec = load_config_file(path)
    where = str(path)
    known = {"name", "title", "task", "metric", "metrics", "target", "x", "seeds", "base", "algorithms", "settings",
             "reference", "description", "tune"}
    unknown = set(spec) - known
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(known))}")
    task = _need(spec, "task", str, where)
    if task not in TASKS:
        raise UsageError(f"{where}: unknown task '{task}'; choose one of: {', '.join(TASKS)}")
    algos = _need(spec, "algorithms", list, where)
    settings = spec.get("settings") or [{"name": "default", "set": {}}]
    if not isinstance(settings, list):
        raise UsageError(f"{where}: 'settings' must be a list")
    base = spec.get("base") or {}
    if not isinstance(base, dict):
        raise UsageError(f"{where}: 'base' must be a mapping")
    x = spec.get("x", "rounds")
    if x not in X_AXES:
        raise UsageError(f"{where}: x must be one of {', '.join(X_AXES)}, got '{x}'")
    seed_list = seeds if seeds is not None else spec.get("seeds", [0])
    if not isinstance(seed_list, list) or not all(isinstance(s, int) for s in seed_list) or not seed_list:
        raise UsageError(f"{where}: 'seeds' must be a non-empty list of integers")
    exp = Experiment(
        name=str(spec.get("name") or Path(path).stem), title=str(spec.get("title", "")), task=task,
        metric=spec.get("metric") or TASKS[task].metric, metrics=list(spec.get("metrics") or []),
        target=spec.get("target"), x=x, seeds=seed_list, algorithms=algos, settings=settings,
        reference=spec.get("reference") or {}, base=base)
    overrides = overrides or {}
    exp.out_root = Path(str(overrides.get("out_dir") or base.get("out_dir") or "results"))
    if use_tuned:
        from .tune import load_tuned

        exp.tuned = load_tuned(exp)
    for a in algos:
        if not isinstance(a, dict) or "algo" not in a:
            raise UsageError(f"{where}: each algorithm needs an 'algo' key, got {a!r}")
        a.setdefault("name", a["algo"])
    for s in settings:
        if not isinstance(s, dict) or "name" not in s:
            raise UsageError(f"{where}: each setting needs a 'name' key, got {s!r}")
    for seed in seed_list:  # seed-major: a first complete picture of the grid arrives early
        for s in settings:
            for a in algos:
                tuned = tuned_layer(exp.tuned, a["name"], s["name"]) if exp.tuned else {}
                layers = (base, s.get("set") or {}, a.get("set") or {}, tuned,
                          {"seed": seed, "target": exp.target}, overrides)
                try:
                    cfg = resolve(task, a["algo"], *layers)
                except UsageError as e:
                    raise UsageError(f"{where}: algorithm '{a['name']}', setting '{s['name']}': {e}") from None
                exp.cells.append(Cell(a["name"], s["name"], seed, cfg, layers))
    return exp


def _worker(task: str, algo: str, layers: tuple, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    from .runner import execute

    try:
        return execute(resolve(task, algo, *layers))
    except Exception as e:  # recorded in the run's summary.json; the grid goes on
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


def run_experiment(exp: Experiment, jobs: int = 1, rerun: bool = False, no_run: bool = False, console=None) -> Path:
    todo = [] if no_run else [c for c in exp.cells if rerun or not _done(c.cfg)]
    if todo:
        _run_cells(exp, todo, jobs, console)
    outdir = exp.out_root / "compare" / exp.name
    write_report(exp, outdir)
    return outdir


def _done(cfg: RunConfig) -> bool:
    s = read_summary(cfg.run_dir)
    return bool(s) and s.get("status") in ("done", "diverged")


def _run_cells(exp: Experiment, todo: list[Cell], jobs: int, console) -> None:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from .runner import execute

    cols = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    with Progress(*cols, console=console) as prog:
        overall = prog.add_task(f"{exp.name}: runs", total=len(todo), info="")
        if jobs == 1:
            for c in todo:
                label = f"{c.algorithm} · {c.setting} · seed {c.seed}"
                bar = prog.add_task(label, total=c.cfg.run.rounds, info="rounds")
                try:
                    execute(c.cfg, on_eval=lambda row, bar=bar, total=c.cfg.run.rounds: prog.update(
                        bar, completed=min(row["rounds"], total)))
                except Exception as e:  # recorded in the run's summary.json; the grid goes on
                    console.print(f"[red]{label}: failed: {type(e).__name__}: {e}[/red]")
                prog.remove_task(bar)
                prog.advance(overall)
            return
        threads = max(1, (os.cpu_count() or 1) // jobs)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            futs = {pool.submit(_worker, exp.task, c.cfg.algo, c.layers, threads): c for c in todo}
            for fut in as_completed(futs):
                c = futs[fut]
                s = fut.result()
                if s["status"] == "failed":
                    console.print(f"[red]{c.algorithm} · {c.setting} · seed {c.seed}: failed: {s.get('error')}[/red]")
                prog.update(overall, advance=1, info=f"last: {c.algorithm} · {c.setting} · s{c.seed}: {s['status']}")


# --------------------------------------------------------------------------------------------------
# Aggregation


def collect(exp: Experiment) -> tuple[pd.DataFrame, dict[tuple[str, str, int], pd.DataFrame]]:
    rows, curves = [], {}
    for c in exp.cells:
        d = c.cfg.run_dir
        s = read_summary(d)
        if not s or not (d / "metrics.csv").is_file():
            continue
        m = pd.read_csv(d / "metrics.csv")
        curves[(c.algorithm, c.setting, c.seed)] = m
        budget = c.cfg.run.rounds
        within = m[m["rounds"] <= budget] if (m["rounds"] <= budget).any() else m
        row = {"algorithm": c.algorithm, "setting": c.setting, "seed": c.seed, "algo": c.cfg.algo,
               "status": s["status"], "run_dir": str(d),
               "rounds_to_target": rounds_to_target(m, exp.metric, exp.target),
               "iterations_to_target": rounds_to_target(m, exp.metric, exp.target, x="iterations"),
               "final": float(within[exp.metric].iloc[-1]), "best": float(within[exp.metric].max()),
               "final_mean_last5": float(within[exp.metric].tail(5).mean()),
               "rounds": int(within["rounds"].iloc[-1]), "iterations": int(within["iterations"].iloc[-1]),
               "train_time_s": s.get("train_time_s"), "seconds_per_round": s.get("seconds_per_round")}
        for k in m.columns:
            if k not in row and m[k].dtype.kind in "fi":
                row[f"final_{k}" if k in ("rounds", "iterations") else k] = float(within[k].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows), curves


def _ms(v: pd.Series, pct: bool) -> str:
    v = v.dropna()
    if v.empty:
        return "-"
    k = 100.0 if pct else 1.0
    if len(v) == 1:
        return f"{k * v.iloc[0]:.2f}" if pct else f"{v.iloc[0]:.4g}"
    return f"{k * v.mean():.2f} ± {k * v.std(ddof=1):.2f}" if pct else f"{v.mean():.4g} ± {v.std(ddof=1):.2g}"


def summarize(exp: Experiment, runs: pd.DataFrame) -> pd.DataFrame:
    out = []
    pct = exp.metric.endswith("acc") or exp.metric.endswith("auc")
    for s in exp.settings:
        for a in exp.algorithms:
            g = runs[(runs.algorithm == a["name"]) & (runs.setting == s["name"])] if len(runs) else runs
            if g.empty:
                continue
            row = {"setting": s["name"], "algorithm": a["name"], "seeds": len(g),
                   "diverged": int((g.status == "diverged").sum())}
            if (g.status == "failed").any():
                row["failed"] = int((g.status == "failed").sum())
            if exp.target is not None:
                hit = g.rounds_to_target.dropna()
                row["rounds to target"] = (_ms(hit, False) if len(hit) else "never") + f" ({len(hit)}/{len(g)})"
                row["iterations to target"] = _ms(g.iterations_to_target.dropna(), False) if len(hit) else "never"
            row["final"] = _ms(g.final, pct)
            row["best"] = _ms(g.best, pct)
            for m in exp.metrics:
                if m in g and m != exp.metric:
                    row[m] = _ms(g[m], m.endswith("acc") or m.endswith("auc"))
            ref = (exp.reference.get(a["name"]) or {}).get(s["name"]) or {}
            for k, v in ref.items():
                row[f"paper {k}"] = (f"{100 * v:.2f}" if pct and isinstance(v, float) and v <= 1 else str(v))
            out.append(row)
    return pd.DataFrame(out)


def _to_markdown(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join("" if (isinstance(v, float) and math.isnan(v)) else str(v) for v in r) + " |")
    return "\n".join(lines)


def write_report(exp: Experiment, outdir: Path) -> None:
    runs, curves = collect(exp)
    if runs.empty:
        raise UsageError(f"no finished runs for experiment '{exp.name}' (run it without --no-run)")
    table = summarize(exp, runs)
    pct = exp.metric.endswith("acc") or exp.metric.endswith("auc")
    head = [f"# {exp.title or exp.name}", "",
            f"Task `{exp.task}`, metric `{exp.metric}`" + (" (in %)" if pct else "")
            + f", seeds {exp.seeds}; mean ± standard deviation over seeds. 'final' is the last evaluation within the "
              "round budget; 'best' the best evaluation."
            + (f" 'rounds to target': first communication round with {exp.metric} ≥ {exp.target} "
               "(mean over the seeds that reach it; reached/total)." if exp.target is not None else "")
            + (" Columns 'paper ...' are the paper's numbers." if exp.reference else ""), ""]
    atomic_write(outdir / "table.md", "\n".join(head) + "\n" + _to_markdown(table) + "\n" + tuned_note(exp))
    atomic_write(outdir / "table.csv", table.to_csv(index=False))
    atomic_write(outdir / "runs.csv", runs.to_csv(index=False))
    plot_experiment(exp, curves, outdir / "curves.png")


def tuned_note(exp: Experiment) -> str:
    """What the table's hyperparameters are and how they were chosen (Markdown)."""
    from .tune import tuned_layer

    rows = []
    for a in exp.algorithms:
        for s in exp.settings:
            vals = tuned_layer(exp.tuned, a["name"], s["name"])
            keys = list((a.get("tune") or {}))
            if vals:
                rows.append((a["name"], s["name"], ", ".join(f"{k}={v}" for k, v in vals.items()), "tuned"))
            elif keys:
                fixed = {k: v for k, v in (a.get("set") or {}).items()}
                rows.append((a["name"], s["name"], ", ".join(f"{k}={v}" for k, v in fixed.items()) or "defaults",
                             "not tuned yet (run `fbo tune`)"))
    if not rows:
        return ""
    out = ["", "## Hyperparameters", ""]
    if exp.tuned:
        out += [f"Tuned by `fbo tune`: {exp.tuned.get('procedure', '')}.", ""]
    out += ["| algorithm | setting | values | how chosen |", "|---|---|---|---|"]
    out += [f"| {a} | {s} | {v} | {h} |" for a, s, v, h in rows]
    return "\n".join(out) + "\n"


def plot_experiment(exp: Experiment, curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [s["name"] for s in exp.settings]
    n = len(settings)
    ncol = min(n, 3 if n != 4 else 2)
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.0 * ncol, 3.7 * nrow), squeeze=False, sharey=True)
    for k, s in enumerate(settings):
        ax = axes[k // ncol][k % ncol]
        for j, a in enumerate(exp.algorithms):
            runs = [curves[key] for key in curves if key[0] == a["name"] and key[1] == s]
            runs = [r for r in runs if exp.x in r and exp.metric in r and len(r)]
            if not runs:
                continue
            grid = np.asarray(max(runs, key=len)[exp.x], dtype=float)
            ys = np.stack([np.interp(grid, r[exp.x].to_numpy(float), r[exp.metric].to_numpy(float),
                                     right=np.nan) for r in runs])
            with np.errstate(all="ignore"):
                mean = np.nanmean(ys, 0)
            ax.plot(grid, mean, color=f"C{j}", lw=1.6, label=f"{a['name']} (n={len(runs)})")
            if len(runs) > 1:
                ax.fill_between(grid, np.nanmin(ys, 0), np.nanmax(ys, 0), color=f"C{j}", alpha=0.18, lw=0)
        if exp.target is not None:
            ax.axhline(exp.target, color="0.5", ls=":", lw=1)
        ax.set_title(s, fontsize=10)
        ax.set_xlabel(X_AXES[exp.x])
        if k % ncol == 0:
            ax.set_ylabel(METRIC_LABELS.get(exp.metric, exp.metric))
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(fontsize=8, frameon=False, loc="lower right")
    for k in range(n, nrow * ncol):
        axes[k // ncol][k % ncol].set_visible(False)
    fig.suptitle(exp.title or exp.name, fontsize=11)
    save_figure(fig, path)


