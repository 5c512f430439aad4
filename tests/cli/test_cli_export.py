"""``fbo export`` and ``fbo run --tensorboard``: TensorBoard scalars of a run."""

import pandas as pd
import pytest
from cli_helpers import TINY, fails_with, run, run_dir


def test_tensorboard_export_of_a_run(tmp_path):
    pytest.importorskip("tensorboard")
    r = run("run", "hyperrep", "--algo", "fednest", "--out-dir", str(tmp_path), *TINY, "--tensorboard")
    assert r.exit_code == 0, r.output
    d = run_dir(tmp_path)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(d / "tensorboard"))
    acc.Reload()
    m = pd.read_csv(d / "metrics.csv")
    got = [e.value for e in acc.Scalars("test_acc")]
    assert got == pytest.approx(list(m.test_acc)) and [e.step for e in acc.Scalars("test_acc")] == list(m.rounds)
    r = run("export", str(tmp_path / "nope"))
    assert fails_with(r, "not_found", field="run", path=str(tmp_path / "nope")), r.output
