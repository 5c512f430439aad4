"""The verdict rules, pure functions over runs: a claim per setting, and the paper's numbers beside
ours (the rules are in the package docstring).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..spec import Experiment


def claim_verdict(runs: pd.DataFrame, claim: dict, setting: str, than_setting: str | None = None) -> tuple[str, str]:
    """(verdict, the numbers behind it) of one claim in one setting; the rule is in the module doc. With
    ``than_setting`` (a claim's ``across`` pair) the ``than`` side's runs come from that setting: the
    same seeds are paired across the two settings."""
    metric, mode = claim["metric"], claim.get("mode", "max")
    sign = 1.0 if mode == "max" else -1.0
    fill = -math.inf if mode == "max" else math.inf  # never reaching the target is the worst value

    def side(name, where):
        g = runs[(runs.algorithm == name) & (runs.setting == where) & runs.status.isin(["done", "diverged"])]
        if metric not in g:
            return pd.Series(dtype=float)
        v = g.set_index("seed")[metric].astype(float).fillna(fill)
        v[(g.status == "diverged").to_numpy()] = fill  # a diverged run is the method's worst outcome
        return v

    a, b = side(claim["better"], setting), side(claim["than"], than_setting or setting)
    if a.empty or b.empty:
        return "no data", ""
    counts = metric.endswith("to_target")
    margin = claim.get("margin", 0.0 if counts else MARGIN)  # a win must exceed it
    common = a.index.intersection(b.index)

    def beats(u: float, v: float) -> bool:  # equal values (e.g. both never reach the target) are no win
        return u != v and sign * (u - v) > margin

    center = (lambda v: v.median()) if counts else (lambda v: v.mean())
    ma, mb = center(a), center(b)
    if mode == "equal":  # a finding of no difference: every pair within the margin
        near = int(sum(abs(a[s] - b[s]) <= margin for s in common))
        detail = f"{_fmt(ma)} vs {_fmt(mb)}; within {margin:g} in {near}/{len(common)} seeds"
        if len(common) and near == len(common):
            return "holds in every seed", detail
        return ("holds in the mean" if abs(ma - mb) <= margin else "does not hold"), detail
    wins = int(sum(beats(a[s], b[s]) for s in common))
    detail = f"{_fmt(ma)} vs {_fmt(mb)}; wins {wins}/{len(common)} seeds"
    if len(common) and wins == len(common):
        return "holds in every seed", detail
    if beats(ma, mb):
        return "holds in the mean", detail
    return "does not hold", detail


MARGIN = 0.005  # half a point of accuracy or AUC: a smaller difference is no win


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if math.isinf(v):
        return "never" if v > 0 else "−∞ (a run diverged)"
    return f"{v:.4g}"


def match_paper(ours: pd.Series, paper: float, tolerance: float) -> str:
    """Our mean is **within** the paper's number when ``|mean - paper| <= max(2 std, tolerance)``
    (std over seeds; the tolerance is the spec's ``tolerance``, default 0.02 for fractions, 10% of the
    paper's value for counts), else **above** or **below**."""
    v = ours.dropna().astype(float)
    v = v[np.isfinite(v)]
    if v.empty:
        return "no data"
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    tol = max(2 * sd, tolerance if paper <= 1 else max(tolerance, 0.1 * abs(paper)))
    d = float(v.mean()) - paper
    return "within" if abs(d) <= tol else ("above" if d > 0 else "below")


# --------------------------------------------------------------------------------------------------
# The report


PAPER_KEYS = {"final": "final", "rounds_to_90": "rounds_to_target", "rounds_to_target": "rounds_to_target"}


def paper_rows(exp: Experiment, runs: pd.DataFrame, tol: float) -> list[tuple[str, ...]]:
    """(algorithm, setting, quantity, paper's value, ours, verdict) per number of the spec's ``reference``.
    A number gets a verdict (:func:`match_paper`) only when our runs of that setting are on the paper's
    dataset (``reference_on.dataset``) and, for rounds to a target, with the paper's target; otherwise
    it stands as context."""
    on = exp.reference_on or {}
    paper_sets = on.get("dataset")
    paper_sets = [paper_sets] if isinstance(paper_sets, str) else list(paper_sets or [])
    datasets = {(c.algorithm, c.setting): c.cfg.run.dataset for c in exp.cells}
    rows = []
    for a, per in (exp.reference or {}).items():
        for s, vals in (per or {}).items():
            cell = runs[(runs.algorithm == a) & (runs.setting == s)]
            g = cell[cell.status == "done"]
            lost = ", ".join(f"{n} {k}" for k in ("diverged", "failed") if (n := int((cell.status == k).sum())))
            ours_ds = datasets.get((a, s), "?")
            for k, v in vals.items():
                c = PAPER_KEYS.get(k, k)
                if not isinstance(v, (int, float)):
                    continue
                counts = c == "rounds_to_target"
                pt, ot = on.get("target"), exp.target
                what = k if not counts else f"rounds to {pt:.0%}" if pt == ot and pt is not None else \
                    f"rounds to target (paper's {pt if pt is None else f'{pt:.0%}'}, ours {ot:.0%})"
                ours = g[c].astype(float) if c in g else pd.Series(dtype=float)
                if ours.empty:
                    text = "–"
                elif counts:
                    hit = ours.dropna()
                    text = (f"{hit.mean():.0f}" + (f" ± {hit.std(ddof=1):.0f}" if len(hit) > 1 else "")
                            if len(hit) else "never") + f" ({len(hit)}/{len(ours)} reached)"
                else:
                    text = f"{ours.mean():.4f}" + (f" ± {ours.std(ddof=1):.4f}" if len(ours) > 1 else "")
                if not paper_sets:
                    verdict = "context: the spec does not name the paper's dataset"
                elif ours_ds not in paper_sets:
                    verdict = f"context: the paper's number is on {', '.join(paper_sets)}, ours on {ours_ds}"
                elif counts and on.get("target") != exp.target:
                    verdict = f"context: the paper's target is {on.get('target')}, ours {exp.target}"
                elif counts and ours.notna().sum() < len(ours):
                    verdict = f"above (slower): {int(ours.isna().sum())} of {len(ours)} seeds never reached the target"
                else:
                    m = match_paper(ours, float(v), tol)
                    verdict = {"above": "above (slower)", "below": "below (faster)"}.get(m, m) if counts else m
                rows.append((a, s, what, f"{v:g}", text + (f"; {lost}, left out" if lost else ""), verdict))
    return rows


VERDICTS = ("holds in every seed", "holds in the mean", "does not hold", "no data")


def run_summaries(runs: pd.DataFrame, key: str):
    from ..results import read_summary

    for d in runs.run_dir:
        s = read_summary(Path(d)) or {}
        if key in s:
            yield s[key]
