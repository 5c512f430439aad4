"""What a reader sees when fbo's output is piped: whole names, defaults in --help, unbroken Markdown."""

from pathlib import Path

from typer.testing import CliRunner

from fbo_cli.cli import app

runner = CliRunner()  # its stdout is not a terminal, like `fbo list | grep ...`


def test_list_piped_keeps_whole_names(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    r = runner.invoke(app, ["list"])
    assert r.exit_code == 0, r.output
    words = set(r.stdout.split())
    assert {"fedbioacc-local", "server-only", "fedbio-local"} <= words
    for p in Path("experiments").glob("*.yaml"):
        if "algorithms:" in p.read_text():
            assert str(p) in words, p


def test_run_help_shows_defaults():
    r = runner.invoke(app, ["run", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.stdout.replace("│", " ").split())
    for d in ("[default: the task's; see `fbo show ALGO --task TASK`]", "[default: results]"):
        assert d in text, d  # the per-task defaults are not claimed as one number
    for cmd in ("compare", "tune"):
        r = runner.invoke(app, [cmd, "--help"])
        assert r.exit_code == 0 and "[default: results]" in " ".join(r.stdout.replace("│", " ").split())


def test_compare_prints_unbroken_markdown(tmp_path):
    spec = tmp_path / "exp.yaml"
    long = "AggITD with a deliberately long display name that makes the table wider than 80 columns"
    spec.write_text(f"""
name: wide
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {tmp_path}}}
algorithms: [{{name: "{long}", algo: aggitd}}]
""")
    r = runner.invoke(app, ["compare", str(spec)])
    assert r.exit_code == 0, r.output
    table = (tmp_path / "compare" / "wide" / "table.md").read_text().splitlines()
    assert any(len(line) > 80 for line in table)
    printed = r.stdout.splitlines()
    table_lines = [line for line in table if line.startswith("|")]
    assert table_lines and all(line in printed for line in table_lines)
    start = printed.index(table_lines[0])
    block = printed[start:start + len(table_lines)]
    assert all(line.startswith("|") for line in block)


def test_show_prints_every_setting_with_the_tasks_default():
    r = runner.invoke(app, ["show", "fedbioacc-local", "--task", "hyperrep"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    for key in ("upper_lr", "lower_lr", "neumann_step", "local_steps", "clients", "participation", "eval_every"):
        assert key in text, key
    assert "γ, lower (y) step" in text and "η, upper (x) step" in text  # meaning and the paper's symbol
    r = runner.invoke(app, ["show", "fedbioac-local"])
    assert r.exit_code == 2 and "did you mean 'fedbioacc-local'" in " ".join(r.output.split())


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
    r = runner.invoke(app, ["compare", str(spec), "--dry-run"])
    assert r.exit_code == 0 and "2 run(s) to do" in " ".join(r.stdout.split()), r.output
    r = runner.invoke(app, ["tune", str(spec), "--dry-run"])
    assert r.exit_code == 0 and "2 grid runs" in r.stdout, r.output
    assert not (tmp_path / "out").exists()


def test_side_tools_are_subcommands_with_checked_options():
    for args, what in ((["bench", "--device", "tpu"], "--device must be cpu or cuda"),
                       (["bench", "--against", "no-such-revision"], "neither a checkout with fbo_cli/ nor a git"),
                       (["diagnose", "truncation", "--rounds", "-1"], "--rounds must be >= 0"),
                       (["figure", "zohfl-fig2", "--from", "/nonexistent"], "--from: no results folder"),
                       (["figure", "aggitd-fig2", "--format", "jpg"], "--format: unknown format jpg"),
                       (["figure", "codasca-imax", "/nonexistent"], "no runs.csv")):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and what in " ".join(r.output.split()) and "Traceback" not in r.output, args
    for cmd in (["bench"], ["diagnose", "truncation"], ["figure", "zohfl-fig1"]):
        r = runner.invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0 and "[default:" in r.stdout, cmd


def test_plot_bands_are_chosen_and_checked(tmp_path):
    for band, code in (("ci95", 0), ("bogus", 2)):
        spec = tmp_path / f"{band}.yaml"
        spec.write_text(f"name: b{band}\ntask: hyperrep\nseeds: [0, 1]\nband: {band}\n"
                        f"base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {tmp_path}}}\n"
                        f"algorithms: [{{name: A, algo: aggitd}}]\n")
        r = runner.invoke(app, ["compare", str(spec)])
        assert r.exit_code == code, r.output
    assert (tmp_path / "compare" / "bci95" / "curves.png").stat().st_size > 1000
    assert "'band' must be one of minmax, std, ci95" in " ".join(r.output.split())


def test_markdown_cells_escape_pipes_and_numbers_read_well():
    from markdown_it import MarkdownIt

    from fbo_cli.results import fmt_num, md_row

    html = MarkdownIt("commonmark").enable("table").render(md_row(["a", "b"]) + "\n|---|---|\n" +
                                                           md_row(["x | y", 2]) + "\n")
    assert html.count("<td>") == 2 and "x | y" in html
    assert [fmt_num(v) for v in (1630.0, 3e7, 3e-5, 0.01, 0.9168, 0.0003)] == ["1630", "3e7", "3e-5", "0.01", "0.9168",
                                                                        "0.0003"]
