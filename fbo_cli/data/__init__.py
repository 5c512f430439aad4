"""Federated datasets: a training pool and a test set on the device, and per-client index tables.

Client ``i`` owns the rows ``train_idx[i, :n_i]`` (lower level / training split) and
``val_idx[i, :v_i]`` (upper level / validation split) of the pool; the tables are padded to a common
width and carry a mask, so that gathering the data of any set of clients is one indexing op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import UsageError
from ..federation import Split
from .partition import PARTITIONS, make_partition
from .sources import LOADERS, Dataset, load_dataset

__all__ = ["FederatedData", "build_federated", "load_dataset", "LOADERS", "PARTITIONS", "Dataset"]


def _table(parts: list[np.ndarray], device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(p) for p in parts))
    idx = np.zeros((len(parts), width), dtype=np.int64)
    mask = np.zeros((len(parts), width), dtype=bool)
    for i, p in enumerate(parts):
        idx[i, :len(p)] = p
        idx[i, len(p):] = p[0] if len(p) else 0
        mask[i, :len(p)] = True
    return torch.as_tensor(idx, device=device), torch.as_tensor(mask, device=device)


@dataclass
class FederatedData:
    dataset: Dataset
    X: torch.Tensor  # training pool [N, ...] on the device
    y: torch.Tensor  # labels used for training (possibly corrupted by a task)
    X_test: torch.Tensor
    y_test: torch.Tensor
    train_idx: torch.Tensor  # [m, n] rows of the pool
    train_mask: torch.Tensor
    val_idx: torch.Tensor
    val_mask: torch.Tensor
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # per-pool-row tensors [N, ...]

    @property
    def num_clients(self) -> int:
        return self.train_idx.shape[0]

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    def split(self, which: str, clients: torch.Tensor | None = None) -> Split:
        """The ``train`` or ``val`` split of the given clients (all clients by default)."""
        idx, mask = (self.train_idx, self.train_mask) if which == "train" else (self.val_idx, self.val_mask)
        if clients is not None:
            idx, mask = idx[clients], mask[clients]
        extra = {k: v[idx] for k, v in self.extra.items()}
        return Split(self.X[idx], self.y[idx], mask, extra)


def build_federated(dataset: Dataset, partition: str, clients: int, seed: int, device: torch.device,
                    val_frac: float | None = None, alpha: float = 0.5, shards_per_client: int = 2) -> FederatedData:
    """Partition the training pool over ``clients`` and split each client's share into its own
    train (lower level) and validation (upper level) parts. ``val_frac=None`` follows the FedNest
    repo: 0.5 for ``iid``, 0.2 otherwise."""
    if val_frac is None:
        val_frac = 0.5 if partition == "iid" else 0.2
    if not 0.0 < val_frac < 1.0:
        raise UsageError(f"val_frac must be in (0, 1), got {val_frac}")
    labels = dataset.y_train.numpy()
    parts = make_partition(partition, labels, clients, seed, alpha=alpha, shards_per_client=shards_per_client)
    rs = np.random.RandomState(seed + 7919)
    tr, va = [], []
    for p in parts:
        p = rs.permutation(p)
        n_val = max(1, int(round(val_frac * len(p)))) if len(p) > 1 else 0
        va.append(np.sort(p[:n_val]))
        tr.append(np.sort(p[n_val:]))
    if min(len(p) for p in tr) == 0:
        raise UsageError(f"some client got no training examples ({clients} clients on {len(labels)} examples)")
    train_idx, train_mask = _table(tr, device)
    val_idx, val_mask = _table(va, device)
    return FederatedData(dataset, dataset.X_train.to(device), dataset.y_train.to(device), dataset.X_test.to(device),
                         dataset.y_test.to(device), train_idx, train_mask, val_idx, val_mask)
