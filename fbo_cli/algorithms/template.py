"""Template of an algorithm: copy this file to add one (as benchopt's ``template_solver.py``), or derive a
variant of a built-in one (``TemplateDecayFedNest`` below). A federated *bilevel* method from scratch (the
oracles of ``BilevelAlgorithm``, their shapes, the ledger, ``batch_state``) has its own template,
``template_bilevel.py``, which runs as it is when copied into a folder of your own.

**Your own method needs no fork.** A class in any file is named by file and class, ``fbo run hyperrep --algo
./decay.py:DecayFedNest``, ``algo: ./my_algos/decay.py:DecayFedNest`` in a spec (relative to the spec), or by
class name when its file sits in a folder ``algorithms/`` beside the spec; an installed package declares
it as an entry point in the group ``fbo.algorithms``. ``fbo show``, ``run``, ``compare``, ``tune`` and the
report treat it like a built-in one, and a run records the source hash of its class: editing the file makes
its finished runs stale, and ``fbo compare`` redoes them (``--accept-code-change`` keeps them).

**A variant of an existing method** subclasses it and changes one step, e.g. FedNest with a decaying
outer step (the whole file)::

    from fbo_cli.algorithms.fednest import FedNest

    class DecayFedNest(FedNest):  # FedNest (Tarzanagh et al., ICML 2022), alpha_t = alpha / (1 + t / t0)
        label = "FedNest (decaying step)"

        def outer_lr(self) -> float:  # the hook FedNest's step reads its outer step from
            return self.hp.outer_lr / (1 + self.ledger.iterations / self.hp.outer_lr_t0)

(For this one no code is needed at all: the schedule is a declared hyperparameter of FedNest,
``--set outer_lr_schedule=inverse`` with ``outer_lr_t0``; a subclass is for the rule that is not there.) A
variant with hyperparameters of its own extends the ``HP`` dataclass: ``class HP(FedNest.HP): decay: float
= 0.1``. Never patch ``self.hp`` during a run: the run's config and its id are the hyperparameters it
started with.

Adding an algorithm is this file plus its registry line in ``algorithms/__init__.py``, plus a spec in
``experiments/`` when it belongs to a paper (``tests/algorithms/test_registry_links.py`` fails until the
registry entry has a spec and a case in ``experiments/bench.yaml``, or an exemption with its reason).
The report picks the spec up by its ``paper:`` key (the paper's part of the report, placed by
``order:``; a new paper is one ``Paper`` entry in ``report/papers.py``); ``docs/fidelity.md`` gets the
choices the paper left open.

The contract (``base.Algorithm``):

* ``HP``: a dataclass of the hyperparameters with the paper's defaults (the CLI, ``fbo show`` and the
  config layers read it; ``--set key=value`` overrides a field). Bounds and meaning are declared on the
  field, ``bounded(default, ge=..., gt=..., lt=..., choices=..., doc="the paper's symbol, its meaning")``;
  the bounds are checked before any data loads, ``fbo show`` prints the meaning (a test requires one); a
  rule that ties several keys together goes in the ``check(hp)`` classmethod.
* ``__init__(task, hp, fed)``: build the state from ``task`` (data and oracles) and ``fed`` (the
  :class:`~fbo_cli.algorithms.base.FederationView`: the run's generator and its ledger); client state
  is stacked on a leading client dimension, and the per-client work is vectorized (``vmap`` or batched
  tensors): a Python loop over clients is a bug.
* ``step()``: one outer iteration. Charge every communication to ``self.ledger.comm(clients, floats)``
  (one call per round) and every oracle call to ``self.ledger.oracle(kind, clients, samples)``.
* ``rounds_per_iteration()``: the rounds the paper gives for one outer iteration (None where it varies);
  the runner checks every outer iteration's charged rounds against it and stops the run with an error on a
  mismatch, or when an iteration charges no round at all.
* ``batch``: a subclass of a method that batches (FedNest) batches too only when every attribute its own
  methods write is named in its state (``batch = FedNest.batch.but(state=FedNest.batch.state + ("mom",))``,
  or the old ``batch_state = FedNest.batch_state + ("mom",)``); otherwise its runs run alone, and ``fbo show``
  says why.
* ``evaluate()``: the task's metrics at the current iterate.
* ``state()``: the tensors that define the iterate (checkpoints and the divergence rule).

Checkpoints need no code: the runner snapshots the whole object (tensors, numbers, strings and fbo
classes, loaded with ``weights_only=True``) and restores it bit for bit.

The template of a method from scratch is a working algorithm, kept out of the registry: **minibatch SGD on
the average of the clients' gradients** for the ``auc`` task's binary cross-entropy (FedSGD: McMahan et al., AISTATS
2017, with one local step), all clients taking part. One step:

1. every client k draws a minibatch and computes ``g_k = ∇_w BCE(w; batch_k)`` (in one vectorized
   pass);
2. the server averages them and steps ``w <- w - eta * mean_k g_k`` (one round, ``dw`` floats up and
   down per client).

Hyperparameters: eta = 0.1, batch_size = 32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Algorithm, bounded
from .codasca import EpochSampler
from .fednest import FedNest


class TemplateFedSGD(Algorithm):
    paper: ClassVar[str] = "McMahan et al., AISTATS 2017 (FedSGD), as the template"
    tasks: ClassVar[tuple[str, ...]] = ("auc",)
    rounds: ClassVar[str] = "1"

    @dataclass
    class HP:
        eta: float = bounded(0.1, gt=0, doc="step size; bounds are declared once, checked before data loads")
        batch_size: int = bounded(32, ge=1, doc="minibatch size per client")

    def __init__(self, task, hp, fed):
        super().__init__(task, hp, fed)
        self.K = task.idx.shape[0]
        v, self.alpha = task.init(fed.gen)
        self.v = v
        self.sampler = EpochSampler(task.mask, hp.batch_size, fed.gen)

    def rounds_per_iteration(self) -> int:
        return 1

    def step(self) -> None:
        pos, valid = self.sampler.next()  # 1. every client's minibatch, [K, B]
        batch = self.task.batch(pos, valid)
        self.ledger.oracle("grads", self.K, int(valid.sum()))
        g = self.task.grads("bce", self.v.expand(self.K, -1), self.alpha.expand(self.K, -1), batch)[0]
        self.v = self.v - self.hp.eta * g.mean(0)  # 2. the server's step on the mean gradient
        self.ledger.comm(self.K, self.task.dw)

    def evaluate(self) -> dict[str, float]:
        return self.task.evaluate(self.v)

    def state(self) -> dict[str, torch.Tensor]:
        return {"v": self.v}


class TemplateDecayFedNest(FedNest):
    """The variant template: FedNest (Tarzanagh et al., ICML 2022) with a decaying outer step
    ``alpha_t = alpha / (1 + t / t0)``, t the outer iteration; everything else is FedNest's."""

    label = "FedNest (decaying step)"

    @dataclass
    class HP(FedNest.HP):
        decay_t0: float = bounded(10.0, gt=0, doc="t0 of the decay (outer iterations)")

    def outer_lr(self) -> float:
        return self.hp.outer_lr / (1 + self.ledger.iterations / self.hp.decay_t0)
