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
