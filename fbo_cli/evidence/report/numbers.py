"""The paper's numbers in words: "reached" only where the equivalence test passes, "ours above" and "ours below"
as their own outcomes, ours above a number whose point is a collapse stated as contradicting the paper, and where
equivalence is out of reach at the seeds run, how many seeds its spread would need.

The verdicts are :func:`fbo_cli.grids.verdicts.match_paper`'s (via ``paper_rows``); this module only words them
and plans the seeds, so that a scorecard can never call a number above the paper "reached" (issue 60).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...grids.verdicts import CAP, PAPER_KEYS, look_alphas, looks

# a paper number's verdict (paper_rows' last column) -> the report's words; "reached" is equivalence only
OUTCOMES = {"consistent with": "reached", "consistent": "reached", "above": "ours above", "below": "ours below",
            "above (slower)": "ours slower", "below (faster)": "ours faster", "inconclusive": "inconclusive",
            "no data": "not run yet"}
CONTRADICTS = "contradicts the paper's collapse"
MAX_SEEDS = 10_000  # beyond it, "more than" is the answer


def outcome(verdict: str, collapse: bool = False) -> str:
    """The words of one paper number's verdict; ``collapse``: the paper's point about it is a collapse, so ours
    above it contradicts the paper."""
    words = OUTCOMES.get(verdict, verdict)
    return f"{words} ({CONTRADICTS})" if collapse and words == "ours above" else words


def seeds_needed(values: np.ndarray, paper: float, tol: float) -> int | None:
    """The seeds at which the equivalence test could pass with this spread, by the sequential design: the
    smallest look n (3, 6, 10; beyond, a larger ``--cap`` whose last look is n) whose TOST half-width
    t(1 - a_n, n-1) * sd / sqrt(n) at that look's error a_n is below the tolerance minus |mean - paper| (the
    planning values are ours: the mean and sd of the seeds run); None when |mean - paper| >= tolerance (no
    number of seeds reaches it)."""
    from scipy.stats import t

    v = np.asarray(values, float)
    room = tol - abs(float(v.mean()) - paper)
    if room <= 0:
        return None
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    half = lambda n, a: t.ppf(1 - a, n - 1) * sd / math.sqrt(n)  # noqa: E731
    for n, a in zip(looks(CAP), look_alphas(CAP)):
        if half(n, a) < room:
            return n
    n = CAP + 1
    while n <= MAX_SEEDS and half(n, look_alphas(n)[-1]) >= room:
        n += 1
    return n


def need_text(values: np.ndarray, paper: float, tol: float, minutes: float | None = None) -> str:
    """The note of an inconclusive number: the seeds it needs (and, with ``minutes`` a run, what the runs still
    missing cost), or why none suffice."""
    if len(values) == 0 or not np.isfinite(values).all():
        return "its seeds that never reach the target leave no t plan; more seeds decide it"
    n = seeds_needed(values, paper, tol)
    if n is None:
        return f"equivalence not reachable: ours − paper = {values.mean() - paper:+.4g}, not inside ±{tol:.4g}"
    if n > MAX_SEEDS:
        return f"equivalence needs more than {MAX_SEEDS:,} seeds at this spread"
    more = n - len(values)
    cost = f", about {more * minutes:,.0f} core-minutes" if minutes and more > 0 else ""
    return f"equivalence needs {n} seeds at this spread ({more} more run{'s' * (more != 1)}{cost})"


def run_minutes(g: pd.DataFrame) -> float | None:
    """The mean core-minutes of one run of these (training and evaluation, from their summaries); None unknown."""
    from pathlib import Path

    from ...runs.rundir import read_summary

    t = []
    for d in g.run_dir.dropna() if "run_dir" in g else []:
        s = read_summary(Path(d)) or {}
        if "train_time_s" in s:
            t.append(float(s["train_time_s"] or 0) + float(s.get("eval_time_s") or 0))
    return sum(t) / len(t) / 60 if t else None


def collapse_pairs(exp) -> set[tuple[str, str]]:
    """The (algorithm, setting) pairs whose paper number is a collapse (``reference_on.collapse`` in the spec)."""
    return {tuple(p) for p in (getattr(exp, "reference_on", None) or {}).get("collapse") or []}


def number_notes(exp, runs: pd.DataFrame, rows: list[tuple[str, ...]], tol: float) -> list[str]:
    """One note per row of ``paper_rows`` (same order: the spec's ``reference``, numeric values only): for an
    inconclusive number the seeds its equivalence needs, for ours above a collapse that it contradicts the paper;
    '' otherwise."""
    keys = [(a, s, PAPER_KEYS.get(k, k), float(v)) for a, per in (exp.reference or {}).items()
            for s, vals in (per or {}).items() for k, v in vals.items() if isinstance(v, (int, float))]
    collapse = collapse_pairs(exp)
    notes = []
    for (a, s, c, paper), row in zip(keys, rows):
        verdict = row[-1]
        if verdict == "above" and (a, s) in collapse:
            notes.append(CONTRADICTS)
        elif verdict == "inconclusive":
            g = runs[(runs.algorithm == a) & (runs.setting == s) & (runs.status == "done")]
            v = g[c].astype(float).to_numpy() if c in g else np.array([])
            counts = c == "rounds_to_target"
            t = 0.1 * abs(paper) if counts or paper > 1 else tol
            notes.append(need_text(v, paper, t, run_minutes(g)))
        else:
            notes.append("")
    return notes
