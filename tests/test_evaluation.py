"""Evaluation at the cost of what a spec uses: the ``eval`` selection of hyperrep, the whole training set
as the public code scores it, the CNN's pooling without autograd, and what a grid costs before it runs."""

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.config import resolve
from fbo_cli.runner import build, execute
from fbo_cli.tasks.base import relu_pool2

runner = CliRunner()
KEYS = {"dataset": "digits", "clients": 6, "participation": 0.5, "rounds": 10}


@pytest.mark.parametrize("shape", [(3, 4, 28, 28), (2, 6, 10, 10), (2, 3, 7, 9)])
def test_relu_pool2_is_max_pool_bit_for_bit(shape):
    g = torch.Generator().manual_seed(sum(shape))
    h = torch.randn(shape, generator=g)
    h[0, 0, :4, :4] = 0.25  # ties
    with torch.inference_mode():
        assert torch.equal(relu_pool2(h), F.max_pool2d(F.relu(h), 2))
    hg = h.clone().requires_grad_()
    out = relu_pool2(hg)  # with autograd: max_pool2d itself (one gradient per window, ties included)
    out.sum().backward()
    ref = h.clone().requires_grad_()
    F.max_pool2d(F.relu(ref), 2).sum().backward()
    assert torch.equal(hg.grad, ref.grad)


def test_eval_selects_the_splits_and_their_values_do_not_move():
    full = build(resolve("hyperrep", "aggitd", {**KEYS, "eval": "test,val,train"}))
    for _ in range(2):
        full.algo.step()
    m = full.algo.evaluate()
    assert set(m) == {"test_acc", "test_loss", "val_loss", "val_acc", "train_acc", "train_loss"}
    task, x, y = full.task, full.algo.x, full.algo.y
    task.eval_on = ("test",)
    only = full.algo.evaluate()
    assert set(only) == {"test_acc", "test_loss"} and all(only[k] == m[k] for k in only)
    # train_acc: the global model on the whole training set (every client's rows and any the partition left over)
    X, lab = task.data.X, task.data.y
    with torch.no_grad():
        logits = task.head(y, task.encode(x, X), None)
    assert m["train_acc"] == pytest.approx((logits.argmax(1) == lab).double().mean().item(), abs=1e-6)
    assert len(X) == len(task.data.dataset.X_train) >= int(task.data.train_mask.sum() + task.data.val_mask.sum())


def test_eval_enters_the_run_id_only_away_from_its_default():
    ids = {ev: resolve("hyperrep", "aggitd", {**KEYS, **({"eval": ev} if ev else {})}).run_id
           for ev in (None, "test,val", "test", "test,train")}
    assert ids[None] == ids["test,val"] and len({ids[None], ids["test"], ids["test,train"]}) == 3


@pytest.mark.parametrize("bad", ["test,foo", "", "test,test"])
def test_bad_eval_is_named(bad, tmp_path):
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "5", "-q",
                            "--set", f"eval={bad}", "--out-dir", str(tmp_path)])
    assert r.exit_code == 2 and "eval must be" in r.output and "Traceback" not in r.output
    assert not list(tmp_path.glob("hyperrep/*/*"))  # nothing half-written


def test_a_run_with_test_only_logs_test_metrics(tmp_path):
    s = execute(resolve("hyperrep", "fednest", {**KEYS, "eval": "test", "out_dir": str(tmp_path)}))
    m = pd.read_csv(next(tmp_path.glob("hyperrep/fednest/*/metrics.csv")))
    assert s["status"] == "done" and "val_loss" not in m and {"test_acc", "test_loss"} <= set(m)


def test_cost_says_what_a_grid_costs_before_it_runs(tmp_path):
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: tinycost
task: hyperrep
seeds: [0, 1]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 20, out_dir: {tmp_path}}}
tune: {{seeds: [100], rounds: budget}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.01, 0.03]}}}}, {{name: F, algo: fednest}}]
""")
    r = runner.invoke(app, ["cost", str(spec)])
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "tinycost" in line)
    # 2 tuning runs in the grid (expected and at most: with what a tuning adds), 4 compared runs
    assert row.split("│")[2].split("/")[0].strip() == "2" and row.split("│")[3].strip() == "4"
    grid, expected, most = (int(v) for v in row.split("│")[2].split("/"))
    assert grid < expected < most
    assert "core-hours" in r.output
    r = runner.invoke(app, ["cost", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_a_sections_compute_counts_tuning(tmp_path):
    from fbo_cli.compare import collect
    from fbo_cli.report.sections import compute_line
    from fbo_cli.spec import load_spec

    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: tinycompute
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 10, out_dir: {tmp_path}}}
tune: {{seeds: [100], rounds: budget, tolerance: off}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.01, 0.03, 0.1]}}}}]
""")
    assert runner.invoke(app, ["tune", str(spec)]).exit_code == 0
    assert runner.invoke(app, ["compare", str(spec)]).exit_code == 0
    tuning = pd.read_csv(tmp_path / "compare" / "tinycompute" / "tuning.csv")
    assert (tuning.train_time_s > 0).all() and (tuning.eval_time_s > 0).all()
    runs, _ = collect(load_spec(spec, {"out_dir": str(tmp_path)}))
    line = compute_line(runs, tmp_path / "compare" / "tinycompute" / "tuning.csv")
    total = (tuning.train_time_s.sum() + tuning.eval_time_s.sum()) / 60
    assert line.startswith("1 runs, ") and f"tuning {len(tuning)} runs, {total:.1f} core-minutes" in line


def test_public_fednest_timing_reads_the_codes_own_iteration_prints(tmp_path, monkeypatch):
    """``fbo bench --public-fednest``: the public code runs from a copy beside a link to the MNIST files,
    with its unused imports stubbed, and its outer iteration is the time between its own prints."""
    from types import SimpleNamespace

    from fbo_cli import bench
    from fbo_cli.bench import PUBLIC_ARGS, public_fednest

    code = tmp_path / "FedNest"
    code.mkdir()
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train-images-idx3-ubyte").write_bytes(b"")
    (code / "main_hr.py").write_text(
        "import sys, time, os\n"
        "from cv2 import log\nfrom importlib_metadata import requires\n"
        "assert os.path.isfile('../data/mnist/MNIST/raw/train-images-idx3-ubyte')\n"
        "assert os.environ['OMP_NUM_THREADS'] == '1'\n"
        "n = int(sys.argv[sys.argv.index('--epochs') + 1])\n"
        f"assert sys.argv[1:{len(PUBLIC_ARGS) + 1}] == {PUBLIC_ARGS!r}\n"
        "print('loading\\n' * 5, end='')\n"
        "for i in range(n):\n"
        "    print('a line of work\\n' * (4 if i == 1 else 1 if i == 2 else 0), end='')\n"
        "    print(f'Test acc/loss: 1 1 Train acc/loss: 1 1 Comm round: {10 * (i + 1)}')\n")
    # a clock that ticks once per reading, so that the intervals are set by the lines the code prints
    # (the clock is read at the start, for each line, and once more at each iteration's print), not by timing
    ticks = iter(range(1000))
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    r = public_fednest(code, raw, iters=3)
    # clock: start 0; 5 lines 1-5, round 1 at 6 (7); 4 lines 8-11, round 2 at 12 (13); 1 line 14, round 3 at 15
    assert r == {"public_iters": 3, "public_iteration_s": 3.0, "public_startup_s": 3.0}  # the shorter interval
    (code / "main_hr.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match="exit code 3"):
        public_fednest(code, raw, iters=3)


def test_the_cost_estimate_matches_runs_of_the_same_local_work_not_the_median_of_every_window(tmp_path):
    """A tuning grid's runs at I = 1 are priced from finished runs at I = 1 with other step sizes and
    schedules, not from the median over every window (one round of I = 128 costs 128x one of I = 1)."""
    import json

    import yaml

    from fbo_cli.results import _seconds_per_round, estimate_cost

    def finished(name, I, eta, T0, secs, rounds=100):
        cfg = resolve("auc", "codaplus", {"clients": 4, "rounds": rounds, "eval_every": 50, "I": I, "eta": eta,
                                              "T0": T0, "out_dir": str(tmp_path)}).as_dict()
        d = tmp_path / "auc" / "codaplus" / name
        d.mkdir(parents=True)
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
        (d / "summary.json").write_text(json.dumps({"task": "auc", "algo": "codaplus", "dataset": cfg["dataset"],
                                                    "ledger": {"rounds": rounds}, "train_time_s": secs,
                                                    "eval_time_s": 0.0, "device": "cpu"}))

    finished("a", 1, 1.0, 512, 1.0)  # 0.01 s per round
    for k, name in enumerate("bcd"):
        finished(name, 128, 1.0, 512, 100.0 + k)  # about 1 s per round
    _seconds_per_round.cache_clear()

    class Cell:
        def __init__(self, **kw):
            self.cfg = resolve("auc", "codaplus", {"clients": 4, "rounds": 1000, "eval_every": 50,
                                                       "out_dir": str(tmp_path), **kw})

    secs, unknown = estimate_cost([Cell(I=1, eta=3.0, T0=2048)], roots=(tmp_path,))
    assert unknown == 0 and secs == pytest.approx(10.0)  # 1,000 rounds at 0.01 s, not at the median's 1 s
    secs, _ = estimate_cost([Cell(I=128, eta=9.0, T0=64)], roots=(tmp_path,))
    assert secs == pytest.approx(1010.0)
    secs, _ = estimate_cost([Cell(I=1, eta=3.0, T0=2048, eval_every=10)], roots=(tmp_path,))
    assert secs == pytest.approx(10.0)  # another cadence: the loose shape, still I = 1
    _seconds_per_round.cache_clear()


def test_bench_phases_split_an_iteration_and_leave_nothing_patched():
    """``fbo bench --profile``'s phase table: sampling and oracle time are both seen (FedBiO on hyperclean draws
    five minibatches and calls five oracles per local step), they and the rest add up to the iteration, and the
    hooks are gone afterwards (the class's sampler, the algorithm's oracles), so the run goes on unchanged."""
    from fbo_cli.algorithms.pool_sampler import RowSampler
    from fbo_cli.bench import phases

    sample = RowSampler.__dict__["sample"]
    b = build(resolve("hyperclean", "fedbio", {"dataset": "digits", "clients": 4, "rounds": 5}))
    ph = phases(b.algo, "cpu", iters=2)
    assert ph["sampling"] > 0 and ph["oracles"] > 0 and ph["other"] >= 0
    assert ph["sampling"] + ph["oracles"] + ph["other"] == pytest.approx(ph["total"])
    assert RowSampler.__dict__["sample"] is sample
    assert "grad" not in vars(b.algo) and "hvp" not in vars(b.algo)
    ref = build(resolve("hyperclean", "fedbio", {"dataset": "digits", "clients": 4, "rounds": 5}))
    for _ in range(3):  # phases ran 3 iterations: the patched run is 3 iterations ahead, on the same draws
        ref.algo.step()
    assert torch.equal(ref.algo.x, b.algo.x) and torch.equal(ref.algo.y, b.algo.y)


def test_bench_against_alternates_two_code_trees_and_keeps_each_sides_fastest(tmp_path):
    """``fbo bench --against``: each round runs one bench file on the before tree's code and on the after
    tree's, each in a fresh process that imports that tree's ``fbo_cli`` (not the one in the working
    directory), the order swapped every round; each case keeps its side's fastest round, the spread is the
    slowest round over the fastest, and a case timed on one side only is named, not compared."""
    from rich.console import Console

    from fbo_cli.bench import ab_bench

    def tree(name, secs):
        pkg = tmp_path / name / "fbo_cli"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"SECS = {secs!r}\n")
        (pkg / "results.py").write_text("")
        return tmp_path / name

    bench = tmp_path / "fake_bench.py"  # the instrument, the same file on both sides
    bench.write_text(
        "import argparse, pathlib\n"
        "import fbo_cli\n"
        "def main(argv):\n"
        "    ap = argparse.ArgumentParser()\n"
        "    for k in ('--only', '--out', '--threads'): ap.add_argument(k)\n"
        "    a = ap.parse_args(argv)\n"
        "    out = pathlib.Path(a.out)\n"
        "    r = int(out.name[-1])\n"
        "    out.mkdir(parents=True)\n"
        "    rows = ''.join(f'{c},{s * (1 + 0.5 * r)},{1 / s},100\\n' for c, s in "
        "zip(a.only.split(','), fbo_cli.SECS))\n"
        "    (out / 'bench.csv').write_text('case,s_per_iteration,gflops,sgemm_gflops\\n' + rows)\n")
    before, after = tree("old", [0.3, 0.2, 0.5]), tree("new", [0.1, 0.2])  # "c" fails on the after tree
    ab = ab_bench(str(before), ["a", "b", "c"], 2, 1, tmp_path / "out", Console(quiet=True), after=after,
                  bench_file=str(bench))
    assert list(ab.case) == ["a", "b"]
    assert ab.speedup.tolist() == pytest.approx([3.0, 1.0]) and ab.before_s.tolist() == pytest.approx([0.3, 0.2])
    assert ab.after_spread.tolist() == pytest.approx([1.5, 1.5])
    md = (tmp_path / "out" / "ab.md").read_text()
    assert f"{before} (before)" in md and "| a | 0.3000 | 0.1000 | 3.00x |" in md
    assert "Not compared: c (timed on one side only)." in md


def test_bench_counts_the_flops_of_the_iteration_it_times():
    """A first iteration may do more (FedBiOAcc's first estimators on a batch 4x the size): the bench counts
    the second. Where the work grows with the round (hfl: ceil(tau sqrt(r + 1)) local steps), every timed
    iteration is the third of a fresh build, and its FLOPs are counted there."""
    from fbo_cli.bench import _build, _flops, time_case

    def flops_of(case, k):  # FLOPs of iteration k (0-based) of a fresh build
        a = _build(case, "cpu", None).algo
        for _ in range(k):
            a.step()
        return _flops(a)

    acc = {"name": "a", "task": "hyperclean", "algo": "fedbioacc", "set": {"dataset": "digits", "clients": 4}}
    assert flops_of(acc, 0) > flops_of(acc, 1)
    assert time_case(acc, 2, generic=False)["gflop"] * 1e9 == pytest.approx(flops_of(acc, 1))
    hfl = {"name": "h", "task": "hfl", "algo": "fedavg",
           "set": {"dataset": "synthetic", "clients": 4, "partition": "dirichlet", "tau": 2.0}}
    assert flops_of(hfl, 2) > flops_of(hfl, 1)
    r = time_case(hfl, 2)
    assert r["gflop"] * 1e9 == pytest.approx(flops_of(hfl, 2)) and r["rounds_per_iteration"] == 1


def test_the_floor_replays_the_draws_of_one_iteration_without_touching_the_run():
    """``fbo bench --profile``'s floor: the random draws, selections and row gathers of one iteration are
    recorded and replayed alone (with fresh generators: the run's stream is left where one step leaves it),
    and the FLOPs at the sgemm rate are added."""
    from fbo_cli.bench import _build, floor_ms

    case = {"name": "t", "task": "hyperclean", "algo": "fedbio",
            "set": {"dataset": "digits", "clients": 4, "participation": 1.0}}
    a, b = _build(case, "cpu", True).algo, _build(case, "cpu", True).algo
    f = floor_ms(a, "cpu", sgemm=50.0)
    b.step()
    assert torch.equal(a.fed.gen.get_state(), b.fed.gen.get_state())
    assert f["draws_ms"] > 0 and f["flops_ms"] > 0 and f["floor_ms"] == pytest.approx(f["draws_ms"] + f["flops_ms"])
