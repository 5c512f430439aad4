"""Bring your own method (issue 37): an algorithm from the user's own folder, runs that know which code
made them, defaults per task, one vocabulary, honest estimates, overrides named in the output."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.config import comparable, lookup, resolve

runner = CliRunner()

DECAY = textwrap.dedent('''
    from fbo_cli.algorithms.fednest import FedNest


    class DecayFedNest(FedNest):
        """FedNest with a decaying outer step."""

        label = "FedNest (decaying step)"

        def outer_lr(self) -> float:
            return self.hp.outer_lr / (1 + self.ledger.iterations)
''')

SPEC = """\
name: decay_vs_fednest
task: hyperrep
metric: test_acc
seeds: [0]
base: {dataset: digits, clients: 4, participation: 0.5, rounds: 30, eval_every: 1, threads: 1}
algorithms:
  - {name: FedNest, algo: fednest}
  - {name: Decay, algo: ./my_algos/decay.py:DecayFedNest}
"""


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh folder outside the package: a spec, and an algorithm file beside it."""
    (tmp_path / "my_algos").mkdir()
    (tmp_path / "my_algos" / "decay.py").write_text(DECAY)
    (tmp_path / "decay.yaml").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_compare_runs_a_user_algorithm_and_an_edit_makes_its_run_stale(folder):
    r = cli("compare", "decay.yaml")
    assert r.exit_code == 0, r.output
    d = next((folder / "results" / "hyperrep" / "DecayFedNest").iterdir())
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    assert cfg["algo"] == "DecayFedNest" and cfg["algo_source"] == f"{folder / 'my_algos' / 'decay.py'}:DecayFedNest"
    s = json.loads((d / "summary.json").read_text())
    code = s["code"]
    assert code["fbo"] and "decay.DecayFedNest" in code["algorithm"]
    assert "fbo_cli.algorithms.fednest.FedNest" in code["algorithm"] and "object" not in str(code["algorithm"])
    assert any(k.endswith("HyperRep") for k in code["task"])
    table = (folder / "results" / "compare" / "decay_vs_fednest" / "table.csv").read_text()
    assert "Decay" in table and "FedNest" in table
    # the decaying step makes another run than FedNest's
    fed = next((folder / "results" / "hyperrep" / "fednest").iterdir())
    assert (fed / "metrics.csv").read_text() != (d / "metrics.csv").read_text()

    r = cli("compare", "decay.yaml", "--dry-run")
    assert "nothing left to run" in r.output and "stale" not in r.output
    # fbo's own code changed since FedNest's run (a refactor): reported, not rerun
    fs = json.loads((fed / "summary.json").read_text())
    fs["code"]["algorithm"]["fbo_cli.algorithms.fednest.FedNest"] = "0" * 16
    (fed / "summary.json").write_text(json.dumps(fs))
    out = " ".join(cli("compare", "decay.yaml", "--dry-run").output.split())
    assert "nothing left to run" in out and "other code of fbo's built-in classes (algorithms.fednest.FedNest)" in out
    (folder / "my_algos" / "decay.py").write_text(DECAY.replace("(1 + self.ledger.iterations)",
                                                                "(1 + 2 * self.ledger.iterations)"))
    r = cli("compare", "decay.yaml", "--dry-run")
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "stale" in out and "DecayFedNest" in out and "1 run(s) to do" in out, out

    # the user says the edit does not touch the numbers: the code is in the run id, so the run of the code
    # before is adopted under the new id, and recorded; the old run stays
    r = cli("compare", "decay.yaml", "--accept-code-change")
    assert r.exit_code == 0, r.output
    new = next(e for e in (folder / "results" / "hyperrep" / "DecayFedNest").iterdir() if e != d)
    s = json.loads((new / "summary.json").read_text())
    assert s["code_accepted"][-1]["by"] == "--accept-code-change" and s["adopted_from"] == d.name
    assert (new / "metrics.csv").read_text() == (d / "metrics.csv").read_text()
    assert "nothing left to run" in cli("compare", "decay.yaml", "--dry-run").output
    d = new

    # a rerun from the run's config.yaml finds the class again, from another folder
    (folder / "elsewhere").mkdir()
    r = runner.invoke(app, ["run", "--config", str(d / "config.yaml"), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert str(d.name) in r.output


def test_a_grid_worker_in_another_process_imports_the_users_algorithm(folder):
    cfg = resolve("hyperrep", "./my_algos/decay.py:DecayFedNest", {"dataset": "digits"})
    assert cfg.algo == "DecayFedNest" and cfg.algo_ref.startswith("/")
    code = ("from fbo_cli.runs.config import resolve; import sys; "
            "c = resolve('hyperrep', sys.argv[1], {'dataset': 'digits'}); print(c.entry.cls.__name__, c.run_id)")
    out = subprocess.run([sys.executable, "-c", code, cfg.algo_ref], cwd="/", capture_output=True, text=True,
                         env={"PYTHONPATH": str(Path(__file__).parents[2]), "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["DecayFedNest", cfg.run_id], out.stderr


def test_an_algorithms_folder_beside_the_spec_and_entry_points(folder, monkeypatch):
    (folder / "algorithms").mkdir()
    (folder / "algorithms" / "decay.py").write_text(DECAY)
    (folder / "byname.yaml").write_text(SPEC.replace("./my_algos/decay.py:DecayFedNest", "DecayFedNest"))
    from fbo_cli.grids.spec import load_spec

    exp = load_spec(folder / "byname.yaml")
    assert {c.cfg.algo for c in exp.cells} == {"fednest", "DecayFedNest"}
    r = cli("list")
    assert "DecayFedNest" in r.output
    # an installed package's entry point (group fbo.algorithms)
    pkg = folder / "pkg" / "mydecay"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(DECAY)
    monkeypatch.syspath_prepend(str(folder / "pkg"))
    import fbo_cli.algorithms.external as ext

    monkeypatch.setattr(ext, "entry_points", lambda: {"my-decay": "mydecay:DecayFedNest"})
    name, entry, source = lookup("my-decay")
    assert name == "DecayFedNest" and source == "mydecay:DecayFedNest" and entry.cls.__name__ == "DecayFedNest"
    r = cli("show", "./my_algos/decay.py:DecayFedNest", "--task", "hyperrep")
    assert r.exit_code == 0 and "outer_lr_schedule" in r.output and "tau (= local_steps)" in r.output


def test_bad_user_algorithms_are_usage_errors(folder):
    own = "./my_algos/decay.py:FedNest"  # fbo's own class, imported there
    for ref, kind, field, value in (("./nope.py:X", "not_found", "algo", None),
                                    ("./my_algos/decay.py:Nope", "unknown", "class", "Nope"),
                                    (own, "bad_value", "algo", own)):
        r = cli("run", "hyperrep", "--algo", ref, "--dry-run")
        assert fails_with(r, kind, field=field, value=value), (ref, r.output)
    assert "name it 'fednest'" in " ".join(r.output.split())  # fbo's own class: the name to run it by


def test_staleness_rule_user_code_only_and_older_runs_are_not_stale():
    from fbo_cli.runs.identity import changes, code_identity, stale_reason

    cfg = resolve("hyperrep", "fednest", {"dataset": "digits"})
    now = code_identity(cfg)
    assert stale_reason(cfg, {"status": "done"}) is None  # made before code hashes: not stale
    drifted = {"code": {**now, "algorithm": {**now["algorithm"], "fbo_cli.algorithms.fednest.FedNest": "0"}}}
    assert stale_reason(cfg, drifted) is None and changes(cfg, drifted)[1] == ["fbo_cli.algorithms.fednest.FedNest"]
    user = {"code": {**now, "algorithm": {**now["algorithm"], "decay.DecayFedNest": "0"}}}
    assert "DecayFedNest" in stale_reason(cfg, user)


def test_outer_step_schedule_is_a_declared_hyperparameter_and_keeps_old_run_ids():
    from fbo_cli.algorithms.base import SCHEDULES

    base = resolve("hyperrep", "fednest", {"dataset": "digits"})
    assert "outer_lr_schedule" not in comparable(base.as_dict())["hp"]  # the committed runs keep their ids
    dec = resolve("hyperrep", "fednest", {"dataset": "digits", "outer_lr_schedule": "inverse_sqrt", "outer_lr_t0": 4})
    assert dec.run_id != base.run_id and comparable(dec.as_dict())["hp"]["outer_lr_schedule"] == "inverse_sqrt"
    assert SCHEDULES["inverse_sqrt"](12, 4.0) == pytest.approx(0.5)
    from fbo_cli.runs.runner import build

    b = build(dec)
    b.ledger.iterations = 12
    assert b.algo.outer_lr() == pytest.approx(0.005)
    with pytest.raises(Exception, match="outer_lr_schedule"):
        resolve("hyperrep", "fednest", {"outer_lr_schedule": "cosine"})


def test_defaults_per_task_and_fedbio_on_hyperrep_does_not_diverge(tmp_path):
    rep, clean = resolve("hyperrep", "fedbio"), resolve("hyperclean", "fedbio")
    assert (rep.hp.upper_lr, rep.hp.lower_lr, rep.hp.aux_lr, rep.run.clients) == (0.16, 0.05, 0.05, 10)
    assert clean.hp.upper_lr == 100.0  # hyper-cleaning keeps the paper's
    r = cli("show", "fedbio", "--task", "hyperrep")
    assert "its default on hyperrep; the paper's: 100.0" in " ".join(r.output.split())
    r = cli("run", "hyperrep", "--algo", "fedbio", "--rounds", "6", "--quiet", "--out-dir", tmp_path)
    assert r.exit_code == 0 and r.output.startswith("done"), r.output


def test_a_run_estimated_over_an_hour_says_so(monkeypatch):
    import fbo_cli.runs.cost as cost

    monkeypatch.setattr(cost, "estimate_cost", lambda cells, roots=None, **kw: (7200.0 * len(cells), 0))
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: the estimate unscaled
    r = cli("run", "hyperrep", "--algo", "adafbio", "--dry-run")
    assert r.exit_code == 0 and "estimated at about 2.0 h" in " ".join(r.output.split())
    assert resolve("hyperrep", "adafbio").run.clients == 10  # its hyperrep specs' clients, not 100


def test_common_names_and_set_applies_where_the_key_exists(folder):
    assert resolve("hyperrep", "fednest", {"local_steps": 3, "upper_lr": 0.02}).hp.tau == 3
    assert resolve("hyperrep", "adafbio", {"local_steps": 3}).hp.q == 3
    with pytest.raises(Exception, match="two values"):
        resolve("hyperrep", "fednest", {"local_steps": 3, "tau": 4})
    (folder / "mix.yaml").write_text(SPEC.replace("./my_algos/decay.py:DecayFedNest", "fedbio")
                                     .replace("name: Decay", "name: FedBiO"))
    from fbo_cli.grids.compare import collect, summarize, table_markdown
    from fbo_cli.grids.spec import load_spec

    exp = load_spec(folder / "mix.yaml", {"tau": 2, "rounds": 20}, seeds=[0])
    assert exp.ignored == {"tau": ["FedBiO"]}
    assert {c.algorithm: c.cfg.hp.__dict__.get("tau") for c in exp.cells} == {"FedNest": 2, "FedBiO": None}
    md = table_markdown(exp, summarize(exp, collect(exp)[0])[0])
    assert ("Overridden on the command line: --set tau=2 (ignored by FedBiO: no such key); --set rounds=20; "
            "--seeds 0") in md
    r = cli("compare", "mix.yaml", "--set", "nosuchkey=1", "--dry-run")
    assert fails_with(r, "unknown", field="key", value="nosuchkey"), r.output


def test_rows_that_are_the_same_runs_are_one_row(folder):
    (folder / "dup.yaml").write_text(SPEC.replace("./my_algos/decay.py:DecayFedNest", "fednest")
                                     .replace("{name: Decay, algo: fednest}",
                                              "{name: FedNest (tuned), algo: fednest, tune: {outer_lr: [0.01, 0.1]}}")
                                     + "tune: {seeds: [100], rounds: 10}\n")
    from fbo_cli.grids.compare import collect, summarize
    from fbo_cli.grids.spec import load_spec

    exp = load_spec(folder / "dup.yaml")
    table = summarize(exp, collect(exp)[0])[0]
    assert list(table.algorithm) == ["FedNest = FedNest (tuned)"]


def test_tune_dry_run_counts_what_a_tuning_may_add(folder):
    (folder / "t.yaml").write_text(SPEC.replace("{name: Decay, algo: ./my_algos/decay.py:DecayFedNest}",
                                                "{name: Decay, algo: ./my_algos/decay.py:DecayFedNest, "
                                                "tune: {outer_lr: [0.01, 0.1]}}")
                                   + "tune: {seeds: [100], rounds: 10}\n")
    from fbo_cli.grids.spec import load_spec
    from fbo_cli.grids.tune import CONFIRM_SEEDS, MAX_EXTENSIONS, RANKING_TOP, tune_cells, tune_spec, tuning_estimate
    from fbo_cli.grids.tune.rules import MARGIN_SEEDS

    exp = load_spec(folder / "t.yaml", use_tuned=False)
    ts = tune_spec(exp)
    cells = tune_cells(exp, ts, {})
    e = tuning_estimate(exp, ts, {}, cells, [c for c, _ in cells])
    assert e["grid"] == 2 and e["ranking"] == RANKING_TOP  # 10 tuning rounds < the 30 of the evaluation
    assert e["largest"] == 2 + MAX_EXTENSIONS + (2 + MAX_EXTENSIONS) * CONFIRM_SEEDS + MARGIN_SEEDS + RANKING_TOP
    assert e["grid"] < e["expected"] < e["largest"]
    r = cli("tune", "t.yaml", "--dry-run")
    out = " ".join(r.output.split())
    assert r.exit_code == 0 and f"at most {e['largest']} runs" in out and "start-up included" in out, out


def test_bundled_datasets_are_cached_as_tensors(tmp_path, monkeypatch):
    import torch

    from fbo_cli.data import sources

    monkeypatch.setenv("FBO_CACHE", str(tmp_path))
    monkeypatch.setattr(sources, "_CACHE", {})
    a = sources.load_dataset("digits")
    assert list((tmp_path / "datasets").glob("digits-*.pt"))
    monkeypatch.setattr(sources, "_CACHE", {})
    import sklearn.datasets

    monkeypatch.setattr(sklearn.datasets, "load_digits", lambda: 1 / 0)  # the second load is the tensor file's
    b = sources.load_dataset("digits")
    assert a is not b and torch.equal(a.X_train, b.X_train) and torch.equal(a.y_test, b.y_test)


def test_a_user_algorithm_resumes_bit_for_bit(folder, stop_after_checkpoint):
    import pandas as pd

    from fbo_cli.runs.runner import execute

    keys = {"dataset": "digits", "clients": 4, "participation": 0.5, "rounds": 40, "checkpoint_every": 2}
    whole = execute(resolve("hyperrep", "./my_algos/decay.py:DecayFedNest", {**keys, "out_dir": str(folder / "a")}))
    cfg = resolve("hyperrep", "./my_algos/decay.py:DecayFedNest", {**keys, "out_dir": str(folder / "b")})
    stop_after_checkpoint(cfg)
    again = execute(cfg)
    assert again.get("resumed_from_iteration") and whole["status"] == again["status"] == "done"
    a, b = (pd.read_csv(next((folder / x).glob("hyperrep/*/*/metrics.csv"))) for x in "ab")
    pd.testing.assert_frame_equal(a.drop(columns="train_time"), b.drop(columns="train_time"))


BEFORE_THE_LAYERS = textwrap.dedent('''
    from fbo_cli.algorithms import REGISTRY, FedNest
    from fbo_cli.algorithms.base import BilevelAlgorithm, bounded  # noqa: F401


    class Halved(FedNest):
        """FedNest at half the outer step: a user's file as written against fbo_cli.algorithms before issue 51."""

        label = "FedNest (half step)"

        def outer_lr(self) -> float:
            assert REGISTRY["fednest"].cls is FedNest
            return self.hp.outer_lr / 2
''')


def test_a_user_algorithm_written_before_the_layers_runs_unchanged(tmp_path):
    """``fbo_cli.algorithms`` (the registry, the built-in classes, ``base``'s classes and ``bounded``) is the one
    public import path; the package's regrouping into layers (issue 51) leaves a user's file running."""
    (tmp_path / "halved.py").write_text(BEFORE_THE_LAYERS)
    r = cli("run", "hyperrep", "--algo", f"{tmp_path / 'halved.py'}:Halved", "--rounds", "4", "--quiet",
            "--set", "clients=4", "--set", "dataset=digits", "--out-dir", tmp_path / "out")
    assert r.exit_code == 0 and r.output.startswith("done"), r.output
    import fbo_cli.algorithms

    for user_file in Path(fbo_cli.algorithms.__file__).parent.glob("template*.py"):
        assert "from fbo_cli.algorithms" in user_file.read_text()  # the templates users copy import the same way
