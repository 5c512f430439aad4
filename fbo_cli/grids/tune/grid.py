"""The tuning runs: a spec's grids, their points and each run's configuration, and the runs still to do."""

from __future__ import annotations

import itertools
from typing import Any

from ...errors import UsageError
from ...runs.config import resolve
from ..spec import Cell, Experiment, TuneSpec, algo_overrides, setting_layer
from ..spec_types import AlgorithmEntry, SettingEntry
from .rules import CONFIRM_SEEDS, MARGIN_SEEDS


def grid_points(grid: dict[str, list]) -> list[dict[str, Any]]:
    """The cross product of a grid; a key ``"a,b"`` sets ``a`` and ``b`` to the same value."""
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        point = {}
        for k, v in zip(keys, combo):
            for part in k.split(","):
                point[part.strip()] = v
        out.append(point)
    return out


def tune_spec(exp: Experiment) -> TuneSpec:
    """The spec's tune block (parsed and validated by :func:`fbo_cli.grids.spec.load_spec`)."""
    if exp.tune is None:
        raise UsageError(f"{exp.path}: no 'tune:' block (a mapping); see `fbo tune --help`",
                         kind="bad_spec", field="tune", path=exp.path)
    return exp.tune


def next_seeds(exp: Experiment, ts: TuneSpec, n: int) -> list[int]:
    """The ``n`` seeds after the tuning seeds, skipping the evaluation seeds."""
    out, s = [], max(ts.seeds)
    while len(out) < n:
        s += 1
        if s not in exp.seeds and s not in ts.seeds:
            out.append(s)
    return out


def confirm_seeds(exp: Experiment, ts: TuneSpec) -> list[int]:
    """The seeds that confirm a choice next to a rejected value: the next ones after the tuning seeds,
    skipping the evaluation seeds."""
    return next_seeds(exp, ts, CONFIRM_SEEDS)


def margin_seeds(exp: Experiment, ts: TuneSpec) -> list[int]:
    """The seeds a margin probe runs on: every tuning seed and, where they are fewer than
    :data:`MARGIN_SEEDS`, the next seeds (the confirmation seeds first) up to that many."""
    return list(ts.seeds) + next_seeds(exp, ts, max(0, MARGIN_SEEDS - len(ts.seeds)))


def _layers(exp: Experiment, ts: TuneSpec, a: AlgorithmEntry, s: SettingEntry, point: dict, seed: int,
            overrides: dict) -> tuple:
    """The config layers of one tuning run: the spec's base, the setting's and the algorithm's keys, the
    grid point, the tune block's ``set``, the seed (and the tuning budget), the command line's overrides."""
    return (exp.base, setting_layer(exp, s, a), a.set, point, ts.extra,
            {"seed": seed, "target": None, **({"rounds": ts.rounds} if ts.rounds else {})},
            algo_overrides(exp, a, overrides))


def tune_cells(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any],
               extended: dict[tuple[str, str], list[dict]] | None = None,
               confirm: dict[tuple[str, str], list[dict]] | None = None,
               margin: dict[tuple[str, str], list[dict]] | None = None) -> list[tuple[Cell, dict]]:
    """The tuning runs: every grid point and the points ``extended`` beyond a grid's edge, per (algorithm,
    setting), on every tuning seed; the points to ``confirm`` on the confirmation seeds; and the ``margin``
    probes (:func:`fbo_cli.grids.tune.rules.margin_probe`) on the :func:`margin_seeds`."""
    settings = [s for s in exp.settings if ts.setting is None or s.name == ts.setting]
    confirming = confirm_seeds(exp, ts) if confirm else []
    probing = margin_seeds(exp, ts) if margin else []
    cells = []
    for seed in list(dict.fromkeys(list(ts.seeds) + confirming + probing)):
        for s in settings:
            for a in exp.algorithms:
                if not ts.grids[a.name]:  # nothing to choose: the spec's values stand
                    continue
                key = (a.name, s.name)
                points = ((grid_points(ts.grids[a.name]) + (extended or {}).get(key, []) if seed in ts.seeds else [])
                          + ((confirm or {}).get(key, []) if seed in confirming else [])
                          + ((margin or {}).get(key, []) if seed in probing else []))
                for point in points:
                    layers = _layers(exp, ts, a, s, point, seed, overrides)
                    try:
                        cfg = resolve(exp.task, a.algo, *layers)
                    except UsageError as e:
                        raise e.reworded(f"algorithm '{a.name}', setting '{s.name}', grid point "
                                         f"{point}: {e}") from None
                    cells.append((Cell(a.name, s.name, seed, cfg, layers), point))
    return cells


def point_error(exp: Experiment, ts: TuneSpec, overrides: dict[str, Any], key: tuple[str, str],
                point: dict) -> str | None:
    """Why a grid point of (algorithm, setting) is not a valid configuration (the checks that run before
    any data loads: declared bounds and the algorithm's ``check``), or None."""
    a = next(a for a in exp.algorithms if a.name == key[0])
    s = next(s for s in exp.settings if s.name == key[1])
    try:
        resolve(exp.task, a.algo, *_layers(exp, ts, a, s, point, ts.seeds[0], overrides))
    except UsageError as e:
        return str(e)
    return None


def tuning_plan(cells: list[tuple[Cell, dict]], rerun: bool = False, accept: bool = False):
    """The plan of the tuning runs (:func:`fbo_cli.grids.plan.make_plan`: each run directory read once), with a
    user's code change accepted where asked (``accept``: the one step that writes, a stale run kept)."""
    from ..plan import make_plan

    plan = make_plan([c for c, _ in cells], rerun)
    if accept:
        plan.accept()
    return plan


def tuning_todo(cells: list[tuple[Cell, dict]], recorded: dict[str, dict], rerun: bool = False,
                accept: bool = False, stale: dict | None = None, plan=None) -> list[Cell]:
    """The tuning runs still to run: unfinished (or stale: their user algorithm's code changed, unless
    ``accept``), and not in the recorded tuning (by run id, :func:`.record.run_key`; unless ``rerun``, or
    stale: a recorded score of code that changed since is not kept). ``plan``: the :func:`tuning_plan` of
    ``cells`` already made."""
    plan = plan or tuning_plan(cells, rerun, accept)
    stale = {} if stale is None else stale
    stale.update(plan.stale)
    todo = plan.todo
    return todo if rerun else [c for c in todo if c.cfg.run_dir.name not in recorded or c.cfg.run_dir in stale]
