"""``fbo check``: reruns of committed runs are compared with the evidence value by value, the ledger
exactly, and the evidence is never written to."""

import hashlib
import json

from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.rundir import file_sha256

runner = CliRunner()


def _spec(tmp_path, algorithms="[{name: A, algo: aggitd}, {name: F, algo: fednest}]", *compare_args):
    """A two-algorithm, two-seed spec on digits, its runs made (the evidence under tmp_path/ev)."""
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: tinycheck
task: hyperrep
seeds: [0, 1]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 6, eval_every: 1, out_dir: {tmp_path / "ev"}}}
algorithms: {algorithms}
""")
    assert runner.invoke(app, ["compare", str(spec), *compare_args]).exit_code == 0
    return spec


def _digest(root):
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())).hexdigest()


def test_check_reruns_committed_runs_and_finds_a_changed_ledger_or_metric(tmp_path):
    spec = _spec(tmp_path)
    ev, out = tmp_path / "ev", tmp_path / "chk"
    args = ["check", str(spec), "--from", str(ev), "--out", str(out), "--minutes", "1000"]
    before = _digest(ev)
    r = runner.invoke(app, [*args, "--dry-run"])
    assert r.exit_code == 0 and "4 of 4 committed runs" in " ".join(r.stdout.split()) and not out.exists(), r.output
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "4 of 4 reproduce" in r.stdout and r.stdout.count("| identical |") == 4, r.stdout
    assert _digest(ev) == before  # the reruns went to --out, not into the evidence
    assert len(list((out / "runs").rglob("summary.json"))) == 4

    # one run's accounting tampered with: the ledger is compared exactly
    s_path = next(ev.rglob("aggitd/*s0*/summary.json"))
    s = json.loads(s_path.read_text())
    s["ledger"]["floats_up"] += 1
    s_path.write_text(json.dumps(s))
    # another run's first evaluation after the start changed (its completion record kept valid)
    m_path = next(ev.rglob("fednest/*s1*/metrics.csv"))
    lines = m_path.read_text().splitlines()
    head, row = lines[0].split(","), lines[2].split(",")
    i = head.index("test_acc")
    row[i] = str(float(row[i]) + 0.1)
    lines[2] = ",".join(row)
    m_path.write_text("\n".join(lines) + "\n")
    s2_path = m_path.parent / "summary.json"
    s2 = json.loads(s2_path.read_text())
    s2["metrics_sha256"] = file_sha256(m_path)
    s2_path.write_text(json.dumps(s2))

    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    flat = " ".join(r.stdout.split())
    assert "2 of 4 reproduce" in flat and "the communication ledger differs" in flat
    assert "beyond rtol in test_acc" in flat, flat
    assert (out / "check.md").is_file() and (out / "check.csv").is_file()


def _edit_last(m_path, col, delta, rehash=True):
    lines = m_path.read_text().splitlines()
    head, row = lines[0].split(","), lines[-1].split(",")
    row[head.index(col)] = str(float(row[head.index(col)]) + delta)
    m_path.write_text("\n".join(lines[:-1] + [",".join(row)]) + "\n")
    if rehash:
        s_path = m_path.parent / "summary.json"
        s_path.write_text(json.dumps({**json.loads(s_path.read_text()), "metrics_sha256": file_sha256(m_path)}))


def test_check_recomputes_finals_from_metrics_and_names_unusable_evidence(tmp_path):
    spec = _spec(tmp_path)
    ev, out = tmp_path / "ev", tmp_path / "chk"
    # the last test_acc edited, its hash updated: summary.json's final still says the old value
    _edit_last(next(ev.rglob("fednest/*s0*/metrics.csv")), "test_acc", 0.3)
    broken = next(ev.rglob("aggitd/*s1*/metrics.csv"))  # metrics.csv no longer matches its hash
    _edit_last(broken, "test_acc", 0.01, rehash=False)
    r = runner.invoke(app, ["check", str(spec), "--from", str(ev), "--out", str(out), "--minutes", "1000"])
    flat = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "could not be used" in flat and str(broken.parent) in flat and "does not match the hash" in flat
    assert "3 of 3 reproduce" not in flat and "differs" in flat  # the edited final is not a drift
    assert len(list((out / "runs").rglob("summary.json"))) == 3  # no other run checked in the broken one's place


def test_check_refuses_bad_input_without_a_traceback(tmp_path):
    (tmp_path / "runs").mkdir()
    for args, kind, fields in ((["check", "--minutes", "0"], "bad_value", {"field": "--minutes"}),
                               (["check", "--from", str(tmp_path / "none")], "not_found",
                                {"field": "--from", "path": str(tmp_path / "none")}),
                               (["check", str(tmp_path / "missing.yaml")], "not_found",
                                {"field": "spec", "path": str(tmp_path / "missing.yaml")}),
                               (["check", "--rtol", "-1"], "bad_value", {"field": "--rtol", "value": -1}),
                               (["check", "--from", str(tmp_path / "runs"), "--out", str(tmp_path), "--dry-run"],
                                "bad_value", {"field": "--out", "path": str(tmp_path)})):  # into the evidence
        r = runner.invoke(app, args)
        assert fails_with(r, kind, **fields) and "Traceback" not in r.output, (args, r.output)


def test_a_long_runs_grown_rounding_is_a_drift_and_a_real_change_is_not(tmp_path):
    from fbo_cli.evidence.check import compare_run

    def run(name, accs):
        d = tmp_path / name
        d.mkdir()
        rows = "".join(f"{10 * i},{a!r},0.5\n" for i, a in enumerate(accs))
        (d / "metrics.csv").write_text("rounds,test_acc,train_time\n" + rows)
        (d / "summary.json").write_text(json.dumps({"status": "done", "metric": "test_acc", "final": accs[-1],
                                                    "ledger": {"rounds": 10 * (len(accs) - 1)}}))
        return d

    ev = run("ev", [0.1, 0.5, 0.6, 0.7, 0.8])
    assert compare_run(ev, run("same", [0.1, 0.5, 0.6, 0.7, 0.8]))["outcome"] == "identical"
    assert compare_run(ev, run("ulp", [0.1, 0.5, 0.6, 0.7, 0.8000001]))["outcome"] == "agrees"
    late = run("late", [0.1, 0.5, 0.6, 0.705, 0.801])
    assert compare_run(ev, late, sd=0.01)["outcome"] == "drifts"  # 0.1 seed sd off at the end
    assert compare_run(ev, late, sd=0.001)["outcome"] == "differs"  # a whole seed sd off
    assert compare_run(ev, late)["outcome"] == "differs"  # no seed spread to judge by
    early = run("early", [0.1, 0.52, 0.6, 0.7, 0.8005])
    assert compare_run(ev, early, sd=0.01)["outcome"] == "differs"  # apart from the first evaluation


def test_a_run_is_the_same_in_the_cli_process_and_in_a_grid_worker(tmp_path):
    """``fbo run`` and ``fbo compare --jobs 1`` compute in the CLI's own process, ``--jobs 2`` in workers; the
    torch thread setting that comes first in a process decides the last bits (docs/fidelity.md#reproducibility), so
    the CLI sets it first too. Without that, these runs differ from the first evaluations on (Fashion-MNIST MLP)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd
    import pytest

    from fbo_cli.data import load_dataset
    from fbo_cli.errors import UsageError

    data = Path("data").resolve()
    try:
        load_dataset("fashion-mnist", str(data), False)
    except UsageError:
        pytest.skip("Fashion-MNIST is not here (make data)")
    fbo = [sys.executable, "-m", "fbo_cli.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}  # the machine default the worker would not keep
    spec = lambda out: (f"name: same\ntask: hyperrep\nseeds: [0]\nbase: {{dataset: fashion-mnist, partition: iid, "
                        f"clients: 100, participation: 0.1, rounds: 30, eval_every: 1, data_dir: {data}, "
                        f"out_dir: {out}}}\nalgorithms: [{{name: F, algo: fednest}}]\n")
    for jobs in (1, 2):
        (tmp_path / f"s{jobs}.yaml").write_text(spec(tmp_path / f"j{jobs}"))
        subprocess.run([*fbo, "compare", str(tmp_path / f"s{jobs}.yaml"), "--jobs", str(jobs)], env=env, check=True,
                       capture_output=True)
    cfg = next((tmp_path / "j2").rglob("config.yaml"))
    subprocess.run([*fbo, "run", "-c", str(cfg), "--out-dir", str(tmp_path / "run"), "-q"], env=env, check=True,
                   capture_output=True)
    m = {k: pd.read_csv(next((tmp_path / k).rglob("metrics.csv"))).drop(columns="train_time")
         for k in ("j1", "j2", "run")}
    assert len(m["j2"]) == 4 and m["j1"].equals(m["j2"]) and m["run"].equals(m["j2"])


def test_the_sample_takes_batch_partners_and_reruns_them_as_one_batch(tmp_path):
    """A sampled run's batch partners (same algorithm and seed, other float steps) join the sample
    (budget allowing), rerun as one batch, and each is identical to its own evidence run."""
    from fbo_cli.evidence import check

    spec = _spec(tmp_path, "[{name: A, algo: aggitd, set: {outer_lr: 0.01}}, "
                           "{name: B, algo: aggitd, set: {outer_lr: 0.03}}]", "--batch", "off")
    ev, out = tmp_path / "ev", tmp_path / "chk"
    picks = check.committed_runs([spec], ev)
    secs = {("A", 0): 1.0, ("A", 1): 2.0, ("B", 0): 3.0, ("B", 1): 1.0}
    for p in picks:
        p.secs = secs[(p.cell.algorithm, p.cell.seed)]
    names = lambda chosen: {(p.cell.algorithm, p.cell.seed) for p in chosen}
    # one by one: the cheapest runs of each algorithm in turn; with batches: A's seed-0 partner B comes next
    assert names(check.select(picks, 4 / 60, "off")) == {("A", 0), ("B", 1), ("A", 1)}
    assert names(check.select(picks, 4 / 60, "auto")) == {("A", 0), ("B", 0)}
    r = runner.invoke(app, ["check", str(spec), "--from", str(ev), "--out", str(out), "--all"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())
    assert "4 of 4 reproduce" in flat and "4 of the reruns stepped in run batches" in flat, flat
    assert r.stdout.count("| identical | 2 |") == 4, r.stdout


def test_a_forged_row_after_the_budgets_last_evaluation_is_a_difference_not_a_drift(tmp_path):
    """Issue 62 item 6: the final within the budget stays, so the forged row is the only gap."""
    from fbo_cli.evidence.check import compare_run

    def run(name, accs):
        d = tmp_path / name
        d.mkdir()
        rows = "".join(f"{7 * i},{a!r},0.5\n" for i, a in enumerate(accs))  # 7 rounds an iteration: 0 ... 63
        (d / "metrics.csv").write_text("rounds,test_acc,train_time\n" + rows)
        (d / "summary.json").write_text(json.dumps({"status": "done", "metric": "test_acc", "ledger": {}}))
        return d

    accs = [0.1, 0.5, 0.6, 0.7, 0.8, 0.81, 0.82, 0.83, 0.84, 0.85]  # the last row, round 63, beyond the budget 60
    ev = run("ev", accs)
    assert compare_run(ev, run("same", accs), sd=0.01, rounds=60)["outcome"] == "identical"
    forged = run("forged", accs[:-1] + [0.99])
    assert compare_run(ev, forged, sd=0.01, rounds=60)["outcome"] == "differs"


def test_check_names_a_removed_run_and_an_edited_or_deleted_config(tmp_path):
    import shutil

    spec = _spec(tmp_path)
    ev, out = tmp_path / "ev", tmp_path / "chk"
    gone = next(ev.rglob("aggitd/*s0*/summary.json")).parent
    shutil.rmtree(gone)
    edited = next(ev.rglob("fednest/*s0*/config.yaml"))
    edited.write_text(edited.read_text().replace("seed: 0", "seed: 7"))
    deleted = next(ev.rglob("fednest/*s1*/config.yaml"))
    deleted.unlink()
    r = runner.invoke(app, ["check", str(spec), "--from", str(ev), "--out", str(out), "--all"])
    flat = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "1 of 4 reproduce, 3 could not be checked" in flat, flat
    md = " ".join((out / "check.md").read_text().split())  # check.md, where no console wraps a path
    assert f"{gone}` (missing from the evidence" in md
    assert f"{edited.parent}` (config.yaml is not this run's configuration" in md
    assert f"{deleted.parent}` (config.yaml is missing" in md
