"""Which runs of a grid are still to run: not finished, or finished by code that changed since (a run's
identity and staleness: :mod:`fbo_cli.runs.identity`), and accepting a user's code change (``--accept-code-change``:
the run an edit made stale is adopted, never one another file made). Its own module because it reads run folders
(:mod:`fbo_cli.runs.rundir`), configs (:mod:`fbo_cli.runs.config`) and identities together, which import
none of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from .config import comparable, load_yaml
from .identity import accepted, stale_reason
from .rundir import CHECKPOINT, RunState, atomic_write, ended, run_lock, run_status, write_json, write_yaml


class Verdict(NamedTuple):
    """What the reuse check says of one run directory, read only (nothing is written): whether it is to run,
    why it is stale (its user algorithm's code changed since: it runs again unless the change is accepted), and
    the run of this file's code before an edit (:func:`predecessor`) that accepting the change adopts."""

    todo: bool
    stale: str | None = None
    adopt: tuple[Path, dict] | None = None


def verdict(cfg, state: RunState, rerun: bool = False) -> Verdict:
    """The reuse check of the run of ``cfg`` whose directory was read as ``state`` (:class:`RunState`): a query,
    never a write; accepting a code change is :func:`accept_change`, a step of its own."""
    if not rerun and not state.ended and state.state != "partial" and (old := predecessor(cfg)):
        return Verdict(True, stale_reason(cfg, old[1]) or f"stale: run {old[0].name} was made by other code", old)
    if rerun or not state.ended:
        return Verdict(True)
    if why := stale_reason(cfg, state.summary):
        return Verdict(True, why)
    return Verdict(False)


def accept_change(cfg, state: RunState, v: Verdict) -> RunState:
    """``--accept-code-change`` for a stale run (``v.stale``): the run of the code before an edit is adopted
    (:func:`adopt`), or the finished run's summary records the acceptance (:func:`accepted`); returns the run's
    state after it (its metrics.csv unchanged, so not read again)."""
    if v.adopt is not None:
        return RunState("finished", adopt(cfg, *v.adopt), "")
    s = accepted(cfg, state.summary)
    write_json(cfg.run_dir / "summary.json", s)
    return RunState("finished", s, "")


def todo_runs(cells: list, rerun: bool = False, accept: bool = False, stale: dict | None = None) -> list:
    """The cells (objects with ``.cfg``) still to run, one per run directory (two rows of a grid may be the same
    run): :func:`verdict` of each (``stale`` collects ``{run_dir: why}``), and with ``accept`` each stale
    run accepted (:func:`accept_change`) and kept. The old entry point; a grid's commands use
    :func:`fbo_cli.grids.plan.make_plan`, which reads each directory once and accepts as a step of its own."""
    todo, seen = [], set()
    for c in cells:
        d = c.cfg.run_dir
        if d in seen:
            continue
        seen.add(d)
        state = run_status(d)
        v = verdict(c.cfg, state, rerun)
        if v.stale and accept:
            accept_change(c.cfg, state, v)
        elif v.todo:
            todo.append(c)
            if v.stale and stale is not None:
                stale[d] = v.stale
    return todo


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


def adopt(cfg, old: Path, summary: dict) -> dict:
    """``--accept-code-change``: the run ``old`` (:func:`predecessor`) becomes ``cfg``'s, its files copied into
    ``cfg``'s run folder (under its lock) with ``cfg``'s ``config.yaml`` and the acceptance recorded in its summary
    (:func:`accepted`, and ``adopted_from``; returned); ``old`` stays, so that the code before the edit finds its
    run again."""
    new = cfg.run_dir
    with run_lock(new):
        skip = (".lock", CHECKPOINT, "summary.json", "config.yaml")
        for f in sorted(old.iterdir()):
            if f.is_file() and not f.is_symlink() and f.name not in skip:
                atomic_write(new / f.name, f.read_bytes())
        write_yaml(new / "config.yaml", cfg.as_dict())
        rec = {**accepted(cfg, summary), "run_id": new.name, "adopted_from": old.name}
        write_json(new / "summary.json", rec)
    return rec
