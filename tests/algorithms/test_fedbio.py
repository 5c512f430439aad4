"""FedBiO / FedBiOAcc (FedBiO (Li, Huang & Huang) Alg. 1, 2; global lower level): estimators against the closed-form
hypergradient on a heterogeneous quadratic bilevel problem, STORM degenerate cases, the ledger, and
noise detection on synthetic data."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from fbo_cli.algorithms.base import FederationView
from fbo_cli.algorithms.fedbio import Draw, FedBiO, FedBiOAcc
from fbo_cli.algorithms.pool_sampler import RowSampler
from fbo_cli.algorithms.storm import step_factor, storm
from fbo_cli.data import Dataset, FederatedData
from fbo_cli.errors import UsageError
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build
from fbo_cli.sim.federation import Ledger
from fbo_cli.tasks.base import BilevelTask

torch.set_num_threads(1)
P, D, M, NT, NV = 3, 4, 3, 12, 8  # dim x, dim y, clients, train and validation rows per client


class Quad(BilevelTask):
    """g^m(x, y) = Σ_i w_i [½ (a_iᵀy)² - (a_iᵀy)(e_iᵀx)] + ½ µ||y||²,
    f^m(x, y) = Σ_j w_j ½ (a_jᵀy - 1 - e_jᵀx)²; a = the first D columns of a row, e the last P.
    Client m's rows are scaled by (1 + m) / 2, so the clients' Hessians differ (heterogeneity)."""

    mu = 1.0

    @dataclass
    class Params:
        pass

    def __init__(self, data):
        super().__init__(self.Params(), data)
        self.dx, self.dy = P, D
        self.x0 = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)

    def init(self, gen):
        return self.x0.clone(), torch.zeros(D, dtype=torch.float64)

    def f(self, x, y, b):
        a, e = b["X"][..., :D], b["X"][..., D:]
        return (b["w"] * 0.5 * (a @ y - 1 - e @ x) ** 2).sum()

    def g(self, x, y, b):
        a, e = b["X"][..., :D], b["X"][..., D:]
        return (b["w"] * (0.5 * (a @ y) ** 2 - (a @ y) * (e @ x))).sum() + 0.5 * self.mu * (y * y).sum()

    def evaluate(self, x, y):
        return {}


def _quad_fed(seed=0):
    g = torch.Generator().manual_seed(seed)
    n = NT + NV
    X = torch.randn(M * n, D + P, generator=g, dtype=torch.float64)
    X = X * (0.5 + 0.5 * torch.arange(M, dtype=torch.float64)).repeat_interleave(n)[:, None]
    y = torch.zeros(M * n, dtype=torch.long)
    ds = Dataset("quad", X, y, X[:1], y[:1], 2)
    base = torch.arange(M)[:, None] * n
    tr, va = base + torch.arange(NT), base + NT + torch.arange(NV)
    data = FederatedData(ds, X, y, X[:1], y[:1], tr, torch.ones_like(tr, dtype=torch.bool), va,
                         torch.ones_like(va, dtype=torch.bool))
    return data, Quad(data)


def _derivatives(G, F, x, y):
    """Explicit H = ∇²_y G, J = ∇_x∇_y G [P, D], ∇_x F, ∇_y F at (x, y) by autograd."""
    jac, hess = torch.autograd.functional.jacobian, torch.autograd.functional.hessian
    H = hess(lambda y_: G(x, y_), y)
    J = jac(lambda x_: jac(lambda y_: G(x_, y_), y, create_graph=True), x).T
    return H, J, jac(lambda x_: F(x_, y), x), jac(lambda y_: F(x, y_), y)


def _client_losses(task, tr, va, m):
    one = lambda b: {k: v[m] for k, v in b.items()}
    return (lambda x_, y_: task.g(x_, y_, one(tr))), (lambda x_, y_: task.f(x_, y_, one(va)))


def _closed_form(task: Quad, data: FederatedData, x: torch.Tensor):
    """y*(x), u* = H⁻¹∇_y F and ∇h(x) = ∇_x F - ∇_xy G H⁻¹ ∇_y F with explicit matrices of the
    *global* G = (1/M) Σ g^m, F = (1/M) Σ f^m (FedBiO (Li, Huang & Huang) eq. 2)."""
    tr, va = data.split("train").full(), data.split("val").full()
    pairs = [_client_losses(task, tr, va, m) for m in range(M)]
    G = lambda x_, y_: sum(g(x_, y_) for g, _ in pairs) / M
    F = lambda x_, y_: sum(f(x_, y_) for _, f in pairs) / M
    y0 = torch.zeros(D, dtype=torch.float64)
    H = torch.autograd.functional.hessian(lambda y_: G(x, y_), y0)
    ystar = -torch.linalg.solve(H, torch.autograd.functional.jacobian(lambda y_: G(x, y_), y0))
    H, J, fx, fy = _derivatives(G, F, x, ystar)
    ustar = torch.linalg.solve(H, fy)
    # the biased average of *local* hypergradients (1/M) Σ Φ^(m) (eq. 3), for contrast
    local = 0
    for g, f in pairs:
        Hm, Jm, fxm, fym = _derivatives(g, f, x, ystar)
        local = local + (fxm - Jm @ torch.linalg.solve(Hm, fym)) / M
    return ystar, ustar, fx - J @ ustar, local


def _algo(cls, **hp):
    data, task = _quad_fed()
    fed = FederationView(data, 1.0, torch.Generator().manual_seed(0), Ledger())
    base = dict(local_steps=1, batch_size=NT, upper_batch_size=NT, lower_lr=0.35, aux_lr=0.35, upper_lr=0.0)
    base.update(hp)
    return cls(task, cls.HP(**base), fed), task, data


def _full_draw(algo, data):
    tr, va = RowSampler.of(data, "train"), RowSampler.of(data, "val")
    g = torch.Generator().manual_seed(1)
    bt, bv = tr.sample(g, NT), va.sample(g, NV)
    return Draw(bt, bt, bt, bv, bv)


@pytest.mark.parametrize("cls", [FedBiO, FedBiOAcc])
def test_estimator_matches_closed_form_hypergradient(cls):
    """With full-batch oracles and x frozen, y -> y*(x), u -> u* (global averages) and the averaged
    estimator ν -> ∇h(x), not the biased mean of local hypergradients."""
    algo, task, data = _algo(cls)
    ystar, ustar, hyper, local = _closed_form(task, data, task.x0)
    assert (local - hyper).norm() > 1e-2 * hyper.norm()  # the problem is heterogeneous enough to tell
    for _ in range(40):
        algo.step()
    assert torch.allclose(algo.x, task.x0)
    assert torch.allclose(algo.y, ystar, atol=1e-8)
    assert torch.allclose(algo.u, ustar, atol=1e-8)
    X, Y, U = (v.expand(M, -1) for v in (algo.x, algo.y, algo.u))
    nu = algo.mu(X, Y, U, _full_draw(algo, data)).mean(0)
    assert torch.allclose(nu, hyper, atol=1e-8)
    if cls is FedBiOAcc:  # the momentum the algorithm actually steps with
        assert torch.allclose(algo.nu, hyper, atol=1e-8)
        assert torch.allclose(algo.om, torch.zeros(D, dtype=torch.float64), atol=1e-8)


def test_fedbio_local_steps_drift_shrinks_with_the_step():
    """I = 4 local steps between averages: client drift moves the fixed point of y and u away from
    the global solution by O(γ (I - 1)); halving the steps roughly halves the error."""
    err = []
    for lr in (0.1, 0.05):
        algo, task, data = _algo(FedBiO, local_steps=4, lower_lr=lr, aux_lr=lr)
        ystar, ustar, _, _ = _closed_form(task, data, task.x0)
        for _ in range(30):
            algo.step()
        err.append(((algo.y - ystar).norm() / ystar.norm() + (algo.u - ustar).norm() / ustar.norm()).item())
    assert err[0] < 0.3
    assert err[1] < 0.7 * err[0]


def test_storm_recursion_definition_and_degenerate_weights():
    g = torch.Generator().manual_seed(0)
    new, est, old = (torch.randn(5, generator=g) for _ in range(3))
    assert torch.equal(storm(new, est, old, 1.0), new)  # momentum weight 1: plain stochastic estimator
    assert torch.allclose(storm(new, est, old, 0.0), new + est - old)  # weight 0: SARAH/SPIDER recursion
    assert torch.allclose(storm(new, est, old, 0.3), new + 0.7 * (est - old))
    assert step_factor("const", 7, 2.0, 0.0) == 2.0
    assert step_factor("cbrt", 7, 2.0, 1.0) == pytest.approx(2.0 / 8 ** (1 / 3))


def _hc(algo, **over):
    cfg = {"dataset": "digits", "clients": 4, "participation": 1.0, "threads": 1, "partition": "dirichlet",
           "noise": 0.3, "batch_size": 16}
    cfg.update(over)
    return build(resolve("hyperclean", algo, cfg))


def test_fedbioacc_with_unit_momentum_weight_is_fedbio():
    """c α_t² = 1 turns every STORM recursion into the plain estimator at the new point; with I = 1
    (averaging every step) FedBiOAcc's iterates are then FedBiO's, step by step."""
    acc = _hc("fedbioacc", local_steps=1, c_omega=1.0, c_nu=1.0, c_u=1.0, first_batch=16)
    plain = _hc("fedbio", local_steps=1)
    for _ in range(6):
        acc.algo.step()
        plain.algo.step()
        for k in ("x", "y", "u"):
            a, b = getattr(acc.algo, k), getattr(plain.algo, k)
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), k
    # and a real momentum weight < 1 does change the iterates
    mom = _hc("fedbioacc", local_steps=1, c_omega=0.5, c_nu=0.5, c_u=0.5, first_batch=16)
    for _ in range(6):
        mom.algo.step()
    assert not torch.allclose(mom.algo.y, plain.algo.y, atol=1e-4)


@pytest.mark.parametrize("algo,per_client_floats,mult", [("fedbio", "p+2d", 1), ("fedbioacc", "2p+4d", 2)])
def test_ledger_rounds_floats_and_oracles(algo, per_client_floats, mult):
    I, b, rounds = 3, 16, 2
    B = _hc(algo, local_steps=I, **({"first_batch": b} if algo == "fedbioacc" else {}))
    for _ in range(rounds):
        B.algo.step()
    led, p, d = B.ledger, B.task.dx, B.task.dy
    assert B.algo.rounds_per_iteration() == 1
    assert led.rounds == rounds
    per = p + 2 * d if per_client_floats == "p+2d" else 2 * p + 4 * d
    assert led.floats_up == led.floats_down == rounds * M_HC * per
    init = 1 if algo == "fedbioacc" else 0  # FedBiOAcc's line-2 estimators
    iters = rounds * I
    assert led.grads == M_HC * 3 * (mult * iters + init)
    assert led.jvps == M_HC * (mult * iters + init)
    assert led.hvps == M_HC * (mult * iters + init)
    assert led.samples == M_HC * b * 5 * (mult * iters + init)


M_HC = 4


def test_usage_errors():
    with pytest.raises(UsageError) as e:
        _hc("fedbioacc", c_nu=2.0)
    assert (e.value.kind, e.value.field) == ("bad_value", "c_nu")
    with pytest.raises(UsageError) as e:
        _hc("fedbio", schedule="linear")
    assert (e.value.kind, e.value.field, e.value.value) == ("bad_value", "schedule", "linear")
    with pytest.raises(UsageError) as e:  # a global lower level: not for per-client heads
        build(resolve("hyperrep", "fedbio", {"dataset": "digits", "clients": 4, "lower": "local",
                                             "threads": 1}))
    assert (e.value.kind, e.value.field, e.value.value) == ("unsupported", "lower", "local")


def test_noise_detection_f1_well_above_chance():
    """Synthetic data with 40% known label noise: after 10 rounds of FedBiO the weights σ(x_i) < 0.5
    find the corrupted examples with F1 far above flag-everything (2p/(1+p) = 0.571)."""
    B = _hc("fedbio", dataset="synthetic", clients=5, noise=0.4, batch_size=64, upper_lr=300.0, lower_lr=0.1,
            aux_lr=0.1)  # the synthetic features have a small lower Hessian: 0.1 is stable here
    for _ in range(10):
        B.algo.step()
    m = B.algo.evaluate()
    assert m["f1"] > 0.8
    assert m["weight_noisy"] < m["weight_clean"]
