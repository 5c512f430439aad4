"""The runner: builds a run from its config, steps the algorithm until the budget is spent,
evaluates every ``eval_every`` outer iterations, and writes the run directory.

A run whose iterate or metrics become NaN/inf stops with status ``diverged`` and keeps the rows it
had. ``metrics.csv`` is rewritten atomically at every evaluation, so a killed run leaves a valid
prefix.
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import __version__
from .algorithms.base import Fed
from .config import RunConfig
from .data import build_federated, load_dataset
from .errors import UsageError
from .federation import Ledger
from .results import plot_run, rounds_to_target, write_csv, write_json, write_yaml
from .tasks import TASKS


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("device 'cuda' requested but no CUDA device is available; use --device cpu or auto")
    return torch.device(name)


@dataclass
class Built:
    cfg: RunConfig
    task: Any
    algo: Any
    ledger: Ledger
    device: torch.device


def build(cfg: RunConfig) -> Built:
    """Data, task and algorithm of a run, seeded (everything but the loop)."""
    r = cfg.run
    if r.threads:
        torch.set_num_threads(r.threads)
    device = pick_device(r.device)
    torch.manual_seed(r.seed)
    ds = load_dataset(r.dataset, r.data_dir, r.download)
    data = build_federated(ds, r.partition, r.clients, r.seed, device, r.val_frac, r.alpha, r.shards_per_client)
    task = TASKS[cfg.task](cfg.task_params, data)
    gen = torch.Generator(device=device).manual_seed(r.seed)
    ledger = Ledger()
    algo = cfg.entry.cls(task, cfg.hp, Fed(data, r.participation, gen, ledger))
    return Built(cfg, task, algo, ledger, device)


def _finite(algo) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in algo.state().values())


def execute(cfg: RunConfig, on_eval: Callable[[dict[str, Any]], None] | None = None, write: bool = True) -> dict:
    """Run to the end of the budget. Returns the summary (also written to ``summary.json``)."""
    r = cfg.run
    run_dir = cfg.run_dir
    b = build(cfg)
    algo, led = b.algo, b.ledger
    metric = b.task.metric
    if write:
        write_yaml(run_dir / "config.yaml", cfg.as_dict())
    rows: list[dict[str, Any]] = []
    train_time = eval_time = 0.0
    status = "done"

    def evaluate() -> dict[str, Any]:
        nonlocal eval_time
        t0 = time.perf_counter()
        m = algo.evaluate()
        eval_time += time.perf_counter() - t0
        row = {**led.as_dict(), "train_time": round(train_time, 4), **m}
        rows.append(row)
        if write:
            write_csv(run_dir / "metrics.csv", rows)
        if on_eval:
            on_eval(row)
        return row

    failure: Exception | None = None

    def add_time(dt: float) -> None:
        nonlocal train_time
        train_time += dt

    try:
        evaluate()
        status = _loop(algo, led, r, evaluate, add_time, lambda: train_time)
        if status == "done" and rows[-1]["iterations"] != led.iterations:
            evaluate()
    except Exception as e:  # a bug, not bad input: record it in summary.json, then let it propagate
        status, failure = "failed", e

    import pandas as pd

    df = pd.DataFrame(rows) if rows else pd.DataFrame({"rounds": [], metric: []})
    within = df[df["rounds"] <= r.rounds] if (df["rounds"] <= r.rounds).any() else df
    finite = within[metric].replace([float("inf"), float("-inf")], float("nan")).dropna()
    summary = {
        "task": cfg.task, "algo": cfg.algo, "label": cfg.entry.label or cfg.algo, "run_id": cfg.run_id,
        "status": status, "seed": r.seed, "dataset": r.dataset, "partition": r.partition,
        "metric": metric,
        "final": float(within[metric].iloc[-1]) if len(within) else None,
        "best": float(finite.max()) if len(finite) else None,
        "final_mean_last5": float(within[metric].tail(5).mean()) if len(within) else None,
        "target": r.target,
        "rounds_to_target": rounds_to_target(df, metric, r.target),
        "rounds_per_iteration": algo.rounds_per_iteration(),
        "ledger": led.as_dict(),
        "train_time_s": round(train_time, 3), "eval_time_s": round(eval_time, 3),
        "seconds_per_round": round(train_time / max(led.rounds, 1), 5),
        "device": str(b.device),
        "versions": {"fbo": __version__, "torch": torch.__version__, "python": platform.python_version()},
    }
    if failure is not None:
        summary["error"] = f"{type(failure).__name__}: {failure}"
    if write:
        write_json(run_dir / "summary.json", summary)
        if rows:
            title = f"{summary['label']} on {cfg.task}/{r.dataset} ({r.partition}, seed {r.seed})"
            plot_run(run_dir / "curves.png", df, title, metric)
    if failure is not None:
        raise failure
    return summary


def _loop(algo, led: Ledger, r, evaluate: Callable[[], dict], add_time: Callable[[float], None],
          train_time: Callable[[], float]) -> str:
    """Step until a budget is spent; returns the status (``done`` or ``diverged``)."""
    while led.rounds < r.rounds:
        if r.max_iters is not None and led.iterations >= r.max_iters:
            break
        if r.time_limit is not None and train_time() >= r.time_limit:
            break
        t0 = time.perf_counter()
        algo.step()
        led.iterations += 1
        ok = _finite(algo)
        add_time(time.perf_counter() - t0)
        if not ok:
            return "diverged"
        if led.iterations % r.eval_every == 0:
            row = evaluate()
            if not all(math.isfinite(v) for v in row.values() if isinstance(v, float)):
                return "diverged"
    return "done"
