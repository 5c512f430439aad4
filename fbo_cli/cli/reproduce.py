"""``fbo reproduce``: every paper's reproduction, driven by the specs' ``paper:`` keys
(:mod:`fbo_cli.evidence.reproduce`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from .common import (
    Address,
    BatchOpt,
    CpusPerRun,
    Executor,
    GpusPerRun,
    Jobs,
    err,
    grid_options,
    interrupted_note,
    out,
    threads_first,
    user_errors,
)

COUNTS = re.compile(r"figures/zohfl_fig1_(.+)_a([0-9.]+)\.csv$")  # a paper's counts table (fbo figure zohfl-fig1)


def reproduce(
    paper: Optional[str] = typer.Option(None, "--paper", help="Only this paper's specs: aggitd, fedbio, adafbio, "
                                        "codasca, zohfl. \\[default: every paper's]"),
    jobs: Jobs = 1, executor: Executor = None, address: Address = None,  # the grid options (fbo compare's)
    cpus_per_run: CpusPerRun = 1, gpus_per_run: GpusPerRun = 0.0, batch: BatchOpt = "auto",
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what it costs and the commands it amounts to; "
                                 "run nothing."),
) -> None:
    """Every paper's reproduction at its budget, from the specs that name their paper (`paper:` in
    experiments/*.yaml, in report order: by paper, then the spec's `order:`): per spec, `fbo tune` where the
    spec has tuning grids, then `fbo compare`; then the papers' count tables (`fbo figure zohfl-fig1`) and
    `fbo report --collect results` (with `--prune` for the whole reproduction). Prints its estimated cost
    first. Finished runs are reused, partial ones resume. Exit 1 when a run failed or is missing."""
    from ..evidence.reproduce import plan
    from ..grids import compare as cmp
    from ..grids.tune import run_tuning
    from .cost import print_cost
    from .report import report

    threads_first()
    with user_errors():
        grid = grid_options(jobs, executor, address, cpus_per_run, gpus_per_run, batch)
        steps = plan(paper)
        print_cost([s.spec for s in steps], jobs, {}, batch=grid.batch)
        counts = _counts(paper)
        if dry_run:
            for s in steps:
                if s.tune:
                    out.print(f"fbo tune {s.spec} --jobs {jobs}", highlight=False)
                out.print(f"fbo compare {s.spec} --jobs {jobs}", highlight=False)
            for dataset, alpha in counts:
                out.print(f"fbo figure zohfl-fig1 {dataset} --alpha {alpha}", highlight=False)
            out.print("fbo report --collect results" + ("" if paper else " --prune"), highlight=False)
            return
        incomplete = 0
        try:
            for s in steps:
                if s.tune:
                    err.print(f"fbo tune {s.spec}", style="bold", highlight=False)
                    run_tuning(s.spec, {}, grid, console=err)
                err.print(f"fbo compare {s.spec}", style="bold", highlight=False)
                exp = cmp.load_spec(s.spec, {})
                cmp.run_experiment(exp, grid, console=err)
                outdir = cmp.report_experiment(exp, console=err)
                out.print(f"written: {outdir}/table.md, table.csv, runs.csv, curves.png", highlight=False)
                incomplete += exp.incomplete
        except KeyboardInterrupt as e:
            err.print(interrupted_note(e), style="yellow", highlight=False)
            raise typer.Exit(130) from None
        if counts:
            from ..evidence.report.zohfl_section import fig1
            from ..grids.plots import parse_formats

            for dataset, alpha in counts:
                png = fig1(dataset, alpha, 10, 0, "data", Path("results/figures"), parse_formats(None))
                out.print(f"written: {png.with_suffix('')} and its .csv", highlight=False)
    report(root=Path("docs/results"), md=None, html_out=None, collect=Path("results"), spec=None, prune=not paper)
    if incomplete:
        err.print(f"{incomplete} run(s) failed or did not finish (see each spec's table)", style="red")
        raise typer.Exit(1)


def _counts(paper: str | None) -> list[tuple[str, float]]:
    """(dataset, alpha) of the count tables the reproduced papers show (ZO-HFL's Fig. 1)."""
    from ..evidence.report.papers import PAPERS

    return [(m.group(1), float(m.group(2))) for p in PAPERS if paper in (None, p.key) for f in p.counts
            if (m := COUNTS.search(f))]
