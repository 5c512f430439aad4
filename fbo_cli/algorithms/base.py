"""Algorithm base classes and the building blocks shared by the federated bilevel algorithms.

An algorithm is one class: a hyperparameter dataclass ``HP`` whose defaults are the paper's, an
``__init__`` that builds the state, and ``step()`` = one outer iteration, which charges the ledger.
The registry (``algorithms/__init__.py``) maps CLI names to (class, preset overrides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch

from ..data import FederatedData
from ..data.split import Batch, Split
from ..errors import UsageError
from ..sim.bounds import bounded, check_hp  # noqa: F401  (re-exported: algorithms declare HP with them)
from ..sim.federation import Ledger, cmean, sample_clients
from ..tasks.base import BilevelTask
from .batching import NO_BATCH, Batching, declare

BILEVEL_SEEDS = ("its lower rounds read each seed's full client splits (lower views, encodings) and charge their "
                 "oracles in bulk, and its client sets are drawn per seed")
REBUILT = {"task", "hp", "fed", "ledger"}  # an algorithm's references the runner rebuilds from the config; never saved


@dataclass
class FederationView:
    """What an algorithm sees of the federation: the data, the participation ratio, the run's
    generator and the ledger."""

    data: FederatedData
    participation: float
    gen: torch.Generator
    ledger: Ledger

    def sample(self) -> torch.Tensor:
        return sample_clients(self.gen, self.data.num_clients, self.participation, self.data.X.device)


class Algorithm:
    # the registry key, which is the name: the runner sets it before ``__init__`` (so "aggitd-sgd" reports
    # itself as such); empty for an algorithm built by hand
    name: str = ""
    paper: ClassVar[str] = ""
    tasks: ClassVar[tuple[str, ...]] = ()
    rounds: ClassVar[str] = ""  # communication rounds per outer iteration, as the paper writes it
    run_defaults: ClassVar[dict] = {}  # run settings the algorithm needs (above the task's, below the user's)
    step_metrics: ClassVar[tuple[str, ...]] = ()  # metrics its evaluate() adds once it has taken a step
    work_grows: ClassVar[bool] = False  # an outer iteration does more work as the rounds go (the bench times one)
    # defaults on one task that differ from the paper's (above run_defaults, below the user's keys), e.g.
    # FedBiO's steps on hyperrep: {"hyperrep": {"upper_lr": 0.16}}; `fbo show ALGO --task T` shows them
    task_defaults: ClassVar[dict[str, dict]] = {}
    # the common vocabulary (VOCABULARY) -> this algorithm's own key (its paper's symbol): --set local_steps=5
    # sets FedNest's tau; `fbo show` lists both
    aliases: ClassVar[dict[str, str]] = {}
    # runs of this algorithm that differ only in float hyperparameters and the seed may step together in
    # one process (fbo_cli/grids/run_batches.py): its one declaration, ``batch = Batching(state=..., fixed=...,
    # seeds=..., clients=...)`` (fbo_cli/algorithms/batching.py); its state carries a leading run dimension, rows
    # run-major. A seed batch (``seeds=True``, fbo_cli/algorithms/seed_runs.py) reads per-seed data only through
    # ``fed`` (minibatches from ``RowSampler.of`` drawn with ``fed.gen``, oracle charges through ``_charge``, rounds
    # through ``ledger.comm``). The old attributes (batches, batch_state, batch_fixed, batch_seeds, seeds_unbatched,
    # client_state) mirror it, and a user's class may still declare them instead (``batching.declare``).
    batch: ClassVar[Batching] = NO_BATCH
    batched: bool = False  # stepped in a run batch: the run dimension leads (fbo_cli/grids/run_batches.py)
    runs: int = 1  # the runs of the batch (a run alone: 1)
    seed_runs: Any = None  # in a seed batch, its runs (fbo_cli.algorithms.seed_runs.Seeds)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        declare(cls)

    @dataclass
    class HP:
        pass

    def __init__(self, task: Any, hp: Any, fed: FederationView):
        self.task, self.hp, self.fed = task, hp, fed
        self.ledger = fed.ledger

    @classmethod
    def check(cls, hp: Any) -> None:
        """Validate hyperparameters before any data is loaded; raise UsageError naming the key."""

    @classmethod
    def can_batch(cls, hp: Any) -> bool:
        """Whether a run with these hyperparameters may step in a run batch (its ``batch`` is on)."""
        return cls.batch.on

    @classmethod
    def can_batch_seeds(cls, hp: Any, run: Any) -> bool:
        """Whether runs of several seeds with these hyperparameters and run settings may step in one batch: the
        algorithm batches seeds (``batch.seeds`` True) and every client takes part in every round (no client set is
        drawn: a seed batch's clients are the same rows of each run's own data)."""
        every = round(run.participation * run.clients, 9) >= run.clients
        return cls.batch.seeds is True and cls.can_batch(hp) and every

    @classmethod
    def auto_batch(cls, hp: Any, task: str) -> bool:
        """Whether ``--batch auto`` steps such runs on ``task`` in a batch: they may (:meth:`can_batch`) and a batch
        of them is not slower than the runs one by one (an algorithm whose batch the batch bench measured slower
        in some setting says so here; ``--batch R`` still batches them)."""
        return cls.can_batch(hp)

    def rounds_per_iteration(self) -> int | None:
        """The round count the paper gives for one outer iteration (None where it varies)."""
        return None

    def step(self) -> None:
        raise NotImplementedError

    def eval_point(self) -> tuple[torch.Tensor, ...]:
        """What ``evaluate`` scores: the task's ``evaluate`` of these (a bilevel algorithm's (x, y)), then
        :meth:`more_metrics`. A run batch scores its runs' points in one pass where the task can
        (``task.evaluate_runs``, :func:`fbo_cli.algorithms.runs_as_clients.evaluate_runs`); an algorithm that overrides
        ``evaluate``
        instead is scored run by run."""
        raise NotImplementedError

    def more_metrics(self, out: dict[str, float]) -> dict[str, float]:
        """The task's metrics of :meth:`eval_point` with what the algorithm adds (its own diagnostics)."""
        return out

    def evaluate(self) -> dict[str, float]:
        return self.more_metrics(self.task.evaluate(*self.eval_point()))

    def state(self) -> dict[str, torch.Tensor]:
        """Tensors that define the iterate (for checkpoints and divergence checks)."""
        return {}

    # the run dimension (fbo_cli/grids/run_batches.py): alone (runs = 1) these are the plain operations
    def spread(self, v: torch.Tensor, M: int) -> torch.Tensor:
        """``[M, d]`` copies of the global ``v [d]`` for ``M`` clients; in a batch ``[R*M, d]`` from ``[R, d]``."""
        return v.repeat_interleave(M, 0) if self.batched else v.expand(M, -1).clone()

    def cmean(self, X: torch.Tensor) -> torch.Tensor:
        """The server's mean over the clients: ``[d]`` of ``[M, d]``; in a batch ``[R, d]`` of ``[R*M, d]``."""
        return X.unflatten(0, (self.runs, -1)).mean(1) if self.batched else mean(X)

    def per_row(self, t: torch.Tensor) -> torch.Tensor:
        """A per-client tensor of a draw (``[M, ...]``) for the client rows of the state: alone as it is, in a batch
        of one seed repeated for its R runs (``[R*M, ...]``, they share the draw); a seed batch's draws are the runs'
        own rows already."""
        if not self.batched or self.seed_runs is not None:
            return t
        return t.repeat(self.runs, *[1] * (t.dim() - 1))

    def first_row(self, X: torch.Tensor) -> torch.Tensor:
        """The common value of identical client rows (after averaging): ``X[0]``; in a batch each run's."""
        return X.unflatten(0, (self.runs, -1))[:, 0].clone() if self.batched else X[0].clone()


declare(Algorithm)  # its old attributes from its ``batch`` (a user's class may read them)


# the common names one may use for any algorithm that has the quantity (``Algorithm.aliases`` maps them to
# the algorithm's own key): name -> meaning
VOCABULARY = {
    "local_steps": "local steps between two averaging rounds (upper level, or the single level)",
    "lower_lr": "lower-level (inner, y) step size",
    "upper_lr": "upper-level (outer, x) step size",
    "neumann_lr": "step of the Hessian-inverse-vector estimate (Neumann step; FedBiO: its u-step)",
    "neumann_steps": "terms of the Hessian-inverse-vector estimate (Neumann terms / order)",
    "lower_rounds": "federated lower-level rounds per outer iteration",
}

# outer step-size schedules (``outer_lr_schedule``): alpha_t = alpha * factor(t, t0), t = 0, 1, ... the outer iteration
SCHEDULES = {
    "constant": lambda t, t0: 1.0,
    "inverse_sqrt": lambda t, t0: (t0 / (t0 + t)) ** 0.5,
    "inverse": lambda t, t0: t0 / (t0 + t),
}


class BilevelAlgorithm(Algorithm):
    """Shared machinery of the federated bilevel algorithms on a :class:`BilevelTask` with a global
    lower level: the global iterate ``(x, y)``, charged vectorized oracles, the federated lower
    round (Alg. 2 of FBO-AggITD, Xiao & Ji, ICML 2023, or FedAvg) and the SVRG-type local upper steps
    (FBO-AggITD Alg. 4)."""

    tasks: ClassVar[tuple[str, ...]] = ("hyperrep",)
    task: BilevelTask
    # its subclasses' runs batch (FedNest, FBO-AggITD), their seeds never
    batch: ClassVar[Batching] = NO_BATCH.but(seeds=BILEVEL_SEEDS)

    @classmethod
    def auto_batch(cls, hp: Any, task: str) -> bool:
        # local upper steps (tau > 1, :meth:`upper_local`) batch bit for bit but gain nothing batched (FBO-AggITD,
        # tau = 5, C = 0.1: 0.98x the steps one by one, `fbo bench --batch 8`; each step is each run's large
        # products): auto runs them alone
        return super().auto_batch(hp, task) and getattr(hp, "tau", 1) == 1

    def __init__(self, task: BilevelTask, hp: Any, fed: FederationView):
        if getattr(task, "local_lower", False):
            raise UsageError(f"'{self.name}' solves a global lower level (one shared y); this task has "
                             f"a lower level per client (lower=local): use lower=global, or an algorithm "
                             f"for local lower levels (fedbio-local, fedbioacc-local, adafbio)",
                             kind="unsupported", field="lower", value="local")
        super().__init__(task, hp, fed)
        self.x, self.y = task.init(fed.gen)

    def eval_point(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "y": self.y}

    def outer_lr(self) -> float:
        """The upper (outer) step of this outer iteration: ``hp.outer_lr`` times the declared schedule's
        factor (``outer_lr_schedule``, :data:`SCHEDULES`; constant: exactly ``hp.outer_lr``). A variant may
        override this one method (the template's DecayFedNest)."""
        hp = self.hp
        rule = getattr(hp, "outer_lr_schedule", "constant")
        if rule == "constant":
            return hp.outer_lr
        return hp.outer_lr * SCHEDULES[rule](self.ledger.iterations, getattr(hp, "outer_lr_t0", 1.0))

    # charged oracles -------------------------------------------------------------------------------
    def noise(self, batch: Batch) -> Batch:
        return self.task.noise(self.fed.gen, batch)

    def _charge(self, kind: str, batch: Batch, active: torch.Tensor | None = None, times: int = 1) -> None:
        w = batch["w"]
        if active is None and isinstance(self.ledger, Ledger):
            # the charge of a batch's weights, read once (an outer iteration charges the same full splits again and
            # again): on the CPU as Python ints, elsewhere as tensors the ledger sums there (no host sync)
            cache = self.__dict__.setdefault("_charged", {})
            hit = cache.get(id(w))
            if hit is None or hit[0] is not w:
                used = w > 0
                n = torch.stack([used.any(1).sum(), used.sum()])
                if len(cache) >= 8:
                    cache.clear()
                cache[id(w)] = hit = (w, n.tolist() if n.device.type == "cpu" else n.unbind())
            self.ledger.oracle(kind, hit[1][0] * times, hit[1][1] * times)
            return
        used = w > 0
        if active is not None:
            used = used & active[:, None]
        self.ledger.charge_rows(kind, used, times)

    # The oracles are the task's (``task.oracles(fn)``: closed forms where it has them, else the generic
    # vectorized ``torch.func`` ones); these methods charge the ledger, one call per client that uses
    # the batch. The ``_mean`` ones give the client mean ``[d]`` (charged per client all the same).
    def grad(self, fn: Callable, argnum: int, a, b, batch: Batch, active=None, charge: bool = True) -> torch.Tensor:
        if charge:
            self._charge("grads", batch, active)
        return self.task.oracles(fn).grad(argnum, a, b, batch)

    def grad_diff(self, fn: Callable, a, b1, b0, batch: Batch, active=None, charge: bool = True) -> torch.Tensor:
        """``∇_b fn(a, b1; ζ) - ∇_b fn(a, b0; ζ)`` on one batch ζ (the SVRG pair; two gradient calls)."""
        if charge:
            self._charge("grads", batch, active, times=2)
        return self.task.oracles(fn).svrg(a, b1, b0, batch)

    def hvp(self, fn: Callable, a, b, batch: Batch, v) -> torch.Tensor:
        self._charge("hvps", batch)
        return self.task.oracles(fn).hvp(a, b, batch, v)

    def cross(self, fn: Callable, a, b, batch: Batch, v) -> torch.Tensor:
        self._charge("jvps", batch)
        return self.task.oracles(fn).cross(a, b, batch, v)

    def grad_mean(self, fn: Callable, argnum: int, a, b, batch: Batch) -> torch.Tensor:
        self._charge("grads", batch)
        return self.task.oracles(fn).grad_mean(argnum, a, b, batch)

    def hvp_mean(self, fn: Callable, a, b, batch: Batch, v) -> torch.Tensor:
        self._charge("hvps", batch)
        return self.task.oracles(fn).hvp_mean(a, b, batch, v)

    def cross_mean(self, fn: Callable, a, b, batch: Batch, v) -> torch.Tensor:
        self._charge("jvps", batch)
        return self.task.oracles(fn).cross_mean(a, b, batch, v)

    # building blocks -------------------------------------------------------------------------------
    def local_lower(self, a, fn: Callable, split: Split, y: torch.Tensor, q: torch.Tensor | None,
                    lr: float, epochs: int, batch_size: int) -> torch.Tensor:
        """Local lower-level steps of every client from the global ``y``; returns ``[M, dy]``.

        ``q`` given: FedSVRG (FBO-AggITD Alg. 2 lines 3-6),
        ``y_i <- y_i - lr (∇G_i(y_i; ζ) - ∇G_i(y; ζ) + q)`` with the same minibatch and dropout
        masks in both terms. ``q`` None: FedAvg local SGD, ``y_i <- y_i - lr ∇G_i(y_i; ζ)``.
        """
        yi = self.spread(y, split.M)
        if self.batched and q is not None:  # per-run anchors [R, dy] beside the rows [R*M, dy]
            q = self.spread(q, split.M)
        # charged in bulk, as the per-step charges add up: every epoch visits each client's n_i examples
        # in ceil(n_i / batch_size) steps in which the client is active
        n = split.sizes
        k = (2 if q is not None else 1) * epochs
        self.ledger.oracle("grads", k * sum((c + batch_size - 1) // batch_size for c in n), k * sum(n))
        for batch, on in split.epochs(self.fed.gen, epochs, batch_size):
            batch = self.noise(batch)
            if q is not None:
                d = self.grad_diff(fn, a, yi, y, batch, charge=False) + q
            else:
                d = self.grad(fn, 1, a, yi, batch, charge=False)
            on = self.per_row(on)  # the clients active in this step (in a batch, for each run's rows)
            if isinstance(lr, (int, float)):  # y_i <- y_i - lr d on the active clients
                yi = torch.addcmul(yi, d, on, value=-lr)
            else:  # a step per run (a Rate): yi + round(-lr d) (0 or 1), as addcmul rounds it alone
                yi = torch.addcmul(yi, -lr * d, on)
        return yi

    def lower_anchor(self, a, fn: Callable, split: Split, y: torch.Tensor) -> torch.Tensor:
        """``[dy]``: the server's SVRG anchor ``q = mean_i ∇_y G_i(x, y)`` (full splits)."""
        return self.grad_mean(fn, 1, a, y, self.noise(split.full()))

    def upper_local(self, x: torch.Tensor, y: torch.Tensor, h: torch.Tensor, hg: "Hypergrad", tau: int, lr: float,
                    same_sample: bool) -> torch.Tensor:
        """SVRG-type local upper steps (FBO-AggITD Alg. 4 lines 1-6) on each client's full
        validation split: ``x_i <- x_i - lr (h - ∇_x F_i(x, y; ξ_i) + ∇_x F_i(x_i, y; ξ_{i,ν}))``.

        ``∇_x F_i(x, y; ξ_i)`` is the direct part already computed for ``h`` (Alg. 1 line 17 uses the
        same ξ_i), so it is reused, not recomputed. ``same_sample`` (FedNest): ξ_{i,ν} = ξ_i, so the
        first step is exactly ``h``; otherwise (FBO-AggITD) each step draws fresh dropout masks.
        Returns ``[M, dx]``. In a run batch (``x``, ``h`` per run ``[R, dx]``, ``hg`` stacked ``[R*M, dx]``) each
        local step's gradient is the runs' calls alone (``fbo_cli.algorithms.runs_as_clients``), the steps per run
        (``Rate``)."""
        M = hg.direct.shape[0] // self.runs
        if self.batched:  # each run's x and h on its clients' rows
            xi, h = self.spread(x, M), self.spread(h, M)
        else:
            xi = x.expand(M, -1)  # x_i = x (a view; every step below makes a new tensor)
        for nu in range(tau):
            if same_sample and nu == 0:
                xi = xi - lr * h
                continue
            b = hg.val if same_sample else self.noise(hg.val)
            at = x if nu == 0 else xi  # x_i = x before the first step: the global x (reuses its encoding)
            xi = xi - lr * (h - hg.direct + self.grad(self.task.f, 0, at, y, b))
        return xi

    def hypergradient(self, x: torch.Tensor, y: torch.Tensor, p: torch.Tensor, train: Split,
                      val: Split, per_client: bool = True) -> "Hypergrad":
        """``h_i = ∇_x F_i(x, y; ξ_i) - ∇_x∇_y G_i(x, y; χ_i) p`` on the full local splits (FBO-AggITD
        Alg. 1 line 17; FedNest's FedOut). Returns the per-client ``h_i [M, dx]``, the direct part and
        the validation batch ξ_i it used (with its dropout masks); ``per_client=False``: their client
        means ``[dx]`` instead (the same draws)."""
        vb = self.noise(val.full())
        if not per_client:
            direct = self.grad_mean(self.task.f, 0, x, y, vb)
            return Hypergrad(direct - self.cross_mean(self.task.g, x, y, self.noise(train.full()), p), direct, vb)
        direct = self.grad(self.task.f, 0, x, y, vb)
        h = direct - self.cross(self.task.g, x, y, self.noise(train.full()), p)
        return Hypergrad(h, direct, vb)

    def upper_round(self, x: torch.Tensor, y: torch.Tensor, train: Split, val: Split, p: torch.Tensor,
                    tau: int, lr: float, same_sample: bool,
                    need_h: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The hypergradient round and One-Round-Upper (:meth:`hypergradient`, :meth:`upper_local`):
        returns ``(h, x_new)``, ``h`` the server's mean hypergradient and ``x_new`` the mean of the
        clients' ``x_i`` after ``tau`` local steps. With ``tau = 1`` every step is affine in the
        clients' gradients, so only client means enter: ``x_new = x - lr h`` (``same_sample``), else
        ``x - lr (h - mean_i ∇_x F_i(x, y; ξ_i) + mean_i ∇_x F_i(x, y; ξ_{i,1}))`` (the same values).

        ``need_h=False`` (the caller discards ``h``), ``tau = 1``, fresh samples, on the fast path: with
        ``h = d - c`` (``d`` the direct part, ``c`` the cross term) that is ``x - lr (d' - c)``, so the
        direct part ``d`` is not computed (one [dx]-sized product fewer); its dropout masks are still
        drawn and its oracle calls still charged, so the draws and the ledger are those of the full
        round; returns ``(None, x_new)``. The generic path always computes the full round."""
        if tau > 1:
            hg = self.hypergradient(x, y, p, train, val)
            h = self.cmean(hg.h)
            return h, self.cmean(self.upper_local(x, y, h, hg, tau, lr, same_sample))
        f = self.task.f
        if not need_h and not same_sample and self.task.oracles(f).one_product_means:
            vb = self.noise(val.full())  # ξ_i, drawn as in hypergradient(); d = mean_i ∇_x F_i(x, y; ξ_i) cancels
            self._charge("grads", vb)
            c = self.cross_mean(self.task.g, x, y, self.noise(train.full()), p)
            return None, x - lr * (self.grad_mean(f, 0, x, y, self.noise(vb)) - c)
        hg = self.hypergradient(x, y, p, train, val, per_client=False)
        if same_sample:
            return hg.h, x - lr * hg.h
        return hg.h, x - lr * (hg.h - hg.direct + self.grad_mean(self.task.f, 0, x, y, self.noise(hg.val)))


@dataclass
class Hypergrad:
    h: torch.Tensor  # [M, dx] per-client hypergradients (or their mean [dx])
    direct: torch.Tensor  # [M, dx] their direct parts ∇_x F_i(x, y; ξ_i) (or their mean [dx])
    val: Batch  # the validation batch ξ_i (with its dropout masks)


def mean(t: torch.Tensor) -> torch.Tensor:
    """Server aggregation over the participating clients."""
    return cmean(t)
