"""``fbo report``: the report of every paper's reproduction."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from .common import err, out, user_errors


def report(
    root: Optional[Path] = typer.Option(None, "--from", help="Results root to read (run directories); "
                                        "docs/results is the committed evidence. \\[default: docs/results; with "
                                        "--spec: results, your own runs]"),
    md: Optional[Path] = typer.Option(None, "--md", help="Markdown report. \\[default: docs/results.md; with "
                                      "--spec: results/report/partial.md, never the full report]"),
    html_out: Optional[Path] = typer.Option(None, "--html", help="The HTML report's index page; a page "
                                            "per paper and the figures (SVG, PDF, PNG) go beside it. \\[default: "
                                            "results/report/report.html; with --spec: results/report/partial.html]"),
    collect: Optional[Path] = typer.Option(None, "--collect", help="First copy the finished reproduction runs "
                                           "from this results root (e.g. results) into --from: only runs whose "
                                           "completion record holds, never through a link; removes nothing."),
    spec: Optional[list[Path]] = typer.Option(None, "--spec", help="Report these experiment specs only "
                                              "(repeatable). \\[default: every paper's reproduction specs]"),
    prune: bool = typer.Option(False, "--prune", help="Remove the runs under --from that no reproduction spec "
                               "refers to (listed by --collect): only finished fbo runs inside a results root fbo "
                               "made (.fbo-results), never through a link. Refused (nothing removed) when the "
                               "reproduction specs cannot be read, or when it would remove more than 20% of the "
                               "runs, unless --yes."),
    yes: bool = typer.Option(False, "--yes", help="With --prune: remove even more than 20% of the runs under "
                             "--from."),
) -> None:
    """Write the report of every paper's reproduction (tables beside the papers' numbers, verdicts by a
    stated rule, missing runs; in the HTML an index and a page per paper with the papers' figures) from run
    directories only; runs nothing."""
    from ..evidence.report import build_report, collect_evidence, prune_evidence

    partial = bool(spec)
    root = root or Path("results" if partial else "docs/results")  # --spec: the runs fbo compare made here
    md = md or Path("results/report/partial.md" if partial else "docs/results.md")
    html_out = html_out or Path("results/report/partial.html" if partial else "results/report/report.html")
    with user_errors():
        if partial and md == Path("docs/results.md"):
            raise UsageError("--spec writes a partial report; it does not replace the full report docs/results.md "
                             "(leave --md out, or name another file)", kind="unsupported", field="--md", path=md)
        if collect is not None:
            if not collect.is_dir():
                raise UsageError(f"--collect: no results folder at {collect}", kind="not_found", field="--collect",
                                 path=collect)
            refused: list = []
            n = collect_evidence(collect, root, refused=refused)
            for src, why in refused:
                err.print(f"not collected: {src} ({why})", markup=False, highlight=False)
            err.print(f"collected {n} finished runs from {collect}/ into {root}/"
                      + (f"; {len(refused)} refused" if refused else ""), markup=False, highlight=False)
        if collect is not None or prune:
            stale = prune_evidence(root, remove=prune, yes=yes is True)  # a direct call passes no --yes
            for p in stale:
                err.print(f"{'removed' if prune else 'no reproduction spec refers to'} {p}", markup=False,
                          highlight=False)
            if stale and not prune:
                err.print(f"{len(stale)} run(s) or records under {root}/ no reproduction spec refers to: "
                          f"`fbo report --prune` removes them", markup=False, highlight=False)
        if not root.is_dir():
            raise UsageError(f"--from: no results folder at {root} (run the reproductions, or --collect results)",
                             kind="not_found", field="--from", path=root)
        cmd = "fbo report" + (f" --from {root}" if root != Path("docs/results") else "")
        t0 = time.perf_counter()
        stats = build_report(root, md, html_out, command=cmd, specs=[str(p) for p in spec] if spec else None,
                             say=lambda text: err.print(text, markup=False, highlight=False))
    out.print(f"written: {md}, {html_out} ({stats['sections']} experiment sections; "
              f"{stats['cells'] - stats['missing']} of {stats['cells']} runs present; {stats['drawn']} figures "
              f"drawn, {stats['reused']} reused; {time.perf_counter() - t0:.0f} s)", highlight=False)
