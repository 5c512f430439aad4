"""Results as tables and figures name them: the metrics' and x-axes' labels, a Markdown row, a number as a
person reads it, and whether (and when) a run reached its target."""

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


def rounds_to_target(df: pd.DataFrame, metric: str, target: float | None, x: str = "rounds") -> float | None:
    """First logged ``x`` at which ``metric`` reaches ``target`` (``>=``; ``<=`` for a loss), None if
    never or no target."""
    if target is None or metric not in df:
        return None
    hit = df[df[metric] <= target] if lower_is_better(metric) else df[df[metric] >= target]
    return None if hit.empty else float(hit[x].iloc[0])
