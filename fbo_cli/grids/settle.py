"""Seeds until settled (``fbo compare SPEC --until-settled``): the sequential design of the verdicts, run.

The design, fixed before any look (:mod:`fbo_cli.grids.verdicts`, and the report's rule):

1. **Looks** at 3, 6 and 10 seed pairs (the cap; ``--cap`` moves the last look). Look k spends the error
   ``a_k`` of the Lan-DeMets spending function of O'Brien-Fleming type at the information fraction ``n_k /
   cap`` (at 5% in all: 0.035%, 1.11%, 3.85%); by the union bound the error of a verdict over all its looks is
   at most 5%. An early look needs overwhelming evidence.
2. Every claim in every setting is read at its looks in order; the **first look that decides** gives its
   verdict, and it is never read again (its later seeds, added for other claims, do not count for it).
3. For each claim and setting still open at its last look reached, the two algorithms it compares get seeds
   up to the **next look** in the settings it pairs: the spec's seeds, then the next integers. Nothing else is
   run: a setting whose claims are decided keeps its seeds. A claim open at the cap is *inconclusive*.
   A claim on a quantity read across settings (CODASCA's I_max at a client count K, :mod:`fbo_cli.grids.derived`)
   gets its seeds in every setting it is read across (every window I of that K), for both algorithms.

The added seeds are written to ``<out>/compare/<name>/settled.yaml`` (``{cap, looks, alpha, added: [{setting,
algorithms, seeds}]}``), which :func:`fbo_cli.grids.spec.load_spec` reads like ``tuned.yaml``: the extra cells
are part of the experiment from then on, and ``fbo report --collect`` keeps the file with the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError
from .derived import derived_tables
from .resolution import rounds_verdict
from .spec import Experiment, load_settled, load_spec, settled_path  # noqa: F401  (settle's API)
from .verdicts import CAP, look_alphas, looks


def plan(exp: Experiment, runs, cap: int = CAP, to_cap: bool = False) -> tuple[list[dict], list[str]]:
    """(the seeds to add for the next look: ``[{setting, algorithms, seeds}]``, the open claims that asked for
    them, as text). Every open claim's next look is the first look above its pairs; the seeds added are those
    up to the largest next look asked for in the setting (a look is a number of pairs, so a claim that asks for
    fewer reads its own look within them)."""

    if cap <= len(exp.seeds):
        raise UsageError(f"--cap {cap}: the spec already has {len(exp.seeds)} seeds; the cap must be larger",
                         kind="bad_value", field="--cap", value=cap)
    need: dict[str, dict] = {}
    why = []
    names = [s.name for s in exp.settings]
    derived = derived_tables(exp, runs)
    for claim in exp.claims:
        table, setting_names, read_across = derived.get(claim.metric, (runs, names, None))
        if claim.metric not in table.columns:
            continue
        pairs = claim.across or [(s, None) for s in setting_names if not claim.settings or s in claim.settings]
        for s, t in pairs:
            v = rounds_verdict(table, claim, s, t, first=len(exp.seeds), cap=cap, exact=read_across is not None)
            if v.verdict == "inconclusive" and v.more:
                target = cap if to_cap else v.n + v.more
                for side, at in ((claim.better, s), (claim.than, t or s)):
                    for where in (read_across or {}).get(at, [at]):  # a derived quantity: every setting it reads
                        e = need.setdefault(where, {"algorithms": set(), "seeds": 0})
                        e["algorithms"].add(side)
                        e["seeds"] = max(e["seeds"], target)
                why.append(f"{claim.text} ({s}{f' vs {t}' if t else ''}: {v.interval}, {v.n} seeds; "
                           f"look {v.look + 1} needs {target})")
    order = {n: i for i, n in enumerate(names)}
    algos = [a.name for a in exp.algorithms]
    have = {e["setting"]: set(e["seeds"]) | set(exp.seeds) for e in (exp.settled or {}).get("added", [])}
    added = [{"setting": s, "algorithms": [a for a in algos if a in need[s]["algorithms"]],
              "seeds": _seeds_up_to(exp.seeds, need[s]["seeds"])} for s in sorted(need, key=order.get)]
    # a look whose seeds are all planned already (a run of it failed): nothing new to run, no loop
    added = [e for e in added if e["seeds"] and not set(e["seeds"]) <= have.get(e["setting"], set(exp.seeds))
             or e["seeds"] and set(e["algorithms"]) - _algorithms_added(exp, e["setting"])]
    return added, why


def _algorithms_added(exp: Experiment, setting: str) -> set[str]:
    return {a for e in (exp.settled or {}).get("added", []) if e["setting"] == setting for a in e["algorithms"]}


def _seeds_up_to(spec_seeds: list[int], n: int) -> list[int]:
    """The seeds beyond the spec's that make ``n`` in all: the next integers after its largest."""
    extra, k = [], max(spec_seeds) + 1
    while len(spec_seeds) + len(extra) < n:
        extra.append(k)
        k += 1
    return extra


def write_settled(exp: Experiment, added: list[dict], cap: int) -> Path:
    """Merge ``added`` into the experiment's ``settled.yaml`` (a setting's algorithms accumulate)."""
    from ..runs.rundir import atomic_write

    p = settled_path(exp)
    old = load_settled(p) or {"added": []}
    merged = {(e["setting"]): e for e in old["added"]}
    for e in added:
        if e["setting"] in merged:
            m = merged[e["setting"]]
            m["algorithms"] = sorted(set(m["algorithms"]) | set(e["algorithms"]))
            m["seeds"] = sorted(set(m["seeds"]) | set(e["seeds"]))
        else:
            merged[e["setting"]] = e
    doc = {"cap": cap, "looks": list(looks(cap)), "alpha": [float(round(a, 6)) for a in look_alphas(cap)],
           "procedure": "fbo compare --until-settled (fbo_cli/grids/settle.py): looks at 3, 6 and the cap, error "
                        "spent by O'Brien-Fleming-type alpha spending (5% over all looks); an open claim's two "
                        "algorithms get seeds up to its next look in the settings they pair",
           "added": list(merged.values())}
    atomic_write(p, yaml.safe_dump(doc, sort_keys=False))
    return p


def check_request(exp: Experiment, seed_list: list[int] | None, cap: int) -> None:
    """``--until-settled`` needs the spec's own seeds (no ``--seeds``), claims, and a cap in [2, 1000]."""
    if seed_list is not None or not exp.claims or not 2 <= cap <= 1000:
        raise UsageError("--until-settled needs the spec's own seeds (no --seeds), claims in the spec, and "
                         f"--cap in [2, 1000]; got {'--seeds, ' if seed_list else ''}{len(exp.claims)} claims, "
                         f"cap {cap}", kind="bad_value", field="--until-settled")


@dataclass
class SecondLook:
    """What ``--until-settled`` found: its notes (the inconclusive claims, the seeds added), the added runs'
    cost (a dry run) and the experiment reloaded with the added seeds (None when nothing was added, or in a
    dry run)."""
    notes: list[str]
    cost: str | None = None
    exp: Experiment | None = None


def second_look(exp: Experiment, spec: str | Path, overrides: dict[str, Any], cap: int, jobs: int,
                dry_run: bool = False, batch: str | int = "auto") -> SecondLook:
    """The next look's seeds for the claims still open: planned (:func:`plan`), written to ``settled.yaml`` (not
    in a dry run, which says their cost instead, and what every open claim to the cap would cost) and loaded."""
    from .compare import collect
    from .plan import make_plan

    runs, _ = collect(exp)
    added, why = plan(exp, runs[runs.status != "not run"], cap)
    if not added:
        return SecondLook(["until settled: every claim is decided, or at the cap, or not yet run: no seeds to add"])
    notes = [f"until settled: {len(why)} claim(s) open at their last look:"] + [f"  {w}" for w in why]
    notes += [f"  adds seeds {e['seeds'][0]}-{e['seeds'][-1]} to {e['setting']}: {', '.join(e['algorithms'])}"
              for e in added]
    if dry_run:
        more = load_spec(spec, overrides, None, settled={"added": added})
        worst, _ = plan(exp, runs[runs.status != "not run"], cap, to_cap=True)
        most = make_plan(load_spec(spec, overrides, None, settled={"added": worst}).cells)
        return SecondLook(notes, cost=f"until settled, the next look: {make_plan(more.cells).cost_line(jobs, batch)}"
                          f"\nuntil settled, every open claim to the cap ({cap} seeds; at most): "
                          f"{most.cost_line(jobs, batch)}")
    write_settled(exp, added, cap)
    return SecondLook(notes, exp=load_spec(spec, overrides, None))
