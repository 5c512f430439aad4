"""A grid's plan (:mod:`fbo_cli.grids.plan`): each run directory read once per command, the state carried to the
report, and accepting a code change an explicit step that a query (a dry run) never takes."""

import collections
import json
import sys
from pathlib import Path

import pytest

from fbo_cli.grids.compare import collect, dry_run_lines, report_experiment, run_experiment
from fbo_cli.grids.executors import GridOptions
from fbo_cli.grids.plan import make_plan
from fbo_cli.grids.spec import load_spec
from fbo_cli.runs import rundir

SPEC = """
name: tiny
task: hyperrep
seeds: [0, 1]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {out}}}
algorithms: [{{name: A, algo: aggitd}}]
settings: [{{name: iid, set: {{partition: iid}}}}]
"""


@pytest.fixture
def spec(tmp_path):
    p = tmp_path / "exp.yaml"
    p.write_text(SPEC.format(out=tmp_path))
    return p


@pytest.fixture
def hashed(monkeypatch):
    """Every hash of a file by :func:`fbo_cli.runs.rundir.file_sha256`, counted by path, wherever it is called
    from (modules that imported the name included)."""
    seen: collections.Counter = collections.Counter()
    original = rundir.file_sha256

    def counting(path):
        seen[Path(path)] += 1
        return original(path)

    for name, mod in list(sys.modules.items()):
        if name.startswith("fbo_cli") and getattr(mod, "file_sha256", None) is original:
            monkeypatch.setattr(mod, "file_sha256", counting)
    return seen


def metrics_files(root: Path) -> list[Path]:
    return sorted(root.glob("hyperrep/*/*/metrics.csv"))


def test_one_compare_hashes_each_metrics_csv_at_most_once(spec, tmp_path, hashed):
    exp = load_spec(spec)
    run_experiment(exp, GridOptions(jobs=1))  # runs both (each hash: its completion record as it is written)
    report_experiment(exp)
    files = metrics_files(tmp_path)
    assert len(files) == 2 and exp.incomplete == 0
    assert all(hashed[f] <= 1 for f in files), dict(hashed)
    hashed.clear()
    exp = load_spec(spec)
    run_experiment(exp, GridOptions(jobs=1))  # reuses both: each read once, by the plan
    report_experiment(exp)
    assert exp.incomplete == 0
    collect(exp)  # a later look in the same command (compare --until-settled's) reads no run again
    assert all(hashed[f] == 1 for f in files), dict(hashed)


def test_a_summary_that_does_not_match_its_metrics_is_corrupt_once(spec, tmp_path):
    exp = load_spec(spec)
    run_experiment(exp, GridOptions(jobs=1))
    f = metrics_files(tmp_path)[0]
    f.write_text(f.read_text() + "\n")  # the completion record no longer holds
    warned = []
    exp = load_spec(spec)
    report_experiment(exp, no_run=True)
    runs, _ = collect(exp, warned.append)
    assert (runs.status == "not run").sum() == 1 and runs.corrupt.notna().sum() == 1
    assert len(warned) == 1 and str(f.parent) in warned[0]


def user_stale(run: Path) -> None:
    """Record a user's class in a finished run's code that the algorithm no longer has: the run is stale (its
    user code changed since), as after an edit of the user's file."""
    p = run / "summary.json"
    s = json.loads(p.read_text())
    s["code"]["algorithm"]["my_algos.Gone"] = "0" * 16
    p.write_text(json.dumps(s))


def snapshot(root: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_dry_run_with_accept_code_change_writes_nothing(spec, tmp_path):
    from typer.testing import CliRunner

    from fbo_cli.cli import app

    exp = load_spec(spec)
    run_experiment(exp, GridOptions(jobs=1))
    run = metrics_files(tmp_path)[0].parent
    user_stale(run)
    before = snapshot(tmp_path)
    r = CliRunner().invoke(app, ["compare", str(spec), "--dry-run", "--accept-code-change"])
    assert r.exit_code == 0, r.output
    assert "stale" in r.output and "1 run(s) to do" in " ".join(r.output.split())
    assert snapshot(tmp_path) == before
    plan = make_plan(load_spec(spec).cells)  # the query itself writes nothing either
    assert list(plan.stale) == [run] and [c.cfg.run_dir for c in plan.todo] == [run]
    assert snapshot(tmp_path) == before
    assert plan.accept() == 1  # the explicit step: the acceptance recorded, the run kept
    assert plan.todo == [] and plan.stale == {}
    s = json.loads((run / "summary.json").read_text())
    assert s["code_accepted"][-1]["by"] == "--accept-code-change"
    assert plan.states()[run].summary == s  # carried, not read again


def test_the_dry_run_says_what_the_run_does(spec, tmp_path):
    exp = load_spec(spec)
    lines = dry_run_lines(exp, rerun=False, jobs=1)
    assert lines[-1].startswith("tiny: 2 cells; 2 run(s) to do")
    run_experiment(exp, GridOptions(jobs=1))
    assert dry_run_lines(load_spec(spec), rerun=False, jobs=1)[-1] == "tiny: 2 cells; nothing left to run (every " \
                                                                       "run is finished)"
    plan = make_plan(load_spec(spec).cells, rerun=True)
    assert len(plan.todo) == 2 and not any(e.resumed for e in plan.entries.values())
    assert {e.rounds for e in plan.entries.values()} == {4}


def test_the_runs_and_their_report_are_the_commands_two_steps(spec, tmp_path, hashed):
    exp = load_spec(spec)
    out = run_experiment(exp, GridOptions(jobs=1))  # the runs only: no table yet
    assert len(metrics_files(tmp_path)) == 2 and not (out / "table.md").exists()
    assert report_experiment(exp) == out  # the report, from the states the runs left: no run read again
    assert (out / "table.md").is_file() and (out / "runs.csv").is_file() and exp.incomplete == 0
    assert all(n <= 1 for n in hashed.values()), dict(hashed)
