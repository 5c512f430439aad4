"""``fbo list``: tasks, algorithms, datasets and experiment specs."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..errors import UsageError
from .common import out, print_table, user_errors


def list_() -> None:
    """Tasks, algorithms, datasets and experiment specs."""
    from ..algorithms import REGISTRY
    from ..data import LOADERS
    from ..tasks import TASKS

    t = Table(title="Tasks", title_justify="left")
    for c in ("task", "kind", "metric", "datasets"):
        t.add_column(c, no_wrap=c == "task", overflow="fold")
    for name, cls in TASKS.items():
        t.add_row(name, cls.kind, cls.metric, ", ".join(cls.datasets))
    print_table(t)
    t = Table(title="Algorithms", title_justify="left")
    for c in ("algorithm", "label", "tasks", "rounds / iteration", "paper"):
        t.add_column(c, no_wrap=c == "algorithm", overflow="fold")
    for name, e in REGISTRY.items():
        t.add_row(name, e.label, ", ".join(e.tasks), e.cls.rounds, e.cls.paper)
    print_table(t)
    with user_errors():
        from ..algorithms.external import entry_point_problem, entry_points, folder_algorithms

        rows = []  # ./algorithms/*.py read from their source, never run; entry points loaded, a broken one named
        classes, broken = folder_algorithms(Path("algorithms"))
        for c in classes:
            twins = [d["ref"] for d in classes if d is not c and set(d["names"]) & set(c["names"])]
            tasks = c["tasks"]
            tasks = ", ".join(map(str, tasks)) if isinstance(tasks, (tuple, list)) else f"those of {c['bases'][0]}"
            rows.append((c["names"][0], c["ref"] + (f" (error: {twins[0]} has the same name)" if twins else ""), tasks))
        rows += [(Path(f).name, f"broken: {why}", "") for f, why in broken.items()]
        for name, ref in entry_points().items():  # named, never imported (an import may hang or exit)
            why = entry_point_problem(ref)
            rows.append((name, f"broken: {why}" if why else ref, "" if why else "read when used"))
        if rows:
            t = Table(title="Your algorithms (./algorithms/*.py, read without running them, and entry points "
                      "fbo.algorithms, named without importing them)", title_justify="left")
            for c in ("algorithm", "source", "tasks"):
                t.add_column(c, no_wrap=c == "algorithm", overflow="fold")
            for row in rows:
                t.add_row(*map(escape, row))
            print_table(t)
    t = Table(title="Datasets", title_justify="left")
    t.add_column("dataset", no_wrap=True)
    t.add_column("source", overflow="fold")
    for name, fn in LOADERS.items():
        t.add_row(name, " ".join((fn.__doc__ or "torchvision (data dir or download)").strip().split("\n\n")[0].split()))
    print_table(t)
    specs = sorted(Path("experiments").glob("*.yaml"))
    if not specs:
        out.print(f"Experiment specs: none in {Path('experiments').absolute()} (fbo list looks in ./experiments; "
                  "fbo compare takes a spec file from anywhere, the papers' are in the checkout's experiments/)",
                  highlight=False)
    else:
        from ..runs.config import load_yaml

        t = Table(title=f"Experiment specs in {Path('experiments').absolute()} (fbo compare FILE)",
                  title_justify="left")
        t.add_column("file", no_wrap=True)
        t.add_column("title", overflow="fold")
        for p in specs:
            try:
                d = load_yaml(p.read_bytes(), str(p)) or {}
            except (UsageError, OSError):
                d = {}
            if isinstance(d, dict) and "algorithms" in d:
                t.add_row(str(p), str(d.get("title", "")))
        print_table(t)
