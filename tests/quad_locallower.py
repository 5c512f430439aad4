"""A quadratic federated bilevel problem with closed forms, for the local-lower-level tests.

Each example row is ``[a (dy), c (dx)]``. Client m's losses on a batch (weights ``w``):

    g_m(x, y) = Σ_j w_j ½ (a_j·y - c_j·x)² + ½ μ ||y||²          (μ-strongly convex in y)
    f_m(x, y) = Σ_j w_j ½ (a_j·y - c_j·x - 1)² + ½ ρ ||x||²

so ``∇²_yy g_m = A^T W A + μ I``, ``∇_xy g_m = -C^T W A`` and ``y*_m(x) = H_m^{-1} A^T W C x``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fbo_cli.algorithms.base import FederationView
from fbo_cli.data import build_federated
from fbo_cli.data.sources import Dataset
from fbo_cli.sim.federation import Ledger
from fbo_cli.tasks.base import BilevelTask

torch.set_num_threads(1)


class Quad(BilevelTask):
    name = "quad"

    @dataclass
    class Params:
        pass

    def __init__(self, data, dx: int, dy: int, local: bool, mu: float = 1.0, rho: float = 0.1):
        super().__init__(Quad.Params(), data)
        self.dx, self.dy, self.mu, self.rho = dx, dy, mu, rho
        self.local_lower = local

    def init(self, gen):
        x = torch.randn(self.dx, generator=gen) * 0.5
        y = torch.randn(self.dy, generator=gen) * 0.5
        if self.local_lower:
            y = y.expand(self.data.num_clients, -1).clone()
        return x, y

    def _parts(self, b):
        return b["X"][..., :self.dy], b["X"][..., self.dy:]

    def g(self, x, y, b):
        a, c = self._parts(b)
        r = a @ y - c @ x
        return (b["w"] * 0.5 * r * r).sum() + 0.5 * self.mu * (y * y).sum()

    def f(self, x, y, b):
        a, c = self._parts(b)
        r = a @ y - c @ x - 1.0
        return (b["w"] * 0.5 * r * r).sum() + 0.5 * self.rho * (x * x).sum()

    def evaluate(self, x, y):
        return {"test_acc": 0.0}

    # closed forms (one client's full splits) -----------------------------------------------------
    def mats(self, split, m: int):
        """``A^T W A``, ``A^T W C`` of client m's full split (weights 1/n_m)."""
        b = split.full()
        a, c = self._parts({k: v[m] for k, v in b.items()})
        w = b["w"][m]
        return a.T @ (w[:, None] * a), a.T @ (w[:, None] * c)

    def local_hypergrad(self, x, y, m: int) -> torch.Tensor:
        """Φ^(m)(x, y) = ∇_x f_m - ∇_xy g_m (∇²_yy g_m)^{-1} ∇_y f_m (exact, local Hessian)."""
        tr, va = self.data.split("train"), self.data.split("val")
        AA, AC = self.mats(tr, m)
        H = AA + self.mu * torch.eye(self.dy, dtype=x.dtype)
        bv = {k: v[m] for k, v in va.full().items()}
        gx, gy = torch.func.grad(self.f, argnums=(0, 1))(x, y, bv)
        return gx + AC.T @ torch.linalg.solve(H, gy)  # ∇_xy g = -(A^T W C)^T

    def y_star(self, x, m: int) -> torch.Tensor:
        AA, AC = self.mats(self.data.split("train"), m)
        return torch.linalg.solve(AA + self.mu * torch.eye(self.dy, dtype=x.dtype), AC @ x)

    def h(self, x) -> torch.Tensor:
        """Upper objective of the local-lower-level problem (eq. 5): mean_m f_m(x, y*_m(x))."""
        va = self.data.split("val").full()
        M = self.data.num_clients
        return sum(self.f(x, self.y_star(x, m), {k: v[m] for k, v in va.items()}) for m in range(M)) / M


def make(clients: int = 4, n: int = 160, dx: int = 3, dy: int = 4, local: bool = True, seed: int = 0,
         het: float = 1.0):
    """A tiny heterogeneous federation (iid partition of rows whose scale depends on the client's
    label block) with the quadratic task, and a FederationView for it."""
    g = torch.Generator().manual_seed(seed)
    lab = torch.arange(n) % clients
    a = torch.randn(n, dy, generator=g) / dy ** 0.5 * (1 + het * lab[:, None] / clients)
    c = torch.randn(n, dx, generator=g) + het * lab[:, None].float() / clients
    X = torch.cat([a, c], 1)
    ds = Dataset("quad", X, lab, X[:8], lab[:8], clients)
    part = "class-disjoint" if clients <= 10 else "iid"
    data = build_federated(ds, part, clients, seed, torch.device("cpu"), val_frac=0.5)
    task = Quad(data, dx, dy, local)
    fed = FederationView(data, 1.0, torch.Generator().manual_seed(seed), Ledger())
    return task, fed


def trunc_hypergrad(task, x, y, m: int, step: float, K: int) -> torch.Tensor:
    """Φ_K^(m)(x, y) = ∇_x f_m - ∇_xy g_m ϑ Σ_{j<K} (I - ϑ H_m)^j ∇_y f_m with explicit matrices."""
    tr, va = task.data.split("train"), task.data.split("val")
    AA, AC = task.mats(tr, m)
    H = AA + task.mu * torch.eye(task.dy, dtype=x.dtype)
    E = torch.eye(task.dy, dtype=x.dtype) - step * H
    S = step * sum(torch.linalg.matrix_power(E, j) for j in range(K))
    bv = {k: v[m] for k, v in va.full().items()}
    gx, gy = torch.func.grad(task.f, argnums=(0, 1))(x, y, bv)
    return gx + AC.T @ (S @ gy)


def grad_y_g(task, x, y, m: int) -> torch.Tensor:
    bt = {k: v[m] for k, v in task.data.split("train").full().items()}
    return torch.func.grad(task.g, argnums=1)(x, y, bt)
