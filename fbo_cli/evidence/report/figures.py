"""The papers' figures, each in its paper's layout, drawn from run directories only (the committed evidence
``docs/results/`` by default): ``fbo figure NAME`` draws one, ``fbo report`` draws them all into its pages.

======================  ==================================================================================
name                    what it draws
======================  ==================================================================================
aggitd-fig2             FBO-AggITD Table 2 / Fig. 2: test accuracy against rounds, the four settings, 90%
aggitd-fig3, -fig4      FBO-AggITD Figs. 3 and 4 (non-IID, tau = 1; the SGD-type lower solver)
aggitd-fig6             FBO-AggITD Fig. 6: MNIST CNN training accuracy
codasca-fig1            CODASCA Fig. 1: test AUC against iterations per K, a line per I; AUC against I, I_max
codasca-fig1-fmnist     the same on Fashion-MNIST
zohfl-table1            ZO-HFL Table I as a dot chart, the paper's values marked
zohfl-fig1, zohfl-fig2  ZO-HFL Fig. 1 (the label split) and Fig. 2 (global loss against rounds, per tau)
fedbio-noise            FedBiO hyper-cleaning: final test accuracy against the noise rate
adafbio-noise           AdaFBiO hyper-cleaning: final test accuracy against the noise rate
======================  ==================================================================================
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...grids import plots as ps
from ..paper_figures import FIGURES, PaperFigure

BY_NAME = {f.name: f for f in FIGURES}
PAPER_IMAX = {"CODASCA": {16: 128, 8: 512}, "CODA+": {16: 32, 8: 128}}  # Yuan et al. Fig. 1, ImageNet-IH
COUNTS = ("figures/zohfl_fig1_mnist_a0.1.csv", "figures/zohfl_fig1_fashion-mnist_a0.1.csv")


class Evidence:
    """Each spec's experiment, runs and curves under one results root, loaded once."""

    def __init__(self, root: Path):
        self.root, self._cache = Path(root), {}

    def __call__(self, spec: str):
        if spec not in self._cache:
            from ...grids.compare import collect, command_line
            from ...grids.spec import load_spec

            exp = load_spec(spec, {"out_dir": str(self.root)})
            sets, seeds = command_line(self.root, exp.name)  # a compare made with --set / --seeds: its runs
            if sets or seeds is not None:
                exp = load_spec(spec, {**sets, "out_dir": str(self.root)}, seeds)
            runs, curves = collect(exp)
            self._cache[spec] = (exp, runs, curves)
        return self._cache[spec]


def draw(name: str, root: Path, out_dir: Path, formats=ps.FORMATS, evidence: Evidence | None = None
         ) -> tuple[list[Path], str]:
    """Draw the paper figure ``name`` from the runs under ``root`` into ``out_dir/<name>.<fmt>``; returns the
    files written (the PNG first when written) and the figure's caption."""
    if name not in BY_NAME:
        raise UsageError(f"unknown figure '{name}'; choose one of: {', '.join(BY_NAME)}", kind="unknown",
                         field="figure", value=name)
    fig = BY_NAME[name]
    ev = evidence or Evidence(root)
    path = Path(out_dir) / f"{file_stem(name)}.png"
    if fig.kind == "partition":
        inputs: tuple = tuple(Path(root) / c for c in COUNTS)
        produce = lambda: _partition(fig, Path(root), path, formats)  # noqa: E731
    else:
        for s in fig.specs:
            if not Path(s).is_file():
                raise UsageError(f"{name}: spec not found: {s}", kind="not_found", field="spec", path=s)
        loaded = [ev(s) for s in fig.specs]
        if not any((runs.status == "done").any() for _, runs, _ in loaded):
            raise UsageError(f"{name}: no finished runs under {root} for {', '.join(fig.specs)}",
                             kind="not_found", field="runs", path=root)
        kinds: dict[str, Callable] = {"curves": _curves, "codasca": codasca_fig1, "dots": table_dots,
                                      "noise": noise_figure}
        inputs = tuple((repr(exp), runs, curves) for exp, runs, curves in loaded)
        produce = lambda: kinds[fig.kind](fig, loaded, path, formats)  # noqa: E731
    from ...grids.plot_reuse import reuse

    def named():  # the result as the report keeps it: file names, caption
        files, cap = produce()
        return [p.name for p in files], cap

    names, cap = reuse(path, (fig, formats, inputs), named)
    return [path.parent / f for f in names], cap


def file_stem(name: str) -> str:
    """A figure's file name, in the one scheme of every file the report writes (its specs' names, the counts
    tables): words joined by underscores, ``aggitd-fig2`` -> ``aggitd_fig2``."""
    return name.replace("-", "_")


def _curves(fig: PaperFigure, loaded, path: Path, formats):
    from ...grids.plots import caption, plot_experiment

    exp, runs, curves = loaded[0]
    from ...grids.compare import ZOOM_BELOW

    squeeze = plot_experiment(exp, curves, path, runs, formats=formats, title=False, inset=ZOOM_BELOW)

    zoom = (" Where a panel's lines end close together, its inset shows the last half of the x axis with the y "
            "axis fitted to it.") if squeeze < ZOOM_BELOW else ""
    return [path.with_suffix("." + f) for f in formats], f"{fig.title}. {caption(exp)}{zoom}"


def _final(runs: pd.DataFrame) -> pd.DataFrame:
    done = runs[runs.status == "done"]
    return done.groupby(["algorithm", "setting"], sort=False)["final"].agg(["mean", "std", "count"]).reset_index()


def _dataset(exp) -> str:
    """The dataset of the spec's runs, as a panel title (the spec's name when it has none)."""
    return ", ".join(dict.fromkeys(c.cfg.run.dataset for c in exp.cells)) or exp.name


def _styles(exp):
    return ps.row_styles([(a.name, a.algo) for a in exp.algorithms])


def table_dots(fig: PaperFigure, loaded, path: Path, formats):
    """A table of final values as a dot chart: a panel per spec (dataset), a row per setting, methods offset
    within it; ours a filled dot with ± one std, the paper's a hollow diamond."""
    f, axes = ps.subplots(1, len(loaded), panel_h=3.0, sharey=True)
    for ax, (exp, runs, _) in zip(axes[0], loaded, strict=True):
        agg, styles = _final(runs), _styles(exp)
        names = [a.name for a in exp.algorithms]
        settings = [s.name for s in exp.settings]
        for i, s in enumerate(settings):
            for j, a in enumerate(names):
                y = i + (j - (len(names) - 1) / 2) * 0.8 / len(names)
                st = styles[a]
                row = agg[(agg.algorithm == a) & (agg.setting == s)]
                if len(row):
                    ax.errorbar(row["mean"], [y], xerr=row["std"].fillna(0), color=st["color"], marker=st["marker"],
                                ls="none", ms=4, capsize=2, label=a)
                ref = ((exp.reference or {}).get(a) or {}).get(s) or {}
                if "final" in ref:
                    ax.plot([ref["final"]], [y], ls="none", marker="D", mfc="none", mec=st["color"], mew=1.2, ms=5)
        ax.set_yticks(range(len(settings)), [re.sub(r",? pre-trained x0", "", s).replace(", ", "\n")
                                             for s in settings])
        ax.set_ylim(len(settings) - 0.5, -0.5)
        ax.set_xlabel("final test accuracy")
        ax.set_title(_dataset(exp))
        if not ax.lines:
            ps.empty(ax)
        ax.tick_params(labelleft=True)
        lo, hi = ax.get_xlim()
        ax.set_xlim(max(lo, 0.0), min(hi, 1.0))
    ps.shared_legend(f, [ps.paper_handle()])
    ps.save(f, path, formats)
    return [path.with_suffix("." + x) for x in formats], (
        f"{fig.title}. Filled markers: our mean over seeds with ± one standard deviation (bars clipped to [0, 1] "
        "by the axis); hollow diamonds: the paper's Table I values, in the method's colour.")


def _noise(exp, setting) -> float | None:
    """The setting's label-noise rate: its own, else the spec's base value (one rate for every setting)."""
    v = setting.set.get("noise", exp.base.get("noise"))
    return float(v) if v is not None else None


def noise_figure(fig: PaperFigure, loaded, path: Path, formats):
    """Final test accuracy (mean ± one std over seeds) against the label-noise rate, a line per method, a panel
    per spec (dataset)."""
    f, axes = ps.subplots(1, len(loaded), panel_h=2.4)
    for ax, (exp, runs, _) in zip(axes[0], loaded, strict=True):
        agg, styles = _final(runs), _styles(exp)
        p_of = {s.name: _noise(exp, s) for s in exp.settings}
        for k, a in enumerate(exp.algorithms):
            g = agg[agg.algorithm == a.name]
            g = g.assign(p=g.setting.map(p_of)).dropna(subset=["p"]).sort_values("p")
            if g.empty:
                continue
            st = styles[a.name]
            x = g.p.to_numpy() + (k - (len(exp.algorithms) - 1) / 2) * 0.006  # a small offset: error bars apart
            lo, hi = np.clip(g["mean"] - g["std"].fillna(0), 0, 1), np.clip(g["mean"] + g["std"].fillna(0), 0, 1)
            ax.errorbar(x, g["mean"], yerr=[g["mean"] - lo, hi - g["mean"]], color=st["color"], ls=st["ls"],
                        marker=st["marker"], ms=4, capsize=2, label=a.name)
        ax.set_xlabel("noise rate p (share of training labels flipped)")
        ax.set_title(_dataset(exp))
        if not ax.lines:
            ps.empty(ax)
            continue
        ax.set_xticks(sorted({p for p in p_of.values() if p is not None}))
        ps.limit_y(ax, "test_acc")
    axes[0][0].set_ylabel("final test accuracy")
    ps.shared_legend(f)
    ps.save(f, path, formats)
    return [path.with_suffix("." + x) for x in formats], (
        f"{fig.title}. Mean over seeds with ± one standard deviation (clipped to [0, 1]); methods are offset by "
        "a few thousandths of p so that their bars do not hide each other. Neither paper prints numbers for it.")


def _with_window(runs: pd.DataFrame) -> pd.DataFrame:
    from ...grids.derived import with_keys

    return with_keys(runs)


def codasca_fig1(fig: PaperFigure, loaded, path: Path, formats, delta: float = 0.01):
    """Yuan et al. (ICML 2021) Fig. 1's layout: a row per method of test AUC against the iterations each
    client ran (a panel per K, a line per window I, mean over seeds), then a row of final AUC against I per K
    with each method's I_max (mean over seeds) marked and the paper's ImageNet-IH I_max beside it."""
    import matplotlib as mpl

    exp, runs, curves = loaded[0]
    runs = _with_window(runs[runs.status != "not run"])
    Ks = sorted({int(k) for k in runs.K.dropna()}, reverse=True)
    Is = sorted({int(i) for i in runs.I.dropna()})
    algos = [a.name for a in exp.algorithms][::-1]  # the paper's method first
    f, axes = ps.subplots(len(algos) + 1, len(Ks), panel_h=1.75, sharey="row")
    zoomed = False
    cmap = mpl.colormaps["plasma"]  # sequential, its neighbouring tones differ in hue too (cividis greys its middle)
    icol = {I: cmap(0.9 * k / max(len(Is) - 1, 1)) for k, I in enumerate(Is)}
    for r, a in enumerate(algos):
        seen = []  # the row's curves after their first tenth: the row's y range (the lines differ by little)
        for c, K in enumerate(Ks):
            ax = axes[r][c]
            for I in Is:
                sub = runs[(runs.algorithm == a) & (runs.K == K) & (runs.I == I) & (runs.status == "done")]
                ms = [curves[(a, s, int(q))] for s, q in zip(sub.setting, sub.seed) if (a, s, int(q)) in curves]
                ms = [m for m in ms if "local_iters" in m]
                if not ms:
                    continue
                df = pd.concat([m.set_index("local_iters")[exp.metric] for m in ms], axis=1).sort_index()
                mean = df.mean(axis=1)
                ax.plot(df.index, mean, color=icol[I], lw=1.1, ls=ps.DASHES[Is.index(I) % len(ps.DASHES)],
                        marker=ps.MARKERS[Is.index(I) % len(ps.MARKERS)], markevery=max(len(mean) // 5, 1), ms=3,
                        label=f"I = {I}")
                seen.append(mean[mean.index >= 0.1 * mean.index.max()].to_numpy(float))
            if not ax.lines:
                ps.empty(ax)
            ax.set_title(f"{a}, K = {K}")
            ax.set_xlabel("iterations per client")
            ax.tick_params(labelleft=True)
        axes[r][0].set_ylabel("test AUC")
        vals = np.concatenate(seen) if seen else np.array([])
        vals = vals[np.isfinite(vals)]
        if len(vals):
            pad = 0.08 * max(float(np.ptp(vals)), 1e-3)
            axes[r][0].set_ylim(float(vals.min()) - pad, float(vals.max()) + pad)
            zoomed = True
    done = runs[runs.status == "done"]
    agg = done.groupby(["algorithm", "K", "I"])["final"].agg(["mean", "std"]).reset_index()
    styles, marked = _styles(exp), False
    for c, K in enumerate(Ks):
        ax = axes[-1][c]
        for a in algos:
            g = agg[(agg.algorithm == a) & (agg.K == K)].sort_values("I")
            if g.empty:
                continue
            st = styles[a]
            lo, hi = np.clip(g["mean"] - g["std"].fillna(0), 0, 1), np.clip(g["mean"] + g["std"].fillna(0), 0, 1)
            ax.errorbar(g.I, g["mean"], yerr=[g["mean"] - lo, hi - g["mean"]], color=st["color"], ls=st["ls"],
                        marker=st["marker"], ms=4, capsize=2, label=a)
            base = g[g.I == 1]["mean"]
            if len(base):
                ok = g[g["mean"] >= base.iloc[0] - delta]
                if len(ok):
                    ax.axvline(float(ok.I.max()), color=st["color"], ls=":", lw=1.2,
                               label="I_max (ours)")
            if K in PAPER_IMAX.get(a, {}):
                ax.plot([PAPER_IMAX[a][K]], [0.03], transform=ax.get_xaxis_transform(), ls="none", marker="D",
                        mfc="none", mec=st["color"], mew=1.2, ms=5, clip_on=False)
                marked = True
        ax.set_xscale("log", base=2)
        ax.set_title(f"final AUC against I, K = {K}")
        ax.set_xlabel("communication window I")
        ax.tick_params(labelleft=True)
    axes[-1][0].set_ylabel("final test AUC")
    for ax in axes.flat:
        ps.limit_y(ax, exp.metric)
    from matplotlib.lines import Line2D

    paper = Line2D([], [], ls="none", marker="D", mfc="none", mec="0.2", mew=1.2, ms=5,
                   label="paper's I_max (ImageNet-IH)")
    ps.shared_legend(f, [paper] if marked else None)
    ps.save(f, path, formats)
    return [path.with_suffix("." + x) for x in formats], (
        f"{fig.title}. Top rows: test AUC (mean over seeds) against the local iterations each client ran, one "
        "panel per method and client count K, one line per window I (dark: small I, light: large I; a marker and "
        "dash each)" + (", the y axis of each row fitted to the curves after their first tenth of the iterations "
                        "(their start lies below it)" if zoomed else "") + ". Bottom row: "
        "final test AUC against I (mean ± one std over seeds, clipped to [0, 1]); dotted vertical lines: each "
        f"method's I_max, the largest I whose mean AUC is within {delta:g} of its I = 1 AUC; hollow diamonds at the "
        "foot (at the paper's K only): the paper's I_max on ImageNet-IH (context only: another dataset).")


def _partition(fig: PaperFigure, root: Path, path: Path, formats):
    from .zohfl_section import draw_partition

    files = [root / c for c in COUNTS if (root / c).is_file()]
    if not files:
        raise UsageError(f"zohfl-fig1: no client x class counts under {root}/figures (`fbo figure zohfl-fig1 "
                         f"mnist` builds them from the data)", kind="not_found", path=root / "figures")
    f, axes = ps.subplots(1, len(files), panel_h=2.6)
    for ax, p in zip(axes[0], files, strict=True):
        draw_partition(ax, pd.read_csv(p).drop(columns="client").to_numpy())
        ax.set_title(re.sub(r"^zohfl_fig1_(.+)_a[\d.e-]+$", r"\1", p.stem))
    ps.save(f, path, formats)
    return [path.with_suffix("." + x) for x in formats], (
        f"{fig.title}, seed 0, after the test and server shares. Bubble area is proportional to the count; "
        f"from {', '.join(str(p) for p in files)}.")
