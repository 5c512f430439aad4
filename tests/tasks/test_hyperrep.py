"""The hyper-representation task: the lower-level feature reuse is exact, both models run."""

import pytest
import torch

from fbo_cli.data import build_federated, load_dataset
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build
from fbo_cli.tasks.hyperrep import HyperRep


@pytest.mark.parametrize("model,dataset", [("mlp", "digits"), ("cnn", "mnist5k")])
def test_encoded_lower_loss_equals_full_loss(model, dataset):
    data = build_federated(load_dataset(dataset), "iid", 8, 0, torch.device("cpu"))
    task = HyperRep(HyperRep.Params(model=model), data)
    gen = torch.Generator().manual_seed(0)
    x, y = task.init(gen)
    split = data.split("train", torch.tensor([0, 3, 5]))
    a, gfn, enc = task.lower_view(x, split)
    batch = task.noise(gen, split.sample(gen, 16))  # dropout masks shared by both forms
    pos = torch.stack([torch.randperm(int(c), generator=gen)[:16] for c in split.counts])
    full = task.noise(gen, split.gather(pos))
    encb = {**enc.gather(pos), **({"drop": full["drop"]} if "drop" in full else {})}
    for i in range(3):
        b_full = {k: v[i] for k, v in full.items()}
        b_enc = {k: v[i] for k, v in encb.items()}
        torch.testing.assert_close(task.g(x, y, b_full), gfn(a, y, b_enc))
    assert batch["X"].shape[:2] == (3, 16)


def test_cnn_runs_and_learns():
    b = build(resolve("hyperrep", "aggitd", {"dataset": "mnist5k", "model": "cnn", "clients": 8,
                                             "participation": 0.5, "inner_lr": 0.05, "outer_lr": 0.1}))
    m0 = b.algo.evaluate()
    for _ in range(10):
        b.algo.step()
    assert b.task.dx == 6 * 25 + 6 + 16 * 6 * 25 + 16 + 400 * 120 + 120 and b.task.dy == 120 * 84 + 84 + 84 * 10 + 10
    m1 = b.algo.evaluate()
    assert m1["test_loss"] < m0["test_loss"] - 0.05 and m1["test_acc"] > m0["test_acc"]
    assert b.ledger.rounds == 10 * 5


def test_mlp_parameter_counts_match_the_paper():
    data = build_federated(load_dataset("mnist5k"), "iid", 4, 0, torch.device("cpu"))
    task = HyperRep(HyperRep.Params(), data)
    assert (task.dx, task.dy) == (157_000, 2_010)  # Xiao & Ji (ICML 2023) §4.2
