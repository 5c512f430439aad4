"""Closed-form derivatives of a weighted softmax cross-entropy head on fixed features (the fast path).

``ℓ(y; A) = Σ_n w_n CE(W a_n + b, t_n)`` with the head ``y = (W [C, h], b [C])`` flattened as the
tasks' layouts do (W row-major, then b), features ``A [M, n, h]`` (client-stacked) and per-example
weights ``w [M, n]``. With ``P = softmax(A Wᵀ + b)`` and ``E = onehot(t)``, per client:

* gradient:  ``∇_W ℓ = Rᵀ A``, ``∇_b ℓ = Σ_n R_n`` with ``R = w (P - E)``;
* Hessian-vector product for ``v = (V, c)``: ``U = A Vᵀ + c`` (the logits' directional change),
  ``S = w (P ⊙ U - P (P·U))`` (the softmax Jacobian ``diag p - p pᵀ`` applied row by row), then
  ``∇²ℓ v = (Sᵀ A, Σ_n S_n)``;
* derivative w.r.t. the features of ``⟨∇_y ℓ, v⟩``: ``S W + R V`` (the cross term's inner part);
  of ``ℓ`` itself: ``R W``.

These are the exact derivatives (no approximation): the generic path's autograd computes the same
expressions, one example at a time through ``vmap``. ``y`` and ``v`` are global ``[dy]`` or stacked
``[M, dy]``; results are stacked ``[M, ...]``.
"""

from __future__ import annotations

import torch


class SoftmaxHead:
    def __init__(self, classes: int, width: int):
        self.C, self.h = classes, width

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W, b)``: ``[C, h], [C]`` for a global head, ``[M, C, h], [M, 1, C]`` for stacked heads."""
        W = y[..., : self.C * self.h].unflatten(-1, (self.C, self.h))
        b = y[..., self.C * self.h:]
        return W, (b.unsqueeze(-2) if y.dim() == 2 else b)

    def probs(self, y: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        W, b = self.split(y)
        # softmax over C through the transposed view: the same values; on the CPU the kernel for a
        # non-innermost dim vectorizes over the n examples and runs ~10x faster for C = 10
        return torch.softmax((A @ W.mT + b).mT, -2).mT

    def residual(self, P: torch.Tensor, t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``R = w (P - E)``, ``[M, n, C]``."""
        return (P - torch.nn.functional.one_hot(t, self.C).to(P.dtype)) * w.unsqueeze(-1)

    @staticmethod
    def flat(gW: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        return torch.cat([gW.flatten(-2), gb], -1)

    def grad(self, y, A, t, w) -> torch.Tensor:
        """``[M, dy]``: ``∇_y ℓ``."""
        R = self.residual(self.probs(y, A), t, w)
        return self.flat(R.mT @ A, R.sum(-2))

    def grad_diff(self, y1, y0, A, t, w) -> torch.Tensor:
        """``[M, dy]``: ``∇_y ℓ(y1) - ∇_y ℓ(y0)`` on the same batch (the SVRG pair, one product)."""
        D = self.probs(y1, A) - self.probs(y0, A)  # the one-hot parts cancel
        D = D * w.unsqueeze(-1)
        return self.flat(D.mT @ A, D.sum(-2))

    def _S(self, P, A, v, w) -> torch.Tensor:
        V, c = self.split(v)
        U = A @ V.mT + c
        return (P * U - P * (P * U).sum(-1, keepdim=True)) * w.unsqueeze(-1)

    def hvp(self, y, A, t, w, v) -> torch.Tensor:
        """``[M, dy]``: ``∇²_y ℓ v``."""
        S = self._S(self.probs(y, A), A, v, w)
        return self.flat(S.mT @ A, S.sum(-2))

    def dA(self, y, A, t, w) -> torch.Tensor:
        """``[M, n, h]``: ``∂ℓ/∂A``."""
        return self.residual(self.probs(y, A), t, w) @ self.split(y)[0]

    def cross_dA(self, y, A, t, w, v) -> torch.Tensor:
        """``[M, n, h]``: ``∂⟨∇_y ℓ, v⟩/∂A = S W + R V``."""
        P = self.probs(y, A)
        W, V = self.split(y)[0], self.split(v)[0]
        return self._S(P, A, v, w) @ W + self.residual(P, t, w) @ V

    def cross_dw(self, y, A, t, v) -> torch.Tensor:
        """``[M, n]``: ``∂⟨∇_y ℓ, v⟩/∂w_n = (p_n - e_n)ᵀ u_n`` (for per-example weights that depend on x)."""
        V, c = self.split(v)
        E = torch.nn.functional.one_hot(t, self.C)
        return ((self.probs(y, A) - E.to(A.dtype)) * (A @ V.mT + c)).sum(-1)

    def ce(self, y, A, t) -> torch.Tensor:
        """``[M, n]``: the per-example cross-entropies."""
        W, b = self.split(y)
        L = torch.log_softmax(A @ W.mT + b, -1)
        return -L.gather(-1, t.unsqueeze(-1)).squeeze(-1)
