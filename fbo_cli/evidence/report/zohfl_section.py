"""Fig. 1 of ZO-HFL (Qiu, Kim & Yousefian, arXiv 2504.01839) from the data: the client-by-class counts of
the Dirichlet partition, for any dataset (its CSV is the evidence ``fbo figure zohfl-fig1`` draws from).
Fig. 1's chart is drawn here (:func:`plot_partition`); Fig. 2 and Table I are drawn from the runs
by :mod:`fbo_cli.evidence.report.figures`.

Command line::

    fbo figure zohfl-fig1 DATASET [--alpha ALPHA]     # build the split: the counts as CSV, and its chart
    fbo figure zohfl-fig1                             # both datasets' charts from the evidence's CSVs
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...data import load_dataset
from ...data.hierarchical import build_hierarchical
from ...tasks.hfl import partition_counts


def fig1(dataset: str = "mnist", alpha: float = 0.1, clients: int = 10, seed: int = 0,
         data_dir: str = "data", out_dir: str | Path = "results/figures", formats=("png", "pdf", "svg")) -> Path:
    """Build the hfl split of ``dataset`` (Dirichlet ``alpha`` over ``clients``, after the 10% test
    and 30% server shares) and write its client x class counts: ``zohfl_fig1_<dataset>_a<alpha>.csv``
    (the evidence ``fbo report`` reads) and ``.png`` (a bubble chart)."""
    from ...runs.rundir import atomic_write

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


def draw_partition(ax, counts) -> None:
    """Fig. 1 of ZO-HFL on ``ax``: a bubble chart of a client x class count matrix (area proportional to count)."""
    import numpy as np

    c = np.asarray(counts, dtype=float)
    m, C = c.shape
    ii, cc = np.meshgrid(np.arange(m), np.arange(C), indexing="ij")
    ax.scatter(ii.ravel(), cc.ravel(), s=120.0 * c.ravel() / max(c.max(), 1.0), color="#D55E00", alpha=0.75,
               edgecolors="none", clip_on=False)
    ax.set_xticks(range(m))
    ax.set_yticks(range(C))
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.set_xlim(-0.7, m - 0.3)
    ax.set_ylim(-0.7, C - 0.3)


def plot_partition(counts: torch.Tensor, path: str | Path, title: str = "", formats=("png", "pdf", "svg")) -> Path:
    """Fig. 1 of ZO-HFL: a bubble chart of the client x class counts, at a paper's column width (PNG, PDF,
    SVG); returns the PNG's path."""
    from ...grids import plots as ps

    fig, axes = ps.subplots(1, 1, width=ps.COLUMN_IN, panel_h=2.6)
    draw_partition(axes[0][0], counts.cpu().numpy())
    ps.suptitle(fig, title or "examples per client and class")
    return ps.save(fig, Path(path), formats)[0]
