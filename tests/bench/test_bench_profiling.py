"""``fbo_cli.bench.profiling``: ``fbo bench --profile``'s phases and floor."""

import pytest
import torch

from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import build


def test_bench_phases_split_an_iteration_and_leave_nothing_patched():
    """``fbo bench --profile``'s phase table: sampling and oracle time are both seen (FedBiO on hyperclean draws
    five minibatches and calls five oracles per local step), they and the rest add up to the iteration, and the
    hooks are gone afterwards (the class's sampler, the algorithm's oracles), so the run goes on unchanged."""
    from fbo_cli.algorithms.pool_sampler import RowSampler
    from fbo_cli.bench.profiling import phases

    sample = RowSampler.__dict__["sample"]
    b = build(resolve("hyperclean", "fedbio", {"dataset": "digits", "clients": 4, "rounds": 5}))
    ph = phases(b.algo, "cpu", iters=2)
    assert ph["sampling"] > 0 and ph["oracles"] > 0 and ph["other"] >= 0
    assert ph["sampling"] + ph["oracles"] + ph["other"] == pytest.approx(ph["total"])
    assert RowSampler.__dict__["sample"] is sample
    assert "grad" not in vars(b.algo) and "hvp" not in vars(b.algo)
    ref = build(resolve("hyperclean", "fedbio", {"dataset": "digits", "clients": 4, "rounds": 5}))
    for _ in range(3):  # phases ran 3 iterations: the patched run is 3 iterations ahead, on the same draws
        ref.algo.step()
    assert torch.equal(ref.algo.x, b.algo.x) and torch.equal(ref.algo.y, b.algo.y)


def test_the_floor_replays_the_draws_of_one_iteration_without_touching_the_run():
    """``fbo bench --profile``'s floor: the random draws, selections and row gathers of one iteration are
    recorded and replayed alone (with fresh generators: the run's stream is left where one step leaves it),
    and the FLOPs at the sgemm rate are added."""
    from fbo_cli.bench.profiling import floor_ms
    from fbo_cli.bench.timing import _build

    case = {"name": "t", "task": "hyperclean", "algo": "fedbio",
            "set": {"dataset": "digits", "clients": 4, "participation": 1.0}}
    a, b = _build(case, "cpu", True).algo, _build(case, "cpu", True).algo
    f = floor_ms(a, "cpu", sgemm=50.0)
    b.step()
    assert torch.equal(a.fed.gen.get_state(), b.fed.gen.get_state())
    assert f["draws_ms"] > 0 and f["flops_ms"] > 0 and f["floor_ms"] == pytest.approx(f["draws_ms"] + f["flops_ms"])
