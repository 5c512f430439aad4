"""Figures of ZO-HFL (Qiu, Kim & Yousefian, arXiv 2504.01839) that a compare table does not draw.

* Fig. 1: the client-by-class counts of the Dirichlet partition (bubble chart), for any dataset.
* Fig. 2: ZO-HFL's global loss against the round for tau in {5, 20, 50}, log y axis, one panel per
  heterogeneity setting, from the runs of ``experiments/zohfl_fig2.yaml`` (its ``runs.csv``).

Command line::

    fbo figure zohfl-fig1 [DATASET] [--alpha ALPHA]     # default mnist 0.1; PNG and the counts as CSV
    fbo figure zohfl-fig2 [COMPARE_DIR]                 # default results/compare/zohfl_fig2
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..data import load_dataset
from ..data.hierarchical import build_hierarchical
from ..tasks.hfl import partition_counts, plot_partition


def fig1(dataset: str = "mnist", alpha: float = 0.1, clients: int = 10, seed: int = 0,
         data_dir: str = "data", out_dir: str | Path = "results/figures", formats=("png", "pdf", "svg")) -> Path:
    """Build the hfl split of ``dataset`` (Dirichlet ``alpha`` over ``clients``, after the 10% test
    and 30% server shares) and write its client x class counts: ``zohfl_fig1_<dataset>_a<alpha>.csv``
    (the evidence ``fbo report`` reads) and ``.png`` (a bubble chart)."""
    from ..results import atomic_write

    data = build_hierarchical(load_dataset(dataset, data_dir, download=True), "dirichlet", clients, seed,
                              torch.device("cpu"), alpha=alpha)
    counts = partition_counts(data)
    stem = f"zohfl_fig1_{dataset}_a{alpha:g}"
    rows = ["client," + ",".join(f"class {c}" for c in range(counts.shape[1]))]
    rows += [f"{i}," + ",".join(str(int(v)) for v in r) for i, r in enumerate(counts.tolist())]
    atomic_write(Path(out_dir) / f"{stem}.csv", "\n".join(rows) + "\n")
    return plot_partition(counts, Path(out_dir) / f"{stem}.png", fig1_title(dataset, alpha, clients, seed), formats)


def fig1_title(dataset: str, alpha: float, clients: int = 10, seed: int = 0) -> str:
    return f"{dataset}: Dirichlet({alpha:g}) label split over {clients} clients, seed {seed}"


def fig2(compare_dir: str | Path = "results/compare/zohfl_fig2", out: str | Path | None = None,
         metric: str = "global_loss") -> Path:
    """ZO-HFL's ``metric`` against the round, one line per algorithm (tau), one panel per setting, log y;
    mean over the seeds present."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.ticker import FormatStrFormatter

    compare_dir = Path(compare_dir)
    runs = pd.read_csv(compare_dir / "runs.csv")
    settings = list(dict.fromkeys(runs["setting"]))
    fig, axes = plt.subplots(1, len(settings), figsize=(4.6 * len(settings), 3.6), squeeze=False)
    for ax, s in zip(axes[0], settings, strict=True):
        sub = runs[runs["setting"] == s]
        for k, (a, grp) in enumerate(sub.groupby("algorithm", sort=False)):
            curves = [pd.read_csv(Path(d) / "metrics.csv").set_index("rounds")[metric]
                      for d in grp["run_dir"]]
            mean = pd.concat(curves, axis=1).mean(axis=1).dropna()
            ax.plot(mean.index, mean.values, color=f"C{k}", lw=1.6, label=a)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.2f"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.2f"))
        ax.set_title(s, fontsize=10)
        ax.set_xlabel("communication rounds")
        ax.grid(alpha=0.3, which="both")
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel(metric.replace("_", " "))
    axes[0][-1].legend(frameon=False, fontsize=8)
    fig.tight_layout()
    out = Path(out or compare_dir / f"fig2_{metric}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out
