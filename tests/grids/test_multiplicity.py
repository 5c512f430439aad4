"""The multiplicity control: Benjamini-Hochberg at q = 0.05 across a paper's claim checks, same numbers once."""

from types import SimpleNamespace

import numpy as np

from fbo_cli.grids import verdicts
from fbo_cli.grids.multiplicity import AFTER, bh_kept, control, expected_false
from fbo_cli.grids.verdicts import Verdict, sequential


def test_bh_keeps_the_step_up_set():
    # m = 4: thresholds 0.0125, 0.025, 0.0375, 0.05; the largest p_(k) <= k q / m is p_(2) = 0.02
    assert bh_kept([0.001, 0.04, 0.02, 0.2]) == [True, False, True, False]
    assert bh_kept([0.02, 0.03]) == [True, True]  # 0.03 <= 2 * 0.05 / 2
    assert bh_kept([0.04, 0.2, 0.3]) == [False, False, False]  # 0.04 > 0.05 / 3: nothing kept
    assert bh_kept([]) == []


def _v(verdict, p, detail="d", interval="i"):
    return Verdict(verdict, detail, interval, 10, look=3, p=p)


def test_control_turns_an_unkept_decision_inconclusive_and_counts_same_numbers_once():
    sec = SimpleNamespace(verdicts=[("c1", "s1", _v("holds", 0.001, "a")), ("c2", "s1", _v("holds", 0.04, "b")),
                                    ("c3", "s1", _v("inconclusive", 0.5, "c")),
                                    ("c4", "s1", _v("holds", 0.001, "a"))])  # the same numbers as c1
    dropped = control([(sec, i, "exp") for i in range(4)])
    kinds = [v.verdict for _, _, v in sec.verdicts]
    # m = 3 counted (c4 is c1's numbers): 0.001 <= 0.05 / 3 kept; 0.04 > 2 * 0.05 / 3: not kept
    assert kinds == ["holds", "inconclusive", "inconclusive", "see exp"]
    assert dropped == 1 and sec.verdicts[1][2].detail.startswith(AFTER)
    assert expected_false([v for _, _, v in sec.verdicts]) == 0.05 * 1


def test_the_rules_supply_expected_false_to_the_report():
    assert verdicts.expected_false is expected_false


def test_a_decided_design_has_p_below_alpha_so_bh_sees_it():
    d = np.array([0.05, 0.06, 0.055, 0.052, 0.058, 0.061])
    s = sequential(d, 0.005)
    assert s.verdict == "holds" and s.p < 0.05
