"""Rounds to a target as intervals (issue 61, item 2): a verdict on rounds to a target holds only where it holds
at both ends of the crossings' intervals (fbo_cli/grids/resolution.py)."""

import pandas as pd

from fbo_cli.grids.resolution import rounds_verdict
from fbo_cli.grids.verdicts import claim_verdict

CLAIM = {"text": "A reaches the target first", "metric": "rounds_to_target", "better": "A", "than": "B", "mode": "min"}


def _runs(a_high, a_low, b_high, b_low):
    rows = []
    for algo, hi, lo in (("A", a_high, a_low), ("B", b_high, b_low)):
        for seed, (h, l) in enumerate(zip(hi, lo)):
            rows.append({"algorithm": algo, "setting": "s", "seed": seed, "status": "done", "run_dir": f"{algo}{seed}",
                         "rounds_to_target": h, "rounds_to_target_low": l})
    return pd.DataFrame(rows)


def test_a_crossing_the_grid_cannot_order_is_inconclusive():
    # A evaluated every 5 rounds, B every 20: B's upper ends (40) are later than A's (33..37), but B crossed
    # somewhere in (20, 40], which may be before A
    runs = _runs([35, 33, 37, 34, 36, 35, 33, 37, 34, 36], [30, 28, 32, 29, 31, 30, 28, 32, 29, 31], [40] * 10,
                 [20] * 10)  # ten seeds: rounds are read by the sign test, which decides at the last look
    assert claim_verdict(runs, CLAIM, "s").verdict == "holds"  # the upper ends alone
    v = rounds_verdict(runs, CLAIM, "s")
    assert v.verdict == "inconclusive" and "round grid" in v.detail


def test_a_crossing_the_grid_orders_keeps_its_verdict():
    runs = _runs([15, 13, 17, 14, 16, 15, 13, 17, 14, 16], [10, 8, 12, 9, 11, 10, 8, 12, 9, 11],
                 [60, 62, 61, 60, 63, 64, 62, 61, 60, 63], [40, 42, 41, 40, 43, 44, 42, 41, 40, 43])
    assert rounds_verdict(runs, CLAIM, "s").verdict == claim_verdict(runs, CLAIM, "s").verdict == "holds"
    flipped = {**CLAIM, "better": "B", "than": "A"}
    assert rounds_verdict(runs, flipped, "s").verdict == "does not hold"


def test_crossings_in_successive_intervals_of_one_grid_stay_ordered():
    from fbo_cli.grids.resolution import LOW, _at

    # both on a grid of 10: A crossed in (30, 40], B in (40, 50]: B's earliest crossing (41) is after A's latest
    runs = _runs([40] * 6, [30] * 6, [50] * 6, [40] * 6)
    early = _at(runs, {("B", "s"): LOW})
    assert set(early[early.algorithm == "B"].rounds_to_target) == {41} and set(early[early.algorithm == "A"]
                                                                              .rounds_to_target) == {40}
    first = _runs([0] * 6, [0] * 6, [50] * 6, [40] * 6)  # reached at the first row: exactly there
    assert set(_at(first, {("A", "s"): LOW}).query("algorithm == 'A'").rounds_to_target) == {0}
