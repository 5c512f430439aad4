"""Minibatches gathered straight from the pool, without materializing a client split.

``FederatedData.split`` copies every row of the selected clients (``[M, n, ...]``); an algorithm
that only ever draws small minibatches (FedBiO, FedBiOAcc, the FedAvg bounds) needs just the index
table. :class:`RowSampler` keeps ``idx``/``mask`` and gathers the ``b`` rows of each client's
minibatch from the pool: the same batches as ``Split.sample`` (the same random keys, the ``b``
smallest of them, in the same order), at the cost of the batch instead of the split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..data import FederatedData
from ..data.split import Batch, take_rows


@dataclass
class RowSampler:
    data: FederatedData
    idx: torch.Tensor  # [M, n] pool rows
    mask: torch.Tensor  # [M, n]
    pad: torch.Tensor = field(init=False, repr=False)  # ~mask, once per sampler rather than per draw

    def __post_init__(self) -> None:
        self.pad = ~self.mask

    @classmethod
    def of(cls, data: FederatedData, which: str, clients: torch.Tensor | None = None,
           drop: str | None = None) -> "RowSampler":
        """The ``which`` split's rows of ``clients`` (all: None), without the pool rows where the boolean
        ``data.extra[drop]`` holds; a seed batch's data give each run's own
        (``fbo_cli.algorithms.seed_runs.SeedRows``)."""
        if hasattr(data, "seed_rows"):
            return data.seed_rows(which, clients, drop)
        s = cls._of(data, which, clients)
        return s.restrict(~data.extra[drop]) if drop else s

    @classmethod
    def _of(cls, data: FederatedData, which: str, clients: torch.Tensor | None = None) -> "RowSampler":
        idx, mask = (data.train_idx, data.train_mask) if which == "train" else (data.val_idx, data.val_mask)
        if clients is not None:
            idx, mask = idx[clients], mask[clients]
        return cls(data, idx, mask)

    @property
    def M(self) -> int:
        return self.mask.shape[0]

    def restrict(self, keep_rows: torch.Tensor) -> "RowSampler":
        """Only the rows where the per-pool-row boolean ``keep_rows [N]`` holds."""
        return RowSampler(self.data, self.idx, self.mask & keep_rows[self.idx])

    def sample(self, gen: torch.Generator, batch_size: int, out: Batch | None = None) -> Batch:
        """One minibatch per client, without replacement within the batch (as ``Split.sample``); ``out``: tensors of
        the batch's shapes to gather it into (a seed batch's rows of this run,
        ``fbo_cli.algorithms.seed_runs.SeedRows``)."""
        keys = torch.rand(self.mask.shape, generator=gen, device=self.mask.device).masked_fill_(self.pad, 2.0)
        b = min(batch_size, keys.shape[1])
        pos = keys.topk(b, dim=1, largest=False, sorted=True).indices
        rows = torch.gather(self.idx, 1, pos)
        m = torch.gather(self.mask, 1, pos)
        w = m.to(self.data.X.dtype) / m.sum(1, keepdim=True).clamp(min=1).to(self.data.X.dtype)
        d = self.data
        pools = {"X": d.X, "y": d.y, **d.extra}
        if out is None:
            return {"X": take_rows(d.X, rows), "y": take_rows(d.y, rows), "w": w,
                    **{k: take_rows(v, rows) for k, v in d.extra.items()}}
        for k, t in pools.items():  # the same gather (take_rows), into out[k]
            flat = t.flatten(1) if t.dim() > 2 else t
            torch.index_select(flat, 0, rows.reshape(-1), out=out[k].view(-1, *flat.shape[1:]))
        out["w"].copy_(w)
        return out
