"""Every setting of an algorithm on a task, described: name, default, declared bounds and meaning.

The meaning is the field's ``doc`` (``bounded(..., doc=...)``, :mod:`fbo_cli.sim.bounds`); a user's algorithm that
declares its ``HP`` with plain fields and comments gets the field's source comment instead. ``fbo show``
prints :func:`describe`; a test checks that every built-in setting has a meaning.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

BOUND_KEYS = ("ge", "gt", "lt", "le", "choices")
_SYMBOLS = {"ge": ">=", "gt": ">", "lt": "<", "le": "<="}


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any  # the default `fbo run` uses (the task's where it differs from the paper's)
    meaning: str
    bounds: dict[str, Any]  # as declared: ge, gt, lt, le, choices
    common: str = ""  # the common name (VOCABULARY) this key answers to, when it differs from the key
    note: str = ""  # where the default differs from the paper's on this task

    def bounds_text(self) -> str:
        if "choices" in self.bounds:
            return " | ".join(map(str, self.bounds["choices"]))
        return ", ".join(f"{_SYMBOLS[k]} {self.bounds[k]:g}" for k in ("ge", "gt", "lt", "le") if k in self.bounds)


@dataclass(frozen=True)
class Section:
    kind: str  # run | task | hp
    title: str
    settings: list[Setting]


@dataclass(frozen=True)
class Description:
    name: str
    label: str
    task: str
    paper: str
    rounds: str
    sections: list[Section]
    common: dict[str, str]  # the algorithm's key -> the common name it answers to


def _comments(cls: type) -> dict[str, str]:
    """``{field: its source comment}`` over a dataclass's bases (a user's algorithm without ``doc``)."""
    out: dict[str, str] = {}
    for c in reversed(cls.__mro__):
        try:
            src = inspect.getsource(c)
        except (OSError, TypeError):
            continue
        out.update({m.group(1): m.group(2).strip()
                    for m in re.finditer(r"^\s+(\w+):[^=\n]+=[^#\n]*#\s*(.*)$", src, re.M)})
    return out


def field_meanings(cls: type) -> dict[str, str]:
    """``{field: its meaning}`` of a settings dataclass: the declared ``doc``, else the source comment."""
    fs = fields(cls)
    if all(f.metadata.get("doc") for f in fs):
        return {f.name: f.metadata["doc"] for f in fs}
    notes = _comments(cls)
    return {f.name: f.metadata.get("doc") or notes.get(f.name, "") for f in fs}


def _default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


def settings_of(obj: Any, *, own: dict[str, Any] | None = None, task: str = "",
                common: dict[str, str] | None = None) -> list[Setting]:
    """The settings of a dataclass instance (its values as the defaults), ``own`` the keys whose default on
    ``task`` differs from the class's (the paper's)."""
    cls, own, common = type(obj), own or {}, common or {}
    meanings = field_meanings(cls)
    out = []
    for f in fields(obj):
        note = ""
        if f.name in own:
            note = f"(its default on {task}; the paper's: {_default(f)!r})"
        out.append(Setting(f.name, getattr(obj, f.name), meanings[f.name],
                           {k: f.metadata[k] for k in BOUND_KEYS if k in f.metadata},
                           common.get(f.name, "") if common.get(f.name) != f.name else "", note))
    return out


def describe(algo: str, task: str | None = None) -> Description:
    """Every setting ``fbo run TASK --algo ALGO`` takes, with the default it uses: the run settings, the
    task's parameters and the algorithm's hyperparameters. Raises UsageError for an unknown name."""
    from ..algorithms.base import VOCABULARY
    from .config import lookup, resolve

    name, e, source = lookup(algo)
    task = task or e.tasks[0]
    cfg = resolve(task, algo)
    own = (getattr(e.cls, "task_defaults", None) or {}).get(task, {})
    common = {v: k for k, v in (getattr(e.cls, "aliases", None) or {}).items()}
    hp_keys = {f.name for f in fields(cfg.hp)}
    for k in VOCABULARY:  # the algorithm's own key is a common name
        if k in hp_keys:
            common.setdefault(k, k)
    task_own = {k: v for k, v in own.items() if k in {f.name for f in fields(cfg.task_params)}}
    run_own = {k: v for k, v in own.items() if k in {f.name for f in fields(cfg.run)}}
    sections = [
        Section("run", "run settings (fbo run options or --set)",
                _task_noted(settings_of(cfg.run), run_own, task)),
        Section("task", f"{task} parameters (--set)", _task_noted(settings_of(cfg.task_params), task_own, task)),
        Section("hp", f"{name} hyperparameters (--set; the paper's defaults)",
                settings_of(cfg.hp, own={k: v for k, v in own.items() if k in hp_keys}, task=task, common=common)),
    ]
    return Description(name, e.label, task, e.cls.paper or source, e.cls.rounds or "?", sections, common)


def _task_noted(settings: list[Setting], own: dict[str, Any], task: str) -> list[Setting]:
    """Run settings and task parameters an algorithm sets on ``task`` say so."""
    return [Setting(s.name, s.default, s.meaning, s.bounds, s.common, f"(its default on {task})")
            if s.name in own else s for s in settings]
