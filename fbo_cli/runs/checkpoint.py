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

A run's ``checkpoint.pt`` (:func:`save_checkpoint`, :func:`load_checkpoint`, read and written through
:class:`fbo_cli.runs.rundir.RunDir`) holds such a snapshot with the generator states, the ledger, the metric rows
and the timers.
"""

from __future__ import annotations

import importlib
import io
import weakref
from typing import Any

import numpy as np
import torch

from .. import __version__
from ..algorithms.base import REBUILT
from ..data import FederatedData
from ..files import atomic_write
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


# --------------------------------------------------------------------------------------------------
# a run's checkpoint file (``checkpoint.pt``; :meth:`fbo_cli.runs.rundir.RunDir.save_checkpoint` and
# :meth:`~fbo_cli.runs.rundir.RunDir.load_checkpoint` call these): the snapshot of its algorithm, the generator
# states, the ledger, the metric rows and the timers

CHECKPOINT_KEYS = {"run_id": str, "fbo": str, "algo": dict, "gen": torch.Tensor, "torch_rng": torch.Tensor,
                   "ledger": dict, "rows": list, "train_time": (int, float), "eval_time": (int, float)}


def code_key(cfg) -> str:
    """One string for the algorithm's and the task's code (a checkpoint of other code is not resumed)."""
    import json

    c = cfg.code
    return json.dumps([c["algorithm"], c["task"]], sort_keys=True)


def save_checkpoint(path, cfg, b, base, rows, train_time, eval_time) -> None:
    """Write run ``cfg``'s checkpoint (``b``: its build, :func:`fbo_cli.runs.runner.build`; ``base``: its
    :func:`baseline`) to ``path``, atomically."""
    buf = io.BytesIO()
    torch.save({"run_id": cfg.run_id, "fbo": __version__, "code": code_key(cfg), "algo": snapshot(b.algo, base),
                "gen": b.algo.fed.gen.get_state(), "torch_rng": torch.get_rng_state(),
                "ledger": b.ledger.as_dict(), "rows": rows, "train_time": train_time, "eval_time": eval_time}, buf)
    atomic_write(path, buf.getvalue())


def load_checkpoint(path, cfg, b) -> tuple[dict | None, str]:
    """(the checkpoint, '') after restoring it into ``b``; (None, why) when it is from another run or
    version (left alone), or (None, 'malformed: ...') when it is not a checkpoint of ours. Loading
    executes nothing: ``weights_only=True`` reads tensors and plain containers only."""
    try:
        c = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = (str(e).splitlines() or [""])[0][:120]  # an empty file's error has no text
        return None, f"malformed: not a readable fbo checkpoint ({type(e).__name__}: {first})"
    if not isinstance(c, dict):
        return None, "malformed: not a mapping"
    if c.get("run_id") != cfg.run_id or c.get("fbo") != __version__:
        return None, f"from another run or fbo version (run_id {c.get('run_id')!r}, fbo {c.get('fbo')!r})"
    if c.get("code", code_key(cfg)) != code_key(cfg):
        return None, "made by another version of the algorithm's or the task's code"
    bad = [k for k, t in CHECKPOINT_KEYS.items() if not isinstance(c.get(k), t)]
    if bad or not all(isinstance(r, dict) for r in c["rows"]):
        return None, f"malformed: missing or mistyped {', '.join(bad) or 'rows'}"
    try:
        restore(b.algo, c["algo"], b.device)
        b.algo.fed.gen.set_state(c["gen"])
        torch.set_rng_state(c["torch_rng"])
        for k, v in c["ledger"].items():
            if not hasattr(b.ledger, k):
                raise KeyError(k)
            setattr(b.ledger, k, v)
    except Exception as e:  # a shape, a class, a key that does not fit this run's objects
        what = str(e).splitlines()[0][:120] if str(e) else ""
        return None, f"malformed: does not fit this run ({type(e).__name__}: {what})"
    return c, ""
