"""One experiment's part of the report, built from its runs: the table, the claims' verdicts, the
paper's numbers, compute, missing runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ...errors import UsageError
from ...grids.compare import write_report
from ...grids.derived import derived_tables
from ...grids.resolution import rounds_verdict
from ...grids.spec import Experiment, tuned_entry
from ...grids.verdicts import Verdict, paper_rows, paper_tolerance, run_summaries, tuning_basis
from .control import priced, unmargined
from .numbers import number_notes


@dataclass
class Section:
    spec: str
    exp: Experiment | None
    table_md: str = ""
    verdicts: list[tuple[str, str, Verdict]] | None = None  # (claim, setting, verdict with its numbers)
    paper_rows: list[tuple[str, str, str, str, str, str]] | None = None
    attribution_rows: list[tuple] = field(default_factory=list)  # :func:`.attribution.shares`
    paper_notes: list[str] = field(default_factory=list)  # per paper row: seeds its equivalence needs, a collapse
    missing: list[str] | None = None
    figures: list[tuple[Path, str]] | None = None  # (the figure's SVG, its caption)
    compute: str = ""
    error: str = ""
    derived_md: str = ""  # tables derived from the runs (``derived:`` in the spec)
    witness_md: str = ""  # the paper's own code beside ours (``witness:`` in the spec)
    tolerance: tuple[float, str] = (0.02, "")  # the paper's numbers' tolerance and why (:func:`paper_tolerance`)
    before_twin: dict = field(default_factory=dict)  # (claim, setting) -> its verdict before its held-out twin's


def untuned(exp: Experiment, claim, settings: list[str]) -> str:
    """The tuned sides of ``claim`` that have no choice yet in ``settings`` (no entry in ``tuned.yaml``: their runs
    are at the spec's values, not tuned ones), in words; '' when every tuned side has one."""
    tuned = [a.name for a in exp.algorithms if a.tune and a.name in (claim.better, claim.than)]
    return "; ".join(f"{a} in {s}" for a in dict.fromkeys(tuned) for s in settings
                     if not tuned_entry(exp.tuned, a, s).values and "none" not in tuned_entry(exp.tuned, a, s).notes)


def compute_line(runs: pd.DataFrame, tuning_csv: Path) -> str:
    """What the section's runs cost, from their summaries: training and evaluation core-minutes (one
    run holds one core), and the tuning runs' from ``tuning.csv`` (recorded since the times were added
    to it; older tuning records have none, and the line says so)."""
    train = sum(float(t or 0) for t in run_summaries(runs, "train_time_s"))
    ev = sum(float(t or 0) for t in run_summaries(runs, "eval_time_s"))
    devices = sorted(set(str(d) for d in run_summaries(runs, "device")))
    line = (f"{len(runs)} runs, {(train + ev) / 60:.1f} core-minutes ({train / 60:.1f} training, {ev / 60:.1f} "
            f"evaluation), on {', '.join(devices) or 'cpu'}")
    if tuning_csv.is_file():
        t = pd.read_csv(tuning_csv)
        t = t[t.status.isin(["done", "diverged"])]
        if "train_time_s" in t and t["train_time_s"].notna().all():
            tt = float(t["train_time_s"].sum() + t["eval_time_s"].fillna(0).sum())
            line += f"; tuning {len(t)} runs, {tt / 60:.1f} core-minutes; {(train + ev + tt) / 60:.1f} in all"
        else:
            line += f"; tuning {len(t)} runs, their cost not recorded (tuned before tuning.csv kept it)"
    return line


def build_section(spec: str, root: Path, work: Path, figdir: Path | None = None, evidence=None) -> Section:
    """One spec's section; its curves figures are drawn into ``figdir`` (none without it), except for a spec
    whose figure is one of the papers' figures (:mod:`.figures`), which the paper's page shows."""
    from ..paper_figures import FIGURES
    from .figures import Evidence

    sec = Section(spec, None, verdicts=[], paper_rows=[], missing=[], figures=[])
    try:
        exp, runs, curves = (evidence or Evidence(root))(spec)
    except UsageError as e:
        sec.error = str(e)
        return sec
    sec.exp = exp
    gone = runs[runs.status == "not run"]
    bad = gone["corrupt"] if "corrupt" in gone else [None] * len(gone)  # present, but failing its record
    sec.missing = [f"{a} · {s} · seed {k}" + (f" (tampered or damaged: {w})" if isinstance(w, str) else "")
                   for a, s, k, w in zip(gone.algorithm, gone.setting, gone.seed, bad)]
    runs = runs[runs.status != "not run"]
    if runs.empty:
        return sec
    out = work / exp.name
    from .tuning import how_chosen

    sec.table_md = how_chosen(write_report(exp, out, plots=False), exp)  # the table comes back as data
    if figdir is not None and not any(spec in f.specs and f.kind in ("curves", "codasca") for f in FIGURES):
        sec.figures = section_figures(exp, runs, curves, figdir)
    sec.compute = compute_line(runs, root / "compare" / exp.name / "tuning.csv")
    derived = derived_tables(exp, runs)  # quantities read across settings (I_max): their tables
    if "imax" in exp.derived:
        from .codasca_section import imax_table, windows

        imax_table(out, expected=windows(exp.settings), plot=False)
        sec.derived_md = (out / "imax.md").read_text().replace("# I_max", "**I_max**", 1)
    from .tuning import tuning_records

    records = tuning_records(exp)
    for claim in exp.claims:
        table, names, read_across = derived.get(claim.metric, (runs, [s.name for s in exp.settings], None))
        exact = claim.metric in derived  # a derived quantity is grid-valued (I_max): the exact test
        basis = tuning_basis(exp, claim)
        pairs = claim.across or [[s, None] for s in names if not claim.settings or s in claim.settings]
        for s, t in pairs:  # across: one setting against another, seed by seed
            v = priced(rounds_verdict(table, claim, s, t, len(exp.seeds), exact)._replace(tuning=basis),
                       runs if exact else table, claim, s, t, read_across)
            v = unmargined(exp, claim, [s] if t is None else [s, t], v, records)
            if basis and (waiting := untuned(exp, claim, [s] if t is None else [s, t])):
                v = Verdict("no data", f"not tuned yet: {waiting} (run `fbo tune`); the claim is about tuned steps",
                            "", 0, tuning=basis)
            sec.verdicts.append((claim.text, s if t is None else f"{s} vs {t}", v))
    if exp.attribution:
        from .attribution import attribution_md, shares

        sec.derived_md = "\n".join(x for x in (sec.derived_md, attribution_md(exp, runs)) if x)
        sec.attribution_rows = shares(exp, runs)
    sec.tolerance = paper_tolerance(exp)
    sec.paper_rows = paper_rows(exp, runs, sec.tolerance[0])
    sec.paper_notes = number_notes(exp, runs, sec.paper_rows, sec.tolerance[0])
    if exp.witness:
        from .witness_table import witness_md

        png = figdir / f"{exp.name}_witness.png" if figdir is not None else None
        sec.witness_md = witness_md(exp, runs, curves, root, png)
        if sec.witness_md and png is not None:
            sec.figures.append((png.with_suffix(".svg"), "Test accuracy against communication rounds: the public "
                                "FedNest code (dashed, each seed) and our FedNest at the same steps (each seed)"))
    return sec


def section_figures(exp: Experiment, runs: pd.DataFrame, curves: dict, figdir: Path) -> list[tuple[Path, str]]:
    """The section's curves (SVG, PDF, PNG in ``figdir``): the spec's x axis, a zoom on the last half when the
    lines' ends are squeezed together (shown first then: the whole axis hides their differences), and each
    ``x_also`` axis; with their captions."""
    from dataclasses import replace

    from ...grids.compare import ZOOM_BELOW
    from ...grids.plots import caption, plot_experiment

    out = []
    path = figdir / f"{exp.name}.png"
    squeeze = plot_experiment(exp, curves, path, runs, title=False)  # the section's heading is its title
    out.append((path.with_suffix(".svg"), caption(exp)))
    if squeeze < ZOOM_BELOW:
        zoom = figdir / f"{exp.name}_zoom.png"
        plot_experiment(exp, curves, zoom, runs, tail=0.5, title=False)
        out.insert(0, (zoom.with_suffix(".svg"), caption(exp, tail=0.5)))  # the spread is small: the zoom first
    for xa in exp.x_also:
        other = replace(exp, x=xa)
        p = figdir / f"{exp.name}_{xa}.png"
        plot_experiment(other, curves, p, runs, title=False)
        out.append((p.with_suffix(".svg"), caption(other)))
    return out
