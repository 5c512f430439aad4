"""Selection on the command line (issue 61, item 8): ``fbo compare SPEC -a NAME --setting NAME`` runs and reports
a subset of a spec without editing it, the spec's very runs in its results folder; an unknown name is exit 2
listing the allowed ones."""

import pandas as pd
from cli_helpers import error_of, fails_with, run


def _spec(tmp_path):
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: sub
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 10, threads: 1, out_dir: {tmp_path}}}
algorithms: [{{name: A, algo: aggitd}}, {{name: F, algo: fednest}}]
settings: [{{name: iid, set: {{partition: iid}}}}, {{name: shards, set: {{partition: shards}}}}]
claims:
  - {{text: "A beats F", metric: final, better: A, than: F, mode: max}}
""")
    return spec


def test_compare_runs_and_reports_only_the_selected_algorithm_and_setting(tmp_path):
    spec = _spec(tmp_path)
    r = run("compare", str(spec), "-a", "A", "--setting", "iid")
    assert r.exit_code == 0, r.output
    runs = pd.read_csv(tmp_path / "compare" / "sub" / "runs.csv")
    assert list(zip(runs.algorithm, runs.setting)) == [("A", "iid")]
    assert [p.parts[-3] for p in tmp_path.glob("hyperrep/*/*/summary.json")] == ["aggitd"]
    # the whole spec afterwards reuses that run (the same run id, the same folder)
    done = next(tmp_path.glob("hyperrep/aggitd/*/summary.json")).stat().st_mtime_ns
    r = run("compare", str(spec), "-S", "iid")
    assert r.exit_code == 0, r.output
    assert next(tmp_path.glob("hyperrep/aggitd/*/summary.json")).stat().st_mtime_ns == done
    assert len(list(tmp_path.glob("hyperrep/*/*/summary.json"))) == 2


def test_an_unknown_algorithm_or_setting_is_exit_2_naming_the_allowed_ones(tmp_path):
    spec = _spec(tmp_path)
    r = run("compare", str(spec), "-a", "Nope")
    assert fails_with(r, "unknown", value="Nope") and "A, F" in r.output  # the allowed ones named
    r = run("compare", str(spec), "--setting", "noniid", "--dry-run")
    assert fails_with(r, "unknown", value="noniid") and "iid, shards" in r.output
    assert error_of(r).field == "setting"


def test_report_spec_reads_a_compare_made_with_set(tmp_path, monkeypatch):
    # issue 61, item 8: the runs of `compare --set` have run ids of their own (the results folder's name does not
    # say so): the compare records its --set beside its table, and `fbo report --spec` reads those runs
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path)
    r = run("compare", str(spec), "-a", "A", "-S", "iid", "--set", "rounds=6")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "compare" / "sub" / "command_line.yaml").is_file()
    r = run("report", "--spec", str(spec), "--from", str(tmp_path), "--md", str(tmp_path / "p.md"),
            "--html", str(tmp_path / "p.html"))
    assert r.exit_code == 0, r.output
    assert "1 of 4 runs present" in " ".join(r.output.split())
    r = run("compare", str(spec), "-a", "A", "-S", "iid")  # without --set: the record goes
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "compare" / "sub" / "command_line.yaml").exists()


def test_tune_one_algorithm_keeps_the_recorded_tuning_of_the_others(tmp_path):
    import yaml

    spec = tmp_path / "t.yaml"
    spec.write_text(f"""
name: tsub
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, threads: 1, out_dir: {tmp_path}}}
tune: {{seeds: [100], rounds: 4, tail: 0.5}}
algorithms:
  - {{name: A, algo: aggitd, tune: {{outer_lr: [0.01, 0.03, 0.1]}}}}
  - {{name: F, algo: fednest, tune: {{outer_lr: [0.01, 0.03, 0.1]}}}}
""")
    r = run("tune", str(spec), "-q", "--no-ranking-check")
    assert r.exit_code == 0, r.output
    folder = tmp_path / "compare" / "tsub"
    before = yaml.safe_load((folder / "tuned.yaml").read_text())["chosen"]
    f_rows = pd.read_csv(folder / "tuning.csv").query("algorithm == 'F'")
    r = run("tune", str(spec), "-q", "--no-ranking-check", "-a", "A", "--rerun")
    assert r.exit_code == 0, r.output
    after = yaml.safe_load((folder / "tuned.yaml").read_text())["chosen"]
    assert after["F"] == before["F"] and set(after) == {"A", "F"}
    table = pd.read_csv(folder / "tuning.csv")
    assert set(table.algorithm) == {"A", "F"}
    pd.testing.assert_frame_equal(table.query("algorithm == 'F'").reset_index(drop=True), f_rows.reset_index(drop=True))
    r = run("tune", str(spec), "-a", "Nope", "--dry-run")
    assert fails_with(r, "unknown", value="Nope") and "A, F" in r.output


def test_a_compare_without_set_removes_only_its_own_command_line_record(tmp_path):
    from types import SimpleNamespace

    from fbo_cli.grids.compare import COMMAND_LINE, write_command_line

    exp = SimpleNamespace(overrides={}, seeds=[0], seeds_given=False)
    (tmp_path / "mine.txt").write_text("a user's file")
    (tmp_path / COMMAND_LINE).symlink_to(tmp_path / "mine.txt")
    write_command_line(exp, tmp_path)  # a link by that name: not fbo's record, kept
    assert (tmp_path / COMMAND_LINE).is_symlink() and (tmp_path / "mine.txt").read_text() == "a user's file"
    (tmp_path / COMMAND_LINE).unlink()
    (tmp_path / COMMAND_LINE).write_text("set: {rounds: 5}\n")
    write_command_line(exp, tmp_path)  # fbo's own record: removed
    assert not (tmp_path / COMMAND_LINE).exists()
