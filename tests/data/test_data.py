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
    for batch, on in split.epochs(torch.Generator().manual_seed(0), 1, 16):
        active = on[:, 0] > 0
        torch.testing.assert_close(batch["w"].sum(1)[active], torch.ones(int(active.sum())))
    full = split.full()
    assert full["X"].shape[:2] == split.mask.shape


@pytest.mark.parametrize("batch_size", [7, 16, 1000])
def test_an_epochs_minibatches_are_each_steps_gather(batch_size):
    """``Split.epochs`` gathers an epoch's rows once and slices them per step (issue 64): every step's batch and
    active clients are those of the gather made step by step (the draws, rows and weights bit for bit), for
    clients of different sizes (some run out of examples before the last step)."""
    data = build_federated(load_dataset("digits"), "dirichlet", 6, 0, torch.device("cpu"))
    split = data.split("train", torch.tensor([0, 2, 3, 5]))
    assert len(set(split.sizes)) > 1
    M, n = split.mask.shape
    got = list(split.epochs(torch.Generator().manual_seed(3), 2, batch_size))
    g = torch.Generator().manual_seed(3)
    steps = -(-max(split.sizes) // batch_size)
    want = []
    for _ in range(2):  # the gather step by step (fbo before issue 64)
        perm = torch.rand(split.mask.shape, generator=g).masked_fill(~split.mask, 2.0).argsort(1)
        flat, mp = perm + n * torch.arange(M).unsqueeze(1), torch.gather(split.mask, 1, perm)
        for s in range(steps):
            sl = slice(s * batch_size, min(n, (s + 1) * batch_size))
            want.append((split._batch(perm[:, sl], flat[:, sl], mp[:, sl]), mp[:, sl].any(1)))
    assert len(got) == len(want) == 2 * steps
    for (b, on), (wb, active) in zip(got, want):
        assert b.keys() == wb.keys() and all(torch.equal(b[k], wb[k]) for k in b)
        assert torch.equal(on[:, 0] > 0, active) and on.dtype == split.X.dtype


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
