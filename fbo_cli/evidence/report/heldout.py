"""The held-out tuning score against the validation-split score: the same experiment tuned twice.

A spec named ``<name>_heldout`` is the experiment ``<name>`` re-tuned with ``tune: {score: heldout_loss,
set: {heldout_frac: 0.1}}``: each tuning run sets a share of each client's rows apart from both levels and
scores the upper loss there, instead of on the validation split that x is fitted on. Its compared runs are
the original's wherever the choice is the same (same config, same run id). This part of the report puts the
two tunings' choices side by side (each classified by :func:`.tuning.choice_kind`) and lists the claims whose
verdict differs between the two, with both intervals.
"""

from __future__ import annotations

import math

from ...grids.spec_types import Choice
from ...grids.verdicts import FIT_SPLIT_SCORES, SEE
from ...runs.table import md_row
from .sections import Section
from .tuning import choice_kind, tuning_records

SUFFIX = "_heldout"
VALIDATION_SCORES = FIT_SPLIT_SCORES  # the upper loss on the split x is fitted on


def _fmt(c: Choice) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                     for k, v in c.values.items()) or "none accepted"


def _same(a: Choice | None, b: Choice) -> bool:
    if a is None or "none" in a.notes or "none" in b.notes or set(a.values) != set(b.values):
        return False
    return all(a.values[k] == v or isinstance(v, (int, float)) and isinstance(a.values[k], (int, float))
               and math.isclose(float(a.values[k]), float(v), rel_tol=1e-9) for k, v in b.values.items())


def pairs(sections: list[Section]) -> list[tuple[Section, Section]]:
    """(original, held-out) sections, both built, in report order."""
    by = {s.exp.name: s for s in sections if s.exp is not None}
    return [(by[n[:-len(SUFFIX)]], s) for n, s in by.items() if n.endswith(SUFFIX) and n[:-len(SUFFIX)] in by]


def choice_rows(base: Section, ho: Section) -> list[tuple[str, str, str, str, bool]]:
    """(algorithm, setting, chosen on the validation split (kind), chosen held out (kind), same) per choice
    of the held-out tuning."""
    bt, ht = base.exp.tuned, ho.exp.tuned
    if ht is None:
        return []
    brec, hrec = tuning_records(base.exp), tuning_records(ho.exp)
    rows = []
    for algo, per in ht.chosen.items():
        for setting, hv in per.items():
            bv = (bt.chosen.get(algo) or {}).get(setting) if bt is not None else None
            hk = choice_kind(hv, hrec, algo, setting, (ht.grids or {}).get(algo))[0]
            bk = choice_kind(bv, brec, algo, setting, (bt.grids or {}).get(algo))[0] if bv else ""
            rows.append((algo, setting, f"{_fmt(bv)} ({bk})" if bv else "not tuned",
                         f"{_fmt(hv)} ({hk})", _same(bv, hv)))
    return rows


def defer_to_twins(sections: list[Section]) -> int:
    """The twin's verdict counts: a verdict of the original resting on its validation-split tuning, where the
    held-out twin has a verdict for the same claim and setting, becomes "see <twin>" (not counted in the
    summary's tallies or the scorecards), its own verdict kept in the detail and in ``base.before_twin`` for the
    table of verdicts that changed (:func:`verdict_rows`). Changes ``sections`` in place; returns how many."""
    n = 0
    for base, ho in pairs(sections):
        twin = {(c, st): v for c, st, v in ho.verdicts or [] if v.verdict != "no data"}
        base.before_twin = {}
        for i, (c, st, v) in enumerate(base.verdicts or []):
            t = twin.get((c, st))
            if t is None or v.tuning != "fit split" or v.verdict.startswith(SEE):
                continue
            base.before_twin[(c, st)] = v
            detail = (f"re-tuned on held-out data in `{ho.exp.name}`, whose verdict counts: {t.verdict}; here, on "
                      f"the validation-split tuning: {v.verdict} ({v.detail})")
            base.verdicts[i] = (c, st, v._replace(verdict=SEE + ho.exp.name, detail=detail))
            n += 1
    return n


def verdict_rows(base: Section, ho: Section) -> tuple[int, list[tuple[str, ...]]]:
    """(claims compared, the claims and settings whose verdict differs: claim, setting, before with its
    interval, after with its interval)."""
    before = {**{(c, s): v for c, s, v in base.verdicts or []}, **base.before_twin}
    n, rows = 0, []
    for c, s, v in ho.verdicts or []:
        b = before.get((c, s))
        if b is None or "no data" in (b.verdict, v.verdict):
            continue
        n += 1
        if b.verdict != v.verdict:
            rows.append((c, s, f"{b.verdict}: {b.interval} ({b.n})", f"{v.verdict}: {v.interval} ({v.n})"))
    return n, rows


def on_validation_split(sections: list[Section]) -> list[str]:
    """The bilevel experiments tuned on the split x is fitted on (``val_loss``, ``upper_loss``: the score
    before the held-out default) that have no held-out twin."""
    twinned = {b.exp.name for b, _ in pairs(sections)}
    return [s.exp.name for s in sections if s.exp is not None and s.exp.tuned is not None
            and s.exp.tuned.get("score") in VALIDATION_SCORES and s.exp.name not in twinned]


def heldout_md(sections: list[Section]) -> list[str]:
    """The report's paragraph and tables on the held-out score (empty when no spec has a held-out twin)."""
    found = pairs(sections)
    if not found:
        return []
    out = ["", "**The held-out tuning score.** In the bilevel tasks x is fitted on the clients' validation split, "
           "and a tuning scored on that same split (the upper loss there: `val_loss`, `upper_loss`) rewards the "
           "largest stable step. Each experiment below was tuned a second time, scoring the upper loss on 10% of "
           "each client's rows that neither level trains on (`tune: {score: heldout_loss, set: {heldout_frac: "
           "0.1}}`; spec `<name>_heldout`), everything else equal; the compared runs are shared wherever the "
           "choice is the same. Kinds as in the tuning tally: interior, stable (beside a rejected value), edge.",
           "", "| experiment | algorithm | setting | chosen on the validation split | chosen on the held-out split "
           "| same |", "|---|---|---|---|---|---|"]
    changed: list[tuple[str, ...]] = []
    n_choices = n_same = n_claims = 0
    for base, ho in found:
        for algo, setting, bv, hv, same in choice_rows(base, ho):
            out.append(md_row((base.exp.name, algo, setting, bv, hv, "yes" if same else "**no**")))
            n_choices += 1
            n_same += same
        n, rows = verdict_rows(base, ho)
        n_claims += n
        changed += [(base.exp.name, *r) for r in rows]
    out += ["", f"{n_choices - n_same} of {n_choices} choices change with the held-out score; "
            f"{len(changed)} of {n_claims} claim verdicts (claim × setting, both tunings run) change"
            + (":" if changed else "."), ""]
    if changed:
        out += ["| experiment | claim | setting | validation-split tuning: verdict, 95% interval (seeds) "
                "| held-out tuning |", "|---|---|---|---|---|"]
        out += [md_row(r) for r in changed] + [""]
    rest = on_validation_split(sections)
    out += ["The held-out score is therefore the bilevel tasks' default (a spec's `tune:` block without "
            "`score:`). Where an experiment has a held-out twin, the twin's verdicts are the ones that count; "
            "the original's verdicts they re-decide read *see* the twin and are not counted in the tallies. "
            + (f"{len(rest)} bilevel experiments were tuned on the validation split before the default changed "
               "and pin that score in their spec until they are re-tuned (their re-tuning did not fit the compute "
               f"so far; `fbo cost` prices it): {', '.join(f'`{n}`' for n in rest)}." if rest else
               "Every other bilevel experiment is tuned on the held-out split.")]
    return out
