"""A quadratic federated bilevel problem with heterogeneous clients and a closed-form hypergradient,
for testing estimators (not a CLI task).

Client i (float64):
    g_i(x, y) = 1/2 yᵀ A_i y - yᵀ B_i x - c_iᵀ y          (A_i symmetric positive definite)
    f_i(x, y) = 1/2 ||y - d_i||² + e/2 ||x||²
Global lower level g = mean_i g_i: y*(x) = A⁻¹ (B x + c) with A, B, c the client means, and
    ∇f(x) = e x + Bᵀ A⁻¹ (y*(x) - d̄)                      (implicit function theorem, eq. 2 of Xiao & Ji, ICML 2023)
The fully local (LFedNest-type) estimator mean_i [e x + B_iᵀ A_i⁻¹ (y - d_i)] differs from it when the
clients differ.

Each client's data is one pool row holding its flattened (A_i, B_i, c_i, d_i); every split of client
i is that one row, so all local gradients are exact (no sampling noise).
"""

from __future__ import annotations

import torch

from ..data import Dataset, FederatedData
from ..sim.federation import Batch
from .base import BilevelTask


class Quadratic(BilevelTask):
    name = "quadratic"
    metric = "grad_error"

    def __init__(self, m: int = 4, dx: int = 3, dy: int = 5, e: float = 0.1, hetero: float = 1.0, seed: int = 0,
                 mu: float = 1.0, L: float = 3.0):
        g = torch.Generator().manual_seed(seed)
        dt = torch.float64
        A = []
        for _ in range(m):
            Qm, _ = torch.linalg.qr(torch.randn(dy, dy, generator=g, dtype=dt))
            ev = mu + (L - mu) * torch.rand(dy, generator=g, dtype=dt)
            A.append(Qm @ torch.diag(ev) @ Qm.T)
        A = torch.stack(A)
        B0 = torch.randn(dy, dx, generator=g, dtype=dt)
        B = B0 + hetero * torch.randn(m, dy, dx, generator=g, dtype=dt)
        c = torch.randn(m, dy, generator=g, dtype=dt)
        d = hetero * torch.randn(m, dy, generator=g, dtype=dt)
        self.A, self.B, self.c, self.d, self.e = A, B, c, d, e
        self.dx, self.dy, self.m = dx, dy, m
        rows = torch.cat([A.flatten(1), B.flatten(1), c, d], 1)
        ds = Dataset("quadratic", rows, torch.zeros(m, dtype=torch.long), rows[:1], torch.zeros(1, dtype=torch.long), 1)
        idx = torch.arange(m)[:, None]
        mask = torch.ones(m, 1, dtype=torch.bool)
        data = FederatedData(ds, rows, ds.y_train, ds.X_test, ds.y_test, idx, mask, idx.clone(), mask.clone())
        super().__init__(None, data)

    def _unpack(self, row: torch.Tensor):
        dx, dy = self.dx, self.dy
        o = 0
        A = row[o:o + dy * dy].view(dy, dy)
        o += dy * dy
        B = row[o:o + dy * dx].view(dy, dx)
        o += dy * dx
        return A, B, row[o:o + dy], row[o + dy:o + 2 * dy]

    def init(self, gen):
        return torch.zeros(self.dx, dtype=torch.float64), torch.zeros(self.dy, dtype=torch.float64)

    def f(self, x, y, b: Batch):
        out = x.new_zeros(())
        for j in range(b["X"].shape[0]):
            _, _, _, d = self._unpack(b["X"][j])
            out = out + b["w"][j] * (0.5 * ((y - d) ** 2).sum() + 0.5 * self.e * (x * x).sum())
        return out

    def g(self, x, y, b: Batch):
        out = x.new_zeros(())
        for j in range(b["X"].shape[0]):
            A, B, c, _ = self._unpack(b["X"][j])
            out = out + b["w"][j] * (0.5 * y @ A @ y - y @ B @ x - c @ y)
        return out

    # closed forms --------------------------------------------------------------------------------
    def y_star(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.solve(self.A.mean(0), self.B.mean(0) @ x + self.c.mean(0))

    def hypergrad(self, x: torch.Tensor) -> torch.Tensor:
        A, B = self.A.mean(0), self.B.mean(0)
        return self.e * x + B.T @ torch.linalg.solve(A, self.y_star(x) - self.d.mean(0))

    def local_hypergrad(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """mean_i of each client's own implicit hypergradient at y (the LFedNest target)."""
        terms = [self.e * x + self.B[i].T @ torch.linalg.solve(self.A[i], y - self.d[i]) for i in range(self.m)]
        return torch.stack(terms).mean(0)

    def evaluate(self, x, y):
        return {"grad_error": float((self.hypergrad(x)).norm())}
