"""A ``tuned.yaml`` applies only to the tuning procedure that made it (seeds, budget, settings,
clients, grid), and a results folder is one spec file's, claimed by its absolute path."""

import os

import pytest
import yaml
from cli_helpers import error_of, fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.errors import UsageError
from fbo_cli.grids.spec import load_spec

runner = CliRunner()

SPEC = """name: tp
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: {clients}, participation: 0.5, rounds: {rounds}, threads: 1, out_dir: {out}}}
tune: {{seeds: {seeds}, rounds: budget}}
algorithms: [{{name: A, algo: aggitd, tune: {{outer_lr: [0.01, 0.1]}}}}]
"""


def _spec(tmp_path, seeds="[100]", clients=4, rounds=8):
    p = tmp_path / "tp.yaml"
    p.write_text(SPEC.format(seeds=seeds, clients=clients, rounds=rounds, out=tmp_path / "out"))
    return p


@pytest.fixture
def tuned(tmp_path):
    """The spec tuned (once, two grid points of 8 rounds): its tuned.yaml."""
    r = runner.invoke(app, ["tune", str(_spec(tmp_path))])
    assert r.exit_code == 0, r.output
    return tmp_path / "out" / "compare" / "tp" / "tuned.yaml"


def test_tuned_yaml_records_its_procedure_and_is_refused_under_another(tmp_path, tuned):
    made_by = yaml.safe_load(tuned.read_text())["made_by"]
    assert made_by["seeds"] == [100] and made_by["base"]["clients"] == 4 and made_by["base"]["rounds"] == 8
    assert load_spec(_spec(tmp_path)).tuned is not None  # the same procedure: applied
    for edit, changed in [({"seeds": "[101]"}, ["seeds"]), ({"clients": 5}, ["base"]), ({"rounds": 16}, ["base"])]:
        with pytest.raises(UsageError) as e:  # refused, naming the parts of the procedure that changed
            load_spec(_spec(tmp_path, **edit))
        assert (e.value.kind, e.value.field, e.value.value) == ("bad_spec", "made_by", changed)
        r = runner.invoke(app, ["compare", str(_spec(tmp_path, **edit))])
        assert fails_with(r, "bad_spec", field="made_by", path=str(tuned), value=changed), r.output
    with pytest.raises(UsageError) as e:  # the command line's values are part of it too
        load_spec(_spec(tmp_path), {"clients": 5})
    assert (e.value.field, e.value.value) == ("made_by", ["command_line"])
    assert load_spec(_spec(tmp_path), {"threads": 2}).tuned is not None  # where and how fast: not


def test_an_older_tuned_yaml_without_its_procedure_is_checked_on_its_seeds_and_score(tmp_path):
    spec = _spec(tmp_path)
    d = tmp_path / "out" / "compare" / "tp"
    d.mkdir(parents=True)
    old = {"seeds": [100], "rounds": "budget", "score": "heldout_loss", "mode": "min", "tail": 0.25,
           "grids": {"A": {"outer_lr": [0.01, 0.1]}}, "chosen": {"A": {"default": {"outer_lr": 0.1}}}}
    (d / "tuned.yaml").write_text(yaml.safe_dump(old))
    assert load_spec(spec).tuned is not None
    with pytest.raises(UsageError) as e:
        load_spec(_spec(tmp_path, seeds="[101]"))
    assert (e.value.kind, e.value.field, e.value.value) == ("bad_spec", "made_by", ["seeds"])
    # tuned on another score (the fit split's upper_loss) than the spec's (the held-out default): refused
    (d / "tuned.yaml").write_text(yaml.safe_dump({**old, "score": "upper_loss"}))
    with pytest.raises(UsageError) as e:
        load_spec(_spec(tmp_path))
    assert (e.value.kind, e.value.field, e.value.value) == ("bad_spec", "made_by", ["score"])


def test_two_spec_files_of_one_name_in_two_folders_never_share_a_results_folder(tmp_path):
    out = tmp_path / "shared"
    text = ("name: same\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: A, algo: aggitd}]\n"
            "base: {dataset: digits, clients: 4, participation: 0.5, rounds: 2, threads: 1}\n")
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "spec.yaml").write_text(text)
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path / "a")
        r = runner.invoke(app, ["compare", "spec.yaml", "--out-dir", str(out)])
        assert r.exit_code == 0, r.output
        os.chdir(tmp_path / "b")
        r = runner.invoke(app, ["compare", "spec.yaml", "--out-dir", str(out)])
        e = error_of(r)  # refused, naming the spec whose folder it is
        assert (r.exit_code, e.kind, e.field, e.value) == (2, "bad_spec", "name", str(tmp_path / "a" / "spec.yaml")), \
            r.output
        os.chdir(tmp_path / "a")  # the same file, edited, keeps its folder
        (tmp_path / "a" / "spec.yaml").write_text(text.replace("rounds: 2", "rounds: 3"))
        r = runner.invoke(app, ["compare", "spec.yaml", "--out-dir", str(out)])
        assert r.exit_code == 0, r.output
    finally:
        os.chdir(cwd)
