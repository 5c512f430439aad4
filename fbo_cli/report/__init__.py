"""``fbo report``: one report over every paper's reproduction, from run directories only.

The report never runs anything. Its input is a results root (``results/`` after the reproductions,
or ``docs/results/``, the committed evidence: each reproduction run's resolved ``config.yaml``,
``metrics.csv`` and ``summary.json``, plus each spec's ``tuned.yaml``/``tuning.csv``; ``fbo report
--collect`` copies them there from ``results/``). For every paper in :data:`PAPERS` and each of its
experiment specs it aggregates the runs exactly as ``fbo compare`` does, and writes:

* a Markdown report (``docs/results.md``): per paper, the table (mean ± std over seeds, the paper's
  numbers beside ours), how the hyperparameters were chosen, the budget, seeds and compute, which
  runs are missing, and a verdict per claim computed by the rule stated in the report;
* a self-contained HTML page (figures embedded) with the same content and the figures.

Claims are data in the specs (``claims:``): ``{text, metric, better, than, mode}`` says that
algorithm ``better`` beats ``than`` on ``metric`` (a column of ``runs.csv``: ``final``,
``rounds_to_target``, ...; ``mode: min`` or ``max``) in every setting of the spec; ``mode: equal``
says that the two end within the margin of each other (a finding of no difference). The rule: per
setting, the pairs of runs with the same random seed are compared (a pair is a win when ``better``
is ahead by more than a margin: 0.005 for metrics that are fractions, 0 for rounds or iterations to
the target; a claim may set ``margin``); the claim **holds in every seed** when ``better`` wins
every pair, **holds in the mean** when it wins on the mean over seeds (the median for rounds or
iterations to the target) but not every pair, **does not hold** otherwise; **no data** when a side
has no finished run. A run that never reaches the target counts as +∞ rounds, and a diverged run as
the worst value (it loses its pair); failed runs are left out. Paper numbers are
compared by the rule in :func:`match_paper`.
"""

from __future__ import annotations

import base64
import html
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..compare import collect, write_report
from ..errors import UsageError
from ..results import md_row
from ..spec import Experiment, load_spec


@dataclass(frozen=True)
class Paper:
    key: str
    title: str  # method, authors, venue
    specs: tuple[str, ...]  # experiment specs (paths relative to the repository root)
    fidelity: str  # the start of its section heading in docs/fidelity.md
    counts: tuple[str, ...] = ()  # client x class count tables under the evidence root (ZO-HFL's Fig. 1)
    numbers: str = ""  # where the paper's own numbers are, or why none stand beside ours
    # a finding that leads the paper's part: why (text), then the verdicts of every claim whose text
    # starts with ``finding_claims``, computed from the runs
    finding: str = ""
    finding_claims: str = ""


PAPERS: tuple[Paper, ...] = (
    Paper("aggitd", "FBO-AggITD vs FedNest: Xiao & Ji, ICML 2023",
          ("experiments/aggitd_table2.yaml", "experiments/aggitd_fig3_mnist.yaml", "experiments/aggitd_fig4_mnist.yaml",
           "experiments/aggitd_table2_fmnist_500.yaml", "experiments/aggitd_table2_fmnist.yaml"),
          "FBO-AggITD (Xiao & Ji",
          numbers="Paper numbers: Table 2 (rounds to 90% and final test accuracy, MNIST; five legible cells) and "
                  "Fig. 6's MNIST-CNN training accuracy; Figs. 1, 3, 4 are curves with no numbers, so their claims "
                  "are orderings."),
    Paper("fedbio", "FedBiO and FedBiOAcc: Li, Huang & Huang, NeurIPS 2023 (arXiv 2302.06701)",
          ("experiments/fedbio_hyperclean_fmnist_quick.yaml", "experiments/fedbio_hyperclean_fmnist.yaml",
           "experiments/fedbio_local_hyperrep_quick.yaml", "experiments/fedbio_local_hyperrep.yaml"),
          "FedBiO (Li, Huang & Huang",
          numbers="Paper numbers: none. The text we have has no experiments section, no table of results and no "
                  "figure, so every experiment below is our reconstruction and nothing is matched numerically."),
    Paper("adafbio", "AdaFBiO: Huang, arXiv 2211.01122",
          ("experiments/adafbio_hyperclean_quick.yaml", "experiments/adafbio_hyperclean.yaml",
           "experiments/adafbio_hyperrep.yaml"),
          "AdaFBiO and FedBiO, local lower level",
          numbers="Paper numbers: none. AdaFBiO prints no table of results and no figure (its only table is "
                  "the complexity comparison), so the experiments below are reconstructions and their claims are "
                  "that comparison's orderings."),
    Paper("codasca", "CODA+ and CODASCA: Yuan, Guo, Xu, Ying & Yang, ICML 2021",
          ("experiments/codasca_fig1_synth_val.yaml", "experiments/codasca_fig1_synth.yaml",
           "experiments/codasca_fig1_fmnist.yaml"),
          "CODA+ and CODASCA",
          numbers="Paper numbers: Figure 1's I_max on ImageNet-IH (128 vs 32 at K = 16, 512 vs 128 at K = 8); "
                  "ImageNet-IH and CIFAR100-IH are not available offline, so those numbers are context beside our "
                  "synthetic and Fashion-MNIST analogs, never a verdict. The first section tunes each method's "
                  "step size on a validation split; the two after it are earlier evidence whose eta = 1.0 was "
                  "chosen for CODA+ alone on test AUC, at the top of its grid (docs/fidelity.md)."),
    Paper("zohfl", "ZO-HFL: Qiu, Kim & Yousefian, arXiv 2504.01839",
          ("experiments/zohfl_table1_mnist.yaml", "experiments/zohfl_table1_mnist_x0zero.yaml",
           "experiments/zohfl_probe_mnist.yaml",
           "experiments/zohfl_table1_fmnist.yaml", "experiments/zohfl_table1_fmnist_x0zero.yaml",
           "experiments/zohfl_fig2.yaml"),
          "ZO-HFL (Qiu",
          numbers="Paper numbers: Table I (final test accuracy, MNIST, Fashion-MNIST and CIFAR-10 columns); each "
                  "gets a verdict against ours on the same dataset. Figs. 1-2 are a partition plot and loss curves.",
          finding="ZO-HFL ends where server-only SGD ends: in these settings the clients' signal does not move "
                  "the server's model x. The clients reach x only through a zeroth-order estimate of their "
                  "penalty's gradient, one random direction per client and round (q = 1) in d = 7,840 dimensions "
                  "(a 784 x 10 linear model), smoothing radius eta = 0.1, penalty weight lambda = 1: an unbiased "
                  "estimate of the smoothed gradient whose variance grows with d (Alg. 1 of the paper; "
                  "docs/fidelity.md). The probe section below asks whether a 10x larger penalty weight, a 10x "
                  "larger radius, or both, let the clients help (from x0 = 0).",
          finding_claims="the finding: ZO-HFL ends where server-only SGD ends",
          counts=("figures/zohfl_fig1_mnist_a0.1.csv", "figures/zohfl_fig1_fashion-mnist_a0.1.csv")),
)


def fidelity_anchor(prefix: str, path: Path = Path("docs/fidelity.md")) -> str:
    """GitHub's anchor of the first ``## `` heading of docs/fidelity.md that starts with ``prefix``."""
    for line in path.read_text().splitlines() if path.is_file() else []:
        if line.startswith("## " + prefix):
            slug = re.sub(r"[^\w\- ]", "", line[3:].strip().lower())
            return slug.replace(" ", "-")
    return ""


EVIDENCE_FILES = ("config.yaml", "metrics.csv", "summary.json")
SPEC_FILES = ("tuned.yaml", "tuning.csv")
BENCH_FILES = ("bench/bench.md", "bench/cuda/bench.md")  # CPU, GPU


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
            for f in SPEC_FILES:
                src = results / "compare" / exp.name / f
                if src.is_file():
                    (evidence / "compare" / exp.name).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, evidence / "compare" / exp.name / f)
    for paper in papers:  # count tables written by `fbo figure` (ZO-HFL Fig. 1)
        for f in paper.counts:
            if (results / f).is_file():
                (evidence / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(results / f, evidence / f)
    for f in BENCH_FILES:  # the bench's own tables (make bench), shown as they are
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


def claim_verdict(runs: pd.DataFrame, claim: dict, setting: str) -> tuple[str, str]:
    """(verdict, the numbers behind it) of one claim in one setting; the rule is in the module doc."""
    metric, mode = claim["metric"], claim.get("mode", "max")
    sign = 1.0 if mode == "max" else -1.0
    fill = -math.inf if mode == "max" else math.inf  # never reaching the target is the worst value

    def side(name):
        g = runs[(runs.algorithm == name) & (runs.setting == setting) & runs.status.isin(["done", "diverged"])]
        if metric not in g:
            return pd.Series(dtype=float)
        v = g.set_index("seed")[metric].astype(float).fillna(fill)
        v[(g.status == "diverged").to_numpy()] = fill  # a diverged run is the method's worst outcome
        return v

    a, b = side(claim["better"]), side(claim["than"])
    if a.empty or b.empty:
        return "no data", ""
    counts = metric.endswith("to_target")
    margin = claim.get("margin", 0.0 if counts else MARGIN)  # a win must exceed it
    common = a.index.intersection(b.index)

    def beats(u: float, v: float) -> bool:  # equal values (e.g. both never reach the target) are no win
        return u != v and sign * (u - v) > margin

    center = (lambda v: v.median()) if counts else (lambda v: v.mean())
    ma, mb = center(a), center(b)
    if mode == "equal":  # a finding of no difference: every pair within the margin
        near = int(sum(abs(a[s] - b[s]) <= margin for s in common))
        detail = f"{_fmt(ma)} vs {_fmt(mb)}; within {margin:g} in {near}/{len(common)} seeds"
        if len(common) and near == len(common):
            return "holds in every seed", detail
        return ("holds in the mean" if abs(ma - mb) <= margin else "does not hold"), detail
    wins = int(sum(beats(a[s], b[s]) for s in common))
    detail = f"{_fmt(ma)} vs {_fmt(mb)}; wins {wins}/{len(common)} seeds"
    if len(common) and wins == len(common):
        return "holds in every seed", detail
    if beats(ma, mb):
        return "holds in the mean", detail
    return "does not hold", detail


MARGIN = 0.005  # half a point of accuracy or AUC: a smaller difference is no win


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if math.isinf(v):
        return "never" if v > 0 else "−∞ (a run diverged)"
    return f"{v:.4g}"


def match_paper(ours: pd.Series, paper: float, tolerance: float) -> str:
    """Our mean is **within** the paper's number when ``|mean - paper| <= max(2 std, tolerance)``
    (std over seeds; the tolerance is the spec's ``tolerance``, default 0.02 for fractions, 10% of the
    paper's value for counts), else **above** or **below**."""
    v = ours.dropna().astype(float)
    v = v[np.isfinite(v)]
    if v.empty:
        return "no data"
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    tol = max(2 * sd, tolerance if paper <= 1 else max(tolerance, 0.1 * abs(paper)))
    d = float(v.mean()) - paper
    return "within" if abs(d) <= tol else ("above" if d > 0 else "below")


# --------------------------------------------------------------------------------------------------
# The report


@dataclass
class Section:
    spec: str
    exp: Experiment | None
    table_md: str = ""
    verdicts: list[tuple[str, str, str, str]] | None = None  # (claim, setting, verdict, numbers)
    paper_rows: list[tuple[str, str, str, str, str, str]] | None = None
    missing: list[str] | None = None
    figures: list[Path] | None = None
    compute: str = ""
    error: str = ""
    derived_md: str = ""  # tables derived from the runs (``derived:`` in the spec)


def build_section(spec: str, root: Path, work: Path) -> Section:
    sec = Section(spec, None, verdicts=[], paper_rows=[], missing=[], figures=[])
    try:
        exp = load_spec(spec, {"out_dir": str(root)})
    except UsageError as e:
        sec.error = str(e)
        return sec
    sec.exp = exp
    runs, _ = collect(exp)
    gone = runs[runs.status == "not run"]
    sec.missing = [f"{a} · {s} · seed {k}" for a, s, k in zip(gone.algorithm, gone.setting, gone.seed)]
    runs = runs[runs.status != "not run"]
    if runs.empty:
        return sec
    out = work / exp.name
    write_report(exp, out)
    sec.table_md = (out / "table.md").read_text().split("\n", 2)[2]  # drop the title line
    sec.figures = [out / "curves.png", *[out / f"curves_{xa}.png" for xa in ("zoom", *exp.x_also)]]
    secs = runs.get("train_time_s", pd.Series(dtype=float)).fillna(0).sum()
    devices = sorted(set(str(d) for d in _summaries(runs, "device")))
    sec.compute = f"{len(runs)} runs, {secs / 60:.1f} min of training in all, on {', '.join(devices) or 'cpu'}"
    derived = {}
    if "imax" in exp.derived:
        from .codasca import imax_per_seed, imax_table, windows

        imax_table(out, expected=windows(exp.settings))
        sec.derived_md = (out / "imax.md").read_text().replace("# I_max", "**I_max**", 1)
        sec.figures.append(out / "imax.png")
        derived["I_max"] = (imax_per_seed(runs, windows(exp.settings)),
                            [f"K={k}" for k in sorted(windows(exp.settings), reverse=True)])
    for claim in exp.claims:
        table, names = derived.get(claim["metric"], (runs, [s["name"] for s in exp.settings]))
        for s in names:
            if claim.get("settings") and s not in claim["settings"]:
                continue
            v, nums = claim_verdict(table, claim, s)
            sec.verdicts.append((claim["text"], s, v, nums))
    sec.paper_rows = paper_rows(exp, runs, exp.tolerance)
    return sec


PAPER_KEYS = {"final": "final", "rounds_to_90": "rounds_to_target", "rounds_to_target": "rounds_to_target"}


def paper_rows(exp: Experiment, runs: pd.DataFrame, tol: float) -> list[tuple[str, ...]]:
    """(algorithm, setting, quantity, paper's value, ours, verdict) per number of the spec's ``reference``.
    A number gets a verdict (:func:`match_paper`) only when our runs of that setting are on the paper's
    dataset (``reference_on.dataset``) and, for rounds to a target, with the paper's target; otherwise
    it stands as context."""
    on = exp.reference_on or {}
    paper_sets = on.get("dataset")
    paper_sets = [paper_sets] if isinstance(paper_sets, str) else list(paper_sets or [])
    datasets = {(c.algorithm, c.setting): c.cfg.run.dataset for c in exp.cells}
    rows = []
    for a, per in (exp.reference or {}).items():
        for s, vals in (per or {}).items():
            cell = runs[(runs.algorithm == a) & (runs.setting == s)]
            g = cell[cell.status == "done"]
            lost = ", ".join(f"{n} {k}" for k in ("diverged", "failed") if (n := int((cell.status == k).sum())))
            ours_ds = datasets.get((a, s), "?")
            for k, v in vals.items():
                c = PAPER_KEYS.get(k, k)
                if not isinstance(v, (int, float)):
                    continue
                counts = c == "rounds_to_target"
                pt, ot = on.get("target"), exp.target
                what = k if not counts else f"rounds to {pt:.0%}" if pt == ot and pt is not None else \
                    f"rounds to target (paper's {pt if pt is None else f'{pt:.0%}'}, ours {ot:.0%})"
                ours = g[c].astype(float) if c in g else pd.Series(dtype=float)
                if ours.empty:
                    text = "–"
                elif counts:
                    hit = ours.dropna()
                    text = (f"{hit.mean():.0f}" + (f" ± {hit.std(ddof=1):.0f}" if len(hit) > 1 else "")
                            if len(hit) else "never") + f" ({len(hit)}/{len(ours)} reached)"
                else:
                    text = f"{ours.mean():.4f}" + (f" ± {ours.std(ddof=1):.4f}" if len(ours) > 1 else "")
                if not paper_sets:
                    verdict = "context: the spec does not name the paper's dataset"
                elif ours_ds not in paper_sets:
                    verdict = f"context: the paper's number is on {', '.join(paper_sets)}, ours on {ours_ds}"
                elif counts and on.get("target") != exp.target:
                    verdict = f"context: the paper's target is {on.get('target')}, ours {exp.target}"
                elif counts and ours.notna().sum() < len(ours):
                    verdict = f"above (slower): {int(ours.isna().sum())} of {len(ours)} seeds never reached the target"
                else:
                    m = match_paper(ours, float(v), tol)
                    verdict = {"above": "above (slower)", "below": "below (faster)"}.get(m, m) if counts else m
                rows.append((a, s, what, f"{v:g}", text + (f"; {lost}, left out" if lost else ""), verdict))
    return rows


def _summaries(runs: pd.DataFrame, key: str):
    from ..results import read_summary

    for d in runs.run_dir:
        s = read_summary(Path(d)) or {}
        if key in s:
            yield s[key]


def render_markdown(sections: dict[str, list[Section]], root: Path, command: str,
                    papers: tuple[Paper, ...] = PAPERS) -> str:
    out = ["# Results: every paper's reproduction in fbo", "",
           f"Generated by `{command}` from the run directories under `{root}/` (each run's resolved "
           "config, metrics and summary; nothing here is typed by hand). Figures: the HTML version "
           "(`make report` writes `results/report/report.html`).", "",
           "**Verdict rule.** A claim compares two algorithms on one quantity in each setting. Runs with the "
           "same random seed are paired, and a pair is a win when the first algorithm is ahead by more than a "
           "margin (0.005 for accuracies and AUCs, half a point; 0 for rounds or iterations to the target): "
           "the claim *holds in every seed* when the first algorithm wins every "
           "pair, *holds in the mean* when it wins on the mean over seeds only (the median for rounds or "
           "iterations to the target), and *does not hold* "
           "otherwise; *no data* when a side has no finished run. A claim of no difference (*equal*) holds in "
           "every seed when every pair ends within the margin, in the mean when the means do. "
           "A run that never reaches the target counts "
           "as never (+∞ rounds); a diverged run counts as the worst value and loses its pair. "
           "**Paper numbers** get a verdict only like with like: when our runs are on the paper's dataset and "
           "model and, for rounds to a target, with the paper's target; elsewhere they stand as *context*, with no "
           "verdict. Ours are *within* the paper's when "
           "|our mean − paper| ≤ max(2 × our std over seeds, the spec's tolerance: 0.02 for fractions, 10% of the "
           "paper's value for round counts); else *above* or *below* (for round counts: slower or faster; a seed "
           "that never reaches the target makes ours slower). Failed and diverged runs are left out of means and "
           "counted in the table's columns.", ""]
    out += summary_md(sections, papers)
    for paper in papers:
        out += [f"## {paper.title}", ""]
        if paper.numbers:
            out += [paper.numbers, ""]
        if paper.fidelity:
            out += [f"Deviations and open choices: [docs/fidelity.md](fidelity.md#{fidelity_anchor(paper.fidelity)}).",
                    ""]
        out += finding_md(paper, sections[paper.key])
        for sec in sections[paper.key]:
            out += _render_section_md(sec)
        for f in paper.counts:
            out += _render_counts_md(root / f)
    bench = root / BENCH_FILES[0]
    if papers is PAPERS:
        out += ["## Cost per round: `make bench`", ""]
        out += ([f"`{bench}` as `fbo bench` wrote it:", "", bench.read_text().strip(), ""]
                if bench.is_file() else ["Not measured yet (`make bench`, then `fbo report --collect results`).", ""])
        gpu = root / BENCH_FILES[1]
        out += ["### On a GPU: `make bench DEVICE=cuda`", ""]
        out += ([f"`{gpu}`:", "", gpu.read_text().strip(), ""] if gpu.is_file() else
                ["Not measured: no GPU was available to the sessions that wrote this report, so the CUDA tests "
                 "(`tests/test_cuda.py`) skipped and `make bench DEVICE=cuda` has not run. On a machine with "
                 "CUDA it writes `results/bench/cuda/`, which `fbo report --collect results` picks up.", ""])
    return "\n".join(out) + "\n"


VERDICTS = ("holds in every seed", "holds in the mean", "does not hold", "no data")


def finding_md(paper: Paper, sections: list[Section]) -> list[str]:
    """The paper's finding first: its explanation, then each matching claim's verdict per experiment and
    setting, with the numbers behind it (from the runs)."""
    if not paper.finding:
        return []
    rows = [(sec.exp.name, setting, verdict, nums) for sec in sections if sec.exp is not None
            for claim, setting, verdict, nums in sec.verdicts or [] if claim.startswith(paper.finding_claims)]
    held = sum(v == "holds in every seed" for _, _, v, _ in rows)
    out = [f"**The finding first.** {paper.finding}", "",
           f"Checked in {len(rows)} experiment settings; it holds in every seed in {held} of them:", "",
           "| experiment | setting | verdict | the numbers (means over seeds; pairs within the margin) |",
           "|---|---|---|---|"]
    return out + [md_row(r) for r in rows] + [""]


def summary_md(sections: dict[str, list[Section]], papers: tuple[Paper, ...]) -> list[str]:
    """The front summary: per paper, each claim of each experiment with its verdicts counted over the
    settings, linked to its section."""
    out = ["## Summary: the papers' claims and their verdicts", "",
           "One row per claim and experiment; the verdict column counts the settings by verdict (the rule "
           "above). Follow the link for the numbers.", "",
           "| paper | experiment | claim | verdicts over settings |", "|---|---|---|---|"]
    for paper in papers:
        for sec in sections[paper.key]:
            if sec.exp is None:
                continue
            title = sec.exp.title or sec.exp.name
            link = f"[{sec.exp.name}](#{slug(title.replace('`', ''))})"
            if not sec.verdicts:
                why = "no claims in the spec" if not sec.missing or len(sec.missing) < len(sec.exp.cells) \
                    else "not run yet"
                out.append(md_row((paper.title, link, "–", why)))
                continue
            for claim in dict.fromkeys(c for c, *_ in sec.verdicts):
                vs = [v for c, _, v, _ in sec.verdicts if c == claim]
                counts = ", ".join(f"**{v}** {vs.count(v)}" for v in VERDICTS if vs.count(v))
                out.append(md_row((paper.title, link, claim, counts)))
    return out + [""]


def _budget(exp: Experiment) -> str:
    """The round budget in words: the base's, or each setting's (with the local iterations they share)."""
    per = [(st.get("set") or {}).get("rounds", exp.base.get("rounds")) for st in exp.settings]
    if len(set(per)) == 1:
        return f"{per[0] if per[0] is not None else 'the task default'} communication rounds"
    if None in per:
        return "each setting's or the task default number of communication rounds"
    iters = {r * (st.get("set") or {}).get("I", exp.base.get("I", 1)) for r, st in zip(per, exp.settings)}
    its = f" (rounds × I = {iters.pop():,} local iterations per client)" if len(iters) == 1 else ""
    return f"{min(per)}-{max(per)} communication rounds by setting{its}"


def _render_section_md(sec: Section) -> list[str]:
    if sec.exp is None:
        return [f"### `{sec.spec}`", "", f"Spec not readable: {sec.error}", ""]
    exp = sec.exp
    title = exp.title or exp.name
    lines = [f"### {title}", "", f"Spec `{sec.spec}`; regenerate with `fbo compare {sec.spec}`"
             + (" after `fbo tune` of the same spec" if sec.exp.tune else "")
             + f". Budget {_budget(exp)}; seeds {exp.seeds}.", ""]
    if exp.description:
        lines += [exp.description, ""]
    n_cells = len(exp.cells)
    if sec.missing and len(sec.missing) == n_cells:
        return lines + [f"**Not run yet**: 0 of {n_cells} runs finished.", ""]
    if sec.compute:
        lines += [f"Compute: {sec.compute}.", ""]
    if sec.missing:
        shown = ", ".join(sec.missing[:12]) + (f", and {len(sec.missing) - 12} more" if len(sec.missing) > 12 else "")
        lines += [f"**Partial**: {len(sec.missing)} of {n_cells} runs missing ({shown}).", ""]
    lines += [sec.table_md.strip(), ""]
    if sec.derived_md:
        lines += [sec.derived_md.strip(), ""]
    if sec.verdicts:
        lines += ["| claim | setting | verdict | ours (mean) and seeds won |", "|---|---|---|---|"]
        lines += [md_row((c, s, f"**{v}**", n)) for c, s, v, n in sec.verdicts]
        lines.append("")
    if sec.paper_rows:
        on = exp.reference_on or {}
        ds = on.get("dataset")
        ds = ", ".join(ds) if isinstance(ds, list) else (ds or "dataset not named")
        lines += [f"| algorithm | setting | quantity | paper ({ds}) | ours ({_datasets(exp)}; mean ± std, done runs) "
                  f"| verdict |", "|---|---|---|---|---|---|"]
        lines += [md_row(r) for r in sec.paper_rows]
        lines.append("")
    return lines


def counts_title(path: Path) -> str:
    """The heading of a ZO-HFL Fig. 1 count table, from its file name ``zohfl_fig1_<dataset>_a<alpha>.csv``."""
    m = re.match(r"zohfl_fig1_(.+)_a([\d.e-]+)$", path.stem if path.suffix == ".csv" else path.name)
    ds, alpha = (m.group(1), m.group(2)) if m else (path.stem, "?")
    return f"Fig. 1 of ZO-HFL on {ds}: examples per client and class, Dirichlet({alpha}) label split"


def _render_counts_md(path: Path) -> list[str]:
    if not path.is_file():
        return []
    df = pd.read_csv(path)
    c = df.drop(columns="client").to_numpy(float)
    top2 = np.sort(c, 1)[:, -2:].sum(1) / np.maximum(c.sum(1), 1)
    lines = [f"### {counts_title(path)}", "",
             f"From `{path}` (`fbo figure zohfl-fig1`, seed 0, after the test and server shares). Each row is a "
             f"client; its two largest classes hold {top2.mean():.0%} of its examples on average "
             f"(min {top2.min():.0%}). The HTML report draws it as the paper's bubble chart.", ""]
    lines += [md_row(df.columns), "|" + "---|" * len(df.columns)]
    lines += [md_row(r) for r in df.itertuples(index=False)]
    return lines + [""]


def _datasets(exp: Experiment) -> str:
    return ", ".join(dict.fromkeys(c.cfg.run.dataset for c in exp.cells))


def slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def render_html(markdown: str, sections: dict[str, list[Section]], counts_figs: dict[str, list[Path]] | None = None
                ) -> str:
    """A self-contained page: the Markdown rendered by markdown-it-py (CommonMark with tables), an id on
    every heading, a table of contents, and each section's figures embedded after its heading."""
    from markdown_it import MarkdownIt

    figs = {sec.exp.title or sec.exp.name: sec.figures for secs in sections.values() for sec in secs
            if sec.exp is not None and sec.figures}
    figs.update(counts_figs or {})
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown)
    toc, seen = [], set()
    for i, t in enumerate(tokens):
        if t.type == "heading_open" and t.tag in ("h2", "h3"):
            text = tokens[i + 1].content
            anchor = slug(re.sub(r"`", "", text))
            while anchor in seen:
                anchor += "-1"
            seen.add(anchor)
            t.attrSet("id", anchor)
            toc.append((t.tag, anchor, tokens[i + 1]))
    body = md.renderer.render(tokens, md.options, {})
    for tag, anchor, inline in toc:  # figures right after their section's heading
        title = inline.content
        imgs = "".join(f'<img alt="{html.escape(title)}" src="data:image/png;base64,'
                       f'{base64.b64encode(p.read_bytes()).decode()}">' for p in figs.get(title, []) if p.is_file())
        if imgs:
            close = body.index(f"</{tag}>", body.index(f'<{tag} id="{anchor}">')) + len(f"</{tag}>")
            body = body[:close] + f'<div class="figs">{imgs}</div>' + body[close:]
    items = "".join(f'<li class="{tag}"><a href="#{anchor}">{md.renderInline(inline.content)}</a></li>'
                    for tag, anchor, inline in toc)
    nav = f'<nav><b>Contents</b><ul>{items}</ul></nav>'
    css = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222;"
           "font-size:15px;line-height:1.45}"
           "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px}"
           "th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee;margin:.5em 0}"
           "h2{border-bottom:2px solid #444;margin-top:2em}code{background:#f5f5f5;padding:0 3px}"
           "nav{background:#fafafa;border:1px solid #ddd;padding:.5em 1em;margin:1em 0}nav ul{margin:.3em 0}"
           "nav li.h3{margin-left:1.5em;font-size:13px}")
    cut = body.find("</h1>") + len("</h1>") if "</h1>" in body else 0  # the title, then the contents
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>fbo results</title><style>{css}</style>"
            f"</head><body>{body[:cut]}{nav}{body[cut:]}</body></html>\n")


def build_report(root: Path, md_path: Path, html_path: Path, command: str = "fbo report",
                 specs: list[str] | None = None) -> dict[str, int]:
    """Write the Markdown and HTML reports (of every paper, or of ``specs`` only); returns counts of
    sections, cells and missing runs."""
    papers = (Paper("specs", "Experiments", tuple(specs), ""),) if specs else PAPERS
    for spec in specs or []:
        if not Path(spec).is_file():
            raise UsageError(f"spec not found: {spec}")
    work = Path(tempfile.mkdtemp(prefix="fbo-report-"))
    try:
        sections = {p.key: [build_section(s, root, work) for s in p.specs if Path(s).is_file()] for p in papers}
        secs = [x for v in sections.values() for x in v if x.exp is not None]
        if not any(len(x.missing or []) < len(x.exp.cells) for x in secs):
            raise UsageError(f"no finished runs under {root} for {'these specs' if specs else 'any reproduction spec'}"
                             f": nothing to report (run them, or --from the folder that holds them)")
        md = render_markdown(sections, root, command, papers)
        import torch

        from ..results import atomic_write
        from ..tasks.hfl import plot_partition

        counts_figs = {}
        for p in papers:
            for f in p.counts:
                if (root / f).is_file():
                    c = pd.read_csv(root / f).drop(columns="client").to_numpy()
                    png = work / (Path(f).stem + ".png")
                    counts_figs[counts_title(root / f)] = [plot_partition(torch.as_tensor(c), png,
                                                                           counts_title(root / f))]
        atomic_write(md_path, md)
        fid = os.path.relpath(md_path.parent / "fidelity.md", html_path.parent)  # links work from the HTML too
        atomic_write(html_path, render_html(md, sections, counts_figs).replace('href="fidelity.md', f'href="{fid}'))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    secs = [s for v in sections.values() for s in v]
    return {"sections": len(secs), "missing": sum(len(s.missing or []) for s in secs),
            "cells": sum(len(s.exp.cells) for s in secs if s.exp is not None)}
