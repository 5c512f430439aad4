"""Collapse: a run that fell to chance level and stayed there is not a finished run.

A run is **collapsed** when its headline metric, having once risen above chance level, falls to it and
stays there at every evaluation to the run's end. Chance level: for an accuracy, ``1 / classes + 0.05``
(a constant prediction scores the frequency of one class: 0.1135 on MNIST's test set, 0.1124 on its
training set); for an AUC, ``0.52`` (a constant score gives 0.5). Metrics with no chance level (losses:
ZO-HFL's global and server losses) never collapse. The status is derived from ``metrics.csv`` wherever runs
are read (``compare.collect``), so the committed evidence needs no rewriting; a collapsed run is counted in
its own column, left out of means, drawn like a diverged run and loses its pair in a claim.
"""

from __future__ import annotations

import pandas as pd

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
