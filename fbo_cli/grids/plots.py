"""Every plot fbo draws, in one style, and an experiment's curves.

The style: a paper's two-column width (6.9 in; 3.3 in for one column), fonts of 8 pt or more at that size,
colour-blind-safe colours (Okabe & Ito) fixed per method in every figure, one shared legend outside the data,
bands clipped to the metric's range, constrained layout (the suptitle never covers a panel title), and every
figure written as PNG, PDF and SVG. Every figure of fbo (``fbo compare``'s curves, ``fbo tune``'s,
the report's papers' figures) draws with these helpers.

The curves (:func:`plot_experiment`): the headline metric against the spec's x axis, one panel per setting,
one line per algorithm (mean over the seeds' done runs with a band), the target line, the paper's numbers as
hollow diamonds. ``fbo compare`` writes it as ``curves.png`` (with PDF and SVG beside it); ``fbo report`` and
``fbo figure`` draw the papers' figures with it.
"""

from __future__ import annotations

import math
import textwrap
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from ..runs.table import METRIC_LABELS, X_AXES
from .spec import BANDS, Experiment, overrides_note

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

    from ..files import write_figure

    path = Path(path)
    out = []
    try:
        for fmt in sorted(dict.fromkeys(formats), key=lambda f: f != "png"):
            target = path.with_suffix("." + fmt)
            # tight: a panel title wider than its panel (a long method name) spills past the last panel's edge
            write_figure(fig, target, dpi=200, format=fmt, metadata={"Date": None} if fmt in ("svg", "pdf") else None,
                         bbox_inches="tight", pad_inches=0.03)
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
        raise UsageError(f"--format: unknown format {', '.join(bad)}; choose from {', '.join(FORMATS)}",
                         kind="unknown", field="format", value=bad[0])
    return tuple(dict.fromkeys(fmts)) or FORMATS


LOG_X = ("samples", "floats_up")  # counts over decades: a log axis from the first measured point
LABELS = {**METRIC_LABELS, "train_acc": "training accuracy", "val_auc": "validation AUC"}
LOG_Y = ("global_loss",)  # ZO-HFL's Fig. 2 draws its loss on a log axis


def same_runs(name: str, twin: str) -> str:
    """The panel's note for a row drawn once: "FedNest: (tuned) = (paper's steps), same runs"."""
    a, b = name.split(" (", 1), twin.split(" (", 1)
    if len(a) == 2 and len(b) == 2 and a[0] == b[0]:
        return f"{a[0]}: ({a[1]} = ({b[1]}, same runs"
    return f"{name} = {twin}, same runs"


def caption(exp: Experiment, tail: float | None = None) -> str:
    """What the figure shows, in words: lines, bands (and their clipping), markers."""
    rng = METRIC_RANGE.get(exp.metric)
    out = [f"{LABELS.get(exp.metric, exp.metric)} against {X_AXES.get(exp.x, exp.x)}, one panel per setting. "
           f"Lines: mean over the seeds' done runs; shaded bands: {BANDS[exp.band]}"
           + (f", clipped to [{rng[0]:g}, {rng[1]:g}]" if rng else "") + "."]
    if exp.target is not None:
        out.append(f"Dotted grey line: the target {exp.target:g}.")
    if exp.reference:
        out.append("Hollow diamonds, where our runs are on the paper's dataset: the paper's numbers (its final "
                   "value at our last point; its rounds to the target on the target line).")
    out.append("A thin dashed line ending in x: a diverged or collapsed run. A row whose runs are another row's "
               "runs, or whose "
               "mean curve equals another row's, is drawn once: its hollow markers sit on the other's line and the "
               "panel names both.")
    if exp.x in LOG_X:
        out.append("Log x axis from the first evaluation after the start (x > 0).")
    if tail is not None:
        out.append(f"Zoom: the last {1 - tail:.0%} of the x axis, each panel's y axis fitted to it.")
    if getattr(exp, "overrides", None) is not None and (over := overrides_note(exp)):
        out.append(f"Overridden on the command line: {over}.")
    return " ".join(out)


def t95(df: int) -> float:
    """The two-sided 95% Student-t quantile with ``df`` degrees of freedom (12.71 at 1, 2.26 at 9, 2.09 at
    19): the half-width of the ``ci95`` band is ``t95(n - 1) · sd / √n``, at any number of seeds."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def _mean_band(exp: Experiment, done: list[pd.DataFrame]):
    grid = np.asarray(max(done, key=len)[exp.x], dtype=float)
    ys = np.stack([np.interp(grid, r[exp.x].to_numpy(float), r[exp.metric].to_numpy(float), right=np.nan)
                   for r in done])
    with warnings.catch_warnings():  # a grid point no run reached (all NaN) stays a gap
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, lo, hi = np.nanmean(ys, 0), np.nanmin(ys, 0), np.nanmax(ys, 0)
        if exp.band != "minmax" and len(done) > 1:  # ± one std, or a 95% t-interval of the mean
            half = np.nanstd(ys, 0, ddof=1) * (1.0 if exp.band == "std" else
                                               t95(len(done) - 1) / np.sqrt(len(done)))
            lo, hi = mean - half, mean + half
    if exp.x in LOG_X:
        grid, mean, lo, hi = positive(grid, mean, lo, hi)
    return grid, mean, lo, hi


def plot_experiment(exp: Experiment, curves: dict, path: Path, runs: pd.DataFrame | None = None,
                    tail: float | None = None, formats=FORMATS, title: bool = True, inset: float = 0.0) -> float:
    """Draw the figure into ``path`` (and the other ``formats`` beside it). ``tail``: only the last part of
    the x axis (from that share of its end), each panel's y axis fitted to it. Returns how squeezed the
    ends are: the smallest, over panels with two or more lines, of the spread of the lines' last values
    over the panel's y range (1.0 when there is nothing to compare). ``inset``: a panel whose lines' ends span less
    than that share of it gets an inset of the last half of its x axis, y fitted to it (one figure shows both). In a
    report, a figure drawn from the same inputs before is reused (:mod:`fbo_cli.grids.plot_reuse`)."""
    from .plot_reuse import reuse

    return reuse(path, (repr(exp), curves, runs, tail, formats, title, inset),
                 lambda: _plot_experiment(exp, curves, path, runs, tail, formats, title, inset))


def _plot_experiment(exp: Experiment, curves: dict, path: Path, runs: pd.DataFrame | None,
                     tail: float | None, formats, title: bool, inset: float) -> float:

    settings = [s.name for s in exp.settings]
    n = len(settings)
    ncol = n if n <= 4 else 3
    nrow = math.ceil(n / ncol)
    fig, axes = subplots(nrow, ncol, width=PAGE_IN if n > 1 else 4.6, panel_h=2.1, sharey=tail is None)
    algo_of = {a.name: a.algo for a in exp.algorithms}
    styles = row_styles([(a.name, algo_of[a.name]) for a in exp.algorithms])
    squeeze, has_paper = 1.0, False
    for k, s in enumerate(settings):
        ax = axes[k // ncol][k % ncol]
        drawn, notes, same, shown = False, [], {}, {}
        lines: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (x, mean, lo, hi)
        styled: list[tuple[np.ndarray, np.ndarray, dict, int]] = []  # (x, mean, style, row) of each line drawn
        for j, a in enumerate(exp.algorithms):
            name, st_ = a.name, styles[a.name]
            mine_runs = pd.DataFrame() if runs is None or runs.empty else runs[
                (runs.algorithm == name) & (runs.setting == s)]
            st = {int(r.seed): r.status for r in mine_runs.itertuples()}
            mine = {key[2]: curves[key] for key in curves if key[0] == name and key[1] == s}
            mine = {q: r for q, r in mine.items() if exp.x in r and exp.metric in r and len(r)}
            dirs = frozenset(mine_runs.run_dir) if "run_dir" in mine_runs else frozenset()
            twin = same.get(dirs) if dirs else None
            if dirs and twin is None:
                same[dirs] = name
            for seed, r in mine.items():
                if st.get(seed) in ("diverged", "collapsed"):
                    ok = r[np.isfinite(r[exp.metric].to_numpy(float))]
                    ax.plot(ok[exp.x], ok[exp.metric], color=st_["color"], lw=0.7, ls="--")
                    if len(ok):
                        ax.plot(ok[exp.x].iloc[-1], ok[exp.metric].iloc[-1], "x", color=st_["color"], ms=7, mew=2)
                    drawn = True
            done = [r for q, r in mine.items() if st.get(q, "done") == "done"]
            bad = {q: sum(v == q for v in st.values()) for q in ("diverged", "collapsed", "failed", "not run")}
            note = ", ".join(f"{c} {q}" for q, c in bad.items() if c)
            if (note or (done and len(done) < len(exp.seeds))) and twin is None:  # a twin's runs: said once
                notes.append(f"{name}: n={len(done)}" + (f", {note}" if note else ""))
            if not done:
                ax.plot([], [], color=st_["color"], ls=st_["ls"], marker=st_["marker"], label=name)
                continue
            drawn = True
            grid, mean, lo, hi = _mean_band(exp, done)
            equal = next((o for o, (g, m) in shown.items() if len(g) == len(grid) and np.allclose(g, grid)
                          and np.allclose(m, mean, equal_nan=True)), None) if twin is None else None
            shown[name] = (grid, mean)
            lines.append((grid, mean, lo, hi))
            if twin is not None or equal is not None:  # an earlier row's curve: its markers on that row's line
                line(ax, grid, mean, {**st_, "ls": "none"}, name, k=j, mfc="none")
                notes.append(same_runs(name, twin) if twin is not None else f"{name} = {equal}, identical curves")
            else:
                line(ax, grid, mean, st_, name, k=j)
                styled.append((grid, mean, st_, j))
                if len(done) > 1:
                    band(ax, grid, lo, hi, st_["color"], exp.metric)
            has_paper |= _paper_marks(ax, exp, name, s, st_["color"], grid)
        if not drawn:
            empty(ax)
        ends = [m[np.isfinite(m)][-1] for _, m, _, _ in lines if np.isfinite(m).any()]
        if len(ends) > 1:
            span = np.ptp(np.concatenate([np.r_[lo[np.isfinite(lo)], hi[np.isfinite(hi)]] for _, _, lo, hi in lines]))
            squeeze = min(squeeze, float(np.ptp(ends) / span) if span > 0 else 1.0)
            if tail is None and span > 0 and np.ptp(ends) / span < inset:
                _inset(ax, styled, exp.metric)
        if exp.x in LOG_X:
            ax.set_xscale("log")
        if exp.metric in LOG_Y:
            from matplotlib.ticker import FormatStrFormatter

            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FormatStrFormatter("%.2f"))
            ax.yaxis.set_minor_formatter(FormatStrFormatter("%.2f"))
        if exp.x in LOG_X:
            pass
        elif exp.x in ("rounds", "iterations"):
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        if tail is not None and lines:  # the last part only, y fitted to what is visible there
            top = max(float(np.nanmax(x)) for x, _, _, _ in lines if len(x))
            first = min(float(x[0]) for x, *_ in lines if len(x))
            cut = top * tail if exp.x not in LOG_X else top ** tail * first ** (1 - tail)  # log: a share of decades
            seen = np.concatenate([np.r_[m[x >= cut], lo[x >= cut], hi[x >= cut]] for x, m, lo, hi in lines])
            seen = seen[np.isfinite(seen)]
            if len(seen):
                pad = 0.08 * max(float(np.ptp(seen)), 1e-6)
                ax.set_ylim(float(seen.min()) - pad, float(seen.max()) + pad)
            ax.set_xlim(cut, top * (1.02 if exp.x not in LOG_X else 1.2))
        if exp.target is not None:
            ax.axhline(exp.target, color="0.45", ls=":", lw=1, label=f"target {exp.target:g}")
        width = int(fig.get_figwidth() / ncol * 72 / (FONT_PT * 0.56))
        head = [s] if n > 1 or s != "default" else []  # a spec's one unnamed setting needs no title
        said = ["; ".join(notes)] if notes else []  # one paragraph: a panel's title stays short
        ax.set_title("\n".join(w for t in [*head, *said] for w in textwrap.wrap(t, width, break_on_hyphens=False)),
                     fontsize=FONT_PT + (0.5 if not notes else 0))
        ax.set_xlabel(X_AXES.get(exp.x, exp.x))
        ax.tick_params(labelleft=True)  # tick labels on every panel, shared y or not
        if k % ncol == 0:
            ax.set_ylabel(LABELS.get(exp.metric, exp.metric))
    for k in range(n, nrow * ncol):
        axes[k // ncol][k % ncol].set_visible(False)
    for ax in axes.flat:  # after every panel is drawn: a shared y axis fits them all first
        limit_y(ax, exp.metric)
    shared_legend(fig, [paper_handle()] if has_paper else None)
    if title:
        over = overrides_note(exp) if getattr(exp, "overrides", None) is not None else ""
        zoom = f" (zoom: the last {1 - tail:.0%} of the x axis)" if tail is not None else ""
        suptitle(fig, (exp.title or exp.name) + zoom + (f"; overridden: {over}" if over else ""))
    save(fig, path, formats)
    return squeeze


# where an inset may go, in axes fractions (x0, y0, width, height): its own tick labels and title need the room
# around it (left, below, above), so each sits inside the panel, clear of the main axes' labels
INSET_SPOTS = ((0.42, 0.22, 0.55, 0.36), (0.42, 0.52, 0.55, 0.36), (0.14, 0.22, 0.55, 0.36), (0.14, 0.52, 0.55, 0.36))
INSET_PAD = (0.1, 0.12, 0.02, 0.1)  # the room its tick labels and title take: left, below, right, above


def _fraction(v: np.ndarray, lim: tuple[float, float], scale: str) -> np.ndarray:
    """Values as fractions of an axis's limits (0 at the first, 1 at the second), on its linear or log scale."""
    f = (lambda a: np.log10(np.maximum(a, 1e-300))) if scale == "log" else np.asarray  # noqa: E731
    lo, hi = f(np.asarray(lim, float))
    return (f(np.asarray(v, float)) - lo) / (hi - lo) if hi != lo else np.full(len(v), 0.5)


def inset_spot(ax, styled: list) -> tuple[float, float, float, float] | None:
    """The first spot of :data:`INSET_SPOTS` whose rectangle (with its labels' room) covers no point of the panel's
    lines, in the panel's current limits; None when each covers one (the inset is then left out)."""
    pts = np.concatenate([np.c_[x, m] for x, m, *_ in styled])
    pts = pts[np.isfinite(pts).all(1)]
    frac = np.c_[_fraction(pts[:, 0], ax.get_xlim(), ax.get_xscale()),  # the limits autoscaled now (a shared
                 _fraction(pts[:, 1], ax.get_ylim(), ax.get_yscale())]  # axis's transLimits may be stale)
    for x0, y0, w, h in INSET_SPOTS:
        left, below, right, above = INSET_PAD
        inside = ((frac[:, 0] >= x0 - left) & (frac[:, 0] <= x0 + w + right)
                  & (frac[:, 1] >= y0 - below) & (frac[:, 1] <= y0 + h + above))
        if not inside.any():
            return x0, y0, w, h
    return None


def _between(x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A line's finite points and 200 more along it (an inset must not cover it between its points either)."""
    ok = np.isfinite(x) & np.isfinite(m)
    x, m = np.asarray(x, float)[ok], np.asarray(m, float)[ok]
    if len(x) < 2:
        return x, m
    fine = np.linspace(x.min(), x.max(), 200)
    order = np.argsort(x)
    return np.r_[x, fine], np.r_[m, np.interp(fine, x[order], m[order])]


def _inset(ax, styled: list, metric: str) -> bool:
    """An inset of the panel's lines over the last half of its x axis, y fitted to them, where it covers no curve,
    axis or title (:func:`inset_spot`); left out (False) where no such spot exists."""
    from matplotlib.ticker import MaxNLocator

    top = max(float(np.nanmax(x)) for x, *_ in styled)
    spot = inset_spot(ax, [_between(x, m) for x, m, *_ in styled])
    if spot is None:
        return False
    ins = ax.inset_axes(list(spot))
    seen = []
    for x, m, st, k in styled:
        keep = x >= top / 2
        line(ins, x[keep], m[keep], st, "_inset", k=k, n_marks=3)
        seen.append(m[keep])
    v = np.concatenate(seen)
    v = v[np.isfinite(v)]
    if len(v):
        pad = 0.1 * max(float(np.ptp(v)), 1e-4)
        ins.set_ylim(float(v.min()) - pad, float(v.max()) + pad)
    ins.set_title("last half, zoomed", fontsize=FONT_PT, pad=2)
    ins.tick_params(labelsize=FONT_PT - 1)
    ins.xaxis.set_major_locator(MaxNLocator(2))
    ins.grid(True, alpha=0.3)
    limit_y(ins, metric)
    return True


def _paper_marks(ax, exp: Experiment, name: str, setting: str, color: str, grid: np.ndarray) -> bool:
    """The paper's numbers of this row and setting as hollow diamonds, like with like only (our runs on the
    paper's dataset, ``reference_on``): its final value at our last x, its rounds to the target on the target
    line (x = rounds, the paper's target)."""
    ref = ((exp.reference or {}).get(name) or {}).get(setting) or {}
    on = exp.reference_on or {}
    sets = on.get("dataset")
    sets = [sets] if isinstance(sets, str) else list(sets or [])
    ours = {c.cfg.run.dataset for c in exp.cells if c.algorithm == name and c.setting == setting}
    if not ref or not sets or not ours <= set(sets):
        return False
    pts = []
    if "final" in ref and len(grid):
        pts.append((float(grid[-1]), float(ref["final"])))
    if (exp.x == "rounds" and exp.target is not None and ref.get("rounds_to_target") is not None
            and on.get("target") == exp.target):
        pts.append((float(ref["rounds_to_target"]), float(exp.target)))
    for x, y in pts:
        ax.plot([x], [y], ls="none", marker="D", mfc="none", mec=color, mew=1.2, ms=5, zorder=5)
    return bool(pts)
