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
