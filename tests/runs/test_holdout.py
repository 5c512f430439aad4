"""The held-out tuning score: `heldout_frac` sets a share of each client's data apart from both levels; the
bilevel tasks score it (heldout_loss) and a spec's tune block can select it. Holdout 0 changes nothing."""

import torch

from fbo_cli.data import build_federated, load_dataset
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import execute


def test_the_held_out_rows_are_apart_from_both_levels_and_zero_changes_nothing():
    ds = load_dataset("digits", "data")
    a = build_federated(ds, "iid", 5, 0, torch.device("cpu"))
    b = build_federated(ds, "iid", 5, 0, torch.device("cpu"), heldout_frac=0.0)
    assert torch.equal(a.train_idx, b.train_idx) and torch.equal(a.val_idx, b.val_idx) and b.hold_idx is None
    h = build_federated(ds, "iid", 5, 0, torch.device("cpu"), heldout_frac=0.2)
    for i in range(5):
        tr, va = set(h.train_idx[i][h.train_mask[i]].tolist()), set(h.val_idx[i][h.val_mask[i]].tolist())
        ho = set(h.hold_idx[i][h.hold_mask[i]].tolist())
        assert ho and not ho & tr and not ho & va
        everything = set(a.train_idx[i][a.train_mask[i]].tolist()) | set(a.val_idx[i][a.val_mask[i]].tolist())
        assert tr | va | ho == everything and abs(len(ho) - 0.2 * len(everything)) <= 1
    cm = h.client_major()  # remapped with the other tables: the same rows
    assert torch.equal(cm.split("heldout").y, h.split("heldout").y)


def test_a_run_with_a_holdout_scores_it_and_keeps_its_run_id_apart(tmp_path):
    base = {"dataset": "digits", "clients": 4, "participation": 0.5, "rounds": 4, "out_dir": str(tmp_path)}
    plain = resolve("hyperclean", "fedbio", base)
    held = resolve("hyperclean", "fedbio", {**base, "heldout_frac": 0.1})
    assert plain.run_id != held.run_id
    assert resolve("hyperclean", "fedbio", {**base, "heldout_frac": 0.0}).run_id == plain.run_id
    for task in ("hyperclean", "hyperrep"):
        cfg = resolve(task, "fedbio" if task == "hyperclean" else "aggitd", {**base, "heldout_frac": 0.1})
        execute(cfg)
        head = (cfg.run_dir / "metrics.csv").read_text().splitlines()[0]
        assert "heldout_loss" in head, head


def test_a_tuning_scored_on_the_held_out_split(tmp_path):
    from typer.testing import CliRunner

    from fbo_cli.cli import app

    p = tmp_path / "t.yaml"
    body = (f"name: t\ntask: hyperrep\nseeds: [0]\nbase: {{dataset: digits, clients: 4, participation: 0.5, "
            f"rounds: 6, threads: 1, out_dir: {tmp_path}}}\nalgorithms: [{{name: A, algo: aggitd, tune: "
            f"{{outer_lr: [0.003, 0.03, 0.3]}}}}]\n")
    p.write_text(body + "tune: {seeds: [100], rounds: 6, tolerance: off, score: heldout_loss, "
                        "set: {heldout_frac: 1.5}}\n")
    r = CliRunner().invoke(app, ["tune", str(p)])
    assert r.exit_code == 2 and "heldout_frac must be in (0, 1)" in " ".join(r.output.split())
    assert not (tmp_path / "compare").exists()
    # the bilevel tasks' default score is the held-out one, on 10% of each client's rows
    p.write_text(body + "tune: {seeds: [100], rounds: 6, tolerance: off}\n")
    r = CliRunner().invoke(app, ["tune", str(p)])
    assert r.exit_code == 0, r.output
    tuned = (tmp_path / "compare" / "t" / "tuned.yaml").read_text()
    assert "score: heldout_loss" in tuned and "outer_lr" in tuned
    configs = list((tmp_path / "hyperrep" / "aggitd").glob("*/config.yaml"))
    assert len(configs) >= 3 and all("heldout_frac: 0.1" in c.read_text() for c in configs)
