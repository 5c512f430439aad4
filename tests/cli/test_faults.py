"""Fault injection: planted and malformed checkpoints, hostile spec names. Each case is a regression of
a probe that once found a hole (a pickle payload executed, a name wrote outside --out-dir)."""

import io
import pickle

import pandas as pd
import pytest
import torch
from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.config import resolve
from fbo_cli.runs.rundir import CHECKPOINT
from fbo_cli.runs.runner import execute

runner = CliRunner()


def _cfg(out, **kw):
    return resolve("hyperrep", "aggitd", {"dataset": "digits", "clients": 4, "participation": 0.5, "threads": 1,
                                          "max_iters": 4, "rounds": 10**6, "out_dir": str(out),
                                          "checkpoint_every": 2, **kw})


class _Payload:
    """Unpickling this calls ``open(path, 'w')``: the file appears only if the loader executes code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_planted_pickle_checkpoint_executes_nothing_and_the_run_starts_over(tmp_path):
    clean = _cfg(tmp_path / "clean")
    execute(clean)
    cfg = _cfg(tmp_path / "planted")
    cfg.run_dir.mkdir(parents=True)
    marker = tmp_path / "pwned"
    probe = tmp_path / "probe"

    def planted(path):
        buf = io.BytesIO()
        torch.save({"run_id": cfg.run_id, "fbo": "0.1.0", "algo": _Payload(path)}, buf)
        return buf.getvalue()

    torch.load(io.BytesIO(planted(probe)), weights_only=False)
    assert probe.exists()  # a real payload: a loader that unpickles anything runs it
    (cfg.run_dir / CHECKPOINT).write_bytes(planted(marker))
    logs = []
    s = execute(cfg, log=logs.append)
    assert not marker.exists()
    assert s["status"] == "done" and (cfg.run_dir / "checkpoint.bad").is_file()
    assert any("malformed" in m and "starting from round 0" in m for m in logs), logs
    text = (cfg.run_dir / "run.log").read_text()  # what the run said, kept beside its metrics
    assert "malformed" in text and "start: hyperrep/aggitd" in text and "end: done" in text
    a, b = (pd.read_csv(c.run_dir / "metrics.csv").drop(columns="train_time") for c in (clean, cfg))
    pd.testing.assert_frame_equal(a, b)  # from round 0: the same run as one that never saw the file


@pytest.mark.parametrize("damage", ["drop gen", "rows not a list", "wrong shape", "foreign class"])
def test_a_malformed_checkpoint_of_this_run_is_moved_aside_and_the_run_redone(tmp_path, stop_after_checkpoint,
                                                                              damage):
    cfg = _cfg(tmp_path)
    stop_after_checkpoint(cfg)
    ck = cfg.run_dir / CHECKPOINT
    c = torch.load(ck, weights_only=True)
    if damage == "drop gen":
        del c["gen"]
    elif damage == "rows not a list":
        c["rows"] = "x"
    elif damage == "wrong shape":
        c["algo"]["x"] = ("t", torch.zeros(3))
    else:
        c["algo"]["x"] = ("o", "subprocess:Popen", {})
    torch.save(c, ck)
    logs = []
    s = execute(cfg, log=logs.append)
    assert s["status"] == "done" and not ck.exists() and (cfg.run_dir / "checkpoint.bad").is_file(), logs
    assert s["ledger"]["iterations"] == 4
    assert execute(cfg, reuse=True)["status"] == "done"  # nothing left that trips a later run


def test_pickle_module_is_not_what_loads_checkpoints():
    with pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(pickle.dumps(_Payload("/nonexistent/x"), protocol=2)), weights_only=True)


def _spec(path, name, algos="[{name: A, algo: aggitd}]"):
    path.write_text(f"name: {name}\ntask: hyperrep\nseeds: [0]\nalgorithms: {algos}\n"
                    f"base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 5, threads: 1}}\n")
    return path


@pytest.mark.parametrize("name", ["/tmp/fbo-escape", "../../escape", ".", "[a, b]", "a/b", "x" * 101, "'a b'", "''"])
def test_a_spec_name_is_never_a_path(tmp_path, name):
    out = tmp_path / "out" / "a"
    r = runner.invoke(app, ["compare", str(_spec(tmp_path / "s.yaml", name)), "--out-dir", str(out)])
    assert fails_with(r, "bad_spec", field="name") and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape").exists()
    assert not __import__("pathlib").Path("/tmp/fbo-escape").exists()


def test_two_specs_with_one_name_do_not_share_a_folder(tmp_path):
    out = tmp_path / "out"
    a = _spec(tmp_path / "a.yaml", "tiny")
    b = _spec(tmp_path / "b.yaml", "tiny", "[{name: B, algo: fednest}]")
    assert runner.invoke(app, ["compare", str(a), "--out-dir", str(out)]).exit_code == 0
    before = (out / "compare" / "tiny" / "table.md").read_text()
    r = runner.invoke(app, ["compare", str(b), "--out-dir", str(out)])
    assert fails_with(r, "bad_spec", field="name", path=str(out / "compare" / "tiny"), value=str(a)), r.output
    assert (out / "compare" / "tiny" / "table.md").read_text() == before
    r = runner.invoke(app, ["tune", str(b), "--out-dir", str(out)])
    assert r.exit_code == 2


def test_a_spec_file_edited_keeps_its_folder(tmp_path):
    """A setting added to a spec (the same file) is the spec grown, not another spec: its folder stays its own."""
    out = tmp_path / "out"
    a = _spec(tmp_path / "a.yaml", "tiny")
    assert runner.invoke(app, ["compare", str(a), "--out-dir", str(out)]).exit_code == 0
    _spec(tmp_path / "a.yaml", "tiny", "[{name: B, algo: fednest}]")
    r = runner.invoke(app, ["compare", str(a), "--out-dir", str(out), "--dry-run"])
    assert r.exit_code == 0, r.output
    b = _spec(tmp_path / "b.yaml", "tiny", "[{name: C, algo: fednest}]")  # another file of that name: refused
    assert runner.invoke(app, ["compare", str(b), "--out-dir", str(out)]).exit_code == 2


def test_a_copied_or_linked_run_directory_is_refused_and_redone(tmp_path):
    import shutil

    from fbo_cli.runs.rundir import run_status

    a = _cfg(tmp_path, seed=0)
    execute(a)
    b = _cfg(tmp_path, seed=1)
    shutil.copytree(a.run_dir, b.run_dir)  # another run's files under this run's name
    state, _, why = run_status(b.run_dir)
    assert state == "corrupt" and "a copy or a link of another run" in why
    other = resolve("hyperrep", "fednest", {**a.as_dict()["hp"], **{k: v for k, v in a.as_dict().items()
                                                                    if k not in ("hp", "task_params", "algo",
                                                                                 "task")}})
    other.run_dir.parent.mkdir(parents=True)
    other.run_dir.symlink_to(a.run_dir.resolve())  # FBO-AggITD's run shown as FedNest's
    assert run_status(other.run_dir)[0] == "corrupt"
    s = execute(b, reuse=True)
    assert s["run_id"] == b.run_id and s["seed"] == 1  # redone as itself


def test_leftovers_of_kills_are_removed_on_the_next_start_and_by_fbo_clean(tmp_path):
    import fcntl
    import os

    from fbo_cli.runs.rundir import LOCK_TOKEN, claim_root

    cfg = _cfg(tmp_path / "out")
    claim_root(tmp_path / "out")  # fbo made this results root (.fbo-results)
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / ".metrics.csv.ab12cd_9.fbo-tmp").write_text("half")  # a SIGKILL between write and rename
    (cfg.run_dir / ".notes").write_text("mine")  # not a temporary file of fbo's: it stays
    (cfg.run_dir / ".metrics.csv.ab12cd_9").write_text("mine")  # looks like one, without fbo's token: stays
    execute(cfg)
    assert not (cfg.run_dir / ".metrics.csv.ab12cd_9.fbo-tmp").exists() and (cfg.run_dir / ".notes").exists()
    assert (cfg.run_dir / ".metrics.csv.ab12cd_9").exists()
    empty = tmp_path / "out" / "hyperrep" / "fednest" / "digits-iid-s0-0000000000"
    empty.mkdir(parents=True)
    (empty / ".lock").write_bytes(LOCK_TOKEN)  # the lock of a killed run, as fbo writes it
    (tmp_path / "out" / "compare" / "x").mkdir(parents=True)
    (tmp_path / "out" / "compare" / "x" / ".curves.png.q1w2e3r4.fbo-tmp.png").write_bytes(b"")
    held = cfg.run_dir / ".lock"
    fd = os.open(held, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a run in progress: its lock stays
    try:
        r = runner.invoke(app, ["clean", "--out-dir", str(tmp_path / "out"), "--dry-run"])
        assert r.exit_code == 0 and "would remove" in r.stdout and empty.exists()
        r = runner.invoke(app, ["clean", "--out-dir", str(tmp_path / "out")])  # lists only
        assert r.exit_code == 0 and "would remove" in r.stdout and "--yes" in r.stdout and empty.exists()
        r = runner.invoke(app, ["clean", "--out-dir", str(tmp_path / "out"), "--yes"])
        assert r.exit_code == 0, r.output
    finally:
        os.close(fd)
    assert not empty.exists() and not (tmp_path / "out" / "compare" / "x").exists()
    assert held.exists() and (cfg.run_dir / "summary.json").is_file()
    assert "removed" in r.stdout and str(empty) in r.stdout


@pytest.mark.parametrize("chosen", ["5", "{A: [1]}", "{A: {default: {outer_lr: [1, 2]}}}"])
def test_a_malformed_tuned_yaml_names_the_file(tmp_path, chosen):
    p = _spec(tmp_path / "s.yaml", "tiny")
    (tmp_path / "out" / "compare" / "tiny").mkdir(parents=True)
    (tmp_path / "out" / "compare" / "tiny" / "tuned.yaml").write_text(f"chosen: {chosen}\n")
    r = runner.invoke(app, ["compare", str(p), "--out-dir", str(tmp_path / "out")])
    flat = r.output.replace("\n", "")
    assert r.exit_code == 2 and ("uned.yaml: 'chosen'" in flat or "uned.yaml: chosen" in flat), r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("args, field", [(["--seeds", "99999999999999999999"], "seeds"), ([], "x_also")])
def test_bad_grid_input_fails_before_any_run(tmp_path, args, field):
    p = _spec(tmp_path / "s.yaml", "tiny")
    if field == "x_also":  # x_also given as a word in the spec, not a list
        p.write_text(p.read_text() + "x_also: iterations\n")
    r = runner.invoke(app, ["compare", str(p), "--out-dir", str(tmp_path / "out"), *args])
    assert fails_with(r, "bad_spec", field=field, path=str(p)) and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("order", ["first", "last"])
def test_a_failing_setting_fails_the_grid_the_same_wherever_it_stands(tmp_path, order):
    bad = '{name: "too many clients", set: {clients: 5000}}'
    good = '{name: ok, set: {}}'
    settings = f"[{bad}, {good}]" if order == "first" else f"[{good}, {bad}]"
    p = _spec(tmp_path / "s.yaml", "grid")
    p.write_text(p.read_text() + f"settings: {settings}\n")
    r = runner.invoke(app, ["compare", str(p), "--out-dir", str(tmp_path / "out")])
    assert fails_with(r, "bad_value", field="clients", value=5000) and "Traceback" not in r.output, r.output
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*") if p.name != ".lock") \
        if (tmp_path / "out").exists() else True


@pytest.mark.parametrize("download", ["true", "false"])
def test_a_missing_dataset_leaves_no_folder_behind(tmp_path, monkeypatch, download):
    import urllib.error

    import torchvision.datasets.mnist as tv

    def offline(*a, **k):  # the download fails as it does without network
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(tv, "download_and_extract_archive", offline)
    data = tmp_path / "data"
    data.mkdir()
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "mnist", "--rounds", "2",
                            "--data-dir", str(data), "--out-dir", str(tmp_path / "out"), "--set",
                            f"download={download}"])
    assert fails_with(r, "not_found", field="dataset", value="mnist"), r.output
    assert list(data.iterdir()) == [] and not any((tmp_path / "out").rglob("*"))


def test_two_settings_with_the_same_values_are_refused(tmp_path):
    p = _spec(tmp_path / "s.yaml", "dup")
    p.write_text(p.read_text() + "settings: [{name: one, set: {tau: 1}}, {name: two, set: {tau: 1}}]\n")
    r = runner.invoke(app, ["compare", str(p), "--out-dir", str(tmp_path / "out")])
    assert fails_with(r, "bad_spec", field="settings", value="two"), r.output  # the same runs as 'one'
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cmd", ["compare", "run"])
def test_a_path_component_too_long_for_the_file_system_is_bad_input(tmp_path, cmd):
    out = str(tmp_path / ("d" * 300))
    args = ["compare", str(_spec(tmp_path / "s.yaml", "long"))] if cmd == "compare" else \
        ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "2"]
    r = runner.invoke(app, [*args, "--out-dir", out])
    assert r.exit_code == 2 and "longer than the 255 bytes" in " ".join(r.output.split()), r.output


def test_clean_removes_nothing_fbo_did_not_make(tmp_path):
    h = tmp_path / "h"  # a folder fbo did not make: refused, nothing removed
    h.mkdir()
    (h / ".bashrc").write_text("x")
    (h / ".lock").write_text("")
    (h / "empty").mkdir()
    r = runner.invoke(app, ["clean", "--out-dir", str(h), "--yes"])
    assert fails_with(r, "not_fbos", path=str(h)), r.output
    assert (h / ".bashrc").read_text() == "x" and (h / ".lock").exists() and (h / "empty").is_dir()
    # inside a root fbo made: dotfiles, empty folders of the user's, and anything behind a link stay
    cfg = _cfg(tmp_path / "out")
    execute(cfg)
    root = tmp_path / "out"
    assert (root / ".fbo-results").is_file()
    (root / ".gitignore").write_text("*\n")
    (root / "mine").mkdir()
    (h / ".metrics.csv.abcdefgh").write_text("theirs")  # looks like a temp file, but behind a link
    (root / "hyperrep" / "linked").symlink_to(h)
    (cfg.run_dir / ".lock.backup").write_text("")
    r = runner.invoke(app, ["clean", "--out-dir", str(root), "--yes"])
    assert r.exit_code == 0, r.output
    assert (root / ".gitignore").exists() and (root / "mine").is_dir() and (h / ".metrics.csv.abcdefgh").exists()
    assert (cfg.run_dir / ".lock.backup").exists() and (cfg.run_dir / "summary.json").is_file()


def test_a_linked_run_directory_keeps_the_targets_files(tmp_path):
    from fbo_cli.runs.rundir import remove_temp_files

    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / ".metrics.csv.abcdefgh").write_text("theirs")
    (tmp_path / "run").symlink_to(target)
    remove_temp_files(tmp_path / "run")
    assert (target / ".metrics.csv.abcdefgh").exists()


def test_a_failed_checkpoint_write_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    import errno

    import fbo_cli.runs.checkpoint as rn

    cfg = _cfg(tmp_path / "out", keep_checkpoint=False)
    real, calls = rn.atomic_write, []

    def full_disk(path, data):
        if str(path).endswith(CHECKPOINT):
            calls.append(path)
            if len(calls) > 1:  # the first checkpoint is written; the disk is full at the second
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(rn, "atomic_write", full_disk)
    with pytest.raises(OSError):
        execute(cfg)
    good = torch.load(cfg.run_dir / CHECKPOINT, weights_only=True)
    assert good["ledger"]["iterations"] == 2  # the last good checkpoint stays
    monkeypatch.setattr(rn, "atomic_write", real)
    s = execute(cfg)
    assert s["status"] == "done" and s.get("resumed_from_iteration") == 2


@pytest.mark.parametrize("cmd", ["compare", "tune"])
def test_a_full_disk_ends_with_a_message_not_a_traceback(tmp_path, monkeypatch, cmd):
    import errno

    import fbo_cli.files as res  # the one writer

    p = tmp_path / "s.yaml"
    p.write_text("name: full\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: A, algo: aggitd, tune: {outer_lr: "
                 "[0.01, 0.1]}}]\nbase: {dataset: digits, clients: 4, participation: 0.5, rounds: 4, threads: 1}\n"
                 "tune: {seeds: [100], rounds: 2}\n")  # shorter than the budget: tune checks the ranking too

    real, calls = res._umask, []

    def full():
        calls.append(1)
        if len(calls) > 4:  # the disk fills up during the first run
            raise OSError(errno.ENOSPC, "No space left on device")
        return real()

    monkeypatch.setattr(res, "_umask", full)  # an atomic write fails after writing its temporary file
    r = runner.invoke(app, [cmd, str(p), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 1 and "No space left on device" in r.output, r.output
    assert not isinstance(r.exception, OSError) and "Traceback" not in r.output
    assert not [f for f in (tmp_path / "out").rglob(".*.*") if f.name != ".lock"]  # no temporary file stays


def test_a_second_ctrl_c_stops_inside_a_long_outer_iteration(tmp_path, monkeypatch):
    import os
    import signal

    from fbo_cli.algorithms.aggitd import AggITD
    from fbo_cli.runs.runner import Interrupted

    cfg = _cfg(tmp_path / "out", checkpoint_every=1, max_iters=50)
    real, calls = AggITD.step, []

    def step(self):
        calls.append(1)
        if len(calls) == 3:  # a long iteration: Ctrl-C twice inside it
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return real(self)

    monkeypatch.setattr(AggITD, "step", step)
    with pytest.raises(Interrupted, match="stopped inside outer iteration 3"):
        execute(cfg)
    ck = torch.load(cfg.run_dir / CHECKPOINT, weights_only=True)
    assert ck["ledger"]["iterations"] == 2  # the last whole iteration's checkpoint, not a half-updated state


def test_a_run_directory_whose_run_log_cannot_be_opened_is_bad_input(tmp_path, monkeypatch):
    """A rerun into an existing run directory we may not write to (root ignores chmod, so the open is denied
    here): exit 2 on an ``unwritable`` error naming run.log, not a traceback or a run without its log."""
    import errno

    import fbo_cli.runs.loop as loop

    args = ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "4", "--set", "clients=4",
            "--out-dir", str(tmp_path / "out"), "--quiet"]
    assert runner.invoke(app, args).exit_code == 0
    run_dir = next((tmp_path / "out").glob("hyperrep/aggitd/*"))
    (run_dir / "summary.json").unlink()  # not finished: the rerun opens its log

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(loop, "LogFile", denied)
    r = runner.invoke(app, args)
    assert fails_with(r, "unwritable", field="permission", path=str(run_dir / "run.log")), r.output
    assert (run_dir / "metrics.csv").is_file() and not (run_dir / "summary.json").exists()
