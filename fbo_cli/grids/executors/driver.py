"""The one driver of every executor: the grid's units handed over as work, the second pass (the runs another
process held, waited for), the retry of a work whose worker died, the bars (a bar of rounds per work in flight,
the overall bar and its time left), the line per run, interruption, and the list of summaries."""

from __future__ import annotations

import itertools
from typing import Any, Sequence

from .common import CellLike, Executor, GridInterrupted, Work, label


def progress(console):
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


def overall_count(prog, overall, out: list, inflight: dict) -> None:
    """The overall bar's count: the runs finished plus the share of each work in flight that is done (its rounds
    over its budget, times its runs), so that its count moves and its time left is estimated from the runs'
    rounds while they run, not only from their ends (three runs on two jobs have no end for a long while)."""
    done = sum(1 for s in out if s is not None and s["status"] != "busy")
    prog.update(overall, completed=done + sum(inflight.values()))


def report(prog, overall, c: CellLike, s: dict[str, Any], say_resume: bool = False) -> None:
    """A run's end: its line when it failed (or resumed, where its own log did not say so), the overall count."""
    if s["status"] == "failed":
        from rich.text import Text

        prog.console.print(Text(f"{label(c)}: failed: {s.get('error')}", style="red"), highlight=False)
    elif say_resume and s.get("resumed_from_iteration") is not None and not s.get("reused"):
        prog.console.print(f"{label(c)}: resumed from its checkpoint at outer iteration "
                           f"{s['resumed_from_iteration']}", markup=False, highlight=False)
    prog.update(overall, advance=1, info=f"last: {c.algorithm} · {c.setting} · s{c.seed}: {s['status']}")


class _Grid:
    """A grid in flight: its summaries so far, its bars, and its executor's work."""

    def __init__(self, cells: Sequence[CellLike], ex: Executor, prog, title: str):
        self.cells, self.ex, self.prog = cells, ex, prog
        self.out: list[dict[str, Any] | None] = [None] * len(cells)
        self.overall = prog.add_task(title + ex.suffix, total=len(cells), info="")
        self.bars: dict[int, int] = {}  # work key -> its bar of rounds, from its first report to its end
        self.inflight: dict[int, float] = {}  # work key -> the runs' worth of it done (the overall count)
        self.deaths: dict[tuple, int] = {}  # how often a unit's worker died under it
        self.keys = itertools.count()

    def say(self, message: str) -> None:
        self.prog.console.print(message, markup=False, highlight=False)

    def rounds(self, w: Work, done: int) -> None:
        total = w.cells[0].cfg.run.rounds
        if w.key not in self.bars:
            self.bars[w.key] = self.prog.add_task(w.label, total=total, info="rounds")
        self.prog.update(self.bars[w.key], completed=min(done, total))
        self.inflight[w.key] = min(done, total) / total * len(w.cells)
        overall_count(self.prog, self.overall, self.out, self.inflight)

    def run(self, units: Sequence[Sequence[int]], rerun: bool) -> None:
        """Every unit, then (second pass) the runs another process held, waiting for their locks: one of them
        finished by the other process is reused, not run again (``rerun`` holds for the first pass only)."""
        for wait in (False, True):
            todo = [u for u in ([i for i in unit if self._open(i)] for unit in units) if u]
            while todo:  # a work whose worker died goes on once more
                for u in todo:
                    self.ex.submit(Work(next(self.keys), tuple(u), tuple(self.cells[i] for i in u), rerun and not wait,
                                        wait))
                todo = self._collect()

    def _open(self, i: int) -> bool:
        return self.out[i] is None or self.out[i]["status"] == "busy"

    def _collect(self) -> list[tuple[int, ...]]:
        """The executor's results as they come; returns the units whose worker died for the first time."""
        again = []
        for w, res in self.ex.results():
            bar = self.bars.pop(w.key, None)
            if bar is not None:
                self.prog.remove_task(bar)
            if self.inflight.pop(w.key, None) is not None:
                overall_count(self.prog, self.overall, self.out, self.inflight)  # its runs are counted whole below
            if res is None:  # its worker died (the OOM killer, kill -9, the user's code ending it)
                self.deaths[w.index] = self.deaths.get(w.index, 0) + 1
                if self.deaths[w.index] < 2:
                    again.append(w.index)
                    continue
                src = w.cells[0].cfg.source.rpartition(":")[0]
                res = [{"status": "failed", "error": "its worker process died twice (killed: out of memory? kill -9?"
                        + (f"; or {src}, the user's code it was running, ended it (os._exit?)" if src else "")
                        + "); run the same command again to resume it from its checkpoint"}] * len(w.cells)
            for i, s in zip(w.index, res, strict=True):
                self.out[i] = s
                if s["status"] == "interrupted":
                    raise KeyboardInterrupt
                if s["status"] != "busy":
                    report(self.prog, self.overall, self.cells[i], s, say_resume=self.ex.says_resume)
        if again:
            users = sorted({self.cells[u[0]].cfg.source.rpartition(":")[0] for u in again} - {""})
            self.prog.console.print(f"a worker process died: {len(again)} task(s) in flight go on {self.ex.afresh} "
                                    f"(a run whose worker dies twice is counted as failed)"
                                    + (f"; it ran user code: {', '.join(users)}" if users else ""), highlight=False)
        return again


def drive(cells: Sequence[CellLike], units: Sequence[Sequence[int]], ex: Executor, console=None, rerun: bool = False,
          title: str = "runs") -> list[dict[str, Any]]:
    """Run ``cells`` on ``ex``, ``units`` (lists of the cells' places: a run, or a batch) each one work; one summary
    per cell, in order. The first Ctrl-C or SIGTERM (or a run that says it was interrupted) cancels the executor's
    work, queued and in flight; where the executor says what became of the runs in flight, the grid ends with
    :class:`GridInterrupted` saying it, else with the interruption itself."""
    with ex, progress(console) as prog:
        grid = _Grid(cells, ex, prog, title)
        ex.listener = grid
        try:
            grid.run(units, rerun)
        except BaseException as e:
            said = ex.cancel(e)
            if said is not None:
                raise GridInterrupted(said) from None
            raise
    return grid.out  # type: ignore[return-value]
