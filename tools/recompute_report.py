"""Recompute the report's claim verdicts from the run folders alone, without fbo's code (pandas, scipy, yaml), and
compare them with a generated report (docs/results.md or another).

For every claim row of the report's sections: the spec (YAML) names the algorithms, settings, seeds and the tuned
choices (compare/<spec>/tuned.yaml, settled.yaml); a run belongs to (algorithm, setting) when its config.yaml
carries every value the spec's base, the setting, the algorithm entry and the tuned choice set. The verdict is the
sequential design's as the rule paragraph states it: looks at 3, 6, 10 seed pairs at the O'Brien-Fleming-type
errors, the paired t interval (the sign test's interval of the median where a difference is infinite or all are
equal), holds above the margin, does not hold below it; a diverged run is the worst value. The report's own
design verdict is read from its row ("the design alone: X" where a control changed it). Then the counts: the
report's rows per kind against the recomputed ones, and the Benjamini-Hochberg control (q = 0.05 per paper) on
the recomputed p-values. Out of scope (skipped, counted): derived quantities (I_max), collapsed runs (their rule
reads whole curves), equality claims.

One exception to "without fbo's code": where several runs carry every value the spec sets (an entry at the
defaults), the run is the one whose id fbo's config resolution gives (the runs' identity, not the report's rules).

Usage: PYTHONPATH=. python tools/recompute_report.py [docs/results.md] [--root docs/results]
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.stats import binom, norm, t

LOOKS, ALPHA, MARGIN = (3, 6, 10), 0.05, 0.005


def look_alphas(cap=10):
    z = norm.ppf(1 - ALPHA / 2)
    ns = [n for n in LOOKS[:-1] if n < cap] + [cap]
    spent = [2 - 2 * norm.cdf(z / math.sqrt(n / cap)) for n in ns]
    spent[-1] = ALPHA
    return ns, [b - a for a, b in zip([0.0] + spent[:-1], spent)]


def interval(d, a, exact=False):
    if not exact and np.isfinite(d).all() and np.ptp(d) > 1e-9 * max(1.0, float(np.abs(d).max())):
        m, h = d.mean(), t.ppf(1 - a / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        return m - h, m + h
    x, n, k = np.sort(d), len(d), 0
    while k + 1 <= n // 2 and 2 * binom.cdf(k, n, 0.5) <= a:
        k += 1
    return (-math.inf, math.inf) if k == 0 else (x[k - 1], x[n - k])


def decide(lo, hi, margin):
    return "holds" if lo > margin else "does not hold" if hi < margin else "inconclusive"


def level(d, margin, exact=False):
    """The smallest error at which the interval of d decides (bisection in log space)."""
    dec = lambda a: decide(*interval(d, a, exact), margin) != "inconclusive"  # noqa: E731
    if not dec(1 - 1e-12):
        return 1.0
    lo, hi = math.log(1e-300), math.log(1 - 1e-12)
    if dec(math.exp(lo)):
        return 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if dec(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def sequential(d, margin, cap, exact=False):
    ns, alphas = look_alphas(cap)
    p, out = 1.0, ("inconclusive", 0, len(d))
    for k, (n, a) in enumerate(zip(ns, alphas)):
        if len(d) < n:
            break
        p = min(p, level(d[:n], margin, exact) * ALPHA / a)
        v = decide(*interval(d[:n], a, exact), margin)
        out = (v, k + 1, n)
        if v != "inconclusive":
            break
    return out + (min(p, 1.0),)


def flat(cfg: dict) -> dict:
    out = {k: v for k, v in cfg.items() if not isinstance(v, dict)}
    for sub in ("task_params", "hp"):
        out.update(cfg.get(sub) or {})
    return out


def same(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


class Runs:
    def __init__(self, root: Path):
        self.rows = []
        for c in root.glob("*/*/*/config.yaml"):
            s = c.parent / "summary.json"
            if s.is_file():
                self.rows.append((flat(yaml.safe_load(c.read_text())), c.parent))

    def find(self, want: dict, seed: int, root: Path):
        """The run of ``want`` at ``seed``: the one run whose config carries every value, else (several carry them:
        an entry at the defaults) the run id fbo's config resolution gives (its identity, not the report's rules)."""
        hits = [d for cfg, d in self.rows if cfg.get("seed") == seed
                and all(k in cfg and same(cfg[k], v) for k, v in want.items())]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            return None
        from fbo_cli.runs.config import resolve

        layer = {k: v for k, v in want.items() if k not in ("task", "algo")}
        d = resolve(want["task"], want["algo"], {**layer, "seed": seed, "out_dir": str(root)}, {}).run_dir
        return d if d in hits else None


def value(run: Path, metric: str, quantity: str, target, budget: int, mode: str):
    import json

    s = json.loads((run / "summary.json").read_text())
    if s.get("status") == "diverged":
        return -math.inf if mode != "min" else math.inf
    if s.get("status") != "done":
        return None
    m = pd.read_csv(run / "metrics.csv")
    m = m[m.rounds <= budget] if (m.rounds <= budget).any() else m
    if quantity == "final":
        return float(m[metric].iloc[-1])
    if quantity in ("rounds_to_target", "rounds_to_target_low"):  # the crossing lies in (previous row, this row]
        reached = (m[metric] >= target).to_numpy()
        if not reached.any():
            return math.inf
        i = int(reached.argmax())
        if quantity == "rounds_to_target" or i == 0:
            return float(m.rounds.iloc[i])
        return float(m.rounds.iloc[i - 1]) + 1
    return float(m[quantity].iloc[-1]) if quantity in m else None


def spec_cells(spec_path: str, root: Path, runs: Runs):
    spec = yaml.safe_load(Path(spec_path).read_text())
    name = spec["name"]
    tuned = yaml.safe_load((root / "compare" / name / "tuned.yaml").read_text()) \
        if (root / "compare" / name / "tuned.yaml").is_file() else {}
    settled = yaml.safe_load((root / "compare" / name / "settled.yaml").read_text()) \
        if (root / "compare" / name / "settled.yaml").is_file() else {}
    metric = spec.get("metric") or ("test_auc" if spec["task"] == "auc" else "test_acc")
    base = dict(spec.get("base") or {})
    algos = {a["name"]: a for a in spec["algorithms"]}
    settings = {s["name"]: s for s in spec.get("settings") or [{"name": "default", "set": {}}]}

    def want(algo, setting):
        a = algos[algo]
        w = {**base, **(settings[setting].get("set") or {}), **(a.get("set") or {}), "algo": a["algo"],
             "task": spec["task"]}
        ch = (tuned.get("chosen") or {}).get(algo) or {}
        ch = ch.get(setting) or ch.get(tuned.get("setting")) or {}
        w.update({k: v for k, v in ch.items() if not str(k).startswith("_")})
        return w

    def seeds(setting, algo):
        extra = [k for e in (settled or {}).get("added", []) if e["setting"] == setting and algo in e["algorithms"]
                 for k in e["seeds"]]
        return list(spec["seeds"]) + extra

    return spec, metric, want, seeds


def recompute(spec_path, claim_text, setting, root, runs):
    spec, metric, want, seeds = spec_cells(spec_path, root, runs)
    c = next((c for c in spec.get("claims") or [] if c["text"] == claim_text), None)
    if c is None or c.get("mode") == "equal" or c["metric"] not in ("final", "rounds_to_target"):
        return None
    mode, factor = c.get("mode", "max"), c.get("factor")
    s, t_ = (setting.split(" vs ") + [None])[:2] if " vs " in setting else (setting, None)
    budget = (spec.get("base") or {}).get("rounds", 10 ** 9)

    def side(algo, where, quantity):
        out = {}
        for k in seeds(where, algo):
            r = runs.find(want(algo, where), k, root)
            v = value(r, metric, quantity, spec.get("target"), budget, mode) if r else None
            if v is not None:
                out[k] = v
        return pd.Series(out, dtype=float)

    counts = c["metric"] == "rounds_to_target"
    margin = math.log(factor) if factor else float(c.get("margin") if c.get("margin") is not None
                                                   else 0.0 if counts else MARGIN)

    def verdict(qa, qb):  # rounds or iterations to a target: the exact sign test (grid-valued, censored)
        a, b = side(c["better"], s, qa), side(c["than"], t_ or s, qb)
        common = a.index.intersection(b.index).sort_values()
        if common.empty:
            return ("no data", 0, 0, 1.0)
        a, b = a[common].to_numpy(), b[common].to_numpy()
        sign = -1.0 if mode == "min" else 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            d = sign * (a - b) if factor is None else np.log(b) - np.log(a)
        d[np.isnan(d)] = 0.0
        return sequential(d, margin, max(10, len(spec["seeds"])), exact=counts)

    if not counts or (c["better"], s) == (c["than"], t_ or s):
        return verdict(c["metric"], c["metric"])
    hi, lo = "rounds_to_target", "rounds_to_target_low"
    against, towards = verdict(hi, lo), verdict(lo, hi)  # the claim's better side late, the other early; and back
    if against[0] == towards[0] or against[0] == "holds":
        return against
    return towards if towards[0] == "does not hold" else ("inconclusive",) + against[1:]


def report_rows(md: str):
    spec, paper, rows = None, None, []
    for line in md.splitlines():
        if line.startswith("## ") and not line.startswith("### "):
            paper = line[3:]
        m = re.match(r"Spec `([^`]+)`", line)
        if m:
            spec = m.group(1)
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if spec and len(cells) == 6 and cells[2].startswith("**") and cells[4].isdigit():
            v = cells[2].split("**")[1]
            alone = re.search(r"(?:the design alone|here alone): (holds|does not hold|inconclusive|no data)", cells[5])
            rows.append((paper, spec, cells[0], cells[1], v, alone.group(1) if alone else v, int(cells[4])))
    return rows


def bh(ps, q=0.05):
    m, order = len(ps), np.argsort(ps)
    k = max((r + 1 for r, i in enumerate(order) if ps[i] <= (r + 1) * q / m), default=0)
    cut = ps[order[k - 1]] if k else -1
    return [p <= cut for p in ps]


def main(argv):
    md = Path(next((a for a in argv if a.endswith(".md")), "docs/results.md"))
    root = Path(argv[argv.index("--root") + 1]) if "--root" in argv else Path("docs/results")
    runs = Runs(root)
    rows = report_rows(md.read_text())
    mism, skipped, per_paper = [], Counter(), {}
    for paper, spec, claim, setting, shown, alone, n in rows:
        if alone.startswith("see") or shown.startswith("see"):
            skipped["see"] += 1
            continue
        r = recompute(spec, claim, setting, root, runs)
        if r is None:
            skipped["out of scope"] += 1
            continue
        per_paper.setdefault(paper, []).append((shown, r))
        if r[0] != alone or (r[0] != "no data" and r[2] != n):
            mism.append(f"{spec} | {claim[:60]} | {setting}: report {alone} ({n} seeds), recomputed {r[0]} "
                        f"({r[2]} seeds, look {r[1]}, p = {r[3]:.3g})")
    kept = Counter()
    for paper, vs in per_paper.items():
        ps = [r[3] for _, r in vs if r[0] != "no data"]
        kept[paper] = sum(bh(ps)) if ps else 0
        shown_decided = sum(s in ("holds", "does not hold") for s, r in vs)
        if shown_decided > kept[paper]:
            mism.append(f"{paper}: the report shows {shown_decided} decided, BH on the recomputed p keeps "
                        f"{kept[paper]}")
    print(f"{len(rows)} claim rows read from {md}; recomputed {sum(map(len, per_paper.values()))}; skipped "
          + ", ".join(f"{v} {k}" for k, v in skipped.items()))
    print(f"decided after BH (recomputed, the rows in scope): {sum(kept.values())}; the report shows "
          f"{sum(s in ('holds', 'does not hold') for vs in per_paper.values() for s, _ in vs)} of these rows decided")
    for m in mism:
        print("MISMATCH", m)
    print(f"mismatches: {len(mism)}")


if __name__ == "__main__":
    main(sys.argv[1:])
