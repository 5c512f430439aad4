"""Generic checkpoints of an algorithm object: every attribute that evolves, without per-algorithm code.

:func:`snapshot` walks the object's ``__dict__`` (recursing into lists, tuples, dicts and plain
objects such as samplers or splits) and records tensors, numbers, strings and generator states.
It leaves out the references the runner rebuilds from the config (``task``, ``hp``, ``fed``,
``ledger``), callables (e.g. ``vmap``-ed losses), and every tensor that is still the very object,
unmodified in place (same ``_version``), that the freshly built algorithm held (:func:`baseline`):
constants such as data splits are rebuilt bit for bit by :func:`~fbo_cli.runner.build` from the
seed, so a checkpoint only holds the iterate and the optimizer state. :func:`restore` writes a
snapshot back into a freshly built object; generators get their state set in place, so an object
sharing the run's generator keeps sharing it.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch

from .data import FederatedData
from .federation import Ledger
from .tasks.base import Task

REBUILT = {"task", "hp", "fed", "ledger"}  # rebuilt from the config, not saved
_SKIP = ("s",)  # keep the value the fresh object holds


def _children(v: Any):
    if isinstance(v, dict):
        return list(v.items())
    if isinstance(v, (list, tuple)):
        return list(enumerate(v))
    if hasattr(v, "__dict__") and not callable(v):
        return list(vars(v).items())
    return []


def _ignored(v: Any) -> bool:
    from .algorithms.base import Fed

    return isinstance(v, (Task, Fed, FederatedData, Ledger)) or (callable(v) and not isinstance(v, torch.Tensor))


def baseline(obj: Any) -> dict[tuple, tuple]:
    """``{path: (weakref, _version)}`` of every tensor the freshly built ``obj`` holds."""
    out: dict[tuple, tuple] = {}

    def walk(v, path):
        if isinstance(v, torch.Tensor):
            out[path] = (weakref.ref(v), v._version)
        elif not _ignored(v):
            for k, c in _children(v):
                walk(c, path + (k,))

    for k, v in vars(obj).items():
        if k not in REBUILT:
            walk(v, (k,))
    return out


def snapshot(obj: Any, base: dict[tuple, tuple]) -> dict[str, Any]:
    def enc(v, path):
        if isinstance(v, torch.Tensor):
            b = base.get(path)
            if b is not None and b[0]() is v and b[1] == v._version:
                return _SKIP
            return ("t", v.detach().cpu())
        if isinstance(v, torch.Generator):
            return ("g", v.get_state())
        if v is None or isinstance(v, (bool, int, float, str, complex, np.generic)):
            return ("v", v)
        if isinstance(v, np.ndarray):
            return ("v", v.copy())
        if _ignored(v):
            return _SKIP
        if isinstance(v, dict):
            return ("d", {k: enc(c, path + (k,)) for k, c in v.items()})
        if isinstance(v, (list, tuple)):
            return ("l", type(v), [enc(c, path + (i,)) for i, c in enumerate(v)])
        if hasattr(v, "__dict__"):
            return ("o", type(v), {k: enc(c, path + (k,)) for k, c in vars(v).items()})
        return ("v", v)

    return {k: enc(v, (k,)) for k, v in vars(obj).items() if k not in REBUILT}


def restore(obj: Any, snap: dict[str, Any], device: torch.device) -> None:
    def dec(e, cur):
        kind = e[0]
        if kind == "s":
            return cur
        if kind == "t":
            return e[1].to(device)
        if kind == "g":
            cur.set_state(e[1])
            return cur
        if kind == "v":
            return e[1]
        if kind == "d":
            old = cur if isinstance(cur, dict) else {}
            return {k: dec(c, old.get(k)) for k, c in e[1].items()}
        if kind == "l":
            old = list(cur) if isinstance(cur, (list, tuple)) and len(cur) == len(e[2]) else [None] * len(e[2])
            items = [dec(c, o) for c, o in zip(e[2], old)]
            return e[1](*items) if hasattr(e[1], "_fields") else e[1](items)
        if kind == "o":
            target = cur if isinstance(cur, e[1]) else e[1].__new__(e[1])
            for k, c in e[2].items():
                object.__setattr__(target, k, dec(c, getattr(target, k, None)))  # frozen too
            return target
        raise ValueError(f"unknown checkpoint entry {kind!r}")

    for k, e in snap.items():
        setattr(obj, k, dec(e, getattr(obj, k, None)))
