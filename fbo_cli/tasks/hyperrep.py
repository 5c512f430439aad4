"""Federated hyper-representation learning (seed 003 §4.1-4.2; Franceschi et al. 2018 setup).

Upper variable x: the representation (feature extractor); lower variable y: the classifier head,
global and shared by all clients (eq. 1 of seed 003).

* ``f_i(x, y)``: cross-entropy of the network on client i's *validation* split (no regularizer).
* ``g_i(x, y)``: cross-entropy on client i's *training* split plus a regularizer on y:
  ``norm`` (default, FedNest repo: ``reg_coef * Σ_k ||y_k||_2`` over the head's tensors, un-squared,
  reg_coef = 0.05 = 0.5 * 0.1), ``l2`` (``reg_coef/2 ||y||^2``, strongly convex) or ``none``.

Models (FedNest repo):

* ``mlp``: ``Linear(d, 200) -> Dropout(0.5) -> ReLU -> Linear(200, C)``; x = first layer
  (157,000 parameters on MNIST), y = head (2,010). Dropout is active in every training-mode
  quantity (gradients, HVPs, JVPs) and off in evaluation (spec_003 §7 items 9-10).
* ``cnn``: LeNet-style ``Conv(c,6,5) -> ReLU -> Pool -> Conv(6,16,5) -> ReLU -> Pool -> FC(400,120)
  -> ReLU`` as x (MNIST pads the first conv by 2, as FedNest's ``CNNMnist``), and
  ``FC(120,84) -> ReLU -> FC(84,C)`` as y.

Reuse: g depends on x only through the features ``relu(x-part(X))`` (dropout and ReLU commute), so
the lower-level phase encodes each client's training split once per outer iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..federation import Batch
from .base import BilevelTask, Layout, weighted_ce


class HyperRep(BilevelTask):
    name: ClassVar[str] = "hyperrep"
    reuse: ClassVar[bool] = True
    default_dataset: ClassVar[str] = "mnist5k"
    datasets: ClassVar[tuple[str, ...]] = ("mnist", "fashion-mnist", "cifar10", "mnist5k", "digits", "synthetic")

    @dataclass
    class Params:
        model: str = "mlp"  # mlp | cnn
        hidden: int = 200  # MLP hidden units
        dropout: float = 0.5  # MLP dropout probability (0 disables)
        reg: str = "norm"  # norm | l2 | none
        reg_coef: float = 0.05

    def __init__(self, params: "HyperRep.Params", data):
        super().__init__(params, data)
        p = params
        if p.model not in ("mlp", "cnn"):
            raise UsageError(f"model must be one of mlp, cnn; got '{p.model}'")
        if p.reg not in ("norm", "l2", "none"):
            raise UsageError(f"reg must be one of norm, l2, none; got '{p.reg}'")
        if not 0.0 <= p.dropout < 1.0:
            raise UsageError(f"dropout must be in [0, 1), got {p.dropout}")
        shape = data.dataset.shape
        C = data.num_classes
        if p.model == "mlp":
            d = math.prod(shape)
            self.width = p.hidden
            self.lx = Layout([("w1", (p.hidden, d)), ("b1", (p.hidden,))])
            self.ly = Layout([("w2", (C, p.hidden)), ("b2", (C,))])
        else:
            if len(shape) != 3 or shape[1] < 8:
                raise UsageError(f"the cnn model needs image data; dataset '{data.dataset.name}' has shape {shape}")
            c, h, _ = shape
            self.pad = 2 if h == 28 else 0
            s = ((h + 2 * self.pad - 4) // 2 - 4) // 2
            self.width = 120
            self.lx = Layout([("c1", (6, c, 5, 5)), ("cb1", (6,)), ("c2", (16, 6, 5, 5)), ("cb2", (16,)),
                              ("w1", (120, 16 * s * s)), ("b1", (120,))])
            self.ly = Layout([("w2", (84, 120)), ("b2", (84,)), ("w3", (C, 84)), ("b3", (C,))])
        self.dx, self.dy = self.lx.size, self.ly.size

    # model ---------------------------------------------------------------------------------------
    def init(self, gen):
        dev = self.data.X.device
        return self.lx.init(gen, dev), self.ly.init(gen, dev)

    def encode(self, x: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Features of a stack of examples under representation x: ``[n, width]`` after ReLU."""
        P = self.lx.unflatten(x)
        if self.p.model == "mlp":
            return F.relu(F.linear(X.reshape(X.shape[0], -1), P["w1"], P["b1"]))
        h = F.max_pool2d(F.relu(F.conv2d(X, P["c1"], P["cb1"], padding=self.pad)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, P["c2"], P["cb2"])), 2)
        return F.relu(F.linear(h.flatten(1), P["w1"], P["b1"]))

    def head(self, y: torch.Tensor, H: torch.Tensor, drop: torch.Tensor | None) -> torch.Tensor:
        Q = self.ly.unflatten(y)
        if drop is not None:
            H = H * drop
        if self.p.model == "mlp":
            return F.linear(H, Q["w2"], Q["b2"])
        return F.linear(F.relu(F.linear(H, Q["w2"], Q["b2"])), Q["w3"], Q["b3"])

    def reg_y(self, y: torch.Tensor) -> torch.Tensor:
        if self.p.reg == "none" or self.p.reg_coef == 0:
            return y.new_zeros(())
        if self.p.reg == "l2":
            return 0.5 * self.p.reg_coef * (y * y).sum()
        return self.p.reg_coef * sum(t.norm() for t in self.ly.unflatten(y).values())

    # losses (one client, one batch) ---------------------------------------------------------------
    def f(self, x, y, b: Batch):
        return weighted_ce(self.head(y, self.encode(x, b["X"]), b.get("drop")), b["y"], b["w"])

    def g(self, x, y, b: Batch):
        return self.f(x, y, b) + self.reg_y(y)

    def g_enc(self, _unused, y, b: Batch):
        return weighted_ce(self.head(y, b["X"], b.get("drop")), b["y"], b["w"]) + self.reg_y(y)

    def noise(self, gen, batch):
        q = self.p.dropout
        if self.p.model != "mlp" or q == 0:
            return batch
        shape = (*batch["y"].shape, self.width)
        keep = torch.rand(shape, generator=gen, device=batch["y"].device) >= q
        return {**batch, "drop": keep.to(batch["w"].dtype) / (1 - q)}

    # evaluation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, x, y):
        X, lab = self.data.X_test, self.data.y_test
        logits = torch.cat([self.head(y, self.encode(x, X[i:i + 5000]), None) for i in range(0, len(X), 5000)])
        return {"test_acc": (logits.argmax(1) == lab).float().mean().item(),
                "test_loss": F.cross_entropy(logits, lab).item()}
