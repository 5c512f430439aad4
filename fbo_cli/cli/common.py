"""What every ``fbo`` command shares: the consoles, user errors as one line and exit 2, the first torch
thread, Ctrl-C's note, and the grid options of compare, tune and reproduce (built and checked once, as
:class:`fbo_cli.grids.executors.GridOptions`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..errors import UsageError

err = Console(stderr=True, markup=False)  # user text (names, settings, paths) is never markup
out = Console(markup=False)


def wide_console() -> Console:
    """stdout; piped (not a terminal), with no width limit, so names and file names are never cut
    (fbo list | grep)."""
    return out if out.is_terminal else Console(width=100_000, markup=False)


def print_table(t, console: Console | None = None) -> None:
    """A table on stdout: drawn to fit the terminal; in a pipe or a file, plain rows instead (the title, then the
    header and one line per row, cells separated by tabs), so that no name is wrapped or cut (fbo cost | cat,
    fbo list | grep)."""
    con = console or out
    if con.is_terminal:
        con.print(t)
        return
    cols = [[str(c) for c in col.cells] for col in t.columns]
    lines = [str(t.title)] if t.title else []
    lines.append("\t".join(str(col.header) for col in t.columns))
    lines += ["\t".join(" ".join(cell.split()) for cell in row) for row in zip(*cols)]
    lines += [str(t.caption)] if t.caption else []
    con.file.write("\n".join(lines) + "\n")  # as written: a console would expand the tabs


@contextlib.contextmanager
def user_errors():
    """Turn a :class:`UsageError` into a one-line message and exit code 2."""
    try:
        yield
    except UsageError as e:
        from rich.markup import escape

        err.print(f"[bold red]Error:[/bold red] {escape(str(e))}", markup=True, highlight=False)  # '[ray]' stays
        raise typer.Exit(2) from None
    except Exception as x:  # the machine, not the input: a full disk, a quota, a read-only file system, also
        e = _machine_error(x)  # where a library failed in its turn while handling it (matplotlib's PDF writer)
        if e is None:
            raise
        err.print(Text.assemble(("Error: ", "bold red"), f"{e.strerror or e}{f' ({e.filename})' if e.filename else ''}"
                                "; nothing half-written stays: free some space and run the same command again "
                                "(finished runs are reused, partial ones resume from their last checkpoint)"),
                  highlight=False)
        raise typer.Exit(1) from None


def path_errors(fn):
    """A command whose input names a path the file system cannot hold (a 300-byte folder name: ENAMETOOLONG, or a
    loop of links: ELOOP) or may not change (EACCES, EPERM: a read-only or ``chattr +i`` folder) anywhere in it:
    exit 2 naming the path, never a traceback, whichever line met it."""
    import errno
    import functools

    why = {errno.ENAMETOOLONG: "a name longer than the file system allows: name another path",
           errno.ELOOP: "a loop of symbolic links: name another path",
           errno.EACCES: "not allowed here (permissions, or an immutable file): name another folder",
           errno.EPERM: "not allowed here (permissions, or an immutable file): name another folder"}

    @functools.wraps(fn)
    def command(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OSError as e:
            if e.errno not in why:
                raise
            from ..files import short

            bad = UsageError(f"{short(e.filename or '')}: {e.strerror} ({why[e.errno]})", kind="bad_path",
                             path=e.filename, value=e.errno)
        with user_errors():  # printed and exit 2 as every UsageError
            raise bad

    return command


def _machine_error(x: BaseException | None) -> OSError | None:
    """The full disk, quota, read-only file system or I/O error behind ``x``: ``x`` itself or an exception it was
    raised while handling (its ``__cause__``/``__context__`` chain); None when there is none."""
    import errno

    seen = set()
    while x is not None and id(x) not in seen:
        if isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
            return x
        seen.add(id(x))
        x = x.__cause__ or x.__context__
    return None


def threads_first() -> None:
    """One torch CPU thread before any torch work in this process, as a grid's workers do (each run then sets
    its own ``threads``): the first setting decides the last bits of a run (docs/fidelity.md,
    Reproducibility), so a run made here is the same run as in a worker."""
    import torch

    torch.set_num_threads(1)
    _term_as_ctrl_c()


def _term_as_ctrl_c() -> None:
    """SIGTERM (a scheduler's stop, `kill`) ends a command as Ctrl-C does, with its message and exit 130,
    also between runs (a run in progress writes its checkpoint either way)."""
    import signal
    import threading

    def stop(signum, frame):
        from ..errors import Terminated

        raise Terminated

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def interrupted_note(e: KeyboardInterrupt) -> str:
    """What Ctrl-C left: the Ray executor says which runs came home; the runner of the other executors
    writes each run's checkpoint on SIGINT."""
    return str(e) if str(e) else ("interrupted: the runs in progress wrote their checkpoints; run the "
                                          "same command again to continue")



def grid_options(jobs: int, executor: str | None = None, address: str | None = None, cpus_per_run: int = 1,
                 gpus_per_run: float = 0.0, batch: str = "auto"):
    """The grid options of the command line, checked (a :class:`UsageError` naming the option)."""
    from ..grids.executors import GridOptions

    return GridOptions(jobs=jobs, executor=executor, address=address, cpus_per_run=cpus_per_run,
                       gpus_per_run=gpus_per_run, batch=batch)


def grid_overrides(set_: list[str] | None, out_dir: Path | None, data_dir: Path | None) -> dict[str, Any]:
    """The ``--set`` keys plus ``--out-dir``/``--data-dir`` of compare and tune, for every run of a grid."""
    from ..runs.config import parse_sets

    overrides = parse_sets(set_)
    if out_dir:
        overrides["out_dir"] = str(out_dir)
    if data_dir:
        overrides["data_dir"] = str(data_dir)
    return overrides


def ignored_note(exp) -> None:
    """Say which algorithms of a spec ignore a --set key, or a key of a setting, they do not have (stderr)."""
    said = [(f"--set {k}", names) for k, names in exp.ignored.items()]
    said += [(f"setting '{s}': {k}", names) for s, ign in exp.setting_ignored.items() for k, names in ign.items()]
    for what, names in said:
        err.print(f"{what}: applies to {', '.join(a['name'] for a in exp.algorithms if a['name'] not in names)}; "
                  f"ignored by {', '.join(names)} (no such key)", highlight=False)


JOBS_HELP = ("Runs in parallel (processes; with --executor ray on a local Ray: the CPUs it starts with); auto: on a "
             "CUDA GPU the processes its memory holds (lanes sharing it), else one per CPU core.")
EXECUTOR_HELP = "serial | processes | ray. \\[default: serial for --jobs 1, else processes]"
ADDRESS_HELP = "Ray cluster to join: auto or HOST:PORT. \\[default: a local Ray]"

# the options fbo compare and fbo tune share: how a grid runs, and where
def _jobs(value) -> int:
    from ..grids.executors.common import parse_jobs

    try:
        jobs = parse_jobs(value)
    except UsageError as e:
        raise typer.BadParameter(str(e)) from None
    if jobs > MAX_JOBS:
        raise typer.BadParameter(f"at most {MAX_JOBS} processes, got {jobs}")
    return jobs


MAX_JOBS = 4096  # more processes than any one machine (or local Ray) runs: a typo, refused before anything starts


Jobs = Annotated[int, typer.Option("--jobs", "-j", help=JOBS_HELP, parser=_jobs, metavar="N|auto")]
Executor = Annotated[Optional[str], typer.Option(help=EXECUTOR_HELP)]
Address = Annotated[Optional[str], typer.Option(help=ADDRESS_HELP)]
CpusPerRun = Annotated[int, typer.Option(help="Ray: CPUs per run (its torch threads).")]
GpusPerRun = Annotated[float, typer.Option(help="Ray: GPUs per run.")]
BatchOpt = Annotated[str, typer.Option(help="Run batches: auto | off | R. Runs of one algorithm and seed that differ "
                                       "only in float hyperparameters step together in one process, each run's "
                                       "numbers as alone (fbo_cli/grids/run_batches.py); "
                                       "auto: up to 16 where the algorithm "
                                       "batches.")]
OutDir = Annotated[Optional[Path], typer.Option(help="Results root. \\[default: results]")]
DataDir = Annotated[Optional[Path], typer.Option(help="Dataset directory. \\[default: data]")]
