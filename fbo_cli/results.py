"""Run directories: ``config.yaml``, ``metrics.csv``, ``summary.json``, ``curves.png``.

Every file is written atomically (a temporary file in the same folder, then a rename), so a killed
run never leaves a half-written file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

METRIC_LABELS = {"test_acc": "test accuracy", "test_auc": "test AUC", "test_loss": "test loss"}
X_AXES = {"rounds": "communication rounds", "iterations": "outer iterations", "samples": "samples",
          "floats_up": "floats sent up", "train_time": "training time (s)"}


def atomic_write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    os.replace(tmp, path)


def write_yaml(path: Path, data: Any) -> None:
    atomic_write(path, yaml.safe_dump(data, sort_keys=False))


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write(path, pd.DataFrame(rows).to_csv(index=False))


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    p = Path(run_dir) / "summary.json"
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError:
        return None


def rounds_to_target(df: pd.DataFrame, metric: str, target: float | None, x: str = "rounds") -> float | None:
    """First logged ``x`` at which ``metric >= target`` (None if never, or no target)."""
    if target is None or metric not in df:
        return None
    hit = df[df[metric] >= target]
    return None if hit.empty else float(hit[x].iloc[0])


def plot_run(path: Path, df: pd.DataFrame, title: str, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [c for c in (metric, "test_loss") if c in df]
    fig, axes = plt.subplots(1, len(cols), figsize=(5.2 * len(cols), 3.8), squeeze=False)
    for ax, c in zip(axes[0], cols):
        ax.plot(df["rounds"], df[c], color="C0", lw=1.6)
        ax.set_xlabel(X_AXES["rounds"])
        ax.set_ylabel(METRIC_LABELS.get(c, c))
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(title, fontsize=11)
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    """Write a matplotlib figure atomically as PNG and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=130)
    plt.close(fig)
    os.replace(tmp, path)
