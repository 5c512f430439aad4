"""``fbo tune`` (grid, rejection rule, choice, use by compare) and ``fbo report`` (verdict rule, paper
numbers, missing runs, evidence)."""

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from cli_helpers import error_of, fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.errors import UsageError
from fbo_cli.evidence.report import build_report, collect_evidence, prune_evidence
from fbo_cli.grids.spec import load_spec
from fbo_cli.grids.tune import MAX_EXTENSIONS, grid_points, score_run
from fbo_cli.grids.verdicts import claim_verdict, match_paper

runner = CliRunner()


def spec(tmp_path, tune="{seeds: [100], rounds: 20, set: {eval_every: 1}}", seeds="[0, 1]", extra=""):
    p = tmp_path / "exp.yaml"
    p.write_text(f"""
name: t
task: hyperrep
seeds: {seeds}
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 20, threads: 1, out_dir: {tmp_path}}}
tune: {tune}
algorithms:
  - {{name: AggITD, algo: aggitd, tune: {{outer_lr: [0.003, 0.03, 1000.0]}}}}
  - {{name: FedNest, algo: fednest}}
settings: [{{name: iid, set: {{partition: iid}}}}]
claims:
  - {{text: "AggITD beats FedNest", metric: final, better: AggITD, than: FedNest, mode: max}}
reference:
  AggITD: {{iid: {{final: 0.5}}}}
  FedNest: {{iid: {{final: 0.5}}}}
{extra}
""")
    return p


def test_grid_points_cross_product_and_tied_keys():
    pts = grid_points({"a,b": [1, 2], "c": [3, 4]})
    assert pts == [{"a": 1, "b": 1, "c": 3}, {"a": 1, "b": 1, "c": 4}, {"a": 2, "b": 2, "c": 3},
                   {"a": 2, "b": 2, "c": 4}]


def test_score_is_the_tail_mean_and_oscillation_ignores_the_trend():
    mono = pd.DataFrame({"rounds": range(9), "s": [9, 8, 7, 6, 5, 4, 3, 2, 1]})
    sc, osc = score_run(mono, "s", 0.5, 100)
    assert sc == pytest.approx(np.mean([4, 3, 2, 1])) and osc == pytest.approx(0.0)
    zig = pd.DataFrame({"rounds": range(9), "s": [9, 1, 2, 1, 2, 1, 2, 1, 2]})
    sc, osc = score_run(zig, "s", 0.5, 100)  # tail 1,2,1,2: 3 units of movement, net 1, level 1.5
    assert osc == pytest.approx((3 - 1) / (2 * 1.5))
    nan = pd.DataFrame({"rounds": range(3), "s": [1.0, math.nan, 2.0]})
    assert math.isnan(score_run(nan, "s", 1.0, 100)[0])


def test_bad_tune_blocks_are_usage_errors(tmp_path):
    for tune, error in [("{seeds: [0]}", ("bad_spec", "tune.seeds", [0])),  # also an evaluation seed
                        ("{score: test_acc}", ("bad_spec", "tune.score", "test_acc")),  # a test-set metric
                        ("{mode: up}", ("bad_spec", "tune.mode", "up")),
                        ("{setting: nope}", ("bad_spec", "tune.setting", "nope")),
                        ("{bogus: 1}", ("unknown", "key", "bogus")),
                        ("{tolerance: -1}", ("bad_spec", "tune.tolerance", -1)),
                        ("{tolerance: on}", ("bad_spec", "tune.tolerance", "on"))]:
        r = runner.invoke(app, ["tune", str(spec(tmp_path, tune=tune))])
        e = error_of(r)
        assert r.exit_code == 2 and (e.kind, e.field, e.value) == error, (tune, r.output)
        assert "Traceback" not in r.output


def test_tolerance_off_keeps_oscillating_runs_and_says_so(tmp_path):
    from fbo_cli.grids.spec import parse_tune
    from fbo_cli.grids.tune import procedure_text
    from fbo_cli.runs.config import load_config_file

    def parsed(tune):
        p = spec(tmp_path, tune=tune)
        return parse_tune(load_config_file(p), load_spec(p), "exp.yaml")

    ts = parsed("{seeds: [100], rounds: 20, tolerance: off}")
    assert ts.tolerance == math.inf and "no oscillation check" in procedure_text(ts)
    assert "oscillating by more than 0.05" in procedure_text(parsed("{seeds: [100], rounds: 20}"))


def test_tuning_at_each_settings_own_budget(tmp_path):
    from fbo_cli.grids.tune import procedure_text, tune_cells

    p = spec(tmp_path, tune="{seeds: [100], rounds: budget}",
             extra="settings: [{name: iid, set: {rounds: 10}}, {name: long, set: {rounds: 30}}]")
    exp = load_spec(p)
    assert exp.tune.rounds is None and "own evaluation budget" in procedure_text(exp.tune)
    budgets = {c.setting: c.cfg.run.rounds for c, _ in tune_cells(exp, exp.tune, {})}
    assert budgets == {"iid": 10, "long": 30}


def test_compare_before_tune_says_the_values_are_not_tuned(tmp_path):
    r = runner.invoke(app, ["compare", str(spec(tmp_path)), "--seeds", "0", "--set", "rounds=2"])
    assert r.exit_code == 0, r.output
    assert "no tuned.yaml yet" in " ".join(r.output.split())
    assert "not tuned yet" in (tmp_path / "compare" / "t" / "table.md").read_text()


def test_bad_claims_and_derived_are_usage_errors(tmp_path):
    claim = '{text: c, metric: final, better: AggITD, than: FedNest, settings: ["nope"]}'
    across = '{text: c, metric: final, better: AggITD, than: AggITD, across: [["iid", "nope"]]}'
    for extra, field, value in [(f"claims: [{claim}]", "claims", "c"), ("derived: [bogus]", "derived", ["bogus"]),
                                (f"claims: [{across}]", "claims", "c")]:
        r = runner.invoke(app, ["compare", str(spec(tmp_path, extra=extra)), "--no-run"])
        assert fails_with(r, "bad_spec", field=field, value=value), (extra, r.output)


def test_tune_rejects_divergence_chooses_on_validation_and_compare_uses_it(tmp_path):
    p = spec(tmp_path)
    r = runner.invoke(app, ["tune", str(p)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "compare" / "t"
    grid = pd.read_csv(out / "tuning.csv")
    confirmation, margin = grid[grid.grid == "confirmation"], grid[grid.grid == "margin"]
    grid = grid[~grid.grid.isin(["confirmation", "margin"])]  # veto runs: they never score nor become a choice
    assert len(grid[grid.grid == "spec"]) == 3 and set(grid.seed) == {100}
    huge = grid[grid.outer_lr == 1000.0].iloc[0]
    assert huge.rejected and huge.reason in ("diverged", "oscillates", "non-finite score")
    ok = grid[~grid.rejected]
    tuned = yaml.safe_load((out / "tuned.yaml").read_text())
    # a choice next to a rejected value survived two more seeds (disjoint from the evaluation seeds)
    if tuned["chosen"]["AggITD"]["iid"].get("_stable_edge"):
        assert set(confirmation.seed) == {101, 102} and not confirmation[
            confirmation.outer_lr == tuned["chosen"]["AggITD"]["iid"]["outer_lr"]].rejected.any()
        assert tuned["confirmed"]["AggITD | iid"]["seeds"] == [101, 102]
    best = ok.loc[ok.score.idxmin()]  # heldout_loss (the bilevel default), minimized
    chosen = tuned["chosen"]["AggITD"]["iid"]
    assert chosen["outer_lr"] == float(best.outer_lr)
    assert margin.empty or "_margin" in chosen  # a margin probe ran only for a choice beside an unstable value
    if not margin.empty:  # the probe ran on the tuning seed and the next two; a record without them replays so
        assert sorted(margin.seed) == [100, 101, 102] and chosen["_margin"].endswith("stable on seeds 100, 101, 102")
        rec = pd.read_csv(out / "tuning.csv")
        older = (rec.grid == "margin") & (rec.seed != 100)  # as tuned before the probe took 3 seeds
        for d in rec[older].run_dir:
            shutil.rmtree(d)
        rec[~older].to_csv(out / "tuning.csv", index=False)
        r = runner.invoke(app, ["tune", str(p), "--dry-run"])
        assert r.exit_code == 0 and "under today's rules it adds 2 run(s) now (2 margin" in " ".join(r.output.split())
    # an edge choice was extended until interior or its neighbour beyond was rejected (named in the note)
    ext = grid[grid.grid == "extension"]
    assert (best.outer_lr in (ok.outer_lr.min(), ok.outer_lr.max())) == bool(chosen.get("_stable_edge")
                                                                              or chosen.get("_at_grid_edge"))
    if best.outer_lr == ok.outer_lr.max():  # 1000 diverged: named as the neighbour that failed
        assert "largest stable value: outer_lr=1000" in chosen["_stable_edge"]
    assert "_at_grid_edge" not in chosen or len(ext) == MAX_EXTENSIONS
    assert tuned["score"] == "heldout_loss" and "never the test set" in tuned["procedure"]
    assert (out / "tuning.png").stat().st_size > 1000
    # tuning again reuses every run; compare applies the chosen value and says so
    exp = load_spec(p)
    assert all(c.cfg.hp.outer_lr == best.outer_lr for c in exp.cells if c.algorithm == "AggITD")
    assert {c.seed for c in exp.cells} == {0, 1}
    r = runner.invoke(app, ["compare", str(p)])
    assert r.exit_code == 0, r.output
    md = (out / "table.md").read_text()
    assert "Tuned by `fbo tune`" in md and f"outer_lr={best.outer_lr:g}" in md.replace(".0 ", " ")


def _tuning_rows(points):
    """A tuning table of one (algorithm, setting): (outer_lr, score, status) per point."""
    df = pd.DataFrame([{"algorithm": "A", "setting": "s", "seed": 100, "point": f"outer_lr={v}", "outer_lr": v,
                        "grid": "spec", "status": st, "score": sc, "start": 9.0, "oscillation": 0.0,
                        "run_dir": "", "reason": "" if st == "done" else st, "rejected": st != "done"}
                       for v, sc, st in points])
    return df


def test_an_edge_choice_is_extended_until_interior_or_its_neighbour_fails():
    from fbo_cli.grids.spec import TuneSpec
    from fbo_cli.grids.tune import choose, extensions

    ts = TuneSpec([100], 10, "val_loss", "min", None, 0.25, math.inf, {}, {"A": {"outer_lr": [0.01, 0.1]}})
    two = _tuning_rows([(0.01, 0.5, "done"), (0.1, 0.4, "done")])  # a two-point grid: both ends are edges
    chosen = choose(two, ts)
    assert chosen["A"]["s"]["_at_grid_edge"] == "outer_lr"
    assert extensions(two, chosen, ts, {}) == [(("A", "s"), {"outer_lr": 1.0})]  # geometric: 0.1 * 10
    failed = pd.concat([two, _tuning_rows([(1.0, math.nan, "diverged")])])
    chosen = choose(failed, ts)["A"]["s"]
    assert chosen["outer_lr"] == 0.1 and "_at_grid_edge" not in chosen
    assert chosen["_stable_edge"] == "outer_lr=0.1 is the largest stable value: outer_lr=1 diverged"
    assert extensions(failed, {"A": {"s": chosen}}, ts, {}) == []
    better = pd.concat([two, _tuning_rows([(1.0, 0.3, "done"), (10.0, 0.35, "done")])])  # interior now
    chosen = choose(better, ts)["A"]["s"]
    assert chosen.values == {"outer_lr": 1.0} and not chosen.edge_note()
    assert chosen.notes["searched"] == "outer_lr over 0.01, 0.1, 1, 10"  # what was searched, per key
    low = _tuning_rows([(0.01, 0.3, "done"), (0.1, 0.4, "done")])
    assert extensions(low, choose(low, ts), ts, {}) == [(("A", "s"), {"outer_lr": 0.001})]
    # every point rejected, each for a too-large step: the grid goes on below its smallest value
    unstable = _tuning_rows([(0.01, math.nan, "diverged"), (0.1, math.nan, "diverged")])
    chosen = choose(unstable, ts)
    assert "_none" in chosen["A"]["s"]
    assert extensions(unstable, chosen, ts, {}) == [(("A", "s"), {"outer_lr": 0.001})]
    stuck = unstable.assign(status="done", reason="no progress")  # too small or too large: no direction
    assert extensions(stuck, choose(stuck, ts), ts, {}) == []


def _momentum_spec(tmp_path):
    """A spec tuning FedBiOAcc's momentum c over {0.1, 0.9} (its continuation 8.1 breaks c alpha^2 <= 1)."""
    p = tmp_path / "exp.yaml"
    p.write_text(f"""
name: t
task: hyperclean
seeds: [0]
base: {{dataset: digits, clients: 4, rounds: 2, threads: 1, out_dir: {tmp_path}}}
tune: {{seeds: [100], rounds: 2}}
algorithms:
  - {{name: A, algo: fedbioacc, tune: {{c_omega: [0.1, 0.9]}}}}
settings: [{{name: s, set: {{}}}}]
""")
    return p


def _momentum_rows(points):
    """``_tuning_rows`` over the momentum c instead of outer_lr."""
    rows = _tuning_rows(points).rename(columns={"outer_lr": "c_omega"})
    rows["point"] = [f"c_omega={v}" for v in rows.c_omega]
    return rows


def test_an_edge_at_the_end_of_a_keys_valid_range_is_labelled_not_extended(tmp_path):
    """A two-point momentum grid c in {0.1, 0.9} choosing 0.9: its geometric continuation 8.1 breaks
    FedBiOAcc's c alpha^2 <= 1, so it is not run; the choice is the largest valid value, with the reason,
    neither 'stable' (nothing diverged) nor an unresolved edge."""
    from fbo_cli.grids.spec import TuneSpec
    from fbo_cli.grids.tune import choose, extensions, point_error

    p = _momentum_spec(tmp_path)
    exp = load_spec(p, {}, use_tuned=False)
    ts = TuneSpec([100], 10, "val_loss", "min", None, 0.25, math.inf, {}, {"A": {"c_omega": [0.1, 0.9]}})
    assert point_error(exp, ts, {}, ("A", "s"), {"c_omega": 0.9}) is None
    why = point_error(exp, ts, {}, ("A", "s"), {"c_omega": 8.1})
    assert "c_omega" in why and "> 1" in why
    rows = _momentum_rows([(0.1, 0.5, "done"), (0.9, 0.4, "done")])
    chosen = choose(rows, ts)
    assert extensions(rows, chosen, ts, {}) == [(("A", "s"), {"c_omega": 8.1})]
    invalid = {("A", "s"): [({"c_omega": 8.1}, why)]}
    chosen = choose(rows, ts, invalid)
    entry = chosen["A"]["s"]
    assert entry["c_omega"] == 0.9 and "_at_grid_edge" not in entry and "_stable_edge" not in entry
    assert entry["_valid_edge"].startswith("c_omega=0.9 is the largest valid value: c_omega=8.1 is not valid (")
    assert extensions(rows, chosen, ts, {}, invalid) == []
    from fbo_cli.grids.tune import _beyond  # a 0 at the bottom of a grid: below it lies no valid value

    assert _beyond([0, 0.001, 0.01], 0) == -0.001 and _beyond([0, 0.001, 0.01], 0.01) == 0.1


def test_relabel_turns_a_never_run_invalid_extension_into_a_valid_range_note(tmp_path):
    """``fbo tune --relabel``: a tuning recorded before extensions were checked, whose c = 8.1 extension
    was never run, gets the 'largest valid value' note; the choice itself must not change."""
    from fbo_cli.grids.tune import relabel
    from fbo_cli.runs.rundir import write_yaml

    p = _momentum_spec(tmp_path)
    out = tmp_path / "compare" / "t"
    out.mkdir(parents=True)
    rows = _momentum_rows([(0.1, 0.5, "done"), (0.9, 0.4, "done"), (8.1, math.nan, "not run")])
    rows.loc[2, "grid"] = "extension"
    rows.to_csv(out / "tuning.csv", index=False)
    old = {"chosen": {"A": {"s": {"c_omega": 0.9, "_stable_edge": "c_omega=0.9 is the largest stable value: "
                                                                  "c_omega=8.1 not run"}}}}
    write_yaml(out / "tuned.yaml", old)
    _, n = relabel(p, {})
    entry = yaml.safe_load((out / "tuned.yaml").read_text())["chosen"]["A"]["s"]
    assert n == 1 and entry["c_omega"] == 0.9 and "_stable_edge" not in entry
    assert "8.1 is not valid" in entry["_valid_edge"]
    assert "not run" not in (out / "tuning.csv").read_text()
    write_yaml(out / "tuned.yaml", {"chosen": {"A": {"s": {"c_omega": 0.1}}}})  # a different recorded choice
    with pytest.raises(UsageError) as e:  # today's rules choose differently: refused
        relabel(p, {})
    assert (e.value.kind, e.value.field) == ("failed", "--relabel")


def test_a_choice_next_to_a_rejected_value_is_confirmed_on_more_seeds_or_replaced():
    from fbo_cli.grids.spec import TuneSpec
    from fbo_cli.grids.tune import choose, unconfirmed

    ts = TuneSpec([100], 10, "val_loss", "min", None, 0.25, math.inf, {}, {"A": {"outer_lr": [0.01, 0.1, 1.0]}})
    rows = _tuning_rows([(0.01, 0.5, "done"), (0.1, 0.4, "done"), (1.0, math.nan, "diverged")])
    chosen = choose(rows, ts)
    assert unconfirmed(chosen) == [(("A", "s"), {"outer_lr": 0.1})]  # the largest stable value
    ok = _tuning_rows([(0.1, 9.0, "done")]).assign(seed=101, grid="confirmation")  # survives seed 101
    chosen = choose(pd.concat([rows, ok]), ts)["A"]["s"]
    assert chosen["outer_lr"] == 0.1  # a confirmation run vetoes; its score (9.0) does not count
    bad = _tuning_rows([(0.1, math.nan, "diverged")]).assign(seed=102, grid="confirmation")
    table = pd.concat([rows, ok, bad])
    table["rejected"] = table.groupby(["algorithm", "setting", "point"]).rejected.transform("any")
    chosen = choose(table, ts)["A"]["s"]  # 0.1 diverged on seed 102: the next best is chosen
    assert chosen["outer_lr"] == 0.01
    assert "outer_lr=0.01 is the largest stable value: outer_lr=0.1 diverged" in chosen["_stable_edge"]
    interior = _tuning_rows([(0.01, 0.5, "done"), (0.1, 0.4, "done"), (1.0, 0.45, "done")])
    assert unconfirmed(choose(interior, ts)) == []  # interior: nothing to confirm


def _pairs(a, b, metric="final"):
    n = len(a)
    return pd.DataFrame({"algorithm": ["A"] * n + ["B"] * n, "setting": "s", "seed": list(range(n)) * 2,
                         "status": "done", metric: list(a) + list(b)})


def test_claim_verdict_is_a_paired_interval_against_the_margin_read_at_the_looks():
    runs = pd.DataFrame({"algorithm": ["A"] * 3 + ["B"] * 3, "setting": "s", "seed": [0, 1, 2] * 2,
                         "status": "done", "final": [0.9, 0.8, 0.7, 0.85, 0.85, 0.6],
                         "rounds_to_target": [100, np.nan, 50, 200, 300, np.nan]})
    claim = {"text": "", "metric": "final", "better": "A", "than": "B", "mode": "max"}
    v = claim_verdict(runs, claim, "s")  # d = 0.05, -0.05, 0.1: mean 0.033, t interval far wider than that
    assert v.verdict == "inconclusive" and "wins 2/3" in v.detail and v.n == 3 and "paired t" in v.interval
    assert (v.look, v.more) == (1, 3) and v.p >= 0.05  # open at look 1: 3 more pairs for look 2
    v = claim_verdict(runs, {**claim, "metric": "rounds_to_target", "mode": "min"}, "s")
    assert v.verdict == "inconclusive" and "sign test" in v.interval  # a never: 3 pairs cannot decide
    # d = 0.05, 0.06, 0.04: far above the margin, yet look 1 spends 0.035%: t(2) at 99.98% is ~54, no decision
    three = _pairs([0.9, 0.91, 0.9], [0.85, 0.85, 0.86])
    assert claim_verdict(three, claim, "s").verdict == "inconclusive"
    six = _pairs([0.9, 0.91, 0.9] * 2, [0.85, 0.85, 0.86] * 2)  # the same at look 2 (6 pairs, 1.11%): decided
    v = claim_verdict(six, claim, "s")
    assert (v.verdict, v.look, v.n, v.more) == ("holds", 2, 6, 0) and v.p < 0.05
    assert v.interval.startswith("+0.05 [") and "98.89%, paired t" in v.interval
    assert claim_verdict(six, {**claim, "than": "C"}, "s").verdict == "no data"
    close = _pairs([0.9, 0.91, 0.9] * 2, [0.899, 0.91, 0.899] * 2)  # d = 0.001, 0, 0.001: below the margin
    assert claim_verdict(close, claim, "s").verdict == "does not hold"
    v = claim_verdict(close, {**claim, "margin": 0.0}, "s")
    assert (v.verdict, v.look, v.more) == ("inconclusive", 2, 4)  # open at look 2: 4 more pairs for look 3
    equal = {**claim, "mode": "equal"}  # |d| <= 0.001 and its interval inside +-0.005
    v = claim_verdict(close, equal, "s")
    assert v.verdict == "holds" and "within 0.005 in 6/6" in v.detail
    assert claim_verdict(close, {**equal, "margin": 0.0001}, "s").verdict == "inconclusive"
    far = _pairs([0.9, 0.91, 0.9] * 2, [0.8, 0.8, 0.81] * 2)
    assert claim_verdict(far, {**equal, "margin": 0.01}, "s").verdict == "does not hold"  # d ~ 0.1 > 0.01
    for status in ("diverged", "collapsed"):  # the method's worst outcome: a sign test over -inf
        runs.loc[(runs.algorithm == "A") & (runs.seed == 2), "status"] = status
        v = claim_verdict(runs, claim, "s")
        assert v.verdict == "inconclusive" and "wins 1/3" in v.detail and "sign test" in v.interval


def test_the_looks_spend_five_percent_and_an_early_decision_stands():
    from fbo_cli.grids.verdicts import ALPHA, look_alphas, looks

    assert looks() == (3, 6, 10) and looks(20) == (3, 6, 20) and looks(5) == (3, 5)
    a = look_alphas()
    assert abs(sum(a) - ALPHA) < 1e-12 and a[0] < 0.001 < a[1] < a[2]  # O'Brien-Fleming: the first look ~nothing
    claim = {"text": "", "metric": "final", "better": "A", "than": "B", "mode": "max"}
    # decided at look 2 on seeds 0-5; seeds 6-9 (added for another claim) go the other way: not read for it
    runs = _pairs([0.9, 0.91, 0.9] * 2 + [0.1] * 4, [0.85, 0.85, 0.86] * 2 + [0.9] * 4)
    v = claim_verdict(runs, claim, "s")
    assert (v.verdict, v.look, v.n) == ("holds", 2, 6) and "decided at look 2 of 3 (6 seeds)" in v.detail
    assert len(v.runs[0]) == 0 or len(v.runs[0]) == 6  # the runs read are those of the look


def test_the_sequential_design_errs_at_most_its_level_under_the_null():
    from fbo_cli.grids.verdicts import decide, look_alphas, looks, paired_interval, sequential

    rng = np.random.default_rng(1)  # numpy's generator: the same draws on every machine
    wrong = 0
    for _ in range(2000):  # the design's looks without the p-value's bisection (the same decisions, faster)
        d = rng.normal(0.0, 1.0, 10)
        wrong += any(decide(*paired_interval(d[:n], a)[1:3], 0.0) != "inconclusive"
                     for n, a in zip(looks(), look_alphas()))
    assert wrong <= 0.05 * 2000  # 84 here; one look at 5% each would err about 10% of the time
    strong = sequential(np.full(10, 1.0) + rng.normal(0, 0.01, 10), 0.0)
    assert strong.verdict == "holds" and strong.look == 1 and strong.p < 0.05  # overwhelming at look 1 decides
    weak = sequential(rng.normal(0.0, 1.0, 10), 0.0)
    assert (weak.verdict == "inconclusive") == (weak.p >= 0.05)  # the repeated p-value agrees with the design


def test_sign_interval_decides_with_six_pairs_and_takes_never():
    from fbo_cli.grids.verdicts import paired_interval, sign_interval

    assert sign_interval(np.array([1.0, 2, 3, 4, 5]))[1:] == (-math.inf, math.inf)  # 2/32 > 0.05
    m, lo, hi = sign_interval(np.array([5.0, 1, 4, math.inf, 2, 3]))  # 2/64 <= 0.05: [d(1), d(6)]
    assert (lo, hi) == (1.0, math.inf) and m == 3.5
    m, lo, hi, test = paired_interval(np.array([10.0, 20, 30, 40, 50, 60, 70, 80, 90, math.inf]))
    assert test.startswith("sign") and (lo, hi) == (20.0, 90.0)  # n = 10: k = 2 (2 x P(X <= 1) = 0.021)


def test_a_claim_across_two_settings_pairs_one_algorithms_seeds_between_them():
    runs = pd.DataFrame({"algorithm": "A", "setting": ["tau=5"] * 3 + ["tau=1"] * 3, "seed": [0, 1, 2] * 2,
                         "status": "done", "rounds_to_target": [300, 400, 420, 500, 520, 600]})
    claim = {"text": "", "metric": "rounds_to_target", "better": "A", "than": "A", "mode": "min"}
    v = claim_verdict(runs, claim, "tau=5", "tau=1")  # d = 200, 120, 180: open at look 1
    assert v.verdict == "inconclusive" and "wins 3/3" in v.detail and v.detail.startswith("400 vs 520")
    runs = pd.DataFrame({"algorithm": "A", "setting": ["tau=5"] * 10 + ["tau=1"] * 10, "seed": list(range(10)) * 2,
                         "status": "done",
                         "rounds_to_target": [300, 400, 420] * 3 + [300] + [500, 520, 600] * 3 + [500]})
    v = claim_verdict(runs, claim, "tau=5", "tau=1")  # rounds: the sign test, decided at the last look
    assert (v.verdict, v.look) == ("holds", 3) and "sign test" in v.interval
    assert claim_verdict(runs, claim, "tau=1", "tau=5").verdict == "does not hold"
    assert claim_verdict(runs, claim, "tau=5", "tau=9").verdict == "no data"


def test_imax_per_seed_is_the_largest_tolerated_window_and_needs_every_window():
    from fbo_cli.evidence.report.codasca_section import imax_per_seed, windows

    I = [1, 8, 32]
    auc = {("A", 0): [0.95, 0.945, 0.90], ("A", 1): [0.95, 0.93, 0.95], ("B", 0): [0.95, 0.95, 0.945],
           ("B", 1): [0.95, 0.96, 0.80]}
    rows = [{"algorithm": a, "setting": f"K=4, I={i}", "seed": s, "status": "done", "final": v}
            for (a, s), vals in auc.items() for i, v in zip(I, vals)]
    runs = pd.DataFrame(rows)
    runs.loc[(runs.algorithm == "A") & (runs.seed == 1) & (runs.setting == "K=4, I=32"), "status"] = "diverged"
    exp = windows([{"set": {"clients": 4, "I": i}} for i in I])
    t = imax_per_seed(runs, exp).set_index(["algorithm", "seed"]).I_max
    # within 0.01 of the seed's own I = 1: A0 tolerates 8 (not 32); A1's I = 8 falls 0.02 short and its
    # I = 32 diverged (not tolerated); B0 all: at the grid's top, censored (+inf: at least 32); B1 up to 8
    assert t.to_dict() == {("A", 0): 8, ("A", 1): 1, ("B", 0): math.inf, ("B", 1): 8}
    claim = {"text": "", "metric": "I_max", "better": "B", "than": "A", "mode": "max"}
    v = claim_verdict(imax_per_seed(runs, exp), claim, "K=4")  # wins 2/2; 2 pairs: the t interval is wide
    assert v.verdict == "inconclusive" and "wins 2/2" in v.detail
    assert imax_per_seed(runs[runs.setting != "K=4, I=32"], exp).empty  # a missing window: no I_max


def test_match_paper_is_an_equivalence_test_against_the_tolerance_read_at_the_looks():
    six = lambda v: pd.Series(list(v) * 2)  # noqa: E731  (look 2: 6 seeds at 1.11%)
    assert match_paper(pd.Series([0.82, 0.825, 0.83]), 0.83, 0.02)[0] == "inconclusive"  # look 1: ~nothing spent
    assert match_paper(six([0.81, 0.815, 0.82]), 0.83, 0.02)[0] == "inconclusive"  # [-0.027, -0.003] at 97.8%
    v, text = match_paper(six([0.82, 0.825, 0.83]), 0.83, 0.02)
    assert v == "consistent with" and "decided at look 2 of 3 (6 seeds)" in text
    assert match_paper(six([0.82, 0.825, 0.83]), 0.83, 0.01)[0] == "inconclusive"  # a tighter tolerance
    assert match_paper(six([0.70, 0.71, 0.70]), 0.83, 0.02)[0] == "below"
    assert match_paper(pd.Series([0.5, 0.9]), 0.83, 0.02)[0] == "inconclusive"  # a wide spread is never favourable
    assert match_paper(pd.Series([0.85]), 0.85, 0.02)[0] == "inconclusive"  # one seed: no interval
    assert match_paper(six([0.85] * 3), 0.85, 0.02)[0] == "inconclusive"  # no zero-variance t interval
    assert match_paper(six([960.0, 1000, 980]), 1000.0, 0.02, counts=True)[0] == "consistent with"  # 10%
    assert match_paper(six([900.0, 950, 920]), 1000.0, 0.02, counts=True)[0] == "inconclusive"
    never = pd.Series([np.nan] * 10)  # seeds that never reach the target: the median's interval is [inf, inf]
    assert match_paper(never, 1630.0, 0.02, counts=True)[0] == "above"  # look 3: the sign test decides
    assert match_paper(never[:6], 1630.0, 0.02, counts=True)[0] == "inconclusive"  # 6 cannot decide at 1.11%
    assert match_paper(pd.Series([np.nan]), 0.5, 0.02)[0] == "no data"


def test_report_from_evidence_shows_verdicts_paper_numbers_and_missing_runs(tmp_path):
    p = spec(tmp_path, seeds="[0]")
    assert runner.invoke(app, ["compare", str(p)]).exit_code == 0
    ev = tmp_path / "evidence"
    # collect_evidence works on the paper registry; copy this spec's runs the same way
    from fbo_cli.evidence.report import Paper

    assert collect_evidence(tmp_path, ev, papers=(Paper("t", "T", "", given=(str(p),)),)) == 2
    files = {f.name for f in ev.rglob("*") if f.is_file()}
    # compact: no plots, checkpoints; the list of the runs --collect brought (the only ones --prune takes unasked)
    assert files == {"config.yaml", "metrics.csv", "summary.json", ".fbo-results", ".fbo-collected"}
    reg = (Paper("t", "T", "", given=(str(p),)),)
    kept = sorted(d.parent for d in ev.rglob("config.yaml"))
    stale = kept[0].parent / "stale-run"  # a finished run no spec refers to any more
    shutil.copytree(kept[0], stale)
    (stale / "summary.json").write_text(json.dumps({**json.loads((stale / "summary.json").read_text()),
                                                    "run_id": "stale-run"}))
    (stale / "notes.txt").write_text("mine")  # a file fbo did not make: it stays, and so does its folder
    with (ev / ".fbo-collected").open("a") as f:  # as if --collect had brought it, before a retuning replaced it
        f.write(f"{stale.relative_to(ev)}\n")
    foreign = kept[0].parent / "not-a-run"  # no completion record: never listed, never removed
    foreign.mkdir()
    (foreign / "config.yaml").write_text("task: hyperrep\n")
    assert prune_evidence(ev, papers=reg) == [stale] and (stale / "summary.json").exists()  # listed only
    with pytest.raises(UsageError, match="would remove 1 of the 3 runs"):  # a third of the evidence: --yes
        prune_evidence(ev, papers=reg, remove=True)
    assert (stale / "summary.json").exists()
    assert prune_evidence(ev, papers=reg, remove=True, yes=True) == [stale]
    assert not (stale / "summary.json").exists() and (stale / "notes.txt").read_text() == "mine"
    assert (foreign / "config.yaml").exists()
    shutil.rmtree(foreign)
    assert sorted(d.parent for d in ev.rglob("config.yaml")) == kept  # the spec's runs stay
    p2 = spec(tmp_path, seeds="[0, 1]")  # seed 1 was never run: reported as missing
    stats = build_report(ev, tmp_path / "r.md", tmp_path / "r.html", specs=[str(p2)])
    md = (tmp_path / "r.md").read_text()
    assert stats["missing"] == 2 and "**Partial**: 2 of 4 runs missing" in md
    assert "AggITD beats FedNest" in md and any(f"**{v}**" in md for v in ("holds", "does not hold", "inconclusive"))
    assert "paired t interval" in md and "95% interval of the paired difference" in md
    # no reference_on: the paper's number stands as context, never with a verdict
    assert "| FedNest | iid | final | 0.5 |" in md and "context: the spec does not name the paper's dataset" in md
    assert re.search(r"\| AggITD \| iid \| final \| 0.5 \| [^|]* \| context: a tuned row", md)  # tuned: context
    assert "## Summary: the papers' claims and their verdicts" in md and "[t](#" in md
    html = (tmp_path / "r.html").read_text()  # the index: the summary; the experiments on their own page
    page = (tmp_path / "r-specs.html").read_text()
    assert "<table>" in html and "data:image" not in html + page and "every paper's reproduction" not in md
    assert 'src="r-figures/t.svg"' in page and (tmp_path / "r-figures" / "t.pdf").is_file()
    assert 'href="r-specs.html#' in html  # the summary links to the page that holds the section
    assert '<summary><b>Contents</b></summary>' in html and 'id="summary-the-papers-claims-and-their-verdicts"' in html
    assert not re.search(r"<h[1-3][^>]*>[^<]*`", html)  # headings render code, not backticks
    # like with like: on the paper's dataset a verdict; on another dataset context
    verdicts = r"[0-9.]+;? ?[^|]* \| \*\*(reached|ours above|ours below|inconclusive)\*\*[^|]* \|"
    for on, expect in (("{dataset: digits}", r"\| FedNest \| iid \| final \| 0.5 \| " + verdicts),
                       ("{dataset: mnist}", r"context: the paper's number is on mnist, ours on digits")):
        p3 = spec(tmp_path, seeds="[0]", extra=f"reference_on: {on}")
        build_report(ev, tmp_path / "r.md", tmp_path / "r.html", specs=[str(p3)])
        assert re.search(expect, (tmp_path / "r.md").read_text()), on


def test_a_tuned_row_may_share_its_runs_with_the_papers_row(tmp_path):
    def write(algos):
        p = tmp_path / "same.yaml"
        p.write_text(f"name: same\ntask: hyperrep\nseeds: [0]\nalgorithms: {algos}\n"
                     f"base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {tmp_path}}}\n")
        return p

    p = write("[{name: paper, algo: aggitd}, {name: tuned, algo: aggitd, tune: {outer_lr: [0.01, 0.1]}}]")
    exp = load_spec(p)  # before tuning both rows are the paper's values: the same run, shown twice
    assert len({c.cfg.run_dir for c in exp.cells}) == 1
    r = runner.invoke(app, ["compare", str(p)])
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "compare" / "same" / "table.csv")
    assert list(table.algorithm) == ["paper = tuned"] and list(table.seeds) == [1]  # one row names both (issue 37)
    r = runner.invoke(app, ["compare", str(write("[{name: a, algo: aggitd}, {name: b, algo: aggitd}]"))])
    assert fails_with(r, "bad_spec", field="algorithms", value="b"), r.output  # the same runs as a


def test_the_summary_lists_the_claims_without_a_verdict_and_why():
    from fbo_cli.evidence.report import PAPERS, summary_md

    md = "\n".join(summary_md({p.key: [] for p in PAPERS}, PAPERS))
    rows = [r for r in md.splitlines() if r.startswith("| ") and "not available offline" in r]
    assert "get no verdict here, and why" in md and len(rows) >= 4
    part = md.split("get no verdict here, and why")[1]
    assert sum(len(p.unchecked) for p in PAPERS) == part.count("\n| ") - 1  # every entry once, and the header


def test_a_short_tuning_budget_gets_its_ranking_checked_at_the_evaluation_budget(tmp_path):
    from typer.testing import CliRunner

    from fbo_cli.cli import app
    from fbo_cli.grids.compare import tuning_budget_note
    from fbo_cli.grids.spec import load_spec

    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: tinyrank
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 20, out_dir: {tmp_path}}}
tune: {{seeds: [100], rounds: 10, tolerance: off}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.003, 0.01, 0.03, 0.1]}}}}]
""")
    r = CliRunner().invoke(app, ["tune", str(spec)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "compare" / "tinyrank"
    ranking = pd.read_csv(out / "ranking.csv")
    tuned = yaml.safe_load((out / "tuned.yaml").read_text())
    verdict = tuned["ranking_check"]["A | default"]
    assert len(ranking) == 3 and ranking.chosen.sum() == 1 and ranking.full_score.notna().all()
    assert verdict["top"][0] == ranking[ranking.chosen].point.iloc[0]
    full_best = ranking.loc[ranking[~ranking.full_rejected].full_score.idxmin(), "point"]
    assert verdict["best_at_budget"] == full_best and verdict["holds"] == (full_best == verdict["top"][0])
    # the full-budget runs are ordinary runs at 20 rounds on the tuning seed
    extra = sum(len(v) for v in (tuned.get("extended") or {}).values())
    assert len(list(tmp_path.glob("hyperrep/aggitd/*-s100-*"))) == 4 + extra + 3
    note = tuning_budget_note(load_spec(spec, {"out_dir": str(tmp_path)}))
    assert "ranking check" in note and ("holds" in note) == verdict["holds"]
    # a tuning recorded without the check gets it afterwards from its tuning.csv, the grid not rerun
    del tuned["ranking_check"]
    (out / "ranking.csv").unlink()
    (out / "tuned.yaml").write_text(yaml.safe_dump(tuned))
    before = {p: p.stat().st_mtime for p in tmp_path.glob("hyperrep/aggitd/*/summary.json")}
    r = CliRunner().invoke(app, ["tune", str(spec), "--ranking-only"])
    assert r.exit_code == 0, r.output
    again = yaml.safe_load((out / "tuned.yaml").read_text())
    assert again["ranking_check"]["A | default"] == verdict and len(pd.read_csv(out / "ranking.csv")) == 3
    assert {p: p.stat().st_mtime for p in tmp_path.glob("hyperrep/aggitd/*/summary.json")} == before  # reused


def test_a_choice_with_every_point_rejected_says_so():
    from fbo_cli.grids.compare import tuned_note

    exp = type("E", (), {})()
    exp.algorithms = [{"name": "F", "tune": {"outer_lr": [1, 2]}, "set": {"inner_lr": 0.003}}]
    exp.settings = [{"name": "default"}]
    exp.tuned = {"chosen": {"F": {"default": {"_none": "every grid point was rejected"}}}, "rounds": "budget",
                 "procedure": "grid search"}
    note = tuned_note(exp)
    assert "not tuned: every grid point was rejected" in note and "run `fbo tune`" not in note


def test_the_report_summary_counts_tuned_choices_by_their_grid_edge_and_budget():
    from types import SimpleNamespace as NS

    from fbo_cli.evidence.report.tuning import tuning_md

    cell = NS(cfg=NS(run=NS(rounds=300)))
    chosen = {"A": {"s": {"lr": 0.1}}, "B": {"s": {"lr": 1.0, "_stable_edge": "lr=1 is the largest stable value"}},
              "C": {"s": {"lr": 9.0, "_at_grid_edge": "lr"}}, "D": {"s": {"_none": "every grid point was rejected"}},
              "E": {"s": {"c": 0.9, "_valid_edge": "c=0.9 is the largest valid value: c=8.1 is not valid (...)"}}}
    at_budget = NS(exp=NS(name="e1", cells=[cell], tuned={"rounds": "budget", "chosen": chosen}))
    short = NS(exp=NS(name="e2", cells=[cell], tuned={"rounds": 40, "chosen": {"A": {"s": {"lr": 0.1}}}}))
    line = tuning_md([at_budget, short])[1]
    assert "6 tuned choices (algorithm × setting) in 2 experiments, each classified" in line
    assert "): 2 interior" in line
    assert "1 the last value of the key's valid range" in line
    assert "1 the largest or smallest stable value" in line
    assert "1 at a grid's edge, not resolved (no value run beyond it) (e1: C, s)" in line
    assert "1 with every grid point rejected" in line
    assert "evaluation budget: 1 experiments" in line and "without it: 1 (e2)" in line


def test_a_tuning_resumed_without_its_runs_reuses_the_recorded_scores_and_runs_only_new_points(tmp_path):
    import shutil

    def write(grid, tail=0.25):
        p = tmp_path / "exp.yaml"
        p.write_text(f"""
name: resumed
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 10, out_dir: {tmp_path}}}
tune: {{seeds: [100], rounds: budget, tolerance: off, tail: {tail}}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: {grid}}}}}]
""")
        return p

    p = write("[0.003, 0.01, 0.03]")
    assert runner.invoke(app, ["tune", str(p)]).exit_code == 0
    out = tmp_path / "compare" / "resumed"
    first = pd.read_csv(out / "tuning.csv")
    assert not first.recorded.any()
    shutil.rmtree(tmp_path / "hyperrep")  # a fresh machine: only the recorded tuning is there
    r = runner.invoke(app, ["tune", str(p), "--dry-run"])
    assert r.exit_code == 0 and "nothing left to run" in r.output, r.output
    elsewhere = tmp_path / "docs" / "results"  # the record read under another results root: its runs by their ids
    shutil.copytree(out, elsewhere / "compare" / "resumed")
    r = runner.invoke(app, ["tune", str(p), "--out-dir", str(elsewhere), "--dry-run"])
    assert r.exit_code == 0 and "nothing left to run" in r.output, r.output
    p = write("[0.001, 0.003, 0.01, 0.03]")  # a widened grid: one new point
    r = runner.invoke(app, ["tune", str(p)])
    assert r.exit_code == 0, r.output
    again = pd.read_csv(out / "tuning.csv")
    old = again[again.outer_lr.isin(first.outer_lr)].set_index("point")
    assert old.recorded.all() and not again[again.outer_lr == 0.001].recorded.any()
    assert np.allclose(old.score.loc[first.point], first.set_index("point").score)
    ran = {d.name for d in (tmp_path / "hyperrep" / "aggitd").iterdir()}
    assert ran == {Path(d).name for d in again[~again.recorded].run_dir}  # only the new points ran
    assert not (out / "tuning.partial.csv").exists()  # written while it ran, removed when it finished
    # a tuning stopped before it finished leaves its partial record, which stands for its runs too
    (out / "tuning.csv").rename(out / "tuning.partial.csv")
    partial = {"score": "heldout_loss", "tail": 0.25, "rounds": "budget"}
    (out / "tuning.partial.yaml").write_text(yaml.safe_dump(partial))
    (out / "tuned.yaml").unlink()
    shutil.rmtree(tmp_path / "hyperrep")
    r = runner.invoke(app, ["tune", str(p), "--dry-run"])
    assert r.exit_code == 0 and "nothing left to run" in r.output, r.output
    # scored by another rule: the record does not stand, everything runs again
    r = runner.invoke(app, ["tune", str(write("[0.001, 0.003, 0.01, 0.03]", tail=0.5)), "--dry-run"])
    assert r.exit_code == 0 and "nothing left to run" not in r.output, r.output


def test_a_recorded_score_that_its_run_on_disk_contradicts_is_warned_of_and_the_run_decides(tmp_path):
    p = tmp_path / "exp.yaml"
    p.write_text(f"""
name: stale
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 10, out_dir: {tmp_path}}}
tune: {{seeds: [100], rounds: budget, tolerance: off}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.003, 0.01, 0.03]}}}}]
""")
    assert runner.invoke(app, ["tune", str(p)]).exit_code == 0
    out = tmp_path / "compare" / "stale"
    first = pd.read_csv(out / "tuning.csv")
    doctored = first.copy()
    doctored.loc[doctored.outer_lr == 0.01, "score"] += 0.5  # as if an older run had scored otherwise
    doctored.to_csv(out / "tuning.csv", index=False)
    r = runner.invoke(app, ["tune", str(p)])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert said.count("warning:") == 1 and "outer_lr=0.01, seed 100" in said and "the run decides" in said
    again = pd.read_csv(out / "tuning.csv")
    assert np.allclose(again.score, first.score)  # today's files, not the doctored record


def test_only_an_unresolved_edge_note_says_edge():
    from fbo_cli.grids.spec import edge_note

    # a value beside a rejected one is interior to the grid as extended: no "edge" (issue 53)
    resolved = edge_note({"_stable_edge": "outer_lr=0.9 is the largest stable value: outer_lr=2.7 diverged"})
    unresolved = edge_note({"_at_grid_edge": "outer_lr"})
    assert "edge" not in resolved and "beside a rejected value" in resolved and "largest stable value" in resolved
    assert "unresolved edge" in unresolved and "outer_lr" in unresolved


def test_a_factor_claim_tests_the_ratio_of_the_paired_values():
    runs = _pairs([500, 520, 480] * 3 + [500], [1500, 1640, 1420] * 3 + [1500], "rounds_to_target")  # look 3
    claim = {"text": "", "metric": "rounds_to_target", "better": "A", "than": "B", "mode": "min", "factor": 2}
    v = claim_verdict(runs, claim, "s")  # ratios 3.0, 3.15, 2.96: the interval of the ratio lies above 2
    assert v.verdict == "holds" and "of than / better" in v.interval and v.interval.startswith("3x [2.96x, 3.15x]")
    assert claim_verdict(runs, {**claim, "factor": 3}, "s").verdict == "inconclusive"
    assert claim_verdict(runs, {**claim, "factor": 4}, "s").verdict == "does not hold"


def test_a_choice_beside_a_rejected_value_is_no_interior_choice_and_an_unexplored_side_is_an_edge():
    import itertools

    from fbo_cli.evidence.report.tuning import choice_kind

    grid = list(itertools.product([0.01, 0.1, 1.0], [0.5, 0.7, 0.9]))
    rec = pd.DataFrame({"algorithm": "A", "setting": "s", "grid": "spec", "lr": [g[0] for g in grid],
                        "mom": [g[1] for g in grid], "rejected": [g == (1.0, 0.7) for g in grid]})
    kind, why = choice_kind({"lr": 0.1, "mom": 0.7}, rec, "A", "s")
    assert kind == "stable" and "beside the rejected lr=1" in why
    assert choice_kind({"lr": 0.1, "mom": 0.9}, rec, "A", "s")[0] == "edge"  # mom=0.9: nothing run above it
    kind, why = choice_kind({"lr": 0.01, "mom": 0.7}, rec, "A", "s")
    assert kind == "edge" and "lr=0.01 is the smallest value run" in why
    assert choice_kind({"lr": 0.1, "mom": 0.7}, rec.assign(rejected=False), "A", "s")[0] == "interior"
    tied = rec.assign(mom=rec.lr)  # lr and mom tuned together (a grid key "lr,mom"): one line, lr=1 rejected
    assert choice_kind({"lr": 0.1, "mom": 0.1}, tied, "A", "s", {"lr,mom": [0.01, 0.1, 1.0]})[0] == "stable"


def test_the_repeated_p_value_in_closed_form_is_the_edge_of_the_decision():
    from fbo_cli.grids import verdicts

    rng = np.random.default_rng(2)
    for equal in (False, True):
        for _ in range(5):
            d = rng.normal(0.01, 0.01, 6)
            level = verdicts._decisive_level(d, 0.005, equal, False)
            decides = lambda a: verdicts.decide(*verdicts.paired_interval(d, a)[1:3], 0.005, equal) != "inconclusive"
            assert level == 1.0 or (decides(level * 1.001) and not decides(level * 0.999))


def test_a_choice_beside_an_unstable_value_on_any_key_needs_a_margin_on_3_seeds():
    """The tally counts a choice beside an unstable value on any key (here lr, while mom sits at an unresolved edge);
    a verdict resting on it without a margin on 3 tuning seeds leaves the counts, naming the probe and its cost."""
    from types import SimpleNamespace

    from fbo_cli.evidence.report.control import NO_MARGIN, unmargined
    from fbo_cli.evidence.report.tuning import margin_seeds, unstable_keys
    from fbo_cli.grids.verdicts import Verdict

    rec = pd.DataFrame([{"algorithm": "A", "setting": "s", "seed": 100, "lr": lr, "mom": 0.9, "grid": "spec",
                         "rejected": lr > 0.1, "reason": "diverged" if lr > 0.1 else None, "train_time_s": 60.0,
                         "eval_time_s": 0.0} for lr in (0.01, 0.1, 1.0)])
    assert unstable_keys({"lr": 0.1, "mom": 0.9}, rec, "A", "s") == ["lr"]
    assert unstable_keys({"lr": 0.01, "mom": 0.9}, rec, "A", "s") == []  # its larger neighbour ran stable
    margin = pd.DataFrame([{"algorithm": "A", "setting": "s", "seed": k, "lr": 0.3, "mom": 0.9, "grid": "margin",
                            "rejected": False, "reason": None} for k in (100, 101)])
    assert margin_seeds(pd.concat([rec, margin]), "A", "s") == 2
    exp = SimpleNamespace(tuned={"setting": "s", "chosen": {"A": {"s": {"lr": 0.1, "mom": 0.9}}}},
                          algorithms=[SimpleNamespace(name="A", tune={"lr": [0.01]}),
                                      SimpleNamespace(name="B", tune={})])
    claim = SimpleNamespace(better="A", than="B")
    v = unmargined(exp, claim, ["s"], Verdict("holds", "0.9 vs 0.8", "+0.1", 3, look=1, p=0.01), rec)
    assert v.verdict == "inconclusive" and v.detail.startswith(NO_MARGIN) and "3 core-minutes" in v.detail
    three = pd.concat([rec, margin, margin.assign(seed=102)])  # the margin stable on 3 tuning seeds: it counts
    assert unmargined(exp, claim, ["s"], Verdict("holds", "", "", 3, p=0.01), three).verdict == "holds"


def test_prune_under_its_share_never_removes_a_users_own_finished_run_without_yes(tmp_path, monkeypatch):
    """Issue 62 item 7: a finished run that --collect did not bring (the user's own, in a marked root) stays."""
    from fbo_cli.evidence.report import Paper
    from fbo_cli.evidence.report import evidence as evidence_mod

    p = spec(tmp_path, seeds="[0]")
    assert runner.invoke(app, ["compare", str(p)]).exit_code == 0
    ev = tmp_path / "evidence"
    reg = (Paper("t", "T", "", given=(str(p),)),)
    assert collect_evidence(tmp_path, ev, papers=reg) == 2
    kept = sorted(d.parent for d in ev.rglob("config.yaml"))
    mine = kept[0].parent / "my-own-run"
    shutil.copytree(kept[0], mine)
    (mine / "summary.json").write_text(json.dumps({**json.loads((mine / "summary.json").read_text()),
                                                   "run_id": "my-own-run"}))
    monkeypatch.setattr(evidence_mod, "PRUNE_SHARE", 0.5)  # one of three runs: under the share
    with pytest.raises(UsageError, match="did not bring there"):
        prune_evidence(ev, papers=reg, remove=True)
    assert (mine / "summary.json").is_file()
    assert prune_evidence(ev, papers=reg, remove=True, yes=True) == [mine] and not mine.exists()


def test_prune_keeps_a_retuning_under_way_and_lists_a_finished_tunings_leftover(tmp_path):
    from fbo_cli.evidence.report import Paper

    p = spec(tmp_path, seeds="[0]")
    ev = tmp_path / "evidence"
    here = ev / "compare" / "t"
    here.mkdir(parents=True)
    (ev / ".fbo-results").write_text("")
    (here / "tuned.yaml").write_text(yaml.safe_dump({"seeds": [100], "chosen": {}}))
    rows = lambda ids: pd.DataFrame({"run_dir": [f"results/hyperrep/aggitd/{i}" for i in ids]})  # noqa: E731
    rows(["a", "b"]).to_csv(here / "tuning.csv", index=False)
    (here / "tuning.partial.yaml").write_text("score: heldout_loss\n")
    reg = (Paper("t", "T", "", given=(str(p),)),)
    rows(["a", "b", "c"]).to_csv(here / "tuning.partial.csv", index=False)  # c: a margin probe not yet recorded
    assert prune_evidence(ev, papers=reg) == []  # a re-tuning under way: fbo tune resumes from it
    rows(["docs/results/a", "b"]).to_csv(here / "tuning.partial.csv", index=False)  # all in the finished record
    assert prune_evidence(ev, papers=reg) == [here / "tuning.partial.yaml", here / "tuning.partial.csv"]


def test_collect_never_puts_back_an_older_tuning_or_fewer_settled_seeds(tmp_path):
    from fbo_cli.evidence.report import Paper

    p = spec(tmp_path, seeds="[0]")
    reg = (Paper("t", "T", "", given=(str(p),)),)
    src, ev = tmp_path / "compare" / "t", tmp_path / "evidence" / "compare" / "t"
    src.mkdir(parents=True)
    ev.mkdir(parents=True)
    rows = lambda ids: pd.DataFrame({"run_dir": [f"results/hyperrep/aggitd/{i}" for i in ids]})  # noqa: E731
    settled = lambda seeds: yaml.safe_dump({"added": [{"setting": "iid", "algorithms": ["AggITD"],  # noqa: E731
                                                       "seeds": seeds}]})
    # the evidence holds a later tuning (a margin probe more) and a later look than the results being collected
    rows(["a", "b", "c"]).to_csv(ev / "tuning.csv", index=False)
    (ev / "tuned.yaml").write_text("chosen: {AggITD: {iid: {outer_lr: 0.01}}}\n")
    (ev / "settled.yaml").write_text(settled([1, 2, 3, 4, 5]))
    rows(["a", "b"]).to_csv(src / "tuning.csv", index=False)
    (src / "tuned.yaml").write_text("chosen: {AggITD: {iid: {outer_lr: 0.03}}}\n")
    (src / "settled.yaml").write_text(settled([1, 2]))
    before = {f: (ev / f).read_bytes() for f in ("tuning.csv", "tuned.yaml", "settled.yaml")}
    refused = []
    collect_evidence(tmp_path, tmp_path / "evidence", papers=reg, refused=refused)
    assert {f: (ev / f).read_bytes() for f in before} == before  # kept, each named
    assert sorted(Path(r).name for r, _ in refused) == ["settled.yaml", "tuned.yaml", "tuning.csv"]
    # a record that holds all the evidence's holds (the next look, a tuning with more runs) replaces it
    rows(["a", "b", "c", "d"]).to_csv(src / "tuning.csv", index=False)
    (src / "settled.yaml").write_text(settled([1, 2, 3, 4, 5, 6, 7]))
    refused = []
    collect_evidence(tmp_path, tmp_path / "evidence", papers=reg, refused=refused)
    assert refused == [] and (ev / "tuned.yaml").read_text() == (src / "tuned.yaml").read_text()
    assert (ev / "settled.yaml").read_text() == settled([1, 2, 3, 4, 5, 6, 7])
