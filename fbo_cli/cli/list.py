"""``fbo list``: tasks, algorithms, datasets and experiment specs."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from ..errors import UsageError
from .common import user_errors, wide_console


def list_() -> None:
    """Tasks, algorithms, datasets and experiment specs."""
    from ..algorithms import REGISTRY
    from ..data import LOADERS
    from ..tasks import TASKS

    out = wide_console()
    t = Table(title="Tasks", title_justify="left")
    for c in ("task", "kind", "metric", "datasets"):
        t.add_column(c, no_wrap=c == "task", overflow="fold")
    for name, cls in TASKS.items():
        t.add_row(name, cls.kind, cls.metric, ", ".join(cls.datasets))
    out.print(t)
    t = Table(title="Algorithms", title_justify="left")
    for c in ("algorithm", "label", "tasks", "rounds / iteration", "paper"):
        t.add_column(c, no_wrap=c == "algorithm", overflow="fold")
    for name, e in REGISTRY.items():
        t.add_row(name, e.label, ", ".join(e.tasks), e.cls.rounds, e.cls.paper)
    out.print(t)
    with user_errors():
        from ..algorithms.external import entry_points, folder_algorithms
        from ..config import lookup

        mine = {**entry_points(), **folder_algorithms(Path("algorithms"))}
        if mine:
            t = Table(title="Your algorithms (./algorithms/*.py and entry points fbo.algorithms)", title_justify="left")
            for c in ("algorithm", "source", "tasks"):
                t.add_column(c, no_wrap=c == "algorithm", overflow="fold")
            for name, ref in mine.items():
                t.add_row(name, ref, ", ".join(lookup(ref)[1].tasks))
            out.print(t)
    t = Table(title="Datasets", title_justify="left")
    t.add_column("dataset", no_wrap=True)
    t.add_column("source", overflow="fold")
    for name, fn in LOADERS.items():
        t.add_row(name, (fn.__doc__ or "torchvision (data dir or download)").strip().splitlines()[0])
    out.print(t)
    specs = sorted(Path("experiments").glob("*.yaml"))
    if specs:
        from ..config import load_yaml

        t = Table(title="Experiment specs (fbo compare FILE)", title_justify="left")
        t.add_column("file", no_wrap=True)
        t.add_column("title", overflow="fold")
        for p in specs:
            try:
                d = load_yaml(p.read_bytes(), str(p)) or {}
            except (UsageError, OSError):
                d = {}
            if isinstance(d, dict) and "algorithms" in d:
                t.add_row(str(p), str(d.get("title", "")))
        out.print(t)
