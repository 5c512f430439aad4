"""Seed batches (issue 54): runs of one cell that differ in their seed (and in float steps) step in one batch, each
run with its own data, generator and ledger (fbo_cli/algorithms/runs_as_clients.py, ``stacked_seeds``): every run's
metrics.csv is
the run alone's bit for bit on the CPU (evaluated by its own build, so every column but the wall times), an
interrupted seed batch resumes bit for bit, and seeds whose states or minibatches do not pad alike step one after
the other."""

import csv

import pytest
from test_batch import HC, _cfgs, same_as_alone

from fbo_cli.grids.run_batches import batch_speedups, execute_batch, group_batches, seeds_batch, seeds_gain
from fbo_cli.runs.config import resolve
from fbo_cli.runs.runner import execute

SEEDS = (0, 1, 2)
# every algorithm that batches seeds, with a float hyperparameter its grid varies
CASES = [("hyperclean", "fedavg-noisy", "lower_lr", HC), ("hyperclean", "fedavg-clean", "lower_lr", HC),
         ("hyperclean", "fedbio", "upper_lr", HC),
         ("hyperclean", "fedbioacc", "lower_lr", {**HC, "first_batch": 16}),
         # a representation (hyperrep): each seed its own initial iterate, data and dropout masks
         ("hyperrep", "fedbio", "upper_lr", {"dataset": "digits", "clients": 4, "participation": 1.0, "hidden": 16,
                                              "batch_size": 16, "local_steps": 2, "dropout": 0.5})]


def metrics(c) -> list[dict]:
    rows = list(csv.DictReader((c.run_dir / "metrics.csv").read_text().splitlines()))
    return [{k: v for k, v in r.items() if k != "train_time"} for r in rows]


def same_bits(batched, alone) -> None:
    for cb, ca in zip(batched, alone, strict=True):
        execute(ca)
        assert metrics(cb) == metrics(ca), cb.run_id


@pytest.mark.parametrize("task,algo,key,base", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_three_seeds_in_one_batch_are_each_run_alone_bit_for_bit(tmp_path, task, algo, key, base):
    batched = _cfgs(task, algo, key, base, tmp_path / "batch", factors=(1.0,), seeds=SEEDS)
    assert all(seeds_batch(c) for c in batched) and group_batches(batched, 8) == [[0, 1, 2]]
    assert [s["status"] for s in execute_batch(batched)] == ["done"] * 3
    assert "3 of seeds 0, 1, 2 stepped together" in (batched[0].run_dir / "run.log").read_text()
    assert "again alone" not in (batched[0].run_dir / "run.log").read_text()
    same_bits(batched, _cfgs(task, algo, key, base, tmp_path / "alone", factors=(1.0,), seeds=SEEDS))
    assert metrics(batched[0]) != metrics(batched[1])  # the seeds differ


def test_seeds_by_steps_in_one_batch(tmp_path):
    batched = _cfgs("hyperclean", "fedbio", "upper_lr", HC, tmp_path / "batch", seeds=(0, 1))
    assert group_batches(batched, 8) == [[0, 1, 2, 3]]
    assert [s["status"] for s in execute_batch(batched)] == ["done"] * 4
    same_bits(batched, _cfgs("hyperclean", "fedbio", "upper_lr", HC, tmp_path / "alone", seeds=(0, 1)))


def test_an_interrupted_seed_batch_resumes_bit_for_bit(tmp_path):
    from fbo_cli.runs import runner

    cfg = dict(factors=(1.0,), seeds=SEEDS, eval_every=1, rounds=8)
    batched = _cfgs("hyperclean", "fedbio", "upper_lr", HC, tmp_path / "batch", **cfg)
    seen = []

    def stop(k, row):
        seen.append(k)
        if len(seen) == 9:  # each run evaluated at 0, 1 and 2
            runner.STOP.set()

    with pytest.raises(runner.Interrupted):
        execute_batch(batched, on_eval=stop)
    assert all((c.run_dir / "checkpoint.pt").is_file() for c in batched)
    out = execute_batch(batched)  # each resumes from its checkpoint
    assert [s.get("resumed_from_iteration") for s in out] == [2] * 3
    same_bits(batched, _cfgs("hyperclean", "fedbio", "upper_lr", HC, tmp_path / "alone", **cfg))


def test_seeds_whose_minibatches_do_not_pad_alike_step_one_after_the_other(tmp_path):
    # FedBiOAcc's first batch (4 b = 64) is larger than some seeds' validation splits: they differ in size
    batched = _cfgs("hyperclean", "fedbioacc", "lower_lr", HC, tmp_path / "batch", seeds=(0, 1))
    assert [s["status"] for s in execute_batch(batched)] == ["done"] * 4
    log = (batched[0].run_dir / "run.log").read_text()
    assert "its seeds step one after the other (minibatches of different sizes)" in log
    # a seed's float steps as today (one pass evaluates them: within float rounding)
    for cb, ca in zip(batched, _cfgs("hyperclean", "fedbioacc", "lower_lr", HC, tmp_path / "alone", seeds=(0, 1))):
        execute(ca)
        same_as_alone(ca, cb)


def test_which_runs_batch_seeds():
    h = lambda algo="fedbio", **kw: resolve("hyperclean", algo, {**HC, **kw})  # noqa: E731
    assert seeds_batch(h()) and seeds_batch(h("fedavg-clean"))
    assert not seeds_batch(h(participation=0.5))  # a client draw: the seeds' client sets differ
    assert not seeds_batch(h("fednest"))  # its bulk charges and lower views are the seed's
    assert group_batches([h(seed=0), h(seed=1), h(seed=0, participation=0.5), h(seed=1, participation=0.5)], 8) == \
        [[0, 1], [2], [3]]


def test_auto_batches_seeds_where_the_batch_bench_measured_a_gain(tmp_path):
    h = lambda algo="fedbio", **kw: resolve("hyperclean", algo, {**HC, **kw})  # noqa: E731
    cfgs = [h(seed=0), h(seed=1), h("fedbioacc", seed=0), h("fedbioacc", seed=1)]
    (tmp_path / "bench").mkdir()
    assert group_batches(cfgs, "auto", (tmp_path,)) == [[0], [1], [2], [3]]  # nothing measured on this CPU
    assert "no seed batch measured" in seeds_gain(cfgs[0], (tmp_path,))[1]
    (tmp_path / "bench" / "batch.csv").write_text(
        "case,task,algo,R,step_ratio,s_eval,s_eval_batched_per_run,seeds_step_ratio\n"
        "a,hyperclean,fedbio,8,3.0,0.03,0.01,0.95\nb,hyperclean,fedbioacc,8,2.2,0.03,0.01,1.32\n")
    batch_speedups.cache_clear()
    assert group_batches(cfgs, "auto", (tmp_path,)) == [[0], [1], [2, 3]]  # measured slower / faster
    assert seeds_gain(cfgs[0], (tmp_path,)) == (False, "the batch bench measured 0.95x for a seed batch on a CPU")
    assert group_batches(cfgs, 8, (tmp_path,)) == [[0, 1], [2, 3]]  # --batch R batches them all the same
    batch_speedups.cache_clear()


def test_show_says_which_algorithms_batch_seeds_and_why_not():
    from typer.testing import CliRunner

    from fbo_cli.cli import app

    for algo, says in [("fedavg-noisy", "the seeds of a cell in one batch"),
                       ("codasca", "its seeds never share a batch: the AUC objective"),
                       ("fedprox", "its seeds never share a batch: its client sets"),
                       ("fednest", "its seeds never share a batch: its lower rounds")]:
        r = CliRunner().invoke(app, ["show", algo])
        assert r.exit_code == 0 and says in " ".join(r.output.split()), (algo, r.output[:300])
