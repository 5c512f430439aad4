"""The one driver of the executors (``grids/executors/driver.py``): the second pass, the retry of a work whose
worker died, interruption and the list of summaries, checked on a scripted executor (no process, no Ray)."""

from types import SimpleNamespace

import pytest

from fbo_cli.grids.executors import Executor, GridInterrupted
from fbo_cli.grids.executors.driver import drive


def _cells(n):
    run = SimpleNamespace(rounds=10)
    return [SimpleNamespace(algorithm="A", setting="s", seed=k, layers=(), cfg=SimpleNamespace(run=run, source=""))
            for k in range(n)]


class Scripted(Executor):
    """Answers each work with ``answer(work)``: a list of summaries, or None (its worker died)."""

    def __init__(self, answer, said=None):
        self.answer, self.said, self.queue, self.seen, self.cancelled = answer, said, [], [], []

    def submit(self, work):
        self.seen.append(work)
        self.queue.append(work)

    def results(self):
        while self.queue:
            w = self.queue.pop(0)
            self.listener.rounds(w, 5)
            yield w, self.answer(w)

    def cancel(self, why):
        self.cancelled.append(why)
        return self.said


def test_busy_runs_are_run_in_a_second_pass_that_waits_and_reuses():
    ex = Scripted(lambda w: [{"status": "done" if w.wait else "busy"} if i == 1 else {"status": "done"}
                             for i in w.index])
    out = drive(_cells(3), [[0], [1], [2]], ex, rerun=True)
    assert [s["status"] for s in out] == ["done"] * 3
    second = [w for w in ex.seen if w.wait]
    assert [w.index for w in second] == [(1,)] and not second[0].rerun  # --rerun holds for the first pass only
    assert all(w.rerun and not w.wait for w in ex.seen[:3])


def test_a_work_whose_worker_died_is_retried_once_then_failed():
    ex = Scripted(lambda w: None if w.index == (0, 1) else [{"status": "done"}] * len(w.index))
    out = drive(_cells(3), [[0, 1], [2]], ex)
    assert [s["status"] for s in out] == ["failed", "failed", "done"]
    assert "died twice" in out[0]["error"]
    tries = [w for w in ex.seen if w.index == (0, 1)]
    assert len(tries) == 2 and tries[0].key != tries[1].key  # a retry is new work


def test_an_interrupted_run_cancels_the_executor_and_ends_the_grid():
    ex = Scripted(lambda w: [{"status": "interrupted"}])
    with pytest.raises(KeyboardInterrupt) as e:
        drive(_cells(2), [[0], [1]], ex)
    assert type(e.value) is KeyboardInterrupt and len(ex.cancelled) == 1 and len(ex.seen) == 2


def test_what_the_executor_says_of_the_runs_in_flight_ends_the_grid():
    ex = Scripted(lambda w: [{"status": "interrupted"}], said="interrupted: 1 run(s) came home")
    with pytest.raises(GridInterrupted, match="came home"):
        drive(_cells(1), [[0]], ex)
