"""Local lower level (per-client heads): per-client test splits, the hyperrep ``lower: local`` task,
the Neumann hypergradient estimators against the closed form, FedBiO-Local and FedBiOAcc-Local."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quad_locallower import make

from fbo_cli.algorithms.fedbio_local import FedBiOLocal
from fbo_cli.algorithms.fedbioacc_local import FedBiOAccLocal
from fbo_cli.algorithms.neumann import neumann_hypergrad
from fbo_cli.data import build_federated, load_dataset, split_test_like
from fbo_cli.errors import UsageError
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build

torch.set_num_threads(1)


def full(split):
    return split.full()


# ------------------------------------------------------------------------------------------------
# per-client test splits


def test_split_test_like_partitions_the_test_set_by_label_mix():
    rs = np.random.RandomState(0)
    train = rs.randint(0, 5, 3000)
    test = rs.randint(0, 5, 1000)
    parts = [np.where(train == c)[0] for c in range(5)]  # client c holds class c only
    parts = parts + [np.arange(3000)]  # client 5 holds everything
    out = split_test_like(train, parts, test, seed=1)
    allidx = np.concatenate(out)
    assert len(allidx) == len(test) and len(np.unique(allidx)) == len(test)  # a partition
    for c in range(5):
        labels = test[out[c]]
        assert (labels == c).all()  # class mix of the client
        # client c holds 1/2 of class c's training examples -> about half of its test examples
        assert abs(len(labels) - (test == c).sum() / 2) <= 1


def test_build_federated_has_per_client_test_tables():
    ds = load_dataset("digits")
    data = build_federated(ds, "shards", 10, 0, torch.device("cpu"))
    te, tr = data.split("test"), data.split("train")
    assert int(te.mask.sum()) == len(ds.y_test)
    for i in range(10):
        va = data.split("val")
        seen = set(tr.y[i][tr.mask[i]].tolist()) | set(va.y[i][va.mask[i]].tolist())
        assert set(te.y[i][te.mask[i]].tolist()) <= seen


# ------------------------------------------------------------------------------------------------
# hyperrep with lower = local


def _hyperrep(algo, **kw):
    over = {"clients": 6, "participation": 1, "lower": "local", "dataset": "digits", "rounds": 3,
            "threads": 1, "dropout": 0.0, "reg": "l2", "reg_coef": 0.01, "hidden": 16, "partition": "shards",
            "out_dir": "/tmp/fbo-test-locallower"}
    over.update(kw)
    return build(resolve("hyperrep", algo, over))


def test_hyperrep_local_heads_and_personalized_accuracy():
    b = _hyperrep("fedbio-local")
    task, algo = b.task, b.algo
    assert algo.y.shape == (6, task.dy) and torch.equal(algo.y[0], algo.y[5])  # y_1^(m) = y_1
    algo.step()
    x, Y = algo.x_bar(), algo.y
    assert not torch.equal(Y[0], Y[1])  # heads are personal
    m = task.evaluate(x, Y)
    te = task.data.split("test")
    accs = []
    for i in range(6):  # by hand, client by client
        n = int(te.mask[i].sum())
        logits = task.head(Y[i], task.encode(x, te.X[i, :n]), None)
        accs.append((logits.argmax(1) == te.y[i, :n]).float().mean().item())
    assert m["test_acc"] == pytest.approx(float(np.mean(accs)), abs=1e-6)
    # a global head scored per client equals per-client heads that are all that head
    g = task.evaluate(x, Y[2])
    assert g.keys() == {"test_acc", "test_loss", "val_loss", "val_acc"}  # the pooled test metric is unchanged
    from fbo_cli.sim.federation import per_client_value  # val_loss is the upper objective (1/m) Σ_i f_i

    val = task.data.split("val").full()
    assert g["val_loss"] == pytest.approx(per_client_value(task.f, x, Y[2], val).mean().item(), rel=1e-5)
    assert m["val_loss"] == pytest.approx(per_client_value(task.f, x, Y, val).mean().item(), rel=1e-5)
    task.p.test_on = "clients"
    assert task.evaluate(x, Y[2]) == task.evaluate(x, Y[2].expand(6, -1))


def test_global_algorithms_refuse_local_heads_and_bad_values():
    for algo, over, error in (("aggitd", {}, ("unsupported", "lower", "local")),
                              ("fedbio-local", {"lower": "personal"}, ("bad_value", "lower", "personal")),
                              ("fedbio-local", {"lower": "global"}, ("unsupported", "lower", "global")),
                              ("fedbioacc-local", {"participation": 0.5}, ("unsupported", "participation", 0.5))):
        with pytest.raises(UsageError) as e:
            _hyperrep(algo, **over)
        assert (e.value.kind, e.value.field, e.value.value) == error, (algo, over, e.value)


# ------------------------------------------------------------------------------------------------
# Neumann estimators against the closed form (quadratic problem)


def _stack(task, fed):
    tr, va = fed.data.split("train"), fed.data.split("val")
    return full(tr), full(va)


def test_neumann_sum_matches_closed_form_local_hypergradient():
    task, fed = make()
    M = fed.data.num_clients
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(M, task.dx, generator=gen)
    y = torch.randn(M, task.dy, generator=gen)
    bt, bv = _stack(task, fed)
    est = neumann_hypergrad(task.f, task.g, x, y, bv, bt, [bt] * 40, 0.25, "sum")
    for m in range(M):
        assert torch.allclose(est[m], task.local_hypergrad(x[m], y[m], m), atol=1e-4)
    # at y = y*_m(x) the local hypergradients are the gradient of h (local lower level, eq. 5)
    xs = x[0]
    ys = torch.stack([task.y_star(xs, m) for m in range(M)])
    est = neumann_hypergrad(task.f, task.g, xs.expand(M, -1), ys, bv, bt, [bt] * 40, 0.25, "sum")
    assert torch.allclose(est.mean(0), torch.func.grad(task.h)(xs), atol=1e-4)


def test_neumann_random_is_unbiased_for_the_truncated_series():
    """E_k[K ϑ Π_{i<=k} (I - ϑH)] = ϑ Σ_{j<K} (I - ϑH)^j: averaging eq. (13) over every k equals
    the deterministic K-term series; with K large both reach the closed form."""
    task, fed = make()
    M, K = fed.data.num_clients, 30
    gen = torch.Generator().manual_seed(4)
    x, y = torch.randn(M, task.dx, generator=gen), torch.randn(M, task.dy, generator=gen)
    bt, bv = _stack(task, fed)
    H = [bt] * (K - 1)
    avg = sum(neumann_hypergrad(task.f, task.g, x, y, bv, bt, H, 0.25, "random", torch.full((M,), k))
              for k in range(K)) / K
    det = neumann_hypergrad(task.f, task.g, x, y, bv, bt, H, 0.25, "sum")
    assert torch.allclose(avg, det, atol=1e-5)
    exact = torch.stack([task.local_hypergrad(x[m], y[m], m) for m in range(M)])
    assert torch.allclose(det, exact, atol=1e-3)
    # per-client indices: client i applies only its own k_i factors
    k = torch.tensor([0, 3, 7, 29])
    mixed = neumann_hypergrad(task.f, task.g, x, y, bv, bt, H, 0.25, "random", k)
    for i in range(M):
        one = neumann_hypergrad(task.f, task.g, x, y, bv, bt, H, 0.25, "random", torch.full((M,), int(k[i])))
        assert torch.allclose(mixed[i], one[i], atol=1e-6)


# ------------------------------------------------------------------------------------------------
# FedBiO-Local / FedBiOAcc-Local on the quadratic problem


def _hp(cls, **kw):
    hp = cls.HP()
    for k, v in kw.items():
        setattr(hp, k, v)
    return hp


def _x_star(task):
    """Stationary point of h (quadratic in x): solve ∇h(x) = 0."""
    z = torch.zeros(task.dx)
    P = torch.func.jacfwd(torch.func.grad(task.h))(z)
    return torch.linalg.solve(P, -torch.func.grad(task.h)(z))


def test_fedbio_local_full_batch_converges_to_the_closed_form_solution():
    task, fed = make()
    hp = _hp(FedBiOLocal, local_steps=1, batch_size=1000, lower_lr=0.4, upper_lr=0.6, neumann_step=0.25, Q=15)
    algo = FedBiOLocal(task, hp, fed)
    g0 = torch.func.grad(task.h)(algo.x_bar()).norm()
    for _ in range(30):
        algo.step()
    xs = _x_star(task)
    assert torch.func.grad(task.h)(algo.x_bar()).norm() < 1e-3 * g0
    assert torch.allclose(algo.x_bar(), xs, atol=1e-3)
    for m in range(fed.data.num_clients):  # every head at its own lower solution
        assert torch.allclose(algo.y[m], task.y_star(algo.x_bar(), m), atol=1e-2)
    # ledger: one round per I iterations; p floats up and down per client; samples = draws
    led = fed.ledger
    M, n_tr, n_va = 4, 20, 20
    assert led.rounds == 30 and led.floats_up == 30 * M * task.dx
    assert led.samples == 30 * M * (n_tr + n_va + n_tr + 15 * n_tr)
    assert led.hvps == 30 * M * 15 and led.jvps == 30 * M and led.grads == 30 * 2 * M


def test_fedbioacc_local_with_momentum_weight_one_is_fedbio_local():
    """STORM with weight c α_t² = 1 is the plain estimator: Alg. 4 (α_t = 1, I = 1, full batches)
    then takes exactly Alg. 3's steps."""
    t1, f1 = make(seed=1)
    t2, f2 = make(seed=1)
    common = dict(local_steps=1, batch_size=1000, lower_lr=0.3, upper_lr=0.2, neumann_step=0.25, Q=10)
    a = FedBiOLocal(t1, _hp(FedBiOLocal, **common), f1)
    b = FedBiOAccLocal(t2, _hp(FedBiOAccLocal, c_omega=1.0, c_nu=1.0, first_batch=1000, **common), f2)
    for _ in range(5):
        a.step()
        b.step()
        assert torch.allclose(a.x, b.x, atol=1e-5) and torch.allclose(a.y, b.y, atol=1e-5)
    assert f2.ledger.rounds == 5 and f2.ledger.floats_up == 5 * 4 * 2 * t2.dx
    assert f2.ledger.hvps == 4 * 10 + 5 * 2 * 4 * 10  # init + two points per iteration


def test_fedbioacc_local_converges_and_keeps_the_same_sample_at_both_points():
    task, fed = make(seed=2)
    hp = _hp(FedBiOAccLocal, local_steps=3, batch_size=1000, first_batch=1000, lower_lr=0.3, upper_lr=0.3,
             neumann_step=0.25, Q=12, c_omega=0.5, c_nu=0.5)
    algo = FedBiOAccLocal(task, hp, fed)
    g0 = torch.func.grad(task.h)(algo.x_bar()).norm()
    for _ in range(15):
        algo.step()
    assert torch.func.grad(task.h)(algo.x_bar()).norm() < 0.1 * g0
    # zero steps: with the same sample at both points the STORM estimators cannot move
    task, fed = make(seed=2)
    hp = _hp(FedBiOAccLocal, local_steps=2, batch_size=8, first_batch=8, lower_lr=0.0, upper_lr=0.0,
             c_omega=0.0, c_nu=0.0, Q=3)
    algo = FedBiOAccLocal(task, hp, fed)
    algo.step()
    om, nu = algo.omega.clone(), algo.nu.clone()
    algo.step()
    assert torch.allclose(algo.omega, om, atol=1e-6) and torch.allclose(algo.nu, nu, atol=1e-6)
