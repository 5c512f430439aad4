"""``fbo report``: one report over every paper's reproduction, from run directories only.

The report never runs anything. Its input is a results root (``results/`` after the reproductions,
or ``docs/results/``, the committed evidence: each reproduction run's resolved ``config.yaml``,
``metrics.csv`` and ``summary.json``, plus each spec's ``tuned.yaml``/``tuning.csv``; ``fbo report
--collect`` copies them there from ``results/``). For every paper in :data:`PAPERS` and each of its
experiment specs it aggregates the runs exactly as ``fbo compare`` does, and writes:

* a Markdown report (``docs/results.md``): per paper, the table (mean ± std over seeds, the paper's
  numbers beside ours), how the hyperparameters were chosen, the budget, seeds and compute, which
  runs are missing, and a verdict per claim computed by the rule stated in the report;
* HTML pages with the same content and the figures: an index (the claims summary, the checks, the
  bench) and a page per paper, each figure linked as SVG beside its PDF and PNG (:mod:`.pages`).

Claims are data in the specs (``claims:``): ``{text, metric, better, than, mode}`` says that
algorithm ``better`` beats ``than`` on ``metric`` (a column of ``runs.csv``: ``final``,
``rounds_to_target``, ...; ``mode: min`` or ``max``) in every setting of the spec; ``mode: equal``
says that the two end within the margin of each other (a finding of no difference). The rule: per
setting, the pairs of runs with the same random seed are compared (a pair is a win when ``better``
is ahead by more than a margin: 0.005 for metrics that are fractions, 0 for rounds or iterations to
the target; a claim may set ``margin``; a claim with ``across: [[s1, s2], ...]`` pairs ``better``'s
runs in setting s1 with ``than``'s in s2 instead, e.g. one algorithm at tau = 5 against tau = 1);
the claim **holds in every seed** when ``better`` wins every pair, **holds in the mean** when it
wins on the mean over seeds (the median for rounds or iterations to the target) but not every pair,
**does not hold** otherwise; **no data** when a side has no finished run. A run that never reaches
the target counts as +∞ rounds, and a diverged run as the worst value (it loses its pair); failed
runs are left out. Paper numbers are compared by the rule in :func:`fbo_cli.grids.verdicts.match_paper`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import UsageError
from ...files import SCRATCH_TOKEN, atomic_write, check_target, make_dirs, temp_folder
from .evidence import BENCH_FILES, CHECK_FILES, EVIDENCE_FILES, SPEC_FILES, collect_evidence, prune_evidence  # noqa: F401
from .pages import paper_figures, write_pages
from .papers import PAPERS, Paper, fidelity_anchor  # noqa: F401
from .render import counts_title, finding_md, render_html, render_markdown, slug, summary_md  # noqa: F401
from .sections import Section, build_section  # noqa: F401

DATA_S = 20  # seconds to read the evidence and write the pages on 2 cores, figures aside
FIGURE_S = 4  # seconds to draw one figure on 2 cores (59 figures: about 4 minutes)
FIGURES_MARK = ".fbo-figures"  # the report replaces only a figures folder that carries it


def build_report(root: Path, md_path: Path, html_path: Path, command: str = "fbo report",
                 specs: list[str] | None = None, say=None) -> dict[str, int]:
    """Write the Markdown and HTML reports (of every paper, or of ``specs`` only); returns counts of
    sections, cells, missing runs and figures drawn and reused (:mod:`.reuse`: the previous report's figures
    whose inputs did not change). ``say(text)``: where the estimate of how long it takes goes first."""
    # the two named files first, before anything is made beside them (never a device's or a link's siblings)
    check_target(md_path, "--md")
    check_target(html_path, "--html")
    papers = (Paper("specs", "Experiments", "", given=tuple(specs)),) if specs else PAPERS
    for spec in specs or []:
        if not Path(spec).is_file():
            raise UsageError(f"spec not found: {spec}", kind="not_found", path=spec)
    if not specs:  # every spec that names a paper must name one the report has
        from ...grids.spec import report_index

        keys = {p.key for p in PAPERS}
        for path, paper, _ in report_index():
            if paper not in keys:
                raise UsageError(f"{path}: 'paper: {paper}' is not a paper of the report; "
                                 f"choose one of: {', '.join(sorted(keys))}", kind="unknown", field="paper",
                                 value=paper, path=path)
    figdir = html_path.parent / ("figures" if not specs else f"{html_path.stem}-figures")
    if figdir.is_symlink() or (figdir.exists() and not (figdir / FIGURES_MARK).is_file()):
        raise UsageError(f"{figdir} exists and is not a figures folder fbo wrote (no {FIGURES_MARK} in it): the "
                         f"report replaces that folder, so move it away or write the report elsewhere (--html)",
                         kind="not_fbos", path=figdir)
    work = temp_folder("report")  # a killed report leaves these to `fbo clean`
    make_dirs(html_path.parent)
    fresh = temp_folder("figures", html_path.parent)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(fresh, 0o777 & ~mask)  # mkdtemp's folder is private; the report's is not
    atomic_write(fresh / FIGURES_MARK, "written by fbo report; the next report replaces this folder\n")
    try:
        from ...grids.plot_reuse import reusing
        from .figures import Evidence

        ev = Evidence(root)
        with reusing(figdir, fresh, root) as rec:
            if say is not None:
                say(estimate(*rec.estimate()))
            sections = {p.key: [build_section(s, root, work, fresh, ev) for s in p.specs if Path(s).is_file()]
                        for p in papers}
            secs = [x for v in sections.values() for x in v if x.exp is not None]
            if not any(len(x.missing or []) < len(x.exp.cells) for x in secs):
                raise UsageError(f"no finished runs under {root} for "
                                 f"{'these specs' if specs else 'any reproduction spec'}"
                                 f": nothing to report (run them, or --from the folder that holds them)",
                                 kind="not_found", field="runs", path=root)
            md = render_markdown(sections, root, command, papers)
            atomic_write(md_path, md)
            paper_figs = {p.key: paper_figures(p, sections[p.key], root, fresh, ev) for p in papers}
            fid = os.path.relpath(md_path.parent / "fidelity.md", html_path.parent)  # links work from the HTML too
            write_pages(md, sections, paper_figs, papers, html_path, fresh, figdir.name, fid)
        if figdir.exists():
            shutil.rmtree(figdir)
        (fresh / SCRATCH_TOKEN).unlink()  # no longer scratch: the report's figures folder
        os.replace(fresh, figdir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(fresh, ignore_errors=True)
    secs = [s for v in sections.values() for s in v]
    return {"sections": len(secs), "missing": sum(len(s.missing or []) for s in secs),
            "cells": sum(len(s.exp.cells) for s in secs if s.exp is not None),
            "drawn": rec.drawn, "reused": rec.reused}


def estimate(figures: int, seconds: float) -> str:
    """How long the report will take: the data and pages, and the previous report's figures to redraw."""
    if not figures:
        return (f"fbo report: about {DATA_S} s for the data and pages, plus every figure drawn anew (about "
                f"{FIGURE_S} s each on 2 cores, about 4 minutes for the whole report's): no previous report's figures "
                "to reuse")
    if not seconds:
        return (f"fbo report: about {DATA_S} s (the evidence and the plotting code are unchanged since the "
                f"previous report: its {figures} figures are reused)")
    return (f"fbo report: about {DATA_S} s for the data and pages, plus up to {seconds:.0f} s to redraw the previous "
            f"report's {figures} figures whose runs or plotting code changed (the others are reused)")
