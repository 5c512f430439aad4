"""The experiment spec, typed: what ``fbo compare``, ``fbo tune`` and ``fbo report`` read.

A spec file (YAML) names a paper's experiment: the task, the algorithms (display name, registry key,
fixed values, a tuning grid), the settings, the seeds, the paper's numbers (``reference`` and what
they were measured on, ``reference_on``), the paper's claims, derived tables and the tuning block.
:func:`load_spec` validates all of it before anything runs (unknown keys, names, the claims' and
the reference's shape, each cell's resolved config) with errors that name the file, the key and the
allowed values, and resolves the cells. This module is the only one that reads a spec's YAML, and the records
beside its results (``tuned.yaml``: what ``fbo tune`` chose; ``settled.yaml``: seeds a settling added), which
:mod:`fbo_cli.grids.spec_records` checks. ``compare`` runs and aggregates,
``tune`` tunes, ``report`` renders: each imports this module, none imports another of them.
Its parts are typed (:mod:`fbo_cli.grids.spec_types`: rows, claims, the witness, the tune block, the tuned
choices); the checks that need no file are in :mod:`fbo_cli.grids.spec_checks`.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..runs.config import RunConfig, check_path, load_config_file, resolve
from ..runs.table import X_AXES
from ..tasks import TASKS
from .spec_checks import (  # noqa: F401  (parse_tune, MAX_*: spec's API)
    DERIVED,
    MAX_CELLS,
    MAX_SEEDS,
    check_attribution,
    check_claims,
    check_reference,
    check_reference_on,
    check_witness,
    nonneg_number,
    parse_tune,
    procedure_changes,
    tuning_procedure,
)
from .spec_folder import claim_folder, identity  # noqa: F401  (spec's API)
from .spec_records import (  # noqa: F401  (spec's API: the records beside its results)
    OLD_RECORD,
    check_settled,
    check_tuned,
    edge_note,
    tuned_entry,
    tuned_layer,
)
from .spec_types import AlgorithmEntry, Attribution, Choice, Claim, SettingEntry, Tuned, TuneSpec, Witness  # noqa: F401

BANDS = {"minmax": "min to max over those seeds", "std": "mean ± one standard deviation over those seeds",
         "ci95": "95% confidence interval of the mean over those seeds (t distribution)"}

@dataclass
class Cell:
    algorithm: str  # display name from the spec
    setting: str
    seed: int
    cfg: RunConfig
    layers: tuple[dict[str, Any], ...]


@dataclass
class Experiment:
    name: str
    title: str
    task: str
    metric: str
    metrics: list[str]
    target: float | None
    x: str
    seeds: list[int]
    algorithms: list[AlgorithmEntry]
    settings: list[SettingEntry]
    reference: dict[str, dict[str, dict[str, Any]]]
    reference_on: dict[str, Any] = field(default_factory=dict)  # what ``reference`` was measured on
    description: str = ""  # what the experiment is, in the spec's words (shown in the report)
    band: str = "minmax"  # the plots' shaded band: minmax | std | ci95
    path: str = ""  # the spec file
    cells: list[Cell] = field(default_factory=list)
    out_root: Path = Path("results")
    base: dict[str, Any] = field(default_factory=dict)
    tuned: Tuned | None = None  # the tuned.yaml of ``fbo tune``, when present
    procedure: dict[str, Any] = field(default_factory=dict)  # what a tuning of this spec does (tuned.yaml's made_by)
    x_also: list[str] = field(default_factory=list)  # more x axes: one more curves_<x>.png each
    claims: list[Claim] = field(default_factory=list)  # the paper's claims, checked by the report
    derived: list[str] = field(default_factory=list)  # derived tables (DERIVED)
    tolerance: float = 0.02  # how far ours may sit from a paper's fraction and still be "within"
    paper: str | None = None  # the paper whose part of the report shows this experiment (None: not in the report)
    order: int = 100  # its place among that paper's experiments (ascending)
    tune: TuneSpec | None = None  # the tune block, parsed (None: the spec has none)
    incomplete: int = 0  # cells failed or not run at the last report
    outcomes: dict[Path, dict] = field(default_factory=dict)  # run_dir -> what run_cells returned this time
    states: dict[Path, Any] = field(default_factory=dict)  # run_dir -> its RunState as this command read it
    settled: dict | None = None  # settled.yaml: the seeds `compare --until-settled` added
    witness: Witness | None = None  # the paper's own code beside a row (its settings: {setting: witness's})
    attribution: Attribution | None = None  # the share of each row's gap to the paper that one change explains
    overrides: dict[str, Any] = field(default_factory=dict)  # the command line's --set keys
    seeds_given: bool = False  # --seeds replaced the spec's seeds
    ignored: dict[str, list[str]] = field(default_factory=dict)  # --set key -> the algorithms without it
    setting_ignored: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # setting -> the same

    def __post_init__(self):  # rows given as mappings (tests, older callers) become typed
        self.algorithms = [AlgorithmEntry.of(a) for a in self.algorithms]
        self.settings = [SettingEntry.of(s) for s in self.settings]
        self.claims = [Claim.of(c) for c in self.claims]


def _need(d: dict, key: str, kind, where: str):
    if key not in d:
        raise UsageError(f"{where}: missing required key '{key}'", kind="bad_spec", field=key, path=where)
    if not isinstance(d[key], kind):
        raise UsageError(f"{where}: '{key}' must be a {kind.__name__ if isinstance(kind, type) else 'list'}",
                         kind="bad_spec", field=key, path=where, value=d[key])
    return d[key]


def report_index(folder: str | Path = "experiments") -> list[tuple[str, str, int]]:
    """(spec path, paper, order) of every spec under ``folder`` that names its ``paper:``, ordered by paper
    and ``order``: the report's experiments, and the reproduction's (:func:`fbo_cli.evidence.report.papers.
    reproduction_specs`). Reads only those two keys (the specs are loaded whole when the report builds their
    sections), once while the files stay as they are."""
    files = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in sorted(Path(folder).glob("*.yaml")))
    return list(_index(files))


@functools.lru_cache(maxsize=8)
def _index(files: tuple[tuple[str, int, int], ...]) -> tuple[tuple[str, str, int], ...]:
    out = []
    for f, _, _ in files:
        spec = load_config_file(f)
        paper, order = spec.get("paper"), spec.get("order", 100)
        if paper is None:
            continue
        if not isinstance(paper, str) or not isinstance(order, int) or isinstance(order, bool):
            raise UsageError(f"{f}: 'paper' must be a paper's key (a string) and 'order' an integer, "
                             f"got {paper!r}, {order!r}", kind="bad_spec", field="paper", path=f, value=paper)
        out.append((f, paper, order))
    return tuple(sorted(out, key=lambda t: (t[1], t[2], t[0])))


def has_tuning(path: str | Path) -> bool:
    """Whether a spec has tuning grids (an algorithm with ``tune:``), read without resolving its cells."""
    return any(isinstance(a, dict) and a.get("tune") for a in load_config_file(path).get("algorithms") or [])


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None, seeds: list[int] | None = None,
              use_tuned: bool = True, settled: dict | None = None) -> Experiment:
    """The experiment of a spec file, its cells resolved (and validated). With ``use_tuned``, the values
    chosen by ``fbo tune`` (``<out>/compare/<name>/tuned.yaml``) override the spec's for the keys they
    name. The seeds ``compare --until-settled`` added (``settled.yaml`` there, or ``settled``) join the
    spec's, unless ``seeds`` replaces them."""
    spec = load_config_file(path)
    where = str(path)
    known = {"name", "title", "task", "metric", "metrics", "target", "x", "seeds", "base", "algorithms", "settings",
             "reference", "reference_on", "description", "tune", "claims", "tolerance", "x_also", "derived", "band",
             "paper", "order", "witness", "attribution"}
    unknown = set(spec) - known
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(known))}",
                         kind="unknown", field="key", path=where, value=sorted(unknown)[0])
    task = _need(spec, "task", str, where)
    if task not in TASKS:
        raise UsageError(f"{where}: unknown task '{task}'; choose one of: {', '.join(TASKS)}",
                         kind="unknown", field="task", path=where, value=task)
    algos = _need(spec, "algorithms", list, where)
    if not algos:
        raise UsageError(f"{where}: 'algorithms' is empty: list at least one algorithm",
                         kind="bad_spec", field="algorithms", path=where)
    settings = spec.get("settings", [{"name": "default", "set": {}}])
    if not isinstance(settings, list):
        raise UsageError(f"{where}: 'settings' must be a list", kind="bad_spec", field="settings", path=where)
    if not settings:
        raise UsageError(f"{where}: 'settings' is empty: leave the key out for one default setting, or list some",
                         kind="bad_spec", field="settings", path=where)
    metric = spec.get("metric") or TASKS[task].metric
    metrics = spec.get("metrics") or []
    if not isinstance(metric, str) or not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise UsageError(f"{where}: 'metric' must be a name and 'metrics' a list of names",
                         kind="bad_spec", field="metric", path=where)
    target = spec.get("target")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                               or not math.isfinite(target)):
        raise UsageError(f"{where}: 'target' must be a finite number, got {target!r}",
                         kind="bad_spec", field="target", path=where, value=target)
    base = spec.get("base") or {}
    if not isinstance(base, dict):
        raise UsageError(f"{where}: 'base' must be a mapping", kind="bad_spec", field="base", path=where)
    x = spec.get("x", "rounds")
    x_also = spec.get("x_also") or []
    if not isinstance(x_also, list):
        raise UsageError(f"{where}: 'x_also' must be a list of x axes, e.g. [samples], got {x_also!r}",
                         kind="bad_spec", field="x_also", path=where, value=x_also)
    for xa in [x, *x_also]:
        if xa not in X_AXES:
            raise UsageError(f"{where}: x and x_also must be among {', '.join(X_AXES)}, got '{xa}'",
                             kind="bad_spec", field="x", path=where, value=xa)
    seed_list = seeds if seeds is not None else spec.get("seeds", [0])
    if not isinstance(seed_list, list) or not all(isinstance(s, int) for s in seed_list) or not seed_list:
        raise UsageError(f"{where}: 'seeds' must be a non-empty list of integers",
                         kind="bad_spec", field="seeds", path=where)
    if len(seed_list) > MAX_SEEDS:
        raise UsageError(f"{where}: {len(seed_list):,} seeds; fbo takes at most {MAX_SEEDS:,} per spec",
                         kind="bad_spec", field="seeds", path=where, value=len(seed_list))
    if any(s < 0 or s >= 2**32 for s in seed_list) or len(set(seed_list)) != len(seed_list):
        raise UsageError(f"{where}: seeds must be distinct integers in [0, 2^32), got {seed_list[:20]}"
                         + ("..." if len(seed_list) > 20 else ""), kind="bad_spec", field="seeds", path=where)
    exp = Experiment(
        name=check_name(spec["name"] if "name" in spec else Path(path).stem, f"{where}: 'name'", where),
        title=str(spec.get("title", "")), task=task,
        metric=metric, metrics=list(metrics), target=target, x=x, seeds=seed_list, algorithms=[],
        settings=[], reference=spec.get("reference") or {}, base=base, x_also=list(x_also),
        reference_on=check_reference_on(where, spec.get("reference_on")),
        description=" ".join(str(spec.get("description") or "").split()), path=str(path),
        band=spec.get("band", "minmax"), paper=spec.get("paper"), order=spec.get("order", 100))
    n = len(algos) * len(settings) * len(exp.seeds)
    if n > MAX_CELLS:
        raise UsageError(f"{where}: {len(algos)} algorithms x {len(settings)} settings x {len(exp.seeds)} "
                         f"seeds = {n:,} runs; fbo takes at most {MAX_CELLS:,} per spec",
                         kind="bad_spec", field="runs", path=where, value=n)
    if exp.paper is not None and not isinstance(exp.paper, str):
        raise UsageError(f"{where}: 'paper' must be a paper's key (a string), got {exp.paper!r}",
                         kind="bad_spec", field="paper", path=where, value=exp.paper)
    if not isinstance(exp.order, int) or isinstance(exp.order, bool):
        raise UsageError(f"{where}: 'order' must be an integer, got {exp.order!r}",
                         kind="bad_spec", field="order", path=where, value=exp.order)
    if not isinstance(exp.band, str) or exp.band not in BANDS:
        raise UsageError(f"{where}: 'band' must be one of {', '.join(BANDS)}, got {exp.band!r}",
                         kind="bad_spec", field="band", path=where, value=exp.band)
    overrides = overrides or {}
    if "algo" in overrides or "task" in overrides:
        raise UsageError("'algo' and 'task' cannot be set with --set in compare: they come from the spec's "
                         "'algorithms' list and 'task'",
                         kind="bad_value", field="algo" if "algo" in overrides else "task", value="--set")
    _check_entries(where, algos, {"algo", "name", "set", "tune"}, "algorithm", "algo")
    _user_algorithms(where, algos, Path(path).parent)
    _check_entries(where, settings, {"name", "set"}, "setting", "name")
    exp.algorithms = algos = [AlgorithmEntry.of(a) for a in algos]
    exp.settings = settings = [SettingEntry.of(s) for s in settings]
    check_reference(where, exp.reference, algos, settings)
    check_claims(where, spec.get("claims"), algos, settings)
    derived = spec.get("derived") or []
    if not isinstance(derived, list) or set(derived) - set(DERIVED):
        raise UsageError(f"{where}: 'derived' must be a list among: {', '.join(DERIVED)}",
                         kind="bad_spec", field="derived", path=where, value=derived)
    exp.out_root = Path(str(overrides.get("out_dir") or base.get("out_dir") or "results"))
    check_path("out_dir", exp.out_root)
    exp.claims = [Claim.of(c) for c in spec.get("claims") or []]
    exp.witness = check_witness(where, spec.get("witness"), algos, settings)
    exp.attribution = check_attribution(where, spec.get("attribution"), algos)
    exp.derived = list(derived)
    exp.tolerance = nonneg_number(spec.get("tolerance", 0.02), f"{where}: 'tolerance'", "tolerance", where)
    if spec.get("tune") is not None:
        exp.tune = parse_tune(spec, exp, where)
        exp.procedure = tuning_procedure(exp, base, overrides)
    if use_tuned:
        exp.tuned = load_tuned(exp)
    exp.overrides = {k: v for k, v in overrides.items() if k not in ("out_dir", "data_dir")}
    exp.seeds_given = seeds is not None
    exp.ignored = _ignored_keys(where, task, algos, overrides)
    _check_grid_keys(where, task, algos)
    exp.setting_ignored = {s.name: _ignored_keys(where, task, algos, s.set, f"setting '{s.name}': ")
                           for s in settings}
    for seed in seed_list:  # seed-major: a first complete picture of the grid arrives early
        for s in settings:
            for a in algos:
                exp.cells.append(_cell(exp, where, task, base, overrides, a, s, seed))
    if seeds is None:  # the seeds `compare --until-settled` added (settled.yaml), after the spec's
        _add_settled(exp, where, task, base, overrides, settled)
    seen: dict[Path, Cell] = {}
    tuned_rows = {a.name for a in algos if a.tune}
    for c in exp.cells:
        # a tuned row may land on another row's values (e.g. the paper's step): the same runs, shown twice
        if c.cfg.run_dir in seen and seen[c.cfg.run_dir].algorithm != c.algorithm \
                and not {c.algorithm, seen[c.cfg.run_dir].algorithm} & tuned_rows:
            raise UsageError(f"{where}: algorithms '{seen[c.cfg.run_dir].algorithm}' and '{c.algorithm}' are the same "
                             f"runs (same algo and settings); remove one",
                             kind="bad_spec", field="algorithms", path=where, value=c.algorithm)
        # an algorithm that ignores a setting's key (one it does not have) runs that setting as another: shown twice
        if c.cfg.run_dir in seen and seen[c.cfg.run_dir].setting != c.setting \
                and seen[c.cfg.run_dir].algorithm == c.algorithm \
                and not any(c.algorithm in names for st in (c.setting, seen[c.cfg.run_dir].setting)
                            for names in exp.setting_ignored.get(st, {}).values()):
            raise UsageError(f"{where}: settings '{seen[c.cfg.run_dir].setting}' and '{c.setting}' are the same runs "
                             f"(they set the same values); remove one",
                             kind="bad_spec", field="settings", path=where, value=c.setting)
        seen[c.cfg.run_dir] = c
    return exp


NAME_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: Any, what: str, path: str | None = None) -> str:
    """A spec's name is data, never a path: one path component of letters, digits, '.', '_' and '-',
    starting with a letter or digit, at most 100 characters (so '/tmp/x', '../y', '.' and lists fail)."""
    if not isinstance(name, str) or not NAME_CHARS.fullmatch(name):
        raise UsageError(f"{what} must be 1-100 characters of letters, digits, '.', '_', '-' starting with a letter "
                         f"or digit (it names a folder under --out-dir/compare/), got {name!r}",
                         kind="bad_spec", field="name", path=path, value=name)
    return name


def _check_entries(where: str, items: list, allowed: set[str], what: str, key: str) -> None:
    names: set[str] = set()
    for a in items:
        if not isinstance(a, dict) or key not in a:
            raise UsageError(f"{where}: each {what} needs a '{key}' key, got {a!r}",
                             kind="bad_spec", field=f"{what}s", path=where)
        for k in ("name", key):
            if k in a and not isinstance(a[k], (str, int, float)) or isinstance(a.get(k), bool):
                raise UsageError(f"{where}: {what} '{k}' must be a single name, got {a[k]!r}",
                                 kind="bad_spec", field=f"{what}s", path=where, value=a[k])
        bad = set(a) - allowed
        if bad:
            raise UsageError(f"{where}: {what} {a.get('name', a[key])!r}: unknown key(s) {', '.join(sorted(bad))}; "
                             f"allowed: {', '.join(sorted(allowed))}",
                             kind="unknown", field="key", path=where, value=sorted(bad)[0])
        if not isinstance(a.get("set") or {}, dict):
            raise UsageError(f"{where}: {what} {a.get('name', a[key])!r}: 'set' must be a mapping of key: value",
                             kind="bad_spec", field=f"{what}s", path=where, value=a.get('name', a[key]))
        a.setdefault("name", a[key])
        a["name"] = str(a["name"])
        if a["name"] in names:
            raise UsageError(f"{where}: two {what}s are named '{a['name']}'; give each a distinct 'name'",
                             kind="bad_spec", field=f"{what}s", path=where, value=a['name'])
        names.add(a["name"])


def _ignored_keys(where: str, task: str, algos: list[AlgorithmEntry],
                  overrides: dict[str, Any], what: str = "--set ") -> dict[str, list[str]]:
    """``{key: [algorithm names]}``: the ``--set`` keys (or a setting's keys, ``what`` naming it) that some
    algorithms of the spec do not have (they ignore them; the output says so). A key that no algorithm has
    is an error."""
    from ..runs.config import REGISTRY, known_keys, lookup

    out: dict[str, list[str]] = {}
    for a in algos:
        entry = REGISTRY.get(a.algo) or lookup(a.algo)[1]
        for k in overrides:
            if k not in known_keys(task, entry) and k not in ("out_dir", "data_dir"):
                out.setdefault(k, []).append(a.name)
    for k, names in out.items():
        if len(names) == len(algos):
            raise UsageError(f"{where}: {what}{k}: no algorithm of the spec has the key '{k}' "
                             f"(`fbo show ALGO --task {task}` lists each one's keys)",
                             kind="unknown", field="key", path=where, value=k)
    return out


def _check_grid_keys(where: str, task: str, algos: list[AlgorithmEntry]) -> None:
    """Every key of an algorithm's ``tune:`` grid is one of its keys: checked on load (``--dry-run`` and
    ``fbo compare`` too), not first by ``fbo tune``, and with or without the spec's ``tune:`` block."""
    from ..runs.config import REGISTRY, known_keys, lookup

    for a in algos:
        if not isinstance(a.tune, dict):
            continue  # parse_tune says what a grid must be
        entry = REGISTRY.get(a.algo) or lookup(a.algo)[1]
        keys = known_keys(task, entry)  # a key "a,b" sets a and b to each value
        bad = sorted(p.strip() for k in a.tune for p in str(k).split(",") if p.strip() not in keys)
        if bad:
            raise UsageError(f"{where}: algorithm '{a.name}': its tune grid sets {', '.join(map(repr, bad))}, "
                             f"which '{a.algo}' does not have (`fbo show {a.algo} --task {task}` lists its keys)",
                             kind="unknown", field="key", path=where, value=bad[0])


def _cell(exp: Experiment, where: str, task: str, base: dict, overrides: dict[str, Any], a: AlgorithmEntry, s,
          seed: int) -> Cell:
    """One cell of the grid: its config layers (base, setting, algorithm, tuned values, seed, --set) resolved."""
    tuned = tuned_layer(exp.tuned, a.name, s.name) if exp.tuned else {}
    layers = (base, setting_layer(exp, s, a), a.set, tuned, {"seed": seed, "target": exp.target},
              algo_overrides(exp, a, overrides))
    try:
        cfg = resolve(task, a.algo, *layers)
    except UsageError as e:
        raise e.reworded(f"{where}: algorithm '{a.name}', setting '{s.name}': {e}") from None
    return Cell(a.name, s.name, seed, cfg, layers)


def setting_layer(exp: Experiment, s, a: AlgorithmEntry) -> dict[str, Any]:
    """The keys of setting ``s`` that apply to algorithm ``a``: as with ``--set``, a key an algorithm does not
    have is ignored by it (``exp.setting_ignored``; the output says so)."""
    ignored = exp.setting_ignored.get(s.name, {})
    return {k: v for k, v in s.set.items() if a.name not in ignored.get(k, ())}


def algo_overrides(exp: Experiment, a: AlgorithmEntry, overrides: dict[str, Any]) -> dict[str, Any]:
    """The ``--set`` keys that apply to algorithm ``a`` (the others it ignores: ``exp.ignored``)."""
    return {k: v for k, v in overrides.items() if a.name not in exp.ignored.get(k, ())}


def overrides_note(exp: Experiment) -> str:
    """What the command line changed from the spec, in words ('' when nothing): the ``--set`` keys (and the
    algorithms that ignore one), ``--seeds``."""
    from ..runs.table import fmt_num

    parts = []
    for k, v in exp.overrides.items():
        ign = exp.ignored.get(k)
        parts.append(f"--set {k}={fmt_num(v)}" + (f" (ignored by {', '.join(ign)}: no such key)" if ign else ""))
    if exp.seeds_given:
        parts.append(f"--seeds {','.join(map(str, exp.seeds))}")
    return "; ".join(parts)


def _user_algorithms(where: str, algos: list, folder: Path) -> None:
    """A user's algorithm (``./file.py:Class`` beside the spec, a class in the spec's ``algorithms/``
    folder, an entry point): its ``algo`` becomes the absolute source that finds it from anywhere (grid
    workers, tune), its name is kept as ``algo_name``."""
    from ..runs.config import REGISTRY, lookup

    for a in algos:
        if not isinstance(a["algo"], str):
            raise UsageError(f"{where}: algorithm {a['name']!r}: 'algo' must be a name or FILE.py:CLASS",
                             kind="bad_spec", field="algorithms", path=where, value=a['name'])
        if a["algo"] in REGISTRY:
            continue
        try:
            name, _, source = lookup(a["algo"], folder)
        except UsageError as e:
            raise e.reworded(f"{where}: algorithm {a['name']!r}: {e}") from None
        if a["name"] == a["algo"]:  # no display name given: the algorithm's own
            a["name"] = name
        a["algo"], a["algo_name"] = source, name


def settled_path(exp: Experiment) -> Path:
    return exp.out_root / "compare" / exp.name / "settled.yaml"


def load_settled(p: Path) -> dict | None:
    """A ``settled.yaml``, checked (:func:`~fbo_cli.grids.spec_records.check_settled`), or None."""
    return check_settled(p, load_config_file(p)) if p.is_file() else None


def load_tuned(exp: Experiment) -> Tuned | None:
    """The ``tuned.yaml`` beside the experiment's results, checked (:func:`~fbo_cli.grids.spec_records.check_tuned`),
    if any."""
    p = exp.out_root / "compare" / exp.name / "tuned.yaml"
    return check_tuned(p, load_config_file(p), exp) if p.is_file() else None


def _add_settled(exp: Experiment, where: str, task: str, base: dict, overrides: dict, settled: dict | None) -> None:
    exp.settled = settled if settled is not None else load_settled(settled_path(exp))
    algos = {a.name: a for a in exp.algorithms}
    sets = {s.name: s for s in exp.settings}
    for e in (exp.settled or {}).get("added", []):
        s = sets.get(e["setting"])
        for seed in e["seeds"]:
            for name in e["algorithms"]:
                a = algos.get(name)
                if s is None or a is None or seed in exp.seeds:
                    continue  # a setting or algorithm the spec no longer has: its runs stay out
                exp.cells.append(_cell(exp, where, task, base, overrides, a, s, seed))

