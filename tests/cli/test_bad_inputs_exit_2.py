"""The remaining bad inputs are exit 2 with a message, and the smaller items."""

import errno

import pytest
from cli_helpers import error_of, fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.config import coerce, load_yaml

runner = CliRunner()


@pytest.mark.parametrize("word", ["no", "on", "off", "yes", "n"])
def test_yaml_1_1_boolean_words_are_folder_names(tmp_path, monkeypatch, word):
    assert load_yaml(f"out_dir: {word}\nx: true\ny: False\n", "t") == {"out_dir": word, "x": True, "y": False}
    assert coerce("download", word, bool) is (word in ("on", "yes"))  # a bool key still reads them
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--out-dir", word,
                            "--data-dir", word, "--dry-run"])
    assert r.exit_code == 0 and f"run directory {word}/hyperrep" in r.output, r.output


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8))


@pytest.mark.parametrize("text, kind, field", [(BOMB, "bad_yaml", "aliases"),
                                               ("[" * 20000 + "]" * 20000, "bad_yaml", "depth"),
                                               ("\x00\x01 {{ :", "bad_yaml", "syntax"),
                                               ("cases: 5\n", "bad_spec", "cases"),
                                               ("- 1\n", "bad_spec", "mapping"),
                                               ("cases: [{name: a}]\nreference: b\n", "bad_spec", "reference")])
def test_bench_cases_that_are_not_a_cases_file_are_exit_2(tmp_path, text, kind, field):
    f = tmp_path / "cases.yaml"
    f.write_text(text)
    r = runner.invoke(app, ["bench", "--cases", str(f)])
    assert fails_with(r, kind, field=field, path=str(f)) and "Traceback" not in r.output, r.output


SPEC = ("name: s55\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: A, algo: aggitd}]\n"
        "base: {dataset: digits, clients: 4, rounds: 2}\n")


@pytest.mark.parametrize("added, field", [
    ("[{setting: default, algorithms: [A], seeds: [%s]}]" % ", ".join(map(str, range(1, 1_502))), "added.seeds"),
    ("[{setting: default, algorithms: [A], seeds: [1]}, {setting: default, algorithms: [A], seeds: [2]}]",
     "added.setting")], ids=["1501 seeds", "a setting twice"])
def test_a_settled_yaml_cannot_carry_more_seeds_than_a_spec_may(tmp_path, added, field):
    import time

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    (tmp_path / "out" / "compare" / "s55").mkdir(parents=True)
    (tmp_path / "out" / "compare" / "s55" / "settled.yaml").write_text(f"cap: 10\nadded: {added}\n")
    t = time.monotonic()
    r = runner.invoke(app, ["compare", str(spec), "--dry-run", "--out-dir", str(tmp_path / "out")])
    settled = tmp_path / "out" / "compare" / "s55" / "settled.yaml"
    assert fails_with(r, "bad_spec", field=field, path=str(settled)), r.output
    assert time.monotonic() - t < 10


@pytest.mark.parametrize("args, kind, field", [(["aggitd-fig2", "--out", "FILE"], "unwritable", "blocked"),
                                               (["aggitd-fig2", "--out", "/proc/x"], "unwritable", None),
                                               (["zohfl-fig1", "mnist", "--seed", "-1"], "bad_value", "--seed"),
                                               (["zohfl-fig1", "mnist", "--seed", "99999999999999999999"], "bad_value",
                                                "--seed")])
def test_figure_with_a_bad_out_or_seed_is_exit_2(tmp_path, args, kind, field):
    (tmp_path / "FILE").write_text("mine")
    args = [str(tmp_path / a) if a == "FILE" else a for a in args]
    r = runner.invoke(app, ["figure", *args] + ([] if "--out" in args else ["--out", str(tmp_path / "o")]))
    e = error_of(r)
    assert fails_with(r, kind) and "Traceback" not in r.output, r.output
    assert field is None or field in e.field.split("/"), e.field  # the seed: the option named with its peers
    assert "--out" not in args or e.path == args[args.index("--out") + 1]
    assert (tmp_path / "FILE").read_text() == "mine" and not (tmp_path / "o").exists()


@pytest.mark.parametrize("main, kind, value", [("raise SystemExit(3)\n", "failed", 3),
                                               ("import sys, yaml\nout = sys.argv[sys.argv.index('--output') + 1]\n"
                                                "yaml.safe_dump({'round': [10]}, open(out, 'w'))\n", "failed",
                                                "KeyError"),
                                               (None, "unwritable", None)])
def test_witness_when_the_code_fails_or_its_log_is_short_or_out_dir_unwritable_is_exit_2(tmp_path, monkeypatch,
                                                                                         main, kind, value):
    import fbo_cli.evidence.witness as w

    # the driver without its torch set-up (seconds to import): it runs main_hr.py as the real one does
    monkeypatch.setattr(w, "DRIVER", "import runpy, sys\nsys.argv = ['main_hr.py', *sys.argv[1:]]\n"
                                     "runpy.run_path('main_hr.py', run_name='__main__')\n")
    co, raw = tmp_path / "FedNest", tmp_path / "raw"
    (co / "core").mkdir(parents=True)
    (co / "core" / "test.py").write_text("def test_img(net, data, args):\n    return 0, 0\n")
    (co / "main_hr.py").write_text(main or "")
    raw.mkdir()
    (raw / "train-images-idx3-ubyte").write_text("")
    (tmp_path / "FILE").write_text("mine")
    out = tmp_path / ("FILE" if main is None else "out")
    r = runner.invoke(app, ["witness", "fednest", "--checkout", str(co), "--mnist-raw", str(raw), "--seeds", "0",
                            "--settings", "iid-tau1", "--rounds", "10", "--out-dir", str(out)])
    assert fails_with(r, kind, value=value) and "Traceback" not in r.output, r.output
    assert not list(tmp_path.glob("out/witness/*/*"))


def test_the_report_names_a_run_whose_metrics_fail_their_hash_as_tampered(tmp_path):
    from fbo_cli.evidence.report.sections import build_section
    from fbo_cli.grids.spec import load_spec
    from fbo_cli.runs.runner import execute

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.replace("seeds: [0]", "seeds: [0, 1]"))
    ev = tmp_path / "ev"
    for c in load_spec(spec, {"out_dir": str(ev)}).cells:  # the runs, without compare's tables and figures
        execute(c.cfg)
    m = sorted(ev.glob("hyperrep/aggitd/*/metrics.csv"))[0]
    m.write_text(m.read_text().replace("0.", "0.9", 1))  # an edited number, the hash left as it was
    (tmp_path / "work").mkdir()
    sec = build_section(str(spec), ev, tmp_path / "work", None)
    assert len(sec.missing) == 1 and "tampered or damaged: metrics.csv does not match the hash" in sec.missing[0]


@pytest.mark.parametrize("cmd", [["compare", "{p}"], ["run", "--config", "{p}", "hyperrep", "--algo", "aggitd"]])
def test_a_spec_path_component_over_255_bytes_is_exit_2(tmp_path, cmd):
    p = str(tmp_path / ("s" * 300) / "x.yaml")
    r = runner.invoke(app, [a.replace("{p}", p) for a in cmd])
    assert fails_with(r, "unreadable", value=errno.ENAMETOOLONG), r.output


def test_an_errors_kind_and_fields_survive_a_worker_process_and_a_rewording():
    """A worker's UsageError comes back pickled (processes, Ray): its kind and fields come with it; a caller that
    adds where it happened keeps them."""
    import pickle

    from fbo_cli.errors import UsageError

    e = pickle.loads(pickle.dumps(UsageError("m", kind="bad_value", field="tau", path="/x", value=3)))
    assert (str(e), e.kind, e.field, e.path, e.value) == ("m", "bad_value", "tau", "/x", 3)
    w = e.reworded(f"--out: {e}")
    assert (str(w), w.kind, w.field, w.path, w.value) == ("--out: m", "bad_value", "tau", "/x", 3)
