"""The multiplicity control across a paper's claim checks: Benjamini-Hochberg at q = 0.05 on the verdicts' repeated
p-values (:attr:`~fbo_cli.grids.verdicts.Verdict.p`, the sequential design's: below 0.05 exactly when it decided).

Each check alone errs at most 5% over its looks; a paper has tens of them, so a few false decisions are expected
if every null were true. BH keeps the decided checks whose p-values pass its step-up threshold, which bounds the
expected share of false ones among those kept (the false discovery rate) by q; a decided verdict BH does not keep
is *inconclusive after the multiplicity control* and leaves the counts. Rows that are the same numbers (identical
paired differences: FedProx tuned to mu = 0 is FedAvg; two sections over the same runs) are one check: the later
row points at the first ("see") and enters neither BH's count nor the counts.
"""

from __future__ import annotations

import math

Q = 0.05  # the false discovery rate of the decided verdicts, per paper
DECIDED = ("holds", "does not hold")
AFTER = "inconclusive after the multiplicity control"


def bh_kept(ps: list[float], q: float = Q) -> list[bool]:
    """Which of the p-values ``ps`` Benjamini-Hochberg's step-up procedure at ``q`` keeps: all those at or below
    the largest p_(k) with p_(k) <= k q / m (m = len(ps))."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    k = max((r + 1 for r, i in enumerate(order) if ps[i] <= (r + 1) * q / m), default=0)
    cut = ps[order[k - 1]] if k else -math.inf
    return [p <= cut for p in ps]


def same_numbers_key(v) -> tuple:
    """What identifies a check's numbers: its interval, its detail (means, wins, look) and its p-value to full
    precision; two rows with equal keys read the same paired differences."""
    return (v.interval, v.detail.split("; the design alone: ")[-1], v.n, repr(float(v.p)))  # a mark's words aside


def control(checks: list[tuple[object, int, str]], q: float = Q, see: str = "see ") -> int:
    """Apply the control to one paper's checks, in place: ``checks`` are (section, index into its ``verdicts``,
    the section's name). Same numbers count once (the later rows become ``see`` the first's section); BH at ``q``
    over the counted checks' p-values; a decided verdict it does not keep becomes inconclusive, its detail
    saying why. Returns how many decided verdicts the control turned inconclusive."""
    first: dict[tuple, str] = {}
    counted = []
    for sec, i, name in checks:
        text, setting, v = sec.verdicts[i]
        if v.verdict not in DECIDED + ("inconclusive",) or v.p != v.p:
            continue
        key = same_numbers_key(v)
        if key in first:
            sec.verdicts[i] = (text, setting, v._replace(
                verdict=see + first[key].split(" · ")[0],
                detail=f"the same numbers as {first[key]} (counted once); here: {v.verdict} ({v.detail})"))
            continue
        first[key] = f"{name} · {setting}: {text[:60]}"
        counted.append((sec, i))
    kept = bh_kept([sec.verdicts[i][2].p for sec, i in counted], q)
    m, dropped = len(counted), 0
    for (sec, i), keep in zip(counted, kept):
        text, setting, v = sec.verdicts[i]
        if v.verdict in DECIDED and not keep:
            sec.verdicts[i] = (text, setting, v._replace(verdict="inconclusive", detail=(
                f"{AFTER} (Benjamini-Hochberg at q = {q:g} over the paper's {m} checks: p = {v.p:.3g} not kept); "
                f"the design alone: {v.verdict}; {v.detail}")))
            dropped += 1
    return dropped


def expected_false(verdicts: list, q: float = Q) -> float:
    """The expected number of false decided verdicts under the control: BH bounds the expected share of false
    ones among those kept by q, so at most q times the number of decided verdicts (after the control)."""
    return q * sum(getattr(v, "verdict", "") in DECIDED for v in verdicts)
