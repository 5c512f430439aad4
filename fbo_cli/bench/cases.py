"""The bench's cases, all in one file (``experiments/bench.yaml``): ``cases`` (each: ``name``, ``task``,
``algo``, ``set``: any run key or hyperparameter; ``quick: true`` for the cases of ``--quick``),
``growth`` (FedNest's growth sweeps: ``sweep``, ``M`` participating clients), ``profile`` (the names
``--profile`` profiles), ``ab`` (the substrings of the latency-bound cases ``--against`` times) and
``reference`` (the name of the case the per-client-loop reference and the whole-run line stand beside)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Cases:
    cases: list[dict]
    growth: list[dict]
    profile: list[str]
    ab: list[str]
    reference: dict


def load_cases(path: Path) -> Cases:
    d = yaml.safe_load(Path(path).read_text()) or {}
    cases = d.get("cases") or []
    ref = next((c for c in cases if c["name"] == d.get("reference")), None)
    if ref is None:
        raise ValueError(f"{path}: 'reference' must name one of its cases, got {d.get('reference')!r}")
    return Cases(cases, d.get("growth") or [], list(d.get("profile") or []), list(d.get("ab") or []), ref)
