"""fbo tune stops on a signal that comes between runs, the last bad inputs are
exit 2, a spec's keys are checked and applied as --set applies them, your own folder works, and the
estimates a user can plan by."""

import os
import signal

import pytest
from cli_helpers import error_of, fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app

runner = CliRunner()


def test_a_signal_after_the_loops_last_look_still_stops_the_command():
    """SIGTERM while a run (or a batch) writes its summaries, after its loop last checked the flag: the
    handler outside the run gets it (fbo tune then ends with exit 130), not the next run's loop nor nobody."""
    from fbo_cli.runs.loop import STOP
    from fbo_cli.runs.loop import Stop as _Stop

    def outside(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, outside)
    try:
        with pytest.raises(KeyboardInterrupt):
            with _Stop():
                os.kill(os.getpid(), signal.SIGTERM)  # the run's handler: a flag, nobody looks at it again
        assert not STOP.is_set()
        with _Stop():  # a flag the run answered (Interrupted, or set by Ray's cancel without a signal): no more
            STOP.set()
        assert signal.getsignal(signal.SIGTERM) is outside
    finally:
        signal.signal(signal.SIGTERM, old)


def test_reproduce_without_specs_or_with_absurd_jobs_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no experiments/ here
    for args in (["reproduce", "--dry-run"], ["reproduce", "--paper", "aggitd", "--dry-run"], ["cost"]):
        r = runner.invoke(app, args)
        assert fails_with(r, "not_found", field="specs", path=str(tmp_path / "experiments")), (args, r.output)
    r = runner.invoke(app, ["reproduce", "--dry-run", "--jobs", "100000000"])
    assert r.exit_code == 2 and error_of(r).param.name == "jobs", r.output  # click's own: a bad option


def test_a_full_disk_under_a_library_or_the_run_log_is_the_message_not_a_traceback(tmp_path, capfd):
    import errno
    import logging

    import typer

    from fbo_cli.cli.common import user_errors
    from fbo_cli.runs.loop import run_log as _run_log

    with pytest.raises(typer.Exit) as e, user_errors():
        try:  # matplotlib's PDF writer on a full disk: an AttributeError raised while handling ENOSPC
            raise OSError(errno.ENOSPC, "No space left on device", "tuning.pdf")
        except OSError:
            raise AttributeError("'Stream' object has no attribute 'pos'")  # noqa: B904
    assert e.value.exit_code == 1 and "No space left on device (tuning.pdf)" in capfd.readouterr().err
    with pytest.raises(AttributeError), user_errors():  # a bug stays a bug
        raise AttributeError("x")

    class Full:
        def write(self, s):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

    with pytest.raises(OSError, match="No space"), _run_log(tmp_path, None) as note:
        logging.getLogger(f"fbo.run.{tmp_path.name}").handlers[-1].stream = Full()
        note("start")  # the run fails as at any other write, no "--- Logging error ---" traceback
    assert "Logging error" not in capfd.readouterr().err


SPEC52 = ("name: s52\ntask: hyperrep\nseeds: [0]\nbase: {dataset: digits, clients: 4, rounds: 2}\n"
          "algorithms: [{name: A, algo: aggitd, tune: {TUNE: [0.1, 0.2]}}, {name: B, algo: fedbio}]\n")


@pytest.mark.parametrize("block", ["", "tune: {seeds: [100], rounds: 2}\n"])
def test_a_tune_grid_key_the_algorithm_lacks_is_an_error_at_dry_run(tmp_path, block):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC52.replace("TUNE", "foo") + block)
    r = runner.invoke(app, ["compare", str(p), "--dry-run", "--out-dir", str(tmp_path / "o")])
    assert fails_with(r, "unknown", field="key", path=str(p), value="foo"), r.output  # the grid's key, named


def test_a_tied_grid_key_is_checked_part_by_part(tmp_path):
    p = tmp_path / "s.yaml"  # "a,b": both set to each value (the fedbio specs' inner_lr,aux_lr)
    p.write_text(SPEC52.replace("TUNE", '"inner_lr, outer_lr"'))
    r = runner.invoke(app, ["compare", str(p), "--dry-run", "--out-dir", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    p.write_text(SPEC52.replace("TUNE", '"inner_lr,foo"'))
    r = runner.invoke(app, ["compare", str(p), "--dry-run", "--out-dir", str(tmp_path / "o")])
    assert fails_with(r, "unknown", field="key", path=str(p), value="foo"), r.output  # the grid's key, named


def test_a_setting_key_is_applied_where_the_algorithm_has_it_as_set_does(tmp_path):
    from fbo_cli.grids.spec import load_spec

    p = tmp_path / "s.yaml"
    p.write_text(SPEC52.replace("TUNE", "outer_lr") + "settings: [{name: one}, {name: t5, set: {tau: 5}}]\n"
                 "tune: {seeds: [100], rounds: 2}\n")  # fedbio has no tau; aggitd has
    exp = load_spec(p, {"out_dir": str(tmp_path / "o")})
    assert exp.setting_ignored == {"one": {}, "t5": {"tau": ["B"]}}
    tau = {(c.algorithm, c.setting): getattr(c.cfg.hp, "tau", None) for c in exp.cells}
    assert tau[("A", "t5")] == 5 and tau[("A", "one")] == 1 and ("B", "t5") in tau
    r = runner.invoke(app, ["tune", str(p), "--dry-run", "--out-dir", str(tmp_path / "o")])
    assert r.exit_code == 0 and "setting 't5': tau: applies to A; ignored by B (no such key)" in r.output, r.output
    p.write_text(SPEC52.replace("TUNE", "outer_lr") + "settings: [{name: t5, set: {nokey: 5}}]\n")
    r = runner.invoke(app, ["compare", str(p), "--dry-run", "--out-dir", str(tmp_path / "o")])
    assert fails_with(r, "unknown", field="key", path=str(p), value="nokey"), r.output


def test_a_dataset_make_setup_put_in_the_checkout_is_found_from_a_folder_of_ones_own(tmp_path, monkeypatch):
    from pathlib import Path

    import fbo_cli.data.sources as src

    install = tmp_path / "checkout" / "data"
    (install / "MNIST" / "raw").mkdir(parents=True)
    monkeypatch.setattr(src, "INSTALL_DATA", install)
    monkeypatch.chdir(tmp_path)  # a folder of one's own, no data/ here
    assert src.data_home("mnist", Path("data")) == install
    assert src.data_home("mnist", Path("elsewhere")) == Path("elsewhere")  # --data-dir is what it says
    assert src.data_home("cifar10", Path("data")) == Path("data")  # not in the checkout either: here (downloads)
    (tmp_path / "data" / "MNIST").mkdir(parents=True)
    assert src.data_home("mnist", Path("data")) == Path("data")  # one's own copy first


def test_list_says_where_it_looked_for_specs_and_report_spec_reads_your_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["list"])
    assert r.exit_code == 0 and f"none in {tmp_path / 'experiments'}" in "".join(r.output.split("\n")), r.output
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "s.yaml").write_text(SPEC52.replace("TUNE", "outer_lr"))
    r = runner.invoke(app, ["list"])
    assert r.exit_code == 0 and "experiments/s.yaml" in r.output and str(tmp_path / "experiments") in r.output
    r = runner.invoke(app, ["report", "--spec", "experiments/s.yaml"])  # your own runs: ./results, not the evidence
    assert fails_with(r, "not_found", field="--from", path="results"), r.output


def test_wall_time_counts_the_load_now():
    from fbo_cli.runs.cost import parallel

    assert parallel(2, (0.0, 2)) == (2.0, "with 2 jobs")  # idle: the jobs run side by side
    p, words = parallel(1, (3.0, 2))  # the machine: a load of 3 on 2 cores
    assert p == 0.5 and words == "with 1 job on 0 idle of 2 cores (load 3.0 now)"
    assert parallel(8, (0.0, 2))[0] == 2.0  # more jobs than cores: the cores


def test_a_run_over_an_hour_at_the_load_now_says_so_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (200.0, 200.0, 200.0))
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "adafbio", "--dry-run"])  # its default 2,000 rounds
    assert r.exit_code == 0 and "this run is estimated at about" in r.output and "(load 200.0 now" in r.output, r.output
    p = tmp_path / "s.yaml"  # and in a grid: fbo compare (and tune) --dry-run name the longest run
    p.write_text("name: long\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: Ada, algo: adafbio}]\n")
    r = runner.invoke(app, ["compare", str(p), "--dry-run", "--out-dir", str(tmp_path / "o")])
    assert r.exit_code == 0 and "the longest run (Ada · default · seed 0: 2000 rounds) takes about" in " ".join(
        r.output.split()), r.output


def test_tune_dry_run_says_the_waves_and_the_load(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    p = tmp_path / "s.yaml"
    p.write_text(SPEC52.replace("TUNE", "outer_lr") + "tune: {seeds: [100], rounds: 2}\n")
    r = runner.invoke(app, ["tune", str(p), "--dry-run", "--out-dir", str(tmp_path / "o")])
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "waves run one after the other (at most 9)" in text and "(load 3.0 now)" in text, text


def test_fbo_run_stopped_after_its_loops_last_look_is_exit_130(tmp_path, monkeypatch):
    import fbo_cli.runs.loop as rn

    def late_signal(*a, **k):  # as if SIGTERM came during the last evaluation: re-delivered when the run ends
        raise KeyboardInterrupt

    monkeypatch.setattr(rn, "finish", late_signal)
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "2",
                            "--set", "clients=4", "--out-dir", str(tmp_path / "o")])
    assert r.exit_code == 130 and "interrupted" in r.output and "Aborted" not in r.output, r.output
