"""The report's HTML pages: an index (the title, the verdict rule, the claims summary, the reproduction
check, the bench) and one page per paper, with the figures linked as SVG files under a figures folder
beside them (no embedded images, so that each page stays small)."""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import UsageError
from ...runs.rundir import atomic_write
from .papers import Paper
from .render import render_html, slug
from .sections import Section


def paper_figures(paper: Paper, sections: list[Section], root: Path, figdir: Path, evidence) -> list[tuple[Path, str]]:
    """Draw the paper's figures (:data:`.figures.FIGURES`) whose specs all have runs in this report, into
    ``figdir``; returns ``(SVG, caption)`` of each, the caption naming the command that draws it alone."""
    from .figures import FIGURES, draw

    have = {s.spec for s in sections if s.exp is not None and len(s.missing or []) < len(s.exp.cells)}
    out = []
    for f in FIGURES:
        if f.paper != paper.key or (f.specs and not set(f.specs) <= have) or (not f.specs and not paper.counts):
            continue
        try:
            files, cap = draw(f.name, root, figdir, evidence=evidence)
        except UsageError:  # e.g. no counts tables in the evidence: the figure is left out
            continue
        out.append((files[0].with_suffix(".svg"), f"{cap} (`fbo figure {f.name}`)"))
    return out


def width_px(svg: Path, scale: float = 1.3) -> int:
    """The width to show an SVG at: its print width (pt, from its header) in CSS px times ``scale``, the same
    for every figure, so that its 8 pt fonts read as about 14 px."""
    head = svg.read_text()[:2000] if svg.is_file() else ""
    m = re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', head)
    return round(float(m.group(1)) * 4 / 3 * scale) if m else 900


def split(md: str, papers: tuple[Paper, ...]) -> list[tuple[str, str]]:
    """``(key, markdown)`` of the index and of each paper's part; the index keeps the title, the rule, the
    summary and everything after the last paper (the checks and the bench)."""
    heads = [(p.key, md.find(f"\n## {p.title}\n")) for p in papers]
    heads = [(k, i) for k, i in heads if i >= 0]
    if not heads:
        return [("index", md)]
    ends = [i for _, i in heads[1:]]
    tail = md.find("\n## Do the committed numbers reproduce?")
    last = tail if tail > heads[-1][1] else len(md)
    ends.append(last)
    title = md.split("\n", 1)[0]
    out = [("index", md[:heads[0][1]] + md[last:])]
    out += [(k, f"{title}\n" + md[i:e]) for (k, i), e in zip(heads, ends)]
    return out


def write_pages(md: str, sections: dict[str, list[Section]], paper_figs: dict[str, list[tuple[Path, str]]],
                papers: tuple[Paper, ...], index: Path, figdir: Path, figname: str, fidelity: str) -> list[Path]:
    """Write the index page at ``index`` and one page per paper beside it (``<index stem>-<paper>.html``);
    figure links point to ``figname/`` (the folder ``figdir`` becomes). Returns the pages written."""
    parts = split(md, papers)
    names = {k: index.name if k == "index" else f"{index.stem}-{k}.html" for k, _ in parts}
    titles = {p.key: p.title.split(":")[0] for p in papers} | {"index": "Summary"}
    nav = [(names[k], titles.get(k, k)) for k, _ in parts]
    figs: dict[str, list[tuple[str, str, int]]] = {}
    for secs in sections.values():
        for sec in secs:
            if sec.exp is not None and sec.figures:
                figs[sec.exp.title or sec.exp.name] = [(f"{figname}/{p.name}", cap, width_px(p))
                                                       for p, cap in sec.figures]
    for p in papers:
        if paper_figs.get(p.key):
            figs[p.title] = [(f"{figname}/{f.name}", cap, width_px(f)) for f, cap in paper_figs[p.key]]
    anchors = {k: {slug(re.sub(r"`", "", h)) for h in re.findall(r"^#{2,3} (.+)$", text, re.M)} for k, text in parts}
    written = []
    for k, text in parts:
        page = render_html(text, figs, nav, names[k]).replace('href="fidelity.md', f'href="{fidelity}')

        def relink(m, k=k):  # a link to a heading on another page goes to that page
            a = m.group(1)
            if a in anchors[k]:
                return m.group(0)
            other = next((o for o, hs in anchors.items() if a in hs), None)
            return f'href="{names[other]}#{a}"' if other else m.group(0)

        page = re.sub(r'href="#([^"]+)"', relink, page)
        atomic_write(index.parent / names[k], page)
        written.append(index.parent / names[k])
    for stale in index.parent.glob(f"{index.stem}-*.html"):  # pages of papers no longer in the report
        if stale not in written:
            stale.unlink()
    return written
