"""Partitions and per-client splits."""

import numpy as np
import pytest
import torch

from fbo_cli.data import build_federated, load_dataset
from fbo_cli.data.partition import make_partition
from fbo_cli.errors import UsageError
from fbo_cli.sim.federation import sample_clients

LABELS = np.repeat(np.arange(10), 300)  # 3,000 examples, 10 balanced classes


def _check_disjoint_cover(parts, n, full=True):
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # disjoint
    if full:
        assert len(allidx) == n


def test_iid_equal_disjoint_and_mixed():
    parts = make_partition("iid", LABELS, 20, seed=0)
    _check_disjoint_cover(parts, len(LABELS))
    assert {len(p) for p in parts} == {150}
    assert min(len(np.unique(LABELS[p])) for p in parts) >= 8


def test_shards_two_classes_each():
    parts = make_partition("shards", LABELS, 20, seed=0)  # 40 shards of 75 = a quarter class each
    _check_disjoint_cover(parts, len(LABELS))
    assert all(len(np.unique(LABELS[p])) <= 2 for p in parts)


def test_dirichlet_heterogeneity_grows_as_alpha_shrinks():
    def mean_classes(alpha):
        parts = make_partition("dirichlet", LABELS, 10, seed=0, alpha=alpha)
        _check_disjoint_cover(parts, len(LABELS))
        assert min(len(p) for p in parts) >= 10
        return np.mean([len(np.unique(LABELS[p])) for p in parts])

    assert mean_classes(0.1) < mean_classes(1.0) < mean_classes(100.0)
    assert mean_classes(100.0) == 10


def test_class_disjoint_shares_no_class():
    parts = make_partition("class-disjoint", LABELS, 5, seed=0)
    _check_disjoint_cover(parts, len(LABELS))
    owners = [set(np.unique(LABELS[p])) for p in parts]
    assert all(not (owners[i] & owners[j]) for i in range(5) for j in range(i + 1, 5))


def test_partition_errors_are_usage_errors():
    with pytest.raises(UsageError, match="unknown partition"):
        make_partition("nope", LABELS, 5, seed=0)
    with pytest.raises(UsageError):
        make_partition("class-disjoint", LABELS, 11, seed=0)


def test_client_splits_and_batches():
    data = build_federated(load_dataset("digits"), "iid", 10, 0, torch.device("cpu"))
    tr, va = data.train_mask.sum(1), data.val_mask.sum(1)
    assert torch.all((va - tr).abs() <= 1)  # iid: val_frac 0.5
    rows = torch.cat([data.train_idx[data.train_mask], data.val_idx[data.val_mask]])
    assert len(rows.unique()) == len(rows)  # train and val of all clients are disjoint
    split = data.split("train", torch.tensor([1, 4]))
    for batch, active in split.epochs(torch.Generator().manual_seed(0), 1, 16):
        torch.testing.assert_close(batch["w"].sum(1)[active], torch.ones(int(active.sum())))
    full = split.full()
    assert full["X"].shape[:2] == split.mask.shape


def test_client_major_layout_keeps_every_split_and_run():
    """The client-major pool (FederatedData.client_major) changes where rows live, not what any split,
    batch or run sees: the same tensors gathered, each client's rows contiguous, a run bit-identical."""
    data = build_federated(load_dataset("digits"), "dirichlet", 7, 0, torch.device("cpu"))
    data.extra["tag"] = torch.arange(len(data.y))  # a per-pool-row tensor rides along
    cm = data.client_major()
    S = torch.tensor([5, 0, 3])
    for which in ("train", "val", "test"):
        a, b = data.split(which, S), cm.split(which, S)
        assert torch.equal(a.X, b.X) and torch.equal(a.y, b.y) and torch.equal(a.mask, b.mask)
        assert all(torch.equal(a.extra[k], b.extra[k]) for k in a.extra)
    start = 0
    for i in range(7):  # client i: its training rows, then its validation rows, in one block
        rows = torch.cat([cm.train_idx[i][cm.train_mask[i]], cm.val_idx[i][cm.val_mask[i]]])
        assert torch.equal(rows, torch.arange(start, start + len(rows)))
        start += len(rows)
    assert sorted(cm.extra["tag"].tolist()) == list(range(len(data.y)))  # a permutation of the pool

    from fbo_cli.runs.config import resolve
    from fbo_cli.runs.runner import build
    from fbo_cli.tasks import TASKS

    def run(layout: bool):
        old, TASKS["hyperrep"].client_major = TASKS["hyperrep"].client_major, layout
        try:
            b = build(resolve("hyperrep", "fednest", {"dataset": "digits", "clients": 10, "participation": 0.3}))
        finally:
            TASKS["hyperrep"].client_major = old
        b.algo.step()
        return torch.cat([b.algo.x, b.algo.y])

    assert TASKS["hyperrep"].client_major
    assert torch.equal(run(True), run(False))


def test_sample_clients_counts_and_uniqueness():
    g = torch.Generator().manual_seed(0)
    s = sample_clients(g, 100, 0.1)
    assert len(s) == 10 and len(s.unique()) == 10
    assert len(sample_clients(g, 100, 1.0)) == 100
    assert len(sample_clients(g, 7, 0.01)) == 1
