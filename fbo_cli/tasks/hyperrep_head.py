"""hyperrep's closed forms (the ``mlp`` model, ``fast: true``): the derivatives of the softmax head on the
features (``softmax.py``) and the backward through dropout, ReLU and the first layer, as one more
:class:`fbo_cli.sim.federation.Oracles` (docs/fidelity.md#fast-path). :class:`HeadClosedForms` is
the part of :class:`fbo_cli.tasks.hyperrep.HyperRep` they need (the features, their backward, the
regularizer's derivatives); ``hyperrep.py`` keeps the model, the losses and the evaluation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..sim.federation import Batch, Oracles, same_bits


class HeadClosedForms:
    """Mixed into ``HyperRep``: uses its ``p``, ``lx``, ``soft``, ``dx``, ``reg_coef``, ``reg_y`` and
    ``_feat`` (the last encodings)."""

    feat_keep = 3  # encodings kept (a run batch keeps 3 per run: fbo_cli/grids/run_batches.py)

    def features(self, x: torch.Tensor, X: torch.Tensor, runs: int = 1) -> torch.Tensor:
        """Features ``relu(Z)``, ``[M, n, width]``, of client-stacked ``X [M, n, ...]`` under a global
        ``x [dx]`` or per-client ``x [M, dx]`` (the ReLU in place: ``relu(Z) > 0`` iff ``Z > 0``, all
        the backward needs). The last three encodings are kept (one split serves several oracles of
        an outer iteration: the lower view, the HVPs, the cross term; one batch serves ∇_x f and ∇_y f).

        In a run batch (``runs`` R > 1) ``X`` is the M clients' rows, shared by the runs, and ``x`` the R runs'
        globals ``[R, dx]`` (each run's features of the M clients, ``[R*M, n, width]`` run-major: each run's
        product alone, the run dimension written out, :meth:`encode_runs`) or the runs' client copies
        ``[R*M, dx]``."""
        for xx, XX, ver, H in self._feat:
            if xx is x and XX is X and ver == (x._version, X._version):
                return H
        if runs > 1 and x.dim() == 2 and x.shape[0] == runs:
            H = self.encode_runs(x, X)
        elif runs > 1 and x.dim() == 2:
            return self.features(x, X.repeat(x.shape[0] // X.shape[0], *[1] * (X.dim() - 1)))
        elif x.dim() == 2:
            P = self.lx.unflatten_stacked(x)
            H = F.relu_(torch.baddbmm(P["b1"].unsqueeze(1), X.flatten(2), P["w1"].mT))
        else:
            P = self.lx.unflatten(x)
            H = F.relu_(F.linear(X.reshape(-1, P["w1"].shape[1]), P["w1"], P["b1"]).view(*X.shape[:2], -1))
        self._feat = [*self._feat[max(0, len(self._feat) + 1 - self.feat_keep):], (x, X, (x._version, X._version), H)]
        return H

    def encode_runs(self, x, X):
        if not self.p.fast or self.soft is None:
            return super().encode_runs(x, X)
        for xx, XX, ver, H in self._feat:
            if xx is x and XX is X and ver == (x._version, X._version):
                return H
        R, (M, n) = x.shape[0], X.shape[:2]
        P = self.lx.unflatten_stacked(x)
        X2 = X.reshape(M * n, -1)
        H = same_bits(("encode", tuple(x.shape), tuple(X.shape), X.dtype, X.device),
                      lambda: F.relu_(torch.baddbmm(P["b1"].unsqueeze(1), X2.expand(R, -1, -1), P["w1"].mT)
                                      ).view(R * M, n, -1),
                      lambda: torch.cat([self.features(xr, X) for xr in x.unbind(0)]))
        self._feat = [*self._feat[max(0, len(self._feat) + 1 - self.feat_keep):], (x, X, (x._version, X._version), H)]
        return H

    def batch_features(self, x, b: Batch, runs: int) -> torch.Tensor:
        """:meth:`features` of a batch's ``X``: the clients' rows shared by ``runs`` runs (a run batch of one seed)
        or, where ``X`` has a row per client row of the batch (a seed batch: each run's own), x for those rows."""
        X = b["X"]
        if runs > 1 and len(X) == len(b["w"]):
            return self.features(_rows(x, len(X)), X)
        return self.features(x, X, runs)

    def encode_split(self, x, X):
        if not self.p.fast or self.soft is None:
            return super().encode_split(x, X)
        return self.features(x, X)

    def _A(self, H: torch.Tensor, b: Batch) -> torch.Tensor:
        return H * b["drop"] if "drop" in b else H

    def _to_x(self, x, b: Batch, dA, mean: bool = False, runs: int = 1) -> torch.Tensor:
        """``[M, dx]``: backpropagate ``dA(A) = ∂(loss)/∂A`` through dropout, ReLU and the first layer.
        ``mean``: the client mean ``[dx]``, ``(1/M) Gᵀ X`` over all clients' rows (one 2-D product). In a run
        batch (``runs`` R > 1, ``X`` the M clients' rows shared by the runs) each run's ``[R, dx]`` (its 2-D
        product, the run dimension written out), or ``[R*M, dx]``."""
        X, H = b["X"], self.batch_features(x, b, runs)
        A = self._A(H, b)
        G = dA(A)
        # ReLU's backward (autograd's own kernel, one pass; ~20x faster than masked_fill_ on the CPU):
        # G ⊙ [Z > 0] = G ⊙ [H > 0], and with dropout masks d ∈ {0, s}, s = 1/(1-q):
        # G ⊙ d ⊙ [Z > 0] = s (G ⊙ [A > 0]) for A = H ⊙ d, the scale folded into the (smaller) result
        s = 1.0 / (1.0 - self.p.dropout) if "drop" in b else 1.0
        G = torch.ops.aten.threshold_backward.grad_input(G, A, 0.0, grad_input=G)  # in place (G is ours)
        if mean and runs > 1:
            R, h = runs, G.shape[-1]
            M, G = G.shape[0] // R, G.reshape(R, -1, h)
            X = X.reshape(R, G.shape[1], -1) if len(X) == len(b["w"]) else X.reshape(G.shape[1], -1).expand(R, -1, -1)
            out = torch.cat([torch.bmm(G.mT, X).flatten(1), G.sum(1)], 1)
            return out.mul_(s / M)
        if X.shape[0] != G.shape[0]:  # the runs' rows of the clients' shared X
            X = X.repeat(G.shape[0] // X.shape[0], *[1] * (X.dim() - 1))
        if mean:
            M, h = G.shape[0], G.shape[-1]
            G = G.reshape(-1, h)
            out = torch.empty(self.dx, dtype=G.dtype, device=G.device)  # (w1 [h, d], b1 [h]) flat
            torch.mm(G.T, X.reshape(G.shape[0], -1), out=out[:-h].view(h, -1))
            torch.sum(G, 0, out=out[-h:])
            return out.mul_(s / M)
        if s != 1.0:
            G.mul_(s)
        return torch.cat([(G.mT @ X.flatten(2)).flatten(1), G.sum(1)], 1)

    def _reg_grad(self, y, M):
        coef = self.reg_coef
        if self.p.reg == "none" or coef == 0:
            return 0.0
        if self.p.reg == "l2":
            return coef * _rows(y, M)
        return torch.func.vmap(torch.func.grad(self.reg_y))(_rows(y, M))

    def _reg_grad_diff(self, y1, y0, M):
        if self.p.reg == "l2":  # linear: one difference
            coef = self.reg_coef
            return coef * (y1 - (_rows(y0, len(y1)) if y0.dim() == 2 else y0)).expand(M, -1) if coef else 0.0
        return self._reg_grad(y1, M) - self._reg_grad(y0, M)

    def _reg_hvp(self, y, v, M):
        coef = self.reg_coef
        if self.p.reg == "none" or coef == 0:
            return 0.0
        if self.p.reg == "l2":
            return coef * _rows(v, M)
        one = lambda yy, vv: torch.func.jvp(torch.func.grad(self.reg_y), (yy,), (vv,))[1]
        return torch.func.vmap(one)(_rows(y, M), _rows(v, M))


class _HeadOracles(Oracles):
    """hyperrep's closed forms (the mlp, ``fast``): the softmax head on the features (``softmax.py``) for
    every derivative in y, and the backward through dropout, ReLU and the first layer (``_to_x``) for
    those in x; the client means as one product over all clients' rows. ``g_enc`` (the lower loss on
    features already encoded) has no x to differentiate: its x-derivatives are the generic ones."""

    one_product_means = True
    # in a run batch (fbo_cli/algorithms/runs_as_clients.py) the raw features stay the M clients' rows, shared by
    # the runs; every call takes the R runs' globals [R, d] as they are, beside the runs' client rows, in one call
    # (each run's products alone with the run dimension written out: softmax.py's bmm/baddbmm, encode_runs),
    # the client means too ([R, d], each run's)
    shared_keys = ("X",)
    run_globals = ("svrg", "grad", "hvp", "head_hvp", "cross", "grad_mean", "hvp_mean", "cross_mean")

    def __init__(self, task, fn):
        super().__init__(fn)
        self.t, self.enc, self.reg = task, fn == task.g_enc, fn != task.f

    def _feat(self, a, b: Batch) -> torch.Tensor:
        return self.t._A(b["X"] if self.enc else self.t.batch_features(a, b, self.runs), b)

    def _mean(self, t):
        """The client mean of a per-client ``[M, d]`` (each run's ``[R, d]`` in a run batch)."""
        if not isinstance(t, torch.Tensor):
            return t
        return t.unflatten(0, (self.runs, -1)).mean(1) if self.runs > 1 else t.mean(0)

    def grad(self, argnum, a, y, b):
        t = self.t
        if argnum == 1:
            return t.soft.grad(y, self._feat(a, b), b["y"], b["w"]) + (t._reg_grad(y, len(b["w"])) if self.reg else 0.0)
        if self.enc:
            return super().grad(argnum, a, y, b)
        return t._to_x(a, b, lambda A: t.soft.dA(y, A, b["y"], b["w"]), runs=self.runs)

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
        return t._to_x(a, b, lambda A: t.soft.cross_dA(y, A, b["y"], b["w"], v), runs=self.runs)

    def grad_mean(self, argnum, a, y, b):
        t = self.t
        if argnum == 1:
            return t.soft.grad(y, self._feat(a, b), b["y"], b["w"], mean=True) + \
                (self._mean(t._reg_grad(y, len(b["w"]))) if self.reg else 0.0)
        if self.enc:
            return super().grad_mean(argnum, a, y, b)
        return t._to_x(a, b, lambda A: t.soft.dA(y, A, b["y"], b["w"]), mean=True, runs=self.runs)

    def hvp_mean(self, a, y, b, v):
        t = self.t
        return t.soft.hvp(y, self._feat(a, b), b["y"], b["w"], v, mean=True) + \
            (self._mean(t._reg_hvp(y, v, len(b["w"]))) if self.reg else 0.0)

    def cross_mean(self, a, y, b, v):
        t = self.t
        if self.enc:
            return super().cross_mean(a, y, b, v)
        return t._to_x(a, b, lambda A: t.soft.cross_dA(y, A, b["y"], b["w"], v), mean=True, runs=self.runs)


def _rows(y: torch.Tensor, M: int) -> torch.Tensor:
    """``[M, d]``: a global ``y [d]`` for M client rows, client rows ``[M, d]`` as they are, or in a run batch the R
    runs' globals ``[R, d]`` each repeated for its run's ``M/R`` rows."""
    if y.dim() == 1:
        return y.expand(M, -1)
    return y if y.shape[0] == M else y.repeat_interleave(M // y.shape[0], 0)
