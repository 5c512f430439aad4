"""Seeds until settled (``fbo compare SPEC --until-settled``): more seeds, by a procedure fixed in advance,
for the claims whose verdict is inconclusive.

The procedure, stated before any look (and in the report's rule):

1. **First look** at the spec's seeds: every claim in every setting gets its verdict at 95%
   (:func:`fbo_cli.grids.verdicts.claim_verdict`).
2. For each claim and setting still *inconclusive*, the two algorithms it compares get seeds up to the
   **cap** (default 10) in the settings it pairs: the spec's seeds, then the next integers. Nothing else is
   run: a setting whose claims are decided keeps the spec's seeds.
3. **Second and last look** at the cap, at 97.5% (Bonferroni over the two looks: a false verdict at most
   7.5% of the time in all). A claim still inconclusive there stays inconclusive: no look past the cap.
   Claims on derived quantities (CODASCA's I_max) are not extended: their seeds are those of every
   window, which this procedure does not add.

The added seeds are written to ``<out>/compare/<name>/settled.yaml`` (``{cap, looks, added: [{setting,
algorithms, seeds}]}``), which :func:`fbo_cli.grids.spec.load_spec` reads like ``tuned.yaml``: the extra cells
are part of the experiment from then on, and ``fbo report --collect`` keeps the file with the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError
from .spec import Experiment, load_settled, load_spec, settled_path  # noqa: F401  (settle's API)

CAP = 10


def plan(exp: Experiment, runs, cap: int = CAP) -> tuple[list[dict], list[str]]:
    """(the seeds to add: ``[{setting, algorithms, seeds}]``, the claims that asked for them as text)."""
    from .verdicts import claim_verdict

    if cap <= len(exp.seeds):
        raise UsageError(f"--cap {cap}: the spec already has {len(exp.seeds)} seeds; the cap must be larger")
    need: dict[str, set[str]] = {}
    why = []
    names = [s.name for s in exp.settings]
    for claim in exp.claims:
        if claim.metric not in runs.columns:
            continue  # a derived quantity (I_max): not extended
        pairs = claim.across or [(s, None) for s in names if not claim.settings or s in claim.settings]
        for s, t in pairs:
            v = claim_verdict(runs, claim, s, t, first=len(exp.seeds))
            if v.verdict == "inconclusive" and v.n < cap:
                need.setdefault(s, set()).add(claim.better)
                need.setdefault(t or s, set()).add(claim.than)
                why.append(f"{claim.text} ({s}{f' vs {t}' if t else ''}: {v.interval}, {v.n} seeds)")
    extra, k = [], max(exp.seeds) + 1
    while len(exp.seeds) + len(extra) < cap:
        extra.append(k)
        k += 1
    order = {n: i for i, n in enumerate(names)}
    algos = [a.name for a in exp.algorithms]
    return ([{"setting": s, "algorithms": [a for a in algos if a in need[s]], "seeds": extra}
             for s in sorted(need, key=order.get)], why)


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
    doc = {"cap": cap, "looks": [len(exp.seeds), cap], "alpha": [0.05, 0.025],
           "procedure": "fbo compare --until-settled (fbo_cli/settle.py): the inconclusive claims' two "
                        "algorithms get seeds up to the cap in the settings they pair; two looks, no third",
           "added": list(merged.values())}
    atomic_write(p, yaml.safe_dump(doc, sort_keys=False))
    return p


def check_request(exp: Experiment, seed_list: list[int] | None, cap: int) -> None:
    """``--until-settled`` needs the spec's own seeds (no ``--seeds``), claims, and a cap in [2, 1000]."""
    if seed_list is not None or not exp.claims or not 2 <= cap <= 1000:
        raise UsageError("--until-settled needs the spec's own seeds (no --seeds), claims in the spec, and "
                         f"--cap in [2, 1000]; got {'--seeds, ' if seed_list else ''}{len(exp.claims)} claims, "
                         f"cap {cap}")


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
    """The second look's seeds for the claims still inconclusive after the first: planned (:func:`plan`),
    written to ``settled.yaml`` (not in a dry run, which says their cost instead) and loaded."""
    from ..runs.cost import cost_line
    from ..runs.rundir import todo_runs
    from .compare import collect
    from .run_batches import cost_shares

    runs, _ = collect(exp)
    added, why = plan(exp, runs[runs.status != "not run"], cap)
    if not added:
        return SecondLook(["until settled: every claim is decided, or at the cap, or not yet run: no seeds to add"])
    notes = [f"until settled: {len(why)} claim(s) inconclusive at the first look:"] + [f"  {w}" for w in why]
    notes += [f"  adds seeds {e['seeds'][0]}-{e['seeds'][-1]} to {e['setting']}: {', '.join(e['algorithms'])}"
              for e in added]
    if dry_run:
        more = load_spec(spec, overrides, None, settled={"added": added})
        todo = todo_runs(more.cells, False)
        return SecondLook(notes, cost=f"until settled: {cost_line(todo, jobs, cost_shares(todo, batch))}")
    write_settled(exp, added, cap)
    return SecondLook(notes, exp=load_spec(spec, overrides, None))
