"""Results as tables and figures name them: the metrics' and x-axes' labels, a Markdown row, a number as a
person reads it, and what a finished run's files say as a row of a table (:func:`run_row`): its columns read
within its budget, whether (and when) it reached its target, and whether it collapsed.

**Collapse**: a run that fell to chance level and stayed there is not a finished run. A run is collapsed when
its headline metric, having once risen above chance level, falls to it and stays there at every evaluation to
the run's end. Chance level: for an accuracy, ``1 / classes + 0.05`` (a constant prediction scores the
frequency of one class: 0.1135 on MNIST's test set, 0.1124 on its training set); for an AUC, ``0.52`` (a
constant score gives 0.5). Metrics with no chance level (losses: ZO-HFL's global and server losses) never
collapse. The status is derived from ``metrics.csv`` wherever runs are read (:func:`run_row`), so the
committed evidence needs no rewriting; a collapsed run is counted in its own column, left out of means, drawn
like a diverged run and loses its pair in a claim."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

METRIC_LABELS = {"test_acc": "test accuracy", "test_auc": "test AUC", "test_loss": "test loss",
                 "f1": "F1 of the kept examples (hyper-cleaning)", "global_loss": "global loss (ZO-HFL)",
                 "server_loss": "server loss"}


X_AXES = {"rounds": "communication rounds", "iterations": "outer iterations", "samples": "samples",
          "floats_up": "floats sent up", "train_time": "training time (s)"}


def md_row(cells) -> str:
    """One Markdown table row; a '|' inside a cell is escaped, so that it cannot split the cell."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def to_markdown(df: pd.DataFrame) -> str:
    """A frame as a Markdown table (:func:`md_row` per row, numbers by :func:`fmt_num`, NaN as an empty cell)."""
    cols = list(df.columns)
    lines = [md_row(cols), "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append(md_row("" if (isinstance(v, float) and math.isnan(v)) else fmt_num(v) for v in r))
    return "\n".join(lines)


def fmt_num(v: Any) -> str:
    """A number as a person reads it: whole floats as integers (1630, not 1630.0), very large or small
    values in short scientific notation (3e7, 3e-5), others as %g; anything else as str."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return str(v)
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        short = f"{v:.3g}"
        if "e" not in short:  # %g writes 1e-4 <= |v| < 1e-3 without an exponent
            return short
        m, e = short.split("e")
        return f"{m}e{int(e)}"
    return str(int(v)) if v.is_integer() else f"{v:g}"


def lower_is_better(metric: str) -> bool:
    """Losses (``*loss``) improve downwards; accuracies, AUCs and F1 scores (fractions) upwards."""
    return metric.endswith("loss")


def within_budget(df: pd.DataFrame, budget: int | None) -> pd.DataFrame:
    """The rows a run's columns are read on: those at most ``budget`` rounds in (every row where none is, or no
    budget is given)."""
    if budget is None or "rounds" not in df or not (df["rounds"] <= budget).any():
        return df
    return df[df["rounds"] <= budget]


def read_columns(df: pd.DataFrame, metric: str, target: float | None, budget: int | None) -> dict[str, Any]:
    """A run's columns from its metrics rows, every one read on the rows within the budget
    (:func:`within_budget`; one rule for all): ``final`` (the last row's value), ``best`` (the best finite
    value, the lowest for a loss), ``final_mean_last5``, ``rounds`` and ``iterations`` (where the final was read),
    and rounds to the target with the resolution the evaluations give it: the target was crossed in
    (``rounds_to_target_low``, ``rounds_to_target``], between the last evaluation that had not reached it and the
    first that had (both the first row's rounds when that one already had; both None when never or no target;
    ``iterations_to_target``: the iterations of the first that had). What ``summary.json`` and a compare's table
    record, so that both are re-derived from ``metrics.csv`` alone."""
    w = within_budget(df, budget)
    out: dict[str, Any] = dict.fromkeys(("final", "best", "final_mean_last5", "rounds", "iterations",
                                         "rounds_to_target", "rounds_to_target_low", "iterations_to_target"))
    if not len(w) or metric not in w:
        return out
    series = w[metric].astype(float)
    finite = series.replace([np.inf, -np.inf], np.nan).dropna()
    out.update(final=float(series.iloc[-1]), final_mean_last5=float(series.tail(5).mean()),
               best=(float(finite.min() if lower_is_better(metric) else finite.max()) if len(finite) else None))
    for k in ("rounds", "iterations"):
        if k in w:
            out[k] = int(w[k].iloc[-1])
    hit = rounds_to_target(w.reset_index(drop=True), metric, target, x="index")
    if hit is not None:
        i = int(hit)
        out["rounds_to_target"] = float(w["rounds"].iloc[i])
        out["rounds_to_target_low"] = float(w["rounds"].iloc[max(i - 1, 0)])
        if "iterations" in w:
            out["iterations_to_target"] = float(w["iterations"].iloc[i])
    return out


def rounds_to_target(df: pd.DataFrame, metric: str, target: float | None, x: str = "rounds") -> float | None:
    """First logged ``x`` at which ``metric`` reaches ``target`` (``>=``; ``<=`` for a loss; ``x="index"``: that row's
    index), None if never or no target. Reads every row it is given: a run's columns read the rows within its
    budget (:func:`read_columns`)."""
    if target is None or metric not in df:
        return None
    hit = df[df[metric] <= target] if lower_is_better(metric) else df[df[metric] >= target]
    if hit.empty:
        return None
    return float(hit.index[0]) if x == "index" else float(hit[x].iloc[0])


# --------------------------------------------------------------------------------------------------
# A run as a row: what the table needs from its metrics and summary, read in one place


def run_row(m: pd.DataFrame, summary: dict, run, metric: str, target: float | None,
            base: dict | None = None) -> dict[str, Any]:
    """A finished run's row after ``base`` (its metrics ``m``, its ``summary.json``, its run config ``run``):
    ``status`` (the summary's, or ``collapsed`` with ``collapsed_because`` for a done run whose ``metric`` fell to
    chance), :func:`read_columns` within its budget, ``eval_grid`` (:func:`eval_grid`), its times, and the last
    value within the budget of every other numeric column (``final_rounds``, ``final_iterations`` for those two)."""
    within = within_budget(m, run.rounds)
    status = summary["status"]
    why = collapsed(within[metric], metric, run.dataset) if status == "done" else None
    row = {**(base or {}), "status": "collapsed" if why else status, **({"collapsed_because": why} if why else {}),
           **read_columns(m, metric, target, run.rounds), "eval_grid": eval_grid(run, summary),
           "train_time_s": summary.get("train_time_s"), "seconds_per_round": summary.get("seconds_per_round")}
    for k in m.columns:
        if k not in row and m[k].dtype.kind in "fi":
            row[f"final_{k}" if k in ("rounds", "iterations") else k] = float(within[k].iloc[-1])
    return row


def eval_grid(run, summary: dict) -> int | None:
    """The rounds between a run's evaluations: ``eval_rounds`` (one grid for every method), else ``eval_every``
    times its rounds per outer iteration (each method its own grid; None where its iterations vary)."""
    rpi = summary.get("rounds_per_iteration")
    return run.eval_rounds or (run.eval_every * rpi if isinstance(rpi, int) else None)


CLASSES = {"cifar100": 100, "breast-cancer": 2}  # every other dataset here has 10 classes
MARGIN = {"acc": 0.05, "auc": 0.02}


def chance_level(metric: str, dataset: str) -> float | None:
    """The value at or below which ``metric`` is at chance on ``dataset``; None for metrics without one."""
    if metric.endswith("_auc"):
        return 0.5 + MARGIN["auc"]
    if metric.endswith("_acc"):
        return 1 / CLASSES.get(dataset, 10) + MARGIN["acc"]
    return None


def collapsed(series: pd.Series, metric: str, dataset: str) -> str | None:
    """Why the run whose headline metric is ``series`` (one value per evaluation) collapsed, or None."""
    level = chance_level(metric, dataset)
    v = series.dropna().astype(float).to_numpy()
    if level is None or len(v) < 2 or v[-1] > level or not (v > level).any():
        return None
    last_above = int((v > level).nonzero()[0][-1])
    return (f"{metric} fell to chance level (<= {level:.3f}) after evaluation {last_above + 1} of {len(v)} "
            f"(its best was {v.max():.4f}) and stayed there to the end")
