"""``GridOptions``: how a grid runs, built and checked once (compare, tune, reproduce, check)."""

import pytest

from fbo_cli.errors import UsageError
from fbo_cli.grids.executors import GridOptions


def test_the_executor_default_and_the_checks_live_in_one_place():
    assert GridOptions().runner == "serial" and GridOptions(jobs=2).runner == "processes"
    assert GridOptions(jobs=2, executor="serial").runner == "serial"
    for kw, msg in (({"jobs": 0}, "--jobs must be >= 1"), ({"executor": "slurm"}, "--executor must be one of"),
                    ({"address": "10.0.0.5:6379"}, "go with --executor ray"),
                    ({"cpus_per_run": 2}, "go with --executor ray")):
        with pytest.raises(UsageError, match=msg):
            GridOptions(**kw)


def test_a_pool_worker_reports_its_rounds_to_the_driver(tmp_path, monkeypatch):
    """--jobs > 1: the runs in the pool's processes report their rounds on the driver's queue, tagged with their
    pool and unit (the driver draws a bar of rounds per unit in flight, as the serial executor does); a batch's
    first run speaks for the batch."""
    import queue

    from fbo_cli.grids.executors import local
    from fbo_cli.runs.config import resolve

    q = queue.Queue()
    monkeypatch.setattr(local, "ROUNDS", q)
    monkeypatch.chdir(tmp_path)
    layers = [({"dataset": "digits", "clients": 4, "participation": 0.5, "rounds": 6, "eval_every": 2, "threads": 1,
                "out_dir": str(tmp_path / "out"), "seed": 0},)]
    assert resolve("hyperrep", "fednest", *layers[0]).run.rounds == 6
    s = local.pool_worker("hyperrep", "fednest", layers, 1, False, False, __import__("os").getppid(), (3, 1))
    assert s[0]["status"] == "done", s
    got = []
    while not q.empty():
        got.append(q.get())
    assert got and all(m[:2] == (3, 1) for m in got) and got[-1][2] >= 6  # the last evaluation, at the end
