"""What every task provides, and the flat-parameter helper its models use.

A task holds no algorithm logic: it defines the model as a pure function of flat parameter vectors,
the per-client losses, which variables are shared, and the evaluation metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F

from ..data import FederatedData
from ..data.split import Batch, Split
from ..sim.federation import Oracles


class Layout:
    """Named tensors packed into one flat vector. ``unflatten`` returns views (no copies), so models
    written against the dict work unchanged under ``vmap`` and autograd."""

    def __init__(self, shapes: list[tuple[str, tuple[int, ...]]]):
        self.shapes = shapes
        self.sizes = [math.prod(s) for _, s in shapes]
        self.size = sum(self.sizes)

    def unflatten(self, v: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: t.view(shape) for (name, shape), t in zip(self.shapes, v[:self.size].split(self.sizes))}

    def unflatten_stacked(self, v: torch.Tensor) -> dict[str, torch.Tensor]:
        """``unflatten`` of client-stacked vectors ``[M, size]``: views ``[M, *shape]``."""
        parts = v[:, :self.size].split(self.sizes, 1)
        return {name: t.unflatten(1, shape) for (name, shape), t in zip(self.shapes, parts)}

    def init(self, gen: torch.Generator, device=None) -> torch.Tensor:
        """PyTorch's default init for Linear/Conv layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
        weights and biases (a bias takes the fan-in of the weight listed before it)."""
        parts, fan_in = [], 1
        for _, shape in self.shapes:
            if len(shape) > 1:
                fan_in = math.prod(shape[1:])
            bound = 1.0 / math.sqrt(fan_in)
            parts.append((torch.rand(math.prod(shape), generator=gen, device=gen.device) * 2 - 1) * bound)
        return torch.cat(parts).to(device)


def relu_pool2(h: torch.Tensor) -> torch.Tensor:
    """``max_pool2d(relu(h), 2)``. Without autograd (evaluation) it is the maximum of the four strided
    views of each 2x2 window, ReLU after (max and ReLU commute): bit for bit the same values, and on one
    CPU core about 7x faster than ``max_pool2d``, which also computes the argmax indices. With autograd it
    is ``max_pool2d`` itself: its gradient goes to one of tied entries, the views' maximum would split it."""
    n, c, H, W = h.shape
    if torch.is_grad_enabled() or H % 2 or W % 2:
        return F.max_pool2d(F.relu(h), 2)
    v = h.reshape(n, c, H // 2, 2, W // 2, 2)
    return torch.maximum(torch.maximum(v[:, :, :, 0, :, 0], v[:, :, :, 0, :, 1]),
                         torch.maximum(v[:, :, :, 1, :, 0], v[:, :, :, 1, :, 1])).relu_()


def weighted_ce(logits: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Sum of per-example cross-entropies weighted by ``w`` (weights of one client sum to 1)."""
    return (F.cross_entropy(logits, labels, reduction="none") * w).sum()


class Task:
    """Base of all tasks. ``metric`` is the headline metric used by tables and plots."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "bilevel"
    metric: ClassVar[str] = "test_acc"
    default_dataset: ClassVar[str] = "mnist5k"
    datasets: ClassVar[tuple[str, ...]] = ()
    run_defaults: ClassVar[dict] = {}  # run settings of the task's paper (below the user's keys)
    # what ``fbo tune`` scores by default: a metric on held-out training data (never the test set)
    tune_metric: ClassVar[tuple[str, str]] = ("", "min")
    # the task gathers whole client splits: its pool is laid out client by client
    # (``FederatedData.client_major``; the same results, faster gathers)
    client_major: ClassVar[bool] = False

    @dataclass
    class Params:
        pass

    def __init__(self, params: Any, data: FederatedData):
        self.check_params(params)
        self.p = params
        self.data = data

    @classmethod
    def check_params(cls, params: Any) -> None:
        """What the parameters must satisfy beyond their declared bounds (choices that depend on each other),
        checked by ``config.resolve`` before any data loads (and again here when a task is built by hand);
        raise UsageError naming the key."""


class BilevelTask(Task):
    """``min_x (1/m) Σ_i f_i(x, y*_x)`` s.t. ``y*_x = argmin_y (1/m) Σ_i g_i(x, y)`` (global lower
    level). ``f`` and ``g`` are one client's losses on one batch; the federation vmaps them.

    A task may declare that ``g`` depends on ``x`` only through a per-example encoding
    (``reuse = True``): then ``g(x, y, b) == g_enc(y, b')`` where ``b'`` is ``b`` with ``X`` replaced by
    ``encode(x, X)``. Algorithms use it to encode each client's lower-level split once per phase.
    """

    reuse: ClassVar[bool] = False
    local_lower: bool = False  # True: a lower variable per client (FedBiO eq. 5); y is stacked [m, dy]
    dx: int
    dy: int

    def init(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def f(self, x: torch.Tensor, y: torch.Tensor, b: Batch) -> torch.Tensor:
        raise NotImplementedError

    def g(self, x: torch.Tensor, y: torch.Tensor, b: Batch) -> torch.Tensor:
        raise NotImplementedError

    def encode(self, x: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def g_enc(self, _unused: torch.Tensor, y: torch.Tensor, b: Batch) -> torch.Tensor:
        raise NotImplementedError

    def oracles(self, fn: Callable) -> Oracles:
        """The derivative oracles of ``fn`` (one of the task's losses): the generic ``torch.func`` ones
        (:class:`fbo_cli.sim.federation.Oracles`); a task with closed forms returns its subclass."""
        return Oracles(fn)

    def noise(self, gen: torch.Generator, batch: Batch) -> Batch:
        """Add the random masks a training-mode forward pass needs (e.g. dropout) to a batch."""
        return batch

    def lower_view(self, x: torch.Tensor, split: Split):
        """``(a, fn, split')`` such that ``fn(a, y, b')`` is the lower loss at this fixed global ``x``
        for batches ``b'`` of ``split'``. Uses the encoding when the task supports it."""
        if not self.reuse:
            return x, self.g, split
        return x.new_zeros(0), self.g_enc, Split(self.encode_split(x, split.X), split.y, split.mask, split.extra)

    def takes_x(self, fn: Callable) -> bool:
        """Whether the loss ``fn`` reads its first argument: ``g_enc`` (the lower loss on features encoded at x
        already) takes an empty placeholder instead (:meth:`lower_view`). A run batch folds the calls of a loss
        that takes no x whatever the placeholder's shape (fbo_cli/algorithms/runs_as_clients.py)."""
        return not (self.reuse and fn == self.g_enc)

    def encode_runs(self, x: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """``encode_split`` of R runs' globals ``x [R, dx]`` on the same clients' ``X [M, n, ...]``: ``[R*M, n,
        width]``, run-major (a run batch's lower view). Here run by run; a task with the runs' encodings as one
        product (hyperrep's mlp) overrides it, each run's rows bit for bit its encoding alone."""
        return torch.cat([self.encode_split(xr, X) for xr in x.unbind(0)])

    def encode_split(self, x: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """``encode`` of a client-stacked ``X [M, n, ...]`` under a global ``x``: ``[M, n, width]``."""
        return self.encode(x, X.reshape(-1, *X.shape[2:])).reshape(*X.shape[:2], -1)

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        raise NotImplementedError
