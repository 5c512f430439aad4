"""CODA+ and CODASCA (Yuan et al., ICML 2021; federated deep AUC maximization): the paper's invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from fbo_cli.data import build_federated
from fbo_cli.data.sources import Dataset
from fbo_cli.errors import UsageError
from fbo_cli.evidence.report.codasca_section import imax_table
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build, execute
from fbo_cli.tasks.auc import AUC, auc_score, per_client_grads

torch.set_num_threads(1)


def make(algo="codaplus", **kw):
    cfg = {"dataset": "synth-c100", "clients": 4, "partition": "class-disjoint", "threads": 1, "I": 4,
           "T0": 10_000, "out_dir": "/tmp/fbo-test-auc", **kw}
    return build(resolve("auc", algo, cfg)).algo


def full_batch(task, client=None):
    """All training rows of one client (or of all clients) as one batch with mean weights."""
    rows = task.idx[task.mask] if client is None else task.idx[client][task.mask[client]]
    n = len(rows)
    return {"X": task.data.X[rows], "y": task.ybin[rows], "w": torch.full((n,), 1.0 / n)}


# --------------------------------------------------------------------------------------------------
# the metric


def test_auc_metric_hand_made_cases():
    assert auc_score(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])) == pytest.approx(0.75)
    assert auc_score(torch.tensor([0.5, 0.5]), torch.tensor([0, 1])) == pytest.approx(0.5)  # a tie counts 1/2
    assert auc_score(torch.tensor([0.2, 0.3, 0.9]), torch.tensor([0, 0, 1])) == pytest.approx(1.0)
    assert auc_score(torch.tensor([0.9, 0.3, 0.2]), torch.tensor([0, 0, 1])) == pytest.approx(0.0)
    # ties across classes, pairs (pos, neg): (.5, .5) -> 1/2, (.5, .1), (.7, .5), (.7, .1) -> 1
    assert auc_score(torch.tensor([0.5, 0.7, 0.5, 0.1]), torch.tensor([1, 1, 0, 0])) == pytest.approx(3.5 / 4)
    assert np.isnan(auc_score(torch.tensor([0.1, 0.2]), torch.tensor([1, 1])))
    g = torch.Generator().manual_seed(0)
    s = torch.randint(0, 20, (500,), generator=g).float() / 20  # many ties
    y = torch.rand(500, generator=g) < 0.3
    assert auc_score(s, y) == pytest.approx(roc_auc_score(y.numpy(), s.numpy()), abs=1e-12)


# --------------------------------------------------------------------------------------------------
# data: class-disjoint clients, imbalance, untouched test set


def test_class_disjoint_imbalanced_data():
    algo = make(clients=8, imratio=0.1)
    task = algo.task
    y = task.data.y
    classes = [set(y[task.idx[k][task.mask[k]]].tolist()) for k in range(8)]
    for i in range(8):
        for j in range(i + 1, 8):
            assert not classes[i] & classes[j]
        neg = {c for c in classes[i] if c < 50}
        assert {c - 50 for c in classes[i] if c >= 50} == neg  # the paper's pairing of pos/neg groups
    assert sorted(len(c) for c in classes) == [12] * 6 + [14] * 2  # 50 = 7+7+6*6 pairs
    assert task.p_pos == pytest.approx(0.1, abs=0.005)
    assert float(task.ytest.float().mean()) == pytest.approx(0.5)  # test untouched and balanced
    assert len(task.ytest) == 5000


def test_holdout_splits_the_same_rows_and_scores_validation_only():
    """holdout: the training rows and the validation rows are disjoint and together are exactly the
    rows a client trains on without holdout (the same imbalance subsampling); val_auc is the AUC of
    the model's scores on the validation rows, computed by its definition (scikit-learn)."""
    full = make(clients=8, imratio=0.1).task
    held = make(clients=8, imratio=0.1, val_frac=0.2, holdout=True).task
    plain = make(clients=8, imratio=0.1, val_frac=0.2).task
    for k in range(8):
        train = set(held.idx[k][held.mask[k]].tolist())
        assert train and train < set(plain.idx[k][plain.mask[k]].tolist())
    union = set(held.idx[held.mask].tolist()) | set(held.val_rows.tolist())
    assert union == set(plain.idx[plain.mask].tolist())
    assert not set(held.idx[held.mask].tolist()) & set(held.val_rows.tolist())
    assert "val_auc" not in full.evaluate(torch.zeros(full.dw + 3))
    v = torch.randn(held.dw + 3, generator=torch.Generator().manual_seed(0))
    out = held.evaluate(v)
    scores = held.score(v[:held.dw], held.data.X[held.val_rows]).numpy()
    assert out["val_auc"] == pytest.approx(roc_auc_score(held.ybin[held.val_rows].numpy(), scores), abs=1e-12)


# --------------------------------------------------------------------------------------------------
# losses


@pytest.mark.parametrize("loss", ["square", "aucm"])
def test_optimum_identity_and_stationarity(loss):
    margin = 1.0 if loss == "square" else 0.7
    algo = make(clients=1, partition="iid", loss=loss, dual_constraint="none", margin=margin)
    task = algo.task
    b = full_batch(task)
    task.p_pos = float(b["y"].mean())  # the data's own p: the batch mean is then the population f
    p, m = task.p_pos, task.p.margin
    w = algo.vk[0, :task.dw]
    h = task.score(w, b["X"]).detach()
    pos = b["y"].bool()
    a, bb = h[pos].mean(), h[~pos].mean()
    alpha = bb - a + (m if loss == "aucm" else 0.0)
    v = torch.cat([w, torch.stack([a, bb])])
    al = alpha.reshape(1)
    val = task.objective(v, al, b)
    pair = ((m if loss == "aucm" else 1.0) - h[pos][:, None] + h[~pos][None, :]) ** 2
    expect = p * (1 - p) * (pair.mean() - (1.0 if loss == "square" else 0.0))
    assert float(val) == pytest.approx(float(expect), rel=1e-4, abs=1e-6)
    # a*, b* minimize and alpha* maximizes: zero partial gradients there
    gv, ga = torch.func.grad(task.objective, argnums=(0, 1))(v, al, b)
    assert float(gv[task.dw:].abs().max()) < 1e-5 and float(ga.abs().max()) < 1e-5


def test_closed_form_dual_gradient_is_scaled_population_gradient():
    algo = make(clients=1, partition="iid", loss="aucm", dual_constraint="none")
    task = algo.task
    b = full_batch(task)
    task.p_pos = float(b["y"].mean())
    p = task.p_pos
    w = algo.vk[0, :task.dw]
    h = task.score(w, b["X"]).detach()
    pos = b["y"].bool()
    v = torch.cat([w, torch.stack([h[pos].mean(), h[~pos].mean()])])
    al = torch.tensor([0.3])
    ga = torch.func.grad(task.objective, argnums=1)(v, al, b)
    assert float(ga) == pytest.approx(p * (1 - p) * float(task.dual_closed_form(v, al)), rel=1e-4)


# --------------------------------------------------------------------------------------------------
# algorithms: degenerate cases


def test_codasca_with_one_client_is_codaplus():
    a1 = make("codaplus", clients=1, partition="iid", I=3, T0=7)
    a2 = make("codasca", clients=1, partition="iid", I=3, T0=7, eta_g=1.0)
    for _ in range(5):
        a1.step()
        a2.step()
    assert torch.allclose(a1.vk, a2.vk, atol=1e-6) and torch.allclose(a1.ak, a2.ak, atol=1e-6)
    assert torch.allclose(a1.ref, a2.ref, atol=1e-6) and a1.stage == a2.stage == 2


def test_codaplus_I1_is_minibatch_sgda_on_the_union_batch():
    algo = make("codaplus", clients=4, I=1, gamma=0.05)
    task = algo.task
    v0, a0 = algo.vk[0].clone(), algo.ak[0].clone()
    algo.ref = v0 + 0.01  # a reference away from the iterate, so the proximal term counts
    pos, valid = algo.sampler.next()
    algo.sampler.next = lambda: (pos, valid)
    algo.step()
    b = task.batch(pos, valid)
    union = {"X": b["X"].flatten(0, 1), "y": b["y"].flatten(), "w": b["w"].flatten() / 4}
    gv, ga = torch.func.grad(task.objective, argnums=(0, 1))(v0, a0, union)
    gv = gv + 0.05 * (v0 - algo.ref)
    assert torch.allclose(algo.vk[0], v0 - 0.1 * gv, atol=1e-6)
    assert torch.allclose(algo.ak[0], a0 + 0.1 * ga, atol=1e-7)


def test_identical_clients_make_the_window_irrelevant():
    runs = []
    for I in (1, 4):
        algo = make("codaplus", clients=4, partition="iid", I=I)
        task = algo.task
        task.idx[:] = task.idx[0]
        task.mask[:] = task.mask[0]
        nxt = algo.sampler.next
        algo.sampler.next = lambda nxt=nxt: tuple(t[:1].expand(4, -1) for t in nxt())  # one shared stream
        for _ in range(8 // I):
            algo.step()
        runs.append(algo.vk[0])
    assert torch.allclose(runs[0], runs[1], atol=1e-6)


def test_control_variates_eq6_equals_eq7():
    a6 = make("codasca", clients=4, I=5, control="eq6")
    a7 = make("codasca", clients=4, I=5, control="eq7")
    for _ in range(3):
        a6.step()
        a7.step()
    assert torch.allclose(a6.cvk, a7.cvk, atol=2e-4, rtol=1e-3)
    assert torch.allclose(a6.cak, a7.cak, atol=2e-4, rtol=1e-3)
    assert torch.allclose(a6.vk, a7.vk, atol=1e-5)
    assert float(a7.cvk.abs().max()) > 0  # they are not trivially zero


def test_control_variates_are_the_mean_gradient_of_the_round():
    algo = make("codasca", clients=3, I=3)
    seen = []
    orig = algo.local_grads

    def spy():
        g = orig()
        seen.append(g)
        return g

    algo.local_grads = spy
    algo.step()
    assert torch.allclose(algo.cvk, sum(g[0] for g in seen) / 3, atol=1e-7)
    assert torch.allclose(algo.cv, algo.cvk.mean(0), atol=1e-7)
    assert torch.allclose(algo.vk[1], algo.vk[0])  # broadcast: one consensus point


# --------------------------------------------------------------------------------------------------
# ledger and the stage schedule


def test_rounds_and_payload():
    a1, a2 = make("codaplus", clients=4, I=6), make("codasca", clients=4, I=6)
    for _ in range(3):
        a1.step()
        a2.step()
    for a in (a1, a2):
        assert a.ledger.rounds == 3 and a.t == 18 and a.ledger.grads == 18 * 4
        assert a.rounds_per_iteration() == 1
    assert a1.ledger.floats_up == 3 * 4 * (a1.task.dv + 1)
    assert a2.ledger.floats_up == 2 * a1.ledger.floats_up
    assert a2.ledger.floats_down == 2 * a1.ledger.floats_down


def test_stage_schedule_at_round_boundaries():
    algo = make("codasca", clients=2, I=3, T0=5, eta=0.09)
    ts, etas, refs = [], [], [algo.ref.clone()]
    for _ in range(5):
        algo.step()
        ts.append(algo.t)
        etas.append(algo.eta)
        refs.append(algo.ref.clone())
    # rounds end at t = 3, 6, 9, 12, 15; stages start at the first boundary at or after 5, 10, 15
    assert ts == [3, 6, 9, 12, 15]
    assert etas == pytest.approx([0.09, 0.03, 0.03, 0.01, 0.09 / 27])
    changed = [not torch.equal(refs[i], refs[i + 1]) for i in range(5)]
    assert changed == [False, True, False, True, True]


def test_stage_output_average_and_restart():
    algo = make("codaplus", clients=2, I=2, T0=4, stage_restart="output")
    iterates = []
    orig = algo._apply

    def spy(dv, da):
        orig(dv, da)
        iterates.append(algo.vk.mean(0).clone())

    algo._apply = spy
    algo.step()
    algo.step()
    avg = torch.stack(iterates).mean(0)
    assert torch.allclose(algo.ref, avg, atol=1e-6) and torch.allclose(algo.vk[0], avg, atol=1e-6)


def test_random_round_output_and_control_variate_reset():
    algo = make("codasca", clients=3, I=2, T0=6, stage_output="random_round", stage_restart="output")
    rounds = []
    for _ in range(3):
        algo.step()
        rounds.append(algo.vk[0].clone())
    # the third round ended stage 1: the reference is one of its three round iterates, the clients
    # restart there, and the control variates start again from 0 (Alg. 4's initialization)
    assert algo.stage == 1 and any(torch.equal(algo.ref, r) for r in rounds)
    assert torch.equal(algo.vk[0], algo.ref)
    assert float(algo.cvk.abs().max()) == 0.0 and float(algo.cv.abs().max()) == 0.0


# --------------------------------------------------------------------------------------------------
# end to end, other models, the baseline, the analysis


def test_runner_end_to_end_learns_and_writes(tmp_path):
    cfg = resolve("auc", "codasca", {"dataset": "digits", "clients": 5, "partition": "class-disjoint",
                                      "model": "mlp", "eta": 1.0, "I": 4, "T0": 200, "rounds": 20,
                                      "eval_every": 10, "threads": 1, "imratio": 0.3,
                                      "out_dir": str(tmp_path)})
    s = execute(cfg)
    assert s["status"] == "done" and s["ledger"]["rounds"] == 20
    assert s["final"] > 0.85  # digits: 5-9 vs 0-4 is learnable (about 0.98 here)
    assert (cfg.run_dir / "metrics.csv").is_file()


def test_code_preset_keeps_alpha_nonnegative_and_clips():
    algo = make("codasca", clients=4, preset="code", I=3)
    assert algo.clip == 1.0 and algo.dual_grad == "closed_form" and algo.wd == 1e-5
    for _ in range(3):
        algo.step()
    assert float(algo.ak.min()) >= 0.0


def test_fedavg_ce_baseline():
    algo = make("fedavg-ce", clients=4, I=5)
    for _ in range(4):
        algo.step()
    assert algo.ledger.rounds == 4 and algo.ledger.floats_up == 4 * 4 * algo.task.dw
    assert 0.0 <= algo.evaluate()["test_auc"] <= 1.0


def tiny_images(shape, classes, n=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    X = torch.randn(n, *shape, generator=g) + y.view(-1, *[1] * len(shape)).float() / classes
    return Dataset("tiny", X[:80], y[:80], X[80:], y[80:], classes)


@pytest.mark.parametrize("shape,kind", [((3, 32, 32), "resnet20"), ((1, 28, 28), "cnn")])
def test_image_models_vectorized_over_clients(shape, kind):
    ds = tiny_images(shape, 10)
    data = build_federated(ds, "class-disjoint", 2, 0, torch.device("cpu"))
    task = AUC(AUC.Params(imratio=0.3), data)
    assert task.model_kind == kind
    gen = torch.Generator().manual_seed(0)
    v0, a0 = task.init(gen)
    vk = torch.stack([v0, v0 + 0.01 * torch.randn(v0.shape, generator=gen)])
    ak = torch.stack([a0, a0 + 0.1])
    pos = torch.tensor([[0, 1, 2], [0, 1, 2]])
    b = task.batch(pos, torch.ones(2, 3, dtype=torch.bool))
    gv, ga = per_client_grads(torch.func.vmap(task.objective), vk, ak, b)
    for k in range(2):  # the vectorized per-client gradient equals the single-client one
        bk = {key: t[k] for key, t in b.items()}
        g1, g2 = torch.func.grad(task.objective, argnums=(0, 1))(vk[k], ak[k], bk)
        assert torch.allclose(gv[k], g1, atol=1e-5) and torch.allclose(ga[k], g2, atol=1e-6)
    assert 0.0 <= task.evaluate(v0)["test_auc"] <= 1.0


def test_imax_table(tmp_path):
    import pandas as pd
    import yaml

    rows = []
    auc = {("CODA+", 1): 0.90, ("CODA+", 8): 0.895, ("CODA+", 32): 0.85,
           ("CODASCA", 1): 0.90, ("CODASCA", 8): 0.899, ("CODASCA", 32): 0.893}
    for (algo, I), v in auc.items():
        for seed in (0, 1):
            d = tmp_path / f"{algo}{I}{seed}"
            d.mkdir()
            (d / "config.yaml").write_text(yaml.safe_dump({"clients": 8, "hp": {"I": I}}))
            rows.append({"algorithm": algo, "setting": f"I={I}", "seed": seed, "status": "done",
                         "run_dir": str(d), "final": v + (0.001 if seed else -0.001)})
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    t = imax_table(tmp_path)
    got = dict(zip(t.algorithm, t.I_max, strict=True))
    assert got == {"CODA+": 8, "CODASCA": "≥ 32"}  # at the grid's top: censored, a lower bound
    assert (tmp_path / "imax.md").is_file() and (tmp_path / "imax.png").is_file()


def test_bad_input_is_a_usage_error():
    for key, value in (("preset", "nope"), ("imratio", 1.5), ("stage_output", "best")):
        with pytest.raises(UsageError) as e:
            make(**{key: value})
        assert (e.value.kind, e.value.field, e.value.value) == ("bad_value", key, value)


# --------------------------------------------------------------------------------------------------
# the mlp's closed-form gradients (``fast``) and the in-place updates, against a literal loop (float64)


def _double_algo(algo):
    """The algorithm's data and state in float64 (the test compares at rtol 1e-10)."""
    task = algo.task
    task.data.X, task.data.X_test, task.ybin = task.data.X.double(), task.data.X_test.double(), task.ybin.double()
    algo.vk = algo.vk.double()
    if hasattr(algo, "ak"):
        algo.ak, algo.ref = algo.ak.double(), algo.ref.double()
        algo._new_stage()
    else:
        algo.a0 = algo.a0.double()
    return algo


def _literal_round(algo, batches, v, a, cv=None, ca=None, cvk=None, cak=None):
    """One round of CODA+ (Alg. 2) / CODASCA (Alg. 4) / FedAvg-CE written client by client with
    ``torch.func.grad`` of the task's loss, on the recorded minibatches, from the broadcast (v, a)."""
    task, K = algo.task, len(batches[0]["w"])
    eta, gamma, dw = algo.eta if hasattr(algo, "eta") else algo.hp.eta, getattr(algo, "gamma", 0.0), task.dw
    loss = task.bce if not hasattr(algo, "ak") else task.objective
    vs, as_, sums = [v.clone() for _ in range(K)], [a.clone() for _ in range(K)], [0.0] * K
    for b in batches:
        for k in range(K):
            bk = {key: t[k] for key, t in b.items()}
            gv, ga = torch.func.grad(loss, argnums=(0, 1))(vs[k], as_[k], bk)
            if getattr(algo, "clip", 0):
                gv = torch.cat([gv[:dw].clamp(-algo.clip, algo.clip), gv[dw:]])
            if getattr(algo, "dual_grad", "") == "closed_form":
                ga = task.dual_closed_form(vs[k], as_[k])
            gv = gv + gamma * (vs[k] - algo.ref) if hasattr(algo, "ref") else gv
            sums[k] = sums[k] + gv
            dv, da = (gv, ga) if cv is None else (gv - cvk[k] + cv, ga - cak[k] + ca)
            wd = getattr(algo, "wd", 0.0) or 0.0
            dv = dv + torch.cat([wd * vs[k][:dw], torch.zeros_like(vs[k][dw:])])
            vs[k] = vs[k] - eta * dv
            as_[k] = task.project_dual(as_[k] + eta * da) if hasattr(algo, "ak") else as_[k]
    return torch.stack(vs), torch.stack(as_), [s / len(batches) for s in sums]


@pytest.mark.parametrize("algo_name", ["codaplus", "codasca", "fedavg-ce"])
@pytest.mark.parametrize("preset", ["paper", "code"])
@pytest.mark.parametrize("fast", [True, False])
def test_round_matches_a_literal_per_client_loop(algo_name, preset, fast):
    """Two rounds of each method, closed-form mlp gradients (``fast``) and autograd, against the same
    rounds written client by client (float64, rtol 1e-10): the batched backward pass, the in-place
    proximal, weight-decay and control-variate updates change nothing but rounding."""
    kw = {} if algo_name == "fedavg-ce" else {"gamma": 0.05}
    algo = _double_algo(make(algo_name, clients=3, I=3, preset=preset, fast=fast, **kw))
    task = algo.task
    seen, orig = [], task.batch
    task.batch = lambda pos, valid: seen.append(orig(pos, valid)) or seen[-1]
    for _ in range(2):
        seen.clear()
        v, a = algo.vk[0].clone(), (algo.ak[0].clone() if hasattr(algo, "ak") else algo.a0)
        ctrl = {}
        if algo_name == "codasca":
            ctrl = dict(cv=algo.cv.clone(), ca=algo.ca.clone(), cvk=algo.cvk.clone(), cak=algo.cak.clone())
        if hasattr(algo, "ref"):
            algo.ref = algo.ref + 0.01  # a proximal reference away from the iterate
        algo.step()
        vs, as_, means = _literal_round(algo, seen, v, a, **ctrl)
        torch.testing.assert_close(algo.vk[0], vs.mean(0), rtol=1e-10, atol=1e-12)
        if hasattr(algo, "ak"):
            torch.testing.assert_close(algo.ak[0], task.project_dual(as_.mean(0)), rtol=1e-10, atol=1e-12)
        if algo_name == "codasca":  # eq. 7: the control variates are the round's mean applied gradients
            torch.testing.assert_close(algo.cvk, torch.stack(means), rtol=1e-10, atol=1e-12)
