"""``fbo clean``: what interrupted work left behind."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UsageError
from .common import out, user_errors


def clean(
    out_dir: Path = typer.Option(Path("results"), help="Results root to clean (one fbo made: it holds .fbo-results)."),
    yes: bool = typer.Option(False, "--yes", help="Remove what is listed. Without it nothing is removed."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would go; remove nothing (the default "
                                 "without --yes)."),
    temp: bool = typer.Option(False, "--temp", help="Clean the system's temporary folder instead of a results "
                              "root: the scratch folders of killed commands and Ray workers (fbo-report-*, "
                              "fbo-mnist-*, fbo-ray-*) that hold fbo's token."),
) -> None:
    """List, then with --yes remove, what interrupted work left behind and nothing else: temporary files of
    atomic writes (.NAME.XXXXXXXX.fbo-tmp), .lock files of fbo's nobody holds, the scratch folders of killed
    commands (.fbo-figures-PID-*) and the folders removing them leaves empty, inside a results root fbo made.
    With --temp instead, in the system's temporary folder: the scratch folders of killed Ray workers
    (fbo-ray-PID-*) and commands (fbo-report-PID-*, fbo-mnist-PID-*). Either way, the Ray processes of a local
    Ray that fbo started and whose driver was killed (never a `ray start` cluster). A scratch folder goes only when it
    holds fbo's token (its process's pid and start time), that process is gone and nothing in it predates the
    token: a folder merely named like one stays. Finished and partial runs (checkpoints), links and every file
    fbo did not make stay."""
    import tempfile

    from ..files import stale_scratch_folders
    from ..grids.executors import orphaned_ray, reap_orphaned_ray
    from ..runs.rundir import ROOT_MARKER, is_fbo_root, leftovers, remove_leftover

    go = yes and not dry_run
    where = f"the temporary folder {tempfile.gettempdir()}" if temp else str(out_dir)
    with user_errors():
        if temp:
            found = stale_scratch_folders()
        else:
            if not out_dir.is_dir():
                raise UsageError(f"--out-dir: no results folder at {out_dir}", kind="not_found", field="--out-dir",
                                 path=out_dir)
            if not is_fbo_root(out_dir):
                raise UsageError(f"{out_dir} is not a results root fbo made (it has no {ROOT_MARKER}): nothing "
                                 f"removed. A results root of an older fbo: create {out_dir / ROOT_MARKER} by "
                                 f"hand once you are sure every file in it is fbo's", kind="not_fbos", path=out_dir)
            found = leftovers(out_dir)
    for p in found:
        typer.echo(f"{'removed' if go else 'would remove'} {p}{'/' if p.is_dir() else ''}")
        if go:
            remove_leftover(p)
    procs = reap_orphaned_ray() if go else orphaned_ray()
    for pid, name, rss in procs:
        typer.echo(f"{'stopped' if go else 'would stop'} Ray process {pid} {name} ({rss // 1024} MB), left by a "
                   f"local Ray that fbo started and whose driver was killed")
    n = len(found) + len(procs)
    out.print(f"{len(found)} leftover(s) in {where}"
              + f" and {len(procs)} orphaned Ray process(es) {'removed' if go else 'found'}"
              + ("" if go or not n else f"; `fbo clean{' --temp' if temp else ''} --yes` removes them"),
              markup=False, highlight=False)
