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
