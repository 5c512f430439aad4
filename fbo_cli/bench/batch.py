"""Runs per hour of a run batch against the same runs one by one, per case (issue 39's bench).

A case is R runs of one algorithm on one task, of one seed, at R grid points of one float hyperparameter
(its default times ``FACTORS``). Both ways are timed in this process, alternately, on the same data, as the
fastest of ``reps`` interleaved timings of ``iters`` outer iterations after one of warm-up: one by one, the R runs as
:func:`fbo_cli.runs.runner.build` builds them alone, stepped one after the other; batched, one
:func:`fbo_cli.grids.run_batches.stacked` algorithm of the R runs. Evaluations are timed too, a run's alone and the
batch's
(:func:`fbo_cli.algorithms.runs_as_clients.evaluate_runs`: one pass for the R runs where the task has one, else run by
run), and
enter the runs per hour at the case's ``eval_every``. Each case also counts its step's matrix-product FLOPs (one run's,
the batch's per run) and times the machine's sgemm between its own timings (:class:`fbo_cli.bench.timing.Sgemm`):
the efficiency of each way against sgemm, and the ceiling, the step ratio a batch would reach if it did nothing but
its products at the sgemm rate (a bound: the element-wise work, the draws and the calls are left out). On the CPU
the batch's products are also timed where they run (``ceiling_products``: the step ratio if the batch did nothing but
its products at the speed they reach in it; many small products, CODASCA's per-client layers, stay far below the
sgemm rate however they are batched, so this is the bound that removing overheads alone can reach).

    fbo bench --batch 8 [--iters 3] [--only NAME,...] [--threads 1] [--out FOLDER]   (writes FOLDER/batch.md)

Run it on a quiet machine (nothing else on the cores): it times two ways of doing the same work one after the
other, and a neighbour's load lands on one of them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from ..algorithms.runs_as_clients import evaluate_runs, stacked
from ..algorithms.seed_runs import SeedsDiffer, stacked_seeds
from ..grids.run_batches import seeds_batch
from ..runs.config import resolve
from ..runs.runner import build
from .ops import step_calls
from .profiling import phases
from .timing import Sgemm, _flops, product_share

FACTORS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0, 11.0, 16.0, 22.0, 32.0, 45.0)
HC = {"dataset": "fashion-mnist", "partition": "dirichlet", "clients": 10, "participation": 1.0, "val_frac": 0.1}
HR = {"dataset": "fashion-mnist", "partition": "iid", "clients": 100, "participation": 0.1}
CASES = [
    # every case evaluates as its algorithm's tunings evaluate: the hyper-cleaning specs every 5 rounds, Table 2's
    # tuning every 2 outer iterations
    {"name": "fedbio-hyperclean-fmnist-M10-I5", "task": "hyperclean", "algo": "fedbio", "set": {**HC, "eval_every": 5},
     "key": "upper_lr"},
    {"name": "fedbioacc-hyperclean-fmnist-M10-I5", "task": "hyperclean", "algo": "fedbioacc",
     "set": {**HC, "eval_every": 5}, "key": "upper_lr"},
    {"name": "fednest-mlp-fmnist-m100-C0.1", "task": "hyperrep", "algo": "fednest", "set": {**HR, "eval_every": 2},
     "key": "outer_lr"},
    {"name": "aggitd-mlp-fmnist-m100-C0.1", "task": "hyperrep", "algo": "aggitd", "set": {**HR, "eval_every": 2},
     "key": "outer_lr"},
    # the FedAvg bounds and the auc methods (experiments/bench.yaml's settings; codasca_fig1_synth_val tunes at I = 1,
    # evaluating every 512 rounds)
    {"name": "fedavg-noisy-hyperclean-fmnist-M10-I5", "task": "hyperclean", "algo": "fedavg-noisy",
     "set": {**HC, "eval_every": 5}, "key": "lower_lr"},
    {"name": "codasca-synth-K16-I32", "task": "auc", "algo": "codasca", "key": "eta",
     "set": {"dataset": "synth-c100", "partition": "class-disjoint", "clients": 16, "I": 32}},
    {"name": "codasca-synth-K16-I1", "task": "auc", "algo": "codasca", "key": "eta",
     "set": {"dataset": "synth-c100", "partition": "class-disjoint", "clients": 16, "I": 1, "rounds": 8192,
             "eval_every": 512}},
    # AdaFBiO on its hyper-cleaning spec's setting (adafbio_hyperclean.yaml; gamma_x near its tuned
    # choices), and Table 2's local upper steps (tau = 5)
    {"name": "adafbio-hyperclean-fmnist-M10-q5-K10", "task": "hyperclean", "algo": "adafbio",
     "set": {**HC, "partition": "shards", "val_frac": 0.2, "gamma_x": 300.0, "lambda_y": 0.1, "eval_every": 5},
     "key": "gamma_x"},
    {"name": "aggitd-mlp-fmnist-m100-C0.1-tau5", "task": "hyperrep", "algo": "aggitd",
     "set": {**HR, "tau": 5, "eval_every": 2}, "key": "outer_lr"},
    # what else the reproduction spends most on (fbo cost): the FedNest family on hyper-cleaning (the public code's
    # 5 lower epochs, as the fedbio_hyperclean specs run it), AdaFBiO on hyperrep (a global head, 2 label shards)
    # and FedBiO-Local (per-client heads), both evaluated every 5 rounds as their specs do
    *({"name": f"{a}-hyperclean-fmnist-M10-E5", "task": "hyperclean", "algo": a, "key": "outer_lr",
       "set": {**HC, "lower_epochs": 5, "inner_lr": 0.003, "outer_lr": 1e4}}
      for a in ("fednest", "lfednest", "aggitd")),
    {"name": "adafbio-global-hyperrep-fmnist-M10-q5-K10", "task": "hyperrep", "algo": "adafbio", "key": "gamma_x",
     "set": {"dataset": "fashion-mnist", "partition": "shards", "clients": 10, "participation": 1.0, "dropout": 0.0,
             "reg": "l2", "reg_coef": 0.001, "eval_every": 5}},
    {"name": "fedbio-local-hyperrep-fmnist-M10-I5", "task": "hyperrep", "algo": "fedbio-local", "key": "upper_lr",
     "set": {"dataset": "fashion-mnist", "partition": "dirichlet", "clients": 10, "participation": 1.0,
             "lower": "local", "dropout": 0.0, "reg": "l2", "reg_coef": 0.01, "eval_every": 5}},
    # the hfl methods at fbo bench's setting (experiments/bench.yaml): ZO-HFL's steps, FedProx's mu (its tuning's grid)
    *({"name": f"{a}-fmnist-a1000-b0.9", "task": "hfl", "algo": a, "key": k,
       "set": {"dataset": "fashion-mnist", "partition": "dirichlet", "clients": 10, "alpha": 1000,
               "participation": 0.9}} for a, k in (("zohfl", "server_lr"), ("fedprox", "mu_prox"))),
]


def factors(R: int) -> list[float]:
    """The R grid points, as multiples of the case's default: :data:`FACTORS` up to 16, beyond them (a GPU's
    R = 64) geometric steps of 2^(1/4) around the default."""
    return list(FACTORS[:R]) if R <= len(FACTORS) else [2 ** ((i - R // 2) / 4) for i in range(R)]


def _times(fns, iters: int, reps: int, sync=lambda: None) -> list[float]:
    """Seconds per call of each of ``fns``: one warm-up call each, then ``reps`` rounds that time each in turn
    (interleaved, so that a neighbour's load lands on all of them), the fastest round of each; ``sync`` waits
    for the device's queued work (CUDA) before a clock is read."""
    for fn in fns:
        fn()
    sync()
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            sync()
            best[k] = min(best[k], (time.perf_counter() - t0) / iters)
    return best


def bench_case(case: dict[str, Any], R: int = 8, iters: int = 3, reps: int = 3, device: str = "cpu") -> dict[str, Any]:
    """Seconds per outer iteration of the R runs one by one and batched, and the runs per hour of each."""
    base = resolve(case["task"], case["algo"], {**case["set"], "device": device})
    v0 = getattr(base.hp, case["key"])
    cfgs = [resolve(case["task"], case["algo"], {**case["set"], "device": device, case["key"]: v0 * f})
            for f in factors(R)]
    alone = [build(c) for c in cfgs]
    b0 = build(cfgs[0])
    batch = stacked(b0.algo, [c.hp for c in cfgs])
    # the seeds column: R seeds at the default, one by one and as one seed batch (each run its own build: the
    # batch steps the builds' generators and ledgers, the runs alone their iterates: the same work either way)
    seeds, why = [], ""
    if seeds_batch(base):
        seeds = [build(resolve(case["task"], case["algo"], {**case["set"], "device": device, "seed": s}))
                 for s in range(R)]
        try:
            batch_s = stacked_seeds([b.algo for b in seeds], [b.cfg.hp for b in seeds])
            batch_s.step()  # a seed whose minibatches do not pad alike fails here (SeedsDiffer)
        except SeedsDiffer as e:
            seeds, why = [], f"seeds differ: {e}"
    else:
        why = "does not batch seeds"

    def one_by_one():
        for b in alone:
            b.algo.step()
            b.ledger.iterations += 1

    def batched():
        batch.step()
        b0.ledger.iterations += 1

    def batch_eval():
        evaluate_runs(batch, b0.algo, range(R), [c.hp for c in cfgs])

    def seeds_one_by_one():
        for b in seeds:
            b.algo.step()

    def seeds_batched():
        batch_s.step()

    # the R runs one by one, the batch, one run's evaluation and the batch's (and R seeds both ways), in one window
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sg = Sgemm(torch.device(device))
    fns = [one_by_one, batched, alone[0].algo.evaluate, batch_eval, sg.tick]
    t_alone, t_batch, t_eval, t_eval_b, _, *t_seeds = _times(fns + ([seeds_one_by_one, seeds_batched] if seeds
                                                                     else []), iters, reps, sync)
    # the products of the next iteration, one run's and the batch's per run (hfl's grow with the round: a little
    # more than the timed iterations', for both ways alike)
    gflop, gflop_b = _flops(alone[0].algo) / 1e9, _flops(batch) / R / 1e9
    # the share of the batch's step spent in its products, at the speed they run in it (on a GPU the clock would
    # time launches: CPU only)
    share_b = product_share(batch) if device == "cpu" else None
    # the aten calls of one outer iteration (warm: the timings stepped both), a run alone's and the batch's
    ops_one, ops_batch = step_calls(alone[0].algo, 0), step_calls(batch, 0)
    every = cfgs[0].run.eval_every
    per_alone = t_alone + R * t_eval / every  # R runs' outer iteration with their share of evaluations
    per_batch = t_batch + t_eval_b / every
    iters_run = cfgs[0].run.rounds / (alone[0].algo.rounds_per_iteration() or 1)
    seed_cols = {"seeds_step_ratio": "", "seeds_bound": "", "runs_per_hour_seeds_batched": "", "seeds_ratio": "",
                 "seeds_note": why}
    if t_seeds:  # a seed batch evaluates each run by its own build: R evaluations alone
        per_alone_s, per_batch_s = t_seeds[0] + R * t_eval / every, t_seeds[1] + R * t_eval / every
        # what no seed batch can beat: each run's drawing and gathering of its minibatches (the sampling phase of
        # its step, timed in place), which a seed batch does run by run from the run's generator, as the run alone
        ph = phases(seeds[0].algo, device, iters)
        seed_cols.update(seeds_step_ratio=round(t_seeds[0] / t_seeds[1], 2),
                         seeds_bound=round(ph["total"] / ph["sampling"], 2) if ph["sampling"] > 0 else float("inf"),
                         runs_per_hour_seeds_batched=round(3600 * R / (per_batch_s * iters_run), 2),
                         seeds_ratio=round(per_alone_s / per_batch_s, 2))
    return {"case": case["name"], "task": case["task"], "algo": case["algo"], "R": R,
            "s_iter_one_by_one": round(t_alone / R, 5),
            "s_iter_batched_per_run": round(t_batch / R, 5), "step_ratio": round(t_alone / t_batch, 2),
            "ops_one": ops_one, "ops_batch": ops_batch,
            "gflop_per_run": round(gflop_b, 4), "eff_one_by_one": round(gflop * R / t_alone / sg.rate, 3),
            "eff_batched": round(gflop_b * R / t_batch / sg.rate, 3),
            "ceiling": round(t_alone / R / (gflop_b / sg.rate), 1) if gflop_b > 0 else float("inf"),
            "ceiling_products": round(t_alone / (share_b * t_batch), 1) if share_b else "",
            "s_eval": round(t_eval, 5), "s_eval_batched_per_run": round(t_eval_b / R, 5), "eval_every": every,
            "runs_per_hour_one_by_one": round(3600 * R / (per_alone * iters_run), 2),
            "runs_per_hour_batched": round(3600 * R / (per_batch * iters_run), 2),
            "ratio": round(per_alone / per_batch, 2), **seed_cols}


def calls_case(case: dict[str, Any], R: int = 8, device: str = "cpu") -> dict[str, Any]:
    """The aten calls of one outer iteration (:func:`fbo_cli.bench.ops.step_calls`, warm): a run alone's
    (``ops_one``) and a batch's of r runs at the case's first r grid points, for r = 1, 2, 4, ... up to R
    (``ops_R<r>``): no clock, so it measures on a loaded machine too (``fbo bench --batch R --calls``)."""
    base = resolve(case["task"], case["algo"], {**case["set"], "device": device})
    v0 = getattr(base.hp, case["key"])
    cfgs = [resolve(case["task"], case["algo"], {**case["set"], "device": device, case["key"]: v0 * f})
            for f in factors(R)]
    row: dict[str, Any] = {"case": case["name"], "task": case["task"], "algo": case["algo"],
                           "ops_one": step_calls(build(cfgs[0]).algo)}
    for r in sorted({R} | {2 ** k for k in range(R.bit_length()) if 2 ** k <= R}):
        row[f"ops_R{r}"] = step_calls(stacked(build(cfgs[0]).algo, [c.hp for c in cfgs[:r]]), warm=2)
    return row


def calls_main(runs: int, threads: int = 1, only: str = "", out: str | Path | None = None,
               device: str = "cpu") -> list[dict[str, Any]]:
    """``fbo bench --batch R --calls``: :func:`calls_case` of every case (or ``only``), printed as each finishes
    and written to ``out``/calls.csv."""
    from ..runs.rundir import atomic_write

    torch.set_num_threads(threads)
    keys = set(filter(None, only.split(",")))
    rows = []
    for case in CASES:
        if not keys or case["name"] in keys or case["algo"] in keys:
            rows.append(calls_case(case, runs, device))
            print(rows[-1], flush=True)
    if out and rows:
        head = list(dict.fromkeys(k for r in rows for k in r))
        atomic_write(Path(out) / "calls.csv", "\n".join([",".join(head), *(",".join(str(r.get(k, "")) for k in head)
                                                                          for r in rows)]).encode() + b"\n")
    return rows


def _merged(csv_path: Path, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``csv_path`` (an earlier ``--batch`` run, if any) with those of the cases measured again replaced
    by ``new``, in the cases' order."""
    import csv

    old = list(csv.DictReader(csv_path.open())) if csv_path.is_file() else []
    by = {r["case"]: r for r in old} | {r["case"]: r for r in new}
    order = [c["name"] for c in CASES]
    return sorted(by.values(), key=lambda r: order.index(r["case"]) if r["case"] in order else len(order))


def main(runs: int = 8, iters: int = 3, reps: int = 3, threads: int = 1, only: str = "",
         out: str | Path | None = None, device: str = "cpu") -> list[dict[str, Any]]:
    """``fbo bench --batch R``: every case (or those whose name or algorithm is in ``only``), printed as it
    finishes, and the table written to ``out``/batch.md, its rows to ``out``/batch.csv (what ``fbo cost
    --batch`` prices run batches with, :func:`fbo_cli.grids.run_batches.batch_speedups`)."""
    import datetime

    from ..runs.rundir import atomic_write, code_commit
    from ..runs.table import md_row

    torch.set_num_threads(threads)
    keys = set(filter(None, only.split(",")))
    rows = []
    sha = code_commit().removeprefix(", commit ")  # "<sha>" or "<sha> with uncommitted changes to fbo_cli/"
    when = f"{sha.split(' ')[0] + ('+changes' if ' ' in sha else '') if sha else 'no git'} {datetime.date.today()}"
    load = [os.getloadavg()[0]]
    for case in CASES:
        if not keys or case["name"] in keys or case["algo"] in keys:
            rows.append({**bench_case(case, runs, iters, reps, device), "measured": when})
            load.append(os.getloadavg()[0])
            print(rows[-1], flush=True)
    if out and rows:
        rows = _merged(Path(out) / "batch.csv", rows) if keys else rows
        head = list(dict.fromkeys(k for r in rows for k in r))
        rows = [{k: r.get(k, "") for k in head} for r in rows]
        where = (f"CUDA, {torch.cuda.get_device_name()}" if device == "cuda" else f"CPU, {threads} thread(s)")
        text = (f"# Run batches against runs one by one ({where}, R = {runs} step sizes of one "
                f"seed)\n\n`fbo bench --batch {runs} --iters {iters}{' --device cuda' if device == 'cuda' else ''}"
                f"{' --only ' + only if keys else ''}`{code_commit()}, torch {torch.__version__}, the machine's load "
                f"average {min(load):.1f} to {max(load):.1f} during the run (on {os.cpu_count()} cores). Seconds per "
                f"outer iteration and run; runs per hour at the case's budget with one evaluation per run every "
                f"eval_every iterations (a batch evaluates "
                f"its runs in one pass where the task can: hyper-cleaning, hfl); step_ratio: the steps alone, ratio: "
                f"with the evaluations. ops_one, ops_batch: the aten operators one outer iteration calls (each a "
                f"kernel launch on a GPU), a run alone's and the batch of R runs'. gflop_per_run: the step's matrix "
                f"products (GFLOP per outer iteration and run); "
                f"eff_*: their rate against this machine's sgemm in the same window (2048² fp32, the same threads); "
                f"ceiling: the step ratio at which the batch would do nothing but its products at the sgemm rate; "
                f"ceiling_products: the same at the speed its products run in it (their share of a batched step: a "
                f"small product runs far below the sgemm rate, batched or not). seeds_*: R seeds at the default "
                f"step, one by one against one seed batch (each run its own data and draws, evaluated run by run) "
                f"in the same window: seeds_step_ratio the steps alone, seeds_bound the most a seed batch's step can "
                f"gain (a run's step over the time it spends drawing and gathering its minibatches, timed in place: "
                f"what a seed batch still does run by run, from each run's generator), runs_per_hour_seeds_batched "
                f"and seeds_ratio with the evaluations (one by one: runs_per_hour_one_by_one); seeds_note: why a case "
                f"has none. measured: the commit and day of each row (`--only` measures some cases again and keeps "
                f"the other rows).\n\n"
                + "\n".join([md_row(head), md_row(["---"] * len(head)), *(md_row([r[k] for k in head]) for r in rows)])
                + "\n")
        atomic_write(Path(out) / "batch.md", text.encode())
        atomic_write(Path(out) / "batch.csv", "\n".join([",".join(head), *(",".join(str(r[k]) for k in head)
                                                                             for r in rows)]).encode() + b"\n")
    return rows
