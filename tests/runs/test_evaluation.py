"""Evaluation at the cost of what a spec uses: the ``eval`` selection of hyperrep, the whole training set
as the public code scores it, the CNN's pooling without autograd, and what a grid costs before it runs."""

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build, execute
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
    assert fails_with(r, "bad_value", field="eval", value=bad) and "Traceback" not in r.output, r.output
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
    row = next(line for line in r.output.splitlines() if "tinycost" in line).split("\t")  # a plain row in a pipe
    # 2 tuning runs in the grid (expected and at most: with what a tuning adds), 4 compared runs
    assert row[1].split("/")[0].strip() == "2" and row[2].strip() == "4"
    grid, expected, most = (int(v) for v in row[1].split("/"))
    assert grid < expected < most
    assert "core-hours" in r.output
    r = runner.invoke(app, ["cost", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_a_sections_compute_counts_tuning(tmp_path):
    from fbo_cli.evidence.report.sections import compute_line
    from fbo_cli.grids.compare import collect
    from fbo_cli.grids.spec import load_spec

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

    from fbo_cli.bench import reference
    from fbo_cli.bench.reference import PUBLIC_ARGS, public_fednest

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
    monkeypatch.setattr(reference, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
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

    from fbo_cli.runs.cost import _seconds_per_round, estimate_cost

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

