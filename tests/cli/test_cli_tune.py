"""``fbo tune``: the dry run says the cost and runs nothing (as ``fbo compare --dry-run``)."""

from cli_helpers import invoke


def test_compare_and_tune_dry_runs_say_the_cost_and_run_nothing(tmp_path):
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: dry
task: hyperrep
seeds: [0, 1]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {tmp_path / "out"}}}
tune: {{seeds: [100], rounds: 4}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.01, 0.1]}}}}]
""")
    r = invoke(["compare", str(spec), "--dry-run"])
    assert r.exit_code == 0 and "2 run(s) to do" in " ".join(r.stdout.split()), r.output
    r = invoke(["tune", str(spec), "--dry-run"])
    assert r.exit_code == 0 and "2 grid runs" in r.stdout, r.output
    assert not (tmp_path / "out").exists()


def test_tune_quiet_runs_without_bars_or_notes(tmp_path):
    # issue 61, item 8: `fbo tune -q` exists, as `fbo run -q` does
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: quiet
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, threads: 1, out_dir: {tmp_path / "out"}}}
tune: {{seeds: [100], rounds: 4, tail: 0.5}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.01, 0.03, 0.1]}}}}]
""")
    r = invoke(["tune", str(spec), "-q", "--no-ranking-check"])
    assert r.exit_code == 0, r.output
    assert "tuning runs" not in r.stderr and "tuned.yaml" in r.stdout
    assert (tmp_path / "out" / "compare" / "quiet" / "tuned.yaml").is_file()
