"""The algorithm template (fbo_cli/algorithms/template.py) works as its docstring says: one step is
the server's step on the mean of the clients' gradients (checked against autograd on the clients'
losses one by one), charged as one round of dw floats up and down per client."""

import torch

from fbo_cli.algorithms.base import FederationView
from fbo_cli.algorithms.template import TemplateFedSGD
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build
from fbo_cli.sim.federation import Ledger


def test_template_is_fedsgd_and_charges_one_round():
    b = build(resolve("auc", "fedavg-ce", {"dataset": "synth-c100", "clients": 4, "threads": 1}))
    task = b.task
    algo = TemplateFedSGD(task, TemplateFedSGD.HP(eta=0.5), FederationView(task.data, 1.0,
                                                                            torch.Generator().manual_seed(0), Ledger()))
    drawn = []
    real = algo.sampler.next
    algo.sampler.next = lambda: drawn.append(real()) or drawn[-1]
    v0 = algo.v.clone()
    algo.step()
    batch = task.batch(*drawn[0])
    v = v0.clone().requires_grad_()
    loss = sum(task.bce(v, algo.alpha, {k: t[i] for k, t in batch.items()}) for i in range(algo.K)) / algo.K
    (g,) = torch.autograd.grad(loss, v)
    torch.testing.assert_close(algo.v, v0 - 0.5 * g, rtol=1e-5, atol=1e-6)
    for _ in range(2):
        algo.step()
    led = algo.ledger.as_dict()
    assert led["rounds"] == 3 * algo.rounds_per_iteration() and led["floats_up"] == 3 * algo.K * task.dw
    assert set(algo.evaluate()) >= {"test_auc"}


def test_the_variant_template_is_fednest_with_a_decaying_outer_step():
    from fbo_cli.algorithms.fednest import FedNest
    from fbo_cli.algorithms.template import TemplateDecayFedNest

    b = build(resolve("hyperrep", "fednest", {"dataset": "digits", "clients": 4, "participation": 0.5}))
    made = {}
    for cls in (FedNest, TemplateDecayFedNest):
        gen = torch.Generator().manual_seed(0)
        a = cls(b.task, cls.HP(decay_t0=1.0) if cls is TemplateDecayFedNest else cls.HP(),
                FederationView(b.task.data, 0.5, gen, Ledger()))
        a.step()  # t = 0: the same step
        a.ledger.iterations = 1
        made[cls] = (a.x.clone(), a.outer_lr())
    torch.testing.assert_close(made[FedNest][0], made[TemplateDecayFedNest][0])
    assert made[FedNest][1] == 0.01 and made[TemplateDecayFedNest][1] == 0.005


def test_the_bilevel_template_hypergradient_is_the_dense_oracles():
    from fbo_cli.algorithms.template_bilevel import TemplateBilevel

    b = build(resolve("hyperrep", "fednest", {"dataset": "digits", "clients": 4, "participation": 1.0, "hidden": 8,
                                              "dropout": 0.0, "threads": 1}))
    task, M, T, lam = b.task, 4, 6, 0.05
    fed = FederationView(task.data, 1.0, torch.Generator().manual_seed(0), Ledger())
    algo = TemplateBilevel(task, TemplateBilevel.HP(T=T, lam=lam), fed)
    x, y = algo.x.double(), algo.y.double()
    task.data.X = task.data.X.double()  # float64: the closed forms and autograd agree to the last digits
    S = torch.arange(M)
    train, val = task.data.split("train", S), task.data.split("val", S)
    h = algo.hypergrad(x, y, train, val)
    assert algo.ledger.rounds == T + 2  # p_0, T Neumann terms, the clients' h_i

    def mean_loss(fn, split, x, y):  # mean_i fn_i(x, y) on each client's whole split, one client at a time
        bt = split.full()
        return sum(fn(x, y, {k: t[i] for k, t in bt.items()}) for i in range(M)) / M

    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    fx, fy = torch.autograd.grad(mean_loss(task.f, val, xr, yr), (xr, yr))
    H = torch.autograd.functional.hessian(lambda v: mean_loss(task.g, train, x, v), y)  # [dy, dy]
    p, acc = fy, fy
    for _ in range(T):
        p = p - lam * H @ p
        acc = acc + p
    gy = torch.autograd.grad(mean_loss(task.g, train, xr, yr), yr, create_graph=True)[0]
    cross = torch.autograd.grad(gy @ (lam * acc), xr)[0]
    torch.testing.assert_close(h, fx - cross, rtol=1e-7, atol=1e-10)


def test_the_bilevel_template_runs_in_a_compare_beside_fednest(tmp_path, monkeypatch):
    import shutil

    from typer.testing import CliRunner

    import fbo_cli.algorithms.template_bilevel as tb
    from fbo_cli.cli import app

    shutil.copy(tb.__file__, tmp_path / "mine.py")  # as a user copies it
    (tmp_path / "t.yaml").write_text(
        "name: mine\ntask: hyperrep\nmetric: test_acc\nseeds: [0]\n"
        "base: {dataset: digits, clients: 4, participation: 0.5, rounds: 30, threads: 1}\n"
        "algorithms:\n  - {name: FedNest, algo: fednest}\n  - {name: Mine, algo: ./mine.py:TemplateBilevel}\n")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["compare", "t.yaml"])
    assert r.exit_code == 0, r.output
    table = (tmp_path / "results" / "compare" / "mine" / "table.csv").read_text()
    assert "Mine" in table and "FedNest" in table
    r = CliRunner().invoke(app, ["show", "./mine.py:TemplateBilevel"])
    assert r.exit_code == 0 and "the bilevel template" in r.output and "N + T + 3" in r.output, r.output
