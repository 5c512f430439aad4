"""One writer that never writes over what is not a regular file (items 1 and 7), and the runaway
inputs of item 7. The scratch folders' tokens (item 2) are in tests/runs/test_ownership.py."""

import errno
import os
import stat

import pytest
from cli_helpers import error_of, fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.errors import UsageError
from fbo_cli.files import atomic_write, check_target

runner = CliRunner()
SPEC = "experiments/quick_mnist5k.yaml"


def _said(r) -> str:
    return " ".join((r.output or "").split())


def _report(tmp_path, *args):
    (tmp_path / "from").mkdir(exist_ok=True)
    return runner.invoke(app, ["report", "--spec", SPEC, "--from", str(tmp_path / "from"), *args])


def test_report_md_onto_a_fifo_is_exit_2_and_leaves_it_a_fifo_with_nothing_beside_it(tmp_path):
    """`fbo report --md /dev/null` replaced the system's /dev/null; a FIFO stands in for the device here."""
    fifo = tmp_path / "dev" / "null"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    r = _report(tmp_path, "--md", str(fifo), "--html", str(tmp_path / "r.html"))
    assert fails_with(r, "unwritable", field="not_regular", path=str(fifo)), r.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(fifo.parent) == ["null"]
    assert sorted(os.listdir(tmp_path)) == ["dev", "from"]  # no figures folder, no page beside anything


@pytest.mark.parametrize("option", ["--md", "--html"])
def test_report_onto_a_symlink_is_exit_2_and_its_target_is_untouched(tmp_path, option):
    target = tmp_path / "precious.txt"
    target.write_text("mine")
    link = tmp_path / "out" / "report.x"
    link.parent.mkdir()
    link.symlink_to(target)
    r = _report(tmp_path, option, str(link))
    assert fails_with(r, "unwritable", field="link", path=str(link)), r.output
    assert link.is_symlink() and target.read_text() == "mine" and os.listdir(link.parent) == ["report.x"]


@pytest.mark.parametrize("md", ["", "{tmp}"])
def test_report_md_empty_or_a_folder_is_exit_2(tmp_path, md):
    r = _report(tmp_path, "--md", md.replace("{tmp}", str(tmp_path)), "--html", str(tmp_path / "r.html"))
    assert fails_with(r, "unwritable") and "Traceback" not in r.output, r.output
    assert not (tmp_path / "r.html").exists()


def test_report_html_onto_a_kernel_file_is_exit_2():
    r = runner.invoke(app, ["report", "--spec", SPEC, "--from", ".", "--html", "/proc/1/mem"])
    assert fails_with(r, "unwritable", path="/proc/1/mem") and "Traceback" not in r.output, r.output


def test_the_one_writer_refuses_links_and_non_regular_files_and_writes_regular_ones(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "target").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name, field in (("fifo", "not_regular"), ("link", "link"), ("dangling", "link"), (".", "not_regular")):
        with pytest.raises(UsageError) as e:
            atomic_write(tmp_path / name, "x")
        assert (e.value.kind, e.value.field) == ("unwritable", field)
    assert (tmp_path / "target").read_text() == "mine" and not (tmp_path / "nowhere").exists()
    atomic_write(tmp_path / "target", "new")  # a regular file is replaced
    assert (tmp_path / "target").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["dangling", "fifo", "link", "target"]  # no temporary file left
    with pytest.raises(UsageError) as e:
        check_target("/proc/self/comm")
    assert (e.value.kind, e.value.field, e.value.path) == ("unwritable", "kernel", "/proc/self/comm")


def test_a_figure_written_by_matplotlib_goes_through_the_same_check(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fbo_cli.grids.plots import save
    from fbo_cli.runs.rundir import save_figure

    (tmp_path / "mine.png").write_text("mine")
    (tmp_path / "fig.png").symlink_to(tmp_path / "mine.png")
    os.mkfifo(tmp_path / "curves.svg")
    with pytest.raises(UsageError) as e:
        save_figure(plt.figure(), tmp_path / "fig.png")
    assert (e.value.field, e.value.path) == ("link", str(tmp_path / "fig.png"))
    with pytest.raises(UsageError) as e:
        save(plt.figure(), tmp_path / "curves.png", formats=("svg",))
    assert (e.value.field, e.value.path) == ("not_regular", str(tmp_path / "curves.svg"))
    assert (tmp_path / "mine.png").read_text() == "mine" and stat.S_ISFIFO(os.lstat(tmp_path / "curves.svg").st_mode)
    save_figure(plt.figure(), tmp_path / "ok.png")
    assert (tmp_path / "ok.png").read_bytes()[:4] == b"\x89PNG"


LONG = "x" * 300


@pytest.mark.parametrize("args", [
    ["check", "--from", "{L}"], ["check", "{L}/s.yaml"], ["report", "--from", "{L}"],
    ["report", "--spec", "{L}/s.yaml", "--from", "."],
    ["report", "--html", "{L}/r.html", "--spec", SPEC, "--from", "."],
    ["report", "--collect", "{L}", "--from", "."], ["clean", "--out-dir", "{L}"],
    ["fetch", "mnist", "--data-dir", "{L}"], ["export", "{L}"], ["bench", "--cases", "{L}"]])
def test_a_300_byte_path_component_is_exit_2_in_every_option(tmp_path, args):
    r = runner.invoke(app, [a.replace("{L}", str(tmp_path / LONG)) for a in args])
    assert r.exit_code == 2 and error_of(r).value == errno.ENAMETOOLONG and "Traceback" not in r.output, r.output


def test_diagnose_truncation_refuses_a_runaway_round_count():
    r = runner.invoke(app, ["diagnose", "truncation", "--rounds", str(10**23)])
    assert fails_with(r, "bad_value", value=(10**23, 1000)) and "--rounds" in error_of(r).field, r.output


def test_report_from_a_root_with_a_dangling_link_and_deep_folders_does_not_walk_or_die(tmp_path, monkeypatch):
    from fbo_cli.grids import plot_reuse

    root = tmp_path / "from"
    deep = root / "a" / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)
    (deep / "deep.txt").write_text("x")
    (root / "a" / "gone").symlink_to(tmp_path / "nowhere")
    (root / "a" / "b" / "f.csv").write_text("x")
    # the dangling link is itself (not fatal, never followed); deep.txt lies below a run's files: not walked to
    assert [p for p, *_ in plot_reuse._stats(root)] == [str(root / "a" / "b" / "f.csv"), str(root / "a" / "gone")]
    monkeypatch.setattr(plot_reuse, "STATS_MAX", 0)  # a root holding more than runs (`--from /`): not walked on
    assert plot_reuse._stats(root) == []
    r = _report(tmp_path, "--md", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html"))
    assert fails_with(r, "not_found", field="runs", path=str(root)), r.output


def test_a_permission_error_anywhere_in_a_command_is_exit_2_naming_the_file():
    """`chattr +i` on a run folder: PermissionError (EPERM) deep in the runner was a traceback."""
    import typer

    from fbo_cli.cli.common import path_errors

    def boom():
        raise PermissionError(errno.EPERM, "Operation not permitted", "/r/hyperrep/aggitd/x/summary.json")

    t = typer.Typer()
    t.command()(path_errors(boom))
    r = runner.invoke(t, [])
    assert fails_with(r, "bad_path", path="/r/hyperrep/aggitd/x/summary.json", value=errno.EPERM), r.output
    assert "Traceback" not in r.output


def test_a_dangling_link_in_place_of_a_run_folder_is_named_as_such(tmp_path):
    from fbo_cli.runs.config import resolve

    cfg = resolve("hyperrep", "aggitd", {"dataset": "digits", "clients": 4, "participation": 0.5, "rounds": 2,
                                         "out_dir": str(tmp_path)})
    cfg.run_dir.parent.mkdir(parents=True)
    cfg.run_dir.symlink_to(tmp_path / "nowhere")
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "2", "--set",
                            "clients=4", "--set", "participation=0.5", "--out-dir", str(tmp_path), "--quiet"])
    assert fails_with(r, "unwritable", field="dangling"), r.output
    assert cfg.run_dir.is_symlink() and not (tmp_path / "nowhere").exists()


def test_compare_out_dir_null_is_a_folder_named_null(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("name: nul\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: A, algo: aggitd}]\n"
                                     "base: {dataset: digits, clients: 4, participation: 0.5, rounds: 2}\n")
    r = runner.invoke(app, ["compare", "s.yaml", "--out-dir", "null", "--dry-run"])
    assert r.exit_code == 0 and "1 run(s) to do" in _said(r), r.output


def test_a_dirichlet_partition_at_a_tiny_alpha_warns_nothing_and_deals_every_example():
    import warnings

    import numpy as np

    from fbo_cli.data.partition import dirichlet

    labels = np.repeat(np.arange(10), 50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value" RuntimeWarning fails the test
        parts = dirichlet(labels, 4, np.random.RandomState(0), alpha=1e-4)
    assert sorted(np.concatenate(parts).tolist()) == list(range(500))
    a, b = dirichlet(labels, 4, np.random.RandomState(1), 0.5), dirichlet(labels, 4, np.random.RandomState(1), 0.5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_fifo_in_place_of_metrics_csv_reads_as_unreadable_without_blocking(tmp_path):
    import threading

    from fbo_cli.runs.rundir import read_metrics

    os.mkfifo(tmp_path / "metrics.csv")
    got = []
    t = threading.Thread(target=lambda: got.append(read_metrics(tmp_path / "metrics.csv")), daemon=True)
    t.start()
    t.join(5)  # before: the read blocked until a writer opened the FIFO
    assert got == [None]
