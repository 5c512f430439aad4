"""The typed spec: rows, claims and the tuned choices as types (values and notes apart, the same file on
disk), and every bound of every cell (run settings, task parameters, hyperparameters) checked when the
spec loads, before any data does."""

import pytest
import yaml

import fbo_cli.data.sources as sources
from fbo_cli.errors import UsageError
from fbo_cli.grids.spec import load_spec, tuned_layer
from fbo_cli.grids.spec_types import AlgorithmEntry, Choice, Claim, SettingEntry, Tuned, chosen_on_disk

SPEC = """
name: t
task: {task}
base: {{dataset: digits, clients: 4, rounds: 5, out_dir: {out}}}
algorithms:
  - {{name: A, algo: {algo}, tune: {{{key}: [0.01, 0.1]}}}}
settings: [{{name: s, set: {{{bad}}}}}]
claims: [{{text: c, metric: final, better: A, than: A, mode: min}}]
tune: {{seeds: [100]}}
"""


def _spec(tmp_path, task="hyperrep", algo="aggitd", key="outer_lr", bad="partition: iid"):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(task=task, algo=algo, key=key, bad=bad, out=tmp_path))
    return p


def test_the_spec_is_typed(tmp_path):
    exp = load_spec(_spec(tmp_path))
    a, s, c = exp.algorithms[0], exp.settings[0], exp.claims[0]
    assert isinstance(a, AlgorithmEntry) and isinstance(s, SettingEntry) and isinstance(c, Claim)
    assert (a.name, a.algo, a.tune, s.set) == ("A", "aggitd", {"outer_lr": [0.01, 0.1]}, {"partition": "iid"})
    assert (c.mode, c.margin, c.settings, c.across) == ("min", None, [], [])
    assert a["name"] == "A" and a.get("algo_name") is None  # the mapping view cli.py still reads
    assert exp.tune.grids == {"A": {"outer_lr": [0.01, 0.1]}}


def test_a_tuned_choice_keeps_values_and_notes_apart_and_its_file_unchanged():
    on_disk = {"lr": 0.1, "mom": 0.9, "_stable_edge": "lr=0.1 is the largest stable value", "_at_grid_edge": "mom"}
    c = Choice.of(on_disk)
    assert c.values == {"lr": 0.1, "mom": 0.9}
    assert c.notes == {"stable_edge": "lr=0.1 is the largest stable value", "at_grid_edge": "mom"}
    assert c.on_disk() == on_disk and list(c.on_disk()) == list(on_disk) and c == on_disk
    assert "_at_grid_edge" in c and "_none" not in c and c["lr"] == 0.1
    assert "beside a rejected value: lr=0.1" in c.edge_note() and "unresolved edge" in c.edge_note()
    record = {"score": "val_loss", "setting": "s", "chosen": {"A": {"s": on_disk}}, "seeds": [100]}
    t = Tuned.of(record)
    assert t.entry("A", "other") is t.chosen["A"]["s"]  # one tuned setting serves every setting
    assert tuned_layer(t, "A", "s") == {"lr": 0.1, "mom": 0.9} and tuned_layer(None, "A", "s") == {}
    assert yaml.safe_dump({**record, "chosen": chosen_on_disk(t.chosen)}, sort_keys=False) == \
        yaml.safe_dump(record, sort_keys=False)


@pytest.mark.parametrize("task, algo, key, bad, msg", [
    ("hyperrep", "aggitd", "outer_lr", "model: bogus", "model must be one of mlp, cnn"),
    ("hyperrep", "aggitd", "outer_lr", "lower: local, test_on: pooled", "test_on=pooled needs lower=global"),
    ("hyperclean", "fedbio", "upper_lr", "noise: 1.5", "noise must be in [0, 1)"),
    ("auc", "codasca", "eta", "imratio: 1.5", "imratio must be in (0, 1)"),
    ("auc", "codasca", "eta", "model: resnet20, norm_groups: 5", "norm_groups must divide 16, 32 and 64"),
    ("hfl", "zohfl", "local_lr", "mu: 0", "mu must be > 0"),
    ("hyperrep", "aggitd", "outer_lr", "participation: 2", "participation must be in (0, 1]"),
    ("hyperrep", "aggitd", "outer_lr", "N: 5000", "'N' must be <= 1000"),
])
def test_every_bound_is_checked_when_the_spec_loads_before_any_data(tmp_path, monkeypatch, task, algo, key, bad, msg):
    def no_data(*a, **k):
        raise AssertionError("data loaded before the spec was validated")

    monkeypatch.setattr(sources, "_CACHE", {})  # nothing loaded earlier in this process stands in
    for name in list(sources.LOADERS):
        monkeypatch.setitem(sources.LOADERS, name, no_data)
    with pytest.raises(UsageError, match="setting 's'") as e:
        load_spec(_spec(tmp_path, task, algo, key, bad))
    assert msg in str(e.value)
