"""``fbo cost``: what regenerating specs costs, before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table

from ..errors import UsageError
from .common import BatchOpt, Jobs, OutDir, grid_overrides, out, print_table, user_errors


def cost(
    specs: Optional[list[Path]] = typer.Argument(None, help="Experiment specs (YAML). \\[default: the "
                                                 "reproduction's, as `fbo reproduce` runs them]"),
    jobs: Jobs = 1, out_dir: OutDir = None,
    todo: bool = typer.Option(False, "--todo", help="Count only the runs not finished under the results folder "
                              "(default: every run, as on a fresh machine)."),
    batch: BatchOpt = "auto",
    until_settled: bool = typer.Option(False, "--until-settled", help="Instead: per spec, what settling its open "
                                       "claims costs under the sequential design (fbo_cli/grids/settle.py), read "
                                       "on the runs under --out-dir (e.g. --out-dir docs/results): the next look, "
                                       "and every open claim to the cap (at most)."),
    cap: int = typer.Option(10, help="--until-settled: the last look's seeds."),
) -> None:
    """What regenerating the specs costs, before anything runs: per spec, its tuning runs (the spec's grid,
    and what a tuning adds: extensions, confirmations, the ranking check, expected and at most; see `fbo tune
    --dry-run`) and its compared runs, in core-minutes estimated from the committed evidence (docs/results/)
    and the results folder (each run's rounds times the median seconds per round of finished runs of its
    kind on this kind of device) plus each run's start-up; with --batch (auto, as the commands run), the runs
    grouped into run batches, a batched run's training costing its share measured by the batch bench
    (docs/results/bench/batch.csv, CPU). `fbo reproduce` prints it first."""
    from ..evidence.reproduce import plan
    from ..grids.run_batches import parse_batch

    with user_errors():
        if jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {jobs}", kind="bad_value", field="--jobs", value=jobs)
        chosen = list(specs) if specs else [s.spec for s in plan()]
        if until_settled:
            return settle_cost(chosen, jobs, grid_overrides(None, out_dir, None), cap, parse_batch(batch))
        print_cost(chosen, jobs, grid_overrides(None, out_dir, None), todo, parse_batch(batch))


def settle_cost(specs: list, jobs: int, overrides: dict, cap: int, batch: str | int = "auto") -> None:
    """``fbo cost --until-settled``: per spec, the price of its next look and of every open claim to the cap (the
    dry run of ``fbo compare --until-settled``: :func:`fbo_cli.grids.settle.second_look`)."""
    from ..grids.settle import second_look
    from ..grids.spec import load_spec

    for spec in specs:
        exp = load_spec(spec, overrides)
        look = second_look(exp, spec, overrides, cap, jobs, dry_run=True, batch=batch)
        lines = look.cost.splitlines() if look.cost else [look.notes[0]]
        for line in lines:
            out.print(f"{exp.name}: {line}", highlight=False, markup=False)


def print_cost(specs: list, jobs: int, overrides: dict, todo: bool = False, batch: str | int = "auto") -> None:
    """The cost table of ``specs`` and its total line (``fbo cost``; ``fbo reproduce`` first)."""
    from ..evidence.reproduce import spec_cost

    t = Table(title="What the reproduction costs (estimated core-minutes, start-up included)", title_justify="left",
              caption="tuning: grid / expected / at most runs; compared: runs; core-min: expected / at most; GPU min: "
                      "one GPU (est.), minutes one by one / with lanes and batches; no est.: runs without an estimate",
              caption_justify="left", box=box.SIMPLE_HEAD)  # no vertical rules: room for the names at 80 columns
    for h in ("spec", "tuning", "compared", "core-min", "GPU min", "no est."):  # one word each: never broken
        t.add_column(h, justify="left" if h == "spec" else "right", no_wrap=h == "spec", overflow="fold",
                     min_width=len(h))
    from ..runs.cost import GPU_LANES_FIT, parallel

    lanes = GPU_LANES_FIT[0]
    total = largest = unknown = gpu = gpu_lanes = 0.0
    gpu_none = []
    for spec in specs:
        c = spec_cost(spec, overrides, todo, batch, lanes)
        total, largest, unknown = total + c["expected_s"], largest + c["largest_s"], unknown + c["unknown"]
        g, gl = c["gpu_s"], c["gpu_lanes_s"]
        gpu, gpu_lanes = gpu + (g or 0.0), gpu_lanes + (gl or 0.0)
        if g is None and c["expected_s"]:
            gpu_none.append(c["name"])
        t.add_row(c["name"], c["tuning"], str(c["compared"]), f"{c['expected_s'] / 60:.0f} / {c['largest_s'] / 60:.0f}",
                  "" if g is None else f"{g / 60:.0f} / {gl / 60:.1f}", str(c["unknown"]) if c["unknown"] else "")
    t.add_row("total", "", "", f"{total / 60:.0f} / {largest / 60:.0f}", f"{gpu / 60:.0f} / {gpu_lanes / 60:.0f}",
              str(int(unknown)) if unknown else "")
    t.columns[0].min_width = max(len(str(c)) for c in t.columns[0].cells)  # a spec's name is never cut
    print_table(t)
    none = f"; {int(unknown)} run(s) of a kind never run on this kind of device have no estimate"
    p, words = parallel(max(jobs, 1))
    out.print(f"about {total / 3600:.1f} core-hours expected, at most {largest / 3600:.1f}: "
              f"{total / 3600 / p:.1f} to {largest / 3600 / p:.1f} h of wall time {words}" + (none if unknown else "")
              + ("" if batch == "off" else f" (run batches: --batch {batch})"), highlight=False)
    out.print(f"one GPU: about {gpu_lanes / 3600:.1f} h with {lanes} processes sharing it (--jobs {lanes}) and run "
              f"batches (--batch {batch}), {gpu / 3600:.1f} h runs one by one: the committed CUDA bench (an H100) "
              "against the CPU bench of the same cases, the lanes fitted on Table 2's compared runs measured on an "
              "H100 (fbo_cli/runs/cost.py), the batches priced by the CUDA batch bench (docs/results/bench/cuda)"
              + (f"; no estimate for {', '.join(gpu_none)}" if gpu_none else ""), highlight=False)
