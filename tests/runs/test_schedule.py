"""One evaluation rule (issue 61, item 2): with ``eval_rounds`` every method is evaluated on one round grid (the
first iteration reaching each grid point, and the last within the budget), a run alone and a run batch alike; and
one budget rule for every column (final, best and rounds to target read on the rows within the budget, rounds to
target as the interval the evaluations resolve)."""

import csv

import pandas as pd

from fbo_cli.grids.run_batches import execute_batch
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import execute
from fbo_cli.runs.table import read_columns

HR = {"dataset": "digits", "clients": 6, "participation": 0.5, "hidden": 16, "threads": 1}


def _rounds(cfg) -> list[int]:
    return [int(r["rounds"]) for r in csv.DictReader((cfg.run_dir / "metrics.csv").read_text().splitlines())]


def test_two_methods_of_other_iteration_lengths_are_evaluated_on_one_round_grid(tmp_path):
    # aggitd: 5 rounds per outer iteration here, fednest: 10; budget 32 (neither divides it)
    runs = {a: resolve("hyperrep", a, {**HR, "rounds": 32, "eval_rounds": 10, "out_dir": str(tmp_path)})
            for a in ("aggitd", "fednest")}
    for c in runs.values():
        execute(c)
    # each grid point (10, 20, 30) at the first iteration reaching it, the last iteration within the budget (30),
    # then the run's last iteration (past the budget: not read)
    assert _rounds(runs["aggitd"]) == [0, 10, 20, 30, 35]
    assert _rounds(runs["fednest"]) == [0, 10, 20, 30, 40]
    # without eval_rounds, nothing moves (the committed runs): every eval_every iterations
    old = resolve("hyperrep", "aggitd", {**HR, "rounds": 32, "eval_every": 3, "out_dir": str(tmp_path)})
    execute(old)
    assert _rounds(old) == [0, 15, 30, 35]


def test_the_grid_meets_an_iteration_that_does_not_divide_it_and_the_last_within_the_budget(tmp_path):
    # aggitd at 5 rounds per iteration on a grid of 7: 10 (>= 7), 15 (>= 14), 25 (>= 21), 30 (>= 28); the budget
    # of 33 ends inside the iteration 30..35, so 30 is the last within it (already evaluated), then 35
    c = resolve("hyperrep", "aggitd", {**HR, "rounds": 33, "eval_rounds": 7, "out_dir": str(tmp_path)})
    execute(c)
    assert _rounds(c) == [0, 10, 15, 25, 30, 35]
    # a budget of 23: 20 is the last iteration within it (the grid's 21 comes after the budget)
    c = resolve("hyperrep", "aggitd", {**HR, "rounds": 23, "eval_rounds": 7, "out_dir": str(tmp_path)})
    execute(c)
    assert _rounds(c) == [0, 10, 15, 20, 25]


def test_a_batch_follows_the_same_rule_as_the_run_alone(tmp_path):
    lr = resolve("hyperrep", "aggitd", HR).hp.outer_lr
    cfgs = [resolve("hyperrep", "aggitd", {**HR, "rounds": 23, "eval_rounds": 7, "outer_lr": lr * f,
                                           "out_dir": str(tmp_path / "b")}) for f in (0.5, 1.0)]
    summaries = execute_batch(cfgs)
    assert all(s["batch_runs"] == 2 for s in summaries)
    assert [_rounds(c) for c in cfgs] == [[0, 10, 15, 20, 25]] * 2


def test_eval_rounds_enters_the_run_id_only_when_set():
    ids = [resolve("hyperrep", "aggitd", {**HR, **k}).run_id for k in ({}, {"eval_rounds": None}, {"eval_rounds": 10})]
    assert ids[0] == ids[1] != ids[2]


def test_every_column_is_read_within_the_budget_and_rounds_to_target_is_an_interval():
    # an algorithm of 7 rounds per iteration with a budget of 60: the run's last iteration ends at 63
    df = pd.DataFrame({"rounds": [0, 14, 28, 42, 56, 63], "iterations": [0, 2, 4, 6, 8, 9],
                       "test_acc": [0.1, 0.2, 0.25, 0.2841, 0.28, 0.30]})
    c = read_columns(df, "test_acc", 0.29, 60)
    assert c["best"] == 0.2841 and c["final"] == 0.28 and c["rounds"] == 56
    assert c["rounds_to_target"] is None and c["rounds_to_target_low"] is None  # 63 is past the budget
    c = read_columns(df, "test_acc", 0.25, 60)
    assert (c["rounds_to_target_low"], c["rounds_to_target"], c["iterations_to_target"]) == (14, 28, 4)
    c = read_columns(df, "test_acc", 0.05, 60)  # reached at the first row: (0, 0]
    assert (c["rounds_to_target_low"], c["rounds_to_target"]) == (0, 0)
    # a loss: lower is better, for best and for the target
    loss = df.assign(test_loss=[3.0, 2.0, 1.0, 1.5, 0.9, 0.1])
    c = read_columns(loss, "test_loss", 1.2, 60)
    assert c["best"] == 0.9 and (c["rounds_to_target_low"], c["rounds_to_target"]) == (14, 28)


def test_a_runs_summary_is_re_derived_from_its_metrics_rows(tmp_path):
    c = resolve("hyperrep", "aggitd", {**HR, "rounds": 32, "target": 0.3, "out_dir": str(tmp_path)})
    s = execute(c)
    cols = read_columns(pd.read_csv(c.run_dir / "metrics.csv"), "test_acc", 0.3, 32)
    assert {k: s[k] for k in ("final", "best", "rounds_to_target", "rounds_to_target_low")} == \
        {k: cols[k] for k in ("final", "best", "rounds_to_target", "rounds_to_target_low")}


def test_compare_says_when_its_methods_were_evaluated_on_different_round_grids(tmp_path):
    from cli_helpers import run

    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: grids
task: hyperrep
target: 0.2
seeds: [0]
base: {{dataset: digits, clients: 6, participation: 0.5, hidden: 16, rounds: 20, threads: 1, out_dir: {tmp_path}}}
algorithms: [{{name: A, algo: aggitd}}, {{name: F, algo: fednest}}]
""")
    r = run("compare", str(spec))
    assert r.exit_code == 0, r.output
    assert "different round grids (A every 5, F every 10 rounds)" in " ".join(r.stderr.split())
    runs = pd.read_csv(tmp_path / "compare" / "grids" / "runs.csv")
    assert dict(zip(runs.algorithm, runs.eval_grid)) == {"A": 5, "F": 10}
    r = run("compare", str(spec), "--set", "eval_rounds=10")  # one grid: nothing to say
    assert r.exit_code == 0, r.output
    assert "round grids" not in r.stderr
    runs = pd.read_csv(tmp_path / "compare" / "grids" / "runs.csv")
    assert set(runs.eval_grid) == {10} and "rounds_to_target_low" in runs


def test_the_schedule_moves_no_number_of_the_training(tmp_path):
    # the evaluations read the iterate and draw nothing: the rows of a grid are the every-iteration run's rows
    grid = resolve("hyperrep", "fednest", {**HR, "rounds": 32, "eval_rounds": 15, "out_dir": str(tmp_path)})
    every = resolve("hyperrep", "fednest", {**HR, "rounds": 32, "eval_every": 1, "out_dir": str(tmp_path)})
    execute(grid)
    execute(every)
    a = pd.read_csv(grid.run_dir / "metrics.csv").drop(columns="train_time")
    b = pd.read_csv(every.run_dir / "metrics.csv").drop(columns="train_time").set_index("iterations")
    assert list(a.rounds) == [0, 20, 30, 40]
    pd.testing.assert_frame_equal(a.set_index("iterations"), b.loc[a.iterations])
