"""A scorecard per paper: what reproduces, on one screen. It is computed from the sections' verdicts (the
claims' by :func:`.verdicts.claim_verdict`, the paper's numbers' by :func:`.verdicts.paper_rows`), never
typed: the claims counted by verdict, the paper's headline numbers against ours on its own data (reached, i.e.
equivalent; ours above or below; inconclusive; or context only and why), and what differs from the paper, one line each,
linked to the detail. Each paper's page opens with its card; the index shows every card's counts in one
table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ...grids.verdicts import SEE, VERDICTS
from ...runs.table import md_row
from .fold import slug
from .numbers import collapse_pairs, outcome
from .papers import Paper, fidelity_anchor
from .sections import Section

# context only: no verdict by the rule (another dataset or target, or a tuned row: ours at our steps; the reason is
# on the paper's page). "reached" is an equivalence pass only (:mod:`.numbers`).
NUMBER_KINDS = ("reached", "ours above", "ours below", "ours slower", "ours faster", "inconclusive", "not run yet",
                "context only")


@dataclass
class Scorecard:
    paper: Paper
    claims: Counter = field(default_factory=Counter)  # verdict -> claim checks (claim x experiment x setting)
    claim_rows: list[tuple[str, str, str]] = field(default_factory=list)  # (claim, experiment link, verdicts)
    numbers: list[tuple[str, ...]] = field(default_factory=list)  # (experiment link, what, paper, ours, outcome)
    tally: Counter = field(default_factory=Counter)  # NUMBER_KINDS -> paper numbers
    differences: list[str] = field(default_factory=list)  # one line each, with its link


def section_link(sec: Section) -> str:
    return f"[{sec.exp.name}](#{slug((sec.exp.title or sec.exp.name).replace('`', ''))})"


def kind(outcome: str) -> str:
    """The scorecard's column of a number's outcome."""
    return "context only" if outcome.startswith("context") else outcome.split(" (")[0]


def scorecard(paper: Paper, sections: list[Section]) -> Scorecard:
    card = Scorecard(paper)
    context: dict[tuple[str, str], int] = {}
    for sec in sections:
        if sec.exp is None:
            continue
        link = section_link(sec)
        for claim in dict.fromkeys(c for c, *_ in sec.verdicts or []):
            vs = [v.verdict for c, _, v in sec.verdicts if c == claim]
            card.claims.update(v for v in vs if v in VERDICTS)  # not those decided in another section
            card.claim_rows.append((claim, link, ", ".join([f"**{k}** {n}" for k in VERDICTS if (n := vs.count(k))]
                                                          + [f"*{k}* {vs.count(k)}" for k in dict.fromkeys(vs)
                                                             if k.startswith(SEE)])))
        collapse = collapse_pairs(sec.exp)
        notes = sec.paper_notes or [""] * len(sec.paper_rows or [])
        for (algo, setting, what, theirs, ours, verdict), note in zip(sec.paper_rows or [], notes):
            if verdict.startswith("context"):
                key = (link, verdict.removeprefix("context: "))
                context[key] = context.get(key, 0) + 1
                card.tally["context only"] += 1
                continue
            said = outcome(verdict, (algo, setting) in collapse)
            card.tally[kind(said)] += 1
            lost = [x.strip() for x in ours.split(";")[1:] if x.strip().endswith("left out")]  # runs not in the mean
            card.numbers.append((link, f"{algo}, {setting}: {what}", theirs, "; ".join([ours.split(";")[0], *lost]),
                                 said + (f"; {note}" if note and said == "inconclusive" else "")))
    anchor = fidelity_anchor(paper.fidelity) if paper.fidelity else ""
    detail = f" ([fidelity](fidelity.md#{anchor}))" if anchor else ""
    card.differences = [f"{claim}: {why}{detail}" for claim, why in paper.unchecked]
    card.differences += [f"{n} paper number{'s' if n > 1 else ''} in {link} stand as context: {why}"
                         for (link, why), n in context.items()]
    return card


def _counts(c: Counter, kinds: tuple[str, ...]) -> str:
    return ", ".join(f"{k} {c[k]}" for k in kinds if c[k]) or "none"


def claims_line(card: Scorecard) -> str:
    n = sum(card.claims.values())
    return (f"{n} claim check{'s' * (n != 1)} (claim × experiment × setting): " + _counts(card.claims, VERDICTS)) \
        if n else "no claim checked yet"


def numbers_line(card: Scorecard) -> str:
    n = sum(card.tally.values())
    return f"{n} number{'s' * (n != 1)}: " + _counts(card.tally, NUMBER_KINDS) if n else "none to compare"


def scorecard_md(card: Scorecard) -> list[str]:
    """The card under a paper's bottom line: the counts, then each claim and number behind a fold."""
    from .fold import fold

    out = [f"**Scorecard.** Claims: {claims_line(card)}. The paper's numbers against ours on the paper's own "
           f"data: {numbers_line(card)}.", ""]
    rows = []
    if card.claim_rows:
        rows += ["| claim | experiment | verdicts over its settings |", "|---|---|---|"]
        rows += [md_row(r) for r in card.claim_rows] + [""]
    if card.numbers:
        rows += ["| experiment | paper number | paper | ours (mean ± std) | outcome |", "|---|---|---|---|---|"]
        rows += [md_row(r) for r in card.numbers] + [""]
    if card.differences:
        rows += ["**What differs from the paper, and why** (one line each):", ""]
        rows += [f"- {d}" for d in card.differences] + [""]
    return out + fold("Each claim and number of the scorecard, and what differs", rows)


def scorecards_md(cards: list[Scorecard]) -> list[str]:
    """Every paper's card in one table (the index): claims by verdict, numbers reached, what is not tested."""
    out = ["## Scorecards: what reproduces", "",
           "Per paper: its claims checked, counted by verdict over settings (the rule below); its own numbers "
           "against ours on its own data (\"reached\": equivalent to the paper's value by the rule below, and "
           "nothing else; \"ours above\" and \"ours below\" are their own outcomes; \"context only\": no "
           "verdict, e.g. another dataset or a tuned row); and how many of its claims we could not test. Follow a "
           "paper for its card: each claim, each number, and why each difference.", "",
           "| paper | claims: verdicts | the paper's numbers on its data | claims not tested here |",
           "|---|---|---|---|"]
    for c in cards:
        short = c.paper.title.split(":")[0]
        out.append(md_row((f"[{short}](#{slug(c.paper.title.replace('`', ''))})", claims_line(c).split(": ", 1)[-1],
                           numbers_line(c), str(len(c.paper.unchecked)))))
    return out + [""]
