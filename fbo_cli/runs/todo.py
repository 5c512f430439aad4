"""Which runs of a grid are still to run: not finished, or finished by code that changed since (a run's
identity and staleness: :mod:`fbo_cli.runs.identity`), and accepting a user's code change (``--accept-code-change``:
the run an edit made stale is adopted, never one another file made). Its own module because it reads run folders
(:mod:`fbo_cli.runs.rundir`), configs (:mod:`fbo_cli.runs.config`) and identities together, which import
none of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import comparable, load_yaml
from .identity import accepted, stale_reason
from .rundir import CHECKPOINT, atomic_write, ended, run_lock, run_status, write_json, write_yaml


def todo_runs(cells: list, rerun: bool = False, accept: bool = False, stale: dict | None = None) -> list:
    """The cells (objects with ``.cfg``) still to run, one per run directory (two rows of a grid may be
    the same run): not finished, or finished by code that has changed since (:mod:`fbo_cli.runs.identity`;
    ``stale`` collects ``{run_dir: why}``), unless ``accept`` (the change is recorded and the run kept)."""
    todo = {}
    for c in cells:
        d = c.cfg.run_dir
        if d in todo:
            continue
        state, s, _ = run_status(d)
        if not rerun and not ended(state, s) and state != "partial" and (old := predecessor(c.cfg)):
            if accept:  # a user's edit: the run of this file's code before it is adopted
                adopt(c.cfg, *old)
                continue
            todo[d] = c
            if stale is not None:
                stale[d] = stale_reason(c.cfg, old[1]) or f"stale: run {old[0].name} was made by other code"
        elif rerun or not ended(state, s):
            todo[d] = c
        elif why := stale_reason(c.cfg, s):
            if accept:
                write_json(d / "summary.json", accepted(c.cfg, s))
            else:
                todo[d] = c
                if stale is not None:
                    stale[d] = why
    return list(todo.values())


_CONFIGS: dict[tuple[Path, int], Any] = {}


def predecessor(cfg) -> tuple[Path, dict] | None:
    """``(run folder, summary)`` of the latest finished run of a user's algorithm that this file (the same
    absolute ``algo_source``) made with other code, with everything else of ``cfg``'s identity equal: the run an
    edit made stale (its code is in the run id, :func:`code_key`), which ``--accept-code-change`` may adopt. A run
    of another file of the same name is never one."""
    if not cfg.source:
        return None
    here = cfg.run_dir
    mine = {k: v for k, v in comparable(cfg.as_dict()).items() if k != "algo_code"}
    found = []
    try:
        dirs = [d for d in here.parent.glob(f"{cfg.run.dataset}-{cfg.run.partition}-s{cfg.run.seed}-*") if d != here]
    except OSError:
        return None
    for d in dirs:
        try:
            f = d / "config.yaml"
            key = (f, f.stat().st_mtime_ns)
            if key not in _CONFIGS:  # a tuning's many points read each other's configs once
                _CONFIGS[key] = load_yaml(f.read_bytes(), str(f))
            data = _CONFIGS[key]
        except Exception:  # not a run of ours: never adopted
            continue
        if not isinstance(data, dict) or data.get("algo_source") != cfg.source:
            continue
        if {k: v for k, v in comparable(data).items() if k != "algo_code"} != mine:
            continue
        state, summary, _ = run_status(d)
        if ended(state, summary):
            found.append(((d / "summary.json").stat().st_mtime_ns, d, summary))
    if not found:
        return None
    _, d, summary = max(found, key=lambda t: t[0])
    return d, summary


def adopt(cfg, old: Path, summary: dict) -> None:
    """``--accept-code-change``: the run ``old`` (:func:`predecessor`) becomes ``cfg``'s, its files copied into
    ``cfg``'s run folder (under its lock) with ``cfg``'s ``config.yaml`` and the acceptance recorded in its summary
    (:func:`accepted`, and ``adopted_from``); ``old`` stays, so that the code before the edit finds its run again."""
    new = cfg.run_dir
    with run_lock(new):
        skip = (".lock", CHECKPOINT, "summary.json", "config.yaml")
        for f in sorted(old.iterdir()):
            if f.is_file() and not f.is_symlink() and f.name not in skip:
                atomic_write(new / f.name, f.read_bytes())
        write_yaml(new / "config.yaml", cfg.as_dict())
        write_json(new / "summary.json", {**accepted(cfg, summary), "run_id": new.name, "adopted_from": old.name})
