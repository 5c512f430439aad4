"""Run batches make one computation of their runs (issue 64): the aten calls of a batch's outer iteration stay flat in
the number of runs R (no oracle called run by run), and every run is the run alone bit for bit."""

import pytest
import torch

from fbo_cli.algorithms.runs_as_clients import stacked
from fbo_cli.bench.ops import step_calls
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build

HR = {"dataset": "digits", "clients": 8, "participation": 0.5, "hidden": 16, "lower_epochs": 2, "batch_size": 32,
      "threads": 1}
FACTORS = (1.0, 0.5, 2.0, 0.7, 1.4, 0.35, 2.8, 4.0)


def batch_of(algo: str, R: int, **keys):
    """The batched algorithm of R runs of ``algo`` on a tiny hyperrep, at R outer steps, and the R configs."""
    base = {**HR, **keys}
    v = resolve("hyperrep", algo, base).hp.outer_lr
    cfgs = [resolve("hyperrep", algo, {**base, "outer_lr": v * f}) for f in FACTORS[:R]]
    return stacked(build(cfgs[0]).algo, [c.hp for c in cfgs]), cfgs


@pytest.mark.parametrize("algo", ["fednest", "aggitd"])
def test_a_batch_makes_as_many_calls_for_eight_runs_as_for_one(algo):
    torch.set_num_threads(1)
    one, eight = (step_calls(batch_of(algo, R)[0], warm=1) for R in (1, 8))
    assert eight <= 1.3 * one, (one, eight)


VARIANTS = [("fednest", {}), ("fednest", {"lower_solver": "sgd"}), ("lfednest", {}), ("fednest", {"neumann": "code"}),
            ("fednest", {"reg": "norm"}), ("aggitd", {}), ("aggitd", {"lower_solver": "sgd", "tau": 2})]


@pytest.mark.parametrize("algo,keys", VARIANTS, ids=[f"{a}-{'-'.join(map(str, k.values()))}" for a, k in VARIANTS])
def test_every_variant_batches_in_one_computation_bit_for_bit(algo, keys):
    torch.set_num_threads(1)
    b, cfgs = batch_of(algo, 3, **keys)
    one = step_calls(batch_of(algo, 1, **keys)[0], warm=1)
    for _ in range(2):
        b.step()
    assert step_calls(b, warm=0) <= 1.3 * one
    for r, c in enumerate(cfgs):
        a = build(c).algo
        for _ in range(3):
            a.step()
        assert torch.equal(a.x, b.x[r]) and torch.equal(a.y, b.y[r]), r


@pytest.mark.parametrize("keys", [{}, {"test_on": "clients", "eval": "test,val,train", "heldout_frac": 0.1}])
def test_hyperrep_scores_a_batch_in_one_pass_as_each_run_alone(keys, monkeypatch):
    """hyperrep's evaluation of a batch's runs (HyperRep.evaluate_runs): every chunk of rows encoded for the runs
    in one product, each run's metrics bit for bit its evaluation alone; once checked, no run's encoding is made
    alone (the first layer is applied to each chunk once for all runs)."""
    from fbo_cli.algorithms.runs_as_clients import evaluate_runs, show
    from fbo_cli.tasks.hyperrep import HyperRep

    torch.set_num_threads(1)
    b, cfgs = batch_of("fednest", 3, **keys)
    b.step()
    view = build(cfgs[0]).algo
    alone = []
    for r, c in enumerate(cfgs):
        show(b, view, r, c.hp)
        alone.append(view.evaluate())
    assert evaluate_runs(b, view, range(3), [c.hp for c in cfgs]) == alone
    made = []
    encode = HyperRep.encode
    monkeypatch.setattr(HyperRep, "encode", lambda self, x, X: made.append(1) or encode(self, x, X))
    assert evaluate_runs(b, view, range(3), [c.hp for c in cfgs]) == alone and not made
