"""The checks of a spec's parts that need no file and no run: the claims, the witness, the paper's numbers
(``reference``, ``reference_on``) and the tune block (:func:`parse_tune`), with the spec's size limits.
:func:`fbo_cli.grids.spec.load_spec`, the one validator, calls them on the YAML it read; each error names the
file (``where``), the key and what it accepts."""

from __future__ import annotations

import math
from typing import Any

from ..errors import UsageError
from ..tasks import TASKS
from .spec_types import AlgorithmEntry, Attribution, SettingEntry, TuneSpec, Witness

WITNESS_SETTINGS = {  # the public FedNest code's settings (fbo witness): name, its arguments
    "iid-tau1": ("IID, tau=1", ["--iid", "--outer_tau", "1"]),
    "iid-tau5": ("IID, tau=5", ["--iid", "--outer_tau", "5"]),
    "noniid-tau1": ("non-IID, tau=1", ["--outer_tau", "1"]),
    "noniid-tau5": ("non-IID, tau=5", ["--outer_tau", "5"])}


def nonneg_number(v: Any, what: str, field: str | None = None, path: str | None = None) -> float:
    """A finite number >= 0 (a tolerance, a margin), else a UsageError naming ``what`` (a ``bad_spec`` of the
    spec at ``path``, its entry ``field``)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise UsageError(f"{what} must be a finite number >= 0, got {v!r}",
                         kind="bad_spec", field=field, path=path, value=v)
    return float(v)


# tables a report derives from a spec's runs (``derived:``): name -> what it is
DERIVED = {"imax": "the largest communication window I whose final AUC stays within 0.01 of I = 1, per "
                   "algorithm, client count K and seed (fbo_cli/evidence/report/codasca_section.py); "
                   "claims on metric I_max"}


def check_claims(where: str, claims: Any, algos: list[AlgorithmEntry], settings: list[SettingEntry]) -> None:
    """``claims:`` (read by ``fbo report``): a list of {text, metric, better, than, mode, margin,
    settings, across}; ``settings`` (optional) names the settings the claim is about (default: all);
    ``across`` (optional, instead) lists pairs [setting of ``better``, setting of ``than``]: a claim
    about one setting against another (e.g. tau = 5 against tau = 1 for the same algorithm). A claim on
    a derived quantity (``I_max``) names the derived table's settings (``K=<K>``)."""
    if claims is None:
        return
    names = {a.name for a in algos}
    snames = {s.name for s in settings}
    if not isinstance(claims, list):
        raise UsageError(f"{where}: 'claims' must be a list of mappings", kind="bad_spec", field="claims", path=where)
    for c in claims:
        keys = {"text", "metric", "better", "than", "mode", "margin", "factor", "settings", "across"}
        if not isinstance(c, dict) or set(c) - keys or not {"text", "metric", "better", "than"} <= set(c):
            raise UsageError(f"{where}: each claim needs text, metric, better, than (optional: mode, margin, factor, "
                             f"settings or across); got {c!r}", kind="bad_spec", field="claims", path=where)
        for k in ("margin", "factor"):
            v = c.get(k, 1.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (
                    k == "factor" and v <= 0):
                raise UsageError(f"{where}: claim '{c['text']}': '{k}' must be a finite number >= 0 (factor > 0), "
                                 f"got {v!r}", kind="bad_spec", field="claims", path=where, value=c['text'])
        if "factor" in c and (c.get("mode", "max") != "min" or "margin" in c):
            raise UsageError(f"{where}: claim '{c['text']}': 'factor' (better needs at most 1/factor of than's "
                             f"value) goes with mode: min and no margin",
                             kind="bad_spec", field="claims", path=where, value=c['text'])
        across = c.get("across")
        if across is not None:
            derived = c["metric"] == "I_max"  # its settings are the derived table's K=<K>
            if c.get("settings") or not isinstance(across, list) or not across or not all(
                    isinstance(p, list) and len(p) == 2 and (derived or all(x in snames for x in p)) for p in across):
                raise UsageError(f"{where}: claim '{c['text']}': 'across' must be a non-empty list of pairs "
                                 f"[setting, setting] of the spec's settings, without 'settings'; got {across!r}",
                                 kind="bad_spec", field="claims", path=where, value=c['text'])
        bad = [s for s in c.get("settings") or [] if s not in snames]
        if not isinstance(c.get("settings") or [], list) or bad:
            raise UsageError(f"{where}: claim '{c['text']}': 'settings' must list setting names of the spec; "
                             f"unknown: {', '.join(map(str, bad))}",
                             kind="bad_spec", field="claims", path=where, value=c['text'])
        for side in ("better", "than"):
            if c[side] not in names:
                raise UsageError(f"{where}: claim '{c['text']}': '{c[side]}' is not an algorithm of the spec; "
                                 f"choose from: {', '.join(sorted(names))}",
                                 kind="bad_spec", field="claims", path=where, value=c['text'])
        if c.get("mode", "max") not in ("min", "max", "equal"):
            raise UsageError(f"{where}: claim '{c['text']}': mode must be min, max or equal",
                             kind="bad_spec", field="claims", path=where, value=c['text'])
        if "margin" in c:
            nonneg_number(c["margin"], f"{where}: claim '{c['text']}': 'margin'", "claims", where)


def check_witness(where: str, w: Any, algos: list[AlgorithmEntry], settings: list[SettingEntry]) -> Witness | None:
    """``witness: {algorithm, settings: {spec setting: witness setting}}``: the public code's runs
    (``fbo witness``) shown beside that algorithm's in those settings."""
    if w is None:
        return None
    ok = (isinstance(w, dict) and {"algorithm", "settings"} <= set(w) <= {"algorithm", "settings", "inner_lr"}
          and w["algorithm"] in {a.name for a in algos}
          and isinstance(w.get("inner_lr", 0.01), (int, float)) and not isinstance(w.get("inner_lr"), bool)
          and isinstance(w["settings"], dict) and all(
              k in {s.name for s in settings} and v in WITNESS_SETTINGS for k, v in w["settings"].items()))
    if not ok:
        raise UsageError(f"{where}: 'witness' must be {{algorithm: <an algorithm of the spec>, settings: {{<setting>: "
                         f"one of {', '.join(WITNESS_SETTINGS)}}}, inner_lr: <the public code's --lr>}}; "
                         f"got {w!r:.200}", kind="bad_spec", field="witness", path=where)
    return Witness(w["algorithm"], dict(w["settings"]), float(w.get("inner_lr", 0.01)))


def check_attribution(where: str, a: Any, algos: list[AlgorithmEntry]) -> Attribution | None:
    """``attribution: {change: <words>, pairs: {<row before the change>: <row after it>}}``."""
    if a is None:
        return None
    names = {x.name for x in algos}
    if not (isinstance(a, dict) and set(a) == {"change", "pairs"} and isinstance(a["change"], str)
            and isinstance(a["pairs"], dict) and a["pairs"]
            and all(k in names and v in names for k, v in a["pairs"].items())):
        raise UsageError(f"{where}: 'attribution' must be {{change: <what differs, in words>, pairs: {{<an algorithm "
                         f"row of the spec>: <the row after the change>}}}}; got {a!r:.200}",
                         kind="bad_spec", field="attribution", path=where)
    return Attribution(a["change"], dict(a["pairs"]))


def check_reference(where: str, ref: Any, algos: list[AlgorithmEntry], settings: list[SettingEntry]) -> None:
    """``reference: {algorithm name: {setting name: {column: number or text}}}``."""
    shape = "reference must map algorithm name -> setting name -> {column: value}"
    if not isinstance(ref, dict):
        raise UsageError(f"{where}: {shape}, got a {type(ref).__name__}",
                         kind="bad_spec", field="reference", path=where)
    anames, snames = {a.name for a in algos}, {s.name for s in settings}
    for a, per in ref.items():
        if a not in anames:
            raise UsageError(f"{where}: reference names algorithm '{a}', not in the spec ({', '.join(sorted(anames))})",
                             kind="bad_spec", field="reference", path=where, value=a)
        if not isinstance(per, dict):
            raise UsageError(f"{where}: reference['{a}']: {shape}",
                             kind="bad_spec", field="reference", path=where, value=a)
        for sname, cols in per.items():
            if sname not in snames:
                raise UsageError(f"{where}: reference['{a}'] names setting '{sname}', not in the spec "
                                 f"({', '.join(sorted(snames))})",
                                 kind="bad_spec", field="reference", path=where, value=sname)
            if not isinstance(cols, dict) or not all(isinstance(v, (int, float, str)) for v in cols.values()):
                raise UsageError(f"{where}: reference['{a}']['{sname}']: {shape}",
                                 kind="bad_spec", field="reference", path=where, value=sname)


REFERENCE_ON_KEYS = {"dataset", "target", "model", "metric", "collapse"}


def check_reference_on(where: str, on: Any) -> dict[str, Any]:
    """``reference_on: {dataset, target, model, metric, collapse}``: what the paper's numbers in ``reference`` were
    measured on. ``fbo report`` gives them a verdict only where the spec's runs match it; elsewhere
    they are context. ``collapse``: ``[algorithm, setting]`` pairs whose paper number is the point of a collapse
    (e.g. ZO-HFL's Table I baselines at alpha = 0.1): ours *above* it contradicts the paper, and the report says so."""
    if on is None:  # the paper's numbers then stand as context only, never with a verdict
        return {}
    ds = on.get("dataset") if isinstance(on, dict) else None
    if not isinstance(on, dict) or set(on) - REFERENCE_ON_KEYS or not (
            isinstance(ds, str) or (isinstance(ds, list) and ds and all(isinstance(d, str) for d in ds))):
        raise UsageError(f"{where}: 'reference_on' must be a mapping with 'dataset' (a name, or the list of the "
                         f"settings' datasets) and optional "
                         f"{', '.join(sorted(REFERENCE_ON_KEYS - {'dataset'}))}), got {on!r}",
                         kind="bad_spec", field="reference_on", path=where)
    bad = [p for p in on.get("collapse") or [] if not (isinstance(p, list) and len(p) == 2
                                                        and all(isinstance(x, str) for x in p))]
    if bad or not isinstance(on.get("collapse") or [], list):
        raise UsageError(f"{where}: reference_on.collapse must be a list of [algorithm, setting] pairs, got "
                         f"{on.get('collapse')!r}", kind="bad_spec", field="reference_on", path=where)
    return dict(on)


MAX_SEEDS = 1000  # seeds of one spec (evaluation or tuning)


MAX_CELLS = 20_000  # runs of one grid (algorithms x settings x seeds, or a tuning grid's points x seeds)


TUNE_KEYS = {"seeds", "rounds", "score", "mode", "setting", "tail", "tolerance", "set"}


HELDOUT_FRAC = 0.1  # a held-out score's share of each client's rows, unless tune.set gives heldout_frac


def parse_tune(spec: dict, exp: Any, where: str) -> TuneSpec:
    """The tune block of ``spec`` for the experiment ``exp`` (its seeds, task, settings and algorithms)."""
    t = spec.get("tune")
    if not isinstance(t, dict):
        raise UsageError(f"{where}: no 'tune:' block (a mapping); see `fbo tune --help`",
                         kind="bad_spec", field="tune", path=where)
    unknown = set(t) - TUNE_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) in tune: {', '.join(sorted(unknown))}; "
                         f"allowed: {', '.join(sorted(TUNE_KEYS))}",
                         kind="unknown", field="key", path=where, value=sorted(unknown)[0])
    seeds = t.get("seeds", [100])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and 0 <= s < 2**32 for s in seeds):
        raise UsageError(f"{where}: tune.seeds must be a non-empty list of integers in [0, 2^32)",
                         kind="bad_spec", field="tune.seeds", path=where)
    if len(seeds) > MAX_SEEDS:
        raise UsageError(f"{where}: {len(seeds):,} tuning seeds; fbo takes at most {MAX_SEEDS:,}",
                         kind="bad_spec", field="tune.seeds", path=where, value=len(seeds))
    clash = set(seeds) & set(exp.seeds)
    if clash:
        raise UsageError(f"{where}: tuning seeds {sorted(clash)} are also evaluation seeds; use disjoint seeds",
                         kind="bad_spec", field="tune.seeds", path=where, value=sorted(clash))
    default_score, default_mode = TASKS[exp.task].tune_metric
    score, mode = t.get("score", default_score), t.get("mode", default_mode)
    if score is not None and not isinstance(score, str):
        raise UsageError(f"{where}: tune.score must be the name of a validation metric, got {score!r}",
                         kind="bad_spec", field="tune.score", path=where, value=score)
    if not score:
        raise UsageError(f"{where}: task '{exp.task}' has no default validation score; set tune.score",
                         kind="bad_spec", field="tune.score", path=where)
    if score.startswith("test"):
        raise UsageError(f"{where}: tune.score '{score}' is a test-set metric; tune on validation data",
                         kind="bad_spec", field="tune.score", path=where, value=score)
    if mode not in ("min", "max"):
        raise UsageError(f"{where}: tune.mode must be min or max, got '{mode}'",
                         kind="bad_spec", field="tune.mode", path=where, value=mode)
    rounds = t.get("rounds", 40)
    tail, tol = t.get("tail", 0.25), t.get("tolerance", 0.05)
    if tol is False or tol == "off":  # no oscillation check (YAML reads a bare off as False)
        tol = math.inf
    if rounds == "budget":  # each setting at its own evaluation budget (settings with different budgets)
        rounds = None
    elif not isinstance(rounds, int) or rounds < 1:
        raise UsageError(f"{where}: tune.rounds must be an integer >= 1 or 'budget', got {rounds!r}",
                         kind="bad_spec", field="tune.rounds", path=where, value=rounds)
    if not (isinstance(tail, (int, float)) and 0 < tail <= 1):
        raise UsageError(f"{where}: tune.tail must be in (0, 1], got {tail!r}",
                         kind="bad_spec", field="tune.tail", path=where, value=tail)
    if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and tol >= 0) or math.isnan(tol):
        raise UsageError(f"{where}: tune.tolerance must be a number >= 0 or off, got {tol!r}",
                         kind="bad_spec", field="tune.tolerance", path=where, value=tol)
    setting = t.get("setting")
    names = [s.name for s in exp.settings]
    if setting is not None and setting not in names:
        raise UsageError(f"{where}: tune.setting '{setting}' is not a setting; choose one of: {', '.join(names)}",
                         kind="bad_spec", field="tune.setting", path=where, value=setting)
    extra = t.get("set") or {}
    if not isinstance(extra, dict):
        raise UsageError(f"{where}: tune.set must be a mapping", kind="bad_spec", field="tune.set", path=where)
    if score.startswith("heldout"):  # the rows neither level trains on: 10% of each client's unless set
        extra = {"heldout_frac": HELDOUT_FRAC, **extra}
        frac = extra["heldout_frac"]
        if not (isinstance(frac, (int, float)) and not isinstance(frac, bool) and 0 < frac < 1):
            raise UsageError(f"{where}: tune.score '{score}' is the held-out split's: tune.set's heldout_frac "
                             f"must be in (0, 1), got {frac!r}",
                             kind="bad_spec", field="tune.set", path=where, value=frac)
    grids = {}
    for a in exp.algorithms:
        g = a.tune
        if not isinstance(g, dict) or not all(isinstance(v, list) and v for v in g.values()):
            raise UsageError(f"{where}: algorithm '{a.name}': tune must map keys to non-empty lists of values",
                             kind="bad_spec", field="tune", path=where, value=a.name)
        points = math.prod(len(v) for v in g.values())
        if points * len(seeds) > MAX_CELLS:
            raise UsageError(f"{where}: algorithm '{a.name}': its tuning grid has {points:,} points x "
                             f"{len(seeds)} seeds; fbo takes at most {MAX_CELLS:,} runs per grid",
                             kind="bad_spec", field="tune", path=where, value=a.name)
        grids[a.name] = g
    if not any(grids.values()):
        raise UsageError(f"{where}: no algorithm declares a 'tune:' grid", kind="bad_spec", field="tune", path=where)
    return TuneSpec(seeds, rounds, score, mode, setting, float(tail), float(tol), extra, grids)


# keys that never change what a tuning computes (where files go, threads, checkpoints), as for a run's identity
_NOT_PROCEDURE = {"data_dir", "out_dir", "download", "threads", "device", "checkpoint_every", "keep_checkpoint",
                  "quiet", "seed", "target"}


def tuning_procedure(exp, base: dict, overrides: dict) -> dict:
    """What a tuning did, as ``tuned.yaml`` records it (``made_by``) and ``fbo compare`` checks it against the spec
    now: the tuning seeds, its budget and rule, its grids, and every value its runs were made with (the spec's
    ``base``, each setting's values, the tuned rows' fixed values, ``tune.set`` and the command line's ``--set``),
    but nothing that only says where files go or how many threads run."""
    ts = exp.tune
    keep = lambda d: {k: v for k, v in sorted((d or {}).items()) if k not in _NOT_PROCEDURE}  # noqa: E731
    return {"seeds": list(ts.seeds), "rounds": ts.rounds or "budget", "score": ts.score, "mode": ts.mode,
            "setting": ts.setting, "tail": ts.tail, "tolerance": ts.tolerance if math.isfinite(ts.tolerance) else "off",
            "grids": {a: g for a, g in ts.grids.items() if g}, "set": keep(ts.extra), "base": keep(base),
            "settings": {s.name: keep(s.set) for s in exp.settings},
            "fixed": {a.name: keep(a.set) for a in exp.algorithms if a.tune}, "command_line": keep(overrides)}


_PROCEDURE_WORDS = {"seeds": "tuning seeds", "rounds": "tuning budget (tune.rounds)", "grids": "another tuning grid",
                    "base": "base values (clients, rounds, ...)", "settings": "settings' values",
                    "fixed": "tuned rows' fixed values", "command_line": "--set values", "set": "tune.set"}


def procedure_changes(then: dict, now: dict) -> dict[str, str]:
    """The parts of the tuning procedure ``then`` (a ``tuned.yaml``'s ``made_by``, or the flat keys an older one
    holds) that differ in ``now`` (:func:`tuning_procedure`): ``{key of made_by: 'what: was -> now'}`` (the keys
    for a program, the words for the user)."""
    import yaml

    same = lambda x: yaml.safe_load(yaml.safe_dump(x))  # noqa: E731  (as read back from the file)
    now = same(now)
    return {k: f"{_PROCEDURE_WORDS.get(k, 'tune.' + k)}: {then[k]!r:.80} -> {now[k]!r:.80}"
            for k in now if k in then and same(then[k]) != now[k]}
