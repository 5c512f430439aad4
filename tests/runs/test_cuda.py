"""The GPU path: every registered algorithm runs on CUDA, and the fast path agrees with the generic one
there (skipped without a CUDA device). On the CPU, a run step under a ``meta`` default device shows
that no step creates a tensor on the default device implicitly (it would land on ``meta`` and fail
or leak into the state)."""

import pytest
import torch

from fbo_cli.algorithms import REGISTRY
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _keys(name: str, device: str) -> tuple[str, dict]:
    task = REGISTRY[name].cls.tasks[0]
    keys = {"dataset": "synth-c100" if task == "auc" else "digits", "clients": 2 if task == "auc" else 4,
            "device": device}
    if name.endswith("-local"):
        keys["lower"] = "local"
    return task, keys


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_steps_create_no_tensor_on_the_default_device(name):
    task, keys = _keys(name, "cpu")
    b = build(resolve(task, name, keys))
    with torch.device("meta"):
        b.algo.step()
    assert all(t.device.type == "cpu" for t in b.algo.state().values())


@cuda
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_algorithm_runs_on_cuda(name):
    task, keys = _keys(name, "cuda")
    b = build(resolve(task, name, keys))
    assert b.algo.fed.gen.device.type == "cuda"
    for _ in range(2):
        b.algo.step()
    assert all(t.device.type == "cuda" and bool(torch.isfinite(t).all()) for t in b.algo.state().values())
    # the oracle counts, summed on the GPU, are read back as whole numbers: every algorithm takes gradients
    counts = {k: getattr(b.ledger, k) for k in ("grads", "hvps", "jvps", "samples")}
    assert b.ledger.rounds > 0 and all(type(v) is int for v in counts.values()), counts
    assert counts["grads"] > 0 and counts["samples"] >= counts["grads"], counts
    b.algo.evaluate()


@cuda
@pytest.mark.parametrize("task,algo", [("hyperrep", "fednest"), ("hyperrep", "aggitd"), ("hyperclean", "fedbio")])
def test_fast_matches_generic_on_cuda(task, algo):
    """float64 on the GPU: the same iterate and the same random stream with and without the fast path."""
    out = []
    for fast in (True, False):
        b = build(resolve(task, algo, {"dataset": "digits", "clients": 4, "device": "cuda", "fast": fast}))
        d = b.task.data
        d.X, d.X_test = d.X.double(), d.X_test.double()
        for k, t in b.algo.state().items():
            setattr(b.algo, k, t.double())
        for _ in range(2):
            b.algo.step()
        out.append((b.algo.state(), b.ledger.as_dict(), b.algo.fed.gen.get_state()))
    for k, t in out[1][0].items():
        torch.testing.assert_close(out[0][0][k], t, rtol=1e-9, atol=1e-10)
    assert out[0][1] == out[1][1] and torch.equal(out[0][2], out[1][2])
