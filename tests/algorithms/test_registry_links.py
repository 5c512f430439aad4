"""Adding an algorithm is its file, its registry line, a spec that runs it and a bench case: this test
holds the registry, the experiment specs and `make bench` together."""

from pathlib import Path

import yaml

from fbo_cli.algorithms import REGISTRY
from fbo_cli.runs.config import resolve

ROOT = Path(__file__).resolve().parents[2]
EXEMPT: dict[str, str] = {}  # algorithm -> why it has no spec or no bench case


def test_every_algorithm_has_a_spec_and_a_bench_case():
    in_specs = {a["algo"] for f in (ROOT / "experiments").glob("*.yaml")
                for a in (yaml.safe_load(f.read_text()) or {}).get("algorithms") or []}
    cases = yaml.safe_load((ROOT / "experiments" / "bench.yaml").read_text())["cases"]
    in_bench = {c["algo"] for c in cases} | {"fednest", "aggitd"}  # the bench's own spine cases
    for name in REGISTRY:
        if name in EXEMPT:
            continue
        assert name in in_specs, f"{name}: no experiment spec runs it (add one, or an EXEMPT reason)"
        assert name in in_bench, f"{name}: no case in experiments/bench.yaml (add one, or an EXEMPT reason)"
    for c in cases:  # every bench case resolves (a typo would only show when make bench runs)
        resolve(c["task"], c["algo"], c.get("set") or {})
