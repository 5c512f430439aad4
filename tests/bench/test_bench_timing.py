"""``fbo_cli.bench.timing``: what one case's timing counts."""

import pytest


def test_bench_counts_the_flops_of_the_iteration_it_times():
    """A first iteration may do more (FedBiOAcc's first estimators on a batch 4x the size): the bench counts
    the second. Where the work grows with the round (hfl: ceil(tau sqrt(r + 1)) local steps), every timed
    iteration is the third of a fresh build, and its FLOPs are counted there."""
    from fbo_cli.bench.timing import _build, _flops, time_case

    def flops_of(case, k):  # FLOPs of iteration k (0-based) of a fresh build
        a = _build(case, "cpu", None).algo
        for _ in range(k):
            a.step()
        return _flops(a)

    acc = {"name": "a", "task": "hyperclean", "algo": "fedbioacc", "set": {"dataset": "digits", "clients": 4}}
    assert flops_of(acc, 0) > flops_of(acc, 1)
    assert time_case(acc, 2, generic=False)["gflop"] * 1e9 == pytest.approx(flops_of(acc, 1))
    hfl = {"name": "h", "task": "hfl", "algo": "fedavg",
           "set": {"dataset": "synthetic", "clients": 4, "partition": "dirichlet", "tau": 2.0}}
    assert flops_of(hfl, 2) > flops_of(hfl, 1)
    r = time_case(hfl, 2)
    assert r["gflop"] * 1e9 == pytest.approx(flops_of(hfl, 2)) and r["rounds_per_iteration"] == 1
