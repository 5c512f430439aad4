"""The command line's text (issue 53): the version, help texts as paragraphs, tables in a pipe."""

import re

from typer.testing import CliRunner

from fbo_cli import __version__
from fbo_cli.cli import app

runner = CliRunner()


def test_version_names_the_commit():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and re.fullmatch(rf"fbo {re.escape(__version__)} \(commit [0-9a-f]{{12}}(\+dirty)?\)\n",
                                             r.output), r.output


def test_help_texts_break_only_between_paragraphs():
    for c in app.registered_commands:
        assert c.help and all("\n" not in p for p in c.help.split("\n\n")), c.callback.__name__


def test_cost_in_a_pipe_keeps_each_spec_name_on_one_line():
    specs = ["experiments/aggitd_table2_heldout.yaml", "experiments/zohfl_table1_fmnist_x0zero.yaml"]
    r = runner.invoke(app, ["cost", *specs])  # CliRunner's stdout is no terminal, as in `fbo cost | cat`
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[1].startswith("spec\ttuning\tcompared\tcore-min\t") and "core-min: expected / at most" in r.output
    for name in ("aggitd_table2_heldout", "zohfl_table1_fmnist_x0zero", "total"):
        assert sum(line.split("\t")[0] == name for line in lines) == 1, name
