"""The simulator's shared machinery: ledger, client sampling, client splits, vectorized oracles.

Conventions used by every algorithm:

* Every optimization variable is a *flat* vector. A global variable is a tensor ``[d]``; the copies
  held by ``M`` participating clients are stacked on a leading client dimension, ``[M, d]``.
* Per-client work is vectorized with ``torch.func.vmap`` over that dimension; a Python loop over
  clients in the hot path is a bug. Loops over local steps are fine.
* Aggregation is a mean over the client dimension; sampling participating clients is a gather.
* Randomness (client sets, minibatches, dropout masks, random truncation indices) is drawn from the
  run's single ``torch.Generator`` outside of ``vmap``, so a run is bit-for-bit reproducible on CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch
from torch.func import grad, jvp, vjp, vmap

from ..data.split import Batch, Split

__all__ = ["Batch", "Split", "Ledger", "sample_clients", "cmean", "per_client_grad", "per_client_hvp",
           "per_client_head_hvp", "per_client_cross", "per_client_value", "Oracles"]


# --------------------------------------------------------------------------------------------------
# Ledger

_LAZY = frozenset({"grads", "hvps", "jvps", "samples"})


@dataclass
class Ledger:
    """Exact accounting of one run.

    ``rounds`` counts communication rounds as each paper counts them: one round is one
    "for i in S in parallel do" step (clients upload, the server aggregates and broadcasts).
    ``floats_up``/``floats_down`` add up the payload over all participating clients.
    Oracle counters count one call per client (a minibatch gradient is one call); ``samples``
    counts the data points those calls touched.
    """

    rounds: int = 0
    iterations: int = 0
    floats_up: int = 0
    floats_down: int = 0
    grads: int = 0
    hvps: int = 0
    jvps: int = 0
    samples: int = 0

    def comm(self, clients: int, up: int, down: int | None = None, rounds: int = 1) -> None:
        """Charge ``rounds`` communication round(s) in which each of ``clients`` clients uploads
        ``up`` floats and receives ``down`` floats (default: as many as it sent)."""
        self.rounds += rounds
        self.floats_up += clients * up
        self.floats_down += clients * (up if down is None else down)

    def __post_init__(self) -> None:
        self._pending: dict[str, torch.Tensor] = {}

    def oracle(self, kind: str, calls: int | torch.Tensor, samples: int | torch.Tensor = 0) -> None:
        """Count ``calls`` oracle calls touching ``samples`` data points. Counts given as tensors on an
        accelerator are summed there and read back only when the ledger is read (no host sync per step)."""
        if isinstance(calls, torch.Tensor) and calls.device.type != "cpu":
            p = self._pending
            p[kind] = p[kind] + calls if kind in p else calls
            p["samples"] = p["samples"] + samples if "samples" in p else samples
            return
        setattr(self, kind, getattr(self, kind) + int(calls))
        self.samples += int(samples)

    def charge_rows(self, kind: str, used: torch.Tensor, times: int = 1) -> None:
        """Charge one ``kind`` call per client row of ``used [M, n]`` (the rows a client's oracle reads) that reads
        any, ``times`` over, and the rows it reads (a seed batch charges each run's rows to its own ledger)."""
        self.oracle(kind, used.any(1).sum() * times, used.sum() * times)

    def settle(self) -> None:
        pending, self._pending = self._pending, {}
        for k, v in pending.items():
            setattr(self, k, getattr(self, k) + int(v))

    def __getattribute__(self, name: str):
        if name in _LAZY and object.__getattribute__(self, "_pending"):
            object.__getattribute__(self, "settle")()
        return object.__getattribute__(self, name)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# Client sampling and aggregation


def sample_clients(gen: torch.Generator, m: int, participation: float, device=None) -> torch.Tensor:
    """Uniformly without replacement, ``max(1, int(participation * m))`` clients (FedNest repo rule)."""
    k = max(1, int(round(participation * m, 9)))
    if k >= m:
        return torch.arange(m, device=device)
    return torch.randperm(m, generator=gen, device=gen.device)[:k].sort().values.to(device)


def cmean(t: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Server aggregation: (weighted) mean over the client dimension."""
    if weights is None:
        return t.mean(0)
    w = weights / weights.sum()
    return torch.tensordot(w.to(t.dtype), t, dims=1)


# (op, shapes, dtype, device, threads) -> whether the fast way gave the exact way's bits
SAME_BITS: dict[tuple, bool] = {}


def same_bits(key: tuple, fast: Callable[[], torch.Tensor], exact: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``fast()`` where it gives the bits of ``exact()``, else ``exact()``: checked on the first call of each
    ``key`` (the op and its shapes) and remembered. A run batch's products (fbo_cli/algorithms/runs_as_clients.py) use
    it where the
    R runs' rows stacked into one product (``fast``: the runs' heads side by side on the clients' shared
    features, or their globals in one call) compute each element as the same dot product as the run alone
    (``exact``: the features repeated, or the calls run by run). Whether the bits agree depends on the kernels the
    BLAS picks for the shapes (MKL on this CPU: the same for C >= 4 rows a run, others for 2 or 3). Off the CPU
    the fast way is taken unchecked: a batch there promises *agrees*, not the run alone's bits (the GPU's
    kernels differ with the shapes, and the exact way, a product per run, is what a batch is for avoiding;
    docs/fidelity.md#batches)."""
    key = (*key, torch.get_num_threads())
    ok = SAME_BITS.get(key)
    if ok is None:
        s = fast()
        if s.device.type != "cpu":
            SAME_BITS[key] = True
            return s
        r = exact()
        SAME_BITS[key] = bool(((s == r) | (s.isnan() & r.isnan())).all())
        return r
    return fast() if ok else exact()


# --------------------------------------------------------------------------------------------------
# Vectorized per-client oracles
#
# ``fn(a, b, batch) -> scalar`` is one client's loss. ``a``/``b`` are either global (``[d]``, shared
# by every client) or stacked (``[M, d]``); ``batch`` always carries the client dimension. The
# helpers below return stacked results ``[M, ...]``.


def _d(t: torch.Tensor) -> int | None:
    """vmap in-dim of an argument: 0 when stacked over clients (``[M, d]``), None when global (``[d]``)."""
    return 0 if t.dim() == 2 else None


def per_client_grad(fn: Callable, argnum: int, a: torch.Tensor, b: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``[M, d]``: each client's gradient of ``fn(a, b, batch_i)`` w.r.t. argument ``argnum``."""
    dims = (_d(a), _d(b), 0)
    return vmap(grad(fn, argnums=argnum), in_dims=dims)(a, b, batch)


def per_client_hvp(fn: Callable, a: torch.Tensor, b: torch.Tensor, batch: Batch, v: torch.Tensor) -> torch.Tensor:
    """``[M, d_b]``: each client's Hessian-vector product ``∇²_b fn(a, b; batch_i) v_i``
    (forward-over-reverse). ``v`` is global ``[d_b]`` or stacked ``[M, d_b]``."""

    def one(a_, b_, batch_, v_):
        return jvp(lambda bb: grad(fn, argnums=1)(a_, bb, batch_), (b_,), (v_,))[1]

    dims = (_d(a), _d(b), 0, _d(v))
    return vmap(one, in_dims=dims)(a, b, batch, v)


def per_client_head_hvp(fn: Callable, a: torch.Tensor, b: torch.Tensor, batch: Batch, v: torch.Tensor) -> torch.Tensor:
    """``[M, d_b]``: the same product as :func:`per_client_hvp` by reverse-over-reverse autograd
    (``∇_b ⟨∇_b fn, v⟩``, the Hessian is symmetric), for stacked ``b`` and ``v``; on the CPU faster than
    forward-over-reverse for the small heads the local Neumann estimators apply it to."""

    def one(a_, b_, batch_, v_):
        return grad(lambda bb: (grad(fn, argnums=1)(a_, bb, batch_) * v_).sum())(b_)

    return vmap(one, in_dims=(_d(a), 0, 0, 0))(a, b, batch, v)


def per_client_cross(fn: Callable, a: torch.Tensor, b: torch.Tensor, batch: Batch, v: torch.Tensor) -> torch.Tensor:
    """``[M, d_a]``: each client's Jacobian-vector product ``∇_a∇_b fn(a, b; batch_i) v_i``,
    i.e. ``∂⟨∇_b fn(a, b; batch_i), v_i⟩ / ∂a`` (reverse-over-reverse)."""

    def one(a_, b_, batch_, v_):
        _, pull = vjp(lambda aa: grad(fn, argnums=1)(aa, b_, batch_), a_)
        return pull(v_)[0]

    dims = (_d(a), _d(b), 0, _d(v))
    return vmap(one, in_dims=dims)(a, b, batch, v)


def per_client_value(fn: Callable, a: torch.Tensor, b: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``[M]``: each client's loss value."""
    dims = (_d(a), _d(b), 0)
    return vmap(fn, in_dims=dims)(a, b, batch)


# --------------------------------------------------------------------------------------------------
# A loss's oracles


class Oracles:
    """The derivative oracles of one loss ``fn(a, b, batch)`` of a task, vectorized over the clients
    (``task.oracles(fn)``): this class is the generic ``torch.func`` path, and a task subclasses it to
    replace the ones it has in closed form (the same values, exact derivatives, no random draws). The
    algorithms charge the ledger; the oracles only compute.

    * ``grad(argnum, a, b, batch)`` ``[M, d]``; ``grads(a, b, batch)`` both arguments' at once;
    * ``svrg(a, b1, b0, batch)``: the gradient difference ``∇_b fn(a, b1) - ∇_b fn(a, b0)`` on one batch;
    * ``hvp(a, b, batch, v)`` ``∇²_b fn v`` (forward-over-reverse), ``head_hvp`` the same product
      reverse-over-reverse (the local Neumann estimators' HVP); ``cross(a, b, batch, v)`` ``∇_a∇_b fn v``;
    * ``grad_mean``, ``hvp_mean``, ``cross_mean``: their client means ``[d]``. ``one_product_means`` is
      True where a subclass computes them as one product over all clients' rows, without the
      ``[M, d]`` stack (FBO-AggITD's upper round then skips a term that cancels)."""

    one_product_means = False
    # a run batch's folded call (fbo_cli/algorithms/runs_as_clients.py) sets the number of runs R: the oracles that
    # declare ``run_globals`` then read a global [R, d] as each run's for its R*M // R client rows
    runs = 1

    def __init__(self, fn: Callable):
        self.fn = fn

    def grad(self, argnum: int, a, b, batch: Batch) -> torch.Tensor:
        return per_client_grad(self.fn, argnum, a, b, batch)

    def grads(self, a, b, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        return per_client_grad(self.fn, (0, 1), a, b, batch)

    def svrg(self, a, b1, b0, batch: Batch) -> torch.Tensor:
        return self.grad(1, a, b1, batch) - self.grad(1, a, b0, batch)

    def hvp(self, a, b, batch: Batch, v) -> torch.Tensor:
        return per_client_hvp(self.fn, a, b, batch, v)

    def head_hvp(self, a, b, batch: Batch, v) -> torch.Tensor:
        return per_client_head_hvp(self.fn, a, b, batch, v)

    def cross(self, a, b, batch: Batch, v) -> torch.Tensor:
        return per_client_cross(self.fn, a, b, batch, v)

    def grad_mean(self, argnum: int, a, b, batch: Batch) -> torch.Tensor:
        return cmean(self.grad(argnum, a, b, batch))

    def hvp_mean(self, a, b, batch: Batch, v) -> torch.Tensor:
        return cmean(self.hvp(a, b, batch, v))

    def cross_mean(self, a, b, batch: Batch, v) -> torch.Tensor:
        return cmean(self.cross(a, b, batch, v))
