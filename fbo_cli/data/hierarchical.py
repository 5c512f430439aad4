"""The data pipeline of hierarchical federated learning (ZO-HFL (Qiu, Kim & Yousefian, arXiv 2504.01839)): a server that
holds its own data, and clients that hold a (possibly heterogeneous) partition of the rest.

1. ``pool_test``: the official train and test sets are concatenated and shuffled with the seed, and
   ``test_frac`` of the pool becomes the (global) test set; the rest is "training". Otherwise the
   official test set is kept.
2. ``server_frac`` of the training rows, drawn uniformly at random, go to the server (docs/fidelity.md#zohfl).
3. The remaining rows are split over the clients with any partition of :mod:`.partition`
   (``dirichlet`` with alpha, the NIID-Bench recipe, in the paper).
4. ``holdout_frac`` of each client's share is held out (for an optional personalized metric); the
   paper holds out nothing (0, the default), and then the val tables are empty.

Returns a :class:`FederatedData` whose ``train_idx`` are the clients' rows, ``val_idx`` their held-out
rows and ``server_idx`` the server's rows, all into the training pool ``X``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import UsageError
from .partition import make_partition, split_shares
from .sources import Dataset


def build_hierarchical(dataset: Dataset, partition: str, clients: int, seed: int, device: torch.device,
                       alpha: float = 0.5, shards_per_client: int = 2, test_frac: float = 0.1,
                       server_frac: float = 0.3, holdout_frac: float = 0.0, pool_test: bool = True):
    from . import FederatedData, _table

    if pool_test and not 0.0 < test_frac < 1.0:
        raise UsageError(f"test_frac must be in (0, 1), got {test_frac}",
                         kind="bad_value", field="test_frac", value=test_frac)
    if not 0.0 <= server_frac < 1.0:
        raise UsageError(f"server_frac must be in [0, 1), got {server_frac}",
                         kind="bad_value", field="server_frac", value=server_frac)
    if not 0.0 <= holdout_frac < 1.0:
        raise UsageError(f"holdout must be in [0, 1), got {holdout_frac}",
                         kind="bad_value", field="holdout", value=holdout_frac)
    rs = np.random.RandomState(seed + 104729)
    if pool_test:
        X = torch.cat([dataset.X_train, dataset.X_test])
        y = torch.cat([dataset.y_train, dataset.y_test])
        perm = rs.permutation(len(y))
        n_test = int(round(test_frac * len(y)))
        te = torch.as_tensor(np.sort(perm[:n_test]))
        tr = torch.as_tensor(np.sort(perm[n_test:]))
        X_test, y_test = X[te], y[te]
        X, y = X[tr], y[tr]
    else:
        X, y, X_test, y_test = dataset.X_train, dataset.y_train, dataset.X_test, dataset.y_test
    n = len(y)
    perm = rs.permutation(n)
    n_server = int(round(server_frac * n))
    server = np.sort(perm[:n_server])
    rest = np.sort(perm[n_server:])
    if clients > len(rest):
        raise UsageError(f"clients ({clients}) exceeds the {len(rest)} examples left to the clients", kind="bad_value",
                         field="clients", value=clients)
    parts = [rest[p] for p in make_partition(partition, y.numpy()[rest], clients, seed, alpha=alpha,
                                             shards_per_client=shards_per_client)]
    tr_parts, ho_parts = split_shares(parts, holdout_frac, rs, min_one=False, total=len(rest))
    train_idx, train_mask = _table(tr_parts, device)
    val_idx, val_mask = _table(ho_parts, device)
    spec = {"partition": partition, "clients": clients, "seed": seed, "alpha": alpha,
            "shards_per_client": shards_per_client, "test_frac": test_frac if pool_test else None,
            "server_frac": server_frac, "holdout_frac": holdout_frac, "pool_test": pool_test}
    return FederatedData(dataset, X.to(device), y.to(device), X_test.to(device), y_test.to(device), train_idx,
                         train_mask, val_idx, val_mask, spec=spec,
                         server_idx=torch.as_tensor(server, dtype=torch.long, device=device))
