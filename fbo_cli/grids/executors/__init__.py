"""Where the runs of a grid execute: ``serial`` (this process), ``processes`` (a local process pool,
``--jobs``) or ``ray`` (Ray tasks on a local Ray started on demand, or on a cluster).

One call, :func:`run_cells`, used by ``fbo compare``, ``fbo tune`` and ``fbo reproduce``. Each executor implements
one interface (:class:`Executor`: ``submit``, ``results``, ``cancel``, ``close``; :mod:`.local`, :mod:`.raygrid`),
and one driver (:func:`fbo_cli.grids.executors.driver.drive`) owns the rest: the units handed over as work, the
second pass, the retry of a work whose worker died, the bars, the line per run and interruption. Every executor
runs the same
:func:`fbo_cli.runs.runner.execute` on the same config, so choosing one never changes a number (a run's
torch threads are the CPUs it holds unless the config sets ``threads``; set it to pin them).

Each run holds its run directory's lock (``.lock``) while it runs, so two processes never run the
same run at once: a run locked by another process is left for the end of the grid, then waited
for and reused when the other process finished it (or run, when it did not).

Run batches: the runs of a grid that may step together (:func:`fbo_cli.grids.run_batches.group_batches`,
``--batch``) are one task of every executor (a process, a Ray task),
:func:`fbo_cli.grids.run_batches.execute_batch`; each run's directory is written as the run alone writes it.

Ray: the worker runs in a temporary ``out_dir`` on its node and returns the run directory's files
(bytes) to the driver, which writes them atomically into the real run directory, ``summary.json``
last; a partial run's checkpoint travels to the worker the same way. No shared file system is
needed; the driver holds the run's lock while its task is in flight. A task whose worker dies is
retried once (the driver's retry, as for a process of the pool), then recorded as failed.

Ray under interruption: Ctrl-C (a flag the driver reads between its one-second waits, never an exception
raised inside Ray) cancels the tasks in flight gently (Ray delivers SIGINT to the worker,
whose run writes its checkpoint and returns), waits for them, and lands each checkpoint in its run
directory; :class:`GridInterrupted` then says which runs came home and which were lost (a second
Ctrl-C, or a worker that does not answer in time). The worker's temporary folder
(``fbo-ray-<pid>-*``, holding fbo's token) goes on every exit path of the task; the folders of workers that
were killed outright are removed by ``fbo clean --temp`` (no task sweeps the temporary folder).
A local Ray whose driver was killed (``kill -9``)
leaves agents behind that ignore SIGTERM; the next local start reaps them (:func:`reap_orphaned_ray`),
and says so, as ``fbo clean --yes`` does. Only a session fbo itself started is ever reaped: the driver
writes ``fbo-driver`` (its pid and start time) into the session folder of the local Ray it starts, and
the reaper acts only on processes whose session folders all carry that mark and whose driver is gone; a
cluster of ``ray start --head`` (no mark) is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...errors import UsageError
from .common import CellLike, Executor, GridInterrupted, Work  # noqa: F401  (the executors' API)
from .driver import drive
from .raygrid import RAY_HINT, import_ray, mark_session, orphaned_ray, reap_orphaned_ray  # noqa: F401

EXECUTORS = ("serial", "processes", "ray")


@dataclass(frozen=True)
class GridOptions:
    """How a grid's runs execute (``fbo compare``, ``fbo tune``, ``fbo reproduce``): built and checked once,
    when made (a :class:`UsageError` naming the option), then passed down to :func:`run_cells`."""

    jobs: int = 1  # runs in parallel
    executor: str | None = None  # serial | processes | ray; None: serial for one job, else processes
    address: str | None = None  # Ray: the cluster to join (auto, HOST:PORT, ray://HOST:PORT); None: a local Ray
    cpus_per_run: int = 1  # Ray: CPUs per run (its torch threads)
    gpus_per_run: float = 0.0  # Ray: GPUs per run
    batch: str | int = "auto"  # run batches (fbo_cli/grids/run_batches.py): auto | off | R runs
    # stepped together in one task

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {self.jobs}", kind="bad_value", field="--jobs", value=self.jobs)
        if self.executor is not None and self.executor not in EXECUTORS:
            raise UsageError(f"--executor must be one of {', '.join(EXECUTORS)}, got '{self.executor}'",
                             kind="unknown", field="--executor", value=self.executor)
        if (self.address or self.cpus_per_run != 1 or self.gpus_per_run) and self.executor != "ray":
            raise UsageError("--address, --cpus-per-run and --gpus-per-run go with --executor ray",
                             kind="unsupported", field="--executor", value=self.executor)
        if self.cpus_per_run < 1 or not self.gpus_per_run >= 0:
            raise UsageError(f"--cpus-per-run must be >= 1 and --gpus-per-run >= 0, got {self.cpus_per_run}, "
                             f"{self.gpus_per_run}",
                             kind="bad_value", field="--cpus-per-run" if self.cpus_per_run < 1 else "--gpus-per-run")
        a = self.address
        if a and a != "auto" and not a.startswith("ray://"):
            host, _, port = a.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise UsageError(f"--address must be HOST:PORT (the head node's GCS, e.g. 10.0.0.5:6379), "
                                 f"ray://HOST:PORT or auto; got '{a}'",
                                 kind="bad_value", field="--address", value=self.address)
        from ..run_batches import parse_batch

        object.__setattr__(self, "batch", parse_batch(self.batch))
        if self.executor == "ray":
            import_ray()

    def check_cluster(self) -> None:
        """The cluster of ``--address`` answers as Ray: called once a grid has runs to do and before it writes
        anything (its spec's folder claimed, a partial tuning), so that a wrong address leaves no trace (a later
        spec file of that name would otherwise find the folder taken). A Ray already started here is joined as
        is, and ``ray://`` is left to Ray."""
        if self.executor == "ray" and self.address and not self.address.startswith("ray://"):
            from .raygrid import checked_address

            ray = import_ray()
            if not ray.is_initialized():
                checked_address(ray, self.address)

    @property
    def runner(self) -> str:
        """The executor that runs the grid: the one named, else serial for one job and processes for more."""
        return self.executor or ("serial" if self.jobs == 1 else "processes")


def run_cells(cells: Sequence[CellLike], grid: GridOptions | None = None, console=None, rerun: bool = False,
              title: str = "runs", **options) -> list[dict[str, Any]]:
    """Run ``cells`` (anything with ``cfg``, ``layers``, ``algorithm``, ``setting``, ``seed``) as ``grid``
    says (or :class:`GridOptions` of ``options``), compatible runs stepped together as run batches
    (``grid.batch``; :mod:`fbo_cli.grids.run_batches`); returns one summary per cell, in order (``status``: done,
    diverged, failed or interrupted; ``error`` for failed). Finished runs are reused unless ``rerun``;
    partial runs resume from their checkpoint (``rerun`` starts them again)."""
    from .. import run_batches as batching

    g = grid or GridOptions(**options)
    units = batching.group_batches([c.cfg for c in cells], g.batch)
    return drive(cells, units, executor(g, console), console, rerun, title)


def executor(g: GridOptions, console=None) -> Executor:
    """The executor ``g`` names (:attr:`GridOptions.runner`; processes of one job run serially)."""
    from .local import Processes, Serial

    if g.runner == "ray":
        from .raygrid import Ray

        return Ray(g.address, g.cpus_per_run, g.gpus_per_run, g.jobs, console)
    return Serial() if g.runner == "serial" or g.jobs == 1 else Processes(g.jobs)
