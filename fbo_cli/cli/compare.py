"""``fbo compare``: an experiment grid and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
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


def compare(
    spec: Path = typer.Argument(..., help="Experiment spec (YAML), e.g. experiments/aggitd_table2_fmnist.yaml."),
    jobs: Jobs = 1, executor: Executor = None, address: Address = None,  # the grid options (cli/common.py)
    cpus_per_run: CpusPerRun = 1, gpus_per_run: GpusPerRun = 0.0, out_dir: OutDir = None, data_dir: DataDir = None,
    batch: BatchOpt = "auto",
    seeds: Optional[str] = typer.Option(None, help="Override the spec's seeds, e.g. 0,1."),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="Override a key in every run (repeatable)."),
    rerun: bool = typer.Option(False, help="Run again even the runs that are already done."),
    no_run: bool = typer.Option(False, "--no-run", help="Only aggregate the runs already done."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say how many runs are left and what they cost "
                                 "(core-minutes, from finished runs of the same kind); run nothing."),
    until_settled: bool = typer.Option(False, "--until-settled", help="Then follow the sequential design: "
                                       "add the next look's seeds (3, 6, then --cap) to the settings of the claims "
                                       "still open, run them, look again, until each is decided or at the cap "
                                       "(fbo_cli/grids/settle.py and the report's rule)."),
    cap: int = typer.Option(10, help="--until-settled: the last look's seeds (the most a setting gets)."),
    looks: int = typer.Option(0, "--looks", min=0, help="--until-settled: take at most this many more looks "
                              "now (0: until every claim is decided or at the cap); a later call goes on."),
    accept_code_change: bool = typer.Option(False, "--accept-code-change", help="Keep finished runs whose "
                                            "algorithm's code changed since (recorded in their summary.json)."),
    algorithm: Optional[list[str]] = typer.Option(None, "--algorithm", "-a", help="Run and report only this "
                                                  "algorithm (row name) of the spec (repeatable)."),
    setting: Optional[list[str]] = typer.Option(None, "--setting", "-S", help="Run and report only this setting "
                                                "of the spec (repeatable; -s is --set)."),
) -> None:
    """Run an experiment grid (algorithms x settings x seeds), reusing finished runs and resuming partial
    ones, then write results/compare/<name>/{table.md, table.csv, runs.csv, curves.png}. Exit 1 when a run
    failed or is missing from the table."""
    from ..grids import compare as cmp

    threads_first()
    with user_errors():
        grid = grid_options(jobs, executor, address, cpus_per_run, gpus_per_run, batch)
        overrides = grid_overrides(set_, out_dir, data_dir)
        seed_list = None
        if seeds:
            try:
                seed_list = [int(s) for s in seeds.split(",") if s.strip()]
            except ValueError:
                raise UsageError(f"--seeds expects comma-separated integers, got '{seeds}'",
                                 kind="bad_value", field="--seeds", value=seeds) from None
        from ..grids.select import select

        exp = select(cmp.load_spec(spec, overrides, seed_list), algorithm, setting)
        if until_settled:
            from ..grids.settle import check_request

            check_request(exp, seed_list, cap)
        ignored_note(exp)
        if dry_run:
            for line in cmp.dry_run_lines(exp, rerun, jobs, grid.batch):
                out.print(line, highlight=False, markup=False)
            if until_settled:
                _settle(exp, spec, overrides, cap, jobs, grid.batch, dry_run=True)
            return
        if (short := cmp.tuning_budget_note(exp)) and not no_run:
            err.print(short.replace('**', ''), style="yellow", highlight=False)
        if exp.tuned is None and any(a.tune for a in exp.algorithms) and not no_run:
            err.print(f"{spec} has tuning grids but no tuned.yaml yet: these runs use the spec's own "
                      f"values; `fbo tune {spec}` first chooses them on validation data", style="yellow")
        try:
            outdir = _compare(exp, grid, rerun, no_run, accept_code_change)
            taken = 0
            while until_settled and (not looks or taken < looks) \
                    and (more := _settle(exp, spec, overrides, cap, jobs)) is not None:
                exp, taken = more, taken + 1  # the next look's seeds, run; then look again (at most one pass per look)
                outdir = _compare(exp, grid, False, no_run, accept_code_change)
        except KeyboardInterrupt as e:
            err.print(interrupted_note(e), style="yellow", highlight=False)
            raise typer.Exit(130) from None
    typer.echo((outdir / "table.md").read_text().rstrip("\n"))  # plain: no markup, no wrap at 80 columns
    out.print(f"written: {outdir}/table.md, table.csv, runs.csv, curves.png")
    if exp.incomplete:
        err.print(f"{exp.incomplete} run(s) failed or did not finish (see the 'failed' and 'not run' "
                  f"columns)", style="red")
        raise typer.Exit(1)


def _compare(exp, grid, rerun: bool, no_run: bool, accept_code_change: bool) -> Path:
    """The command's two steps: the grid's runs (none with ``--no-run``), then the report of what is there."""
    from ..grids import compare as cmp

    if not no_run:
        cmp.run_experiment(exp, grid, rerun=rerun, console=err, accept_code_change=accept_code_change)
    return cmp.report_experiment(exp, no_run=no_run, console=err)


def _settle(exp, spec: Path, overrides: dict, cap: int, jobs: int, batch: str | int = "auto", dry_run: bool = False):
    """The second look (fbo_cli/grids/settle.py): its notes and (a dry run) its cost printed; the experiment
    reloaded with the added seeds returned (None when there is nothing to add, or in a dry run)."""
    from ..grids.settle import second_look

    look = second_look(exp, spec, overrides, cap, jobs, dry_run, batch)
    for line in look.notes:
        err.print(line, highlight=False, markup=False)
    if look.cost is not None:
        out.print(look.cost, highlight=False, markup=False)
    return look.exp
