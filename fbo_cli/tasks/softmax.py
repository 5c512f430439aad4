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

from ..sim.federation import same_bits


def _by_client(T: torch.Tensor, R: int) -> torch.Tensor:
    """``[M, R*p, q]`` of a run-major ``[R*M, p, q]``: each client's rows of the R runs, stacked."""
    N, p, q = T.shape
    return T.view(R, N // R, p, q).transpose(0, 1).reshape(N // R, R * p, q)


def _by_run(T: torch.Tensor, R: int) -> torch.Tensor:
    """The inverse of :func:`_by_client`: ``[R*M, p, q]`` (run-major) of ``[M, R*p, q]``."""
    M, Rp, q = T.shape
    return T.view(M, R, Rp // R, q).transpose(0, 1).reshape(R * M, Rp // R, q)


def _times_features(Kt: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """``[N, p, h]``: ``Kt [N, p, n]`` times the features ``A [N, n, h]`` per client; in a run batch ``A`` may
    be the ``M`` clients' features shared by the R runs of ``Kt``'s ``N = R*M`` rows (``same_bits``)."""
    R = Kt.shape[0] // A.shape[0]
    if R <= 1:
        return Kt @ A
    return same_bits(("mm", tuple(Kt.shape), tuple(A.shape), A.dtype, A.device),
                     lambda: _by_run(_by_client(Kt, R) @ A, R), lambda: Kt @ A.repeat(R, 1, 1))


def _rows_times(Kt: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``[M, n, h]``: ``K B`` per client for a class-major ``Kt [M, K, n]`` and ``B [K, h]`` (one 2-D
    product over all clients' rows) or ``[M, K, h]``; in a run batch ``B [R, K, h]``, each run's for its
    ``M/R`` clients' rows (the run's 2-D product, the run dimension written out: one ``bmm``)."""
    M, K, n = Kt.shape
    if B.dim() == 2:
        return (Kt.mT.reshape(M * n, K) @ B).view(M, n, -1)
    if B.shape[0] < M:
        R = B.shape[0]
        return torch.bmm(Kt.mT.reshape(R, M // R * n, K), B).view(M, n, -1)
    return Kt.mT @ B


def runs_of(y: torch.Tensor, A: torch.Tensor) -> int:
    """The R runs of a run batch's heads ``y [R, dy]`` on their clients' features ``A [R*M, n, h]`` (each
    run's head for its M clients' rows, ``M > 1``); 0 for a global head ``[dy]``, client heads ``[M, dy]``
    or the heads of R runs on features they share (``y [R*M, dy]``, ``A [M, n, h]``)."""
    return y.shape[0] if y.dim() == 2 and y.shape[0] < A.shape[0] else 0


class SoftmaxHead:
    """The derivatives above, computed class-major: logits, probabilities and residuals are kept as
    ``[M, C, n]`` (``P^T``), so the softmax over C runs on the CPU kernel for a non-innermost dim
    (vectorized over the n examples, ~10x faster than over an innermost C = 10), the logits of a
    global head are one 2-D product ``W Aᵀ`` over all clients' rows, and the products with A
    (``Rᵀ A``, ``Sᵀ A``) need no transposes."""

    def __init__(self, classes: int, width: int):
        self.C, self.h = classes, width
        self._buf: tuple | None = None  # the SVRG pair's heads-and-anchor buffer (:meth:`_pair`)

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W, b)``: ``[C, h], [C]`` for a global head, ``[M, C, h], [M, 1, C]`` for stacked heads."""
        W = y[..., : self.C * self.h].unflatten(-1, (self.C, self.h))
        b = y[..., self.C * self.h:]
        return W, (b.unsqueeze(-2) if y.dim() == 2 else b)

    def logits_t(self, y: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        """``[M, C, n]``: ``(A Wᵀ + b)ᵀ`` per client."""
        W, b = self.split(y)
        if y.dim() == 1:
            M, n, h = A.shape
            return torch.addmm(b.unsqueeze(1), W, A.reshape(M * n, h).T).view(-1, M, n).transpose(0, 1)
        if runs_of(y, A):  # each run's addmm above, the run dimension written out
            N, n, h = A.shape
            R = y.shape[0]
            L = torch.baddbmm(b.mT, W, A.reshape(R, N // R * n, h).mT)
            return L.view(R, -1, N // R, n).transpose(1, 2).reshape(N, -1, n)
        R = y.shape[0] // A.shape[0]
        if R > 1:  # the R runs' heads on features shared by the runs (same_bits)
            return same_bits(("logits", tuple(y.shape), tuple(A.shape), A.dtype, A.device),
                             lambda: _by_run(torch.baddbmm(_by_client(b.mT, R), _by_client(W, R), A.mT), R),
                             lambda: torch.baddbmm(b.mT, W, A.repeat(R, 1, 1).mT))
        return torch.baddbmm(b.mT, W, A.mT)

    def logits2_t(self, y: torch.Tensor, v: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``logits_t`` of two heads on the same features (one product ``[W; V] Aᵀ`` for two global heads)."""
        M, n, h = A.shape
        if y.dim() == 1 and v.dim() == 1:
            (W, b), (V, c) = self.split(y), self.split(v)
            L = torch.addmm(torch.cat([b, c]).unsqueeze(1), torch.cat([W, V]), A.reshape(M * n, h).T)
            L = L.view(2, self.C, M, n).transpose(1, 2)
            return L[0], L[1]
        R = runs_of(y, A)
        if R and v.shape[0] == R:  # two heads per run: each run's product above, the run dimension written out
            (W, b), (V, c) = self.split(y), self.split(v)
            L = torch.baddbmm(torch.cat([b, c], -1).mT, torch.cat([W, V], 1), A.reshape(R, M // R * n, h).mT)
            L = L.view(R, 2, self.C, M // R, n).transpose(2, 3)
            return L[:, 0].reshape(M, self.C, n), L[:, 1].reshape(M, self.C, n)
        return self.logits_t(y, A), self.logits_t(v, A)

    def probs_t(self, y: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        """``[M, C, n]``: ``Pᵀ``."""
        return torch.softmax(self.logits_t(y, A), -2)

    def probs(self, y: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        """``[M, n, C]``: ``P = softmax(A Wᵀ + b)``."""
        return self.probs_t(y, A).mT

    def residual_t(self, Pt: torch.Tensor, t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``[M, C, n]``: ``Rᵀ = (w (P - E))ᵀ``."""
        # P - E as P plus -1 scattered onto each example's class (the same values: p - 1 = p + (-1) in
        # IEEE arithmetic), without a one-hot matrix and its transposed copy
        i = t.unsqueeze(-2)
        return Pt.scatter_add(-2, i, Pt.new_full((), -1.0).expand(i.shape)).mul_(w.unsqueeze(-2))

    @staticmethod
    def flat(gW: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        return torch.cat([gW.flatten(-2), gb], -1)

    def grad(self, y, A, t, w, mean: bool = False) -> torch.Tensor:
        """``[M, dy]``: ``∇_y ℓ`` (``mean``: its client mean ``[dy]``; ``[R, dy]`` each run's, for R runs' heads)."""
        Rt = self.residual_t(self.probs_t(y, A), t, w)
        return self._mean(Rt, A, runs_of(y, A)) if mean else self.flat(_times_features(Rt, A), Rt.sum(-1))

    def _mean(self, Kt: torch.Tensor, A: torch.Tensor, runs: int = 0) -> torch.Tensor:
        """``[dy]``: the client mean of ``flat(Kᵀ A, Σ_n K)``, one 2-D product over all clients' rows; ``runs``:
        ``[R, dy]``, each run's mean over its clients (its 2-D product, the run dimension written out)."""
        M, C, n = Kt.shape
        if runs:
            R, m = runs, M // runs
            K = Kt.view(R, m, C, n).transpose(1, 2).reshape(R, C, m * n)
            return torch.cat([torch.bmm(K, A.reshape(R, m * n, -1)).flatten(1), K.sum(2)], 1).div_(m)
        K = Kt.transpose(0, 1).reshape(C, M * n)
        return torch.cat([(K @ A.reshape(M * n, -1)).flatten(), K.sum(1)]).div_(M)

    def grad_diff(self, y1, y0, A, t, w) -> torch.Tensor:
        """``[M, dy]``: ``∇_y ℓ(y1) - ∇_y ℓ(y0)`` on the same batch (the SVRG pair, one product). In a run batch
        ``y1 [R*M, dy]`` may stand against the R runs' anchors ``y0 [R, dy]`` (each run's for its M rows) on
        features ``A [M, n, h]`` shared by the runs: each row the product of the run alone (``same_bits``)."""
        N = y1.shape[0] if y1.dim() == 2 else 0
        if y1.dim() == 2 and (y0.dim() == 1 or y0.shape[0] != N):  # client heads against their anchor: one product
            C, R = self.C, N // A.shape[0]
            Wc, bc = self._pair(y1, y0)  # [N, 2C, h], [N, 2C, 1]
            if R > 1:
                L = same_bits(("pair", tuple(Wc.shape), tuple(A.shape), A.dtype, A.device),
                              lambda: _by_run(torch.baddbmm(_by_client(bc, R), _by_client(Wc, R), A.mT), R),
                              lambda: torch.baddbmm(bc, Wc, A.repeat(R, 1, 1).mT))
            else:
                L = torch.baddbmm(bc, Wc, A.mT)
            P = torch.softmax(L.view(N, 2, C, -1), -2)
            Dt = torch.sub(P[:, 0], P[:, 1]).mul_(w.unsqueeze(-2))  # the one-hot parts cancel
        else:
            Dt = (self.probs_t(y1, A) - self.probs_t(y0, A)).mul_(w.unsqueeze(-2))
        return self.flat(_times_features(Dt, A), Dt.sum(-1))

    def _pair(self, y1: torch.Tensor, y0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, 2C, h], [N, 2C, 1]``: the client heads ``y1 [N, dy]`` beside their anchor ``y0`` (``[dy]``, or in a
        run batch the runs' ``[R, dy]``, each for its run's rows), the weights and the biases. The steps of a lower
        round share the anchor: the buffer is kept for it, its anchor half written once and the heads' half copied
        in at each call (two copies instead of building and concatenating both halves every step)."""
        N, C, h = y1.shape[0], self.C, self.h
        hit = self._buf
        if hit is None or hit[0] is not y0 or hit[1] != y0._version or hit[2].shape[0] != N \
                or hit[2].dtype != y1.dtype or hit[2].device != y1.device:
            Wc, bc = y1.new_empty(N, 2 * C, h), y1.new_empty(N, 2 * C, 1)
            W0, b0 = self.split(y0)
            k = N // y0.shape[0] if y0.dim() == 2 else N
            Wc[:, C:] = W0.reshape(-1, C, h).repeat_interleave(k, 0)
            bc[:, C:, 0] = b0.reshape(-1, C).repeat_interleave(k, 0)
            heads = Wc.view(N, -1).narrow(1, 0, C * h), bc.view(N, -1).narrow(1, 0, C)
            self._buf = hit = (y0, y0._version, Wc, bc, *heads)
        hit[4].copy_(y1.narrow(1, 0, C * h))
        hit[5].copy_(y1.narrow(1, C * h, C))
        return hit[2], hit[3]

    def _PS_t(self, y, A, v, w) -> tuple[torch.Tensor, torch.Tensor]:
        """``[M, C, n]`` twice: ``Pᵀ`` and ``Sᵀ``, ``S = w (P ⊙ U - P (P·U))``, ``U = A Vᵀ + c``."""
        Lt, Ut = self.logits2_t(y, v, A)
        Pt = torch.softmax(Lt, -2)
        PU = Pt * Ut
        return Pt, (PU - Pt * PU.sum(-2, keepdim=True)) * w.unsqueeze(-2)

    def hvp(self, y, A, t, w, v, mean: bool = False) -> torch.Tensor:
        """``[M, dy]``: ``∇²_y ℓ v`` (``mean``: its client mean ``[dy]``)."""
        St = self._PS_t(y, A, v, w)[1]
        return self._mean(St, A, runs_of(y, A)) if mean else self.flat(_times_features(St, A), St.sum(-1))

    def dA(self, y, A, t, w) -> torch.Tensor:
        """``[M, n, h]``: ``∂ℓ/∂A = R W``."""
        return _rows_times(self.residual_t(self.probs_t(y, A), t, w), self.split(y)[0])

    def cross_dA(self, y, A, t, w, v) -> torch.Tensor:
        """``[M, n, h]``: ``∂⟨∇_y ℓ, v⟩/∂A = S W + R V``, as one product ``[S R] [W; V]``."""
        Pt, St = self._PS_t(y, A, v, w)
        W, V = self.split(y)[0], self.split(v)[0]
        if W.dim() != V.dim():
            W, V = torch.broadcast_tensors(W, V)
        elif W.shape[0] != V.shape[0]:  # a run batch: each run's head for its clients' rows beside theirs
            W = W.repeat_interleave(V.shape[0] // W.shape[0], 0)
        K = torch.cat([St, self.residual_t(Pt, t, w)], -2)
        return _rows_times(K, torch.cat([W, V], -2))

    def cross_dw(self, y, A, t, v) -> torch.Tensor:
        """``[M, n]``: ``∂⟨∇_y ℓ, v⟩/∂w_n = (p_n - e_n)ᵀ u_n`` (for per-example weights that depend on x)."""
        Et = torch.nn.functional.one_hot(t, self.C).mT.to(A.dtype)
        Lt, Ut = self.logits2_t(y, v, A)
        return ((torch.softmax(Lt, -2) - Et) * Ut).sum(-2)

    def ce(self, y, A, t) -> torch.Tensor:
        """``[M, n]``: the per-example cross-entropies."""
        W, b = self.split(y)
        if y.dim() == 2 and y.shape[0] != A.shape[0]:  # features shared by R runs: repeated (the runs' heads
            A = A.repeat(y.shape[0] // A.shape[0], 1, 1)  # side by side, [h, R*C], would round otherwise)
        L = torch.log_softmax(A @ W.mT + b, -1)
        return -L.gather(-1, t.unsqueeze(-1)).squeeze(-1)
