"""Generic checkpoints of an algorithm object: every attribute that evolves, without per-algorithm code.

:func:`snapshot` walks the object's ``__dict__`` (recursing into lists, tuples, dicts and plain
objects such as samplers or splits) and records tensors, numbers, strings and generator states.
It leaves out the references the runner rebuilds from the config (``task``, ``hp``, ``fed``,
``ledger``), callables (e.g. ``vmap``-ed losses), and every tensor that is still the very object,
unmodified in place (same ``_version``), that the freshly built algorithm held (:func:`baseline`):
constants such as data splits are rebuilt bit for bit by :func:`~fbo_cli.runs.runner.build` from the
seed, so a checkpoint only holds the iterate and the optimizer state. :func:`restore` writes a
snapshot back into a freshly built object; generators get their state set in place, so an object
sharing the run's generator keeps sharing it.

A snapshot is data, never code: tensors, numbers, strings, lists and dicts, loadable with
``torch.load(weights_only=True)``. Containers and objects record their class by name
(``module:qualname``), and :func:`restore` accepts only ``list``, ``tuple`` and classes of
``fbo_cli`` itself; anything else is a :class:`ValueError` (a malformed checkpoint).
"""

from __future__ import annotations

import importlib
import weakref
from typing import Any

import numpy as np
import torch

from ..algorithms.base import REBUILT
from ..data import FederatedData
from ..sim.federation import Ledger
from ..tasks.base import Task

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
    from ..algorithms.base import FederationView

    return isinstance(v, (Task, FederationView, FederatedData, Ledger)) or (callable(v)
                                                                           and not isinstance(v, torch.Tensor))


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
        if v is None or isinstance(v, (bool, int, float, str)):
            return ("v", v)
        if isinstance(v, np.generic):
            return ("ng", v.dtype.str, v.item())
        if isinstance(v, np.ndarray):
            return ("n", torch.from_numpy(v.copy()))
        if _ignored(v):
            return _SKIP
        if isinstance(v, dict):
            return ("d", {k: enc(c, path + (k,)) for k, c in v.items()})
        if isinstance(v, (list, tuple)):
            return ("l", class_name(type(v)), [enc(c, path + (i,)) for i, c in enumerate(v)])
        if hasattr(v, "__dict__"):
            return ("o", class_name(type(v)), {k: enc(c, path + (k,)) for k, c in vars(v).items()})
        raise TypeError(f"checkpoint: cannot store a {type(v).__name__} at {'.'.join(map(str, path))}")

    return {k: enc(v, (k,)) for k, v in vars(obj).items() if k not in REBUILT}


def class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def class_of(name: Any) -> type:
    """The class a snapshot names: ``list``, ``tuple`` or a class of ``fbo_cli``; else ValueError."""
    if name in ("builtins:list", "builtins:tuple"):
        return list if name.endswith("list") else tuple
    mod, _, qual = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not (mod == "fbo_cli" or mod.startswith("fbo_cli.")) or not qual:
        raise ValueError(f"checkpoint names the class {name!r}, which is not one of fbo's")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise ValueError(f"checkpoint names {name!r}, which is not a class")
    return obj


def restore(obj: Any, snap: dict[str, Any], device: torch.device) -> None:
    """Write a snapshot back into ``obj``; ValueError/TypeError/KeyError/... when it is malformed."""
    def dec(e, cur):
        kind = e[0]
        if kind == "s":
            return cur
        if kind == "t":
            if isinstance(cur, torch.Tensor) and (cur.shape != e[1].shape or cur.dtype != e[1].dtype):
                raise ValueError(f"a tensor of shape {tuple(e[1].shape)} ({e[1].dtype}) where this run holds "
                                 f"{tuple(cur.shape)} ({cur.dtype})")
            return e[1].to(device)
        if kind == "g":
            cur.set_state(e[1])
            return cur
        if kind == "v":
            return e[1]
        if kind == "ng":
            return np.dtype(e[1]).type(e[2])
        if kind == "n":
            return e[1].numpy().copy()
        if kind == "d":
            old = cur if isinstance(cur, dict) else {}
            return {k: dec(c, old.get(k)) for k, c in e[1].items()}
        if kind == "l":
            cls = class_of(e[1])
            old = list(cur) if isinstance(cur, (list, tuple)) and len(cur) == len(e[2]) else [None] * len(e[2])
            items = [dec(c, o) for c, o in zip(e[2], old)]
            return cls(*items) if hasattr(cls, "_fields") else cls(items)
        if kind == "o":
            cls = class_of(e[1])
            target = cur if isinstance(cur, cls) else cls.__new__(cls)
            for k, c in e[2].items():
                object.__setattr__(target, k, dec(c, getattr(target, k, None)))  # frozen too
            return target
        raise ValueError(f"unknown checkpoint entry {kind!r}")

    for k, e in snap.items():
        setattr(obj, k, dec(e, getattr(obj, k, None)))
