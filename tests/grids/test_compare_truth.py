"""Every way ``compare`` could print a wrong or incomplete table now reruns, resumes or reports."""

import os
import threading
import time

import pandas as pd
import pytest
from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.rundir import run_lock, run_status

runner = CliRunner()


def spec(tmp_path, settings="[{name: iid, set: {partition: iid}}]", algos="[{name: A, algo: aggitd}]",
         seeds="[0]", extra=""):
    p = tmp_path / "exp.yaml"
    p.write_text(f"""
name: t
task: hyperrep
seeds: {seeds}
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 20, threads: 1, out_dir: {tmp_path}}}
algorithms: {algos}
settings: {settings}
{extra}
""")
    return p


def compare(p, *args):
    return runner.invoke(app, ["compare", str(p), *args])


def table(tmp_path):
    return pd.read_csv(tmp_path / "compare" / "t" / "table.csv")


def run_dirs(tmp_path):
    return sorted(tmp_path.glob("hyperrep/*/*"))


@pytest.fixture
def done(tmp_path):
    p = spec(tmp_path)
    r = compare(p)
    assert r.exit_code == 0, r.output
    return p, run_dirs(tmp_path)[0], table(tmp_path).final.iloc[0]


@pytest.mark.parametrize("damage", ["stale", "cut", "deleted", "empty", "binary", "summary-empty",
                                    "summary-binary"])
def test_damaged_run_is_redone_not_aggregated(done, tmp_path, damage):
    p, d, final = done
    m, s = d / "metrics.csv", d / "summary.json"
    text = m.read_text()
    if damage == "stale":  # a rerun interrupted after 2 rows: old summary, new metrics
        m.write_text("\n".join(text.splitlines()[:3]) + "\n")
    elif damage == "cut":
        m.write_text(text[:-7])
    elif damage == "deleted":
        m.unlink()
    elif damage == "empty":
        m.write_text("")
    elif damage == "binary":
        m.write_bytes(b"\x00\xff\xfe" * 20)
    elif damage == "summary-empty":
        s.write_text("")
    else:
        s.write_bytes(b"\x00\xff\xfe" * 20)
    assert run_status(d)[0] == "corrupt"
    r = compare(p, "--no-run")  # nothing aggregated from the damaged run
    assert "Traceback" not in r.output
    if r.exit_code == 0:
        raise AssertionError(r.output)
    r = compare(p)
    assert r.exit_code == 0, r.output
    assert "running it again" in " ".join(r.output.split()) or damage in ("stale",)
    assert run_status(d)[0] == "finished"
    assert table(tmp_path).final.iloc[0] == final


def test_interrupted_rerun_leaves_no_stale_summary(done, tmp_path, monkeypatch):
    p, d, final = done
    import fbo_cli.runs.loop as rn

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(rn, "step_loop", boom)
    r = compare(p, "--rerun")
    assert r.exit_code == 130, r.output
    monkeypatch.undo()
    assert not (d / "summary.json").exists()
    r = compare(p)
    assert r.exit_code == 0 and table(tmp_path).final.iloc[0] == final


def test_failed_and_diverged_are_counted_not_averaged(tmp_path, monkeypatch):
    import fbo_cli.runs.loop as rn

    real = rn.step_loop

    def crash_on_bad(algo, *a, **k):  # a run that fails while running (bad input fails before the grid)
        if algo.hp.outer_lr == 0.123:
            raise RuntimeError("a bug in the middle of a run")
        return real(algo, *a, **k)

    monkeypatch.setattr(rn, "step_loop", crash_on_bad)
    p = spec(tmp_path, settings="[{name: ok, set: {}}, {name: bad, set: {outer_lr: 0.123}}, "
                                "{name: boom, set: {outer_lr: 1.0e+30}}]", seeds="[0, 1]")
    r = compare(p, "--batch", "off")  # the fault is planted in the runner's loop, which a batch does not use
    assert r.exit_code == 1, r.output  # a failed run: the table is written, the exit code says so
    assert "failed" in r.output
    t = table(tmp_path).set_index("setting")
    assert t.loc["ok", "seeds"] == 2 and t.loc["ok", "failed"] == 0
    assert t.loc["bad", "failed"] == 2 and pd.isna(t.loc["bad", "final"]) and t.loc["bad", "seeds"] == 0
    assert t.loc["boom", "diverged"] == 2 and pd.isna(t.loc["boom", "final"]) and t.loc["boom", "final n"] == 0
    md = (tmp_path / "compare" / "t" / "table.md").read_text()
    assert "Rule: means" in md
    assert (tmp_path / "compare" / "t" / "curves.png").is_file()


def test_rows_keyed_by_algorithm(tmp_path):
    p = spec(tmp_path, algos="[{name: X, algo: aggitd}, {name: X, algo: fednest}]")
    r = compare(p)
    assert fails_with(r, "bad_spec", field="algorithms", value="X"), r.output  # two rows named X
    p = spec(tmp_path, algos="[{name: A, algo: aggitd}, {name: F, algo: fednest}]")
    r = compare(p, "--set", "algo=aggitd")
    assert fails_with(r, "bad_value", field="algo"), r.output
    assert not list(tmp_path.glob("hyperrep/*"))


def test_busy_run_is_waited_for_then_reused(done, tmp_path):
    p, d, final = done
    (d / "summary.json").unlink()  # must run again, but another process holds it for a while
    held = threading.Event()

    def hold():
        with run_lock(d):
            held.set()
            time.sleep(1.5)

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    t0 = time.time()
    r = compare(p)
    t.join()
    assert r.exit_code == 0, r.output
    assert time.time() - t0 >= 1.4 and table(tmp_path).final.iloc[0] == final


def test_files_follow_the_umask(done, tmp_path):
    p, d, _ = done
    old = os.umask(0o022)
    os.umask(old)
    for f in ("metrics.csv", "summary.json", "config.yaml", "curves.png"):
        assert (d / f).stat().st_mode & 0o777 == 0o666 & ~old, f
    assert (tmp_path / "compare" / "t" / "curves.png").stat().st_mode & 0o777 == 0o666 & ~old
    assert not [f for f in d.iterdir() if f.name.startswith(".") and f.name != ".lock"]  # no temporaries left


def test_explosion_is_diverged(tmp_path):
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--set", "outer_lr=10", "--rounds", "30",
                            "--out-dir", str(tmp_path), "--quiet", "--set", "threads=1"])
    assert r.exit_code == 1, r.output
    s = (run_dirs(tmp_path)[0] / "summary.json").read_text()
    assert '"diverged"' in s and "1000 x max(initial" in s


def test_loss_metric_best_is_lowest_and_target_is_reached_downwards(tmp_path):
    from fbo_cli.runs.table import rounds_to_target

    p = spec(tmp_path, extra="metric: test_loss\ntarget: 100.0")  # every loss is below 100: reached at once
    r = compare(p)
    assert r.exit_code == 0, r.output
    run = pd.read_csv(tmp_path / "compare" / "t" / "runs.csv").iloc[0]
    m = pd.read_csv(run_dirs(tmp_path)[0] / "metrics.csv")
    assert run["best"] == m.test_loss.min() and run["rounds_to_target"] == m.rounds.iloc[0]
    md = (tmp_path / "compare" / "t" / "table.md").read_text()
    assert "lower is better" in md and "a fraction" not in md and "test_loss ≤ 100" in md
    df = pd.DataFrame({"rounds": [1, 2, 3], "test_acc": [0.1, 0.5, 0.9], "test_loss": [2.0, 1.0, 0.5]})
    assert rounds_to_target(df, "test_acc", 0.5) == 2 and rounds_to_target(df, "test_loss", 0.9) == 3
