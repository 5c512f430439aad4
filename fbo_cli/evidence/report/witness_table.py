"""The paper's own code beside ours in the report: the public FedNest code's runs (``fbo witness``,
:mod:`fbo_cli.evidence.witness`) next to our FedNest at the same settings, as a table and a figure.

Agreement is judged on the final test accuracy: the Welch t interval (95%) of the difference of the two
means (theirs minus ours; the seeds of two programs are not paired), against the spec's tolerance: the
two **agree** when the interval lies inside ± the tolerance, **differ** when it lies outside, and the
comparison is **inconclusive** otherwise. Rounds to 90% are shown beside it (each program's own round
counter: 10 rounds per outer iteration in both at these settings).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ...runs.table import md_row


def welch(a: np.ndarray, b: np.ndarray, alpha: float = 0.05) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): Welch's t interval; (d, -inf, inf) with fewer than 2 values a side."""
    from scipy.stats import t

    d = float(np.mean(a) - np.mean(b))
    if len(a) < 2 or len(b) < 2:
        return d, -math.inf, math.inf
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = float(t.ppf(1 - alpha / 2, df) * se)
    return d, d - half, d + half


def _reached(v: pd.Series) -> str:
    hit = v.dropna()
    mean = f"{hit.mean():.0f}" + (f" ± {hit.std(ddof=1):.0f}" if len(hit) > 1 else "") if len(hit) else "never"
    return f"{mean} ({len(hit)}/{len(v)} reached)"


def witness_md(exp, runs: pd.DataFrame, curves: dict, root: Path, png: Path | None) -> str:
    """The witness table (and figure ``png``: PNG, PDF, SVG; none without it) of a spec with ``witness:``;
    '' when no witness run exists."""
    from ..witness import tampered_note, witness_runs

    pub = witness_runs(root)
    note = tampered_note(pub)  # a witness run whose record fails is named, never dropped in silence
    if pub.empty:
        return note
    algo, tol, lr = exp.witness.algorithm, exp.tolerance, exp.witness.inner_lr
    if "inner_lr" in pub:
        pub = pub[pub.inner_lr.astype(float).sub(lr).abs() < 1e-12]
    rows, panels = [], []
    for setting in exp.witness.settings:
        theirs = pub[pub.setting == setting]
        if theirs.empty:
            continue
        ours = runs[(runs.algorithm == algo) & (runs.setting == setting) & (runs.status == "done")]
        a, b = theirs.final.to_numpy(float), ours.final.to_numpy(float)
        if len(b):
            d, lo, hi = welch(a, b)
            verdict = ("agree" if -tol <= lo and hi <= tol else "differ" if lo > tol or hi < -tol else "inconclusive")
            diff = f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]".replace("inf", "∞")
        else:
            verdict, diff = "no data", ""
        fin = lambda v: f"{v.mean():.4f}" + (f" ± {v.std(ddof=1):.4f}" if len(v) > 1 else "")  # noqa: E731
        rows.append((setting, f"{len(theirs)} / {len(ours)}", _reached(theirs.rounds_to_target.astype(float)),
                     _reached(ours.rounds_to_target.astype(float)) if len(ours) else "–", fin(theirs.final),
                     fin(ours.final) if len(ours) else "–", diff, f"**{verdict}**"))
        panels.append((setting, theirs, {k[2]: m for k, m in curves.items() if k[0] == algo and k[1] == setting}))
    if not rows:
        return note
    if png is not None:
        _plot(panels, exp, png)
    commits = sorted(set(str(c)[:7] if re.fullmatch(r"[0-9a-f]{7,40}", str(c)) else "unrecorded"
                         for c in pub.get("commit", pd.Series(dtype=str)).fillna("unrecorded")))
    commits = [c if c != "unrecorded" else "not recorded (the checkout those runs used had no commit git could name)"
               for c in commits]
    head = (f"**The paper's own code beside ours.** The public FedNest code (`ucr-optml/FedNest`, `main_hr.py`, "
            f"commit {', '.join(commits) or 'not recorded'}; unedited, seeded by fbo's driver) at the "
            f"steps of its own `reproduce/fig2.sh` (inner {lr:g} in its SVRG lower solver, outer 0.01), against "
            f"our row *{algo}* at the same steps. Reproduce: `make witness-fednest FEDNEST=<checkout>` (`fbo "
            f"witness fednest --checkout DIR --out-dir docs/results --inner-lr {lr:g}`; 10-45 minutes a run on "
            f"one core, by the machine's load). Agreement: the "
            f"Welch 95% interval of the difference in final test accuracy (theirs − ours) inside ±{tol:g} "
            f"(**agree**), outside it (**differ**), else **inconclusive**. Rounds to 90% by each program's own "
            f"counter (10 per outer iteration in both).")
    table = ["| setting | seeds (theirs / ours) | rounds to 90%, public code | rounds to 90%, ours | final test "
             "accuracy, public code | final, ours | difference, 95% interval | verdict |",
             "|---|---|---|---|---|---|---|---|"] + [md_row(r) for r in rows]
    return "\n".join([head, "", *table, "", *([note, ""] if note else [])])


def _plot(panels, exp, png: Path) -> None:
    from ...grids import plots as ps

    fig, axes = ps.subplots(1, len(panels), width=min(ps.PAGE_IN, 2.4 * len(panels) + 0.6), sharey=True)
    theirs_c, ours_c = ps.OI["vermillion"], ps.OI["blue"]
    for ax, (setting, theirs, ours) in zip(axes[0], panels):
        for i, m in enumerate(ours.values()):  # ours first, theirs dashed on top: where they agree both show
            ax.plot(m.rounds, m.test_acc, color=ours_c, lw=1.1, label=f"ours: {exp.witness.algorithm}"
                    if i == 0 else "_")
        for i, d in enumerate(theirs.run_dir):
            m = pd.read_csv(Path(d) / "metrics.csv")
            ax.plot(m.rounds, m.test_acc, color=theirs_c, lw=0.9, ls="--",
                    label="the public FedNest code" if i == 0 else "_")
        if exp.target is not None:
            ax.axhline(exp.target, color="0.5", ls=":", lw=1, label=f"target {exp.target:g}")
        ax.set_title(setting)
        ax.set_xlabel("communication rounds")
        ax.set_ylim(0.5, 1.0)
    axes[0][0].set_ylabel("test accuracy")
    ps.shared_legend(fig)
    ps.save(fig, png)
