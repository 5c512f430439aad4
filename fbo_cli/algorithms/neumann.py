"""The per-client Neumann-series hypergradient of the local-lower-level estimators (FedBiO eq. (6);
AdaFBiO eq. (13)): each client inverts its own lower Hessian by a truncated Neumann series, with no
communication. Its Hessian-vector product is the oracles' ``head_hvp`` (reverse-over-reverse, for the
small heads these estimators apply it to; ``hvp``, forward-over-reverse, is the global-lower-level
methods').
"""

from __future__ import annotations

import torch

from ..errors import UsageError


def neumann_hypergrad(f, g, x: torch.Tensor, y: torch.Tensor, bf: dict, bj: dict, hess: list[dict],
                      step: float, mode: str = "sum", k: torch.Tensor | None = None,
                      charge=None, hess_fn=None, hess_arg: torch.Tensor | None = None,
                      K: int | None = None, oracles=None) -> torch.Tensor:
    """Per-client local hypergradient estimate ``[M, dx]`` at stacked points ``x [M, dx]``,
    ``y [M, dy]`` with a Neumann series of the client's own lower Hessian (no communication):

    * ``mode="sum"`` (FedBiO eq. (6)): ``Φ = ∇_x f(ξ_f) - τ ∇_xy g(ξ_g) Σ_{q=0}^{Q} Π_{j≤q}
      (I - τ ∇²_yy g(ξ_j)) ∇_y f(ξ_f)``, with Q = ``len(hess)`` independent Hessian batches;
    * ``mode="random"`` (AdaFBiO eq. (13)): ``∇_x f(ξ) - ∇_xy g(ζ_0) K ϑ Π_{i=1}^{k}
      (I - ϑ ∇²_yy g(ζ_i)) ∇_y f(ξ)`` with K = ``len(hess) + 1`` and a per-client index
      ``k [M]`` ∈ {0..K-1}; client i applies only its first k_i Hessian factors. ``K`` given: the
      scale K ϑ uses it (then ``hess`` may hold just the first max(k) batches).

    ``bf`` = ξ_f (upper batch, used for both ∇_x f and ∇_y f), ``bj`` = ξ_g / ζ_0 (the Jacobian batch),
    ``hess`` = the Hessian batches; every batch carries the client dimension. ``charge(kind, calls)``
    records oracle calls (one per client per call). Hessian- and Jacobian-vector products are
    forward-over-reverse / reverse-over-reverse autograd; no matrix is formed.

    ``hess_fn(hess_arg, y, b)`` (optional) is the lower loss the HVPs use instead of ``g(x, y, b)``,
    for batches ``hess`` already encoded at x (a task's ``g_enc``, see ``BilevelTask.lower_view``):
    the same Hessian in y, without re-running the representation inside every HVP.

    ``oracles(fn)`` (optional, a task's ``oracles``): the derivatives of ``f``, ``g`` and the Hessian's loss,
    in closed form where the task has them (the same values up to rounding); by default the generic
    :class:`fbo_cli.sim.federation.Oracles`.

    In a run batch (the points ``[R*M', ...]``, run-major) an entry of a Hessian batch may hold the ``M'`` rows
    drawn once for the R runs: each product takes the rows it needs of it (:func:`take`), without the batch
    repeated R times first.
    """
    from ..sim.federation import Oracles

    M = x.shape[0]
    charge = charge or (lambda kind, calls: None)
    oracles = oracles or Oracles
    of, og, oh = oracles(f), oracles(g), oracles(hess_fn or g)
    hvp = oh.head_hvp

    gx, gy = of.grads(x, y, bf)
    charge("grads", M)
    v = gy
    xh = x if hess_fn is None else hess_arg
    if mode == "sum":
        acc = v
        for b in hess:
            v = v - step * hvp(xh, y, take(b, None, M), v)
            acc = acc + v
            charge("hvps", M)
        s = step * acc
    elif mode == "random":
        if k is None:
            raise ValueError("mode='random' needs the per-client Neumann index k")
        K = len(hess) + 1 if K is None else K
        if len(hess) < int(k.max()):
            raise ValueError("mode='random' needs at least max(k) Hessian batches")
        for i, b in enumerate(hess, start=1):
            live = k >= i
            n = int(live.sum())
            if n == 0:
                break
            if n == M:
                v = v - step * hvp(xh, y, take(b, None, M), v)
            else:  # only the clients whose k_i reaches this factor do the work
                sel = live.nonzero().squeeze(1)
                bs = take(b, sel, M)
                xs = xh[sel] if xh.dim() == 2 else xh
                v = v.index_put((sel,), v[sel] - step * hvp(xs, y[sel], bs, v[sel]))
            charge("hvps", n)
        s = K * step * v
    else:
        raise UsageError(f"neumann must be sum or random; got '{mode}'", kind="bad_value", field="neumann", value=mode)
    charge("jvps", M)
    return gx - og.cross(x, y, bj, s)


def take(b: dict, sel: torch.Tensor | None, n: int) -> dict:
    """Rows ``sel`` (None: all) of a batch for ``n`` points: an entry of ``n`` rows is indexed, one of ``m`` rows
    (drawn once for ``n / m`` runs, run-major) is read at row ``i mod m`` for point ``i`` (the same values as the
    entry repeated, one copy instead of two)."""
    out = {}
    for key, t in b.items():
        m = t.shape[0]
        if m == n:
            out[key] = t if sel is None else t[sel]
        elif sel is None:
            out[key] = t.repeat(n // m, *[1] * (t.dim() - 1))
        else:
            out[key] = t.index_select(0, sel % m)
    return out
