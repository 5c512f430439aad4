"""``fbo tune``: choose every algorithm's hyperparameters on validation data."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .common import (
    Address,
    BatchOpt,
    CpusPerRun,
    DataDir,
    Executor,
    GpusPerRun,
    Jobs,
    OutDir,
    err,
    grid_options,
    grid_overrides,
    ignored_note,
    interrupted_note,
    out,
    threads_first,
    user_errors,
)


def tune(
    spec: Path = typer.Argument(..., help="Experiment spec (YAML) with a 'tune:' block and per-algorithm grids."),
    jobs: Jobs = 1, executor: Executor = None, address: Address = None,  # the grid options (cli/common.py)
    cpus_per_run: CpusPerRun = 1, gpus_per_run: GpusPerRun = 0.0, out_dir: OutDir = None, data_dir: DataDir = None,
    batch: BatchOpt = "auto",
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="Override a key in every run (repeatable)."),
    rerun: bool = typer.Option(False, help="Run again even the tuning runs that are already done."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say how many tuning runs are left and what they cost "
                                 "(before any grid extension); run nothing."),
    ranking_check: bool = typer.Option(True, help="When the tuning budget is shorter than the evaluation budget, "
                                       "run each choice's top 3 points at the evaluation budget and record whether "
                                       "the choice stays best (ranking.csv)."),
    relabel: bool = typer.Option(False, help="Run nothing: recompute the notes of the recorded tuning "
                                 "(tuned.yaml) from its tuning.csv under today's rules (e.g. an extension that "
                                 "was never run because it is not a valid value); refuses if the choices change."),
    ranking_only: bool = typer.Option(False, help="Run only the ranking check of a tuning recorded without it "
                                      "(from its tuning.csv: each choice's top 3 points at the evaluation budget)."),
    accept_code_change: bool = typer.Option(False, "--accept-code-change", help="Keep finished tuning runs whose "
                                            "algorithm's code changed since (recorded in their summary.json)."),
    algorithm: Optional[list[str]] = typer.Option(None, "--algorithm", "-a", help="Tune only this algorithm (row "
                                                  "name) of the spec (repeatable); the others keep their recorded "
                                                  "tuning."),
    setting: Optional[list[str]] = typer.Option(None, "--setting", "-S", help="Tune only this setting of the spec "
                                                "(repeatable; -s is --set)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no notes while it runs (as "
                               "`fbo run -q`); the chosen values are printed at the end."),
) -> None:
    """Choose every algorithm's hyperparameters on validation data: run the spec's grids on the tuning
    seeds with a short budget, reject diverging or oscillating runs, pick the best validation score,
    and write results/compare/<name>/{tuned.yaml, tuning.csv, tuning.png}. `fbo compare` then uses
    the chosen values."""
    from ..grids import tune as tn

    threads_first()
    with user_errors():
        grid = grid_options(jobs, executor, address, cpus_per_run, gpus_per_run, batch)
        overrides = grid_overrides(set_, out_dir, data_dir)
        from ..grids.select import select
        from ..grids.spec import load_spec

        ignored_note(select(load_spec(spec, overrides, use_tuned=False), algorithm, setting))  # names checked
        if ranking_only:
            outdir = tn.ranking_only(spec, overrides, grid, console=err)
            out.print(f"written: {outdir / 'ranking.csv'}; ranking_check in {outdir / 'tuned.yaml'}", highlight=False)
            return
        if relabel:
            outdir, n = tn.relabel(spec, overrides)
            out.print(f"relabelled {outdir / 'tuned.yaml'} ({n} invalid extension point(s) found)", highlight=False)
            return
        if dry_run:
            out.print(tn.dry_run_text(spec, overrides, rerun, jobs, grid.batch), highlight=False)
            return
        try:
            outdir = tn.run_tuning(spec, overrides, grid, rerun=rerun, console=None if quiet else err,
                                   ranking_check=ranking_check, algorithms=algorithm, settings=setting,
                                   accept_code_change=accept_code_change)
        except KeyboardInterrupt as e:
            err.print(interrupted_note(e), style="yellow", highlight=False)
            raise typer.Exit(130) from None

    with user_errors():
        title, rows = tn.chosen_rows(outdir)
    t = Table(title=title, title_justify="left")
    for c in ("algorithm", "setting", "values", "note"):
        t.add_column(c, overflow="fold")
    for row in rows:
        t.add_row(*row)
    out.print(t)
    out.print(f"written: {outdir}/tuned.yaml, tuning.csv, tuning.png")
