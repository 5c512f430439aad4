"""The spec's tuning side: the ``tune:`` block (:func:`parse_tune`), what ``fbo tune`` chose
(``tuned.yaml``: :func:`load_tuned`, read as :class:`~fbo_cli.spec_types.Tuned`) and the seeds
``compare --until-settled`` added (``settled.yaml``). Part of the one spec validator,
:func:`fbo_cli.spec.load_spec`, which re-exports these names."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import load_config_file
from .errors import UsageError
from .spec_types import Choice, Tuned, TuneSpec
from .tasks import TASKS

if TYPE_CHECKING:
    from .spec import Experiment


MAX_SEEDS = 1000  # seeds of one spec (evaluation or tuning)
MAX_CELLS = 20_000  # runs of one grid (algorithms x settings x seeds, or a tuning grid's points x seeds)

TUNE_KEYS = {"seeds", "rounds", "score", "mode", "setting", "tail", "tolerance", "set"}


def parse_tune(spec: dict, exp: Experiment, where: str) -> TuneSpec:
    t = spec.get("tune")
    if not isinstance(t, dict):
        raise UsageError(f"{where}: no 'tune:' block (a mapping); see `fbo tune --help`")
    unknown = set(t) - TUNE_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) in tune: {', '.join(sorted(unknown))}; "
                         f"allowed: {', '.join(sorted(TUNE_KEYS))}")
    seeds = t.get("seeds", [100])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and 0 <= s < 2**32 for s in seeds):
        raise UsageError(f"{where}: tune.seeds must be a non-empty list of integers in [0, 2^32)")
    if len(seeds) > MAX_SEEDS:
        raise UsageError(f"{where}: {len(seeds):,} tuning seeds; fbo takes at most {MAX_SEEDS:,}")
    clash = set(seeds) & set(exp.seeds)
    if clash:
        raise UsageError(f"{where}: tuning seeds {sorted(clash)} are also evaluation seeds; use disjoint seeds")
    default_score, default_mode = TASKS[exp.task].tune_metric
    score, mode = t.get("score", default_score), t.get("mode", default_mode)
    if score is not None and not isinstance(score, str):
        raise UsageError(f"{where}: tune.score must be the name of a validation metric, got {score!r}")
    if not score:
        raise UsageError(f"{where}: task '{exp.task}' has no default validation score; set tune.score")
    if score.startswith("test"):
        raise UsageError(f"{where}: tune.score '{score}' is a test-set metric; tune on validation data")
    if mode not in ("min", "max"):
        raise UsageError(f"{where}: tune.mode must be min or max, got '{mode}'")
    rounds = t.get("rounds", 40)
    tail, tol = t.get("tail", 0.25), t.get("tolerance", 0.05)
    if tol is False or tol == "off":  # no oscillation check (YAML reads a bare off as False)
        tol = math.inf
    if rounds == "budget":  # each setting at its own evaluation budget (settings with different budgets)
        rounds = None
    elif not isinstance(rounds, int) or rounds < 1:
        raise UsageError(f"{where}: tune.rounds must be an integer >= 1 or 'budget', got {rounds!r}")
    if not (isinstance(tail, (int, float)) and 0 < tail <= 1):
        raise UsageError(f"{where}: tune.tail must be in (0, 1], got {tail!r}")
    if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and tol >= 0) or math.isnan(tol):
        raise UsageError(f"{where}: tune.tolerance must be a number >= 0 or off, got {tol!r}")
    setting = t.get("setting")
    names = [s.name for s in exp.settings]
    if setting is not None and setting not in names:
        raise UsageError(f"{where}: tune.setting '{setting}' is not a setting; choose one of: {', '.join(names)}")
    extra = t.get("set") or {}
    if not isinstance(extra, dict):
        raise UsageError(f"{where}: tune.set must be a mapping")
    frac = extra.get("heldout_frac")
    if score.startswith("heldout") and not (isinstance(frac, (int, float)) and not isinstance(frac, bool) and frac > 0):
        raise UsageError(f"{where}: tune.score '{score}' is the held-out split's: set its share in tune.set, e.g. "
                         f"{{heldout_frac: 0.1}} (the rows neither level trains on)")
    grids = {}
    for a in exp.algorithms:
        g = a.tune
        if not isinstance(g, dict) or not all(isinstance(v, list) and v for v in g.values()):
            raise UsageError(f"{where}: algorithm '{a.name}': tune must map keys to non-empty lists of values")
        points = math.prod(len(v) for v in g.values())
        if points * len(seeds) > MAX_CELLS:
            raise UsageError(f"{where}: algorithm '{a.name}': its tuning grid has {points:,} points x "
                             f"{len(seeds)} seeds; fbo takes at most {MAX_CELLS:,} runs per grid")
        grids[a.name] = g
    if not any(grids.values()):
        raise UsageError(f"{where}: no algorithm declares a 'tune:' grid")
    return TuneSpec(seeds, rounds, score, mode, setting, float(tail), float(tol), extra, grids)



def settled_path(exp: Experiment) -> Path:
    return exp.out_root / "compare" / exp.name / "settled.yaml"


def load_settled(p: Path) -> dict | None:
    """A ``settled.yaml`` (written by ``compare --until-settled``, :mod:`fbo_cli.settle`), checked: ``added``
    is a list of ``{setting, algorithms, seeds}``."""
    if not p.is_file():
        return None
    d = load_config_file(p)
    added = d.get("added")
    ok = isinstance(added, list) and all(
        isinstance(e, dict) and isinstance(e.get("setting"), str) and isinstance(e.get("algorithms"), list)
        and isinstance(e.get("seeds"), list) and all(isinstance(k, int) and 0 <= k < 2**32 for k in e["seeds"])
        for e in added)
    if not ok:
        raise UsageError(f"{p}: 'added' must be a list of {{setting, algorithms, seeds}}; run "
                         f"`fbo compare --until-settled` again to rewrite it (or delete the file)")
    return d


def load_tuned(exp: Experiment) -> Tuned | None:
    """The ``tuned.yaml`` beside the experiment's results, if any."""
    p = exp.out_root / "compare" / exp.name / "tuned.yaml"
    if not p.is_file():
        return None
    t = load_config_file(p)
    chosen = t.get("chosen") or {}
    ok = isinstance(chosen, dict) and all(
        isinstance(per, dict) and all(isinstance(v, dict) for v in per.values()) for per in chosen.values())
    if not ok:
        raise UsageError(f"{p}: 'chosen' must map algorithm -> setting -> {{key: value}}, got {chosen!r:.120}; "
                         f"run `fbo tune` again to rewrite it (or delete the file)")
    tuned_grids = lambda g: {a: v for a, v in (g or {}).items() if v}  # noqa: E731  (rows with a grid only)
    if exp.tune is not None and "grids" in t and tuned_grids(t["grids"]) != tuned_grids(exp.tune.grids):
        raise UsageError(f"{p} was chosen on another tuning grid than {exp.path or 'the spec'} now declares (was "
                         f"{tuned_grids(t['grids'])!r:.150}); an edited spec is tuned again: `fbo tune {exp.path}` "
                         f"(it replaces the file), or delete the file to run the spec's own values")
    tuned = Tuned.of(t)
    for algo, per in tuned.chosen.items():
        for setting, choice in per.items():
            for k, v in choice.values.items():
                if not isinstance(v, (int, float, str, bool)):
                    raise UsageError(f"{p}: chosen value {algo} / {setting} / {k} must be a number or a word, "
                                     f"got {v!r}")
    return tuned


def tuned_entry(tuned: Tuned | dict | None, algorithm: str, setting: str) -> Choice:
    """The choice of one (algorithm, setting) in a ``tuned.yaml``: the setting's own, or the one tuned
    setting's; its values and its notes (empty when there is none)."""
    return Tuned.of(tuned).entry(algorithm, setting) if tuned else Choice()


def edge_note(entry: Choice | dict[str, Any]) -> str:
    """How a chosen value relates to its grid's edge, in words ('' when interior)."""
    return Choice.of(entry).edge_note()


def tuned_layer(tuned: Tuned | dict | None, algorithm: str, setting: str) -> dict[str, Any]:
    """The chosen values of one (algorithm, setting), notes left out: a config layer."""
    return dict(tuned_entry(tuned, algorithm, setting).values)
