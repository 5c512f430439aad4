"""One figure style for every plot fbo draws: a paper's two-column width (6.9 in; 3.3 in for one column),
fonts of 8 pt or more at that size, colour-blind-safe colours (Okabe & Ito) fixed per method in every
figure, one shared legend outside the data, bands clipped to the metric's range, constrained layout (the
suptitle never covers a panel title), and every figure written as PNG, PDF and SVG.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
import zlib
from pathlib import Path

import numpy as np

PAGE_IN, COLUMN_IN = 6.9, 3.3  # a two-column paper's text width and column width, inches
FONT_PT = 8  # the smallest font on any figure
FORMATS = ("png", "pdf", "svg")

# Okabe & Ito (2008), the colour-blind-safe palette; yellow is left out (unreadable on white)
OI = {"black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "blue": "#0072B2",
      "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#7F7F7F"}
# each method's (colour, marker), the same in every figure; a paper's own method is vermillion
METHODS: dict[str, tuple[str, str]] = {
    "aggitd": ("vermillion", "o"), "aggitd-sgd": ("vermillion", "v"),
    "fednest": ("blue", "s"), "fednest-sgd": ("blue", "<"),
    "lfednest": ("sky", "^"), "lfednest-sgd": ("sky", ">"),
    "fedbio": ("green", "D"), "fedbio-local": ("green", "d"),
    "fedbioacc": ("orange", "v"), "fedbioacc-local": ("orange", "^"),
    "adafbio": ("purple", "P"), "adafbio-adabelief": ("purple", "X"), "adafbio-none": ("black", "*"),
    "fedavg": ("black", "s"), "fedavg-noisy": ("grey", "v"), "fedavg-clean": ("black", "o"),
    "fedavg-ce": ("grey", "s"),
    "fedprox": ("sky", "^"), "scaffold": ("green", "D"), "server-only": ("grey", "x"), "zohfl": ("vermillion", "o"),
    "codaplus": ("blue", "s"), "codasca": ("vermillion", "o"),
}
DASHES = ["-", "--", "-.", ":"]  # rows of one method in one figure, in order
MARKERS = "os^DvP<>X"  # a further row of one method's colour takes the next one not its own: grey scale tells it apart
# the range a metric can take: bands are clipped to it and the y axis never shows beyond it
METRIC_RANGE = {m: (0.0, 1.0) for m in ("test_acc", "train_acc", "val_acc", "test_acc_pooled", "test_auc",
                                        "val_auc", "f1")}


def use() -> None:
    """Set the style (matplotlib's Agg backend, fonts, lines, grid) for the figures drawn next."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "font.size": FONT_PT, "axes.titlesize": FONT_PT + 0.5, "axes.labelsize": FONT_PT,
        "xtick.labelsize": FONT_PT, "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT,
        "figure.titlesize": FONT_PT + 1, "lines.linewidth": 1.3, "lines.markersize": 4,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
        "grid.linewidth": 0.5, "svg.fonttype": "none", "pdf.fonttype": 42, "legend.frameon": False,
        "figure.constrained_layout.h_pad": 0.04, "figure.constrained_layout.w_pad": 0.04,
        "path.simplify_threshold": 0.5})


def subplots(nrows: int, ncols: int, width: float = PAGE_IN, panel_h: float = 1.9, **kw):
    """A figure of ``nrows`` x ``ncols`` panels at ``width`` inches, constrained layout, axes always 2-d."""
    use()
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(width, panel_h * nrows + 0.6), squeeze=False,
                        layout="constrained", **kw)


def method_style(algo: str) -> tuple[str, str]:
    """(colour, marker) of a registry algorithm; one not in :data:`METHODS` gets a fixed one from its name."""
    if algo in METHODS:
        c, m = METHODS[algo]
        return OI[c], m
    h = zlib.crc32(algo.encode())
    return list(OI.values())[h % len(OI)], "ohp8*"[h // len(OI) % 5]


def row_styles(rows: list[tuple[str, str]]) -> dict[str, dict]:
    """Line styles of a figure's rows ``(display name, algo)``: the method's colour and marker, and a new
    dash for each further row of the same colour, so that rows stay distinct where they overlap."""
    out, seen = {}, {}
    if len(rows) > 1 and len({a for _, a in rows}) == 1:  # one method, several parameters: a colour per row
        cols = [OI[c] for c in ("vermillion", "blue", "green", "orange", "sky", "purple", "black", "grey")]
        return {name: {"color": cols[k % len(cols)], "marker": "os^Dv<>P"[k % 8], "ls": DASHES[k % len(DASHES)]}
                for k, (name, _) in enumerate(rows)}
    used: dict[str, set] = {}
    for name, algo in rows:
        c, m = method_style(algo)
        k = seen[c] = seen.get(c, -1) + 1  # a second row in one colour gets the next dash and a marker of its own
        taken = used.setdefault(c, set())
        if m in taken:
            m = next((x for x in MARKERS if x not in taken), m)
        taken.add(m)
        out[name] = {"color": c, "marker": m, "ls": DASHES[k % len(DASHES)]}
    return out


def empty(ax, text: str = "no finished runs") -> None:
    """Say in the panel why it shows nothing (never an empty frame with a bare 0-1 axis)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def line(ax, x, y, style: dict, label: str, k: int = 0, n_marks: int = 6, **kw):
    """A line with sparse markers (offset by ``k`` so that two lines' markers do not coincide)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    every = max(len(x) // n_marks, 1)
    return ax.plot(x, y, color=style["color"], ls=style["ls"], marker=style["marker"],
                   markevery=(min(k * max(every // 4, 1), max(len(x) - 1, 0)), every), label=label, **kw)


def band(ax, x, lo, hi, color: str, metric: str, alpha: float = 0.18):
    """A shaded band, clipped to the metric's range (:data:`METRIC_RANGE`)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    if metric in METRIC_RANGE:
        a, b = METRIC_RANGE[metric]
        lo, hi = np.clip(lo, a, b), np.clip(hi, a, b)
    return ax.fill_between(x, lo, hi, color=color, alpha=alpha, lw=0)


def positive(x, *ys):
    """The points with x > 0 (what a log x axis can show): no line from 0 or across unmeasured decades."""
    x = np.asarray(x, float)
    keep = x > 0
    return (x[keep], *[np.asarray(y, float)[keep] for y in ys])


def limit_y(ax, metric: str) -> None:
    """Keep the y axis inside the metric's range (a margin is fine, values beyond it are not)."""
    if metric in METRIC_RANGE:
        a, b = METRIC_RANGE[metric]
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, a - 0.02), min(hi, b + 0.02))


def paper_handle():
    """The legend entry of the papers' numbers: hollow diamonds in the method's colour."""
    from matplotlib.lines import Line2D

    return Line2D([], [], ls="none", marker="D", mfc="none", mec="0.2", mew=1.2, ms=5,
                  label="paper (hollow diamond, the method's colour)")


def shared_legend(fig, extra: list | None = None, ncol: int | None = None):
    """One legend for the whole figure, below the panels (outside the data): every labelled artist of
    every panel once, in order of appearance, then ``extra`` handles."""
    handles, labels = {}, []
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab.startswith("_"):
                continue
            if lab not in handles:
                labels.append(lab)
            if lab not in handles or _markers_only(handles[lab]) and not _markers_only(h):  # a drawn line first
                handles[lab] = h
    for h in extra or []:
        if h.get_label() not in handles:
            handles[h.get_label()] = h
            labels.append(h.get_label())
    if not labels:
        return None
    width = max(len(s) for s in labels)
    ncol = ncol or max(1, min(len(labels), int(fig.get_figwidth() * 72 / (FONT_PT * 0.52 * width + 28))))
    return fig.legend([handles[k] for k in labels], labels, loc="outside lower center", ncol=ncol)


def _markers_only(h) -> bool:
    return hasattr(h, "get_linestyle") and h.get_linestyle() in ("None", "none", "")


def suptitle(fig, text: str) -> None:
    """A figure title wrapped to the figure's width."""
    chars = int(fig.get_figwidth() * 72 / ((FONT_PT + 1) * 0.55))
    fig.suptitle("\n".join(textwrap.wrap(text, chars)))


def save(fig, path: Path, formats=FORMATS) -> list[Path]:
    """Write the figure atomically in each format (``path`` with its suffix replaced) and close it;
    returns the files written, the PNG first."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = []
    try:
        for fmt in sorted(dict.fromkeys(formats), key=lambda f: f != "png"):
            target = path.with_suffix("." + fmt)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix="." + fmt)
            os.close(fd)
            try:
                # tight: a panel title wider than its panel (a long method name) spills past the last panel's edge
                fig.savefig(tmp, dpi=200, format=fmt, metadata={"Date": None} if fmt in ("svg", "pdf") else None,
                            bbox_inches="tight", pad_inches=0.03)
                m = os.umask(0)
                os.umask(m)
                os.chmod(tmp, 0o666 & ~m)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            out.append(target)
    finally:
        plt.close(fig)
    return out


def parse_formats(values: list[str] | None) -> tuple[str, ...]:
    """``--format`` values (repeatable, or comma lists) as a tuple of formats; raises UsageError."""
    from ..errors import UsageError

    fmts = [f.strip().lower() for v in values or [] for f in v.split(",") if f.strip()]
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        raise UsageError(f"--format: unknown format {', '.join(bad)}; choose from {', '.join(FORMATS)}")
    return tuple(dict.fromkeys(fmts)) or FORMATS
