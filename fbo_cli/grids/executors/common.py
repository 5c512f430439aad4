"""What every executor shares: the grid's cells, their progress display, one run or one batch in this process."""

from __future__ import annotations

from typing import Any, Protocol

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
        raise UsageError(f"--jobs must be auto or a number of processes; got {jobs!r}") from None


class GridInterrupted(KeyboardInterrupt):
    """Ctrl-C during a Ray grid; ``str()`` says truthfully what became of the runs in flight."""


class CellLike(Protocol):  # compare.Cell
    algorithm: str
    setting: str
    seed: int
    cfg: Any
    layers: tuple


def _label(c: CellLike) -> str:
    return f"{c.algorithm} · {c.setting} · seed {c.seed}"


def _progress(console):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column

    # the bar, the count and the times keep their room at 80 columns; the last run's note comes last and
    # is cut first (never wrapped)
    keep = lambda w: Column(no_wrap=True, min_width=w)  # noqa: E731
    cut = lambda w: Column(no_wrap=True, overflow="ellipsis", max_width=w)  # noqa: E731
    return Progress(TextColumn("{task.description}", style="bold", markup=False, table_column=cut(24)),
                    BarColumn(bar_width=16, table_column=keep(16)), MofNCompleteColumn(table_column=keep(7)),
                    TimeElapsedColumn(table_column=keep(7)), TextColumn("left", table_column=keep(4)),
                    TimeRemainingColumn(table_column=keep(7)),
                    TextColumn("{task.fields[info]}", markup=False, table_column=cut(40)),
                    console=console)


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


def _report(prog, overall, c, s, say_resume: bool = False) -> None:
    if s["status"] == "failed":
        from rich.text import Text

        prog.console.print(Text(f"{_label(c)}: failed: {s.get('error')}", style="red"), highlight=False)
    elif say_resume and s.get("resumed_from_iteration") is not None and not s.get("reused"):
        prog.console.print(f"{_label(c)}: resumed from its checkpoint at outer iteration "
                           f"{s['resumed_from_iteration']}", markup=False, highlight=False)
    prog.update(overall, advance=1, info=f"last: {c.algorithm} · {c.setting} · s{c.seed}: {s['status']}")


# --------------------------------------------------------------------------------------------------
# processes


