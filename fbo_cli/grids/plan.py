"""A grid's plan, made once: for each run directory of an experiment's cells, its state (read once, through
:meth:`fbo_cli.runs.rundir.RunDir.state`), what the reuse check says of it (to run, reused or resumed; stale and
why, :func:`fbo_cli.runs.todo.verdict`), its budget, and what running the rest costs; with the notes the user
is shown about code (stale runs, drift of fbo's own classes, a tuning made by other code).

``fbo compare`` (its run and its ``--dry-run``), ``fbo tune``, ``fbo cost``, ``fbo reproduce`` and the settling
look all ask the plan instead of working these out each their own way. The plan is a query: it writes nothing.
Accepting a code change (``--accept-code-change``) is :meth:`Plan.accept`, a step its caller takes. After the
runs, :meth:`Plan.record` takes the executors' summaries, so that the report (:func:`fbo_cli.grids.compare.collect`)
reads no run directory this command has read before (:meth:`Plan.states`). The plan's pass starts with the
spec's checks that need a build (:func:`check_metrics`: every (algorithm, setting) builds, the metrics are its
columns), so that bad input fails, named, before any run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import UsageError
from ..runs.identity import changes, user_code
from ..runs.rundir import ENDINGS, RunDir, RunState
from ..runs.todo import Verdict, accept_change, verdict


@dataclass
class Entry:
    """One run directory of the plan: the first cell that names it, its state as read, the reuse check's
    verdict, and (after the runs, :meth:`Plan.record`) its state as the executor left it."""

    cell: Any
    run: RunDir
    state: RunState
    verdict: Verdict
    rerun: bool = False
    after: RunState | None = None  # the completion record the executor returned (None: read it afresh)

    @property
    def todo(self) -> bool:
        return self.verdict.todo

    @property
    def stale(self) -> str | None:
        return self.verdict.stale

    @property
    def resumed(self) -> bool:
        """To run from its checkpoint (a partial run, not ``--rerun``)."""
        return self.todo and not self.rerun and self.state.state == "partial"

    @property
    def reused(self) -> bool:
        return not self.todo

    @property
    def rounds(self) -> int:
        """Its budget in communication rounds (:attr:`iterations`: in outer iterations, None where unbounded)."""
        return self.cell.cfg.run.rounds

    @property
    def iterations(self) -> int | None:
        return self.cell.cfg.run.max_iters


@dataclass
class Plan:
    """An experiment's cells and one :class:`Entry` per run directory (two rows of a grid may be the same run),
    in the cells' order; ``grid_notes``: what else the user is told before the runs (a tuning made by other
    code)."""

    cells: list
    entries: dict[Path, Entry]
    grid_notes: list[str] = field(default_factory=list)

    @property
    def todo(self) -> list:
        """The cells still to run, one per run directory."""
        return [e.cell for e in self.entries.values() if e.todo]

    @property
    def stale(self) -> dict[Path, str]:
        """``{run_dir: why}`` of the runs that run again because their user algorithm's code changed."""
        return {d: e.stale for d, e in self.entries.items() if e.todo and e.stale}

    def accept(self) -> int:
        """``--accept-code-change``: each stale run is kept, the acceptance recorded in its summary (or the run of
        the code before an edit adopted, :func:`fbo_cli.runs.todo.accept_change`); returns how many. The one step
        of a plan that writes."""
        stale = [e for e in self.entries.values() if e.todo and e.stale]
        for e in stale:
            e.state, e.verdict = accept_change(e.cell.cfg, e.state, e.verdict), Verdict(False)
        return len(stale)

    def code_notes(self) -> list[str]:
        """What the reuse check found about code (:mod:`fbo_cli.runs.identity`): each stale run and why, and how
        many reused runs were made by other code of fbo's own classes (drift: reported, not rerun)."""
        stale = self.stale
        lines = [f"{d}: {why}; it runs again (--accept-code-change keeps it)" for d, why in stale.items()]
        drift: dict[str, int] = {}
        for d, e in self.entries.items():
            if d not in stale and e.state.state == "finished":
                for k in changes(e.cell.cfg, e.state.summary)[1]:
                    drift[k] = drift.get(k, 0) + 1
        if drift:
            lines.append(f"{max(drift.values())} finished run(s) reused were made by other code of fbo's built-in "
                         f"classes ({', '.join(k.removeprefix('fbo_cli.') for k in sorted(drift))}): reused, not "
                         "rerun (`fbo check` tells whether such runs still reproduce; --rerun redoes them)")
        return lines

    def notes(self) -> list[str]:
        """Everything the user is told before the runs: :meth:`code_notes`, then the grid's notes."""
        return self.code_notes() + self.grid_notes

    def cost_line(self, jobs: int, batch: str | int = "auto") -> str:
        """How many runs are left and what they cost (:func:`todo_cost_line`)."""
        return todo_cost_line(self.todo, jobs, batch)

    def record(self, cells: Sequence, results: Sequence[dict]) -> None:
        """The executors' summaries of ``cells`` (:func:`fbo_cli.grids.executors.run_cells`): a completion record
        a run wrote in this command is its state from now on (its metrics.csv was hashed as it was written); any
        other outcome (failed before its summary, interrupted) leaves the directory to be read again."""
        for c, r in zip(cells, results, strict=True):
            e = self.entries.get(c.cfg.run_dir)
            if e is not None:
                e.after = finished_state(c.cfg.run_dir, r)

    def states(self) -> dict[Path, RunState]:
        """The state of each run directory as this command knows it without reading it again: a reused run's as
        the plan read it, a run made now as its executor returned it; runs to run that left no completion record
        are not in it (the report reads them)."""
        return {d: e.after or e.state for d, e in self.entries.items() if not e.todo or e.after is not None}


def finished_state(run_dir: Path, summary: Any) -> RunState | None:
    """The :class:`RunState` of a run an executor just finished, from the summary it returned, when that is the
    completion record written into ``run_dir`` (its own run id, an ending or a failure, the metrics' hash); else
    None."""
    if not isinstance(summary, dict) or "metrics_sha256" not in summary or summary.get("run_id") != Path(run_dir).name:
        return None
    if summary.get("status") not in (*ENDINGS, "failed"):
        return None
    return RunState("finished", {k: v for k, v in summary.items() if k != "reused"}, "")


def make_plan(cells: Sequence, rerun: bool = False, grid_notes: Sequence[str] = ()) -> Plan:
    """The plan of ``cells`` (objects with ``.cfg``): each run directory read once, in the cells' order. Writes
    nothing (:meth:`Plan.accept` does, when asked)."""
    entries: dict[Path, Entry] = {}
    for c in cells:
        d = c.cfg.run_dir
        if d not in entries:
            rd = RunDir(d)
            state = rd.state()
            entries[d] = Entry(c, rd, state, verdict(c.cfg, state, rerun), rerun)
    return Plan(list(cells), entries, list(grid_notes))


def plan_experiment(exp, rerun: bool = False) -> Plan:
    """The plan of an experiment (``fbo compare`` and its ``--dry-run``): the spec's checks the real run makes
    before it runs (its metrics are the runs' columns, every (algorithm, setting) builds:
    :func:`check_metrics`), then :func:`make_plan` of its cells with the note of a tuning made
    by other code (:func:`tuned_code_notes`)."""
    check_metrics(exp)
    return make_plan(exp.cells, rerun, tuned_code_notes(exp))


def tuned_code_notes(exp) -> list[str]:
    """A warning per user's algorithm whose code changed since ``tuned.yaml`` chose its values (its ``code``, the
    :func:`~fbo_cli.runs.identity.user_code` of the tuning): the plan's third note about code, after the stale
    runs and the drift of fbo's own classes (:meth:`Plan.code_notes`)."""
    then = (exp.tuned or {}).get("code") or {}
    now = user_code(exp.cells)
    out = []
    for a, h in then.items():
        if isinstance(h, dict) and a in now and h != now[a]:
            what = ", ".join(sorted(k for k in set(h) | set(now[a]) if h.get(k) != now[a].get(k)))
            out.append(f"tuned.yaml's choices for {a} were made by other code ({what} changed since the tuning): "
                       "run `fbo tune` again")
    return out


def check_metrics(exp, columns: set[str] | None = None) -> None:
    """The spec's ``metric``, ``metrics`` and ``x`` must be columns of the task's ``metrics.csv``. The
    columns come from ``columns`` or, by default, from one evaluation of the first run of each
    algorithm at its initial point (cheap: data loading and one evaluation), plus the metrics the
    algorithm declares that its steps add (``step_metrics``, e.g. ZO-HFL's ``global_loss``)."""
    if columns is None:
        from ..runs.runner import build
        from ..sim.federation import Ledger

        columns = set()
        # one build of every (algorithm, setting): bad input in any setting fails here, named, before any run,
        # wherever the setting stands in the grid
        firsts = {(c.algorithm, c.setting): c for c in reversed(exp.cells)}
        for (a, s), c in firsts.items():
            try:
                b = build(c.cfg)
            except UsageError as e:
                raise e.reworded(f"algorithm '{a}', setting '{s}': {e}") from None
            columns |= set(Ledger().as_dict()) | {"train_time"} | set(b.algo.evaluate()) | set(b.algo.step_metrics)
    for m in [exp.metric, *exp.metrics]:
        if m not in columns:
            raise UsageError(f"metric '{m}' is not a metric of task '{exp.task}' with these algorithms; "
                             f"choose from: {', '.join(sorted(columns))}", kind="unknown", field="metric", value=m)
    if exp.x not in columns:
        raise UsageError(f"x '{exp.x}' is not a column of task '{exp.task}'s metrics",
                         kind="unknown", field="x", value=exp.x)


def todo_cost_line(todo: Sequence, jobs: int, batch: str | int = "auto") -> str:
    """How many of ``todo`` are left and what they cost with ``jobs`` processes and ``--batch batch`` (the cost
    model, :func:`fbo_cli.runs.cost.cost_line`, with each run's share in its run batch,
    :func:`fbo_cli.grids.run_batches.cost_shares`): the one cost line of compare, tune and the settling look."""
    from ..runs.cost import cost_line
    from .run_batches import cost_shares

    return cost_line(list(todo), jobs, cost_shares(list(todo), batch))
