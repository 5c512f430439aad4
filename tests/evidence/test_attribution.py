"""A spec's ``attribution:``: the share of a row's gap to the paper that one change explains (issue 50)."""

from types import SimpleNamespace

import pandas as pd
import pytest

from fbo_cli.errors import UsageError
from fbo_cli.evidence.report.attribution import attribution_md
from fbo_cli.grids.spec_checks import check_attribution
from fbo_cli.grids.spec_types import AlgorithmEntry


def test_the_share_of_the_gap_closed_by_the_change_with_a_censored_before_row():
    algos = [AlgorithmEntry.of({"name": n, "algo": "fednest"}) for n in ("A", "B")]
    a = check_attribution("x.yaml", {"change": "inner 0.003 -> 0.01", "pairs": {"A": "B"}}, algos)
    with pytest.raises(UsageError, match="attribution"):
        check_attribution("x.yaml", {"change": "c", "pairs": {"A": "C"}}, algos)
    runs = pd.DataFrame({"algorithm": ["A"] * 3 + ["B"] * 3, "setting": "s", "seed": [0, 1, 2] * 2, "status": "done",
                         "rounds_to_target": [1500, 1400, 1300, 900, 1000, 1100],
                         "final": [0.90, 0.91, 0.92, 0.92, 0.93, 0.94]})
    exp = SimpleNamespace(attribution=a, reference={"A": {"s": {"rounds_to_target": 500, "final": 0.95}}},
                          cells=[SimpleNamespace(setting="s", cfg=SimpleNamespace(run=SimpleNamespace(rounds=2000)))])
    md = attribution_md(exp, runs)
    # rounds: before 1400, after 1000, paper 500: (1400 - 1000) / (1400 - 500) = 44%; 2x the paper's remain; the
    # paired differences 600, 400, 200: 400 ± t(0.975, 2) 200 / sqrt(3) = [-96.9, 896.9], / 900 = [-11%, 100%]
    assert ("| A → B | s | rounds to target | 500 | 1400 (3/3 reached) | 1000 (3/3 reached) | 44% [95%: -11% to 100%];"
            " 2.00x") in md
    # final: before 0.91, after 0.93, paper 0.95: half the gap; 2 points remain; every seed the same difference: no
    # interval
    assert "| final | 0.95 | 0.9100 (3 seeds) | 0.9300 (3 seeds) | 50%; -2.0 points to the paper remain |" in md
    assert "- *s*: A's rounds to target goes from 1400 to 1000 against the paper's 500: the change closes 44% [" in md
    runs.loc[0, "rounds_to_target"] = None  # a seed never reached the target: counted as the budget, a bound
    md = attribution_md(exp, runs)
    assert "≥ 1567 (2/3 reached)" in md and "at least 53%" in md  # (1567 - 1000) / (1567 - 500)
