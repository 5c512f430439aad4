"""The derived table of the CODASCA Figure 1 analog (Yuan, Guo, Xu, Ying & Yang,
ICML 2021): the largest communication window I whose final test
AUC stays within ``delta`` of the AUC at I = 1, per algorithm and client count K.

Usage after ``fbo compare experiments/codasca_fig1_*.yaml``::

    fbo figure codasca-imax results/compare/<name> [--delta DELTA]

writes ``imax.md``, ``imax.csv`` and ``imax.png`` (final AUC against I, the bottom row of the
paper's Figure 1) next to the compare output's ``runs.csv``.
"""

from __future__ import annotations

import math
from pathlib import Path

from ...errors import UsageError
from ...grids.derived import imax_per_seed, windows, with_keys  # noqa: F401  (the figure's and the tests' names)

# --------------------------------------------------------------------------------------------------
# Figure 1 analog: the largest tolerable communication window


def imax_table(compare_dir: str | Path, delta: float = 0.01,
               expected: dict[int, set[int]] | None = None, plot: bool = True) -> "pd.DataFrame":  # noqa: F821
    """CODASCA Figure 1 analog: from a compare output's ``runs.csv`` (algorithms x settings that
    vary the window ``I`` and the client count ``K``), the final test AUC (mean ± std over seeds)
    per (algorithm, K, I) and ``I_max`` = the largest I whose mean AUC is >= the mean AUC at I=1
    minus ``delta`` (docs/fidelity.md#codasca). Writes ``imax.md``, ``imax.csv`` and ``imax.png`` beside
    ``runs.csv``. Settings must differ only in I and K (both read from each run's config)."""
    import pandas as pd

    from ...runs.rundir import atomic_write

    d = Path(compare_dir)
    if not (d / "runs.csv").is_file():
        raise UsageError(f"no runs.csv in {d}; run the compare spec first", kind="not_found", path=d)
    try:
        runs = pd.read_csv(d / "runs.csv")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
        raise UsageError(f"{d / 'runs.csv'} is not a runs table of `fbo compare`",
                         kind="corrupt", path=d / "runs.csv") from None
    need = {"algorithm", "setting", "final"} - set(runs.columns)
    if need:
        raise UsageError(f"{d / 'runs.csv'} has no column(s) {', '.join(sorted(need))}: not a runs table of "
                         f"`fbo compare`", kind="corrupt", field="columns", path=d / "runs.csv", value=sorted(need))
    runs = with_keys(runs)
    runs = runs[runs.status == "done"] if "status" in runs else runs
    runs = runs.dropna(subset=["I", "K"])
    if runs.empty:
        raise UsageError(f"{d / 'runs.csv'}: no finished run with a window I and a client count K (a CODASCA "
                         f"Figure 1 grid, experiments/codasca_fig1_*.yaml)",
                         kind="not_found", field="runs", path=d / "runs.csv")
    agg = runs.groupby(["algorithm", "K", "I"])["final"].agg(["mean", "std", "count"]).reset_index()
    rows = []
    for (algo, K), g in agg.groupby(["algorithm", "K"]):
        g = g.sort_values("I")
        base = g[g.I == 1]["mean"]
        ok = g[g["mean"] >= base.iloc[0] - delta] if len(base) else g.iloc[:0]
        whole = not expected or expected.get(int(K), set()) <= set(g.I.astype(int))
        top = int(g.I.max())
        imax = (int(ok.I.max()) if len(ok) else None) if whole else "incomplete"
        row = {"algorithm": algo, "K": int(K), "AUC(I=1)": base.iloc[0] if len(base) else float("nan"),
               "I_max": f"≥ {top}" if imax == top else imax, "grid's top": top,
               "I_max at the top": "yes: a lower bound" if imax == top else "no",
               "seeds": int(g["count"].min())}
        for _, r in g.iterrows():
            sd = "" if pd.isna(r["std"]) else f" ± {r['std']:.4f}"
            row[f"I={int(r.I)}"] = f"{r['mean']:.4f}{sd}"
        rows.append(row)
    table = pd.DataFrame(rows).sort_values(["K", "algorithm"], ascending=[False, True])
    cols = list(table.columns)
    md = [f"# I_max: largest window I with final test AUC >= AUC(I=1) - {delta} (mean over seeds)", "",
          "An I_max at the grid's top is censored (≥ top): the largest tolerable window is at least the largest "
          "window run, not that window; the claims on I_max test it per seed by the exact sign test, a censored "
          "value above every window run.", "",
          "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in table.iterrows():
        md.append("| " + " | ".join("" if (isinstance(x, float) and math.isnan(x)) else
                                    (f"{x:.4f}" if isinstance(x, float) else str(x)) for x in r) + " |")
    atomic_write(d / "imax.md", "\n".join(md) + "\n")
    atomic_write(d / "imax.csv", table.to_csv(index=False))
    if plot:
        plot_auc_vs_window(agg, d / "imax.png", delta)
    return table


def plot_auc_vs_window(agg, path: Path, delta: float) -> None:
    """The bottom row of the paper's Figure 1: final test AUC (mean ± std over seeds, clipped to [0, 1])
    against I, one panel per client count, each algorithm's I = 1 AUC minus ``delta`` dotted; PNG, PDF, SVG."""
    import numpy as np

    from ...grids import plots as ps

    Ks = sorted(agg.K.dropna().unique(), reverse=True)
    fig, axes = ps.subplots(1, len(Ks), panel_h=2.3, sharey=True)
    algo_of = {"CODA+": "codaplus", "CODASCA": "codasca"}
    styles = ps.row_styles([(a, algo_of.get(a, a)) for a in dict.fromkeys(agg.algorithm)])
    for ax, K in zip(axes[0], Ks, strict=True):
        for algo, g in agg[agg.K == K].groupby("algorithm"):
            g, st = g.sort_values("I"), styles[algo]
            sd = g["std"].fillna(0)
            lo, hi = np.clip(g["mean"] - sd, 0, 1), np.clip(g["mean"] + sd, 0, 1)
            ax.errorbar(g.I, g["mean"], yerr=[g["mean"] - lo, hi - g["mean"]], color=st["color"],
                        marker=st["marker"], ls=st["ls"], ms=4, capsize=2, label=algo)
            base = g[g.I == 1]["mean"]
            if len(base):
                ax.axhline(base.iloc[0] - delta, color=st["color"], ls=":", lw=1,
                           label=f"{algo}: AUC at I = 1 minus {delta:g}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"K = {int(K)}")
        ax.set_xlabel("communication window I")
        ax.tick_params(labelleft=True)
    axes[0][0].set_ylabel("final test AUC")
    ps.shared_legend(fig)
    ps.save(fig, path)
