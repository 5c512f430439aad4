"""AdaFBiO (Huang, arXiv 2211.01122, Alg. 1): the plain local-SGD reduction, the adaptive matrices, the exact block
semantics of per-client heads, the same-sample STORM corrections and the ledger."""

from __future__ import annotations

import pytest
import torch
from quad_locallower import grad_y_g, make, trunc_hypergrad

from fbo_cli.algorithms.adafbio import AdaFBiO
from fbo_cli.errors import UsageError
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build, execute

torch.set_num_threads(1)


def _hp(**kw):
    hp = AdaFBiO.HP()
    for k, v in kw.items():
        setattr(hp, k, v)
    return hp


def _reference_local_sgd(task, fed, hp, rounds: int):
    """Plain local SGD on the hypergradient, written independently of the algorithm: client m steps
    x^m -= η_t γ Φ_K^(m)(x^m, y^m), y^m -= η_t λ ∇_y g_m(x^m, y^m); at t mod q = 0 the server averages
    and takes the averaged step. Per-client heads are kept *literally* as problem (1) has them: each
    client holds the whole block vector y = (y^1; ...; y^M) ``[M, M, dy]`` and its gradient lives on
    its own block. Yields (x^m, heads) after every round."""
    M = fed.data.num_clients
    gen = torch.Generator().manual_seed(0)
    x1, y1 = task.init(gen)
    x = x1.expand(M, -1).clone()
    local = task.local_lower
    Y = y1.expand(M, -1, -1).clone() if local else y1.expand(M, -1).clone()  # [client, (block,) dy]
    t = 0
    for _ in range(rounds):
        for _ in range(hp.q):
            t += 1
            eta = hp.eta_k / (hp.eta_n + t) ** (1 / 3)
            own = [Y[m, m] if local else Y[m] for m in range(M)]
            w = torch.stack([trunc_hypergrad(task, x[m], own[m], m, hp.neumann_step, hp.K) for m in range(M)])
            g = torch.stack([grad_y_g(task, x[m], own[m], m) for m in range(M)])
            v = torch.zeros_like(Y)
            for m in range(M):
                if local:
                    v[m, m] = g[m]
                else:
                    v[m] = g[m]
            if t % hp.q == 0:
                x = (x.mean(0) - eta * hp.gamma_x * w.mean(0)).expand(M, -1).clone()
                Y = (Y.mean(0) - eta * hp.lambda_y * v.mean(0)).expand_as(Y).clone()
            else:
                x = x - eta * hp.gamma_x * w
                Y = Y - eta * hp.lambda_y * v
        yield x, (Y[0] if local else Y.mean(0))


@pytest.mark.parametrize("local", [False, True])
def test_nonadaptive_without_momentum_is_plain_local_sgd_step_by_step(local):
    task, fed = make(local=local)
    hp = _hp(q=3, batch_size=1000, K=6, neumann="sum", neumann_step=0.25, gamma_x=0.5, lambda_y=0.8,
             adaptive="none", c1=1e9, c2=1e9)
    fed.gen.manual_seed(0)
    algo = AdaFBiO(task, hp, fed)
    for x_ref, heads_ref in _reference_local_sgd(task, fed, hp, 4):
        algo.step()
        assert torch.allclose(algo.x, x_ref, atol=1e-5)
        assert torch.allclose(algo.heads(), heads_ref, atol=1e-5)
    assert fed.ledger.rounds == 4  # no adaptive matrices: no initial round


@pytest.mark.parametrize("adaptive", ["adam", "adabelief"])
def test_adaptive_matrices_follow_their_formulas(adaptive):
    task, fed = make(local=False)
    hp = _hp(q=1, batch_size=5, K=3, adaptive=adaptive, rho_decay=0.8, rho_floor=1e-2, gamma_x=0.05)
    algo = AdaFBiO(task, hp, fed)
    algo.step()  # initialization (one averaging round) + one synchronized iteration
    r, rho = hp.rho_decay, hp.rho_floor
    a, b = algo.a.clone(), float(algo.b)  # b_t, B_t: 0-dim float64 tensors (a run batch stacks them)
    ref_w, ref_v = algo.w_ref.clone(), algo.v_ref.clone()
    for _ in range(3):
        wb, vb, xb = algo.w.mean(0), algo.v.mean(0), algo.x.mean(0)
        t = algo.t + 1
        algo.step()
        dw = wb - ref_w if adaptive == "adabelief" else wb
        dv = vb - ref_v if adaptive == "adabelief" else vb
        a = r * a + (1 - r) * dw * dw
        b = r * b + (1 - r) * float(dv.norm())
        assert torch.allclose(algo.a, a, rtol=1e-5, atol=1e-10) and float(algo.b) == pytest.approx(b, rel=1e-5)
        assert torch.allclose(algo.A, a.sqrt() + rho) and float(algo.B) == pytest.approx(b + rho, rel=1e-5)
        eta = hp.eta_k / (hp.eta_n + t) ** (1 / 3)
        assert torch.allclose(algo.x[0], xb - eta * hp.gamma_x * wb / (a.sqrt() + rho), atol=1e-6)
        ref_w, ref_v = wb, vb
    assert fed.ledger.rounds == 1 + 4


def test_adam_initial_matrices_and_adabelief_first_reference():
    task, fed = make(local=False)
    algo = AdaFBiO(task, _hp(q=2, batch_size=5, K=3, rho_decay=0.9), fed)
    algo._init()
    wb1, vb1 = algo.w.mean(0), algo.v.mean(0)
    assert torch.allclose(algo.a, 0.1 * wb1 * wb1)
    assert float(algo.b) == pytest.approx(0.1 * float(vb1.norm()), rel=1e-5)
    assert torch.equal(algo.w_ref, wb1)  # the first sync of adabelief uses w̄_1
    task, fed = make(local=False)
    algo = AdaFBiO(task, _hp(q=2, batch_size=5, K=3, init_matrices="identity"), fed)
    algo._init()
    assert bool((algo.A == 1.0).all()) and float(algo.B) == 1.0 and fed.ledger.rounds == 0


def test_same_sample_at_both_points_freezes_the_estimators_when_nothing_moves():
    """Zero steps and zero momentum weights: v_{t+1} = v_t + G(new; ζ) - G(old; ζ) = v_t only if both
    points see the same minibatches, dropout masks and Neumann index k."""
    over = {"clients": 4, "participation": 1, "dataset": "digits", "rounds": 3, "threads": 1, "hidden": 16,
            "dropout": 0.5, "partition": "shards", "out_dir": "/tmp/fbo-test-adafbio", "q": 2, "K": 4,
            "batch_size": 8, "gamma_x": 0.0, "lambda_y": 0.0, "c1": 0.0, "c2": 0.0, "sync_estimators": False}
    algo = build(resolve("hyperrep", "adafbio", over)).algo
    algo.step()
    v, w = algo.v.clone(), algo.w.clone()
    algo.step()
    assert torch.allclose(algo.v, v, atol=1e-6) and torch.allclose(algo.w, w, atol=1e-6)


def test_ledger_rounds_floats_and_samples():
    task, fed = make(local=True)
    hp = _hp(q=3, batch_size=5, K=4)
    algo = AdaFBiO(task, hp, fed)
    for _ in range(2):
        algo.step()
    led, M, dx, dy = fed.ledger, 4, task.dx, task.dy
    assert algo.rounds_per_iteration() == 1 and led.rounds == 1 + 2
    assert led.floats_up == M * (dx + dy) + 2 * M * 2 * (dx + dy)
    assert led.floats_down == M * (dx + 1) + 2 * M * (dx + dy + dx + 1 + dx + dy)
    assert led.samples == M * 5 * (hp.K + 2) * (hp.q + 2 * hp.q)  # q(K+2) at the start, K+2 per iteration


def test_runs_on_hyperrep_global_and_local_and_refuses_sampling():
    base = {"clients": 4, "participation": 1, "dataset": "digits", "rounds": 2, "threads": 1, "hidden": 16,
            "dropout": 0.0, "reg": "l2", "partition": "shards", "out_dir": "/tmp/fbo-test-adafbio", "q": 2,
            "K": 3, "batch_size": 16}
    for lower in ("global", "local"):
        s = execute(resolve("hyperrep", "adafbio", {**base, "lower": lower}), write=False)
        assert s["status"] == "done" and 0.0 <= s["final"] <= 1.0
    with pytest.raises(UsageError) as e:  # every client in every round
        build(resolve("hyperrep", "adafbio", {**base, "participation": 0.5}))
    assert (e.value.kind, e.value.field, e.value.value) == ("unsupported", "participation", 0.5)
    with pytest.raises(UsageError, match="adaptive"):
        build(resolve("hyperrep", "adafbio", {**base, "adaptive": "rmsprop"}))


def test_runs_on_hyperclean():
    over = {"clients": 4, "participation": 1, "dataset": "digits", "rounds": 3, "threads": 1, "q": 2, "K": 3,
            "batch_size": 16, "out_dir": "/tmp/fbo-test-adafbio"}
    s = execute(resolve("hyperclean", "adafbio", over), write=False)
    assert s["status"] == "done" and s["ledger"]["rounds"] == 3


def test_storm_corrections_use_the_old_point():
    """Full batches and zero momentum weights: v_{t+1} - v_t = ∇g(new) - ∇g(old) telescopes, so
    v_t = ∇_y g_m(x_t^m, y_t^m) and w_t = Φ_K^(m)(x_t^m, y_t^m) exactly along the whole run."""
    task, fed = make(local=True)
    hp = _hp(q=3, batch_size=1000, K=5, neumann="sum", neumann_step=0.25, gamma_x=0.3, lambda_y=0.5,
             c1=0.0, c2=0.0, sync_estimators=False)
    algo = AdaFBiO(task, hp, fed)
    for _ in range(2):
        algo.step()
    for m in range(4):
        assert torch.allclose(algo.v[m], grad_y_g(task, algo.x[m], algo.y[m], m), atol=1e-5)
        assert torch.allclose(algo.w[m], trunc_hypergrad(task, algo.x[m], algo.y[m], m, 0.25, 5), atol=1e-5)


def test_encoded_hessians_give_the_same_estimator_with_the_full_scale():
    """On hyperrep the Hessian batches are encoded once and only max(k) of them are computed; the
    estimate must equal eq. (13) evaluated directly, with the scale K ϑ of the full K."""
    from fbo_cli.algorithms.neumann import neumann_hypergrad

    over = {"clients": 3, "participation": 1, "dataset": "digits", "rounds": 2, "threads": 1, "hidden": 16,
            "dropout": 0.0, "partition": "shards", "out_dir": "/tmp/fbo-test-adafbio", "K": 6, "batch_size": 8}
    b = build(resolve("hyperrep", "adafbio", over))
    algo, task = b.algo, b.task
    bx, _, _ = algo.draw_sample()
    k = torch.tensor([0, 2, 3])
    got = algo.hypergrad(algo.x, algo.y, bx, k)
    want = neumann_hypergrad(task.f, task.g, algo.x, algo.y, bx["f"], bx["g"], bx["H"], algo.hp.neumann_step,
                             "random", k)
    assert torch.allclose(got, want, atol=1e-5)
