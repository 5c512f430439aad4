"""A user's class that asks to batch is taken at its word only once it has shown it (issue 61).

A built-in algorithm's batched runs are tested equal to its runs alone (tests/grids); a user's class that declares its
batch (``batch = Batching(state=...)``, or the old ``batches = True`` and ``batch_state``) with a state that
:func:`fbo_cli.grids.run_batches.state_refusal` accepts may still batch differently from its runs alone (a reduction
that mixes the runs, a state its source hides). Before its first batch in a process, two of the batch's runs step
:data:`ITERATIONS` outer iterations alone and then together (the runner's own two code paths, in a scratch folder),
and their checkpoints' arrays and generator states are compared bit for bit: a difference refuses the batch (the runs
run alone), naming the first array that differs. The verdict is kept per class code, task and dataset for the process.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch

from ..runs.config import RunConfig

ITERATIONS = 2
_VERDICTS: dict[tuple, str | None] = {}
_CHECKING: set[tuple] = set()


def _key(cfg: RunConfig) -> tuple:
    from ..runs.identity import code_key

    return cfg.source, code_key(cfg.code["algorithm"]), cfg.task, cfg.run.dataset


def _short(cfg: RunConfig, root: Path) -> RunConfig:
    """``cfg`` cut to :data:`ITERATIONS` outer iterations, written under ``root``, its last checkpoint kept."""
    r = dataclasses.replace(cfg.run, max_iters=min(cfg.run.max_iters or ITERATIONS, ITERATIONS), out_dir=str(root),
                            checkpoint_every=1, keep_checkpoint=True, time_limit=None)
    return dataclasses.replace(cfg, run=r)


def _arrays(e: Any, path: str = "") -> dict[str, torch.Tensor]:
    """``{dotted path: tensor}`` of a checkpoint's snapshot (:func:`fbo_cli.runs.checkpoint.snapshot`: a mapping of
    attributes to encoded values, ``("t", tensor)``, ``("d", {...})``, ``("l", class, [...])``)."""
    if isinstance(e, torch.Tensor):
        return {path or "?": e}
    out: dict[str, torch.Tensor] = {}
    if isinstance(e, dict):
        for k, v in e.items():
            out.update(_arrays(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(e, (list, tuple)):
        if e and isinstance(e[0], str):  # an encoded value: its tag, then its payload
            payload = [v for v in e[1:] if not isinstance(v, str)]
            return _arrays(payload[0], path) if len(payload) == 1 else _arrays(payload, path)
        for i, v in enumerate(e):
            out.update(_arrays(v, f"{path}[{i}]"))
    return out


def first_difference(alone: Path, batch: Path) -> str | None:
    """The first array (``self.x``, the generator's state) that differs between two checkpoints of one run, or a
    line saying one is missing; None when they agree bit for bit."""
    if not alone.is_file() or not batch.is_file():
        return f"no checkpoint after {ITERATIONS} iterations ({'batched' if alone.is_file() else 'alone'})"
    a, b = (torch.load(p, map_location="cpu", weights_only=True) for p in (alone, batch))
    xa, xb = _arrays(a["algo"]), _arrays(b["algo"])
    xa["generator state"], xb["generator state"] = a["gen"], b["gen"]
    for k in xa:
        if k in xb and not (xa[k].shape == xb[k].shape and xa[k].dtype == xb[k].dtype and torch.equal(xa[k], xb[k])):
            return f"self.{k}" if k != "generator state" else k
    if a["ledger"] != b["ledger"]:
        return "the ledger"
    return None


def refusal(cfgs: Sequence[RunConfig], execute_batch) -> str | None:
    """Why the runs ``cfgs`` (a seed group of a user's class, about to step as one batch) may not batch: their
    first two, stepped alone and batched (by ``execute_batch``, the caller's, so that this module does not import
    it back) for :data:`ITERATIONS` iterations, differ (naming the first array), or None (a built-in class, a
    verdict already reached, or the same bits)."""
    from ..runs.runner import execute

    cfg = cfgs[0]
    if not cfg.source or len(cfgs) < 2:
        return None
    key = _key(cfg)
    if key in _CHECKING:  # the check's own batch
        return None
    if key not in _VERDICTS:
        _CHECKING.add(key)
        try:
            with tempfile.TemporaryDirectory(prefix="fbo-batch-check-") as tmp:
                two = list(cfgs[:2])
                alone = [_short(c, Path(tmp) / "alone") for c in two]
                batch = [_short(c, Path(tmp) / "batch") for c in two]
                for c in alone:
                    execute(c, reuse=False, fresh=True)
                execute_batch(batch, reuse=False, fresh=True)
                why = None
                for i, (ca, cb) in enumerate(zip(alone, batch)):
                    if d := first_difference(ca.run_dir / "checkpoint.pt", cb.run_dir / "checkpoint.pt"):
                        why = (f"its batched runs differ from its runs alone after {ITERATIONS} iterations "
                               f"(first: {d} of run {i + 1} of 2); its runs run alone")
                        break
        except Exception as e:  # a check that cannot run: the runs run alone, where their own errors show
            why = f"its batch could not be checked against its runs alone ({type(e).__name__}: {e}); they run alone"
        finally:
            _CHECKING.discard(key)
        _VERDICTS[key] = why
    return _VERDICTS[key]
