"""Diagnostics of hypergradient estimators against the exact hypergradient.

``truncation_report``: on a bilevel task with per-client lower levels (``hyperrep`` with
``lower: local``), how much of the implicit term a truncated Neumann series keeps. At a point x with
every client's head solved to ``y_i ≈ y_i*(x)``, the exact local hypergradient of client i is

    h_i = ∇_x f_i(x, y_i) - ∇_x∇_y g_i(x, y_i) [∇²_y g_i(x, y_i)]^{-1} ∇_y f_i(x, y_i)

(the inverse applied by conjugate gradients, vectorized over clients), and the upper gradient is
``(1/m) Σ_i h_i``. A Neumann estimator with step τ and Q Hessian factors (FedBiO-Local eq. (6);
AdaFBiO eq. (13) in expectation over its random index k ∈ {0..K-1}, which is the same sum with
Q = K - 1) has the full-batch mean

    ĥ_i = ∇_x f_i - ∇_x∇_y g_i · τ Σ_{q=0}^{Q} (I - τ ∇²_y g_i)^q ∇_y f_i.

We report the cosine of (1/m) Σ_i ĥ_i with the exact gradient, beside the cosine of the direct part
(1/m) Σ_i ∇_x f_i alone, and the share of the implicit vector's norm the truncated series keeps.

``fbo diagnose truncation`` prints the table for the per-client-head Fashion-MNIST setting.
"""

from __future__ import annotations

import torch

from ..sim.federation import per_client_cross, per_client_grad, per_client_hvp


# Lower-level oracles in y alone. ``enc`` is the training batch encoded at x (tasks with ``reuse``:
# g depends on x only through the features, so ``g_enc`` has the same gradient and Hessian in y).
def _gy(task, Y, enc):
    return per_client_grad(task.g_enc, 1, Y.new_zeros(0), Y, enc)


def _hvp(task, Y, enc, v):
    return per_client_hvp(task.g_enc, Y.new_zeros(0), Y, enc, v)


def solve_heads(task, Y: torch.Tensor, enc: dict, steps: int = 500) -> torch.Tensor:
    """Every client's head to near optimality by gradient descent with step 1/L."""
    L = lipschitz(task, Y, enc)
    for _ in range(steps):
        Y = Y - _gy(task, Y, enc) / L
    return Y


def lipschitz(task, Y, enc, iters: int = 50) -> float:
    """Largest eigenvalue over clients of ∇²_y g_i (power iteration)."""
    v = torch.randn_like(Y)
    for _ in range(iters):
        v = _hvp(task, Y, enc, v)
        lam = v.norm(dim=1)
        v = v / lam[:, None]
    return float(lam.max())


def cg(task, Y, enc, rhs: torch.Tensor, iters: int = 500, tol: float = 1e-12) -> torch.Tensor:
    """``[∇²_y g_i]^{-1} rhs_i`` for every client at once (conjugate gradients)."""
    z = torch.zeros_like(rhs)
    r = rhs.clone()
    p = r.clone()
    rr = (r * r).sum(1)
    for _ in range(iters):
        Ap = _hvp(task, Y, enc, p)
        a = rr / (p * Ap).sum(1).clamp_min(1e-300)
        z = z + a[:, None] * p
        r = r - a[:, None] * Ap
        rr_new = (r * r).sum(1)
        if float(rr_new.max().sqrt()) < tol:
            break
        p = r + (rr_new / rr)[:, None] * p
        rr = rr_new
    return z


def truncated(task, Y, enc, v: torch.Tensor, step: float, Q: int) -> torch.Tensor:
    """``τ Σ_{q=0}^{Q} (I - τ ∇²_y g_i)^q v_i`` per client."""
    acc = v
    for _ in range(Q):
        v = v - step * _hvp(task, Y, enc, v)
        acc = acc + v
    return step * acc


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a * b).sum() / (a.norm() * b.norm()).clamp_min(1e-300))


def truncation_report(task, x: torch.Tensor, Y: torch.Tensor, settings: list[tuple[str, float, int]],
                      solve_steps: int = 500, max_examples: int | None = None) -> dict:
    """Cosines with the exact upper gradient at ``x`` (heads solved first) for each
    ``(name, step, Q)``; also ``direct`` and ``L`` (the largest lower Hessian eigenvalue).
    ``max_examples``: use only the first that many examples of each client's splits."""
    data = task.data

    def batch(which):
        sp = data.split(which)
        n = sp.mask.shape[1] if max_examples is None else min(max_examples, sp.mask.shape[1])
        b = sp.gather(torch.arange(n, device=sp.mask.device).expand(sp.M, n))
        return {k: v.to(x.dtype) if v.is_floating_point() else v for k, v in b.items()}

    train, val = batch("train"), batch("val")
    xs = x.expand(Y.shape[0], -1)
    enc = {**train, "X": torch.vmap(task.encode)(xs, train["X"])}
    Y = solve_heads(task, Y, enc, solve_steps)
    gx = per_client_grad(task.f, 0, xs, Y, val)
    gy = per_client_grad(task.f, 1, xs, Y, val)
    exact_s = cg(task, Y, enc, gy)
    implicit = per_client_cross(task.g, xs, Y, train, exact_s)
    exact = (gx - implicit).mean(0)
    out = {"L": lipschitz(task, Y, enc), "direct": _cos(gx.mean(0), exact),
           "residual_grad_y": float(_gy(task, Y, enc).norm(dim=1).max())}
    for name, step, Q in settings:
        s = truncated(task, Y, enc, gy, step, Q)
        imp = per_client_cross(task.g, xs, Y, train, s)
        out[name] = {"step": step, "Q": Q, "cos": _cos((gx - imp).mean(0), exact),
                     "implicit_kept": float(imp.mean(0).norm() / implicit.mean(0).norm()),
                     "implicit_cos": _cos(imp.mean(0), implicit.mean(0))}
    return out


def truncation(dataset: str = "fashion-mnist", grid: bool = False, rounds: int = 0, max_examples: int = 1000,
               echo=print) -> None:
    """How much of the implicit term each local-lower-level estimator keeps (``fbo diagnose truncation``)."""
    from types import SimpleNamespace

    from ..runs.config import resolve
    from ..runs.runner import build

    a = SimpleNamespace(dataset=dataset, grid=grid, rounds=rounds, max_examples=max_examples)
    cfg = resolve("hyperrep", "fedbio-local", {"dataset": a.dataset, "clients": 10, "participation": 1.0,
                                                "partition": "dirichlet", "alpha": 0.5, "lower": "local",
                                                "dropout": 0.0, "reg": "l2", "reg_coef": 0.01, "device": "cpu"})
    b = build(cfg)
    for _ in range(a.rounds):
        b.algo.step()
    task = b.task
    torch.set_default_dtype(torch.float64)
    x, Y = b.algo.x[0].double(), b.algo.y.double()
    from ..algorithms import REGISTRY

    if a.grid:
        settings = [(f"step={s} Q={q}", s, q) for s in (0.01, 0.03, 0.1, 0.3) for q in (5, 10, 20, 40)]
    else:
        settings = []
        for name in ("fedbio-local", "fedbioacc-local", "adafbio"):
            hp = REGISTRY[name].cls.HP()
            if name == "adafbio":
                settings.append((name, hp.neumann_step, hp.K - 1))
            else:
                settings.append((name, hp.neumann_step, hp.Q))
    rep = truncation_report(task, x, Y, settings, max_examples=a.max_examples)
    echo(f"after {a.rounds} rounds of FedBiO-Local at its defaults; {a.max_examples} examples per client")
    echo(f"L = {rep['L']:.2f}, direct-gradient cosine = {rep['direct']:.3f}, "
         f"max ||grad_y g|| after solve = {rep['residual_grad_y']:.2e}")
    for name, step, Q in settings:
        r = rep[name]
        echo(f"{name:24s} step={step:<7g} Q={Q:<3d} cos={r['cos']:.3f} implicit kept={r['implicit_kept']:.3f} "
              f"implicit cos={r['implicit_cos']:.3f}")

