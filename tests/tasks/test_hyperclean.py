"""The hyper-cleaning task: label noise, x layout, per-client support of ∇_x g, detection metrics,
the FedAvg bounds, and the spine's algorithms running on it."""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import f1_score, precision_score, recall_score

from fbo_cli.algorithms.pool_sampler import RowSampler
from fbo_cli.data import build_federated, load_dataset
from fbo_cli.errors import UsageError
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build
from fbo_cli.sim.federation import per_client_grad
from fbo_cli.tasks.hyperclean import HyperClean

torch.set_num_threads(1)


def _task(noise=0.4, clients=4, seed=0, dataset="digits"):
    ds = load_dataset(dataset)
    data = build_federated(ds, "dirichlet", clients, seed, torch.device("cpu"), 0.2, 0.5)
    return HyperClean(HyperClean.Params(noise=noise), data), ds


def test_label_noise_only_on_training_rows_and_mask_is_exact():
    ds = load_dataset("digits")
    clean = ds.y_train.clone()
    task, ds = _task(noise=0.4)
    d = task.data
    assert torch.equal(ds.y_train, clean), "the cached dataset must not be corrupted in place"
    rows = d.train_idx[d.train_mask]
    vrows = d.val_idx[d.val_mask]
    noisy = d.extra["noisy"]
    assert torch.equal(noisy[rows], task.noisy)
    assert not noisy[vrows].any()
    # corrupted labels differ from the clean ones exactly where the mask says so
    assert torch.equal(d.y[rows] != clean[rows], task.noisy)
    assert torch.equal(d.y[vrows], clean[vrows])
    assert torch.equal(d.y_test, ds.y_test)
    rate = task.noisy.float().mean().item()
    assert abs(rate - 0.4) < 0.06
    # the same seed gives the same corruption; another seed another one
    again, _ = _task(noise=0.4)
    other, _ = _task(noise=0.4, seed=1)
    assert torch.equal(again.noisy, task.noisy)
    assert not torch.equal(other.data.extra["noisy"], d.extra["noisy"])


def test_x_blocks_and_lower_gradient_support():
    task, _ = _task(noise=0.3)
    d = task.data
    counts = d.train_mask.sum(1)
    assert task.dx == int(counts.sum())
    # client m owns the contiguous block [off_m, off_m + n_m) of x
    off = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])
    pos = d.extra["xpos"]
    for m in range(d.num_clients):
        own = pos[d.train_idx[m, :counts[m]]]
        assert torch.equal(own, torch.arange(off[m], off[m] + counts[m]))
    x = torch.randn(task.dx)
    y = torch.randn(task.dy) * 0.1
    gx = per_client_grad(task.g, 0, x, y, d.split("train").full())  # [M, dx]
    for m in range(d.num_clients):
        inside = torch.zeros(task.dx, dtype=torch.bool)
        inside[off[m]:off[m] + counts[m]] = True
        assert gx[m][~inside].abs().max() == 0
        assert (gx[m][inside] != 0).all()
    # f does not depend on x
    gf = per_client_grad(task.f, 0, x, y, d.split("val").full())
    assert gf.abs().max() == 0


def test_detection_metrics_match_their_definition():
    task, _ = _task(noise=0.4)
    truth = task.noisy.numpy()
    x = torch.randn(task.dx)
    m = task.detection(x)
    pred = (torch.sigmoid(x) < 0.5).numpy()
    assert m["precision"] == pytest.approx(precision_score(truth, pred))
    assert m["recall"] == pytest.approx(recall_score(truth, pred))
    assert m["f1"] == pytest.approx(f1_score(truth, pred))
    assert task.detection(torch.where(task.noisy, -1.0, 1.0))["f1"] == 1.0
    assert task.detection(torch.zeros(task.dx))["f1"] == 0.0  # σ(0) = 0.5 flags nothing


def test_row_sampler_matches_split_sample_and_restricts():
    task, _ = _task(noise=0.5)
    d = task.data
    S = torch.tensor([0, 2, 3])
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = RowSampler.of(d, "train", S).sample(g1, 16)
    b = d.split("train", S).sample(g2, 16)
    for k in ("X", "y", "w", "noisy", "xpos"):
        assert torch.equal(a[k], b[k]), k
    clean = RowSampler.of(d, "train", S).restrict(~d.extra["noisy"]).sample(g1, 16)
    used = clean["w"] > 0
    assert used.any() and not clean["noisy"][used].any()


def test_bad_noise_is_a_usage_error():
    with pytest.raises(UsageError, match="noise"):
        _task(noise=1.0)
    with pytest.raises(UsageError, match="does not run on task"):
        resolve("hyperrep", "fedavg-noisy", {})


@pytest.mark.parametrize("algo,rounds", [("fedavg-noisy", 1), ("fedavg-clean", 1)])
def test_fedavg_bounds_ledger_and_oracle_weights(algo, rounds):
    cfg = resolve("hyperclean", algo, {"dataset": "digits", "clients": 4, "participation": 1.0, "threads": 1,
                                       "partition": "dirichlet", "lower_lr": 0.1})  # digits: small L, 0.1 is stable
    b = build(cfg)
    for _ in range(3):
        b.algo.step()
    led = b.ledger
    assert led.rounds == 3 * rounds == 3 * b.algo.rounds_per_iteration()
    assert led.floats_up == 3 * 4 * b.task.dy
    m = b.algo.evaluate()
    assert m["f1"] == (1.0 if algo == "fedavg-clean" else 0.0)
    assert m["test_acc"] > 0.5


@pytest.mark.parametrize("algo", ["fednest", "lfednest", "aggitd"])
def test_spine_algorithms_run_on_hyperclean(algo):
    cfg = resolve("hyperclean", algo, {"dataset": "digits", "clients": 4, "participation": 1.0, "threads": 1,
                                       "outer_lr": 100.0, "inner_lr": 0.1, "lower_epochs": 1})
    b = build(cfg)
    x0 = b.algo.x.clone()
    b.algo.step()
    assert b.ledger.rounds == b.algo.rounds_per_iteration()
    assert b.algo.x.shape == x0.shape and not torch.equal(b.algo.x, x0)
    assert b.ledger.floats_up > 4 * b.task.dx  # the hypergradient and x travel with dim x = N_train
