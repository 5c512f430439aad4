"""Issue 55: a user's algorithm file cannot take over fbo, and `fbo list` reads ./algorithms/ without running it."""

import sys

import pytest
from cli_helpers import error_of, fails_with
from typer.testing import CliRunner

import fbo_cli.algorithms.external as external
from fbo_cli.cli import app

runner = CliRunner()
ALGO = "from fbo_cli.algorithms.fednest import FedNest\n\n\nclass Mine(FedNest):\n    name = 'mine'\n"


def _dry_run(algo: str):
    return runner.invoke(app, ["run", "hyperrep", "--algo", algo, "--dataset", "digits", "--dry-run"])


@pytest.mark.parametrize("code, field, value", [("import sys\nsys.exit(0)\n", "exit", 0),
                                                ("import sys\nsys.exit(3)\n", "exit", 3),
                                                ("raise KeyboardInterrupt\n", "exception", "KeyboardInterrupt"),
                                                ("1 / 0\n", "exception", "ZeroDivisionError")])
def test_a_user_file_that_exits_or_raises_at_import_is_exit_2_naming_it(tmp_path, monkeypatch, code, field, value):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(code + ALGO)
    r = _dry_run("bad.py:Mine")
    bad = str((tmp_path / "bad.py").resolve())
    assert fails_with(r, "user_code", field=field, value=value, path=bad), r.output
    assert "Traceback" not in r.output


def test_sys_argv_is_the_files_own_while_it_loads_and_fbos_again_after(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ap.py").write_text("import argparse\nargparse.ArgumentParser().parse_args()\n" + ALGO)
    argv = list(sys.argv)
    r = _dry_run("ap.py:Mine")
    assert r.exit_code == 0 and "nothing was run" in r.output, r.output
    assert sys.argv == argv


def test_a_module_reference_whose_import_raises_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "boom_mod_55.py").write_text("raise RuntimeError('boom')\n")
    r = _dry_run("boom_mod_55:Mine")
    assert fails_with(r, "user_code", field="exception", value="RuntimeError", path=None), r.output
    assert "Traceback" not in r.output


def test_ctrl_c_while_a_user_file_loads_stops_fbo_with_130(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # the file's import receives SIGINT, and swallows the KeyboardInterrupt as a careless loop would
    (tmp_path / "slow.py").write_text("import os, signal\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n"
                                      "    import time; time.sleep(5)\nexcept KeyboardInterrupt:\n    pass\n" + ALGO)
    r = _dry_run("slow.py:Mine")
    assert r.exit_code == 130 and "interrupted while importing" in r.output, r.output


def test_fbo_list_reads_algorithms_without_running_them_and_survives_a_broken_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "algorithms").mkdir()
    ran = tmp_path / "RAN"
    (tmp_path / "algorithms" / "mine.py").write_text(f"open({str(ran)!r}, 'w')\n" + ALGO)
    (tmp_path / "algorithms" / "loops.py").write_text("while True:\n    pass\n")
    (tmp_path / "algorithms" / "broken.py").write_text("def (\n")
    (tmp_path / "algorithms" / "deep.py").write_text("x = " + "-" * 100_000 + "1\n")  # the parser gives up
    monkeypatch.setattr(external, "entry_points", lambda: {"ep-bad": "no_such_module_55:X"})
    r = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "mine.py:Mine" in text and "broken.py" in text and "SyntaxError" in text and not ran.exists()
    assert "deep.py" in text
    assert "ep-bad" in text and "broken" in text and "no_such_module_55" in text


def test_two_classes_of_one_name_in_algorithms_are_an_error_naming_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "algorithms").mkdir()
    for f in ("a.py", "b.py"):
        (tmp_path / "algorithms" / f).write_text(ALGO)
    r = _dry_run("Mine")
    text = "".join(r.output.split())  # the message wraps anywhere
    assert fails_with(r, "bad_value", field="algorithm", value="Mine"), r.output
    assert error_of(r).path == str(tmp_path / "algorithms")
    assert "a.py:Mine" in text and "b.py:Mine" in text  # both named, for the user to rename one


@pytest.mark.parametrize("code, says", [("import os\nos._exit(0)\n", "os._exit(0)"),
                                        ("import os\nos._exit(3)\n", "os._exit(3)"),
                                        ("import atexit, os\natexit.register(lambda: os._exit(0))\n", "atexit"),
                                        ("import os\nos.chdir('/')\n", "working folder")])
def test_os_exit_atexit_and_chdir_at_import_are_exit_2_naming_the_file(tmp_path, code, says):
    """Issue 62: a user file cannot choose fbo's exit status or move its results (run in a child: on old code
    os._exit would end the test's own process)."""
    import subprocess
    from pathlib import Path

    import fbo_cli

    (tmp_path / "bad.py").write_text(code + ALGO)
    r = subprocess.run([sys.executable, "-m", "fbo_cli", "run", "hyperrep", "--algo", "bad.py:Mine", "--dataset",
                        "digits", "--dry-run"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(Path(fbo_cli.__file__).parents[1]), "PATH": "/usr/bin:/bin",
                            "COLUMNS": "200"})
    text = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 2 and "bad.py" in text and says in text and "Traceback" not in text, text


def test_fbo_list_names_entry_points_without_importing_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    ran = tmp_path / "RAN"
    (tmp_path / "ep_mod_62.py").write_text(f"open({str(ran)!r}, 'w')\n" + ALGO)
    monkeypatch.setattr(external, "entry_points", lambda: {"ep-good": "ep_mod_62:Mine"})
    r = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "ep-good" in r.output and "ep_mod_62:Mine" in r.output, r.output
    assert not ran.exists()


def test_fbo_list_lists_a_bilevel_algorithm_subclass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "algorithms").mkdir()
    (tmp_path / "algorithms" / "mine.py").write_text(
        "from fbo_cli.algorithms.base import BilevelAlgorithm\n\n\nclass MyBi(BilevelAlgorithm):\n"
        "    tasks = ('hyperrep',)\n")
    r = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "mine.py:MyBi" in r.output, r.output


def test_a_pool_worker_ended_by_user_code_names_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "die.py").write_text("import os\n" + ALGO + "\n    def step(self):\n        os._exit(4)\n")
    (tmp_path / "s.yaml").write_text(
        "name: die\ntask: hyperrep\nmetric: test_acc\nseeds: [0]\n"
        "base: {dataset: digits, clients: 4, participation: 0.5, rounds: 4, threads: 1}\n"
        "algorithms:\n  - {name: D, algo: ./die.py:Mine}\n  - {name: D2, algo: ./die.py:Mine, set: {tau: 2}}\n")
    r = runner.invoke(app, ["compare", "s.yaml", "--jobs", "2", "--batch", "1"], env={"COLUMNS": "250"})
    text = "".join(r.output.split())
    assert r.exit_code != 0 and str(tmp_path / "die.py").replace(" ", "") in text and "os._exit" in text, r.output
