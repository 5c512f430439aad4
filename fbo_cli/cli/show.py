"""``fbo show``: every setting of an algorithm on a task."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from .common import user_errors, wide_console


def _field_notes(cls: type) -> dict[str, str]:
    """``{field: its source comment}`` of a dataclass (the meaning and the paper's symbol, where written)."""
    import inspect
    import re

    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\s+(\w+):[^=\n]+=[^#\n]*#\s*(.*)$", src, re.M)}


def show(
    algo: str = typer.Argument(..., help="Algorithm name (see `fbo list`), or FILE.py:CLASS of your own."),
    task: Optional[str] = typer.Option(None, help="Task whose defaults to show. \\[default: the algorithm's first]"),
) -> None:
    """Every setting of ALGO on TASK with the default `fbo run` uses, its meaning and the paper's symbol:
    the run settings, the task's parameters and the algorithm's hyperparameters (the paper's defaults,
    and where they differ on this task, the task's), with the common names (local_steps, lower_lr, ...)
    each key answers to."""
    from dataclasses import fields

    from ..algorithms.base import VOCABULARY
    from ..config import RunSettings, lookup, resolve

    with user_errors():
        name, e, source = lookup(algo)
        task = task or e.tasks[0]
        cfg = resolve(task, algo)
    view = wide_console()
    view.print(Text.assemble((name, "bold"), f" ({e.label}) on ", (task, "bold"), f": {e.cls.paper or source}; "
                             f"rounds per outer iteration: {e.cls.rounds or '?'}"), highlight=False)
    own = (getattr(e.cls, "task_defaults", None) or {}).get(task, {})
    common = {v: k for k, v in (getattr(e.cls, "aliases", None) or {}).items()}
    for k in VOCABULARY:  # the algorithm's own key is a common name
        if k in {f.name for f in fields(cfg.hp)}:
            common.setdefault(k, k)
    for title, obj, cls in (("run settings (fbo run options or --set)", cfg.run, RunSettings),
                            (f"{task} parameters (--set)", cfg.task_params, type(cfg.task_params)),
                            (f"{name} hyperparameters (--set; the paper's defaults)", cfg.hp, type(cfg.hp))):
        notes = _field_notes(cls)
        t = Table(title=title, title_justify="left")
        t.add_column("key", no_wrap=True)
        t.add_column("default", no_wrap=True)
        t.add_column("meaning", overflow="fold")
        for f in fields(obj):
            note = notes.get(f.name, "")
            if f.name in own and obj is cfg.hp:
                note = f"(its default on {task}; the paper's: {getattr(type(obj)(), f.name)!r}) " + note
            elif f.name in own:
                note = f"(its default on {task}) " + note
            key = f.name + (f" (= {common[f.name]})" if f.name in common and common[f.name] != f.name else "")
            t.add_row(key, repr(getattr(obj, f.name)), note)
        view.print(t)
    if common:
        view.print("common names (--set NAME=value on any algorithm that has the quantity): " + "; ".join(
            f"{c} = {k}: {VOCABULARY[c]}" for k, c in common.items()), highlight=False)
