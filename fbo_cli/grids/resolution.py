"""Rounds to a target as the intervals they are (issue 61, item 2): a run's metrics are evaluated on a grid of
rounds, so its crossing of the target is known only to lie in (``rounds_to_target_low``, ``rounds_to_target``]
(:func:`fbo_cli.runs.table.read_columns`). Two methods on two round grids (or one coarse grid) can order their
upper ends one way while the true crossings lie the other way; a verdict on rounds to a target is therefore
taken at both ends: it holds only where it holds with the claim's better side at the late end of its intervals
and the other side at the early end (the round after its last evaluation short of the target), it does not hold
only where it does not at the ends most favourable to the claim, and it is inconclusive where the two readings
disagree (the grid is too coarse to decide).

A wrapper around :func:`fbo_cli.grids.verdicts.claim_verdict` (same arguments), which it calls twice; any other
claim is passed through unchanged.
"""

from __future__ import annotations

import pandas as pd

from .spec_types import Claim
from .verdicts import Verdict, claim_verdict

HIGH, LOW = "rounds_to_target", "rounds_to_target_low"


def _at(runs: pd.DataFrame, ends: dict[tuple[str, str], str]) -> pd.DataFrame:
    """``runs`` with the rounds to target of each (algorithm, setting) in ``ends`` read at the named end: the
    early end is the first round the crossing can be, one after the last evaluation short of the target (rounds
    are whole; two crossings seen in successive intervals of one grid stay ordered), and the first row's own
    rounds where that one had reached it already."""
    out = runs.copy()
    for (algo, setting), col in ends.items():
        if col == LOW:
            rows = (out.algorithm == algo) & (out.setting == setting)
            out.loc[rows, HIGH] = (out.loc[rows, LOW] + 1).clip(upper=out.loc[rows, HIGH])
    return out


def rounds_verdict(runs: pd.DataFrame, claim: Claim | dict, setting: str, than_setting: str | None = None,
                   *args, **kwargs) -> Verdict:
    """:func:`claim_verdict` (the same arguments, passed on) with rounds to a target read as intervals (the module
    doc): the same verdict where both ends of the intervals give it, else *inconclusive* (the reason in its
    detail)."""
    claim = Claim.of(claim)
    verdict = lambda r: claim_verdict(r, claim, setting, than_setting, *args, **kwargs)  # noqa: E731
    better, than = (claim.better, setting), (claim.than, than_setting or setting)
    if claim.metric != HIGH or claim.mode == "equal" or LOW not in runs or better == than:
        return verdict(runs)
    late, early = (HIGH, LOW) if claim.mode == "min" else (LOW, HIGH)  # against the claim: better late, than early
    against = verdict(_at(runs, {better: late, than: early}))
    towards = verdict(_at(runs, {better: early, than: late}))
    if against.verdict == towards.verdict or against.verdict == "holds":
        return against
    if towards.verdict == "does not hold":
        return towards
    return against._replace(verdict="inconclusive", detail=(
        f"{against.detail}; the evaluations' round grid cannot decide: {against.verdict} with {claim.better} at "
        f"the late end of its crossing intervals, {towards.verdict} at the early end"))
