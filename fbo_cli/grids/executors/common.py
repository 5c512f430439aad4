"""What every executor shares: the interface (:class:`Executor`, :class:`Work`), the grid's cells, their labels,
and one unit (a run, or a batch) run in this process."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Protocol, Sequence

from ...errors import UsageError


def parse_jobs(jobs: str | int) -> int:
    """``--jobs``: a number of processes (the commands check it is positive), or ``auto``: on a CUDA GPU the processes
    that share it (lanes) as its memory holds them (:func:`fbo_cli.runs.cost.gpu_lanes`: 1.75 GB each, measured
    with Table 2's runs in batches of up to 3, at most one per CPU core), else one per CPU core."""
    import os

    s = str(jobs).strip().lower()
    if s == "auto":
        import torch

        cpus = os.cpu_count() or 1
        if torch.cuda.is_available():
            from ...runs.cost import gpu_lanes

            return gpu_lanes(torch.cuda.get_device_properties(0).total_memory, cpus)
        return cpus
    try:
        return int(s)
    except ValueError:
        raise UsageError(f"--jobs must be auto or a number of processes; got {jobs!r}",
                         kind="bad_value", field="--jobs", value=jobs) from None


class GridInterrupted(KeyboardInterrupt):
    """Ctrl-C during a Ray grid; ``str()`` says truthfully what became of the runs in flight."""


class CellLike(Protocol):  # compare.Cell
    algorithm: str
    setting: str
    seed: int
    cfg: Any
    layers: tuple


def label(c: CellLike) -> str:
    return f"{c.algorithm} · {c.setting} · seed {c.seed}"


@dataclass(frozen=True)
class Work:
    """One task of an executor: a run, or a batch of runs stepped together (one process, one Ray task). ``key``
    is new at every submission (a retry is new work), so that a late report of an earlier try is never drawn."""

    key: int
    index: tuple[int, ...]  # the cells' places in the grid (the driver's list of summaries)
    cells: tuple[CellLike, ...]
    rerun: bool  # start the runs again (``--rerun``, first pass only)
    wait: bool  # wait for a run's lock that another process holds (second pass), else the run is busy

    @property
    def label(self) -> str:
        c0 = self.cells[0]
        return label(c0) if len(self.cells) == 1 else f"{c0.algorithm} · batch of {len(self.cells)}"

    def part(self, ks: Sequence[int]) -> Work:
        """The same work for the runs at positions ``ks`` of it."""
        return replace(self, index=tuple(self.index[k] for k in ks), cells=tuple(self.cells[k] for k in ks))


class Listener(Protocol):
    """What an executor tells the driver while it works (the driver draws it)."""

    def rounds(self, work: Work, done: int) -> None:
        """``work`` has ``done`` rounds behind it (0: it started)."""

    def say(self, message: str) -> None:
        """A line for the user, above the bars."""


class Executor:
    """Where the runs of a grid execute: :meth:`submit` hands it work, :meth:`results` yields each work as it
    ends with one summary per run (``None``: its worker died under it; the driver retries it once) until
    nothing it was handed is left; :meth:`cancel` stops everything (the first Ctrl-C or SIGTERM: the queued work
    and the work already handed over) and may say what became of the runs in flight (then the grid ends with
    :class:`GridInterrupted` saying it); leaving the ``with`` block closes it. One driver,
    :func:`fbo_cli.grids.executors.driver.drive`, owns all else: batching, the second pass, the retry, the bars
    and the reports."""

    suffix = ""  # after the title of the overall bar
    says_resume = True  # the driver says that a run resumed (False: the runs log to this console themselves)
    afresh = "again"  # where a work whose worker died goes on
    listener: Listener

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, work: Work) -> None:
        raise NotImplementedError

    def results(self) -> Iterator[tuple[Work, list[dict[str, Any]] | None]]:
        raise NotImplementedError

    def cancel(self, why: BaseException) -> str | None:
        return None

    def close(self) -> None:
        pass


def _one(cfg, rerun: bool, wait: bool, on_eval=None, log=None) -> dict[str, Any]:
    from ...runs.runner import Interrupted, RunBusy, execute

    try:
        return execute(cfg, on_eval=on_eval, reuse=not rerun, fresh=rerun, wait=wait, log=log)
    except RunBusy:
        return {"status": "busy"}
    except Interrupted as e:
        return {"status": "interrupted", "error": str(e)}
    except UsageError as e:
        return {"status": "failed", "error": str(e)}
    except Exception as e:  # a bug: recorded in the run's summary.json; the grid goes on
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


def _one_batch(cfgs, rerun: bool, wait: bool, on_eval=None, log=None) -> list[dict[str, Any]]:
    """:func:`_one` for the runs of a batch (:func:`fbo_cli.grids.run_batches.execute_batch`): one summary per run."""
    from ...runs.runner import Interrupted
    from ..run_batches import execute_batch

    try:
        return execute_batch(cfgs, reuse=not rerun, fresh=rerun, wait=wait, log=log, on_eval=on_eval)
    except Interrupted as e:
        return [{"status": "interrupted", "error": str(e)}] * len(cfgs)
    except UsageError as e:
        return [{"status": "failed", "error": str(e)}] * len(cfgs)
    except Exception as e:  # a bug: recorded in each run's summary.json; the grid goes on
        return [{"status": "failed", "error": f"{type(e).__name__}: {e}"}] * len(cfgs)


def run_unit(cfgs: Sequence, rerun: bool, wait: bool, rounds: Callable[[int], None] | None = None,
             log=None) -> list[dict[str, Any]]:
    """A unit of work in this process (every executor's worker calls it): one run alone, or a batch; one summary
    per run, never an exception (a failure is a summary). ``rounds`` hears the rounds done at each evaluation (a
    batch's first run speaks for it)."""
    if len(cfgs) == 1:
        return [_one(cfgs[0], rerun, wait, rounds and (lambda row: rounds(int(row["rounds"]))), log)]
    return _one_batch(cfgs, rerun, wait, rounds and (lambda k, row: k == 0 and rounds(int(row["rounds"]))), log)
