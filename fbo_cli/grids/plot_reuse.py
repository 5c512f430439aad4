"""Figures reused between reports: a figure whose inputs did not change is not drawn again.

``fbo report`` writes its figures into a fresh folder and then replaces the old one. While it runs,
:func:`reuse` is active: a figure is keyed by a content hash of everything it is drawn from (the
experiment as loaded, its runs and curves, the plotting code's source, the output's name and formats);
when the previous report's folder holds the files of the same key (``reuse.json`` in it), they are
linked into the new folder instead of being drawn. Outside a report (``fbo compare``, ``fbo figure``)
every figure is drawn.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

MANIFEST = "reuse.json"
# the code a figure depends on: a change to any of them redraws every figure
CODE = ("grids/plots.py", "grids/plot_reuse.py", "evidence/paper_figures.py",
        "evidence/report/figures.py", "evidence/report/zohfl_section.py")

_active: Reuse | None = None


def digest(*parts: Any, memo: dict | None = None) -> str:
    """A content hash of ``parts``: data frames by their values and index, mappings by their sorted items,
    files (existing paths) by their bytes, anything else by its ``repr``. ``memo``: the digests of the frames
    and mappings hashed before (by identity; they must not change in between), so that each is hashed once."""
    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if memo is not None and isinstance(x, pd.DataFrame | pd.Series | dict):
            if id(x) not in memo:
                memo[id(x)] = (x, digest(x))  # the object kept, so that its id is not reused
            h.update(memo[id(x)][1].encode())
        elif isinstance(x, pd.DataFrame | pd.Series):
            h.update(repr(list(x.columns) if isinstance(x, pd.DataFrame) else x.name).encode())
            h.update(pd.util.hash_pandas_object(x, index=True).to_numpy().tobytes())
        elif isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=repr):
                feed(k)
                feed(x[k])
            h.update(b"}")
        elif isinstance(x, list | tuple):
            h.update(b"[")
            for v in x:
                feed(v)
            h.update(b"]")
        elif isinstance(x, Path) and x.is_file():
            h.update(x.read_bytes())
        else:
            h.update(repr(x).encode())
        h.update(b"\0")

    for p in parts:
        feed(p)
    return h.hexdigest()


def code_digest() -> str:
    root = Path(__file__).resolve().parent.parent
    import matplotlib

    return digest(matplotlib.__version__, *[root / c for c in CODE])


class Reuse:
    """The figures of the report being written (``new``) and those of the previous one (``old``)."""

    def __init__(self, old: Path, new: Path, root: Path | None = None):
        self.old, self.new = Path(old), Path(new)
        try:
            manifest = json.loads((self.old / MANIFEST).read_text())
        except (OSError, ValueError):
            manifest = {}
        self.before: dict[str, dict] = manifest.get("figures", {})
        self.now: dict[str, dict] = {}
        self.code = code_digest()
        stats = _stats(root) if root is not None else []
        self.evidence = digest(self.code, stats) if stats else ""
        self.unchanged = bool(self.evidence) and manifest.get("evidence") == self.evidence
        self.reused = self.drawn = self.depth = 0
        self.memo: dict[int, tuple] = {}  # the evidence's frames and curves are hashed once per report
        self.drawn_s = 0.0

    def __call__(self, path: Path, inputs: tuple, produce: Callable[[], Any]) -> Any:
        if self.depth:  # drawn inside a figure being drawn: that figure's record holds it
            return produce()
        path = Path(path)
        key = digest(self.code, path.name, inputs, memo=self.memo)
        hit = self.before.get(key)
        if hit and path.parent.resolve() == self.new.resolve() and all((self.old / f).is_file() for f in hit["files"]):
            for f in hit["files"]:
                _link(self.old / f, path.parent / f)
            self.now[key] = hit
            self.reused += 1
            return hit["result"]
        t = time.perf_counter()
        self.depth += 1
        try:
            result = produce()
        finally:
            self.depth -= 1
        seconds = time.perf_counter() - t
        self.drawn, self.drawn_s = self.drawn + 1, self.drawn_s + seconds
        files = sorted(p.name for p in path.parent.glob(glob.escape(path.stem) + ".*"))
        with contextlib.suppress(TypeError, ValueError):  # a result JSON cannot hold is drawn every time
            json.dumps(result)
            self.now[key] = {"files": files, "result": result, "seconds": round(seconds, 2)}
        return result

    def save(self) -> None:
        from ..files import atomic_write

        atomic_write(self.new / MANIFEST, json.dumps({"evidence": self.evidence, "figures": self.now}, indent=0,
                                                     sort_keys=True))

    def estimate(self) -> tuple[int, float]:
        """(figures of the previous report, the seconds it may take to redraw them): none when neither the
        evidence (its files' names, sizes and times) nor the plotting code changed since that report."""
        return len(self.before), 0.0 if self.unchanged else sum(float(v.get("seconds", 0))
                                                                for v in self.before.values())


STATS_DEPTH, STATS_MAX = 4, 100_000  # a results root's files lie at most 4 deep (task/algo/run/file)


def _stats(root: Path) -> list[tuple[str, int, int]]:
    """(path, size, modification time) of every file under ``root`` down to the depth of a run's files, links
    neither followed nor stat'ed through: whether the evidence may have changed. Empty (unknown: every figure
    counts as maybe changed) when ``root`` holds more than a results root would (``--from /``)."""
    out = []
    top = len(Path(root).parts)
    for d, dirs, files in os.walk(root):
        if len(Path(d).parts) - top >= STATS_DEPTH:
            dirs[:] = []
        for f in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(d, f))
                out.append((os.path.join(d, f), st.st_size, st.st_mtime_ns))
        if len(out) > STATS_MAX:
            return []
    return sorted(out)


def _link(src: Path, dst: Path) -> None:
    from ..files import check_target

    check_target(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@contextlib.contextmanager
def reusing(old: Path, new: Path, root: Path | None = None):
    """Reuse the figures of ``old`` while a report of the evidence under ``root`` writes ``new`` (the manifest
    is written at the end)."""
    global _active
    prev, _active = _active, Reuse(old, new, root)
    try:
        yield _active
        _active.save()
    finally:
        _active = prev


def reuse(path: Path, inputs: tuple, produce: Callable[[], Any]) -> Any:
    """``produce()`` (which draws ``path`` and the files beside it with its stem) unless a report is running
    and its previous figures hold the same ``inputs``' files: then those, and ``produce``'s recorded result."""
    return produce() if _active is None else _active(path, inputs, produce)
