"""Hypergradient estimators of Xiao & Ji (ICML 2023) against the closed form on a heterogeneous quadratic, and
their communication accounting."""

from dataclasses import replace

import pytest
import torch

from fbo_cli.algorithms import REGISTRY
from fbo_cli.algorithms.aggitd import AggITD
from fbo_cli.algorithms.base import FederationView
from fbo_cli.algorithms.fednest import FedNest
from fbo_cli.sim.federation import Ledger
from fbo_cli.tasks.quadratic import Quadratic


def make(cls, task, participation=1.0, **hp):
    fed = FederationView(task.data, participation, torch.Generator().manual_seed(0), Ledger())
    base = dict(batch_size=1, inner_lr=0.15, lower_epochs=5, lam=0.3, outer_lr=1.0, tau=1)
    return cls(task, replace(cls.HP(), **{**base, **hp}), fed)


def estimate(algo, x, y) -> torch.Tensor:
    """h from one outer iteration: with tau = 1 and exact local gradients, x+ = x - α h."""
    algo.x, algo.y = x.clone(), y.clone()
    algo.step()
    return (x - algo.x) / algo.hp.outer_lr


def rel_err(h, ref):
    return float((h - ref).norm() / ref.norm())


@pytest.fixture(scope="module")
def quad():
    task = Quadratic(m=5, dx=3, dy=6, hetero=1.0, seed=1)
    x = torch.tensor([0.7, -1.2, 0.4], dtype=torch.float64)
    return task, x


def test_fednest_approaches_closed_form(quad):
    task, x = quad
    ref = task.hypergrad(x)
    errs = [rel_err(estimate(make(FedNest, task, N=n, T=t), x, torch.zeros(task.dy, dtype=torch.float64)), ref)
            for n, t in [(1, 1), (4, 4), (12, 12), (40, 40)]]
    assert all(a > b for a, b in zip(errs, errs[1:])), errs
    assert errs[-1] < 1e-6 and errs[0] > 1e-2, errs


def test_aggitd_expectation_over_Q_approaches_closed_form(quad):
    """E_Q[h] (enumerating Q = 0..N, Alg. 1) -> ∇f as N grows, from a cold start y = 0."""
    task, x = quad
    ref = task.hypergrad(x)
    errs = []
    for N in (1, 4, 16):
        hs = []
        for q in range(N + 1):
            algo = make(AggITD, task, N=N)
            algo.draw_Q = lambda q=q: q
            hs.append(estimate(algo, x, torch.zeros(task.dy, dtype=torch.float64)))
        errs.append(rel_err(torch.stack(hs).mean(0), ref))
    assert all(a > b for a, b in zip(errs, errs[1:])), errs
    assert errs[-1] < 0.02 and errs[0] > 0.2, errs


def test_aggitd_single_Q_is_scaled_neumann_term(quad):
    """At y^t = y* for all t, p = λ(N+1)(I - λA)^{N-Q} ∇_y f (Alg. 1 lines 5-15)."""
    task, x = quad
    ys = task.y_star(x)
    A, B = task.A.mean(0), task.B.mean(0)
    N, lam = 3, 0.3
    v = ys - task.d.mean(0)
    for q in range(N + 1):
        algo = make(AggITD, task, N=N, lam=lam)
        algo.draw_Q = lambda q=q: q
        h = estimate(algo, x, ys)
        p = lam * (N + 1) * torch.linalg.matrix_power(torch.eye(task.dy, dtype=torch.float64) - lam * A, N - q) @ v
        torch.testing.assert_close(h, task.e * x + B.T @ p)


def test_lfednest_local_estimator_stays_biased(quad):
    task, x = quad
    ref = task.hypergrad(x)
    algo = make(FedNest, task, N=40, T=60, local_hypergrad=True)
    h = estimate(algo, x, torch.zeros(task.dy, dtype=torch.float64))
    local = task.local_hypergrad(x, algo.y)
    assert rel_err(h, local) < 1e-6  # it converges to the mean of the local implicit gradients ...
    assert rel_err(h, ref) > 0.05  # ... which is not the federated hypergradient


EXPECTED_ROUNDS = {"aggitd": 5, "aggitd-sgd": 4, "fednest": 10, "fednest-sgd": 9, "lfednest": 3, "lfednest-sgd": 2}


@pytest.mark.parametrize("name", sorted(EXPECTED_ROUNDS))
def test_rounds_per_outer_iteration(name, quad):
    """Table 1 of Xiao & Ji (ICML 2023), N = 1, T = 5: AggITD 2N+3, FedNest 2N+T+3, LFedNest 2N+1 (SGD: N+3, N+T+3,
    N+1)."""
    task, _ = quad
    entry = REGISTRY[name]
    algo = make(entry.cls, task, participation=0.6, **entry.preset)
    assert algo.rounds_per_iteration() == EXPECTED_ROUNDS[name]
    for k in range(1, 4):
        algo.step()
        assert algo.ledger.rounds == k * EXPECTED_ROUNDS[name]


def test_floats_per_outer_iteration(quad):
    task, _ = quad
    dx, dy, M = task.dx, task.dy, 3
    algo = make(FedNest, task, participation=0.6)
    algo.step()
    # FedInn: anchor + model (2 dy); FedIHGP: p_0 + T HVP rounds; h and x: 2 dx
    assert algo.ledger.floats_up == M * (2 * dy + (1 + 5) * dy + 2 * dx) == algo.ledger.floats_down
    algo = make(AggITD, task, participation=0.6)
    algo.draw_Q = lambda: 0  # r^0 rides on round A_0
    algo.step()
    assert algo.ledger.floats_up == M * ((dy + dy) + dy + dy + 2 * dx)


def test_fednest_code_form_is_the_public_codes_running_mean(quad):
    """``neumann: code`` equals the public FedNest code's ``fedIHGP`` written literally: per-client
    counters c_i <- (I - λ H_i) c_i from v, a list p_locals that is never cleared, p = mean(p_locals)
    after every step, P = λ p; and for small λ its weight on v is about 3.28 at T = 5 (ours: T + 1)."""
    task, x = quad
    algo = make(FedNest, task, T=5, lam=0.05, neumann="code")
    data = task.data
    train = data.split("train", torch.arange(task.m))
    a, gfn, enc = task.lower_view(x, train)
    y = torch.zeros(task.dy, dtype=torch.float64)
    v = torch.randn(task.dy, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    got = algo._fedihgp_code(gfn, a, y, enc, v, task.m, task.dy)
    p, p_locals, counters = v.clone(), [], [v.clone() for _ in range(task.m)]
    for _ in range(5):
        for i in range(task.m):
            counters[i] = counters[i] - 0.05 * task.A[i] @ counters[i]
            p_locals.append(p + counters[i])
        p = torch.stack(p_locals).mean(0)
    assert torch.allclose(got, 0.05 * p, atol=1e-12)
    tiny = make(FedNest, task, T=5, lam=1e-9, neumann="code")._fedihgp_code(gfn, a, y, enc, v, task.m, task.dy)
    w = [1.0]  # p_k = (1/k) Σ_{j<=k} (p_{j-1} + v) in units of v: 2, 2.5, 2.83, 3.08, 3.28
    for k in range(1, 6):
        w.append(sum(w[j - 1] + 1 for j in range(1, k + 1)) / k)
    assert w[-1] == pytest.approx(3.2833, abs=1e-4)
    assert torch.allclose(tiny / 1e-9, w[-1] * v, rtol=1e-4)
