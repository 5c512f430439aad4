"""Collapse: a run that fell to chance level and stayed there is its own status, derived from its metrics."""

from pathlib import Path

import pandas as pd
import pytest

from fbo_cli.runs.table import chance_level, collapsed

ROOT = Path(__file__).resolve().parents[2]


def test_a_fall_to_chance_that_stays_is_a_collapse_and_nothing_else_is():
    assert chance_level("test_acc", "mnist") == pytest.approx(0.15)
    assert chance_level("test_auc", "synth-c100") == pytest.approx(0.52)
    assert chance_level("global_loss", "mnist") is None
    fell = pd.Series([0.09, 0.5, 0.79, 0.112, 0.112])
    assert "fell to chance level" in collapsed(fell, "train_acc", "mnist")
    assert collapsed(pd.Series([0.09, 0.5, 0.112, 0.6]), "test_acc", "mnist") is None  # it recovered
    assert collapsed(pd.Series([0.09, 0.1, 0.11]), "test_acc", "mnist") is None  # never rose: not a fall
    assert collapsed(pd.Series([0.9, 0.5, 0.5]), "test_auc", "x") is not None
    assert collapsed(pd.Series([3.0, 9.0]), "global_loss", "mnist") is None


@pytest.mark.skipif(not (ROOT / "data" / "MNIST" / "raw").is_dir(), reason="needs the full MNIST (make setup)")
def test_fig6_non_iid_seed_0_is_collapsed_in_the_committed_evidence():
    from fbo_cli.grids.compare import collect
    from fbo_cli.grids.spec import load_spec

    exp = load_spec(str(ROOT / "experiments" / "aggitd_fig6_mnist_cnn.yaml"),
                    {"out_dir": str(ROOT / "docs" / "results")})
    runs, _ = collect(exp)
    aggitd = runs[runs.algorithm.str.startswith("FBO-AggITD") & runs.setting.str.startswith("non-IID")]
    assert set(aggitd[aggitd.seed == 0].status) == {"collapsed"}
    assert set(aggitd[aggitd.seed != 0].status) == {"done"}
