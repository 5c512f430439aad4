"""A spec's results folder (``<out>/compare/<name>``) is one spec file's: its mark ``.spec`` names the file by its
absolute path, so that two files of the same ``name:`` never share tables or ``tuned.yaml``."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..files import atomic_write


def identity(exp) -> str:
    """What makes a spec's results folder its own: the task, the algorithms and the settings by name."""
    import hashlib

    key = repr((exp.task, [(a.name, a.algo_name or a.algo) for a in exp.algorithms],
                [s.name for s in exp.settings]))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def claim_folder(exp, outdir: Path, write: bool = True) -> None:
    """Mark ``outdir`` (``<out>/compare/<name>``) as this spec file's, by its absolute path: a folder marked by
    another file (two ``spec.yaml`` of the same ``name:`` in two folders, run into one ``--out-dir``) is a
    UsageError, so two specs never share tables or ``tuned.yaml``; the same file edited keeps its folder. A mark of
    an older fbo (a relative path) is taken when the spec is the same one. With ``write`` False it only checks
    (before anything is validated, nothing is written)."""
    from ..runs.rundir import claim_root, make_dirs

    mark = outdir / ".spec"
    here = _absolute(exp.path)
    mine = f"{identity(exp)} {here or exp.path}\n"
    if mark.is_file():
        held = mark.read_text()
        ident, _, other = held.partition(" ")
        other = other.strip()
        if other and here and Path(other).is_absolute():
            same = _absolute(other) == here
        else:  # an older mark, or a spec without a file: its identity or its relative path
            same = ident == identity(exp) or bool(other and exp.path and _absolute(other) == here)
        if not same:
            raise UsageError(f"{outdir} holds the results of {other or 'another spec'}, a different spec with the "
                             f"same name '{exp.name}' (another file): give {here or exp.path or 'this spec'} its own "
                             f"'name:' (or another --out-dir)",
                             kind="bad_spec", field="name", path=outdir, value=other or None)
        if write and held != mine:
            atomic_write(mark, mine)
        return
    if write:
        claim_root(outdir.parents[1])
        make_dirs(outdir)
        atomic_write(mark, mine)


def _absolute(p) -> str:
    """A spec path as one file's absolute, resolved path ('' when there is none)."""
    try:
        return str(Path(p).resolve()) if p else ""
    except (OSError, RuntimeError, ValueError):
        return ""
