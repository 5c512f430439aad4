"""The data layout of a set of clients: their splits padded to a common length, and minibatches.

A :class:`Split` holds the data of ``M`` clients stacked on a leading client dimension; a
:data:`Batch` is a dict of such stacked tensors (``X``, ``y``, per-client averaging weights ``w``, and
any per-example extras). Random draws come from the caller's ``torch.Generator``, on its device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch

Batch = dict[str, torch.Tensor]


def take_rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``t[idx]`` for an index table ``idx [M, n]`` into the rows of ``t``: the same tensor, gathered with
    ``index_select`` (on the CPU about 4x faster than advanced indexing for image rows)."""
    rows = t.flatten(1) if t.dim() > 2 else t  # (a 2-D gather of image rows is faster than a 4-D one)
    return rows.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])


@dataclass
class Split:
    """The data of M clients, padded to a common length ``n``: ``X [M, n, ...]``, ``y [M, n]`` and
    ``mask [M, n]`` (False on padding). Any extra per-example tensors ride in ``extra``."""

    X: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    extra: dict[str, torch.Tensor]

    @property
    def M(self) -> int:
        return self.mask.shape[0]

    @property
    def counts(self) -> torch.Tensor:
        return self.mask.sum(1)

    def full(self) -> Batch:
        """The whole split as one batch; ``w`` are per-client averaging weights (sum to 1)."""
        w = self.mask.to(self.X.dtype) / self.counts.clamp(min=1).unsqueeze(1).to(self.X.dtype)
        return {"X": self.X, "y": self.y, "w": w, **self.extra}

    def gather(self, pos: torch.Tensor) -> Batch:
        """Batch made of positions ``pos [M, B]`` into each client's split."""
        M, n = self.mask.shape
        flat = pos + n * torch.arange(M, device=pos.device).unsqueeze(1)
        return self._batch(pos, flat, torch.gather(self.mask, 1, pos))

    def _batch(self, pos: torch.Tensor, flat: torch.Tensor, m: torch.Tensor) -> Batch:
        """``gather`` given the rows ``flat`` of ``pos`` in the client-major flattening and their mask ``m``."""
        M, n = self.mask.shape
        flat = flat.reshape(-1)
        take = lambda t: t.reshape(M * n, -1).index_select(0, flat).view(*pos.shape, *t.shape[2:])
        w = m.to(self.X.dtype)
        w = w / w.sum(1, keepdim=True).clamp_(min=1)
        out = {"X": take(self.X), "y": take(self.y), "w": w}
        out.update({k: take(v) for k, v in self.extra.items()})
        return out

    def epochs(self, gen: torch.Generator, epochs: int, batch_size: int) -> Iterator[tuple[Batch, torch.Tensor]]:
        """Local epochs of minibatches without replacement, as a DataLoader with shuffle and
        ``drop_last=False`` per client. Yields ``(batch, active)``; ``active [M]`` is False for a
        client whose (smaller) split has no examples left in this step."""
        M, n = self.mask.shape
        steps = math.ceil(int(self.counts.max()) / batch_size)
        base = n * torch.arange(M, device=self.mask.device).unsqueeze(1)
        for _ in range(epochs):
            keys = torch.rand(self.mask.shape, generator=gen, device=self.mask.device)
            keys = keys.masked_fill(~self.mask, 2.0)
            perm = keys.argsort(1)
            flat, mp = perm + base, torch.gather(self.mask, 1, perm)  # once per epoch, sliced per step
            for s in range(steps):
                sl = slice(s * batch_size, min(n, (s + 1) * batch_size))
                m = mp[:, sl]
                yield self._batch(perm[:, sl], flat[:, sl], m), m.any(1)

    def sample(self, gen: torch.Generator, batch_size: int) -> Batch:
        """One minibatch per client, without replacement within the batch: the ``batch_size`` rows with
        the smallest random keys, in key order (a partial sort: ~40x faster than a full ``argsort`` of a
        4,800-row split)."""
        keys = torch.rand(self.mask.shape, generator=gen, device=self.mask.device).masked_fill_(~self.mask, 2.0)
        b = min(batch_size, keys.shape[1])
        return self.gather(keys.topk(b, dim=1, largest=False, sorted=True).indices)
