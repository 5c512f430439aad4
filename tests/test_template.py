"""The algorithm template (fbo_cli/algorithms/template.py) works as its docstring says: one step is
the server's step on the mean of the clients' gradients (checked against autograd on the clients'
losses one by one), charged as one round of dw floats up and down per client."""

import torch

from fbo_cli.algorithms.base import FederationView
from fbo_cli.algorithms.template import TemplateFedSGD
from fbo_cli.config import resolve
from fbo_cli.federation import Ledger
from fbo_cli.runner import build


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
