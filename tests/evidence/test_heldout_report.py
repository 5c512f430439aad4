"""The report's held-out tuning comparison: choices side by side and the verdicts that change."""

from types import SimpleNamespace

from fbo_cli.evidence.report.heldout import heldout_md, pairs
from fbo_cli.evidence.report.sections import Section
from fbo_cli.grids.spec_types import Tuned
from fbo_cli.grids.verdicts import Verdict


def _sec(name, chosen, verdicts):
    exp = SimpleNamespace(name=name, tuned=Tuned.of({"chosen": chosen, "grids": {}}), out_root=None)
    return Section(f"experiments/{name}.yaml", exp, verdicts=verdicts)


def test_choices_and_changed_verdicts():
    v = lambda verdict, lo: Verdict(verdict, "", f"+0.01 [{lo}, +0.02] (95%, paired t)", 3)
    base = _sec("t2", {"FedNest": {"IID": {"outer_lr": 8.1, "_stable_edge": True}, "non-IID": {"outer_lr": 0.1}}},
                [("A beats B", "IID", v("holds", "+0.001")), ("A beats B", "non-IID", v("inconclusive", "-0.01"))])
    ho = _sec("t2_heldout", {"FedNest": {"IID": {"outer_lr": 0.3}, "non-IID": {"outer_lr": 0.1}}},
              [("A beats B", "IID", v("inconclusive", "-0.003")), ("A beats B", "non-IID", v("inconclusive", "-0.01"))])
    other = _sec("lonely_heldout", {}, [])  # no twin: not compared
    assert [(b.exp.name, h.exp.name) for b, h in pairs([base, ho, other])] == [("t2", "t2_heldout")]
    md = "\n".join(heldout_md([base, ho, other]))
    assert "| t2 | FedNest | IID | outer_lr=8.1 (stable) | outer_lr=0.3 (interior) | **no** |" in md
    assert "| t2 | FedNest | non-IID | outer_lr=0.1 (interior) | outer_lr=0.1 (interior) | yes |" in md
    assert "1 of 2 choices change with the held-out score; 1 of 2 claim verdicts" in md
    assert "| t2 | A beats B | IID | holds: +0.01 [+0.001, +0.02] (95%, paired t) (3) | inconclusive:" in md
    assert heldout_md([base]) == []


def test_the_twins_verdict_counts_and_the_originals_is_see():
    """Where the held-out twin decides a claim and setting, the original's fit-split verdict becomes "see <twin>"
    (so no tally counts it), while the table of changed verdicts still shows it; a verdict the twin does not
    re-decide (another setting) stays."""
    from fbo_cli.evidence.report.heldout import defer_to_twins
    from fbo_cli.evidence.report.scorecard import scorecard

    v = lambda verdict, tuning="fit split": Verdict(verdict, "d", "+0.01 [+0.001, +0.02] (95%, paired t)", 3,
                                                    tuning=tuning)
    base = _sec("t2", {"FedNest": {"IID": {"outer_lr": 8.1}}},
                [("A beats B", "IID", v("holds")), ("A beats B", "non-IID", v("holds")),
                 ("A beats B (paper's steps)", "IID", v("holds", ""))])
    ho = _sec("t2_heldout", {"FedNest": {"IID": {"outer_lr": 0.3}}},
              [("A beats B", "IID", v("inconclusive", "held-out"))])
    assert defer_to_twins([base, ho]) == 1
    assert [x.verdict for _, _, x in base.verdicts] == ["see t2_heldout", "holds", "holds"]
    assert "whose verdict counts: inconclusive" in base.verdicts[0][2].detail
    md = "\n".join(heldout_md([base, ho]))
    assert "| t2 | A beats B | IID | holds: +0.01 [+0.001, +0.02] (95%, paired t) (3) | inconclusive:" in md
    base.exp.title, ho.exp.title = "T2", "T2 held out"
    card = scorecard(SimpleNamespace(fidelity="", unchecked=[]), [base, ho])
    assert card.claims["holds"] == 2 and card.claims["inconclusive"] == 1


def test_a_tuned_row_without_a_choice_is_not_tuned_yet():
    """A claim about tuned steps gets no verdict in a setting where a tuned side has no choice yet (its runs stand
    at the spec's values); a tuning that accepted none (the spec's values stand, recorded) keeps its verdict."""
    from fbo_cli.evidence.report.sections import untuned

    algos = [SimpleNamespace(name="A", tune={"lr": [1, 2]}), SimpleNamespace(name="B", tune={}),
             SimpleNamespace(name="C", tune={"lr": [1, 2]})]
    tuned = Tuned.of({"chosen": {"A": {"s1": {"lr": 1}}, "C": {"s2": {"_none": "every value diverged"}}},
                      "grids": {}})
    exp = SimpleNamespace(algorithms=algos, tuned=tuned)
    claim = lambda better, than: SimpleNamespace(better=better, than=than)  # noqa: E731
    assert untuned(exp, claim("A", "B"), ["s1"]) == ""
    assert untuned(exp, claim("A", "B"), ["s2"]) == "A in s2"
    assert untuned(exp, claim("A", "B"), ["s1", "s2"]) == "A in s2"
    assert untuned(exp, claim("C", "B"), ["s2"]) == ""
