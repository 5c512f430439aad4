"""Vectorized per-client oracles against explicit derivative matrices (float64)."""

import torch
from torch.autograd.functional import hessian, jacobian

from fbo_cli.sim.federation import per_client_cross, per_client_grad, per_client_hvp


def loss(a, b, batch):
    # a non-quadratic coupling of a and b, weighted over the batch rows
    z = batch["X"] @ b + torch.tanh(batch["X"][:, : a.shape[0]] @ a) * (b[:3] ** 2).sum()
    return (batch["w"] * (torch.log1p(torch.exp(z)) + 0.1 * z ** 2)).sum() + (a * b[: a.shape[0]]).sum() ** 2


def _setup(M=3, n=6, da=4, db=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    batch = {"X": r(M, n, db), "w": torch.rand(M, n, generator=g, dtype=torch.float64)}
    return batch, r(M, da), r(M, db), r(M, db)


def _mixed(a, b, bi):
    """J[k, j] = d/da_j d/db_k loss, by nested autograd.functional.jacobian."""
    return jacobian(lambda aa: jacobian(lambda bb: loss(aa, bb, bi), b, create_graph=True), a)


def test_grad_hvp_cross_match_explicit_matrices():
    batch, a, b, v = _setup()
    G = per_client_grad(loss, 1, a, b, batch)
    Ga = per_client_grad(loss, 0, a, b, batch)
    Hv = per_client_hvp(loss, a, b, batch, v)
    Jv = per_client_cross(loss, a, b, batch, v)
    for i in range(a.shape[0]):
        bi = {k: t[i] for k, t in batch.items()}
        torch.testing.assert_close(G[i], jacobian(lambda bb: loss(a[i], bb, bi), b[i]))
        torch.testing.assert_close(Ga[i], jacobian(lambda aa: loss(aa, b[i], bi), a[i]))
        torch.testing.assert_close(Hv[i], hessian(lambda bb: loss(a[i], bb, bi), b[i]) @ v[i])
        torch.testing.assert_close(Jv[i], _mixed(a[i], b[i], bi).T @ v[i])


def test_shared_arguments_broadcast():
    """Global (unstacked) a, b, v are shared by every client."""
    batch, a, b, v = _setup()
    a0, b0, v0 = a[0], b[0], v[0]
    Hv = per_client_hvp(loss, a0, b0, batch, v0)
    Jv = per_client_cross(loss, a0, b0, batch, v0)
    for i in range(a.shape[0]):
        bi = {k: t[i] for k, t in batch.items()}
        torch.testing.assert_close(Hv[i], hessian(lambda bb: loss(a0, bb, bi), b0) @ v0)
        torch.testing.assert_close(Jv[i], _mixed(a0, b0, bi).T @ v0)
