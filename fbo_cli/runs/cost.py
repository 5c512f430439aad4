"""The cost model: what running a set of runs costs, in core-seconds, from the seconds per round of the
finished runs of the same kind (the committed evidence and the results folder) on this kind of device,
plus a fixed start-up per run and per process (``fbo run/compare/tune --dry-run``, the grid's cost line)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Sequence

import numpy as np


def _kind(cfg: dict) -> str:
    """A run's identity without its seed and device (:func:`config.comparable`): runs of one kind cost
    about the same on one kind of device."""
    from .config import comparable

    return json.dumps({k: v for k, v in comparable(cfg).items() if k not in ("seed", "device")}, sort_keys=True,
                      default=str)


_SCHEDULE_KEYS = frozenset({"T0", "seed", "rounds", "max_iters", "checkpoint_every"})


def _shape(cfg: dict, loose: bool = False) -> str:
    """What sets a run's cost per round, without its step sizes: the task, algorithm, dataset and model,
    the clients, participation and evaluation cadence (``eval_rounds`` only where set), and the integer and
    boolean settings of the task and algorithm (local iterations I, batch sizes, lower epochs, Neumann terms),
    schedules (T0) left out; ``loose``: the integers alone, without the evaluation cadence and the switches."""
    from .config import comparable

    cfg = comparable(cfg)  # a resolved config and a run's config.yaml alike
    tp, hp = cfg.get("task_params") or {}, cfg.get("hp") or {}
    ints = {k: v for part in (tp, hp) for k, v in part.items()
            if isinstance(v, int) and not (loose and isinstance(v, bool)) and k not in _SCHEDULE_KEYS}
    return json.dumps({"task": cfg.get("task"), "algo": cfg.get("algo"), "dataset": cfg.get("dataset"),
                       "model": tp.get("model"), "clients": cfg.get("clients"),
                       "participation": cfg.get("participation"),
                       "eval_every": None if loose else cfg.get("eval_every"),
                       **({"eval_rounds": cfg["eval_rounds"]} if cfg.get("eval_rounds") and not loose else {}),
                       **ints}, sort_keys=True, default=str)


def _cost_keys(cfg: dict) -> list[tuple]:
    """The keys a run's cost per round is filed and looked up under, the most specific first: its kind,
    its shape (strict, then loose), its (task, algorithm, dataset, model), its (task, algorithm, model)."""
    task, algo, model = cfg.get("task"), cfg.get("algo"), (cfg.get("task_params") or {}).get("model")
    return [("kind", _kind(cfg)), ("shape", _shape(cfg)), ("loose", _shape(cfg, True)),
            (task, algo, cfg.get("dataset"), model), (task, algo, None, model)]


_COARSE = 3  # _cost_keys from this one on match other client counts: their cost scales with the active clients


def _active(cfg: dict) -> float:
    """Clients taking part in a round (clients x participation)."""
    try:
        return max(float(cfg.get("clients") or 1) * float(cfg.get("participation") or 1), 1.0)
    except (TypeError, ValueError):
        return 1.0


@functools.lru_cache(maxsize=32)
def _root_samples(root: str, here: str) -> dict[tuple, tuple[tuple[float, float], ...]]:
    """(seconds per round, training and evaluation; the training's share of them) of the finished runs
    under ``root`` on this kind of device, under each of its :func:`_cost_keys`; read once per root and
    process (the evidence's 800 runs take seconds to parse), whatever other roots a later estimate adds. A
    run stepped in a run batch (``batch_runs`` in its summary) is left out: its training time is its share
    of the batch's, not what it costs alone."""
    from ..errors import UsageError
    from .config import load_yaml

    per: dict[tuple, list[tuple[float, float]]] = {}
    for f in Path(root).glob("*/*/*/summary.json"):
        try:
            s = json.loads(f.read_text())
            rounds = s["ledger"]["rounds"]
            train, ev = (s.get("train_time_s") or 0), (s.get("eval_time_s") or 0)
            cfg = load_yaml((f.parent / "config.yaml").read_bytes(), str(f)) or {}
        except (OSError, ValueError, KeyError, TypeError, UsageError):
            continue
        if not rounds or s.get("device", "cpu") != here or (s.get("batch_runs") or 1) > 1 or train + ev <= 0:
            continue
        for i, key in enumerate(_cost_keys(cfg)):  # the coarse keys: per taking-part client and round
            per.setdefault(key, []).append(((train + ev) / rounds / (_active(cfg) if i >= _COARSE else 1),
                                            train / (train + ev)))
    return {k: tuple(v) for k, v in per.items()}


def _seconds_per_round(roots: tuple[str, ...], here: str) -> dict[tuple, tuple[float, float]]:
    """(median seconds per round, training and evaluation; the median training share) of the finished runs
    under ``roots`` on this kind of device, under each of its :func:`_cost_keys`."""
    per: dict[tuple, list[tuple[float, float]]] = {}
    for root in roots:
        for k, v in _root_samples(root, here).items():
            per.setdefault(k, []).extend(v)
    return {k: (float(np.median([a for a, _ in v])), float(np.median([b for _, b in v]))) for k, v in per.items()}


_seconds_per_round.cache_clear = _root_samples.cache_clear  # runs written since: read the roots again

def evidence_roots() -> tuple[Path, ...]:
    """Where finished runs tell the cost of a kind of run: ``docs/results`` here and in fbo's own checkout (a
    spec in a folder of its own still gets the committed evidence's timings)."""
    return tuple(dict.fromkeys(p for p in (Path("docs/results"), Path(__file__).parents[2] / "docs" / "results")
                               if p.is_dir())) or (Path("docs/results"),)


def estimate_cost(cells: list, roots: tuple[Path, ...] | None = None, shares: Sequence[float] | None = None,
                  eval_shares: Sequence[float] | None = None) -> tuple[float, int]:
    """(core-seconds, runs without a basis) of running ``cells``: each run's budget in rounds times the
    median seconds per round (training and evaluation) of finished runs of the same kind under ``roots``
    (the committed evidence, and the results folder) on this kind of device (a GPU's runs say nothing of a
    CPU's cost): the same configuration but for the seed where such runs exist, else the same shape (the
    same local work per round with other step sizes, :func:`_shape`, strict then loose), else the same task, algorithm,
    dataset and model, else the same task, algorithm and model on any dataset (a rough guide then: the
    evaluation cadence, participation and local work change the cost too).

    ``shares``: per run, the share of its training time alone that it costs in its run batch or on another
    device, or the pair (training, evaluation) of those shares (:func:`fbo_cli.grids.run_batches.cost_shares`);
    ``eval_shares`` the evaluations' share where ``shares`` has no pairs (default: as alone)."""
    if not cells:
        return 0.0, 0
    import torch

    here = "cuda" if torch.cuda.is_available() else "cpu"
    roots = evidence_roots() if roots is None else roots
    folders = {str(Path(r).resolve()) for r in (*roots, *(c.cfg.run.out_dir for c in cells))}
    table = _seconds_per_round(tuple(sorted(folders)), here)
    total, unknown = 0.0, 0
    for c, share, eshare in zip(cells, shares or [1.0] * len(cells), eval_shares or [1.0] * len(cells), strict=True):
        if c.cfg.run.device not in ("auto", here):
            unknown += 1
            continue
        d = c.cfg.as_dict()
        hit = next(((table[k][0] * (_active(d) if i >= _COARSE else 1), table[k][1])
                    for i, k in enumerate(_cost_keys(d)) if table.get(k)), None)
        if isinstance(share, tuple):
            share, eshare = share
        if hit:
            spr, train = hit
            total += spr * (train * share + (1 - train) * eshare) * c.cfg.run.rounds
        else:
            unknown += 1
    return total, unknown


# One GPU shared by processes (lanes: --jobs on CUDA) and run batches, fitted on one measurement (an NVIDIA H100 at
# commit 545066e, 16 cores; docs/results/bench/cuda/README.md): Table 2's 60 compared runs (2,000 rounds each, the
# FedNest family on hyperrep) took 159 s of wall time with 8 processes and --batch off (148 s with --batch auto),
# where this model prices the same runs one by one at 2,123 GPU-seconds (fbo_cli.evidence.reproduce.gpu_ratio: the CUDA
# bench's seconds per iteration against the CPU bench's, applied to the CPU evidence): 8 lanes finish 13.4x sooner
# than that price (the processes overlap their launch-bound steps; the price itself is pessimistic for these runs)
GPU_LANES_FIT = (8, 2123.0 / 159.0)
GPU_LANE_BYTES = 1.75e9  # GPU memory one such process holds (14 GB for the 8: nvidia-smi during that run)


def lane_gain(lanes: int) -> float:
    """How many times sooner than the model's runs one by one (:func:`fbo_cli.evidence.reproduce.gpu_ratio`) ``lanes``
    processes sharing one GPU finish: the fit's gain at its lanes (:data:`GPU_LANES_FIT`), proportionally less with
    fewer, and no more with more (the GPU was busy all the time at 8: nothing beyond is assumed)."""
    fit_lanes, gain = GPU_LANES_FIT
    return gain * min(max(lanes, 1), fit_lanes) / fit_lanes


def gpu_lanes(total_bytes: float, cpus: int, per_lane: float = GPU_LANE_BYTES) -> int:
    """``--jobs auto`` on CUDA: the processes that share one GPU, as many as 90% of its memory (``total_bytes``) holds
    at ``per_lane`` each, at most one per CPU core (each process drives its runs from one)."""
    return max(1, min(int(0.9 * total_bytes // per_lane), cpus))


# the fixed cost of a run beyond its rounds, measured on this machine (2 cores; docs/fidelity.md#defaults): per run in a
# grid (build, its files, its curves.png), and per process (the CLI, each --jobs worker: importing torch)
RUN_STARTUP_S = 1.0


PROCESS_STARTUP_S = 5.0


def parallel(jobs: int, load: tuple[float, int] | None = None) -> tuple[float, str]:
    """What wall time divides core time by with ``jobs`` processes on this machine as loaded now, and the words
    that say so: each process gets ``min(1, cores / (load + jobs))`` of a core, ``load`` the 1-minute load
    average (``os.getloadavg``; ``load``: (load, cores) given). A loaded machine (the issue's tuning: 3 min
    estimated, 8.5 min taken at a load of ~4 on 2 cores) is said, with its idle cores."""
    import os

    if load is None:
        try:
            load = (os.getloadavg()[0], os.cpu_count() or 1)
        except OSError:  # no load average here: as idle
            load = (0.0, os.cpu_count() or 1)
    busy, cores = load
    p = jobs * min(1.0, cores / (busy + jobs))
    words = f"with {jobs} job{'s' if jobs > 1 else ''}"
    if busy >= 0.5:
        words += f" on {max(cores - busy, 0):.0f} idle of {cores} cores (load {busy:.1f} now)"
    return p, words


LONG_RUN_S = 3600.0  # a run expected to take longer says so before it starts (fbo run, compare, tune)


def longest_run(cells: list, jobs: int = 1) -> tuple[float, object | None]:
    """(seconds, cell) of the run of ``cells`` expected to take longest on this machine as loaded now, each run
    one of ``jobs`` processes (:func:`parallel`); (0, None) when none has an estimate."""
    share = parallel(max(jobs, 1))[0] / max(jobs, 1)  # of a core, per process
    best: tuple[float, object | None] = (0.0, None)
    for c in {c.cfg.run_dir: c for c in cells}.values():
        secs, unknown = estimate_cost([c])
        if not unknown and secs / share > best[0]:
            best = (secs / share, c)
    return best


def long_run_note(cells: list, jobs: int = 1) -> str:
    """'' or the words that a run of ``cells`` is expected above :data:`LONG_RUN_S` (the longest one)."""
    secs, c = longest_run(cells, jobs)
    if secs <= LONG_RUN_S:
        return ""
    name = f"{c.algorithm} · {c.setting} · seed {c.seed}" if hasattr(c, "algorithm") else c.cfg.algo
    return (f"the longest run ({name}: {c.cfg.run.rounds} rounds) takes about {secs / 3600:.1f} h on its own; "
            "Ctrl-C keeps its checkpoint")


def cost_line(todo: list, jobs: int, shares: Sequence[float] | None = None) -> str:
    if not todo:
        return "nothing left to run (every run is finished)"
    secs, unknown = estimate_cost(todo, shares=shares)
    known = len(todo) - unknown
    secs += known * RUN_STARTUP_S
    p, words = parallel(max(jobs, 1))
    est = (f"about {secs / 60:.0f} core-minutes ({secs / 60 / p:.0f} min of wall time {words}) for the {known} "
           "whose kind has run before" if known else "no estimate")
    long = long_run_note(todo, jobs) if known else ""
    return (f"{len(todo)} run(s) to do: {est}" + (f"; {unknown} of a kind never run here (no estimate)"
                                                   if unknown and known else "") + (f"; {long}" if long else ""))
