"""Run configuration: defaults < config file < CLI options < ``--set key=value``.

Keys live in one flat namespace: the run's own settings (:class:`RunSettings`), the task's
parameters (``Task.Params``) and the algorithm's hyperparameters (``Algorithm.HP``). An unknown key
or a bad value is a :class:`UsageError` naming the key and what it accepts.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..algorithms import REGISTRY, Entry
from ..algorithms.base import check_hp
from ..data import LOADERS, PARTITIONS
from ..errors import UsageError
from ..sim.bounds import bounded
from ..tasks import TASKS
from .safe_yaml import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, load_yaml  # noqa: F401 (importable here as before)

DEVICES = ("auto", "cpu", "cuda")


@dataclass
class RunSettings:
    dataset: str = bounded("", doc="empty: the task's default dataset")
    partition: str = bounded("iid", doc="iid | shards | dirichlet | class-disjoint")
    clients: int = bounded(100, doc="number of clients M")
    participation: float = bounded(0.1, doc="share of the clients sampled each round (0 < p <= 1)")
    alpha: float = bounded(0.5, doc="Dirichlet concentration")
    shards_per_client: int = bounded(2, doc="label shards each client holds (partition=shards)")
    val_frac: float | None = bounded(None, doc="None: 0.5 for iid, 0.2 otherwise (FedNest repo)")
    heldout_frac: float = bounded(0.0,
                                  doc="share of each client's data neither level trains on: the held-out tuning score")
    rounds: int = bounded(2000, doc="budget in communication rounds")
    max_iters: int | None = bounded(None, doc="optional budget in outer iterations")
    time_limit: float | None = bounded(None, doc="optional budget in seconds of training")
    eval_every: int = bounded(1, doc="evaluate every this many outer iterations (when eval_rounds is unset)")
    eval_rounds: int | None = bounded(None,
                                      doc="evaluate on a grid of this many communication rounds: at the first outer "
                                          "iteration reaching each multiple, and at the last within the budget (one "
                                          "round grid for every method of a compare; None: every eval_every "
                                          "iterations)")
    target: float | None = bounded(None, doc="headline metric target for \"rounds to target\"")
    seed: int = bounded(0,
                        doc="random seed of the data split, the client sampling, the minibatches and the "
                            "initialization")
    device: str = bounded("auto", doc="auto (cuda when available) | cpu | cuda")
    threads: int | None = bounded(None, doc="torch CPU threads (None: torch's default)")
    data_dir: str = bounded("data", doc="folder the datasets are read from (and downloaded into)")
    out_dir: str = bounded("results", doc="results root: a run is written to <out_dir>/<task>/<algo>/<run-id>")
    download: bool = bounded(True, doc="download a dataset that is not in data_dir when the network allows")
    checkpoint_every: int = bounded(50,
                                    doc="write checkpoint.pt every this many outer iterations (and at SIGINT/SIGTERM)")
    keep_checkpoint: bool = bounded(False, doc="keep checkpoint.pt once the run is finished")


# Settings that do not change a run's numbers beyond float rounding (left out of its identity): the
# thread count, checkpointing, and the task's closed-form fast path (tested equal to the generic path
# in float64).
_NOT_IDENTITY = {"data_dir", "out_dir", "download", "threads", "target", "checkpoint_every", "keep_checkpoint",
                 "algo_source"}  # where a user's algorithm lives: moving its folder keeps its runs
_NOT_IDENTITY_TASK = {"fast"}
# keys added after runs of their task were committed as evidence: they enter a run's identity only
# when set away from this default, so that the older runs keep their ids (and stay reused)
_IDENTITY_UNLESS_DEFAULT = {("auc", "heldout_frac"): False, ("hyperrep", "eval"): "test,val"}
_RUN_IDENTITY_UNLESS_DEFAULT = {"heldout_frac": 0.0, "eval_rounds": None}
# hyperparameters added after runs were committed as evidence, likewise (any task)
_HP_IDENTITY_UNLESS_DEFAULT = {"outer_lr_schedule": "constant", "outer_lr_t0": 1.0}


def comparable(data: dict[str, Any]) -> dict[str, Any]:
    """A resolved config (``RunConfig.as_dict()``, or a run's config.yaml) with only what enters a run's
    identity: its hash is the run id's last part."""
    d = {k: v for k, v in data.items() if k not in _NOT_IDENTITY and k != "device_used"
         and not (k in _RUN_IDENTITY_UNLESS_DEFAULT and v == _RUN_IDENTITY_UNLESS_DEFAULT[k])}
    if data.get("algo_source"):  # a user's algorithm: which version of it (its folder and file, not where it lies)
        from .identity import source_key

        d["algo_version"] = source_key(data["algo_source"])
    tp = {k: v for k, v in (d.get("task_params") or {}).items() if k not in _NOT_IDENTITY_TASK}
    for (task, k), default in _IDENTITY_UNLESS_DEFAULT.items():
        if task == d.get("task") and tp.get(k, default) == default:
            tp.pop(k, None)
    hp = d.get("hp")
    if isinstance(hp, dict):
        hp = {k: v for k, v in hp.items() if _HP_IDENTITY_UNLESS_DEFAULT.get(k, object()) != v}
        return {**d, "task_params": tp, "hp": hp}
    return {**d, "task_params": tp}


def identity_of(data: dict[str, Any]) -> str:
    """The run id's last part of a resolved config (``RunConfig.as_dict()``, or a run's config.yaml as read)."""
    return hashlib.sha1(json.dumps(comparable(data), sort_keys=True, default=str).encode()).hexdigest()[:10]


@dataclass
class RunConfig:
    task: str
    algo: str
    run: RunSettings
    task_params: Any
    hp: Any
    extra: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # a user's algorithm: its absolute file.py:Class or module:Class ('' for a built-in one)
    user_entry: Entry | None = field(default=None, repr=False, compare=False)

    @property
    def entry(self) -> Entry:
        return self.user_entry or REGISTRY[self.algo]

    @functools.cached_property
    def code(self) -> dict[str, Any]:
        """The run's code identity (what ``summary.json`` records as ``code``,
        :func:`fbo_cli.runs.identity.code_identity`), computed once per run and carried (to a grid's worker too):
        the checkpoint's code key, the staleness check and the summary read it here."""
        from .identity import code_identity

        return code_identity(self)

    @property
    def algo_ref(self) -> str:
        """What finds the algorithm again in another process: the registry name or the source."""
        return self.source or self.algo

    def as_dict(self) -> dict[str, Any]:
        src = {}
        if self.source:  # a user's algorithm: where it lives, and which code (in its runs' identity)
            from .identity import code_key

            src = {"algo_source": self.source, "algo_code": code_key(self.code["algorithm"])}
        return {"task": self.task, "algo": self.algo, **src, **asdict(self.run),
                "task_params": asdict(self.task_params), "hp": asdict(self.hp)}

    def identity(self) -> str:
        if not self.source:  # a built-in: refused where a user's code changed its classes in this process
            from ..algorithms.external import patched

            if why := patched(self.entry.cls, TASKS[self.task]):
                raise UsageError(f"a user's code changed fbo's {why} at import: a run of the built-in '{self.algo}' "
                                 "here would be that code's under the built-in's run id; subclass instead "
                                 "(class Mine(FedNest) with its own outer_lr), or run the built-in without it",
                                 kind="user_code", field="patched", value=why)
        return identity_of(self.as_dict())

    @property
    def run_id(self) -> str:
        return f"{self.run.dataset}-{self.run.partition}-s{self.run.seed}-{self.identity()}"

    @property
    def run_dir(self) -> Path:
        return Path(self.run.out_dir) / self.task / self.algo / self.run_id


def check_path(key: str, value: str) -> None:
    """A folder path the file system can hold: no component over 255 bytes, at most 4,096 in all."""
    parts = Path(str(value)).parts
    if len(str(value).encode()) > 4096 or any(len(c.encode()) > 255 for c in parts):
        raise UsageError(f"{key}: a path component is longer than the 255 bytes a file name may have: "
                         f"{str(value)[:80]}...", kind="bad_value", field=key, path=value)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def coerce(key: str, value: Any, tp: Any) -> Any:
    """Coerce ``value`` (a YAML scalar or a string from the command line) to the field type ``tp``. A string for a
    text key stays the text given (``--out-dir null`` is a folder named null, not YAML's null)."""
    raw = value
    if isinstance(value, str):
        try:
            value = load_yaml(value, f"the value of '{key}'") if value.strip() else value
        except UsageError as e:
            if "not valid YAML" not in str(e):
                raise
            pass
    args = typing.get_args(tp)
    if type(None) in args:  # Optional[X]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        tp = next(a for a in args if a is not type(None))
    bad = UsageError(f"'{key}' expects {_type_name(tp)}, got {value!r}", kind="bad_value", field=key, value=value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("yes", "no", "on", "off", "y", "n"):  # YAML 1.1's booleans
            return value.lower() in ("yes", "on", "y")
        raise bad
    if tp in (int, float) and isinstance(value, str):  # YAML 1.1 reads 1e30 as a string
        try:
            value = float(value)
        except ValueError:
            raise bad from None
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        if not math.isfinite(value):
            raise UsageError(f"'{key}' must be a finite number, got {value!r}", kind="bad_value", field=key,
                             value=value)
        return float(value)
    if tp is str:
        if isinstance(raw, str) and not isinstance(value, str):
            return raw
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise bad
        return value
    return value


def _hints(cls) -> dict[str, Any]:
    import sys

    mod = sys.modules[cls.__module__]
    return typing.get_type_hints(cls, globalns=vars(mod))


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--set expects key=value, got '{item}'", kind="bad_value", field="--set", value=item)
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out



def load_config_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        found = p.is_file()
    except OSError as e:  # a name longer than the file system allows
        raise UsageError(f"cannot read {str(p)[:300]}: {e.strerror or e}", kind="unreadable", path=p,
                         value=e.errno) from None
    if not found:
        raise UsageError(f"config file not found: {p}", kind="not_found", path=p)
    try:
        if p.stat().st_size > MAX_YAML_BYTES:
            raise UsageError(f"{p} is {p.stat().st_size:,} bytes; fbo reads YAML files up to {MAX_YAML_BYTES:,} bytes",
                             kind="bad_yaml", field="bytes", path=p)
        data = load_yaml(p.read_bytes(), str(p))
    except OSError as e:
        raise UsageError(f"cannot read {p}: {e.strerror or e}", kind="unreadable", path=p, value=e.errno) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{p} must hold a mapping of key: value, got {type(data).__name__}", kind="bad_spec",
                         path=p, field="mapping")
    return data


def flatten_run_config(data: dict[str, Any]) -> dict[str, Any]:
    """A run's resolved ``config.yaml`` (``task_params`` and ``hp`` nested) as one flat layer, so that
    ``fbo run --config results/<task>/<algo>/<run-id>/config.yaml`` repeats that run; a flat file is
    returned as it is."""
    out = {k: v for k, v in data.items() if k not in ("task_params", "hp", "device_used", "algo_source",
                                                         "algo_code")}
    for group in ("task_params", "hp"):
        nested = data.get(group)
        if nested is None:
            continue
        if not isinstance(nested, dict):
            raise UsageError(f"'{group}' in a config file must be a mapping of key: value", kind="bad_spec",
                             field=group)
        out.update(nested)
    return out


def unknown(what: str, name: Any, choices) -> UsageError:
    """'unknown <what> 'x' (did you mean 'y'?); choose one of: ...' (kind ``unknown``, ``field`` what, ``value`` x)"""
    choices = list(choices)
    near = difflib.get_close_matches(str(name), choices, n=1)
    return UsageError(f"unknown {what} '{name}'" + (f" (did you mean '{near[0]}'?)" if near else "")
                      + f"; choose one of: {', '.join(choices)}", kind="unknown", field=what, value=name)


def lookup(algo: str, base: Path | None = None) -> tuple[str, Entry, str]:
    """``(name, entry, source)`` of an algorithm: a registry name (source ''), or a user's algorithm
    (:mod:`fbo_cli.algorithms.external`: ``file.py:Class`` relative to ``base``, a class in the folder
    ``algorithms/`` beside it, an entry point)."""
    if not isinstance(algo, str) or not algo:
        raise UsageError(f"an algorithm is a name or FILE.py:CLASS, got {algo!r}", kind="bad_value", field="algo",
                         value=algo)
    if algo in REGISTRY:
        return algo, REGISTRY[algo], ""
    from ..algorithms.external import algo_name, find

    found = find(algo, base)
    if found is None:
        raise unknown("algorithm", algo, REGISTRY)
    cls, source = found
    if cls.__module__.startswith("fbo_cli."):
        names = [k for k, e in REGISTRY.items() if e.cls is cls and not e.preset]
        raise UsageError(f"'{algo}' is fbo's own {cls.__name__} (imported there): name it "
                         + (f"'{names[0]}'" if names else "by its registry name (`fbo list`)"),
                         kind="bad_value", field="algo", value=algo)
    name = algo_name(cls)
    if name in REGISTRY:
        raise UsageError(f"{source}: its name '{name}' is a built-in algorithm's; set another on the class "
                         f"(name = \"my-{name}\")", kind="bad_value", field="name", value=name)
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):  # spec.NAME_CHARS: a folder's name
        raise UsageError(f"{source}: its name {name!r} names a results folder: use letters, digits, '.', '_', '-'",
                         kind="bad_value", field="name", value=name)
    return name, Entry(cls, {}, cls.__dict__.get("label") or name), source


def defaults_for(entry: Entry, task: str) -> dict[str, Any]:
    """The algorithm's run settings and hyperparameters on ``task`` before the user's layers: its
    ``run_defaults`` and then its ``task_defaults[task]`` (e.g. FedBiO's steps on hyperrep)."""
    return {**entry.cls.run_defaults, **(getattr(entry.cls, "task_defaults", {}) or {}).get(task, {})}


def resolve(task: str, algo: str, *layers: dict[str, Any], base: Path | None = None) -> RunConfig:
    """Build a validated :class:`RunConfig` from override layers (later layers win). ``algo`` is a registry
    name or a user's algorithm (:func:`lookup`; a relative file is taken from ``base``)."""
    if task not in TASKS:
        raise unknown("task", task, TASKS)
    user: dict[str, Any] = {}
    for layer in layers:
        user.update({k: v for k, v in layer.items() if v is not None or k in ("target", "max_iters")})
    user.pop("algo_source", None)  # a run's config.yaml: where its algorithm was (the caller has used it)
    user.pop("algo_code", None)  # and which code it was (the code now enters the identity)
    algo, entry, source = lookup(algo, base)
    for key, what in (("algo", "--algo (fbo run) or the spec's 'algorithms' list (fbo compare)"),
                      ("task", "the TASK argument (fbo run) or the spec's 'task' (fbo compare)")):
        if key in user and user.pop(key) != (algo if key == "algo" else task):
            raise UsageError(f"'{key}' cannot be set with --set or in a config file; use {what}", kind="bad_value",
                             field=key)
    tcls = TASKS[task]
    # defaults < the task's run defaults < the algorithm's run defaults (and its defaults on this task)
    # < the user's layers
    merged = {**tcls.run_defaults, **defaults_for(entry, task), **user}
    if task not in entry.tasks:
        runs_on = ", ".join(entry.tasks)
        raise UsageError(f"algorithm '{algo}' does not run on task '{task}' (it runs on: {runs_on})",
                         kind="unsupported", field="task", value=task)

    groups = [(RunSettings, {}), (tcls.Params, {}), (entry.cls.HP, dict(entry.preset))]
    hints = [_hints(c) for c, _ in groups]
    merged = _unalias(merged, user, entry, set().union(*hints))
    for key, value in merged.items():
        for (_, vals), h in zip(groups, hints):
            if key in h:
                vals[key] = coerce(key, value, h[key])
                break
        else:
            allowed = sorted(set().union(*[set(h) for h in hints]))
            near = difflib.get_close_matches(str(key), allowed, n=1)
            raise UsageError(f"unknown key '{key}' for task '{task}' with algorithm '{algo}'"
                             + (f" (did you mean '{near[0]}'?)" if near else "")
                             + f"; allowed keys: {', '.join(allowed)} "
                               f"(`fbo show {source or algo} --task {task}` explains them)",
                             kind="unknown", field="key", value=key)
    run = replace(RunSettings(), **groups[0][1])
    tparams = replace(tcls.Params(), **groups[1][1])
    hp = replace(entry.cls.HP(), **groups[2][1])
    if not run.dataset:
        run.dataset = tcls.default_dataset
    _validate(run, tcls)
    for obj in (tparams, hp):
        for f in fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise UsageError(f"'{f.name}' must be >= 0, got {v}", kind="bad_value", field=f.name, value=v)
    check_hp(tparams)  # the declared bounds, before any data loads
    tcls.check_params(tparams)  # what ties the task's parameters together
    check_hp(hp)
    entry.cls.check(hp)  # what ties several keys together
    return RunConfig(task, algo, run, tparams, hp, source=source, user_entry=entry if source else None)


def _unalias(merged: dict[str, Any], user: dict[str, Any], entry: Entry, own: set[str]) -> dict[str, Any]:
    """The common names (``Algorithm.aliases``: ``local_steps`` for FedNest's ``tau``) as the algorithm's own
    keys; the same quantity given under both names with two values is an error."""
    out = dict(merged)
    for common, key in (getattr(entry.cls, "aliases", None) or {}).items():
        if common in out and common not in own:
            v = out.pop(common)
            if key in user and str(user[key]) != str(v):
                raise UsageError(f"'{common}' is '{key}' for this algorithm; they are set to two values "
                                 f"({v!r} and {user[key]!r}): set one", kind="bad_value", field=common, value=v)
            out[key] = v
    return out


def known_keys(task: str, entry: Entry) -> set[str]:
    """Every key ``--set`` may give a run of this algorithm on this task: run settings, the task's
    parameters, the algorithm's hyperparameters and its common names."""
    keys = set(_hints(RunSettings)) | set(_hints(TASKS[task].Params)) | set(_hints(entry.cls.HP))
    return keys | set(getattr(entry.cls, "aliases", None) or {})


_RANGES = (  # (a run setting, its range as the message says it, whether a value is in it), checked in this order
    ("rounds", "rounds (the budget) must be > 0", lambda v: v > 0),
    ("max_iters", "max_iters must be > 0", lambda v: v is None or v > 0),
    ("time_limit", "time_limit must be > 0", lambda v: v is None or v > 0),
    ("clients", "clients must be >= 1", lambda v: v >= 1),
    ("participation", "participation must be in (0, 1]", lambda v: 0 < v <= 1),
    ("eval_every", "eval_every must be >= 1", lambda v: v >= 1),
    ("eval_rounds", "eval_rounds must be >= 1 (or none)", lambda v: v is None or v >= 1),
    ("alpha", "alpha must be > 0", lambda v: v > 0),
    ("seed", "seed must be in [0, 2^32)", lambda v: 0 <= v < 2**32),  # numpy's generators take 32-bit seeds
    ("threads", "threads must be in [1, 1024] (or none)", lambda v: v is None or 1 <= v <= 1024),
    ("shards_per_client", "shards_per_client must be in [1, 10000]", lambda v: 1 <= v <= 10_000),
    ("clients", "clients must be <= 100000", lambda v: v <= 100_000),
    ("val_frac", "val_frac must be in (0, 1)", lambda v: v is None or 0 < v < 1),
    ("heldout_frac", "heldout_frac must be in [0, 1)", lambda v: 0 <= v < 1),
    ("checkpoint_every", "checkpoint_every must be >= 1", lambda v: v >= 1),
)


def _validate(run: RunSettings, tcls) -> None:
    if run.dataset not in LOADERS:
        raise unknown("dataset", run.dataset, LOADERS)
    if tcls.datasets and run.dataset not in tcls.datasets:
        raise UsageError(f"task '{tcls.name}' does not support dataset '{run.dataset}'; "
                         f"choose one of: {', '.join(tcls.datasets)}", kind="unsupported", field="dataset",
                         value=run.dataset)
    if run.partition not in PARTITIONS:
        raise unknown("partition", run.partition, PARTITIONS)
    if run.device not in DEVICES:
        raise UsageError(f"device must be one of {', '.join(DEVICES)}; got '{run.device}'", kind="bad_value",
                         field="device", value=run.device)
    for key, says, ok in _RANGES:
        v = getattr(run, key)
        if not ok(v):
            raise UsageError(f"{says}, got {v}", kind="bad_value", field=key, value=v)
    for key in ("out_dir", "data_dir"):
        check_path(key, getattr(run, key))
    if run.target is not None and not math.isfinite(run.target):
        raise UsageError(f"target must be a finite number, got {run.target}", kind="bad_value", field="target",
                         value=run.target)
