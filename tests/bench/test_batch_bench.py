"""The batch bench's table: `--only` measures some cases again and keeps the other rows."""

from fbo_cli.bench.batch import CASES, _merged


def test_only_replaces_its_rows_and_keeps_the_rest(tmp_path):
    a, b, c = (case["name"] for case in CASES[:3])
    csv = tmp_path / "batch.csv"
    csv.write_text(f"case,ratio\n{c},1.5\n{a},2.0\n")
    rows = _merged(csv, [{"case": a, "ratio": 3.0, "seeds_bound": 1.8, "measured": "abc 2026-11-28"}])
    assert [r["case"] for r in rows] == [a, c]  # the cases' order
    assert rows[0]["ratio"] == 3.0 and rows[0]["seeds_bound"] == 1.8 and rows[1]["ratio"] == "1.5"
    assert _merged(tmp_path / "none.csv", [{"case": b}]) == [{"case": b}]


def test_the_calls_bench_counts_a_run_alone_and_batches_of_one_two_four_runs():
    """``fbo bench --batch R --calls`` (issue 64): a case's aten calls per outer iteration, a run alone's and the
    batches' of 1, 2, 4 runs; FedNest's batch makes about as many for four runs as for one."""
    import torch

    from fbo_cli.bench.batch import calls_case

    torch.set_num_threads(1)
    case = {"name": "t", "task": "hyperrep", "algo": "fednest", "key": "outer_lr",
            "set": {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16, "lower_epochs": 1}}
    row = calls_case(case, 4)
    assert list(row)[3:] == ["ops_one", "ops_R1", "ops_R2", "ops_R4"]
    assert 0 < row["ops_one"] <= row["ops_R1"] and row["ops_R4"] <= 1.3 * row["ops_R1"]


def test_the_batch_bench_writes_the_calls_of_a_run_alone_and_of_the_batch():
    """``fbo bench --batch R``'s row has ``ops_one`` and ``ops_batch`` (issue 64): the aten calls of one outer
    iteration alone and batched; a batch of two FedNest runs makes fewer than two runs alone."""
    import torch

    from fbo_cli.bench.batch import bench_case

    torch.set_num_threads(1)
    case = {"name": "t", "task": "hyperrep", "algo": "fednest", "key": "outer_lr",
            "set": {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16, "lower_epochs": 1}}
    row = bench_case(case, R=2, iters=1, reps=1)
    assert 0 < row["ops_one"] < row["ops_batch"] < 2 * row["ops_one"]
