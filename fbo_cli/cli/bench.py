"""``fbo bench``: the cost per outer iteration (:mod:`fbo_cli.bench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from .common import user_errors


def bench(
    quick: bool = typer.Option(False, help="The FedNest and FBO-AggITD cases and the growth sweeps only (minutes)."),
    only: str = typer.Option("", help="Comma-separated substrings of case names to run."),
    device: str = typer.Option("cpu", help="cpu | cuda."),
    threads: int = typer.Option(1, help="torch CPU threads (1: one core per run, as compare --jobs 2 uses)."),
    iters: int = typer.Option(3, help="Timed outer iterations per case and path (the minimum is kept)."),
    min_seconds: float = typer.Option(4.0, help="Keep timing a case (up to 4x --iters) this many seconds."),
    cases: Path = typer.Option(Path("experiments/bench.yaml"), help="The cases."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder. \\[default: results/bench, "
                                           "results/bench/cuda for cuda]"),
    profile: bool = typer.Option(False, help="Instead of the bench: where an outer iteration's time goes (sampling, "
                                 "oracles, the rest) and the torch.profiler tables of the profiled cases."),
    public_fednest: Optional[Path] = typer.Option(None, help="A checkout of github.com/mc-nya/FedNest: time its "
                                                  "outer iteration (MNIST, 1 thread) beside fbo's whole FedNest run."),
    against: str = typer.Option("", help="A git revision or a checkout: instead of the bench, time the "
                                "latency-bound cases (or --only) on that code and on this code, alternating fresh "
                                "processes (before and after in one window; writes ab.md)."),
    rounds: int = typer.Option(3, help="Alternating rounds of --against."),
    batch: int = typer.Option(0, help="Instead of the bench: R runs of one seed at R step sizes (2-64), batched "
                              "against one by one (runs per hour on --device; writes batch.md and batch.csv; "
                              "fbo_cli/bench/batch.py)."),
    calls: bool = typer.Option(False, help="With --batch R: count each case's aten calls per outer iteration only, "
                               "a run alone's and a batch's of 1, 2, 4, ... R runs (no clock: fine on a loaded "
                               "machine; writes calls.csv)."),
) -> None:
    """Cost per outer iteration and per round of every algorithm (`make bench`): seconds, GFLOP/s against
    the machine's sgemm rate, fast vs generic path, growth with the clients, peak memory."""
    from ..bench import BenchOptions, main

    if batch:
        from ..bench.batch import main as batch_main

        with user_errors():
            if batch < 2 or batch > 64:
                raise UsageError(f"--batch must be between 2 and 64 runs, got {batch}", kind="bad_value",
                                 field="--batch", value=batch)
            if device not in ("cpu", "cuda"):
                raise UsageError(f"--device must be cpu or cuda, got {device!r}", kind="bad_value", field="--device",
                                 value=device)
            if device == "cuda":
                import torch

                if not torch.cuda.is_available():
                    raise UsageError("--device cuda: no CUDA device here",
                                     kind="unsupported", field="--device", value="cuda")
        where = out_dir or Path("results/bench/cuda" if device == "cuda" else "results/bench")
        if calls:
            from ..bench.batch import calls_main

            calls_main(batch, threads, only, where, device)
            return
        batch_main(batch, iters, 3, threads, only, where, device)
        return
    with user_errors():
        opts = BenchOptions(quick=quick, only=only, device=device, threads=threads, iters=iters,
                            min_seconds=min_seconds, cases=str(cases), out=str(out_dir) if out_dir else None,
                            profile=profile, public_fednest=str(public_fednest) if public_fednest else "",
                            against=against, rounds=rounds)
    main(opts)
