"""The report's generated prose stays true (issue 60's reviewer list): the advice on more seeds at the cap, the
seeds a settled section read, an equality finding's rule, and the estimate of a report of a few specs."""

from types import SimpleNamespace

from fbo_cli.evidence.report import estimate
from fbo_cli.evidence.report.render import _settled, more_seeds
from fbo_cli.evidence.report.sections import Section
from fbo_cli.grids.verdicts import Verdict


def sec(ns):
    exp = SimpleNamespace(seeds=[0, 1, 2])
    return Section("x.yaml", exp,
                   verdicts=[("c", f"s{i}", Verdict("inconclusive", "", "", n)) for i, n in enumerate(ns)])


def test_more_seeds_are_advised_only_below_the_cap():
    assert "the 2 read at the cap of 10 seeds stay open" in more_seeds({"p": [sec([10, 10])]})
    assert "None is below the cap" in more_seeds({"p": [sec([10, 10])]})
    said = more_seeds({"p": [sec([3, 10])]})
    assert "may decide the 1 below the cap" in said and "the 1 read at the cap" in said


def test_a_settled_section_says_its_verdicts_read_more_seeds_than_the_spec_lists():
    assert "up to 10 where `fbo compare --until-settled` added seeds" in _settled(sec([3, 10]))
    assert _settled(sec([3, 3])) == ""


def test_the_estimate_without_previous_figures_is_per_figure():
    assert "about 4 s each" in estimate(0, 0.0)


def test_a_how_chosen_cell_says_what_the_tuning_record_says(tmp_path):
    import pandas as pd

    from fbo_cli.evidence.report.tuning import how_chosen

    (tmp_path / "compare" / "t").mkdir(parents=True)
    pd.DataFrame({"algorithm": "A", "setting": "s", "lr": [0.01, 0.1, 1.0], "rejected": [False, False, True],
                  "grid": "grid"}).to_csv(tmp_path / "compare" / "t" / "tuning.csv", index=False)
    exp = SimpleNamespace(name="t", out_root=tmp_path, tuned={"chosen": {"A": {"s": {"lr": 0.1}}}, "grids": {}})
    table = "| algorithm | setting | values | how chosen |\n|---|---|---|---|\n| A | s | lr=0.1 | tuned |"
    assert "| A | s | lr=0.1 | tuned (beside a rejected value, from the tuning record: lr=0.1 is beside the " \
           "rejected lr=1) |" in how_chosen(table, exp)
