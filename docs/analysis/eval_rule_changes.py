"""What issue 61's evaluation and budget rules change in the committed evidence, without rerunning a run:
every committed run's columns re-derived from its metrics.csv (fbo_cli.runs.table.read_columns) against its
summary.json, each compare's round grids per (algorithm, setting) where a claim on rounds to a target compares
two grids, and every committed verdict on rounds to a target, before (rounds to target read on every row, the
upper end only) and after (within the budget, as an interval: fbo_cli.grids.resolution.rounds_verdict).

    PYTHONPATH=. python docs/analysis/eval_rule_changes.py [docs/results] > docs/analysis/eval_rule_changes.txt
"""

import json
import sys
from pathlib import Path

import pandas as pd
import yaml

from fbo_cli.errors import UsageError
from fbo_cli.evidence.report.figures import Evidence
from fbo_cli.grids.resolution import rounds_verdict
from fbo_cli.grids.verdicts import claim_verdict
from fbo_cli.runs.table import read_columns, rounds_to_target

root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")


def same(a, b) -> bool:
    a, b = (None if v is None or v != v else v for v in (a, b))  # NaN (a frame's "never") is None
    return (a is None and b is None) or (a is not None and b is not None and abs(float(a) - float(b)) < 1e-12)


print("## Runs whose summary columns the budget rule changes (re-derived from metrics.csv)")
n = 0
for s_path in sorted(root.glob("*/*/*/summary.json")):
    s = json.loads(s_path.read_text())
    m_path, c_path = s_path.with_name("metrics.csv"), s_path.with_name("config.yaml")
    if not m_path.is_file() or not c_path.is_file():
        continue
    n += 1
    cfg = yaml.safe_load(c_path.read_text())
    cols = read_columns(pd.read_csv(m_path), s["metric"], cfg.get("target"), cfg["rounds"])
    diff = {k: (s.get(k), cols[k]) for k in ("final", "best", "rounds_to_target") if not same(s.get(k), cols[k])}
    if diff:
        print(f"- {s_path.parent.relative_to(root)}: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items()))
print(f"({n} runs read)\n")

print("## Verdicts on rounds to a target (old: every row, the upper end; new: within the budget, as an interval)")
ev = Evidence(root)
for spec in sorted(Path("experiments").glob("*.yaml")):
    claims = None
    try:
        exp, runs, _ = ev(str(spec))
    except UsageError as e:
        print(f"- {spec.stem}: not loaded ({e})")
        continue
    claims = [c for c in exp.claims if c.metric == "rounds_to_target"]
    if not claims or runs.empty or "rounds_to_target" not in runs:
        continue
    grids = {}
    for c in exp.cells:
        f = c.cfg.run_dir / "summary.json"
        rpi = json.loads(f.read_text()).get("rounds_per_iteration") if f.is_file() else None
        grids[(c.algorithm, c.setting)] = c.cfg.run.eval_rounds or (c.cfg.run.eval_every * rpi if rpi else None)
    old = runs.copy()
    for i, r in old.iterrows():
        m = Path(str(r.run_dir)) / "metrics.csv"
        if r.status in ("done", "diverged", "collapsed") and m.is_file():
            old.loc[i, "rounds_to_target"] = rounds_to_target(pd.read_csv(m), exp.metric, exp.target)
    for claim in claims:
        pairs = claim.across or [[s.name, None] for s in exp.settings if not claim.settings or s.name in claim.settings]
        for s, t in pairs:
            a = claim_verdict(old, claim, s, t, len(exp.seeds))
            b = claim_verdict(runs, claim, s, t, len(exp.seeds))
            c = rounds_verdict(runs, claim, s, t, len(exp.seeds))
            g1, g2 = grids.get((claim.better, s)), grids.get((claim.than, t or s))
            mark = "CHANGES" if c.verdict != a.verdict else "same"
            print(f"- {exp.name} | {claim.better} vs {claim.than} | {s if t is None else f'{s} vs {t}'} | grids "
                  f"{g1} vs {g2} rounds | {a.verdict} -> budget {b.verdict} -> interval {c.verdict} [{mark}]"
                  + (f" (factor {claim.factor})" if claim.factor else ""))


def on_grid(m: pd.DataFrame, every: int, budget: int, rpi: int | None, grid: int | None) -> pd.DataFrame | None:
    """The rows a run would have on a grid of ``every`` rounds (fbo_cli.runs.schedule.evaluation_due), from the rows
    it has (its own grid ``grid``); None where they cannot say: neither every iteration evaluated nor its grid a
    divisor of ``every`` (where only the latter holds, a last iteration within the budget that it did not evaluate
    is missing: an approximation)."""
    its = m["iterations"].tolist()
    if not (its == list(range(its[0], its[0] + len(its))) or (grid and every % grid == 0)):
        return None
    keep, last, r = [0], 0, m["rounds"].tolist()
    for i in range(1, len(r)):
        if r[i] // every > last // every or (rpi is not None and r[i] <= budget < r[i] + rpi) or i == len(r) - 1:
            keep.append(i)
            last = r[i]
    return m.iloc[keep]


print("\n## If the committed compares set eval_rounds (each setting's coarsest grid): runs whose rounds to target "
      "move, and the verdicts on rounds")
for spec in sorted(Path("experiments").glob("*.yaml")):
    try:
        exp, runs, _ = ev(str(spec))
    except UsageError:
        continue
    claims = [c for c in exp.claims if c.metric == "rounds_to_target"]
    if not claims or runs.empty or exp.target is None:
        continue
    sim, moved, unknown = runs.copy(), [], 0
    grids, rpis = {}, {}
    for c in exp.cells:
        f = c.cfg.run_dir / "summary.json"
        rpi = json.loads(f.read_text()).get("rounds_per_iteration") if f.is_file() else None
        rpis[str(c.cfg.run_dir)] = rpi
        grids.setdefault(c.setting, set()).add(c.cfg.run.eval_every * rpi if rpi else None)
    for i, r in sim.iterrows():
        m_path = Path(str(r.run_dir)) / "metrics.csv"
        if r.status not in ("done", "diverged", "collapsed") or not m_path.is_file():
            continue
        G = max(g for g in grids[r.setting] if g)
        cfg = yaml.safe_load((Path(str(r.run_dir)) / "config.yaml").read_text())
        rpi = rpis.get(str(r.run_dir))
        rows = on_grid(pd.read_csv(m_path), G, cfg["rounds"], rpi, cfg["eval_every"] * rpi if rpi else None)
        if rows is None:
            unknown += 1
            continue
        cols = read_columns(rows, exp.metric, exp.target, cfg["rounds"])
        if not same(cols["rounds_to_target"], r.rounds_to_target):
            moved.append(f"{r.algorithm} | {r.setting} | seed {r.seed}: {r.rounds_to_target} -> "
                         f"{cols['rounds_to_target']}")
        sim.loc[i, "rounds_to_target"], sim.loc[i, "rounds_to_target_low"] = (cols["rounds_to_target"],
                                                                              cols["rounds_to_target_low"])
    print(f"- {exp.name} (grid {', '.join(f'{k}: {max(g for g in v if g)}' for k, v in grids.items())} rounds): "
          f"{len(moved)} runs' rounds to target move" + (f" ({unknown} not derivable)" if unknown else ""))
    for line in moved:
        print(f"  - {line}")
    for claim in claims:
        pairs = claim.across or [[s.name, None] for s in exp.settings if not claim.settings or s.name in claim.settings]
        for s, t in pairs:
            a = rounds_verdict(runs, claim, s, t, len(exp.seeds))
            b = rounds_verdict(sim, claim, s, t, len(exp.seeds))
            if a.verdict != b.verdict:
                print(f"  - verdict {claim.better} vs {claim.than} | {s if t is None else f'{s} vs {t}'}"
                      + (f" (factor {claim.factor})" if claim.factor else "") + f": {a.verdict} -> {b.verdict}")
