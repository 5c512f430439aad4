"""How much of a row's gap to the paper one change explains (a spec's ``attribution:``): for each pair of
rows (before the change -> after it) and each setting with a paper number, ours before and after beside the
paper's, and the share of the gap that the change closes. Recomputed from the runs like every table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...grids.spec import Experiment

QUANTITIES = (("rounds_to_target", "rounds to target"), ("final", "final"))


def _seeds(runs: pd.DataFrame, algo: str, setting: str, key: str, budget: int) -> pd.Series:
    """One row's values per seed in one setting (finished runs); for rounds to the target a seed that never
    reached it counts as the budget."""
    g = runs[(runs.algorithm == algo) & (runs.setting == setting) & (runs.status == "done")]
    if g.empty or key not in g:
        return pd.Series(dtype=float)
    v = g.set_index("seed")[key].astype(float)
    return v.fillna(budget) if key == "rounds_to_target" else v


def _ours(runs: pd.DataFrame, algo: str, setting: str, key: str, budget: int) -> tuple[float, str, bool]:
    """(value, text, censored) of one row in one setting: the mean over finished seeds; for rounds to the
    target, a seed that never reached it counts as the budget and makes the value a lower bound."""
    g = runs[(runs.algorithm == algo) & (runs.setting == setting) & (runs.status == "done")]
    if g.empty or key not in g:
        return math.nan, "–", False
    v = g[key].astype(float)
    if key != "rounds_to_target":
        return float(v.mean()), f"{v.mean():.4f} ({len(v)} seeds)", False
    hit = int(v.notna().sum())
    mean = float(v.fillna(budget).mean())
    censored = hit < len(v)
    return mean, (f"{'≥ ' if censored else ''}{mean:.0f} ({hit}/{len(v)} reached)"), censored


def share_interval(before: pd.Series, after: pd.Series, gap: float) -> tuple[float, float] | None:
    """The 95% interval of the share closed, (before − after) / gap, from the paired t interval of before − after
    over the seeds both rows ran (the gap, before's mean − the paper's, held at its estimate); None with fewer than
    two pairs or no spread (no interval to give)."""
    from ...grids.verdicts import t_interval

    common = before.index.intersection(after.index)
    d = (before[common] - after[common]).to_numpy(float)
    if len(d) < 2 or not gap or float(np.ptp(d)) <= 1e-9 * max(1.0, float(np.abs(d).max())):
        return None
    _, lo, hi = t_interval(d)
    return tuple(sorted((lo / gap, hi / gap)))


def _share(before: float, after: float, paper: float, censored: bool, rounds: bool,
           interval: tuple[float, float] | None = None) -> str:
    """The share of the gap (before - paper) that the change closes, its 95% interval, and what remains."""
    if any(math.isnan(x) for x in (before, after, paper)) or before == paper:
        return "–"
    share = (before - after) / (before - paper)
    bound = "at least " if censored and share > 0 else ""  # before is a lower bound: the share is one too
    ci = f" [95%: {interval[0]:.0%} to {interval[1]:.0%}]" if interval else ""
    if rounds:
        rest = f"{after / paper:.2f}x the paper's rounds remain" if paper else ""
    else:
        rest = f"{100 * (after - paper):+.1f} points to the paper remain"
    return f"{bound}{share:.0%}{ci}; {rest}"


def shares(exp: Experiment, runs: pd.DataFrame) -> list[tuple[str, str, str, float, str, str, str]]:
    """(before, after, setting, paper, before's text, after's text, share) for each pair, setting and quantity with
    a paper number (the attribution table's rows)."""
    a = exp.attribution
    budget = {c.setting: c.cfg.run.rounds for c in exp.cells}
    out = []
    for before, after in a.pairs.items():
        for setting, vals in ((exp.reference or {}).get(before) or {}).items():
            for key, label in QUANTITIES:
                paper = vals.get(key) if isinstance(vals, dict) else None
                if not isinstance(paper, (int, float)):
                    continue
                n = budget.get(setting, 0)
                b, bt, cens = _ours(runs, before, setting, key, n)
                f, ft, _ = _ours(runs, after, setting, key, n)
                ci = share_interval(_seeds(runs, before, setting, key, n), _seeds(runs, after, setting, key, n),
                                    b - float(paper)) if not math.isnan(b) else None
                out.append((before, after, setting, label, float(paper), bt, ft,
                            _share(b, f, float(paper), cens, key == "rounds_to_target", ci)))
    return out


def attribution_md(exp: Experiment, runs: pd.DataFrame) -> str:
    """The attribution of ``exp`` (empty without an ``attribution:``): a table with one row per pair, setting
    and quantity the paper reports, then a sentence per setting on the share of the gap the change closes."""
    a = exp.attribution
    if a is None:
        return ""
    lines = [f"**What the change explains.** The change: {a.change}. For each row and setting with a paper "
             "number: ours before and after the change (means over the seeds; a seed that never reached the target "
             "counts as the budget, so the mean is a lower bound, marked ≥), the paper's, and the share of our gap "
             "to the paper that the change closes ((before − after) / (before − paper); above 100%: past the paper's "
             "number; negative: the change widens the gap), with its 95% interval from the paired t interval of "
             "before − after over the seeds (the gap held at its estimate): an interval that includes 0% is no "
             "evidence that the change closes any of it.", "",
             "| row before → after | setting | quantity | paper | before | after | share of the gap closed |",
             "|---|---|---|---|---|---|---|"]
    said: dict[str, list[str]] = {}
    for before, after, setting, label, paper, bt, ft, share in shares(exp, runs):
        lines.append(f"| {before} → {after} | {setting} | {label} | {paper:g} | {bt} | {ft} | {share} |")
        if share != "–":
            said.setdefault(setting, []).append(
                f"{before.split(' (')[0]}'s {label} goes from {bt.split(' (')[0]} to {ft.split(' (')[0]} "
                f"against the paper's {paper:g}: the change closes {share}")
    lines.append("")
    lines += [f"- *{setting}*: " + "; ".join(parts) + "." for setting, parts in said.items()]
    return "\n".join(lines) + "\n"
