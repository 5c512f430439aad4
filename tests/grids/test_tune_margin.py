"""The tuning's stability rules (issue 50): a choice next to an unstable value stands only with margin,
and a tuning run that collapses is rejected like one that diverges."""

import json
import math
from types import SimpleNamespace

import pandas as pd

from fbo_cli.grids.spec import Cell, TuneSpec, load_spec
from fbo_cli.grids.tune import choose, tune_cells, unconfirmed
from fbo_cli.grids.tune.grid import margin_seeds
from fbo_cli.grids.tune.rules import MARGIN_SEEDS, collect_tuning, margin_probes
from fbo_cli.runs.rundir import file_sha256

TS = TuneSpec([100], 10, "val_loss", "min", None, 0.25, math.inf, {}, {"A": {"outer_lr": [0.01, 0.1, 1.0]}})


def rows(points, grid="spec", seed=100):
    """A tuning table of one (algorithm, setting): (outer_lr, score, status) per point."""
    return pd.DataFrame([{"algorithm": "A", "setting": "s", "seed": seed, "point": f"outer_lr={v}", "outer_lr": v,
                          "grid": grid, "status": st, "score": sc, "start": 9.0, "oscillation": 0.0, "run_dir": "",
                          "reason": "" if st == "done" else st, "rejected": st != "done"} for v, sc, st in points])


def test_a_choice_next_to_an_unstable_value_stands_only_if_the_step_between_is_stable():
    grid = rows([(0.01, 0.5, "done"), (0.1, 0.4, "done"), (1.0, math.nan, "diverged")])
    chosen = choose(grid, TS)
    c = chosen["A"]["s"]
    assert c["outer_lr"] == 0.1 and "not run yet" in c["_margin"]
    assert margin_probes(grid, chosen, TS, {}) == [(("A", "s"), {"outer_lr": 0.316})]  # sqrt(0.1 * 1)
    assert margin_probes(grid, chosen, TS, {("A", "s"): [{"outer_lr": 0.316}]}) == []  # asked once
    # the midpoint diverges: the edge choice has no margin, and the next value inside the band is chosen
    failed = pd.concat([grid, rows([(0.316, math.nan, "diverged")], grid="margin")])
    c = choose(failed, TS)["A"]["s"]
    assert c["outer_lr"] == 0.01
    assert "outer_lr=0.1 has no margin (outer_lr=0.316, between the choice and outer_lr=1, which diverged: " \
           "diverged)" in c["_stable_edge"]
    assert "_margin" not in c  # its larger neighbour is stable itself: nothing more to probe
    assert unconfirmed(choose(failed, TS)) == [(("A", "s"), {"outer_lr": 0.01})]  # still confirmed on more seeds
    # the midpoint is stable: the choice stands, with its margin named; its score never enters the choice
    ok = pd.concat([grid, rows([(0.316, 0.01, "done")], grid="margin")])
    c = choose(ok, TS)["A"]["s"]
    assert c["outer_lr"] == 0.1 and c["_margin"].endswith("is stable on seeds 100")
    assert margin_probes(ok, choose(ok, TS), TS, {("A", "s"): [{"outer_lr": 0.316}]}) == []
    # a neighbour rejected for no progress (not instability) asks no margin; nor does an interior choice
    slow = rows([(0.01, 0.5, "done"), (0.1, 0.4, "done"), (1.0, 9.5, "no progress")])
    assert "_margin" not in choose(slow, TS)["A"]["s"]
    inside = rows([(0.01, 0.5, "done"), (0.1, 0.4, "done"), (1.0, 0.45, "done")])
    assert margin_probes(inside, choose(inside, TS), TS, {}) == []


def _run(root, name, acc, status="done", drop=0.1):
    """A finished run directory whose heldout_loss falls by ``drop`` and whose heldout_acc is ``acc`` per
    evaluation."""
    d = root / "hyperrep" / "aggitd" / name
    d.mkdir(parents=True)
    n = len(acc)
    pd.DataFrame({"rounds": range(0, 5 * n, 5), "iterations": range(n),
                  "heldout_loss": [2.3 - drop * i for i in range(n)], "heldout_acc": acc,
                  "test_acc": acc}).to_csv(d / "metrics.csv", index=False)
    s = {"run_id": name, "algo": "aggitd", "task": "hyperrep", "status": status, "metric": "test_acc",
         "metrics_sha256": file_sha256(d / "metrics.csv")}
    (d / "summary.json").write_text(json.dumps(s))
    cfg = SimpleNamespace(run_dir=d, run=SimpleNamespace(rounds=5 * n, dataset="mnist"))
    return Cell("A", "s", 100, cfg, ())


def test_a_tuning_run_whose_accuracy_collapses_is_rejected_as_collapsed(tmp_path):
    ts = TuneSpec([100], None, "heldout_loss", "min", None, 0.25, math.inf, {}, {"A": {"outer_lr": [0.01, 0.1]}})
    fine = _run(tmp_path, "fine", [0.1, 0.5, 0.7, 0.8, 0.85, 0.9])
    fell = _run(tmp_path, "fell", [0.1, 0.6, 0.8, 0.12, 0.1, 0.1])  # rose, then fell to chance and stayed
    table = collect_tuning([(fine, {"outer_lr": 0.01}), (fell, {"outer_lr": 0.1})], ts)
    assert list(table.status) == ["done", "collapsed"]
    assert list(table.rejected) == [False, True] and table.reason.iloc[1] == "collapsed"
    c = choose(table, ts)["A"]["s"]  # the collapsed point scored better (its loss still fell), yet is rejected
    assert c["outer_lr"] == 0.01 and "outer_lr=0.1 collapsed" in c["_stable_edge"]
    assert "_margin" in c  # a collapse is instability: the choice beside it must show its margin


def _spec(tmp_path, seeds="[0, 1]", tune_seeds="[100]"):
    p = tmp_path / "m.yaml"
    p.write_text(f"""
name: m
task: hyperrep
seeds: {seeds}
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 4, threads: 1, out_dir: {tmp_path}}}
tune: {{seeds: {tune_seeds}, rounds: 4}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.01, 0.1]}}}}]
settings: [{{name: s, set: {{partition: iid}}}}]
""")
    return load_spec(p, use_tuned=False)


def test_a_margin_probe_runs_on_at_least_three_seeds_and_any_of_them_vetoes(tmp_path):
    exp = _spec(tmp_path)
    assert MARGIN_SEEDS == 3 and margin_seeds(exp, exp.tune) == [100, 101, 102]  # one tuning seed, two more
    other = _spec(tmp_path, seeds="[0, 101]")
    assert margin_seeds(other, other.tune) == [100, 102, 103]  # never an evaluation seed
    many = _spec(tmp_path, tune_seeds="[100, 200, 300, 400]")
    assert margin_seeds(many, many.tune) == [100, 200, 300, 400]  # every tuning seed, and no more
    probe, chosen = {"outer_lr": 0.316}, {"outer_lr": 0.1}
    cells = tune_cells(exp, exp.tune, {}, confirm={("A", "s"): [chosen]}, margin={("A", "s"): [probe]})
    assert sorted(c.seed for c, p in cells if p == probe) == [100, 101, 102]
    assert sorted(c.seed for c, p in cells if p == chosen) == [100, 101, 102]  # the grid point on 100, confirmed on two
    assert sorted(c.seed for c, p in cells if p == {"outer_lr": 0.01}) == [100]
    # collected, a probe's run on a confirmation seed is a margin run, and it alone can veto the choice
    ts = TuneSpec([100], None, "heldout_loss", "min", None, 0.25, math.inf, {}, {"A": {"outer_lr": [0.01, 0.1, 1.0]}})
    unstable = rows([(1.0, math.nan, "diverged")])  # the choice's larger neighbour

    def collected(bad_seed):
        runs = []
        for c, p in cells:
            status = "diverged" if (p == probe and c.seed == bad_seed) else "done"
            d = _run(tmp_path / f"{bad_seed}-{c.seed}", point_of(p), [0.1, 0.5, 0.7, 0.8, 0.85, 0.9], status,
                     drop=0.2 if p == chosen else 0.1)  # 0.1 scores best
            runs.append((Cell(c.algorithm, c.setting, c.seed, d.cfg, ()), p))
        return pd.concat([collect_tuning(runs, ts, margin={("A", "s"): [probe]}), unstable])

    table = collected(None)
    m = table[table.grid == "margin"]
    assert sorted(m.seed) == [100, 101, 102] and set(table[table.grid == "confirmation"].seed) == {101, 102}
    c = choose(table, ts)["A"]["s"]
    assert c["outer_lr"] == 0.1 and c["_margin"].endswith("is stable on seeds 100, 101, 102")
    assert "margin: outer_lr=0.316 (between the choice and outer_lr=1" in c.how_chosen()  # the report's words
    table = collected(102)  # the probe diverges on the third seed only
    assert list(table[(table.grid == "margin") & (table.seed == 102)].status) == ["diverged"]
    c = choose(table, ts)["A"]["s"]
    assert c["outer_lr"] == 0.01 and "outer_lr=0.1 has no margin (outer_lr=0.316" in c["_stable_edge"]


def point_of(p):
    return "lr" + str(p["outer_lr"])
