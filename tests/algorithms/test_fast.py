"""The closed-form fast path against the generic torch.func path, on the same inputs (float64)."""

import pytest
import torch

from fbo_cli.data import build_federated, load_dataset
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build
from fbo_cli.sim.federation import Oracles, per_client_cross, per_client_grad, per_client_head_hvp, per_client_hvp
from fbo_cli.tasks.hyperclean import HyperClean
from fbo_cli.tasks.hyperrep import HyperRep

TOL = dict(rtol=1e-10, atol=1e-12)


def _double(data):
    data.X, data.X_test = data.X.double(), data.X_test.double()
    return data


def _oracles(task, x, y, batch, v, fns):
    """Every oracle the fast path replaces (``task.oracles(fn)``, a closed-form subclass), against the
    generic torch.func ones, at global and client-stacked points."""
    M = batch["w"].shape[0]
    noise = torch.Generator().manual_seed(1)
    st = lambda t: t.expand(M, -1) + 0.01 * torch.randn(M, t.numel(), dtype=t.dtype, generator=noise)
    for a, b, vv in [(x, y, v), (st(x), st(y), st(v)), (x, st(y), v)]:
        for fn in fns:
            o = task.oracles(fn)
            assert type(o) is not Oracles, fn  # the closed forms
            for argnum in (0, 1):
                yield f"grad{argnum}", o.grad(argnum, a, b, batch), per_client_grad(fn, argnum, a, b, batch)
                yield (f"grad_mean{argnum}", o.grad_mean(argnum, a, b, batch),
                       per_client_grad(fn, argnum, a, b, batch).mean(0))
            gx, gy = o.grads(a, b, batch)
            yield "grads", torch.cat([gx, gy], 1), torch.cat(per_client_grad(fn, (0, 1), a, b, batch), 1)
            yield "hvp", o.hvp(a, b, batch, vv), per_client_hvp(fn, a, b, batch, vv)
            yield "hvp_mean", o.hvp_mean(a, b, batch, vv), per_client_hvp(fn, a, b, batch, vv).mean(0)
            if b.dim() == 2 and vv.dim() == 2:
                yield "head_hvp", o.head_hvp(a, b, batch, vv), per_client_head_hvp(fn, a, b, batch, vv)
            yield "cross", o.cross(a, b, batch, vv), per_client_cross(fn, a, b, batch, vv)
            yield "cross_mean", o.cross_mean(a, b, batch, vv), per_client_cross(fn, a, b, batch, vv).mean(0)
            yield ("svrg", o.svrg(a, b, y, batch),
                   per_client_grad(fn, 1, a, b, batch) - per_client_grad(fn, 1, a, y, batch))


@pytest.mark.parametrize("reg", ["l2", "norm", "none"])
def test_hyperrep_oracles_match_generic(reg):
    data = _double(build_federated(load_dataset("digits"), "iid", 6, 0, torch.device("cpu")))
    task = HyperRep(HyperRep.Params(reg=reg, hidden=16), data)
    gen = torch.Generator().manual_seed(0)
    x, y = (t.double() for t in task.init(gen))
    y = y + 0.3 * torch.randn(y.shape, generator=gen, dtype=y.dtype)  # away from the uniform softmax
    v = torch.randn(task.dy, generator=gen, dtype=torch.float64)
    split = data.split("train", torch.tensor([0, 2, 5]))
    batch = task.noise(gen, split.sample(gen, 20))
    n = 0
    for name, fast, slow in _oracles(task, x, y, batch, v, [task.f, task.g]):
        torch.testing.assert_close(fast, slow, **TOL, msg=name)
        n += 1
    a, gfn, enc = task.lower_view(x, split)
    eb = task.noise(gen, enc.sample(gen, 20))
    for name, fast, slow in _oracles(task, a, y, eb, v, [gfn]):
        if name not in ("grad0", "grad_mean0"):
            torch.testing.assert_close(fast, slow, **TOL, msg=name)
            n += 1
    assert n >= 30
    # the fast lower view encodes exactly as the generic one
    task.p.fast = False
    torch.testing.assert_close(task.lower_view(x, split)[2].X, enc.X, rtol=0, atol=0)


def test_hyperclean_oracles_match_generic():
    data = _double(build_federated(load_dataset("digits"), "dirichlet", 4, 0, torch.device("cpu")))
    task = HyperClean(HyperClean.Params(), data)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(task.dx, generator=gen, dtype=torch.float64)
    y = 0.1 * torch.randn(task.dy, generator=gen, dtype=torch.float64)
    v = torch.randn(task.dy, generator=gen, dtype=torch.float64)
    batch = data.split("train", torch.tensor([1, 3])).sample(gen, 16)
    for name, fast, slow in _oracles(task, x, y, batch, v, [task.f, task.g, task.g_fixed]):
        torch.testing.assert_close(fast, slow, **TOL, msg=name)


CASES = [
    ("hyperrep", "fednest", {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16}),
    ("hyperrep", "fednest", {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16, "tau": 3,
                             "reg": "norm"}),
    ("hyperrep", "lfednest", {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16, "tau": 2}),
    ("hyperrep", "aggitd", {"dataset": "digits", "clients": 8, "participation": 0.5, "partition": "iid", "hidden": 16,
                            "tau": 3}),
    ("hyperrep", "aggitd-sgd", {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16, "N": 2}),
    ("hyperrep", "aggitd", {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16, "tau": 1}),
    ("hyperrep", "fednest", {"dataset": "digits", "clients": 8, "participation": 1.0, "hidden": 16, "tau": 1}),
    ("hyperrep", "fedbio", {"dataset": "digits", "clients": 4, "hidden": 16, "upper_lr": 0.05}),
    ("hyperclean", "fedbio", {"dataset": "digits", "clients": 4}),
    ("hyperclean", "fedbioacc", {"dataset": "digits", "clients": 4}),
    ("hyperclean", "fedavg-noisy", {"dataset": "digits", "clients": 4}),
    ("hyperclean", "fedavg-clean", {"dataset": "digits", "clients": 4}),
    ("hyperclean", "aggitd", {"dataset": "digits", "clients": 4}),
    # the per-client-state family (FedBiO-Local, FedBiOAcc-Local, AdaFBiO): Neumann estimator and grad_y
    ("hyperrep", "fedbio-local", {"dataset": "digits", "clients": 4, "hidden": 16, "lower": "local", "local_steps": 2}),
    ("hyperrep", "fedbioacc-local", {"dataset": "digits", "clients": 4, "hidden": 16, "lower": "local",
                                     "dropout": 0.0}),
    ("hyperrep", "adafbio", {"dataset": "digits", "clients": 4, "hidden": 16, "lower": "local", "q": 2, "K": 3}),
    ("hyperrep", "adafbio", {"dataset": "digits", "clients": 4, "hidden": 16, "lower": "global", "q": 2, "K": 3}),
    ("hyperclean", "adafbio", {"dataset": "digits", "clients": 4, "q": 2, "K": 3}),
    ("hyperclean", "adafbio-none", {"dataset": "digits", "clients": 4, "q": 2, "K": 3, "neumann": "sum"}),
]


def _run(task, algo, s, fast, steps=2):
    b = build(resolve(task, algo, {**s, "fast": fast}))
    _double(b.task.data)
    a = b.algo
    if hasattr(a, "train"):  # the per-client-state family holds its splits: gather them again in float64
        a.train, a.val = b.task.data.split("train"), b.task.data.split("val")
    for k, t in a.state().items():
        setattr(a, k, t.double())
    for _ in range(steps):
        a.step()
    return a


@pytest.mark.parametrize("task,algo,s", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_whole_iterations_match_generic(task, algo, s):
    """Two outer iterations with and without the fast path: the same iterate (float64), the same ledger
    and the same random stream afterwards."""
    fast, slow = _run(task, algo, s, True), _run(task, algo, s, False)
    for k, t in slow.state().items():
        torch.testing.assert_close(fast.state()[k], t, rtol=1e-10, atol=1e-10, msg=k)
    assert fast.ledger.as_dict() == slow.ledger.as_dict()
    assert torch.equal(fast.fed.gen.get_state(), slow.fed.gen.get_state())


def _upper_round_case(fast: bool):
    """FBO-AggITD on digits in float64, one client set drawn: (algo, x, y, train, val, a random p)."""
    b = build(resolve("hyperrep", "aggitd", {"dataset": "digits", "clients": 8, "participation": 0.5,
                                             "hidden": 16, "fast": fast}))
    _double(b.task.data)
    a = b.algo
    S = a.fed.sample()
    p = torch.randn(a.y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    return a, a.x.double(), a.y.double(), a.fed.data.split("train", S), a.fed.data.split("val", S), p


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("same", [True, False])
def test_upper_round_tau1_is_the_mean_of_the_client_steps(fast, same):
    """``upper_round`` with tau = 1 (client means only) against the per-client hypergradients and local
    steps, averaged afterwards (float64, the same draws)."""
    a, x, y, train, val, p = _upper_round_case(fast)
    state = a.fed.gen.get_state()
    h1, x1 = a.upper_round(x, y, train, val, p, 1, 0.05, same)
    after, _ = a.fed.gen.get_state(), a.fed.gen.set_state(state)
    hg = a.hypergradient(x, y, p, train, val)
    h = hg.h.mean(0)
    x2 = a.upper_local(x, y, h, hg, 1, 0.05, same).mean(0)
    torch.testing.assert_close(h1, h, **TOL)
    torch.testing.assert_close(x1, x2, **TOL)
    assert torch.equal(a.fed.gen.get_state(), after)


def test_upper_round_without_h_skips_only_the_direct_part():
    """AggITD's round (tau = 1, fresh samples) with ``need_h=False`` on the fast path: ``x - lr (d' - c)``
    equals ``x - lr (h - d + d')`` (float64), with the same draws and the same ledger."""
    a, x, y, train, val, p = _upper_round_case(True)
    state, led = a.fed.gen.get_state(), a.ledger.as_dict()
    h, x1 = a.upper_round(x, y, train, val, p, 1, 0.05, False, need_h=False)
    after, led1 = a.fed.gen.get_state(), a.ledger.as_dict()
    a.fed.gen.set_state(state)
    a.ledger.__dict__.update(led)
    h2, x2 = a.upper_round(x, y, train, val, p, 1, 0.05, False)
    assert h is None and h2 is not None
    torch.testing.assert_close(x1, x2, **TOL)
    assert torch.equal(a.fed.gen.get_state(), after)
    assert a.ledger.as_dict() == led1
