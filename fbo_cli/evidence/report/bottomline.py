"""The bottom line per paper (issue 60): what a reader sees first, on one screen. Per paper, one line per
headline claim of the paper (:mod:`.headlines`: its words and where it is) with our answer (reproduces, does not,
open; at which look and with how many seeds; on the paper's data or an analog) and how its settings agree, then one
line for the paper's numbers (reached = equivalent, ours above, below, open with the seeds they need) and the main
attribution; our own findings in a separate, labelled list. Everything is counted from the sections' verdicts.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ...grids.verdicts import VERDICTS
from .fold import slug
from .headlines import FINDINGS, HEADLINES, NO_NUMBERS, PAPER_DATA, SHORT, Headline
from .numbers import CONTRADICTS
from .papers import Paper
from .scorecard import scorecard, scorecard_md, scorecards_md
from .sections import Section

DECIDED = VERDICTS[:3]  # holds, does not hold, inconclusive: a "see" verdict counts where it points, no data nowhere
OPEN_MARK, CLOSE_MARK = "<!-- bottom -->", "<!-- /bottom -->"  # the HTML gives the block a compact style


@dataclass
class Check:
    """One setting's verdict of a spec claim: which experiment, which datasets."""
    experiment: str
    setting: str
    verdict: object  # a Verdict (its ``look`` and ``p`` where the rules give them)
    datasets: tuple[str, ...]


def checks(sections: dict[str, list[Section]], h: Headline) -> list[Check]:
    """Every setting's verdict, in any paper's sections, of a spec claim that ``h`` names."""
    out = []
    for secs in sections.values():
        for sec in secs:
            if sec.exp is None:
                continue
            ds = tuple(dict.fromkeys(c.cfg.run.dataset for c in sec.exp.cells))
            out += [Check(sec.exp.name, st, v, ds) for claim, st, v in sec.verdicts or []
                    if claim.startswith(h.checks) and v.verdict in DECIDED]
    return out


def answer(found: list[Check]) -> str:
    """Our answer in one word, and how the settings agree: *reproduces* when no setting contradicts it and at least
    half hold, *does not reproduce* the converse, *mixed* when some hold and some do not, *open* otherwise (a
    later look may decide it), *inconclusive* when every undecided setting is at its last look (no look is left)."""
    c = Counter(x.verdict.verdict for x in found)
    n, held, failed = len(found), c["holds"], c["does not hold"]
    capped = all(getattr(x.verdict, "look", 0) and not getattr(x.verdict, "more", 0)
                 for x in found if x.verdict.verdict == "inconclusive")
    word = ("reproduces" if not failed and 2 * held >= n else "does not reproduce" if not held and 2 * failed >= n
            else "mixed" if held and failed else "inconclusive" if capped else "open")
    parts = [f"{k} in {c[k]}" for k in DECIDED if c[k]]
    parts[0] += f" of {n} setting{'s' * (n != 1)}"
    return f"**{word}**: {', '.join(parts)}"


def seeds_text(found: list[Check]) -> str:
    """At which look and with how many seeds: "at look 2 (6 seeds)" where every verdict records its look (the
    sequential rule's ``look``, 1-based; 0 or absent: none), else the seeds alone ("3-10 seeds")."""
    ns = sorted({x.verdict.n for x in found})
    seeds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    looks = [getattr(x.verdict, "look", 0) or 0 for x in found]
    if all(looks):
        lo, hi = min(looks), max(looks)
        return f"at look {lo} ({seeds} seeds)" if lo == hi else f"at looks {lo}-{hi} ({seeds} seeds)"
    return f"{seeds} seed{'s' * (ns != [1])}"


def data_text(paper: str, found: list[Check]) -> str:
    """On the paper's data, an analog, or (a paper that prints no experiment) our reconstruction."""
    ds = list(dict.fromkeys(d for x in found for d in x.datasets))
    name = lambda d: SHORT.get(d, d)  # noqa: E731
    mine = PAPER_DATA.get(paper, ())
    if not mine:  # the paper's name line says that every run is our reconstruction
        return ", ".join(map(name, ds))
    same, other = [name(d) for d in ds if d in mine], [name(d) for d in ds if d not in mine]
    return ", ".join(filter(None, (", ".join(same), f"analog {', '.join(other)}" if other else "")))


def claim_line(paper: str, h: Headline, sections: dict[str, list[Section]]) -> str:
    found = checks(sections, h)
    where = f"*{h.where}*: " if h.where != "ours" else ""
    if not found:
        return f"- {where}{h.words} — **not checked**"
    return f"- {where}{h.words} — {answer(found)} · {seeds_text(found)} · {data_text(paper, found)}"


def numbers_text(paper: Paper, sections: list[Section]) -> str:
    """The paper's numbers in one line: reached (equivalent), ours above, below, open (with the seeds they need),
    context; and the main attribution where a spec has one."""
    card = scorecard(paper, sections)
    t = card.tally
    judged = sum(t.values()) - t["context only"]
    if not judged:
        return f"- *Numbers*: none beside ours ({NO_NUMBERS.get(paper.key, 'none on its own data')})"
    rest = [f"{k.removeprefix('ours ')} {t[k]}" for k in ("ours above", "ours below", "ours slower", "ours faster")
            if t[k]]
    contra = sum(CONTRADICTS in r[-1] for r in card.numbers)
    if contra:
        rest[0] += f" ({contra} above a collapse it reports: contradicts it)"
    need = [r[-1] for r in card.numbers if r[-1].startswith("inconclusive")]
    if need:
        planned = sorted(int(m.group(1)) for w in need if (m := re.search(r"needs (\d+) seeds", w)))
        gone = sum("not reachable" in w for w in need)
        why = ([f"{len(planned)} need {planned[0]}-{planned[-1]} seeds"] if planned else []) + (
            [f"{gone} out of reach"] if gone else [])
        rest.append(f"open {len(need)}" + (f" ({', '.join(why)})" if why else ""))
    if t["context only"]:
        rest.append(f"context {t['context only']}")
    out = f"- *Numbers*: **{t['reached']} of {judged} reached** (equivalent); " + ", ".join(rest)
    attr = main_attribution(paper, sections)
    return out + (f". {attr}" if attr else "")


def main_attribution(paper: Paper, sections: list[Section]) -> str:
    """The attribution row (:mod:`.attribution`) of the paper's own method with an interval (else any row with one):
    the change, and the share of the gap it closes with its 95% interval."""
    method = paper.title.split()[0]
    rows = [(sec, r) for sec in sections for r in sec.attribution_rows if "[95%" in r[-1]]
    rows.sort(key=lambda e: not e[1][0].startswith(method))
    if not rows:
        return ""
    sec, (before, _after, setting, label, _paper, _bt, _ft, share) = rows[0]
    change = sec.exp.attribution.change.split(" from ")[0]
    return (f"Attribution: changing {change} closes {share.split(';')[0].replace('95%: ', '')} of "
            f"{before.split(' (')[0]}'s gap in {label} ({setting})")


def paper_block(paper: Paper, sections: dict[str, list[Section]], link: str = "") -> list[str]:
    """One paper's bottom line: its name, a line per headline claim, its numbers."""
    name = paper.title.split(":")[0]
    who = paper.title.split(":", 1)[1].strip() if ":" in paper.title else ""
    head = f"**[{name}](#{slug(paper.title.replace('`', ''))})**" if link else f"**{name}**"
    out = [f"{head} · {who}" + ("" if PAPER_DATA.get(paper.key) else " · prints no experiment: every run is our "
                                                                    "reconstruction"), ""]
    out += [claim_line(paper.key, h, sections) for h in HEADLINES.get(paper.key, ())]
    out.append(numbers_text(paper, sections.get(paper.key, [])))
    return out + [""]


def findings_block(papers: tuple[Paper, ...], sections: dict[str, list[Section]]) -> list[str]:
    """Our own findings, labelled as ours: not the papers' claims."""
    rows = [f"- *{p.title.split(':')[0]}*: " + claim_line(p.key, h, sections)[2:]
            for p in papers for h in FINDINGS.get(p.key, ())]
    return (["**Our own findings** (not claims of the papers):", "", *rows, ""]) if rows else []


def control_line(sections: dict[str, list[Section]]) -> str:
    """The one line on the multiplicity control ("expected false verdicts under the control: ..."): the rule that
    defines it (the sequential looks and the control across a paper's claims) supplies it as
    ``verdicts.expected_false(verdicts)``; '' where the rules in use have none."""
    from ...grids import verdicts as rules

    how = getattr(rules, "expected_false", None)
    if how is None:
        return ""
    vs = [v for secs in sections.values() for sec in secs for _, _, v in sec.verdicts or []]
    decided = sum(v.verdict in DECIDED[:2] for v in vs)
    return (f"*Expected false verdicts under the control*: at most {how(vs):.1f} of the {decided} decided claim "
            "verdicts (Benjamini-Hochberg at q = 0.05 across each paper's counted claim checks, on the sequential "
            "design's p-values: see the verdict rule)")


def bottom_line_md(papers: tuple[Paper, ...], sections: dict[str, list[Section]]) -> list[str]:
    """The index's bottom line: every paper's block, our findings, the control's line."""
    if not any(p.key in HEADLINES for p in papers):
        return []
    out = ["## Bottom line: what reproduces, per paper", "", OPEN_MARK, ""]
    for p in papers:
        if p.key in HEADLINES:
            out += paper_block(p, sections, link="index")
    out += findings_block(papers, sections)
    line = control_line(sections)
    return out + ([line, ""] if line else []) + [CLOSE_MARK, ""]


def paper_bottom_md(paper: Paper, sections: dict[str, list[Section]]) -> list[str]:
    """The bottom line at the head of a paper's page: its block and its findings."""
    if paper.key not in HEADLINES:
        return []
    return [OPEN_MARK, "", "**Bottom line.**", "", *paper_block(paper, sections)[2:],
            *findings_block((paper,), sections), CLOSE_MARK, ""]


def with_scorecards(md: str, sections: dict[str, list[Section]], papers: tuple[Paper, ...]) -> str:
    """The report's Markdown laid out (:func:`.fold.layout`) with every paper's bottom line and scorecard
    (:mod:`.scorecard`): all of them first in the index, each at the head of its paper's part."""
    from .fold import layout

    cards = [scorecard(p, sections.get(p.key, [])) for p in papers]
    return layout(md, bottom_line_md(papers, sections) + scorecards_md(cards),
                  {c.paper.title: paper_bottom_md(c.paper, sections) + scorecard_md(c) for c in cards})
