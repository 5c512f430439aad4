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
) -> None:
    """Cost per outer iteration and per round of every algorithm (`make bench`): seconds, GFLOP/s against
    the machine's sgemm rate, fast vs generic path, growth with the clients, peak memory."""
    from .. import bench as b

    with user_errors():
        if device not in ("cpu", "cuda") or threads < 1 or iters < 1:
            raise UsageError(f"--device must be cpu or cuda, --threads and --iters >= 1; got {device}, {threads}, "
                             f"{iters}")
        if not cases.is_file():
            raise UsageError(f"--cases: no file at {cases}")
        if against and not (Path(against) / "fbo_cli").is_dir() and not b.is_revision(against):
            raise UsageError(f"--against: {against} is neither a checkout with fbo_cli/ nor a git revision here")
        if rounds < 1:
            raise UsageError(f"--rounds must be >= 1; got {rounds}")
        if public_fednest is not None and not (public_fednest / "main_hr.py").is_file():
            raise UsageError(f"--public-fednest: no main_hr.py in {public_fednest} (a checkout of mc-nya/FedNest?)")
    argv = ["--device", device, "--threads", str(threads), "--iters", str(iters), "--min-seconds", str(min_seconds),
            "--cases", str(cases), *(["--quick"] if quick else []), *(["--only", only] if only else []),
            *(["--out", str(out_dir)] if out_dir else []), *(["--profile"] if profile else []),
            *(["--public-fednest", str(public_fednest)] if public_fednest else []),
            *(["--against", against, "--rounds", str(rounds)] if against else [])]
    b.main(argv)
