"""Issue 55: fbo removes only what it can prove it made, and --prune refuses when it cannot tell."""

import os

from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.config import resolve
from fbo_cli.runs.rundir import LOCK_TOKEN, ROOT_MARKER, claim_root, leftovers
from fbo_cli.runs.runner import execute

runner = CliRunner()


def _cfg(out, **kw):
    return resolve("hyperrep", "aggitd", {"dataset": "digits", "clients": 4, "participation": 0.5, "threads": 1,
                                          "max_iters": 4, "rounds": 2, "out_dir": str(out), **kw})

# files of a home-like folder whose names look like fbo's temporary files and locks (the list)
LOOKALIKES = (".config/app/.lock", ".env.template", "proj/.vimrc.original", "notes/.draft.abcdefgh",
              "sub/only/.lock", "photos/.thumb.a1b2c3d4.png", "a/b/.metrics.csv.abcdefgh")


def _plant(root, names=LOOKALIKES):
    for n in names:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_text("mine")


def test_clean_in_a_home_with_a_planted_marker_removes_nothing_of_the_users(tmp_path):
    h = tmp_path / "home"
    _plant(h)
    (h / ROOT_MARKER).write_text("")  # planted: the folder is treated as fbo's, its files are still not
    r = runner.invoke(app, ["clean", "--out-dir", str(h), "--yes"])
    assert r.exit_code == 0, r.output
    assert all((h / n).read_text() == "mine" for n in LOOKALIKES)
    assert leftovers(h) == []


def test_what_fbo_made_carries_its_token_and_clean_removes_it(tmp_path):
    root = tmp_path / "out"
    claim_root(root)
    d = root / "hyperrep" / "aggitd" / "run"
    d.mkdir(parents=True)
    (d / ".lock").write_bytes(LOCK_TOKEN)
    (d / ".metrics.csv.ab12cd34.fbo-tmp").write_text("half")
    _plant(root)
    assert sorted(leftovers(root)) == sorted([d / ".lock", d / ".metrics.csv.ab12cd34.fbo-tmp", d, d.parent,
                                              d.parent.parent])
    # a run's own lock and temporary files are written with the token
    cfg = _cfg(tmp_path / "o2")
    execute(cfg)
    assert (cfg.run_dir / ".lock").read_bytes() == LOCK_TOKEN


def test_run_into_a_folder_of_another_tools_runs_does_not_mark_it(tmp_path):
    other = tmp_path / "other"
    _plant(other, ("x/y/z/summary.json", "compare/q/.spec", ".env.template"))
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "2",
                            "--set", "clients=4", "--out-dir", str(other)])
    assert r.exit_code == 0, r.output
    assert not (other / ROOT_MARKER).exists()
    r = runner.invoke(app, ["clean", "--out-dir", str(other), "--yes"])
    assert r.exit_code == 2 and (other / ".env.template").exists()
    claim_root(tmp_path / "empty")  # created (or found empty) by fbo: marked
    assert (tmp_path / "empty" / ROOT_MARKER).is_file()


def test_prune_from_a_folder_without_the_specs_removes_nothing(tmp_path, monkeypatch):
    ev = tmp_path / "evidence"
    execute(_cfg(ev))
    runs = sorted(ev.glob("*/*/*/summary.json"))
    assert runs and (ev / ROOT_MARKER).is_file()
    here = tmp_path / "elsewhere"  # no experiments/: every run would look referred to by no spec
    here.mkdir()
    monkeypatch.chdir(here)
    r = runner.invoke(app, ["report", "--from", str(ev), "--prune", "--yes", "--md", "x.md", "--html", "x.html"])
    assert fails_with(r, "not_found", field="specs"), r.output  # cannot read the reproduction specs
    assert all(p.is_file() for p in runs) and not os.path.exists("x.md")


DEAD = 2**22 + 1  # above any pid_max: no such process


def _scratch(parent, kind, pid=DEAD, start="123", name=None, before=False):
    """A scratch folder as a killed command of pid ``pid`` left it: fbo's token, then its files (``before``:
    a file put there before the token was)."""
    d = parent / (name or f"{'.' if kind == 'figures' else ''}fbo-{kind}-{pid}-abcd1234")
    (d / "sub").mkdir(parents=True)
    if before:
        (d / "sub" / "mine.txt").write_text("mine")
        os.utime(d / "sub" / "mine.txt")
        import time

        time.sleep(0.02)
    (d / ".fbo-scratch").write_text(f"fbo scratch folder\n{pid} {start}\n")
    (d / "sub" / "fig.png").write_text("x")
    return d


def test_clean_sweeps_the_scratch_folders_of_killed_commands_only(tmp_path, monkeypatch):
    import tempfile

    from fbo_cli.files import started_at
    from fbo_cli.runs.rundir import temp_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    root = tmp_path / "out"
    claim_root(root)
    (root / "report").mkdir()
    tmp = tmp_path / "tmp"
    me = started_at(os.getpid())
    gone = [_scratch(root / "report", "figures"), _scratch(tmp, "report"), _scratch(tmp, "mnist"),
            _scratch(tmp, "ray"), _scratch(tmp, "report", pid=os.getpid(), start=str(int(me) + 1))]  # a reused pid
    live = [temp_folder("figures", root / "report"), temp_folder("report"),  # this process uses them
            _scratch(tmp, "mnist", pid=os.getpid(), start=me)]
    theirs = [tmp / f"fbo-report-{DEAD}", root / "report" / f".figures-{DEAD}-abcd1234",
              _scratch(tmp, "ray", pid=DEAD + 1, before=True)]  # a file older than the token: not fbo's alone
    for d in theirs[:2]:
        d.mkdir(parents=True)
    r = runner.invoke(app, ["clean", "--out-dir", str(root), "--yes"])  # a results root: the temporary folder
    assert r.exit_code == 0, r.output                                    # is not swept
    assert not gone[0].exists() and all(d.is_dir() for d in gone[1:] + live + theirs)
    r = runner.invoke(app, ["clean", "--out-dir", str(root), "--temp", "--yes"])
    assert r.exit_code == 0, r.output
    assert not any(d.exists() for d in gone) and all(d.is_dir() for d in live + theirs)


def test_folders_merely_named_like_fbos_scratch_survive_clean(tmp_path, monkeypatch):
    """Issue 62 item 2: the name alone ([.]fbo-KIND-<digits>-<8 characters>) proves nothing."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    root = tmp_path / "out"
    claim_root(root)
    names = ["fbo-report-2025-november", "fbo-mnist-60000-training", ".fbo-figures-2024-snapshot",
             "fbo-ray-1999-holidays"]
    kept = [p / n / "mine.txt" for p in (tmp_path / "tmp", root / "deep" / "er") for n in names]
    for f in kept:
        f.parent.mkdir(parents=True)
        f.write_text("mine")
    for args in (["--out-dir", str(root)], ["--out-dir", str(root), "--temp"]):
        r = runner.invoke(app, ["clean", *args, "--yes"])
        assert r.exit_code == 0, r.output
    assert all(f.read_text() == "mine" for f in kept)


def test_a_run_directory_another_holds_is_refused_as_busy_and_kept(tmp_path):
    """``execute(wait=False)`` on a run directory whose lock another holds: a ``busy`` error naming the folder (the
    executors tell it by its kind and class), and the folder is left as it was (it is not pruned as empty)."""
    import pytest

    from fbo_cli.runs.rundir import run_lock
    from fbo_cli.runs.runner import RunBusy

    cfg = _cfg(tmp_path)
    cfg.run_dir.mkdir(parents=True)
    with run_lock(cfg.run_dir), pytest.raises(RunBusy) as e:  # a second open file: its flock is refused
        execute(cfg, wait=False)
    assert (e.value.kind, e.value.path) == ("busy", str(cfg.run_dir)) and cfg.run_dir.is_dir()
