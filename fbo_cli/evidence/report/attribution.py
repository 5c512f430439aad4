"""How much of a row's gap to the paper one change explains (a spec's ``attribution:``): for each pair of
rows (before the change -> after it) and each setting with a paper number, ours before and after beside the
paper's, and the share of the gap that the change closes. Recomputed from the runs like every table."""

from __future__ import annotations

import math

import pandas as pd

from ...grids.spec import Experiment

QUANTITIES = (("rounds_to_target", "rounds to target"), ("final", "final"))


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


def _share(before: float, after: float, paper: float, censored: bool, rounds: bool) -> str:
    """The share of the gap (before - paper) that the change closes, and what remains."""
    if any(math.isnan(x) for x in (before, after, paper)) or before == paper:
        return "–"
    share = (before - after) / (before - paper)
    bound = "at least " if censored and share > 0 else ""  # before is a lower bound: the share is one too
    if rounds:
        rest = f"{after / paper:.2f}x the paper's rounds remain" if paper else ""
    else:
        rest = f"{100 * (after - paper):+.1f} points to the paper remain"
    return f"{bound}{share:.0%}; {rest}"


def attribution_md(exp: Experiment, runs: pd.DataFrame) -> str:
    """The attribution of ``exp`` (empty without an ``attribution:``): a table with one row per pair, setting
    and quantity the paper reports, then a sentence per setting on the share of the gap the change closes."""
    a = exp.attribution
    if a is None:
        return ""
    budget = {c.setting: c.cfg.run.rounds for c in exp.cells}
    lines = [f"**What the change explains.** The change: {a.change}. For each row and setting with a paper "
             "number: ours before and after the change (means over the seeds; a seed that never reached the target "
             "counts as the budget, so the mean is a lower bound, marked ≥), the paper's, and the share of our gap "
             "to the paper that the change closes ((before − after) / (before − paper); above 100%: past the paper's "
             "number; negative: the change widens the gap).", "",
             "| row before → after | setting | quantity | paper | before | after | share of the gap closed |",
             "|---|---|---|---|---|---|---|"]
    said: dict[str, list[str]] = {}
    for before, after in a.pairs.items():
        for setting, vals in ((exp.reference or {}).get(before) or {}).items():
            for key, label in QUANTITIES:
                paper = vals.get(key) if isinstance(vals, dict) else None
                if not isinstance(paper, (int, float)):
                    continue
                b, bt, cens = _ours(runs, before, setting, key, budget.get(setting, 0))
                f, ft, _ = _ours(runs, after, setting, key, budget.get(setting, 0))
                share = _share(b, f, float(paper), cens, key == "rounds_to_target")
                lines.append(f"| {before} → {after} | {setting} | {label} | {paper:g} | {bt} | {ft} | {share} |")
                if share != "–":
                    said.setdefault(setting, []).append(
                        f"{before.split(' (')[0]}'s {label} goes from {bt.split(' (')[0]} to {ft.split(' (')[0]} "
                        f"against the paper's {paper:g}: the change closes {share}")
    lines.append("")
    lines += [f"- *{setting}*: " + "; ".join(parts) + "." for setting, parts in said.items()]
    return "\n".join(lines) + "\n"
