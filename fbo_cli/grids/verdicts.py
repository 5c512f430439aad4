"""The verdict rules, pure functions over runs: a claim per setting, and the paper's numbers beside
ours (the rules are in the package docstring).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from .spec import Experiment
from .spec_types import Claim

CONFIDENCE = 0.95  # every descriptive interval of the report (tables, paper numbers' ours): two-sided 95%
ALPHA = 1 - CONFIDENCE  # the error of a claim's verdict over all its looks (the sequential design below)
LOOK_SEEDS = (3, 6, 10)  # the looks of the sequential design: a verdict is read at 3, then 6, then 10 seed pairs
CAP = LOOK_SEEDS[-1]


class Verdict(NamedTuple):
    """One claim in one setting: the verdict, the numbers behind it, the interval and the seeds that decided it."""
    verdict: str  # holds | does not hold | inconclusive | no data
    detail: str  # means, wins over pairs
    interval: str  # "+0.0123 [+0.0041, +0.0205], paired t" (the claim's direction is +)
    n: int  # seed pairs read (those of the look that decided it, else of the last look reached)
    runs: tuple = (frozenset(), frozenset())  # the run ids behind the pairs: better's, than's (one verdict each)
    tuning: str = ""  # what a tuned side's choice rests on: "held-out", "fit split" ("": no tuned side)
    look: int = 0  # the look (1-based) that decided it, or the last look reached when it is still open; 0: none
    p: float = math.nan  # the repeated p-value: the smallest error over all looks at which the design decides
    more: int = 0  # an open verdict: the seed pairs its next look needs (0: decided, or at the last look)


def looks(cap: int = CAP) -> tuple[int, ...]:
    """The seed counts of the looks: 3 and 6 (those below ``cap``), then ``cap``."""
    return tuple(n for n in LOOK_SEEDS[:-1] if n < cap) + (cap,)


def look_alphas(cap: int = CAP, alpha: float = ALPHA) -> tuple[float, ...]:
    """The error spent at each look (:func:`looks`): the Lan-DeMets spending function of O'Brien-Fleming type,
    ``a(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` at the information fraction ``t = n / cap``, taken in
    increments. The increments sum to ``alpha``, so by the union bound the error over all looks is at most
    ``alpha`` whatever the looks' correlation; an early look spends almost nothing (3 of 10 seeds: 0.035%), so a
    verdict decided there needs overwhelming evidence."""
    from scipy.stats import norm

    z = norm.ppf(1 - alpha / 2)
    spent = [2 - 2 * norm.cdf(z / math.sqrt(n / cap)) for n in looks(cap)]
    spent[-1] = alpha
    return tuple(b - a for a, b in zip([0.0] + spent[:-1], spent))


def t_interval(d: np.ndarray, alpha: float = 1 - CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): the paired t interval of the mean of ``d`` (finite values, n >= 2)."""
    from scipy.stats import t

    n, m = len(d), float(np.mean(d))
    half = float(t.ppf(1 - alpha / 2, n - 1) * np.std(d, ddof=1) / math.sqrt(n))
    return m, m - half, m + half


def sign_interval(d: np.ndarray, alpha: float = 1 - CONFIDENCE) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free interval of the median of ``d`` from its order statistics
    (the sign test's: [d_(k), d_(n+1-k)] with the largest k whose two binomial(n, 1/2) tails hold at most
    ``alpha``). It takes infinite values (a run that never reaches the target). Below 6 values no such k
    exists at 95%, and the interval is (-inf, inf)."""
    from scipy.stats import binom

    x, n = np.sort(d), len(d)
    k = 0
    while k + 1 <= n // 2 and 2 * binom.cdf(k, n, 0.5) <= alpha:
        k += 1
    med = float(np.median(x))
    return (med, -math.inf, math.inf) if k == 0 else (med, float(x[k - 1]), float(x[n - k]))


def paired_interval(d: np.ndarray, alpha: float = 1 - CONFIDENCE, exact: bool = False
                    ) -> tuple[float, float, float, str]:
    """The interval of the paired differences ``d``: paired t when every difference is finite and they
    vary, the sign test's interval of the median otherwise: when one is infinite (a run that never reached
    the target, diverged or collapsed: the worst value; a value censored at the top of its grid), when all
    are equal (a zero-variance t interval is no interval), and always with ``exact`` (a grid-valued
    quantity, e.g. CODASCA's I_max: its differences take a few values, so the t test's normal model
    does not hold and the exact, distribution-free test decides)."""
    if len(d) < 2:
        return (float(d[0]) if len(d) else math.nan), -math.inf, math.inf, "1 pair: no interval"
    if not exact and np.isfinite(d).all() and _vary(d):
        return (*t_interval(d, alpha), "paired t")
    return (*sign_interval(d, alpha), "sign test, median")


def _vary(v: np.ndarray) -> bool:
    """Whether finite values differ beyond float rounding (else a t interval would have zero width)."""
    return bool(np.ptp(v) > 1e-9 * max(1.0, float(np.abs(v).max())))


def decide(lo: float, hi: float, margin: float, equal: bool = False) -> str:
    """*holds* when the interval lies above the margin (for a claim of no difference: inside ±margin),
    *does not hold* when it lies below it (outside ±margin), *inconclusive* otherwise."""
    if equal:
        return "holds" if -margin <= lo and hi <= margin else "does not hold" if lo > margin or hi < -margin \
            else "inconclusive"
    return "holds" if lo > margin else "does not hold" if hi < margin else "inconclusive"


def claim_verdict(runs: pd.DataFrame, claim: Claim | dict, setting: str, than_setting: str | None = None,
                  first: int = 3, exact: bool = False, cap: int = CAP) -> Verdict:
    """The verdict of one claim in one setting, by the sequential design (:func:`sequential`): the seed pairs
    in seed order, read at each look (3, 6, ``cap`` pairs) at that look's level until one decides. With
    ``than_setting`` (a claim's ``across`` pair) the ``than`` side's runs come from that setting: the same seeds
    are paired across the two settings. ``first``: the spec's number of seeds (a spec with more than ``cap``
    seeds reads its last look at all of them). ``exact``: the quantity is grid-valued (:func:`paired_interval`);
    +∞ in it is a value censored at the grid's top ("≥ top"). Rounds and iterations to a target are always read
    so (grid-valued and censored): the sign test, which decides at the last look (10 pairs) at the earliest."""
    claim = Claim.of(claim)
    metric, mode = claim.metric, claim.mode
    sign = -1.0 if mode == "min" else 1.0
    fill = -math.inf if mode != "min" else math.inf  # never reaching the target is the worst value

    def side(name, where):
        g = runs[(runs.algorithm == name) & (runs.setting == where) & runs.status.isin(LOSING + ("done",))]
        if metric not in g:
            return pd.Series(dtype=float)
        v = g.set_index("seed")[metric].astype(float).fillna(fill)
        v[g.status.isin(LOSING).to_numpy()] = fill  # a diverged or collapsed run is the method's worst outcome
        return v

    a, b = side(claim.better, setting), side(claim.than, than_setting or setting)
    common = a.index.intersection(b.index).sort_values()
    if a.empty or b.empty or common.empty:
        return Verdict("no data", "", "", 0)
    counts = metric.endswith("to_target")
    margin = float(claim.margin if claim.margin is not None else 0.0 if counts else MARGIN)
    a, b = a[common].to_numpy(), b[common].to_numpy()
    factor = claim.factor
    with np.errstate(invalid="ignore", divide="ignore"):
        d = sign * (a - b) if factor is None else np.log(b) - np.log(a)  # factor: log(than / better)
    if factor is not None:
        margin = math.log(factor)
    d[np.isnan(d)] = 0.0  # both never reach the target (or both lost): no difference
    equal = mode == "equal"
    if equal:
        d = a - b
        d[np.isnan(d)] = 0.0
    # rounds or iterations to a target are grid-valued (read on the evaluation grid) and censored (never): the
    # exact, distribution-free test, as for I_max; a t interval over three near-equal grid steps decided at look
    # 1 on one machine and not on another, where one run's last bits kept it from the target
    exact = exact or counts
    seq = sequential(d, margin, equal, exact, max(cap, first))
    n = seq.n
    a, b, d = a[:n], b[:n], d[:n]
    ids = []  # the runs of the pairs read, by run id (the same run under two specs has one id)
    for name, where in ((claim.better, setting), (claim.than, than_setting or setting)):
        g = runs[(runs.algorithm == name) & (runs.setting == where) & runs.seed.isin(common[:n])]
        ids.append(frozenset(Path(str(d)).name for d in g.run_dir.dropna()) if "run_dir" in g else frozenset())
    m, lo, hi, test = seq.interval
    center = (lambda v: float(np.median(v))) if counts or exact else (lambda v: float(np.mean(v)))
    wins = int(sum(abs(x) <= margin for x in d)) if equal else int(sum(x > margin for x in d))
    show = (lambda v: "≥ the grid's top (censored)" if v == math.inf else _fmt(v)) if exact else _fmt
    detail = (f"{show(center(a))} vs {show(center(b))}; "
              + (f"within {margin:g} in {wins}/{len(d)} seeds" if equal else f"wins {wins}/{len(d)} seeds"))
    level = f"{100 * (1 - seq.alpha):.4g}%"
    if factor is not None:  # d is log(than / better): shown as the ratio
        ratio = lambda v: "∞" if v == math.inf else "0" if v == -math.inf else f"{math.exp(v):.3g}x"
        detail += f"; by more than {factor:g}x in {wins}/{len(d)} seeds"
        interval = f"{ratio(m)} [{ratio(lo)}, {ratio(hi)}] ({level}, {test}, of than / better)"
    else:
        interval = f"{_fmt_d(m)} [{_fmt_d(lo)}, {_fmt_d(hi)}] ({level}, {test})"
    detail += f"; {seq.when()}"
    return Verdict(seq.verdict, detail, interval, n, tuple(ids), look=seq.look, p=seq.p, more=seq.more)


class Sequential(NamedTuple):
    """What the sequential design read: the verdict, the look that decided it (or the last look reached), the
    pairs read there, that look's error and interval, the repeated p-value, and the pairs the next look needs."""
    verdict: str
    look: int
    n: int
    alpha: float
    interval: tuple
    p: float
    more: int
    of: int  # the number of looks

    def when(self) -> str:
        """'decided at look 2 of 3 (6 seeds)' or 'open at look 1 of 3: 3 more seeds for look 2'."""
        if self.verdict != "inconclusive":
            return f"decided at look {self.look} of {self.of} ({self.n} seeds)"
        if self.more:
            return (f"open at look {self.look} of {self.of}" if self.look else "before the first look") + \
                f": {self.more} more seed{'s' * (self.more > 1)} for look {self.look + 1}"
        return f"inconclusive at the last look ({self.n} seeds)"


def sequential(d: np.ndarray, margin: float, equal: bool = False, exact: bool = False, cap: int = CAP
               ) -> Sequential:
    """The sequential design over the paired differences ``d`` (in seed order): at look k (:func:`looks`, the
    first ``n_k`` values) the interval at level ``1 - a_k`` (:func:`look_alphas`) decides (:func:`decide`); the
    first look that decides gives the verdict and later pairs are not read. Fewer pairs than the first look:
    open. The repeated p-value is ``min_k q_k * ALPHA / a_k`` over the looks read, ``q_k`` the smallest level at
    which look k would decide: a valid p-value (a weighted Bonferroni over the looks), below ``ALPHA`` exactly
    when the design decided."""
    ns, alphas = looks(cap), look_alphas(cap)
    p, last = 1.0, None
    for k, (n, a) in enumerate(zip(ns, alphas)):
        if len(d) < n:
            break
        dk = d[:n]
        iv = paired_interval(dk, a, exact)
        verdict = decide(iv[1], iv[2], margin, equal)
        p = min(p, _decisive_level(dk, margin, equal, exact) * ALPHA / a)
        last = Sequential(verdict, k + 1, n, a, iv, min(p, 1.0), 0, len(ns))
        if verdict != "inconclusive":
            return last
    if last is None:  # before the first look: the interval at its level, no verdict
        n = len(d)
        return Sequential("inconclusive", 0, n, alphas[0], paired_interval(d, alphas[0], exact), 1.0,
                          ns[0] - n, len(ns))
    more = ns[last.look] - len(d) if last.look < len(ns) else 0
    return last._replace(more=max(more, 0))


def _decisive_level(d: np.ndarray, margin: float, equal: bool, exact: bool) -> float:
    """The smallest error level at which the interval of ``d`` decides (1.0: none does): for the paired t
    interval in closed form (it decides once ``t_{1-a/2} * se`` falls below the distance of the mean from the
    nearest boundary, ``margin`` or for an equality claim ``±margin``), else by bisection over the level in log
    space (the intervals are nested, so the decided set is monotone in the level)."""
    if not exact and len(d) >= 2 and np.isfinite(d).all() and _vary(d):
        from scipy.stats import t

        m, se = float(np.mean(d)), float(np.std(d, ddof=1)) / math.sqrt(len(d))
        gap = abs(margin - abs(m)) if equal else abs(m - margin)
        return min(1.0, float(2 * t.sf(gap / se, len(d) - 1)))
    decides = lambda a: decide(*paired_interval(d, a, exact)[1:3], margin, equal) != "inconclusive"  # noqa: E731
    if not decides(1.0 - 1e-12):
        return 1.0
    lo, hi = math.log(1e-300), math.log(1.0 - 1e-12)  # decides at exp(hi), maybe not at exp(lo)
    if decides(math.exp(lo)):
        return 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if decides(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


LOSING = ("diverged", "collapsed")  # statuses that count as the method's worst outcome in a pair
MARGIN = 0.005  # half a point of accuracy or AUC: a smaller difference is no win


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if math.isinf(v):
        return "never" if v > 0 else "−∞ (a run diverged or collapsed)"
    return f"{v:.4g}"


def _fmt_d(v: float) -> str:
    """A difference: signed, four significant digits; ±∞ as words."""
    if math.isinf(v):
        return "+∞" if v > 0 else "−∞"
    return f"{v:+.4g}".replace("-", "−")




def _interval(v: np.ndarray, alpha: float) -> tuple[float, float, float, str]:
    """(centre, low, high, test): the t interval of the mean of ``v``, or where a value is infinite or all are
    equal, the order-statistics (sign test's) interval of its median."""
    if np.isfinite(v).all() and _vary(v):
        return (*t_interval(v, alpha), "t")
    return (*sign_interval(v, alpha), "order statistics, median")


def match_paper(ours: pd.Series, paper: float, tolerance: float, counts: bool = False, cap: int = CAP
                ) -> tuple[str, str]:
    """(verdict, our intervals) for one number of the paper, by an equivalence test (TOST) read by the
    sequential design of the claims (:func:`looks`, :func:`look_alphas`; ``ours`` in seed order). At look k
    (its first ``n_k`` seeds, error ``a_k``) ours is **consistent with** the paper's when the ``1 - 2 a_k``
    interval of ours − paper lies inside ± the tolerance (two one-sided tests at ``a_k``: equivalence shown,
    not a failure to reject); **above** or **below** when the ``1 - a_k`` interval lies beyond + or − the
    tolerance; the first look that decides gives the verdict; **inconclusive** when none does (and before the
    first look). The interval is the t interval of our mean; for rounds to a target with seeds that never reach
    it (never = +∞), or values that are all equal (a zero-variance t interval is no interval), the
    order-statistics interval of our median. Tolerance: the section's (:func:`paper_tolerance`) for fractions,
    10% of the paper's value for round counts."""
    v = ours.astype(float).to_numpy()
    v = v[~np.isnan(v)] if not counts else np.where(np.isnan(v), math.inf, v)
    if len(v) == 0:
        return "no data", ""
    tol = 0.1 * abs(paper) if counts or paper > 1 else tolerance
    if len(v) == 1:
        return "inconclusive", f"{_fmt(float(v[0]))} (1 seed: no interval)"
    ns, alphas = looks(max(cap, len(v))), look_alphas(max(cap, len(v)))
    read = None
    for k, (n, a) in enumerate(zip(ns, alphas)):
        if len(v) < n:
            break
        read = _match_at(v[:n], paper, tol, a) + (f"; decided at look {k + 1} of {len(ns)} ({n} seeds)",)
        if read[0] != "inconclusive":
            return read[0], read[1] + read[2]
        read = read[:2] + (f"; open at look {k + 1} of {len(ns)}" + (
            f": {ns[k + 1] - len(v)} more seeds for look {k + 2}" if k + 1 < len(ns) else " (the last)"),)
    if read is None:
        read = ("inconclusive", _match_at(v, paper, tol, alphas[0])[1],
                f"; before the first look: {ns[0] - len(v)} more seed{'s' * (ns[0] - len(v) > 1)}")
    return read[0], read[1] + read[2]


def _match_at(v: np.ndarray, paper: float, tol: float, a: float) -> tuple[str, str]:
    """One look of :func:`match_paper` at error ``a``."""
    m, lo, hi, test = _interval(v, a)
    _, elo, ehi, _ = _interval(v, 2 * a)
    d = lambda x: _fmt_d(x - paper)  # noqa: E731
    text = (f"{_fmt(m)} [{_fmt(lo)}, {_fmt(hi)}] ({100 * (1 - a):.4g}%, {test}); ours − paper, "
            f"{100 * (1 - 2 * a):.4g}%: [{d(elo)}, {d(ehi)}] against ±{tol:.4g}"
            ).replace("−∞ (a run diverged or collapsed)", "−∞")
    if lo - paper > tol:
        return "above", text
    if hi - paper < -tol:
        return "below", text
    if -tol <= elo - paper and ehi - paper <= tol:
        return "consistent with", text
    return "inconclusive", text


def paper_tolerance(exp: Experiment) -> tuple[float, str]:
    """(tolerance, why) for the paper's fractions in one experiment: no wider than the effect the paper's claims
    are about. Where a claim of the spec compares two algorithms (or two settings) whose numbers the paper
    gives, the tolerance is half the smallest such gap in the paper's own numbers (a gap below the claim's
    margin is no effect a claim is about), so that no result can be consistent with both sides of a
    comparison; never wider than the spec's ``tolerance`` (default 0.02), which holds where no claim compares
    two of the paper's numbers."""
    ref = exp.reference or {}

    def number(algo, setting, metric):
        vals = (ref.get(algo) or {}).get(setting) or {}
        hit = [v for k, v in vals.items() if PAPER_KEYS.get(k, k) == metric and isinstance(v, (int, float))]
        return float(hit[0]) if hit else None

    gaps = []
    for c in exp.claims:
        if c.mode == "equal" or c.factor is not None or c.metric.endswith("to_target"):
            continue
        margin = c.margin if c.margin is not None else MARGIN
        pairs = c.across or [[s.name, s.name] for s in exp.settings if not c.settings or s.name in c.settings]
        for s, t in pairs:
            a, b = number(c.better, s, c.metric), number(c.than, t, c.metric)
            if a is not None and b is not None and a <= 1 and b <= 1 and abs(a - b) >= margin:
                where = s if s == t else f"{s} vs {t}"
                gaps.append((abs(a - b), f"{c.better} − {c.than}, {where}: {a:g} − {b:g}"))
    if gaps:
        gap, what = min(gaps)
        if gap / 2 < exp.tolerance:
            return gap / 2, (f"half the smallest gap between two of the paper's numbers that a claim compares "
                             f"({what} = {gap:.4g})")
    return exp.tolerance, ("the spec's tolerance" if not gaps else "the spec's tolerance, below half the smallest "
                           "gap between two of the paper's numbers that a claim compares") \
        + (": no claim compares two of the paper's numbers that differ by its margin" if not gaps else "")


# --------------------------------------------------------------------------------------------------
# The report


PAPER_KEYS = {"final": "final", "rounds_to_90": "rounds_to_target", "rounds_to_target": "rounds_to_target"}


def paper_rows(exp: Experiment, runs: pd.DataFrame, tol: float) -> list[tuple[str, ...]]:
    """(algorithm, setting, quantity, paper's value, ours, verdict) per number of the spec's ``reference``.
    A number gets a verdict (:func:`match_paper`) only when our runs of that setting are on the paper's
    dataset (``reference_on.dataset``), for rounds to a target with the paper's target, and at the values
    the spec fixes: a row whose algorithm entry has a tuning grid (``tune:``) ran at values we chose, not
    the paper's configuration, so its number stands as context, never a verdict."""
    on = exp.reference_on or {}
    paper_sets = on.get("dataset")
    paper_sets = [paper_sets] if isinstance(paper_sets, str) else list(paper_sets or [])
    datasets = {(c.algorithm, c.setting): c.cfg.run.dataset for c in exp.cells}
    tuned = {a.name for a in exp.algorithms if a.tune}
    rows = []
    for a, per in (exp.reference or {}).items():
        for s, vals in (per or {}).items():
            cell = runs[(runs.algorithm == a) & (runs.setting == s)]
            g = cell[cell.status == "done"]
            lost = ", ".join(f"{n} {k}" for k in ("diverged", "collapsed", "failed")
                             if (n := int((cell.status == k).sum())))
            ours_ds = datasets.get((a, s), "?")
            for k, v in vals.items():
                c = PAPER_KEYS.get(k, k)
                if not isinstance(v, (int, float)):
                    continue
                counts = c == "rounds_to_target"
                pt, ot = on.get("target"), exp.target
                what = k if not counts else f"rounds to {pt:.0%}" if pt == ot and pt is not None else \
                    f"rounds to target (paper's {pt if pt is None else f'{pt:.0%}'}, ours {ot:.0%})"
                ours = g.set_index("seed")[c].sort_index().astype(float) if c in g else pd.Series(dtype=float)
                verdict, interval = match_paper(ours, float(v), tol, counts) if not ours.empty else ("no data", "")
                if ours.empty:
                    text = "–"
                elif counts:
                    hit = ours.dropna()
                    text = (f"{hit.mean():.0f}" + (f" ± {hit.std(ddof=1):.0f}" if len(hit) > 1 else "")
                            if len(hit) else "never") + f" ({len(hit)}/{len(ours)} reached)"
                else:
                    text = f"{ours.mean():.4f}" + (f" ± {ours.std(ddof=1):.4f}" if len(ours) > 1 else "")
                text += f"; {interval}" if interval else ""
                if a in tuned:
                    verdict = "context: a tuned row (values chosen by `fbo tune`, not the paper's), never a verdict"
                elif not paper_sets:
                    verdict = "context: the spec does not name the paper's dataset"
                elif ours_ds not in paper_sets:
                    verdict = f"context: the paper's number is on {', '.join(paper_sets)}, ours on {ours_ds}"
                elif counts and on.get("target") != exp.target:
                    verdict = f"context: the paper's target is {on.get('target')}, ours {exp.target}"
                elif counts:
                    verdict = {"above": "above (slower)", "below": "below (faster)"}.get(verdict, verdict)
                rows.append((a, s, what, f"{v:g}", text + (f"; {lost}, left out" if lost else ""), verdict))
    return rows


FIT_SPLIT_SCORES = ("val_loss", "upper_loss")  # the upper loss on the split x is fitted on


def tuning_basis(exp: Experiment, claim: Claim) -> str:
    """What a claim's verdict rests on where a side of it is a tuned row (an algorithm entry with ``tune:``):
    "fit split" when the tuning scored the upper loss on the split x is fitted on (``val_loss``,
    ``upper_loss``), "held-out" when it scored data neither level trains on; "" when no side is tuned."""
    tuned = {a.name for a in exp.algorithms if a.tune}
    if not {claim.better, claim.than} & tuned or exp.tune is None:
        return ""
    score = exp.tuned.get("score") if exp.tuned is not None and exp.tuned.get("score") else exp.tune.score
    return "fit split" if score in FIT_SPLIT_SCORES else "held-out"


SEE = "see "  # a verdict decided in another section: "see <experiment>"


def one_verdict_per_comparison(sections: list) -> int:
    """One verdict per comparison: where the runs behind a verdict (both sides) are part of the runs behind
    another section's verdict of the same quantity, test and margin, and fewer, the larger sample decides;
    the smaller one's verdict becomes "see <that experiment>" with both verdicts named in its detail (e.g.
    Table 2's non-IID tau = 1 runs inside Fig. 3's, which add seeds). Changes ``sections`` in place; returns
    how many verdicts point elsewhere."""
    entries = []
    for sec in sections:
        if sec.exp is None:
            continue
        claims = {c.text: c for c in sec.exp.claims}
        for i, (text, _, v) in enumerate(sec.verdicts or []):
            c = claims.get(text)
            if c is not None and all(v.runs) and v.verdict != "no data":
                entries.append((sec, i, (c.metric, c.mode, c.margin, c.factor), v))
    n = 0
    for sec, i, key, v in entries:
        larger = [(o, ov) for o, _, ok, ov in entries if o is not sec and ok == key and v.runs[0] <= ov.runs[0]
                  and v.runs[1] <= ov.runs[1] and len(v.runs[0]) + len(v.runs[1]) < len(ov.runs[0]) + len(ov.runs[1])]
        if not larger:
            continue
        o, ov = max(larger, key=lambda e: len(e[1].runs[0]) + len(e[1].runs[1]))
        text, setting, _ = sec.verdicts[i]
        detail = (f"these {v.n} seed pairs are among the {ov.n} of `{o.exp.name}`, whose verdict counts: "
                  f"{ov.verdict}; here alone: {v.verdict} ({v.detail})")
        sec.verdicts[i] = (text, setting, v._replace(verdict=SEE + o.exp.name, detail=detail))
        n += 1
    return n


VERDICTS = ("holds", "does not hold", "inconclusive", "no data")
PAPER_VERDICTS = ("consistent with", "above", "below", "inconclusive")


def run_summaries(runs: pd.DataFrame, key: str):
    from ..runs.rundir import read_summary

    for d in runs.run_dir:
        s = read_summary(Path(d)) or {}
        if key in s:
            yield s[key]


from .multiplicity import expected_false  # noqa: E402,F401  (the report's control line reads it from the rules)
