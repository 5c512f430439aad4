"""ZO-HFL (Qiu, Kim & Yousefian) and its baselines on the ``hfl`` task: sanity checks, SCAFFOLD's
control variates against their definition, exact oracles in degenerate cases, and the ledger."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fbo_cli.algorithms.zohfl import unit_directions, zo_gradient
from fbo_cli.data import load_dataset
from fbo_cli.data.hierarchical import build_hierarchical
from fbo_cli.errors import UsageError
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build, execute

torch.set_num_threads(1)


def make(algo: str, **kw):
    """An hfl algorithm on synthetic data; x̂_0 = 0 unless ``pretrain_steps`` is given (the oracles
    below start from zero)."""
    base = {"dataset": "synthetic", "clients": 5, "partition": "iid", "participation": 1.0, "rounds": 10,
            "seed": 0, "device": "cpu", "threads": 1, "pretrain_steps": 0}
    return build(resolve("hfl", algo, {**base, **kw})).algo


def ce_full(W: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(X @ W.T, y)


# --- the zeroth-order estimator ---------------------------------------------------


def test_zo_estimator_unbiased_on_quadratic():
    g = torch.Generator().manual_seed(0)
    d, N, eta = 20, 40000, 0.1
    x = torch.randn(d, generator=g, dtype=torch.float64)
    v = unit_directions(g, (N, d)).double()
    h = lambda z: 0.5 * z.pow(2).sum(-1)
    est = zo_gradient(h(x + eta * v), h(x - eta * v), v, eta, d)
    assert torch.allclose(v.norm(dim=1), torch.ones(N, dtype=torch.float64))
    err = (est.mean(0) - x).norm()
    assert err < 4 * math.sqrt(d / N) * x.norm()  # ∇h^η = x exactly for a quadratic
    assert (est[:5] - x).norm() > err  # a single estimate is noisy: the average is what converges


def test_zo_server_loop_on_nonsmooth_example_3():
    """Appendix example (3): y(x) = max(x, 0) exactly, f(x) = ½||x + 1 - y(x)||², f(0) = n/2."""
    n = 4
    f = lambda x: 0.5 * (x + 1 - x.clamp(min=0)).pow(2).sum(-1)
    one = torch.ones(n, dtype=torch.float64)
    assert f(0 * one) == n / 2 and f(0 * one) > 0.5 * f(one) + 0.5 * f(-one)  # nonconvex
    g = torch.Generator().manual_seed(1)
    x, eta = torch.zeros(n, dtype=torch.float64), 0.1
    for r in range(3000):
        v = unit_directions(g, (n,)).double()
        x = x - 0.05 / math.sqrt(r + 1) * zo_gradient(f(x + eta * v), f(x - eta * v), v, eta, n)
    assert f(x) < 0.05 * f(torch.zeros(n))
    assert (x < 0).all()  # moved off the kink to the smooth side where the minimizer -1 lies


# --- the task's oracles and the lower-level solver -----------------------------------------


def test_batched_ce_gradient_matches_autograd():
    algo = make("zohfl")
    task = algo.task
    g = torch.Generator().manual_seed(2)
    K, G, B = 3, 2, 7
    W = torch.randn(K, G * task.C, task.nf, generator=g) * 0.3
    rows = torch.randint(len(task.Y), (K, B), generator=g)
    Xb, yb = task.gather(rows)
    wb = torch.rand(K, B, generator=g)
    got = task.ce_grad(W, Xb, yb, wb, G)
    for k in range(K):
        for j in range(G):
            Wk = W[k, j * task.C:(j + 1) * task.C].clone().requires_grad_(True)
            loss = (F.cross_entropy(Xb[k] @ Wk.T, yb[k], reduction="none") * wb[k]).sum()
            (ref,) = torch.autograd.grad(loss, Wk)
            assert torch.allclose(got[k, j * task.C:(j + 1) * task.C], ref, atol=1e-5)


def test_lower_level_solver_reaches_the_lbfgs_solution():
    """Alg. 2 with γ̃_t = 0.1/(t+1) (full local data, μγ̃ > 1 as Prop. 1 needs) vs L-BFGS."""
    algo = make("zohfl", mu=20.0, batch_size=0)
    task = algo.task
    table, counts = task.client_table(torch.tensor([0]))
    X, y = task.X[table[0, :counts[0]]].double(), task.Y[table[0, :counts[0]]]
    x = torch.randn(task.C, task.nf, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 0.2
    mu = task.p.mu
    h = lambda Y: ce_full(Y, X, y) + 0.5 * mu * (Y - x).pow(2).sum()
    ystar = x.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([ystar], lr=1, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = h(ystar)
        loss.backward()
        return loss

    opt.step(closure)
    ystar = ystar.detach()
    x32 = x.float()[None]
    yH, lr_sum = algo.local(x32.clone(), x32, table, counts, 3000, mu=mu)
    assert lr_sum == pytest.approx(0.1 * sum(1 / (t + 1) for t in range(3000)))
    e0, eH = (x - ystar).norm(), (yH[0].double() - ystar).norm()
    assert eH < 0.01 * e0
    grad_norm = lambda Y: torch.func.grad(h)(Y).norm()
    assert grad_norm(yH[0].double()) < 0.01 * grad_norm(x)


def test_ball_constraint_projects_each_call():
    algo = make("zohfl", local_constraint="ball", radius=0.05, participation=0.4)
    algo.step()
    task = algo.task
    W = torch.randn(2, 2 * task.C, task.nf)
    A = torch.zeros_like(W)
    P = task.project(W, A, 2)
    norms = P.view(2, 2, -1).norm(dim=-1)
    assert torch.allclose(norms, torch.full_like(norms, 0.05), atol=1e-6)
    Wf = W.view(2, 2, -1)
    assert torch.allclose(P.view(2, 2, -1), Wf / Wf.norm(dim=-1, keepdim=True) * 0.05, atol=1e-6)


# --- the data pipeline ------------------------------------------------------------------


def test_hierarchical_split_and_dirichlet_heterogeneity():
    ds = load_dataset("synthetic")
    n_all = len(ds.y_train) + len(ds.y_test)
    shares = {}
    for alpha in (1000.0, 0.1):
        data = build_hierarchical(ds, "dirichlet", 10, 0, torch.device("cpu"), alpha=alpha)
        assert len(data.y_test) == round(0.1 * n_all)
        n_tr = len(data.y)
        assert len(data.server_idx) == round(0.3 * n_tr)
        rows = data.train_idx[data.train_mask].numpy()
        allrows = np.concatenate([rows, data.server_idx.numpy()])
        assert len(np.unique(allrows)) == len(allrows) == n_tr  # disjoint, and every row is used
        counts = F.one_hot(data.y[data.train_idx], 10).mul(data.train_mask[..., None]).sum(1).double()
        shares[alpha] = counts / counts.sum(1, keepdim=True)
        srv = torch.bincount(data.y[data.server_idx], minlength=10).double()
        assert (srv / srv.sum() - 0.1).abs().max() < 0.03  # the server's share is iid
    assert (shares[1000.0] - 0.1).abs().max() < 0.05  # near uniform
    top3 = shares[0.1].sort(1, descending=True).values[:, :3].sum(1)
    assert top3.mean() > 0.8 and (shares[1000.0].sort(1, descending=True).values[:, :3].sum(1) < 0.4).all()


def test_unit_features_undo_the_loader_normalization():
    algo = make("fedavg", dataset="mnist5k", clients=3)
    X = algo.task.X
    assert X.min() > -1e-5 and X.max() < 1 + 1e-5 and X.max() > 0.99


def test_plot_partition(tmp_path):
    from fbo_cli.evidence.report.zohfl_section import plot_partition
    from fbo_cli.tasks.hfl import partition_counts

    data = build_hierarchical(load_dataset("synthetic"), "dirichlet", 6, 0, torch.device("cpu"), alpha=0.1)
    counts = partition_counts(data)
    assert counts.sum() == data.train_mask.sum() and counts.shape == (6, 10)
    assert plot_partition(counts, tmp_path / "fig1.png").stat().st_size > 1000


# --- the baselines ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo,mu", [("fedavg", 0.0), ("fedprox", 0.5)])
def test_single_client_full_batch_is_proximal_gradient_descent(algo, mu):
    """m = 1, full local data: FedAvg is gradient descent with the restarted schedule 0.1/(t+1), FedProx
    the same on CE + (μ/2)||y - x_r||² (its local problem)."""
    a = make(algo, clients=1, batch_size=0, tau=1.0, **({"mu_prox": mu} if mu else {}))
    task = a.task
    X, y = task.X[task.table[0]], task.Y[task.table[0]]
    x = torch.zeros(task.C, task.nf)
    for r in range(4):
        a.step()
        yl = x.clone()
        for t in range(math.ceil(math.sqrt(r + 1) - 1e-9)):
            yl = yl - 0.1 / (t + 1) * (torch.func.grad(ce_full)(yl, X, y) + mu * (yl - x))
        x = yl
        assert torch.allclose(a.x.view(task.C, task.nf), x, atol=1e-5)


def test_fedavg_on_iid_split_matches_centralized():
    accs = {}
    for m in (1, 5):
        cfg = {"dataset": "synthetic", "clients": m, "partition": "iid", "participation": 1.0, "rounds": 15,
               "eval_every": 15, "tau": 2.0, "device": "cpu", "threads": 1}
        s = execute(resolve("hfl", "fedavg", cfg), write=False)
        accs[m] = s["final"]
    assert accs[1] > 0.7
    assert abs(accs[5] - accs[1]) < 0.02


def test_scaffold_control_variates_follow_their_definition():
    algo = make("scaffold", clients=3, batch_size=0, tau=1.0)
    task = algo.task
    rows = [task.table[i, :task.counts[i]] for i in range(3)]
    data = [(task.X[r], task.Y[r]) for r in rows]
    grad = torch.func.grad(ce_full)
    x0 = torch.zeros(task.C, task.nf)
    algo.step()  # round 0: H = 1, so c_i⁺ = ∇CE_i(x0) and c = mean_i c_i
    ci = torch.stack([grad(x0, X, y) for X, y in data])
    assert torch.allclose(algo.ci.view(3, task.C, task.nf), ci, atol=1e-6)
    assert torch.allclose(algo.c.view(task.C, task.nf), ci.mean(0), atol=1e-6)
    x1 = algo.x.view(task.C, task.nf).clone()
    assert torch.allclose(x1, x0 - 0.1 * ci.mean(0), atol=1e-6)
    c = ci.mean(0)
    algo.step()  # round 1: H = 2 corrected steps, then option II
    ys, lrs = [], [0.1, 0.05]
    for i, (X, y) in enumerate(data):
        yi = x1.clone()
        for lr in lrs:
            yi = yi - lr * (grad(yi, X, y) - ci[i] + c)
        ys.append(yi)
    ys = torch.stack(ys)
    ci_new = ci - c + (x1 - ys) / sum(lrs)
    assert torch.allclose(algo.ci.view(3, task.C, task.nf), ci_new, atol=1e-5)
    assert torch.allclose(algo.c.view(task.C, task.nf), c + (ci_new - ci).mean(0), atol=1e-5)
    assert torch.allclose(algo.x.view(task.C, task.nf), ys.mean(0), atol=1e-5)


# --- ZO-HFL -----------------------------------------------------------------------------------------------


def test_zohfl_common_random_numbers():
    """With η far below float32 resolution x+ == x-: with CRN the two calls see the same minibatches, so
    y+ == y- and the ZO term vanishes; with independent samples it does not."""
    a = make("zohfl", eta=1e-30)
    a.step()
    assert a.diag["gzo_norm"] == 0.0
    b = make("zohfl", eta=1e-30, crn=False)
    b.step()
    assert b.diag["gzo_norm"] > 0


def test_zohfl_server_step_is_alg1_line_8_with_data_weights():
    """H = 0 local movement (γ̃ = 0): y± = x±, so f2 differences come from the prox term only:
    f2(x+, x+) = f2(x-, x-) = 0 and x̂_1 = x̂_0 - γ_0 ∇f̃1(x̂_0; ξ_0)."""
    algo = make("zohfl", local_lr=0.0, server_batch=0)
    task = algo.task
    g1 = task.f1_grad(algo.x, task.server_rows)
    algo.step()
    assert torch.allclose(algo.x, -0.01 * g1, atol=1e-7)
    n = task.counts.double()
    assert torch.allclose(task.weights.double(), n / n.sum())


@pytest.mark.parametrize("algo,up", [("zohfl", 2), ("fedavg", 1), ("fedprox", 1), ("scaffold", 2)])
def test_one_round_per_iteration_and_payload(algo, up):
    a = make(algo, participation=0.6, tau=3.0)
    for _ in range(3):
        a.step()
        a.ledger.iterations += 1
    d, M = a.task.d, 3
    assert a.rounds_per_iteration() == 1 and a.ledger.rounds == 3
    assert a.ledger.floats_up == 3 * M * up * d
    H = sum(math.ceil(3 * math.sqrt(r + 1) - 1e-9) for r in range(3))
    per_model = 2 if algo == "zohfl" else 1
    assert a.ledger.grads == M * per_model * H + (3 if algo == "zohfl" else 0)


def test_zohfl_run_writes_global_loss_and_personal_acc(tmp_path):
    s = execute(resolve("hfl", "zohfl", {"dataset": "synthetic", "clients": 4, "partition": "dirichlet",
                                         "alpha": 0.5, "participation": 0.5, "rounds": 6, "eval_every": 3,
                                         "tau": 2.0, "holdout": 0.2, "device": "cpu", "threads": 1,
                                         "out_dir": str(tmp_path)}))
    import pandas as pd

    df = pd.read_csv(next(tmp_path.rglob("metrics.csv")))
    assert s["status"] == "done" and s["rounds_per_iteration"] == 1
    assert {"global_loss", "personal_acc", "server_loss", "test_acc"} <= set(df.columns)
    last = df.iloc[-1]
    assert last["global_loss"] == pytest.approx(last["server_loss"] + last["f2_hat"])
    assert 0 <= last["personal_acc"] <= 1


def test_bad_values_are_usage_errors():
    for algo, key, value in (("zohfl", "client_weighting", "median"), ("zohfl", "aggregate", "mean"),
                             ("fedavg", "local_constraint", "box"), ("scaffold", "lr_schedule", "cosine")):
        with pytest.raises(UsageError) as e:
            make(algo, **{key: value})
        assert (e.value.kind, e.value.field, e.value.value) == ("bad_value", key, value)


def test_same_client_sequence_for_every_method():
    seqs = []
    for algo in ("zohfl", "fedavg", "scaffold"):
        a = make(algo, participation=0.4, tau=1.0)
        seqs.append([a.sample().tolist() for _ in range(4)])
    assert seqs[0] == seqs[1] == seqs[2] and len({tuple(s) for s in seqs[0]}) > 1


def test_zohfl_without_server_data_has_no_f1():
    cfg = {"dataset": "synthetic", "clients": 3, "participation": 1.0, "rounds": 3, "tau": 1.0,
           "server_frac": 0.0, "device": "cpu", "threads": 1}
    s = execute(resolve("hfl", "zohfl", cfg), write=False)
    assert s["status"] == "done" and s["ledger"]["grads"] == 3 * 2 * (1 + 2 + 2)  # no server gradient


def test_zohfl_options():
    a, b = make("zohfl", participation=0.4), make("zohfl", participation=0.4, aggregate="unbiased")
    a.step()
    b.step()
    assert b.diag["gzo_norm"] == pytest.approx(a.diag["gzo_norm"] * 5 / 2, rel=1e-5)  # m/|S_r|
    c = make("zohfl", participation=0.4, num_dirs=3, warm_start=True)
    c.step()
    c.step()
    assert c.ledger.floats_up == 2 * 2 * (2 * 3 * c.task.d) and c.seen.sum() >= 2


def test_baselines_with_the_server_as_a_client():
    a = make("scaffold", participation=0.4, server_client=True)
    a.step()
    assert a.ci.shape[0] == 6 and a.ci[5].abs().sum() > 0  # the server's control variate moved
    b = make("fedavg", participation=0.4, server_client=True)
    b.step()
    assert b.ledger.floats_up == 2 * b.task.d  # the server's own "client" does not communicate


# --- server pre-training and the server-only yardstick ----------------------------------------------------


def test_server_pretraining_is_sgd_on_the_server_data_and_shared_by_all_methods():
    """x̂_0 with ``pretrain_steps`` = K is K steps of SGD on the server's rows, the same for every method
    of a seed (its own generator), and leaves the run's generator untouched; K = 0 is x̂_0 = 0."""
    a, b = make("zohfl", pretrain_steps=5), make("fedavg", pretrain_steps=5)
    assert torch.equal(a.x, b.x) and a.x.abs().sum() > 0
    assert torch.equal(make("zohfl").x, torch.zeros_like(a.x))
    task = make("zohfl", pretrain_steps=0).task
    srv = task.server_rows
    gen = torch.Generator().manual_seed(0 * 7919 + 13)
    x = torch.zeros(task.d)
    for _ in range(5):
        x = x - 0.1 * task.f1_grad(x, srv[torch.randint(len(srv), (64,), generator=gen)])
    assert torch.allclose(a.x, x, atol=1e-6)
    assert torch.equal(a.fed.gen.get_state(), make("zohfl").fed.gen.get_state())


def test_server_only_is_sgd_with_the_zohfl_schedule_and_sends_nothing():
    a = make("server-only", server_batch=0)
    task = a.task
    x = a.x.clone()
    for r in range(3):
        a.step()
        x = x - 0.01 / math.sqrt(r + 1) * task.f1_grad(x, task.server_rows)
    assert torch.allclose(a.x, x, atol=1e-6)
    led = a.ledger
    assert led.rounds == 3 and led.floats_up == 0 and led.floats_down == 0 and led.grads == 3


def test_a_spec_may_name_the_metrics_an_algorithm_adds_after_its_first_step(tmp_path):
    """Fig. 2's ``global_loss`` (ZO-HFL's own metric, present once clients have reported f2) passes the
    spec check, which evaluates at the initial point; an unknown metric is still refused."""
    from fbo_cli.errors import UsageError
    from fbo_cli.grids.plan import check_metrics
    from fbo_cli.grids.spec import load_spec

    def spec(metric):
        p = tmp_path / f"{metric}.yaml"
        p.write_text(f"name: s\ntask: hfl\nmetric: {metric}\nbase: {{dataset: synthetic, clients: 4, "
                     f"partition: iid, rounds: 2, threads: 1, out_dir: {tmp_path}}}\n"
                     "algorithms: [{name: Z, algo: zohfl}]\n")
        return load_spec(p)

    check_metrics(spec("global_loss"))
    with pytest.raises(UsageError, match="'bogus' is not a metric"):
        check_metrics(spec("bogus"))
