"""``fbo check``: do the committed numbers reproduce?"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .common import err, interrupted_note, out, threads_first, user_errors


def check_cmd(
    specs: Optional[list[Path]] = typer.Argument(None, help="Experiment specs whose committed runs to check. "
                                                 "\\[default: every spec of the report]"),
    minutes: float = typer.Option(60.0, help="Budget in core-minutes (estimated as `fbo cost` does): a sample "
                                  "of the runs, every spec and algorithm in turn, cheapest runs first."),
    all_runs: bool = typer.Option(False, "--all", help="Every committed run, whatever the budget."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Runs in parallel (processes, one torch thread each)."),
    evidence: Path = typer.Option(Path("docs/results"), "--from", help="The evidence: run directories with "
                                  "their config.yaml, metrics.csv and summary.json."),
    out_dir: Path = typer.Option(Path("results/check"), "--out", help="Where the reruns, check.md and "
                                 "check.csv go."),
    rtol: float = typer.Option(1e-3, help="Relative tolerance of 'agrees' (float rounding)."),
    atol: float = typer.Option(1e-6, help="Absolute floor of the relative difference."),
    batch: str = typer.Option("auto", help="Run batches: auto | off | R. A sampled run's batch partners (the "
                              "committed runs it steps with, fbo_cli/grids/run_batches.py) join the sample, "
                              "and they rerun "
                              "as one batch, each checked against its own evidence."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the sample and its cost; run nothing."),
    against: Optional[Path] = typer.Option(None, "--against", help="Another results root (e.g. the same specs run "
                                           "on another machine): compare the claim verdicts of the evidence (or "
                                           "--from) with ROOT's on their common runs and seeds; reruns nothing. "
                                           "Writes agreement.md in --out; exit 0."),
    spec: Optional[list[Path]] = typer.Option(None, "--spec", help="With --against: a spec to compare (repeat it)."),
) -> None:
    """Do the committed numbers reproduce? Rerun a sample of the report's runs from their committed
    configurations (tuned step sizes included; no tuning), and compare every metric at every evaluation
    and the communication ledger with the evidence: identical, agrees within rtol, drifts (rounding grown
    over a long run, the final value within half a seed-to-seed sd), or differs (exit 1).
    `make reproduce-check` checks an hour's worth on 2 cores."""
    import shlex
    import sys

    from ..evidence import check

    if against is not None:
        return _agreement(list(specs or []) + list(spec or []), evidence, against, out_dir)
    threads_first()  # --jobs 1 reruns in this process
    with user_errors():
        plan = check.plan(specs, None if all_runs else minutes, jobs, evidence, out_dir, rtol, atol,
                          warn=lambda m: err.print(m, style="red", highlight=False), batch=batch)
        if dry_run:
            t = Table(title=plan.what, title_justify="left")
            for h in ("spec", "algorithm", "setting", "seed", "core-minutes"):
                t.add_column(h, justify="right" if h in ("seed", "core-minutes") else "left", overflow="fold")
            for p in plan.chosen:
                t.add_row(p.spec, p.cell.algorithm, p.cell.setting, str(p.cell.seed), f"{p.secs / 60:.1f}")
            out.print(t)
            return
        err.print(f"checking {plan.what}", highlight=False)
        command = "fbo check " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["check"] else "fbo check"
        try:
            rows = check.run_check(plan, out_dir, jobs, rtol, atol, command, console=err)
        except KeyboardInterrupt as e:
            err.print(interrupted_note(e), style="yellow", highlight=False)
            raise typer.Exit(130) from None
    typer.echo((out_dir / "check.md").read_text().rstrip("\n"))
    out.print(f"written: {out_dir}/check.md, check.csv")
    if plan.unusable or any(r["outcome"] in ("differs", "failed") for r in rows):
        raise typer.Exit(1)


def _agreement(specs: list[Path], evidence: Path, against: Path, out_dir: Path) -> None:
    """``fbo check --against``: the verdicts of two roots side by side (:mod:`fbo_cli.evidence.agreement`)."""
    import shlex
    import sys

    from ..evidence import agreement
    from ..runs.rundir import atomic_write, make_dirs

    with user_errors():
        if not specs:
            from ..grids.spec import report_index

            specs = [Path(s) for s, _, _ in report_index()]
        rows = agreement.compare([str(s) for s in specs], evidence, against)
        command = "fbo check " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["check"] else "fbo check --against"
        text = agreement.report(rows, evidence, against, command)
        path = out_dir / Path(agreement.FILE).name
        make_dirs(out_dir)
        atomic_write(path, text)
    typer.echo(text.rstrip("\n"))
    out.print(f"written: {path}")
