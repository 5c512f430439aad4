"""The evidence behind the report: copying finished reproduction runs into docs/results/ and pruning
what no spec refers to.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..spec import load_spec
from .papers import PAPERS

EVIDENCE_FILES = ("config.yaml", "metrics.csv", "summary.json")


SPEC_FILES = ("tuned.yaml", "settled.yaml", "tuning.csv", "ranking.csv", "tuning.partial.yaml", "tuning.partial.csv")


# CPU, GPU, and the latency-bound cases on the code before the speed work and on this code (fbo bench --against)
BENCH_FILES = ("bench/bench.md", "bench/cuda/bench.md", "bench/ab.md")

# the last reproduction check (make reproduce-check): committed runs rerun and compared with the evidence
CHECK_FILES = ("check/check.md", "check/check.csv")


# --------------------------------------------------------------------------------------------------
# Evidence


def collect_evidence(results: Path, evidence: Path, papers=PAPERS) -> int:
    """Copy every finished reproduction run's compact files (and each spec's tuning record) from
    ``results`` into ``evidence`` (same layout); returns the number of runs copied."""
    n = 0
    for paper in papers:
        for spec in paper.specs:
            if not Path(spec).is_file():
                continue
            exp = load_spec(spec, {"out_dir": str(results)})
            for c in exp.cells:
                src = c.cfg.run_dir
                if not all((src / f).is_file() for f in EVIDENCE_FILES):
                    continue
                dst = evidence / src.relative_to(results)
                dst.mkdir(parents=True, exist_ok=True)
                for f in EVIDENCE_FILES:
                    shutil.copy2(src / f, dst / f)
                n += 1
            here = results / "compare" / exp.name
            for f in SPEC_FILES:
                src = here / f
                if src.is_file():
                    (evidence / "compare" / exp.name).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, evidence / "compare" / exp.name / f)
                elif f.startswith("tuning.partial") and (here / "tuned.yaml").is_file():
                    (evidence / "compare" / exp.name / f).unlink(missing_ok=True)  # that tuning finished
    for paper in papers:  # count tables written by `fbo figure` (ZO-HFL Fig. 1)
        for f in paper.counts:
            if (results / f).is_file():
                (evidence / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(results / f, evidence / f)
    for f in BENCH_FILES + CHECK_FILES:  # the bench's and the check's own tables, shown as they are
        if (results / f).is_file():
            (evidence / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(results / f, evidence / f)
    return n


def prune_evidence(evidence: Path, papers=PAPERS) -> list[Path]:
    """Remove the run directories under ``evidence`` that no reproduction spec refers to any more (e.g.
    runs with step sizes a later tuning replaced), so that the committed evidence is what the report
    shows; returns the removed directories. Run directories are those holding a ``config.yaml``."""
    keep: set[Path] = set()
    for paper in papers:
        for spec in paper.specs:
            if Path(spec).is_file():
                keep.update(c.cfg.run_dir.resolve() for c in load_spec(spec, {"out_dir": str(evidence)}).cells)
    removed = []
    for cfg in sorted(evidence.glob("*/*/*/config.yaml")):
        d = cfg.parent
        if d.resolve() not in keep:
            shutil.rmtree(d)
            removed.append(d)
    return removed


# --------------------------------------------------------------------------------------------------
# Verdicts
