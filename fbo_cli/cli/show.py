"""``fbo show``: every setting of an algorithm on a task (collected by :mod:`fbo_cli.runs.describe`)."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from .common import out, user_errors


def show(
    algo: str = typer.Argument(..., help="Algorithm name (see `fbo list`), or FILE.py:CLASS of your own."),
    task: Optional[str] = typer.Option(None, help="Task whose defaults to show. \\[default: the algorithm's first]"),
) -> None:
    """Every setting of ALGO on TASK with the default `fbo run` uses, its meaning and the paper's symbol:
    the run settings, the task's parameters and the algorithm's hyperparameters (the paper's defaults,
    and where they differ on this task, the task's), with the common names (local_steps, lower_lr, ...)
    each key answers to."""
    from ..algorithms.base import VOCABULARY
    from ..grids.run_batches import seeds_line, state_refusal
    from ..runs.config import lookup
    from ..runs.describe import describe

    with user_errors():
        d = describe(algo, task)
        _, entry, source = lookup(algo)
    view = out  # a terminal: tables that fit it; a pipe: the plain listing below
    view.print(Text.assemble((d.name, "bold"), f" ({d.label}) on ", (d.task, "bold"),
                             f": {credit(entry.cls) if source else d.paper}; "
                             f"rounds per outer iteration: {d.rounds}"), highlight=False)
    if source and (why := state_refusal(entry.cls)):
        view.print(f"run batches: its runs run alone, never in a batch: {why}", highlight=False)
    else:
        view.print(seeds_line(entry.cls), highlight=False)
    for sec in d.sections:
        if not view.is_terminal:  # a pipe or a file: a plain listing, no line past 80 columns but a long name's
            _listing(view, sec)
            continue
        t = Table(title=sec.title, title_justify="left")
        for c, kw in (("key", {"no_wrap": True}), ("default", {"no_wrap": True}), ("bounds", {}),
                      ("meaning", {"overflow": "fold"})):
            t.add_column(c, **kw)
        for st in sec.settings:
            t.add_row(st.name + (f" (= {st.common})" if st.common else ""), repr(st.default), st.bounds_text(),
                      " ".join(x for x in (st.note, st.meaning) if x))
        view.print(t)
    aliases = {k: c for k, c in d.common.items() if k != c}  # "lower_lr = lower_lr" says nothing
    if aliases:
        view.print("common names (--set NAME=value on any algorithm that has the quantity): " + "; ".join(
            f"{c} = {k}: {VOCABULARY[c]}" for k, c in aliases.items()), highlight=False)


def _listing(view, sec) -> None:
    """One section as a plain listing (``fbo show ... | less``): its title, then per key ``key = default
    (bounds)`` and its meaning wrapped at 80 columns beneath, instead of a table hundreds of columns wide."""
    import textwrap

    lines = ["", sec.title]
    for st in sec.settings:
        bounds = st.bounds_text()
        lines.append(f"  {st.name}" + (f" (= {st.common})" if st.common else "") + f" = {st.default!r}"
                     + (f"  [{bounds}]" if bounds else ""))
        meaning = " ".join(x for x in (st.note, st.meaning) if x)
        lines += textwrap.wrap(meaning, 80, initial_indent="      ", subsequent_indent="      ")
    view.file.write("\n".join(lines) + "\n")


def credit(cls: type) -> str:
    """What a user's class is credited with: its own ``paper``, else the first line of its own docstring, else
    "your algorithm (subclass of FedNest)" (never the paper of the built-in class it derives from)."""
    own = cls.__dict__.get("paper") or (cls.__dict__.get("__doc__") or "").strip().split("\n")[0].strip()
    if own:
        return own
    parent = next((c for c in cls.__mro__[1:] if c.__module__.startswith("fbo_cli")), None)
    return f"your algorithm (subclass of {parent.__name__})" if parent else "your algorithm"
