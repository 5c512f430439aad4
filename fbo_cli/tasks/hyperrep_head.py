"""hyperrep's closed forms (the ``mlp`` model, ``fast: true``): the derivatives of the softmax head on the
features (``softmax.py``) and the backward through dropout, ReLU and the first layer, as one more
:class:`fbo_cli.sim.federation.Oracles` (docs/fidelity.md#fast-path). :class:`HeadClosedForms` is
the part of :class:`fbo_cli.tasks.hyperrep.HyperRep` they need (the features, their backward, the
regularizer's derivatives); ``hyperrep.py`` keeps the model, the losses and the evaluation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..sim.federation import Batch, Oracles


class HeadClosedForms:
    """Mixed into ``HyperRep``: uses its ``p``, ``lx``, ``soft``, ``dx``, ``reg_coef``, ``reg_y`` and
    ``_feat`` (the last encodings)."""

    feat_keep = 3  # encodings kept (a run batch keeps 3 per run: fbo_cli/grids/run_batches.py)

    def features(self, x: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Features ``relu(Z)``, ``[M, n, width]``, of client-stacked ``X [M, n, ...]`` under a global
        ``x [dx]`` or per-client ``x [M, dx]`` (the ReLU in place: ``relu(Z) > 0`` iff ``Z > 0``, all
        the backward needs). The last three encodings are kept (one split serves several oracles of
        an outer iteration: the lower view, the HVPs, the cross term; one batch serves ∇_x f and ∇_y f)."""
        for xx, XX, ver, H in self._feat:
            if xx is x and XX is X and ver == (x._version, X._version):
                return H
        if x.dim() == 2:
            P = self.lx.unflatten_stacked(x)
            H = F.relu_(torch.baddbmm(P["b1"].unsqueeze(1), X.flatten(2), P["w1"].mT))
        else:
            P = self.lx.unflatten(x)
            H = F.relu_(F.linear(X.reshape(-1, P["w1"].shape[1]), P["w1"], P["b1"]).view(*X.shape[:2], -1))
        self._feat = [*self._feat[max(0, len(self._feat) + 1 - self.feat_keep):], (x, X, (x._version, X._version), H)]
        return H

    def encode_split(self, x, X):
        if not self.p.fast or self.soft is None:
            return super().encode_split(x, X)
        return self.features(x, X)

    def _A(self, H: torch.Tensor, b: Batch) -> torch.Tensor:
        return H * b["drop"] if "drop" in b else H

    def _to_x(self, x, b: Batch, dA, mean: bool = False) -> torch.Tensor:
        """``[M, dx]``: backpropagate ``dA(A) = ∂(loss)/∂A`` through dropout, ReLU and the first layer.
        ``mean``: the client mean ``[dx]``, ``(1/M) Gᵀ X`` over all clients' rows (one 2-D product)."""
        H = self.features(x, b["X"])
        A = self._A(H, b)
        G = dA(A)
        # ReLU's backward (autograd's own kernel, one pass; ~20x faster than masked_fill_ on the CPU):
        # G ⊙ [Z > 0] = G ⊙ [H > 0], and with dropout masks d ∈ {0, s}, s = 1/(1-q):
        # G ⊙ d ⊙ [Z > 0] = s (G ⊙ [A > 0]) for A = H ⊙ d, the scale folded into the (smaller) result
        s = 1.0 / (1.0 - self.p.dropout) if "drop" in b else 1.0
        G = torch.ops.aten.threshold_backward.grad_input(G, A, 0.0, grad_input=G)  # in place (G is ours)
        if mean:
            M, h = G.shape[0], G.shape[-1]
            G = G.reshape(-1, h)
            out = torch.empty(self.dx, dtype=G.dtype, device=G.device)  # (w1 [h, d], b1 [h]) flat
            torch.mm(G.T, b["X"].reshape(G.shape[0], -1), out=out[:-h].view(h, -1))
            torch.sum(G, 0, out=out[-h:])
            return out.mul_(s / M)
        if s != 1.0:
            G.mul_(s)
        return torch.cat([(G.mT @ b["X"].flatten(2)).flatten(1), G.sum(1)], 1)

    def _reg_grad(self, y, M):
        coef = self.reg_coef
        if self.p.reg == "none" or coef == 0:
            return 0.0
        if self.p.reg == "l2":
            return coef * y.expand(M, -1)
        return torch.func.vmap(torch.func.grad(self.reg_y))(y.expand(M, -1))

    def _reg_grad_diff(self, y1, y0, M):
        if self.p.reg == "l2":  # linear: one difference
            coef = self.reg_coef
            return coef * (y1 - y0).expand(M, -1) if coef else 0.0
        return self._reg_grad(y1, M) - self._reg_grad(y0, M)

    def _reg_hvp(self, y, v, M):
        coef = self.reg_coef
        if self.p.reg == "none" or coef == 0:
            return 0.0
        if self.p.reg == "l2":
            return coef * v.expand(M, -1)
        one = lambda yy, vv: torch.func.jvp(torch.func.grad(self.reg_y), (yy,), (vv,))[1]
        return torch.func.vmap(one)(y.expand(M, -1), v.expand(M, -1))


class _HeadOracles(Oracles):
    """hyperrep's closed forms (the mlp, ``fast``): the softmax head on the features (``softmax.py``) for
    every derivative in y, and the backward through dropout, ReLU and the first layer (``_to_x``) for
    those in x; the client means as one product over all clients' rows. ``g_enc`` (the lower loss on
    features already encoded) has no x to differentiate: its x-derivatives are the generic ones."""

    one_product_means = True

    def __init__(self, task, fn):
        super().__init__(fn)
        self.t, self.enc, self.reg = task, fn == task.g_enc, fn != task.f

    def _feat(self, a, b: Batch) -> torch.Tensor:
        return self.t._A(b["X"] if self.enc else self.t.features(a, b["X"]), b)

    def grad(self, argnum, a, y, b):
        t = self.t
        if argnum == 1:
            return t.soft.grad(y, self._feat(a, b), b["y"], b["w"]) + (t._reg_grad(y, len(b["w"])) if self.reg else 0.0)
        if self.enc:
            return super().grad(argnum, a, y, b)
        return t._to_x(a, b, lambda A: t.soft.dA(y, A, b["y"], b["w"]))

    def grads(self, a, y, b):
        return super().grads(a, y, b) if self.enc else (self.grad(0, a, y, b), self.grad(1, a, y, b))

    def svrg(self, a, y1, y0, b):
        t = self.t
        return t.soft.grad_diff(y1, y0, self._feat(a, b), b["y"], b["w"]) + \
            (t._reg_grad_diff(y1, y0, len(b["w"])) if self.reg else 0.0)

    def hvp(self, a, y, b, v):
        t = self.t
        return t.soft.hvp(y, self._feat(a, b), b["y"], b["w"], v) + (t._reg_hvp(y, v, len(b["w"])) if self.reg else 0.0)

    head_hvp = hvp

    def cross(self, a, y, b, v):  # the regularizer's ∇_y does not depend on x
        t = self.t
        if self.enc:
            return super().cross(a, y, b, v)
        return t._to_x(a, b, lambda A: t.soft.cross_dA(y, A, b["y"], b["w"], v))

    def grad_mean(self, argnum, a, y, b):
        t = self.t
        if argnum == 1:
            return t.soft.grad(y, self._feat(a, b), b["y"], b["w"], mean=True) + \
                (_client_mean(t._reg_grad(y, len(b["w"]))) if self.reg else 0.0)
        if self.enc:
            return super().grad_mean(argnum, a, y, b)
        return t._to_x(a, b, lambda A: t.soft.dA(y, A, b["y"], b["w"]), mean=True)

    def hvp_mean(self, a, y, b, v):
        t = self.t
        return t.soft.hvp(y, self._feat(a, b), b["y"], b["w"], v, mean=True) + \
            (_client_mean(t._reg_hvp(y, v, len(b["w"]))) if self.reg else 0.0)

    def cross_mean(self, a, y, b, v):
        t = self.t
        if self.enc:
            return super().cross_mean(a, y, b, v)
        return t._to_x(a, b, lambda A: t.soft.cross_dA(y, A, b["y"], b["w"], v), mean=True)


def _client_mean(t):
    return t.mean(0) if isinstance(t, torch.Tensor) else t
