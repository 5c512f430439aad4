"""Template of a federated *bilevel* method written from scratch (the FedSGD template, ``template.py``, is the
single-level one). Copy this file into a folder of your own and run it as it is::

    fbo run hyperrep --algo ./template_bilevel.py:TemplateBilevel --dataset digits

or list it in a spec beside FedNest (``algo: ./template_bilevel.py:TemplateBilevel``). Its imports are absolute
(``fbo_cli.algorithms.base``) so that the copy works anywhere.

The method: **FedAvg on the lower level, a Neumann-series hypergradient on the upper level** (the skeleton
FedNest, Tarzanagh et al., ICML 2022, shares; without its SVRG lower solver and local upper steps). On
``hyperrep`` the upper variable ``x`` is the representation (an MLP's first layer), the lower variable ``y``
the softmax head; ``f_i(x, y)`` is client i's validation loss, ``g_i(x, y)`` its training loss plus the l2
term on ``y``. One outer iteration (:meth:`TemplateBilevel.step`):

1. ``N`` lower rounds: the sampled clients take ``lower_epochs`` epochs of local SGD on ``g_i(x, .)`` from the
   server's ``y``, and the server averages their heads (one round each, ``dy`` floats up and down);
2. ``p_0 = mean_i ∇_y f_i(x, y)`` (one round), then ``T`` Neumann terms ``p_k = p_{k-1} - lam H p_{k-1}``,
   ``H = mean_i ∇²_yy g_i(x, y)`` (one round each), and ``P = lam (p_0 + ... + p_T) ≈ H^{-1} ∇_y f``;
3. ``h = mean_i [∇_x f_i(x, y) - ∇²_xy g_i(x, y) P]`` (one round: ``dx`` floats up), and the server's step
   ``x <- x - outer_lr h`` (one round: ``dx`` floats down).

Rounds per outer iteration: ``N + T + 3``, what :meth:`rounds_per_iteration` returns; the runner checks every
outer iteration against it (a mismatch, or an iteration that charges no round, stops the run with an error).

The building blocks (``BilevelAlgorithm`` in ``base.py``), with their shapes (``M`` the sampled clients):

* ``self.fed.sample()``: the indices of this round's clients, ``[M]`` (drawn from the run's generator);
* ``self.fed.data.split("train" | "val", S)``: their training or validation split (a ``Split``; ``.full()`` is
  the whole split as one batch, every client's rows weighted to its mean);
* ``self.task.lower_view(x, split)``: ``(a, gfn, enc)``, the lower loss at this fixed ``x`` as ``gfn(a, y, b)``
  on the batches of ``enc`` (on hyperrep the representation is computed once and reused by every lower step);
* ``self.noise(batch)``: the batch with fresh random masks (hyperrep's dropout) from the run's generator;
* ``self.local_lower(a, gfn, enc, y, None, lr, epochs, batch_size)``: every client's local SGD from ``y [dy]``,
  returns ``[M, dy]`` (``q`` given instead of None: the SVRG-corrected steps of FBO-AggITD);
* ``self.cmean(Y)``: the server's mean over the clients, ``[dy]`` of ``[M, dy]``;
* ``self.grad_mean(fn, argnum, a, b, batch)``: ``mean_i ∇ fn_i`` with respect to argument ``argnum`` (0: x,
  1: y), ``[dx]`` or ``[dy]``; ``self.hvp_mean(fn, a, b, batch, v)``: ``mean_i ∇²_yy fn_i v``, ``[dy]``;
  ``self.grad``/``self.hvp``/``self.cross`` give the per-client ``[M, d]`` instead. Each call charges the
  ledger's oracle counts (``grads``, ``hvps``, ``jvps``) per client;
* ``self.hypergradient(x, y, P, train, val, per_client=False).h``: ``mean_i [∇_x f_i - ∇²_xy g_i P]``, ``[dx]``;
* ``self.ledger.comm(clients, up, down)``: one communication round (``rounds``, the x axis of every figure,
  and the floats sent); the runner counts ``ledger.iterations`` itself.

Run batches (``fbo_cli/grids/run_batches.py``): this class declares no ``batch``, so its runs run one by one. A method
whose every line works with a leading run dimension (``spread``, ``cmean`` and the oracles do; see ``fednest.py``)
declares ``batch = Batching(state=...)`` (``fbo_cli/algorithms/batching.py``; or the old ``batches = True`` and
``batch_state``), naming every attribute that carries per-run state (here ``("x", "y")``): a batch carries per run
only those, and a class of yours that writes an attribute it does not declare runs alone (``fbo show`` says why).
Checkpoints need no code: every attribute is saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fbo_cli.algorithms.base import BilevelAlgorithm, bounded


class TemplateBilevel(BilevelAlgorithm):
    """FedAvg lower level and a Neumann-series hypergradient: the bilevel template (template_bilevel.py)."""

    paper: ClassVar[str] = "the bilevel template: FedAvg lower level, Neumann hypergradient (FedNest's skeleton)"
    tasks: ClassVar[tuple[str, ...]] = ("hyperrep",)  # a BilevelTask with one global lower level
    rounds: ClassVar[str] = "N + T + 3"  # as the paper would write it (fbo show prints it)

    @dataclass
    class HP:  # every field: --set key=value, a spec's set:, a tune: grid; the bounds are checked before data loads
        outer_lr: float = bounded(0.01, gt=0, doc="upper (x) step size")
        lower_lr: float = bounded(0.01, gt=0, doc="lower (y) local SGD step size")
        N: int = bounded(1, ge=1, doc="lower rounds per outer iteration")
        lower_epochs: int = bounded(1, ge=1, doc="local epochs per lower round")
        batch_size: int = bounded(64, ge=1, doc="local SGD minibatch size")
        T: int = bounded(3, ge=0, doc="Neumann terms of the inverse-Hessian-vector product")
        lam: float = bounded(0.01, gt=0, doc="Neumann step (below 1 / the lower level's smoothness)")

    def rounds_per_iteration(self) -> int:
        return self.hp.N + self.hp.T + 3

    def step(self) -> None:
        hp, data = self.hp, self.fed.data
        x, y = self.x, self.y  # x [dx], y [dy]: the server's iterate (BilevelAlgorithm.__init__ built them)
        for _ in range(hp.N):  # 1. the lower level: FedAvg rounds on y at this x
            S = self.fed.sample()  # [M] this round's clients
            a, gfn, enc = self.task.lower_view(x, data.split("train", S))
            Y = self.local_lower(a, gfn, enc, y, None, hp.lower_lr, hp.lower_epochs, hp.batch_size)  # [M, dy]
            y = self.cmean(Y)  # [dy]
            self.ledger.comm(len(S), y.shape[-1])  # the clients' heads up, the mean down: one round
        S = self.fed.sample()  # 2.-3. the upper level, on a fresh sample of clients
        train, val = data.split("train", S), data.split("val", S)
        h = self.hypergrad(x, y, train, val)  # [dx]
        self.x = x - hp.outer_lr * h
        self.ledger.comm(len(S), 0, x.shape[-1])  # the new x down: one round
        self.y = y

    def hypergrad(self, x: torch.Tensor, y: torch.Tensor, train, val) -> torch.Tensor:
        """``mean_i [∇_x f_i - ∇²_xy g_i P]``, ``P = lam Σ_{k<=T} (I - lam H)^k ∇_y f``: ``[dx]``; ``T + 2`` rounds."""
        hp, M = self.hp, train.M
        a, gfn, enc = self.task.lower_view(x, train)
        p = self.grad_mean(self.task.f, 1, x, y, self.noise(val.full()))  # p_0 = mean_i ∇_y f_i, [dy]
        self.ledger.comm(M, y.shape[-1])
        acc = p
        for _ in range(hp.T):
            p = p - hp.lam * self.hvp_mean(gfn, a, y, self.noise(enc.full()), p)  # (I - lam H) p, [dy]
            self.ledger.comm(M, y.shape[-1])
            acc = acc + p
        h = self.hypergradient(x, y, hp.lam * acc, train, val, per_client=False).h  # [dx]
        self.ledger.comm(M, x.shape[-1], 0)  # each client's h_i up
        return h
