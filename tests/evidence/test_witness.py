"""The paper's own code beside ours: witness runs (fbo witness) enter Table 2's section with a verdict."""

import json

import pandas as pd
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.evidence.report import build_report
from fbo_cli.evidence.report.witness_table import welch
from fbo_cli.runs.rundir import file_sha256

runner = CliRunner()


def fake_witness(root, name, seed, accs, lr=0.01):
    d = root / "witness" / f"fednest-{name}-inner{lr:g}-s{seed}"
    d.mkdir(parents=True)
    m = pd.DataFrame({"iterations": range(1, len(accs) + 1), "rounds": [10 * (i + 1) for i in range(len(accs))],
                      "test_acc": accs, "test_loss": 0.5})
    m.to_csv(d / "metrics.csv", index=False)
    hit = m[m.test_acc >= 0.9]
    (d / "summary.json").write_text(json.dumps({
        "status": "done", "setting": "IID, tau=1", "seed": seed, "inner_lr": lr, "final": accs[-1],
        "commit": "13b5e20", "rounds_to_target": int(hit.rounds.iloc[0]) if len(hit) else None,
        "metrics_sha256": file_sha256(d / "metrics.csv")}))
    return d


def test_welch_interval():
    d, lo, hi = welch(pd.Series([1.0, 2, 3]).to_numpy(), pd.Series([1.0, 2, 3]).to_numpy())
    assert d == 0 and lo < 0 < hi
    assert welch(pd.Series([1.0]).to_numpy(), pd.Series([1.0, 2]).to_numpy())[1:] == (float("-inf"), float("inf"))


def test_the_witness_runs_stand_beside_our_row_with_a_verdict(tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text(f"""
name: w
task: hyperrep
seeds: [0, 1]
target: 0.9
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 20, threads: 1, out_dir: {tmp_path}}}
algorithms: [{{name: FedNest, algo: fednest}}]
settings: [{{name: "IID, tau=1", set: {{partition: iid}}}}]
witness: {{algorithm: FedNest, settings: {{"IID, tau=1": iid-tau1}}}}
""")
    assert runner.invoke(app, ["compare", str(p)]).exit_code == 0
    fake_witness(tmp_path, "iid-tau1", 0, [0.5, 0.8, 0.95])
    fake_witness(tmp_path, "iid-tau1", 1, [0.5, 0.85, 0.96])
    bad = fake_witness(tmp_path, "iid-tau1", 2, [0.5, 0.6, 0.7])
    (bad / "metrics.csv").write_text("edited\n")  # its completion record no longer matches: left out
    fake_witness(tmp_path, "iid-tau1", 0, [0.1, 0.2, 0.3], lr=0.003)  # another inner step: not this row's
    build_report(tmp_path, tmp_path / "r.md", tmp_path / "r.html", specs=[str(p)])
    md = (tmp_path / "r.md").read_text()
    assert "The paper's own code beside ours" in md and "make witness-fednest" in md and "--inner-lr 0.01" in md
    assert "`main_hr.py`, commit 13b5e20;" in md
    row = next(line for line in md.splitlines() if line.startswith("| IID, tau=1 | 2 / 2 |"))
    assert "30 ± 0 (2/2 reached)" in row and "never (0/2 reached)" in row and "**differ**" in row
    assert (tmp_path / "r-figures" / "w_witness.svg").is_file()
    assert any("w_witness.svg" in h.read_text() for h in tmp_path.glob("r*.html"))
    bad_spec = p.read_text().replace("iid-tau1}", "iid-tau9}")
    p.write_text(bad_spec)
    r = runner.invoke(app, ["compare", str(p), "--dry-run"])
    assert r.exit_code == 2 and "'witness' must be" in " ".join(r.output.split())


def test_the_report_never_replaces_a_figures_folder_it_did_not_write(tmp_path):
    import pytest

    from fbo_cli.errors import UsageError

    mine = tmp_path / "r-figures"
    mine.mkdir()
    (mine / "thesis.pdf").write_text("mine")
    with pytest.raises(UsageError) as e:
        build_report(tmp_path, tmp_path / "r.md", tmp_path / "r.html", specs=["experiments/quick_mnist5k.yaml"])
    assert (e.value.kind, e.value.path) == ("not_fbos", str(mine))
    assert (mine / "thesis.pdf").read_text() == "mine"


def test_the_witness_records_the_checkouts_commit_or_says_unrecorded(tmp_path):
    import subprocess

    from fbo_cli.evidence.witness import checkout_commit

    assert checkout_commit(tmp_path / "nowhere") == "unrecorded"
    repo = tmp_path / "FedNest"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    assert checkout_commit(repo) == "unrecorded"  # no commit yet: rev-parse HEAD echoes "HEAD" (the old record)
    (repo / "main_hr.py").write_text("")
    subprocess.run([*git, "add", "main_hr.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert checkout_commit(repo) == sha and len(sha) == 40


def test_the_committed_witness_evidence_names_no_commit_it_cannot_know():
    from pathlib import Path

    import yaml

    configs = sorted(Path("docs/results/witness").glob("fednest-*/config.yaml"))
    assert configs and all(yaml.safe_load(c.read_text())["commit"] == "unrecorded" for c in configs)


def test_a_tampered_witness_run_is_named_by_the_data_and_by_fbo_witness_never_kept_as_finished(tmp_path, monkeypatch):
    """Issue 62 item 6: a witness run whose metrics.csv fails its hash was dropped silently, and kept as finished."""
    import fbo_cli.evidence.witness as w

    good = fake_witness(tmp_path, "iid-tau1", 0, [0.5, 0.8, 0.95])
    bad = fake_witness(tmp_path, "iid-tau1", 1, [0.5, 0.85, 0.96])
    s = json.loads((bad / "summary.json").read_text())
    (bad / "summary.json").write_text(json.dumps({**s, "rounds": 2000}))
    (bad / "metrics.csv").write_text((bad / "metrics.csv").read_text().replace("0.96", "0.99"))
    runs = w.witness_runs(tmp_path)
    assert list(runs.run_dir) == [str(good)] and runs.attrs["tampered"] == [
        (str(bad), "metrics.csv does not match the hash in summary.json")]
    assert str(bad) in w.tampered_note(runs) and w.tampered_note(w.witness_runs(tmp_path / "none")) == ""
    # fbo witness: the tampered run is named and run again (here the public code fails at once: exit 2)
    monkeypatch.setattr(w, "DRIVER", "import runpy, sys\nsys.argv = ['main_hr.py', *sys.argv[1:]]\n"
                                     "runpy.run_path('main_hr.py', run_name='__main__')\n")
    co, raw = tmp_path / "FedNest", tmp_path / "raw"
    (co / "core").mkdir(parents=True)
    (co / "core" / "test.py").write_text("def test_img(net, data, args):\n    return 0, 0\n")
    (co / "main_hr.py").write_text("raise SystemExit(3)\n")
    raw.mkdir()
    (raw / "train-images-idx3-ubyte").write_text("")
    r = runner.invoke(app, ["witness", "fednest", "--checkout", str(co), "--mnist-raw", str(raw), "--seeds", "1",
                            "--settings", "iid-tau1", "--rounds", "10", "--inner-lr", "0.01",
                            "--out-dir", str(tmp_path)])
    flat = " ".join(r.output.split())
    assert r.exit_code == 2 and "tampered or damaged" in flat and "kept" not in flat, r.output


def test_the_reports_witness_table_names_a_tampered_witness_run(tmp_path):
    """Issue 62 item 6: the report dropped a tampered witness run silently."""
    from fbo_cli.evidence.report.witness_table import witness_md

    bad = fake_witness(tmp_path, "iid-tau1", 1, [0.5, 0.85, 0.96])
    (bad / "metrics.csv").write_text((bad / "metrics.csv").read_text().replace("0.96", "0.99"))
    text = witness_md(None, pd.DataFrame(), {}, tmp_path, None)  # its only run fails: the note alone
    assert str(bad) in text and "tampered" in text
