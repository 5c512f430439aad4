"""The clients' copies of a vector whose every coordinate belongs to one client, without a dense ``[M, d]``.

Hyper-cleaning's x has one coordinate per training example, laid out client by client: client m's lower
loss touches only its own block of x and the upper loss none of it, so the x-derivatives of client m's
oracles vanish off m's block. An algorithm that keeps a copy of x per client (FedBiO, FedBiOAcc: ``[M, d]``,
in a run batch ``[R*M, d]``; d = 54,000 on Fashion-MNIST) and updates the copies elementwise from those
derivatives and from per-run scalars changes every client's copy off its own block in the same way: all
copies but the owner's hold the same value at a coordinate. :class:`BlockStack` keeps the two values, each
``[R, d]``: ``own`` (the coordinate's value in its owner's copy) and ``base`` (in every other copy). Every
element meets the operations it meets in the dense stack, so the values are the same bit for bit; the
server's mean materializes the dense stack once per round and takes the same mean (docs/fidelity.md#batches).
"""

from __future__ import annotations

import numbers

import torch


class BlockStack:
    """``[R*M, d]`` client copies (run-major; R = 1 for a run alone) as ``base`` and ``own`` ``[R, d]``;
    ``row [d]``: the row (among the M clients) of each coordinate's owner, 0 where the owner is not among them
    (no client's update touches such a coordinate, so ``own`` equals ``base`` there); in a seed batch ``[R, d]``, each
    run's own owners."""

    __slots__ = ("base", "own", "M", "row")

    def __init__(self, base: torch.Tensor, own: torch.Tensor, M: int, row: torch.Tensor):
        self.base, self.own, self.M, self.row = base, own, M, row

    @classmethod
    def spread(cls, v: torch.Tensor, M: int, row: torch.Tensor) -> "BlockStack":
        """Every client's copy of the global ``v`` (``[d]`` alone, ``[R, d]`` in a batch)."""
        v = v.unsqueeze(0) if v.dim() == 1 else v
        return cls(v, v, M, row)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.base.shape[0] * self.M, self.base.shape[1]))

    def dim(self) -> int:
        return 2

    def _new(self, base, own) -> "BlockStack":
        return BlockStack(base, own, self.M, self.row)

    def _op(self, o, f) -> "BlockStack":
        if isinstance(o, BlockStack):
            return self._new(f(self.base, o.base), f(self.own, o.own))
        if isinstance(o, numbers.Number) or hasattr(o, "col"):  # a number, or the runs' values (batched.Rate)
            return self._new(f(self.base, o), f(self.own, o))
        return NotImplemented

    def __add__(self, o):
        return self._op(o, lambda a, b: a + b)

    def __sub__(self, o):
        return self._op(o, lambda a, b: a - b)

    def __mul__(self, o):
        return self._op(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._op(o, lambda a, b: b * a)

    def clone(self) -> "BlockStack":
        return self._new(self.base.clone(), self.own.clone())

    def zeros(self) -> "BlockStack":
        z = self.base.new_zeros(self.base.shape)
        return self._new(z, z)

    # what the oracles read and write -----------------------------------------------------------------
    def gather(self, pos: torch.Tensor) -> torch.Tensor:
        """``[R*M, n]``: each client's copy at ``pos [R*M, n]``, positions in the client's own block (padding
        rows of a minibatch, whose weight is 0, may point elsewhere: they read the owner's value)."""
        return self.own.gather(1, pos.reshape(self.own.shape[0], -1)).view(pos.shape)

    def scattered(self, pos: torch.Tensor, v: torch.Tensor) -> "BlockStack":
        """The stack of ``zeros [R*M, d]`` with ``v [R*M, n]`` added at ``pos``, each client in its own block
        (the clients' positions are disjoint: one ``[R, d]`` sum; padding rows add zeros)."""
        R = self.own.shape[0]
        z = self.base.new_zeros(self.base.shape)
        return self._new(z, z.clone().scatter_add_(1, pos.reshape(R, -1), v.reshape(R, -1)))

    # back to the dense stack ---------------------------------------------------------------------------
    def dense(self) -> torch.Tensor:
        """``[R*M, d]``: the dense stack (run-major)."""
        R, d = self.base.shape
        D = self.base.repeat_interleave(self.M, 0).view(R, self.M, d)
        D.scatter_(1, self.row.view(-1, 1, d).expand(R, 1, d), self.own.unsqueeze(1))
        return D.view(R * self.M, d)

    def first_rows(self) -> torch.Tensor:
        """``[R, d]``: each run's first client's copy."""
        return torch.where(self.row == 0, self.own, self.base)
