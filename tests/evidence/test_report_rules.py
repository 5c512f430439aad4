"""The report's verdict rules of issue 50: equivalence for the paper's numbers, tuned rows as context, the
exact test for grid-valued and censored quantities, one verdict per comparison, and what a verdict rests on."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd

from fbo_cli.evidence.report.render import basis_line
from fbo_cli.grids.spec import load_spec
from fbo_cli.grids.verdicts import (
    claim_verdict,
    one_verdict_per_comparison,
    paired_interval,
    paper_rows,
    paper_tolerance,
    tuning_basis,
)


def write_spec(tmp_path, tune="{score: val_loss, seeds: [100], rounds: 4}", reference=None, claims=None):
    p = tmp_path / "exp.yaml"
    reference = reference or """
  A: {s1: {final: 0.93, rounds_to_target: 500}, s2: {final: 0.94}}
  B: {s1: {final: 0.91}, s2: {final: 0.928}}
  A tuned: {s1: {final: 0.93}}"""
    claims = claims or """
  - {text: "A beats B", metric: final, better: A, than: B, mode: max}
  - {text: "A tuned beats B", metric: final, better: A tuned, than: B, mode: max}"""
    p.write_text(f"""
name: rules
task: hyperrep
seeds: [0, 1, 2]
target: 0.5
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {tmp_path}}}
tune: {tune}
algorithms:
  - {{name: A, algo: aggitd}}
  - {{name: B, algo: fednest}}
  - {{name: A tuned, algo: aggitd, tune: {{outer_lr: [0.01, 0.1]}}}}
settings: [{{name: s1, set: {{partition: iid}}}}, {{name: s2, set: {{partition: shards}}}}]
reference_on: {{dataset: digits, target: 0.5}}
reference: {reference}
claims: {claims}
""")
    return load_spec(p)


def test_the_papers_tolerance_is_half_the_smallest_gap_a_claim_compares(tmp_path):
    exp = write_spec(tmp_path)
    tol, why = paper_tolerance(exp)  # gaps A - B: 0.02 (s1), 0.012 (s2): half the smaller
    assert math.isclose(tol, 0.006) and "A − B, s2: 0.94 − 0.928" in why
    exp.tolerance = 0.004  # the spec's own tolerance is the ceiling
    assert paper_tolerance(exp) == (0.004, "the spec's tolerance, below half the smallest gap between two of "
                                           "the paper's numbers that a claim compares")
    # a gap below the claim's margin (0.005) is no effect a claim is about; no claim compares two numbers: 0.02
    exp = write_spec(tmp_path, reference="""
  A: {s1: {final: 0.93}}
  B: {s1: {final: 0.928}}""")
    assert paper_tolerance(exp)[0] == 0.02 and "no claim compares" in paper_tolerance(exp)[1]


def test_a_tuned_row_against_the_papers_number_is_context_and_equivalence_decides_the_rest(tmp_path):
    exp = write_spec(tmp_path)
    runs = pd.DataFrame([{"algorithm": a, "setting": "s1", "seed": k, "status": "done", "final": v + 0.001 * k,
                          "rounds_to_target": 500.0 + 10 * (k % 3)}
                         for a, v in (("A", 0.929), ("B", 0.87), ("A tuned", 0.929)) for k in range(6)])
    rows = {(r[0], r[2]): r[-1] for r in paper_rows(exp, runs, paper_tolerance(exp)[0]) if r[1] == "s1"}
    # A at look 2 (6 seeds): the 97.8% interval of ours - paper lies inside +-0.006
    assert rows[("A", "final")] == "consistent with"
    assert rows[("A", "rounds to 50%")] == "consistent with"  # inside +-50 (10% of 500)
    assert rows[("B", "final")] == "below"
    # the same numbers in the tuned row: context, never a verdict (the old rule: "consistent with")
    assert rows[("A tuned", "final")].startswith("context: a tuned row")


def test_a_grid_valued_quantity_gets_the_exact_test_never_a_zero_variance_t():
    # CODASCA's I_max at K = 16: 64 against 8 in every seed. The old rule: "+56 [+56, +56] (paired t)", holds.
    runs = pd.DataFrame({"algorithm": ["A"] * 3 + ["B"] * 3, "setting": "K=16", "seed": [0, 1, 2] * 2,
                         "status": "done", "I_max": [64.0] * 3 + [8.0] * 3})
    claim = {"text": "", "metric": "I_max", "better": "A", "than": "B", "mode": "max"}
    v = claim_verdict(runs, claim, "K=16", exact=True)
    assert v.verdict == "inconclusive" and "sign test" in v.interval and "[+56, +56]" not in v.interval
    v = claim_verdict(runs, claim, "K=16")  # even without exact: all-equal differences are no t interval
    assert v.verdict == "inconclusive" and "sign test" in v.interval
    assert paired_interval(np.array([56.0] * 10))[3].startswith("sign")  # ten seeds: the sign test decides
    assert paired_interval(np.array([56.0] * 10))[1] == 56.0
    # a value at the grid's top is censored (+inf: at least the top), shown as such, never as the top
    runs.loc[runs.algorithm == "A", "I_max"] = math.inf
    v = claim_verdict(runs, claim, "K=16", exact=True)
    assert v.detail.startswith("≥ the grid's top (censored) vs 8") and v.verdict == "inconclusive"


def test_imax_at_the_grids_top_is_censored_per_seed():
    from fbo_cli.evidence.report.codasca_section import imax_per_seed, windows

    I = [1, 8, 32]
    rows = [{"algorithm": "A", "setting": f"K=4, I={i}", "seed": 0, "status": "done", "final": 0.9} for i in I]
    exp = windows([{"set": {"clients": 4, "I": i}} for i in I])
    assert imax_per_seed(pd.DataFrame(rows), exp).I_max.tolist() == [math.inf]  # the old rule: 32


def _section(name, runs, seeds):
    claim = {"text": "A beats B", "metric": "final", "better": "A", "than": "B", "mode": "max"}
    exp = SimpleNamespace(name=name, claims=[SimpleNamespace(text="A beats B", metric="final", mode="max",
                                                             margin=None, factor=None)])
    v = claim_verdict(runs[runs.seed.isin(seeds)], claim, "s", first=3)
    return SimpleNamespace(exp=exp, verdicts=[("A beats B", "s", v)])


def test_one_verdict_per_comparison_where_one_sections_runs_contain_anothers():
    rng = np.random.default_rng(0)
    runs = pd.DataFrame([{"algorithm": a, "setting": "s", "seed": k, "status": "done", "run_dir": f"/r/{a}{k}",
                          "final": (0.9 if a == "A" else 0.88) + 0.01 * rng.standard_normal()}
                         for a in "AB" for k in range(10)])
    small, large, other = _section("table", runs, range(3)), _section("fig", runs, range(10)), \
        _section("else", runs.assign(run_dir=runs.run_dir + "x"), range(10))
    before = large.verdicts[0][2]
    assert one_verdict_per_comparison([small, large, other]) == 1
    v = small.verdicts[0][2]
    # the larger section's pairs read (the sequential design stops at the look that decides)
    assert v.verdict == "see fig" and f"among the {before.n} of `fig`" in v.detail and before.verdict in v.detail
    assert large.verdicts[0][2] == before and other.verdicts[0][2].verdict == before.verdict


def test_a_verdict_with_a_tuned_side_says_what_its_tuning_scored(tmp_path):
    exp = write_spec(tmp_path)
    plain, tuned = exp.claims
    assert tuning_basis(exp, plain) == "" and tuning_basis(exp, tuned) == "fit split"
    exp = write_spec(tmp_path, tune="{seeds: [100], rounds: 4}")  # the bilevel default: the held-out score
    assert tuning_basis(exp, exp.claims[1]) == "held-out"
    v = lambda verdict, tuning: ("c", "s", SimpleNamespace(verdict=verdict, tuning=tuning))  # noqa: E731
    secs = [SimpleNamespace(exp=SimpleNamespace(name="x"), verdicts=[v("holds", "fit split"), v("holds", ""),
                                                                     v("does not hold", "fit split")]),
            SimpleNamespace(exp=SimpleNamespace(name="y"), verdicts=[v("holds", "held-out")])]
    line = basis_line(secs)
    assert "Of 3 claim verdicts that hold, 1 rest on a choice scored on held-out data" in line
    assert "1 on a step chosen on the split x is fitted on" in line and ": `x`;" in line


def test_the_zohfl_x0_zero_twins_treat_the_papers_numbers_alike():
    # Table I starts every method from the server's pre-trained model: from x0 = 0 the paper has no number,
    # on MNIST as on Fashion-MNIST (the Fashion-MNIST twin used to match ours against the pre-trained numbers)
    twins = [load_spec(f"experiments/zohfl_table1_{d}_x0zero.yaml", use_tuned=False) for d in ("mnist", "fmnist")]
    assert [t.reference for t in twins] == [{}, {}] and [t.reference_on for t in twins] == [{}, {}]


def test_the_rule_paragraph_names_the_looks_their_boundaries_and_the_control():
    from fbo_cli.evidence.report.control import sequential_rule

    text = sequential_rule()
    for want in ("3, 6, 10 seed pairs", "t(2) = 53.8", "t(5) = 3.93", "t(9) = 2.42", "0.0346%", "Benjamini-Hochberg",
                 "q = 0.05", "at most 5%"):
        assert want in text, want
    assert "7.5%" not in text and "two looks" not in text


def test_an_open_verdict_names_its_next_look_seeds_and_core_minutes(monkeypatch):
    from types import SimpleNamespace

    from fbo_cli.evidence.report import control
    from fbo_cli.grids.verdicts import claim_verdict

    runs = pd.DataFrame([{"algorithm": a, "setting": "s", "seed": k, "status": "done", "final": v + 0.01 * k}
                         for a, v in (("A", 0.90), ("B", 0.87)) for k in range(3)])
    claim = {"text": "A beats B", "metric": "final", "better": "A", "than": "B", "mode": "max"}
    v = claim_verdict(runs, claim, "s", first=3)
    assert v.verdict == "inconclusive" and v.look == 1 and v.more == 3
    monkeypatch.setattr(control, "minutes_per_pair", lambda runs, sides: 2.5)
    c = SimpleNamespace(better="A", than="B")
    detail = control.priced(v, runs, c, "s", None).detail
    assert "open at look 1, 3 more seeds, 7.5 core-minutes" in detail and "for look 2" not in detail
    # a quantity read across settings (I_max at K=16: every window's runs): priced on all of them, and said so
    seen = []
    monkeypatch.setattr(control, "minutes_per_pair", lambda runs, sides: seen.append(sides) or 4.0)
    detail = control.priced(v, runs, c, "K=16", None, {"K=16": ["K=16, I=1", "K=16, I=64"]}).detail
    assert seen[-1] == [("A", "K=16, I=1"), ("A", "K=16, I=64"), ("B", "K=16, I=1"), ("B", "K=16, I=64")]
    assert "open at look 1, 3 more seeds in every setting it is read across, 12.0 core-minutes" in detail
