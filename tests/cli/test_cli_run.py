"""``fbo run``: files written, reproducibility, errors with exit code 2, divergence."""

import json

import pandas as pd
import pytest
from cli_helpers import TINY, fails_with, invoke, run, run_dir


def test_run_writes_its_files(tmp_path):
    r = run("run", "hyperrep", "--algo", "aggitd", "--out-dir", str(tmp_path), *TINY)
    assert r.exit_code == 0, r.output
    d = run_dir(tmp_path)
    for f in ("config.yaml", "metrics.csv", "summary.json", "curves.png"):
        assert (d / f).is_file(), f
    m = pd.read_csv(d / "metrics.csv")
    for col in ("rounds", "iterations", "samples", "floats_up", "floats_down", "train_time", "test_acc", "test_loss"):
        assert col in m
    assert m.rounds.iloc[-1] >= 30 and (m.rounds.diff().dropna() == 10).all()  # 5 rounds/iteration, every 2
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "done" and s["rounds_per_iteration"] == 5 and s["seed"] == 0
    assert s["final"] == pytest.approx(m.test_acc.iloc[-1])


def test_a_runs_config_yaml_repeats_it(tmp_path):
    """``--config`` takes a run's own resolved config.yaml (task_params and hp nested): same run id, same
    metrics."""
    r = run("run", "hyperrep", "--algo", "fednest", "--out-dir", str(tmp_path / "a"), *TINY, "--seed", "3",
            "--set", "tau=2", "--set", "hidden=50")
    assert r.exit_code == 0, r.output
    first = run_dir(tmp_path / "a")
    r = run("run", "hyperrep", "--algo", "fednest", "--config", str(first / "config.yaml"),
            "--out-dir", str(tmp_path / "b"), "--quiet")
    assert r.exit_code == 0, r.output
    again = run_dir(tmp_path / "b")
    assert again.name == first.name
    cols = lambda d: pd.read_csv(d / "metrics.csv").drop(columns="train_time")  # noqa: E731
    pd.testing.assert_frame_equal(cols(first), cols(again))
    r = run("run", "--config", str(first / "config.yaml"), "--out-dir", str(tmp_path / "d"), "--quiet")
    assert r.exit_code == 0, r.output  # TASK and --algo come from the file
    assert run_dir(tmp_path / "d").name == first.name
    r = run("run", "hyperrep", "--algo", "aggitd", "--config", str(first / "config.yaml"),
            "--out-dir", str(tmp_path / "c"), "--quiet")  # one run's config seeds another algorithm's run
    assert r.exit_code == 0, r.output
    assert "replaces the file's fednest" in r.output and "T, local_hypergrad, neumann" in " ".join(r.output.split())
    import yaml

    c = yaml.safe_load((run_dir(tmp_path / "c") / "config.yaml").read_text())
    assert c["algo"] == "aggitd" and c["hp"]["tau"] == 2 and c["task_params"]["hidden"] == 50
    assert c["device_used"] == "cpu"
    r = run("run", "--config", str(first / "config.yaml"), "--set", "tua=3", "--dry-run")
    assert fails_with(r, "unknown", field="key", value="tua") and "did you mean 'tau'" in " ".join(r.output.split())
    r = run("run", "--config", str(first / "config.yaml"), "--dry-run", "--out-dir", str(tmp_path / "e"))
    assert r.exit_code == 0 and "outer_lr:" in r.output and not (tmp_path / "e").exists()


def test_same_seed_same_metrics(tmp_path):
    for sub in ("a", "b"):
        r = run("run", "hyperrep", "--algo", "fednest", "--out-dir", str(tmp_path / sub), *TINY,
                "--set", "tau=2", "--partition", "shards")
        assert r.exit_code == 0, r.output
    a = pd.read_csv(run_dir(tmp_path / "a") / "metrics.csv").drop(columns="train_time")
    b = pd.read_csv(run_dir(tmp_path / "b") / "metrics.csv").drop(columns="train_time")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    r = run("run", "hyperrep", "--algo", "fednest", "--out-dir", str(tmp_path / "c"), *TINY,
            "--set", "tau=2", "--partition", "shards", "--seed", "1")
    c = pd.read_csv(run_dir(tmp_path / "c") / "metrics.csv").drop(columns="train_time")
    assert not a.test_acc.equals(c.test_acc)


@pytest.mark.parametrize("args,kind,field,value", [
    (["run", "hyperrep", "--algo", "nope"], "unknown", "algorithm", "nope"),
    (["run", "nope", "--algo", "aggitd"], "unknown", "task", "nope"),
    (["run", "hyperrep", "--algo", "fedbioac"], "unknown", "algorithm", "fedbioac"),
    (["run", "hyperep", "--algo", "aggitd"], "unknown", "task", "hyperep"),
    (["run", "hyperrep", "--algo", "aggitd", "--dataset", "mnsit"], "unknown", "dataset", "mnsit"),
    (["run", "hyperrep", "--algo", "aggitd", "--set", "bogus=1"], "unknown", "key", "bogus"),
    (["run", "hyperrep", "--algo", "aggitd", "--set", "tau=abc"], "bad_value", "tau", "abc"),
    (["run", "hyperrep", "--algo", "aggitd", "--set", "lower_solver=adam"], "bad_value", "lower_solver", "adam"),
    (["run", "hyperrep", "--algo", "aggitd", "--rounds", "0"], "bad_value", "rounds", 0),
    (["run", "hyperrep", "--algo", "aggitd", "--rounds", "-5"], "bad_value", "rounds", -5),
    (["run", "hyperrep", "--algo", "aggitd", "--partition", "zebra"], "unknown", "partition", "zebra"),
    (["run", "hyperrep", "--algo", "aggitd", "--participation", "1.5"], "bad_value", "participation", 1.5),
    (["run", "hyperrep", "--algo", "aggitd", "--set", "lam=-1"], "bad_value", "lam", -1),
])
def test_bad_input_exit_2(args, kind, field, value):
    r = run(*args)
    assert fails_with(r, kind, field=field, value=value), r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("args, near", [(["run", "hyperrep", "--algo", "fedbioac"], "fedbioacc"),
                                        (["run", "hyperep", "--algo", "aggitd"], "hyperrep"),
                                        (["run", "hyperrep", "--algo", "aggitd", "--dataset", "mnsit"], "mnist")])
def test_a_misspelt_name_is_answered_with_the_nearest_one(args, near):
    r = run(*args)
    assert fails_with(r, "unknown") and f"(did you mean '{near}'?)" in " ".join(r.output.split()), r.output


def test_missing_dataset_offline(tmp_path):
    r = run("run", "hyperrep", "--algo", "aggitd", "--dataset", "cifar10", "--data-dir", str(tmp_path),
            "--set", "download=false")
    assert fails_with(r, "not_found", field="dataset", value="cifar10"), r.output
    assert str(tmp_path) in " ".join(r.output.split())  # where it looked


def test_bad_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithms: [unclosed\n  - : :\n")
    for args in (["compare", str(bad)], ["run", "hyperrep", "--algo", "aggitd", "--config", str(bad)]):
        r = run(*args)
        assert fails_with(r, "bad_yaml", field="syntax", path=str(bad)) and "Traceback" not in r.output
    r = run("compare", str(tmp_path / "missing.yaml"))
    assert fails_with(r, "not_found", path=str(tmp_path / "missing.yaml"))
    spec = tmp_path / "s.yaml"
    spec.write_text("task: hyperrep\nalgorithms: [{algo: aggitd, set: {tua: 3}}]\n")
    r = run("compare", str(spec))
    assert fails_with(r, "unknown", field="key", value="tua"), r.output  # the spec's cell keeps the run's kind


def test_diverged_run_keeps_rows(tmp_path):
    r = run("run", "hyperrep", "--algo", "fednest", "--out-dir", str(tmp_path), *TINY, "--set", "outer_lr=1e30",
            "--set", "eval_every=1")
    assert r.exit_code == 1, r.output
    d = run_dir(tmp_path)
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "diverged"
    assert len(pd.read_csv(d / "metrics.csv")) >= 1


def test_config_file_and_set_precedence(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tau: 3\nlam: 0.02\nclients: 6\n")
    r = run("run", "hyperrep", "--algo", "aggitd", "--out-dir", str(tmp_path), "--config", str(cfg),
            "--set", "lam=0.05", "--dataset", "digits", "--rounds", "5", "--quiet")
    assert r.exit_code == 0, r.output
    import yaml

    c = yaml.safe_load((run_dir(tmp_path) / "config.yaml").read_text())
    assert c["hp"]["tau"] == 3 and c["hp"]["lam"] == 0.05 and c["clients"] == 6


def test_run_help_shows_defaults():
    r = invoke(["run", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.stdout.replace("│", " ").split())
    for d in ("[default: the task's; see `fbo show ALGO --task TASK`]", "[default: results]"):
        assert d in text, d  # the per-task defaults are not claimed as one number
    for cmd in ("compare", "tune"):
        r = invoke([cmd, "--help"])
        assert r.exit_code == 0 and "[default: results]" in " ".join(r.stdout.replace("│", " ").split())


def test_run_dry_run_gives_a_time_estimate_and_stays_yaml(tmp_path):
    # issue 61, item 8: the dry run says what the run will cost (the cost model of fbo_cli/runs/cost.py)
    import yaml

    r = invoke(["run", "hyperrep", "--algo", "aggitd", "--dry-run", "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("# time:"))
    assert "core-minutes" in line or "no estimate" in line
    assert yaml.safe_load(r.stdout)["algo"] == "aggitd"


def test_the_run_bar_keeps_its_count_and_times_at_80_columns():
    # issue 61, item 8: at 80 columns the bar cut its count and times; the label and the metric give way first
    import io

    from rich.console import Console

    from fbo_cli.cli.run import run_progress

    buf = io.StringIO()
    con = Console(file=buf, width=80, force_terminal=True, color_system=None)
    p = run_progress(con)
    t = p.add_task("FBO-AggITD (the public code's script) · mnist5k", total=2000, metric="test_acc=0.9123")
    p.update(t, completed=1234)
    con.print(p.make_tasks_table(p.tasks))
    line = buf.getvalue().splitlines()[0]
    assert "1234/2000 rounds" in line and "0:00:00" in line and "left" in line and len(line) <= 80
