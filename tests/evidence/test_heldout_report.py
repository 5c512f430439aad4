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
