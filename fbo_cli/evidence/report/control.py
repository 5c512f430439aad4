"""The report's side of the sequential design and the multiplicity control: the rule's words (computed from the
design, so that they cannot drift from it), the price of an open verdict's next look, and the control applied to
every paper's checks before anything counts them (the sections, the scorecards, the bottom line, the summary).
"""

from __future__ import annotations

import re

import pandas as pd

from ...grids.multiplicity import AFTER, Q, control
from ...grids.verdicts import ALPHA, SEE, look_alphas, looks


def sequential_rule() -> str:
    """The rule paragraph's sentences on the looks, their boundaries, the error over them and the control."""
    from scipy.stats import t

    ns, alphas = looks(), look_alphas()
    each = "; ".join(f"look {k} at {n} seed pairs: error {100 * a:.3g}% (interval {100 * (1 - a):.4g}%, paired "
                     f"t critical value t({n - 1}) = {t.ppf(1 - a / 2, n - 1):.3g})"
                     for k, (n, a) in enumerate(zip(ns, alphas), 1))
    return (f"**Looks** (a sequential design fixed in advance): a verdict is read at {', '.join(map(str, ns))} "
            f"seed pairs, in seed order, each look at its own level from an O'Brien-Fleming-type spending of "
            f"{100 * ALPHA:g}% (Lan-DeMets: a(t) = 2 − 2Φ(z/√t) at t = n/{ns[-1]}): {each}. The first look that "
            f"decides gives the verdict and the claim stops there (later seeds that its setting got for other "
            f"claims are not read); the errors of the looks sum to {100 * ALPHA:g}%, so by the union bound a "
            f"claim's error over all its looks is at most {100 * ALPHA:g}% whatever their correlation, and a "
            f"verdict decided at look 1 needs overwhelming evidence. Each verdict names its look; an open one "
            f"names the seeds and core-minutes its next look needs (`fbo compare SPEC --until-settled` adds them; "
            f"`fbo cost` prices it); no look past {ns[-1]} seeds. Each verdict's repeated p-value (the smallest "
            f"error at which the design decides: a weighted Bonferroni over its looks) is below {ALPHA:g} exactly "
            f"when it decided. **Multiplicity**: across each paper's counted claim checks, Benjamini-Hochberg at "
            f"q = {Q:g} on those p-values; a decided verdict it does not keep is shown *{AFTER}* and leaves the "
            f"counts, so that the expected share of false verdicts among the decided ones is at most {Q:g} (the "
            f"head states the expected number). Rows that are the same numbers (identical paired differences: "
            f"FedProx tuned to mu = 0 is FedAvg; two sections over the same runs) are one check: the later row "
            f"says *see* the first. ")


def apply_control(sections: dict[str, list]) -> int:
    """The control (:func:`~fbo_cli.grids.multiplicity.control`) on each paper's checks, in place; returns how many
    decided verdicts it turned inconclusive."""
    n = 0
    for secs in sections.values():
        n += control([(sec, i, sec.exp.name) for sec in secs if sec.exp is not None
                      for i in range(len(sec.verdicts or []))], see=SEE)
    return n


def minutes_per_pair(runs: pd.DataFrame, sides: list[tuple[str, str]]) -> float | None:
    """A seed pair's core-minutes: per side, the mean of its finished runs' own timings (:func:`.numbers.run_minutes`);
    None where a side has no timed run."""
    from .numbers import run_minutes

    each = [run_minutes(runs[(runs.algorithm == a) & (runs.setting == s)]) for a, s in sides]
    return None if None in each else sum(each)


def priced(v, runs: pd.DataFrame, claim, setting: str, than_setting: str | None,
           windows: dict[str, list[str]] | None = None):
    """An open verdict (``v.more`` seeds to its next look) with its price in its detail: "open at look k, n more
    seeds, m core-minutes" (from its runs' own timings). ``windows``: for a quantity read across settings (I_max
    at K=16: every window's runs), the settings each of its setting names stands for: each seed then costs a run
    of every one of them (`--until-settled` adds it to them all, :mod:`fbo_cli.grids.settle`), which it says."""
    if v.verdict != "inconclusive" or not v.more:
        return v
    sides = [(claim.better, setting), (claim.than, than_setting or setting)]
    where = ""
    if windows is not None:
        sides = [(a, w) for a, st in sides for w in windows.get(st, [])]
        where = " in every setting it is read across"
    m = minutes_per_pair(runs, sides) if sides else None
    cost = f"{v.more * m:.1f} core-minutes" if m is not None else "core-minutes unknown (no timed run)"
    said = f"open at look {v.look}, {v.more} more seed{'s' * (v.more > 1)}{where}, {cost}"
    detail, n = re.subn(r"(open at look \d+ of \d+|before the first look): \d+ more seeds? for look \d+", said,
                        v.detail)
    return v._replace(detail=detail if n else f"{v.detail}; {said}")


NO_MARGIN = "inconclusive: rests on a tuned choice without a margin"  # a counted verdict's mark (the tally's rule)


def unmargined(exp, claim, settings: list[str], v, records: pd.DataFrame | None):
    """A decided verdict whose tuned side rests, in one of ``settings``, on a choice beside an unstable value
    (:func:`.tuning.unstable_keys`) without a margin shown on :data:`.tuning.MARGIN_SEEDS` tuning seeds leaves the
    counts: inconclusive, marked, naming the margin probes it needs and their cost (none is run here)."""
    from ...grids.spec_types import Tuned
    from .tuning import MARGIN_SEEDS, margin_seeds, probe_minutes, unstable_keys

    if v.verdict not in ("holds", "does not hold") or not exp.tuned:
        return v
    tuned = Tuned.of(exp.tuned)
    sides = [a.name for a in exp.algorithms if a.tune and a.name in (claim.better, claim.than)]
    need = []
    for algo in dict.fromkeys(sides):
        for st in dict.fromkeys(settings):
            at = st if st in (tuned.chosen.get(algo) or {}) else tuned.setting  # where it was tuned
            choice = tuned.entry(algo, st)
            keys = unstable_keys(choice, records, algo, at, (tuned.grids or {}).get(algo)) if choice.values else []
            if keys and margin_seeds(records, algo, at) < MARGIN_SEEDS:
                m = probe_minutes(records, algo, at)
                need.append(f"{algo} in {at} ({', '.join(keys)}): a margin probe on {MARGIN_SEEDS} tuning seeds, "
                            + (f"{m:.0f} core-minutes" if m is not None else "its cost unrecorded"))
    if not need:
        return v
    return v._replace(verdict="inconclusive", detail=(
        f"{NO_MARGIN} on {MARGIN_SEEDS} tuning seeds, so it leaves the counts; needed: {'; '.join(dict.fromkeys(need))}"
        f"; the design alone: {v.verdict}; {v.detail}"))
