"""Run batches (fbo_cli/grids/run_batches.py): runs stepped together give each run's metrics.csv and ledger as the run
alone does (identical, by fbo check's rule; on hyper-cleaning, whose batch evaluates its runs in one pass, the
iterates and every metric of x identical and the evaluation's metrics within float rounding), a diverging run
leaves the batch alone, and the grouping."""

import csv
import json

import pytest

from fbo_cli.algorithms.runs_as_clients import Rate
from fbo_cli.errors import UsageError
from fbo_cli.evidence.check import compare_run
from fbo_cli.grids.run_batches import execute_batch, group_batches, parse_batch, seeds_batch
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import execute

HC = {"dataset": "digits", "clients": 4, "participation": 1.0, "partition": "dirichlet", "noise": 0.3,
      "batch_size": 16, "local_steps": 2}
HR = {"dataset": "digits", "clients": 6, "participation": 0.5, "hidden": 16}

# every algorithm that batches, with the float hyperparameter its grid varies: all identical bit for bit
CASES = [("hyperclean", "fedbio", "upper_lr", HC), ("hyperclean", "fedbioacc", "lower_lr", HC),
         ("hyperrep", "fednest", "inner_lr", HR), ("hyperrep", "aggitd", "outer_lr", HR),
         # the FedNest family on hyper-cleaning: the SVRG pair one call for the runs' x and anchors (run_globals)
         ("hyperclean", "fednest", "inner_lr", {**HC, "lower_epochs": 2, "T": 2}),
         ("hyperclean", "lfednest", "outer_lr", {**HC, "lower_epochs": 1, "T": 2}),
         ("hyperclean", "aggitd", "inner_lr", {**HC, "lower_epochs": 2})]


# hyper-cleaning's one-pass evaluation of a batch (HyperClean.evaluate_runs): these metrics agree within float
# rounding; the rest (the ledger, detection from x, the divergence checks' outcome) is bit for bit the run alone
EVAL_AGREES = {"hyperclean": {"test_acc", "test_loss", "upper_loss", "heldout_loss"},
               "hfl": {"test_acc", "test_loss", "server_loss", "global_loss"}}


def same_as_alone(ca, cb) -> None:
    """``cb`` (a run of a batch) is the run ``ca`` alone: identical, or where the task evaluates a batch in one pass,
    identical but for :data:`EVAL_AGREES`, which agree (fbo check's rule)."""
    r = compare_run(ca.run_dir, cb.run_dir)
    loose = EVAL_AGREES.get(ca.task, set())
    assert r["outcome"] in (("identical", "agrees") if loose else ("identical",)), (cb.run_id, r)
    rows = [list(csv.DictReader((c.run_dir / "metrics.csv").read_text().splitlines())) for c in (ca, cb)]
    assert len(rows[0]) == len(rows[1])
    for a, b in zip(*rows):
        assert a.keys() == b.keys()
        assert {k: v for k, v in a.items() if k not in loose | {"train_time"}} == \
               {k: v for k, v in b.items() if k not in loose | {"train_time"}}


def _cfgs(task, algo, key, base, out, factors=(0.5, 1.0), seeds=(0, 1), **run):
    v = getattr(resolve(task, algo, base).hp, key)
    run = {"rounds": 6, "eval_every": 2, **run}
    return [resolve(task, algo, {**base, "threads": 1, "out_dir": str(out), "seed": s, key: v * f, **run})
            for s in seeds for f in factors]


@pytest.mark.parametrize("task,algo,key,base", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_batch_of_two_seeds_by_two_steps_is_each_run_alone(tmp_path, task, algo, key, base):
    batched = _cfgs(task, algo, key, base, tmp_path / "batch")
    # a batch per seed (execute_batch takes both), or one where the algorithm batches seeds (test_seed_batch.py)
    assert group_batches(batched, 4) == ([[0, 1, 2, 3]] if seeds_batch(batched[0]) else [[0, 1], [2, 3]])
    out = execute_batch(batched)
    assert [s["status"] for s in out] == ["done"] * 4
    for cb, ca in zip(batched, _cfgs(task, algo, key, base, tmp_path / "alone"), strict=True):
        execute(ca)
        same_as_alone(ca, cb)
        same = lambda c: (c.run_dir / "config.yaml").read_text().replace(c.run.out_dir, "OUT")  # noqa: E731
        assert same(cb) == same(ca)
    # a second call reuses the finished runs
    assert all(s.get("reused") for s in execute_batch(batched))


def test_a_diverging_run_leaves_the_batch_and_the_others_go_on(tmp_path):
    cfgs = _cfgs("hyperclean", "fedbio", "lower_lr", HC, tmp_path / "batch", factors=(1.0, 1e6, 3e6), seeds=(0,),
                 rounds=8, eval_every=1)
    out = execute_batch(cfgs)
    assert [s["status"] for s in out] == ["done", "diverged", "diverged"]  # the last run goes on alone
    assert out[1]["ledger"]["rounds"] < out[0]["ledger"]["rounds"] == 8
    for cb, ca in zip(cfgs, _cfgs("hyperclean", "fedbio", "lower_lr", HC, tmp_path / "alone",
                                  factors=(1.0, 1e6, 3e6), seeds=(0,), rounds=8, eval_every=1), strict=True):
        execute(ca)
        same_as_alone(ca, cb)
        assert json.loads((cb.run_dir / "summary.json").read_text())["status"] == \
            json.loads((ca.run_dir / "summary.json").read_text())["status"]


def test_grouping():
    c = lambda algo="fedbio", **kw: resolve("hyperclean", algo, {**HC, **kw})  # noqa: E731
    cfgs = [c(upper_lr=1.0), c(upper_lr=2.0, seed=1, participation=0.5), c(local_steps=3), c("fedavg-noisy"),
            c(upper_lr=3.0), c("fedbioacc"), c(delta=0.5)]
    # float steps of one seed group; another seed with a client draw, an integer setting, another algorithm
    # (fedavg-noisy, fedbioacc: each its own group) or a batch_fixed float (delta) do not
    cfgs.append(c(upper_lr=4.0))
    assert group_batches(cfgs, "auto") == [[0, 4, 7], [1], [2], [3], [5], [6]]
    assert group_batches(cfgs, "off") == [[i] for i in range(8)]
    assert group_batches(cfgs, 2) == [[0, 4], [1], [2], [3], [5], [6], [7]]
    # another seed where every client takes part joins a batch of R (a seed batch, test_seed_batch.py)
    assert group_batches([*cfgs, c(upper_lr=2.0, seed=1)], 8) == [[0, 4, 7, 8], [1], [2], [3], [5], [6]]
    fn = lambda **kw: resolve("hyperrep", "fednest", {**HR, **kw})  # noqa: E731
    assert group_batches([fn(tau=3), fn(tau=3, outer_lr=0.1)], 2) == [[0, 1]]  # local upper steps batch too,
    assert group_batches([fn(tau=3), fn(tau=3, outer_lr=0.1)]) == [[0], [1]]  # but auto runs them alone (no gain)
    ada = lambda task, base, **kw: resolve(task, "adafbio", {**base, "participation": 1.0, **kw})  # noqa: E731
    assert group_batches([ada("hyperclean", HC), ada("hyperclean", HC, gamma_x=2.0)]) == [[0, 1]]
    assert group_batches([ada("hyperrep", HR), ada("hyperrep", HR, gamma_x=2.0)]) == [[0, 1]]
    assert group_batches([fn(), fn(outer_lr=0.1)]) == [[0, 1]]
    for bad in ("0", "many", -2):
        with pytest.raises(UsageError, match="--batch"):
            parse_batch(bad)


def test_rate_arithmetic_is_each_runs_python_arithmetic():
    import torch

    r = Rate([0.1, 0.3])
    t = torch.ones(4, 3)
    assert (r * 2.0 * 0.7).v == (0.1 * 2.0 * 0.7, 0.3 * 2.0 * 0.7)
    assert ((1.0 - r) * t)[:, 0].tolist() == pytest.approx([0.9, 0.9, 0.7, 0.7])
    assert r * torch.ones(2) is not None and (r == 0.1) is False and Rate([1.0, 1.0]) == 1.0
    with pytest.raises(TypeError, match="batch_fixed"):
        float(r)


def _cells(out, algo="aggitd", task="hyperrep", base=HR, key="outer_lr"):
    from fbo_cli.grids.spec import Cell

    v = getattr(resolve(task, algo, base).hp, key)
    cells = []
    for s in (0, 1):
        for f in (0.5, 1.0):
            layers = ({**base, "rounds": 6, "eval_every": 2, "threads": 1, "out_dir": str(out), "seed": s,
                       key: v * f},)
            cells.append(Cell(f"{algo}-{f}", "s", s, resolve(task, algo, *layers), layers))
    return cells


@pytest.mark.parametrize("executor", ["serial", "processes", "ray"])
def test_executors_run_a_batch_as_one_task(tmp_path, executor):
    from fbo_cli.grids import executors

    if executor == "ray":
        ray = pytest.importorskip("ray")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        alone = _cells(tmp_path / "alone")
        executors.run_cells(alone, executor="serial", batch="off")
        batched = _cells(tmp_path / executor)
        out = executors.run_cells(batched, executor=executor, jobs=2, batch="auto")
    finally:
        if executor == "ray":
            ray.shutdown()
    assert [s["status"] for s in out] == ["done"] * 4
    for a, b in zip(alone, batched, strict=True):
        assert "in a batch of 2 runs" in (b.cfg.run_dir / "run.log").read_text()
        same_as_alone(a.cfg, b.cfg)


@pytest.mark.parametrize("task,algo,key,base,rounds", [(*CASES[1], 6), (*CASES[2], 40)], ids=["fedbioacc", "fednest"])
def test_an_interrupted_batch_writes_each_runs_checkpoint_and_resumes_bit_for_bit(tmp_path, task, algo, key, base,
                                                                                  rounds):
    from fbo_cli.runs import runner

    cfgs = _cfgs(task, algo, key, base, tmp_path / "batch", seeds=(0,), eval_every=1, rounds=rounds)
    seen = []

    def stop_at_the_third(k, row):
        seen.append(k)
        if len(seen) == 6:  # both runs evaluated twice after the start
            runner.STOP.set()

    with pytest.raises(runner.Interrupted):
        execute_batch(cfgs, on_eval=stop_at_the_third)
    assert all((c.run_dir / "checkpoint.pt").is_file() and not (c.run_dir / "summary.json").exists() for c in cfgs)
    out = execute_batch(cfgs)  # each resumes from its checkpoint (alone)
    assert all(s["resumed_from_iteration"] == 2 for s in out)
    for cb, ca in zip(cfgs, _cfgs(task, algo, key, base, tmp_path / "alone", seeds=(0,), eval_every=1, rounds=rounds),
                      strict=True):
        execute(ca)
        same_as_alone(ca, cb)


# --- the FedAvg bounds (hyperclean), CODA+, CODASCA and FedAvg-CE (auc) ---------------------------------
AUC = {"dataset": "synth-c100", "clients": 4, "I": 3, "T0": 5, "batch_size": 8, "hidden": 8, "holdout": True}
CASES_BOUNDS_AUC = [
    ("hyperclean", "fedavg-noisy", "lower_lr", HC), ("hyperclean", "fedavg-clean", "lower_lr", HC),
    ("auc", "codaplus", "eta", {**AUC, "preset": "code"}),  # clipping, weight decay, closed-form dual, alpha >= 0
    ("auc", "codasca", "eta", {**AUC, "stage_output": "random_round", "stage_restart": "output", "control": "eq6"}),
    ("auc", "codasca", "inv_gamma", {**AUC, "inv_gamma": 500.0, "eta_g": 0.9}),
    ("auc", "fedavg-ce", "eta", {**AUC, "weight_decay": 0.01}),
    ("auc", "codasca", "eta", {**AUC, "dataset": "digits", "model": "cnn", "channels": 4}),  # autograd through vmap
]


@pytest.mark.parametrize("task,algo,key,base", CASES_BOUNDS_AUC,
                         ids=[f"{c[1]}-{c[2]}" + ("-cnn" if c[3].get("model") else "") for c in CASES_BOUNDS_AUC])
def test_bounds_and_auc_batch_of_two_seeds_by_two_settings_is_each_run_alone(tmp_path, task, algo, key, base):
    batched = _cfgs(task, algo, key, base, tmp_path / "batch")
    assert group_batches(batched, "auto", (tmp_path,)) == [[0, 1], [2, 3]]  # no seed batch measured to gain
    out = execute_batch(batched)
    assert [s["status"] for s in out] == ["done"] * 4
    assert all("stepped together" in (c.run_dir / "run.log").read_text() for c in batched)
    metrics = []
    for cb, ca in zip(batched, _cfgs(task, algo, key, base, tmp_path / "alone"), strict=True):
        execute(ca)
        same_as_alone(ca, cb)
        metrics.append((cb.run_dir / "metrics.csv").read_text())
    assert metrics[0] != metrics[1] and metrics[0] != metrics[2]  # the setting and the seed change the numbers


def test_grouping_of_the_auc_methods():
    h = lambda algo="fedavg-noisy", **kw: resolve("hyperclean", algo, {**HC, **kw})  # noqa: E731
    assert group_batches([h(lower_lr=0.01), h("fedavg-clean", lower_lr=0.01), h(lower_lr=0.02)]) == [[0, 2], [1]]
    a = lambda algo="codasca", **kw: resolve("auc", algo, {**AUC, **kw})  # noqa: E731
    cfgs = [a(eta=0.1), a(eta=0.2, decay=2.0), a(eta=0.3), a(inv_gamma=0.0), a(inv_gamma=0.0, eta=0.2),
            a(grad_clip=0.5), a(inv_gamma=500.0), a(inv_gamma=700.0), a("codaplus"), a("fedavg-ce")]
    # decay and grad_clip are batch_fixed; an inv_gamma of 0 (gamma then) runs alone; None and a number differ
    assert group_batches(cfgs) == [[0, 2], [1], [3], [4], [5], [6, 7], [8], [9]]
# --------------------------------------------------------------------------------------------------
# AdaFBiO and the local-lower family (client-stacked state [R, M, d], folded calls), FedNest,
# LFedNest and FBO-AggITD with local upper steps (tau > 1): all identical bit for bit to each run alone

HCA = {**HC, "neumann_steps": 3}  # AdaFBiO: q = 2 local iterations, K = 3 Neumann batches
HRA = {"dataset": "digits", "clients": 4, "participation": 1.0, "hidden": 16, "batch_size": 16, "local_steps": 2}
HRL = {**HRA, "lower": "local", "neumann_steps": 3}  # per-client heads
CASES_CLIENT_STATE = [("hyperclean", "adafbio", "gamma_x", HCA),
             ("hyperclean", "adafbio-adabelief", "lambda_y", {**HCA, "init_matrices": "identity"}),
             ("hyperclean", "adafbio", "rho_decay", {**HCA, "neumann": "sum"}),
             ("hyperrep", "adafbio-none", "gamma_x", {**HRA, "neumann_steps": 3}),
             ("hyperrep", "adafbio-adabelief", "rho_floor", {**HRL, "dropout": 0.5}),
             ("hyperrep", "fedbio-local", "upper_lr", HRL),
             ("hyperrep", "fedbioacc-local", "neumann_step", HRL),
             ("hyperrep", "fednest", "outer_lr", {**HR, "tau": 3}),
             ("hyperrep", "aggitd", "outer_lr", {**HR, "tau": 3}),
             ("hyperrep", "lfednest", "lam", {**HR, "tau": 2}),
             ("hyperrep", "fednest", "lam", {**HR, "tau": 2, "neumann": "code"})]


@pytest.mark.parametrize("task,algo,key,base", CASES_CLIENT_STATE, ids=[f"{c[1]}-{c[2]}" for c in CASES_CLIENT_STATE])
def test_client_state_and_local_upper_steps_batch_bit_for_bit(tmp_path, task, algo, key, base):
    test_batch_of_two_seeds_by_two_steps_is_each_run_alone(tmp_path, task, algo, key, base)


def test_adafbio_runs_that_diverge_leave_the_batch_with_their_matrices(tmp_path):
    """Per-run state of other shapes ([R] float64 b_t, B_t; [R, d_x] A_t) leaves with its run."""
    def cfgs(out):
        return _cfgs("hyperclean", "adafbio", "lambda_y", HCA, out, factors=(0.5, 1e5, 1.0), seeds=(0,), rounds=6,
                     eval_every=1)
    out = execute_batch(cfgs(tmp_path / "batch"))  # the second leaves after 2 rounds, the others go on together
    assert [s["status"] for s in out] == ["done", "diverged", "done"]
    assert out[1]["ledger"]["rounds"] < out[0]["ledger"]["rounds"] == 6
    for cb, ca in zip(cfgs(tmp_path / "batch"), cfgs(tmp_path / "alone"), strict=True):
        execute(ca)
        same_as_alone(ca, cb)


@pytest.mark.parametrize("algo,base", [("adafbio-adabelief", HCA), ("fedbioacc-local", HRL)])
def test_an_interrupted_client_state_batch_resumes_bit_for_bit(tmp_path, algo, base):
    task = "hyperclean" if base is HCA else "hyperrep"
    key = "gamma_x" if algo.startswith("adafbio") else "upper_lr"
    test_an_interrupted_batch_writes_each_runs_checkpoint_and_resumes_bit_for_bit(tmp_path, task, algo, key, base, 8)


# --- hyper-cleaning's client copies of x as a BlockStack, features shared by the runs ---------------------


@pytest.mark.parametrize("algo", ["fedbio", "fedbioacc"])
def test_fedbio_block_stack_is_the_dense_client_copies_bit_for_bit(algo):
    """FedBiO's copies of x on hyper-cleaning (a BlockStack: each coordinate's owner and the others) step as the
    dense [M, dx] copies do: with clients left out of a round and minibatches padded past a small client."""
    import torch

    from fbo_cli.runs.runner import build

    cfg = resolve("hyperclean", algo, {**HC, "clients": 6, "alpha": 0.1, "participation": 0.5, "batch_size": 64,
                                       "threads": 1})
    blocks, dense = build(cfg).algo, build(cfg).algo
    dense.task.x_owner = None  # the dense client copies
    assert int(blocks.task.block.min()) < 64  # a client smaller than a minibatch: padding rows
    for _ in range(3):
        blocks.step()
        dense.step()
        for k, v in dense.state().items():
            assert torch.equal(blocks.state()[k], v), k


@pytest.mark.parametrize("C,h", [(10, 784), (2, 30)])  # MKL: the runs' rows stacked keep the bits, or not (C = 2)
def test_softmax_products_with_features_shared_by_the_runs_are_each_runs(C, h):
    """softmax.py with the M clients' features for R*M rows (a run batch): each run's rows exactly as with the
    features repeated for every run, on the first call of a shape (checked) and after (remembered)."""
    import torch

    from fbo_cli.sim import federation
    from fbo_cli.tasks import softmax

    g = torch.Generator().manual_seed(0)
    R, M, n = 3, 4, 64
    sm = softmax.SoftmaxHead(C, h)
    A = torch.rand(M, n, h, generator=g)
    Ar = A.repeat(R, 1, 1)
    y, v, y0 = (0.05 * torch.randn(R * M, C * h + C, generator=g) for _ in range(3))
    t = torch.randint(0, C, (R * M, n), generator=g)
    w = torch.rand(R * M, n, generator=g)
    federation.SAME_BITS.clear()
    for _ in range(2):
        for name, call in [("grad", lambda A: sm.grad(y, A, t, w)), ("hvp", lambda A: sm.hvp(y, A, t, w, v)),
                           ("grad_diff", lambda A: sm.grad_diff(y, y0, A, t, w)),
                           ("cross_dw", lambda A: sm.cross_dw(y, A, t, v)), ("ce", lambda A: sm.ce(y, A, t))]:
            assert torch.equal(call(A), call(Ar)), name
        # the SVRG pair against the R runs' anchors [R, dy]: each run's rows the pair of the run alone
        anchors = y0[:R]
        alone = [sm.grad_diff(y[r * M:(r + 1) * M], anchors[r], A, t[r * M:(r + 1) * M], w[r * M:(r + 1) * M])
                 for r in range(R)]
        assert torch.equal(sm.grad_diff(y, anchors, A, t, w), torch.cat(alone))
    if C == 10:  # the check ran and was remembered; the fast way is taken only where it keeps the bits, which
        # depends on the CPU's MKL path (kept on the evidence's machine, not on an AMX / AVX-512 FP16 Xeon, where
        # the equalities above hold by the fallback)
        assert federation.SAME_BITS


def test_same_bits_takes_the_fast_way_only_where_it_keeps_the_bits():
    import torch

    from fbo_cli.sim.federation import SAME_BITS, same_bits

    SAME_BITS.clear()
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])
    calls = []
    fast = lambda t: lambda: calls.append("fast") or t  # noqa: E731
    exact = lambda: calls.append("exact") or a  # noqa: E731
    assert same_bits(("same",), fast(a.clone()), exact) is a and same_bits(("same",), fast(a), exact) is a
    assert same_bits(("differs",), fast(b), exact) is a and same_bits(("differs",), fast(b), exact) is a
    assert calls == ["fast", "exact", "fast", "fast", "exact", "exact"]  # checked once per key, then remembered
    meta = torch.empty(2, device="meta")  # off the CPU (a GPU): the fast way, unchecked (agrees is the promise)
    assert same_bits(("gpu",), fast(meta), lambda: 1 / 0) is meta


def test_hyperclean_scores_a_batch_in_one_pass_as_each_run_alone():
    """HyperClean.evaluate_runs (R heads in one product per split) against evaluate, run by run: the same keys in
    the same order, the same values within float rounding; detection (from x) exactly."""
    import torch

    from fbo_cli.runs.runner import build

    t = build(resolve("hyperclean", "fedbio", {**HC, "heldout_frac": 0.2})).algo.task
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(t.dx, generator=g) for _ in range(3)]
    ys = [torch.randn(t.dy, generator=g) for _ in range(3)]
    outs = t.evaluate_runs(xs, ys)
    assert len({o["test_loss"] for o in outs}) == 3  # three different heads
    for o, x, y in zip(outs, xs, ys, strict=True):
        alone = t.evaluate(x, y)
        assert list(o) == list(alone) and "heldout_loss" in alone
        assert o == pytest.approx(alone, rel=1e-5, abs=1e-6)
        assert {k: o[k] for k in t.detection(x)} == t.detection(x)


# --- the hfl methods (ZO-HFL, FedAvg, FedProx, SCAFFOLD): the runs' models side by side on the local step's group
# axis, the server's side run by run; identical bit for bit to each run alone, but the evaluation's losses and
# accuracy (one pass for the runs: EVAL_AGREES)

HFL = {"dataset": "digits", "clients": 4, "partition": "dirichlet", "alpha": 1.0, "participation": 0.5, "tau": 1.5,
       "batch_size": 16, "pretrain_steps": 3, "holdout": 0.2}
ZO = {**HFL, "server_batch": 16}
CASES_HFL = [("hfl", "zohfl", "server_lr", ZO), ("hfl", "zohfl", "eta", {**ZO, "num_dirs": 2}),
             ("hfl", "zohfl", "local_lr", {**ZO, "local_constraint": "ball", "radius": 0.05}),
             ("hfl", "fedavg", "server_lr", {**HFL, "lr_schedule": "constant"}),
             ("hfl", "fedprox", "mu_prox", {**HFL, "mu_prox": 0.5}), ("hfl", "scaffold", "local_lr", HFL),
             ("hfl", "fedavg", "Gamma", {**HFL, "server_client": True})]


@pytest.mark.parametrize("task,algo,key,base", CASES_HFL, ids=[f"{c[1]}-{c[2]}" for c in CASES_HFL])
def test_hfl_methods_batch_bit_for_bit(tmp_path, task, algo, key, base):
    test_bounds_and_auc_batch_of_two_seeds_by_two_settings_is_each_run_alone(tmp_path, task, algo, key, base)


def test_fedprox_batch_with_a_zero_mu_is_fedavg_alone(tmp_path):
    """A run whose μ_prox is 0 skips the proximal term in a batch, as alone (FedProx's tuning grid starts at 0)."""
    cfgs = _cfgs("hfl", "fedprox", "mu_prox", HFL, tmp_path / "batch", factors=(0.0, 1.0), seeds=(0,))
    assert group_batches(cfgs) == [[0, 1]]
    execute_batch(cfgs)
    for cb, ca in zip(cfgs, _cfgs("hfl", "fedprox", "mu_prox", HFL, tmp_path / "alone", factors=(0.0, 1.0),
                                  seeds=(0,)), strict=True):
        execute(ca)
        same_as_alone(ca, cb)


def test_zohfl_variants_that_keep_state_of_their_own_run_alone():
    z = lambda **kw: resolve("hfl", "zohfl", {**ZO, **kw})  # noqa: E731
    assert group_batches([z(eta=0.1), z(eta=0.2), z(eta=0.1, crn=False), z(eta=0.2, crn=False),
                          z(eta=0.1, warm_start=True), z(eta=0.2, warm_start=True), z(tau=3.0)]) == \
        [[0, 1], [2], [3], [4], [5], [6]]


@pytest.mark.parametrize("algo,key,base", [("zohfl", "eta", ZO), ("scaffold", "local_lr", HFL)])
def test_an_interrupted_hfl_batch_resumes_bit_for_bit(tmp_path, algo, key, base):
    test_an_interrupted_batch_writes_each_runs_checkpoint_and_resumes_bit_for_bit(tmp_path, "hfl", algo, key, base, 6)


def test_hfl_scores_a_batch_in_one_pass_as_each_run_alone():
    """HFL.evaluate_runs against evaluate, model by model: the same keys in order, the values within rounding."""
    import torch

    from fbo_cli.runs.runner import build

    t = build(resolve("hfl", "fedavg", HFL)).algo.task
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(t.d, generator=g) for _ in range(3)]
    outs = t.evaluate_runs(xs)
    assert len({o["test_loss"] for o in outs}) == 3 and "server_loss" in outs[0]
    for o, x in zip(outs, xs, strict=True):
        alone = t.evaluate(x)
        assert list(o) == list(alone) and o == pytest.approx(alone, rel=1e-5, abs=1e-6)


def test_keeping_freed_memory_changes_no_number(tmp_path):
    """runner.keep_freed_memory (glibc: every block from the heap, the heap's top kept; called by every run's build)
    against glibc's default, each in a fresh process: the same run gives the same metrics.csv bit for bit. The
    run's tensors are above glibc's default mapping threshold (128 KB), so the default maps them anew each time."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import fbo_cli.runs.runner as r\n"
            "from fbo_cli.runs.config import resolve\n"
            "if sys.argv[1] == 'default': r.keep_freed_memory = lambda: False\n"
            "else: assert r.keep_freed_memory()\n"
            "r.execute(resolve('hyperrep', 'fednest', {'dataset': 'digits', 'clients': 6, 'participation': 0.5,\n"
            "    'hidden': 1024, 'rounds': 12, 'eval_every': 2, 'threads': 1, 'out_dir': sys.argv[2]}))\n")
    runs = {}
    for mode in ("keep", "default"):
        subprocess.run([sys.executable, "-c", code, mode, str(tmp_path / mode)], check=True, capture_output=True)
        (csv_path,) = (tmp_path / mode).rglob("metrics.csv")
        runs[mode] = csv_path
    assert compare_run(runs["default"].parent, runs["keep"].parent)["outcome"] == "identical"
