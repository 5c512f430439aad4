"""The figures, checked without eyes: each kind drawn from small synthetic evidence, then its artists
inspected (bands inside the metric's range, one legend, every row of the table drawn, titles apart, tick
labels on every panel, nothing at x <= 0 on a log axis) and its PDF and SVG written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from fbo_cli.evidence.paper_figures import PaperFigure
from fbo_cli.grids import plots as ps
from fbo_cli.grids.spec import Experiment


@pytest.fixture
def captured(monkeypatch):
    """The figures handed to ``plots.save``, drawn (constrained layout applied) before they are saved."""
    figs = []
    real = ps.save

    def save(fig, path, formats=ps.FORMATS):
        fig.canvas.draw()
        fig._test_renderer = fig.canvas.get_renderer()  # the Agg canvas goes when the figure is closed
        figs.append(fig)
        written = real(fig, path, formats)
        assert [p.suffix for p in written] == [f".{f}" for f in sorted(formats, key=lambda f: f != "png")]
        assert all(p.stat().st_size > 500 for p in written)
        return written

    monkeypatch.setattr(ps, "save", save)
    return figs


def _exp(x="rounds", **kw) -> Experiment:
    base = dict(name="t", title="A synthetic experiment whose title is long enough to wrap over two lines of "
                "the figure", task="hyperrep", metric="test_acc", metrics=[], target=0.9, x=x, seeds=[0, 1, 2],
                algorithms=[{"name": "A (paper's steps)", "algo": "aggitd"}, {"name": "A (tuned)", "algo": "aggitd"},
                            {"name": "B", "algo": "fednest"}],
                settings=[{"name": "IID, tau=1"}, {"name": "non-IID, tau=5, with a long setting name"}],
                reference={"B": {"IID, tau=1": {"final": 0.93, "rounds_to_target": 40}}},
                reference_on={"dataset": "mnist", "target": 0.9}, band="std")
    return Experiment(**{**base, **kw})


def _evidence(exp: Experiment):
    """Curves near 1.0 with a wide spread (a std band would cross 1), 'A (tuned)' the same runs as
    'A (paper's steps)' in the first setting only."""
    rng = np.random.default_rng(0)
    rows, curves = [], {}
    for a in exp.algorithms:
        for k, s in enumerate(exp.settings):
            for seed in exp.seeds:
                x = np.arange(0, 101, 10)
                y = np.clip(1 - 0.9 * np.exp(-x / 15) + rng.normal(0, 0.04, len(x)) + 0.03 * seed, 0, 1)
                curves[(a["name"], s["name"], seed)] = pd.DataFrame({"rounds": x, "samples": x * 1000,
                                                                      "test_acc": y})
                same = a["name"] == "A (tuned)" and k == 0
                rows.append({"algorithm": a["name"], "setting": s["name"], "seed": seed, "status": "done",
                             "final": y[-1], "algo": a["algo"],
                             "run_dir": f"/r/{'A (paper' + chr(39) + 's steps)' if same else a['name']}/{k}/{seed}"})
    return pd.DataFrame(rows), curves


def _check_common(fig, metric_range=(0.0, 1.0)):
    assert len(fig.legends) == 1, "one shared legend"
    assert all(ax.get_legend() is None for ax in fig.axes), "no legend inside a panel"
    r = fig._test_renderer
    lo, hi = metric_range
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for c in ax.collections:
            if isinstance(c, PolyCollection):
                ys = np.concatenate([p.vertices[:, 1] for p in c.get_paths()])
                assert ys.min() >= lo - 1e-9 and ys.max() <= hi + 1e-9, "band outside the metric's range"
        assert any(t.get_text() for t in ax.get_yticklabels()), "tick labels on every panel"
        assert any(t.get_text() for t in ax.get_xticklabels())
    sup = fig._suptitle.get_window_extent(r) if fig._suptitle is not None else None
    titles = [ax.title.get_window_extent(r) for ax in fig.axes if ax.get_visible() and ax.get_title()]
    for i, a in enumerate(titles):
        assert sup is None or not sup.overlaps(a), "suptitle over a panel title"
        for b in titles[i + 1:]:
            assert not a.overlaps(b), "two panel titles overlap"
    width = fig.bbox.width
    for t in [*titles, *(fig.legends[0].get_window_extent(r),)] + ([sup] if sup is not None else []):
        assert t.x0 >= -1 and t.x1 <= width + 1, "text cut at the figure's edge"
    for t in fig.findobj(lambda o: hasattr(o, "get_fontsize") and hasattr(o, "get_text")):
        if t.get_text() and t.get_visible():
            assert t.get_fontsize() >= ps.FONT_PT, f"font below {ps.FONT_PT} pt: {t.get_text()!r}"


def test_curves_figure(tmp_path, captured):
    from fbo_cli.grids.plots import plot_experiment

    exp = _exp()
    runs, curves = _evidence(exp)
    plot_experiment(exp, curves, tmp_path / "c.png", runs)
    fig = captured[-1]
    _check_common(fig)
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {a["name"] for a in exp.algorithms} <= labels and any(s.startswith("paper") for s in labels)
    first, second = fig.axes[:2]
    # every row of the table is a line in each panel; the same-run row is drawn once (markers only), named
    for ax in (first, second):
        drawn = {ln.get_label() for ln in ax.get_lines()}
        assert {a["name"] for a in exp.algorithms} <= drawn
    tuned = [ln for ln in first.get_lines() if ln.get_label() == "A (tuned)"][0]
    assert tuned.get_linestyle() == "None" and "same runs" in first.get_title()
    assert [ln for ln in second.get_lines() if ln.get_label() == "A (tuned)"][0].get_linestyle() != "None"
    # colours fixed per method, rows of one method told apart by the dash
    a1, a2 = ([ln for ln in second.get_lines() if ln.get_label() == n][0] for n in ("A (paper's steps)", "A (tuned)"))
    assert a1.get_color() == a2.get_color() == ps.OI["vermillion"] and a1.get_linestyle() != a2.get_linestyle()


def test_log_axis_starts_at_the_first_measured_point(tmp_path, captured):
    from fbo_cli.grids.plots import plot_experiment

    exp = _exp(x="samples")
    runs, curves = _evidence(exp)
    plot_experiment(exp, curves, tmp_path / "s.png", runs, tail=0.5, formats=("png",))
    fig = captured[-1]
    _check_common(fig)
    for ax in fig.axes:
        assert ax.get_xscale() == "log"
        for ln in ax.get_lines():
            if ln.get_transform() is not ax.transData:  # the target line spans the axes, in axes coordinates
                continue
            x = np.asarray(ln.get_xdata(), float)
            assert (x[np.isfinite(x)] > 0).all(), "a line from x <= 0 on a log axis"


def test_paper_figure_kinds(tmp_path, captured):
    from fbo_cli.evidence.report.figures import codasca_fig1, noise_figure, table_dots

    exp = _exp(algorithms=[{"name": "FedAvg", "algo": "fedavg"}, {"name": "FedProx", "algo": "fedprox"},
                           {"name": "ZO-HFL", "algo": "zohfl"}],
               settings=[{"name": "p=0.2", "set": {"noise": 0.2}}, {"name": "p=0.4", "set": {"noise": 0.4}}],
               reference={"ZO-HFL": {"p=0.2": {"final": 0.8}}})
    runs, curves = _evidence(exp)
    fig = PaperFigure("x", "zohfl", "a figure", ())
    files, cap = table_dots(fig, [(exp, runs, curves)], tmp_path / "dots.png", ("png", "pdf", "svg"))
    assert "paper" in cap and all(f.is_file() for f in files)
    _check_common(captured[-1])
    dots = captured[-1]
    assert {t.get_text() for t in dots.legends[0].get_texts()} >= {"FedAvg", "FedProx", "ZO-HFL"}
    noise_figure(fig, [(exp, runs, curves)], tmp_path / "noise.png", ("svg",))
    _check_common(captured[-1])
    assert (tmp_path / "noise.svg").is_file() and not (tmp_path / "noise.png").exists()

    cod = _exp(metric="test_auc", algorithms=[{"name": "CODA+", "algo": "codaplus"},
                                              {"name": "CODASCA", "algo": "codasca"}],
               settings=[{"name": f"K={k}, I={i}", "set": {"clients": k, "I": i}} for k in (16, 8) for i in (1, 8, 64)])
    runs, curves = _evidence(cod)
    curves = {k: v.assign(local_iters=v.rounds * 10, test_auc=v.test_acc) for k, v in curves.items()}
    codasca_fig1(fig, [(cod, runs, curves)], tmp_path / "cod.png", ("png",))
    f = captured[-1]
    _check_common(f)
    assert len(f.axes) == 6  # a row per method, a panel per K, then the AUC-against-I row
    labels = {t.get_text() for t in f.legends[0].get_texts()}
    assert {"I = 1", "I = 8", "I = 64", "CODA+", "CODASCA"} <= labels


def test_formats_and_pages():
    from fbo_cli.errors import UsageError
    from fbo_cli.evidence.report.pages import split

    assert ps.parse_formats(["pdf,svg", "pdf"]) == ("pdf", "svg") and ps.parse_formats(None) == ps.FORMATS
    with pytest.raises(UsageError, match="jpg"):
        ps.parse_formats(["jpg"])
    from fbo_cli.evidence.report.papers import Paper

    papers = (Paper("a", "Paper A", ""), Paper("b", "Paper B", ""))
    md = ("# T\n\nrule\n\n## Summary\n\nx\n\n## Paper A\n\na\n\n## Paper B\n\nb\n\n"
          "## Do the committed numbers reproduce? x\n\nc\n")
    parts = dict(split(md, papers))
    index = parts["index"]
    assert "## Summary" in index and "## Do the committed" in index and "Paper A" not in index
    assert parts["a"].startswith("# T") and "## Paper A" in parts["a"] and "Paper B" not in parts["a"]
    assert "## Paper B" in parts["b"] and "reproduce" not in parts["b"]


def test_the_ci95_band_uses_the_t_quantile_at_any_number_of_seeds():
    from fbo_cli.grids.plots import _mean_band

    exp = _exp(band="ci95")
    rng = np.random.default_rng(1)
    for n in (3, 10, 30):
        done = [pd.DataFrame({"rounds": [0, 10], "test_acc": rng.normal(0.5, 0.1, 2)}) for _ in range(n)]
        _, mean, lo, hi = _mean_band(exp, done)
        sd = np.std([d.test_acc.to_numpy() for d in done], axis=0, ddof=1)
        t = {3: 4.302653, 10: 2.262157, 30: 2.045230}[n]  # t_{0.975, n-1}; 1.96 would be 13% too narrow at 10
        assert np.allclose(hi - mean, t * sd / np.sqrt(n), rtol=1e-5) and np.allclose(mean - lo, hi - mean)


def test_an_empty_panel_says_so_and_a_base_noise_rate_is_drawn(tmp_path, captured):
    from fbo_cli.evidence.report.figures import noise_figure

    algos = [{"name": "FedAvg", "algo": "fedavg"}, {"name": "FedProx", "algo": "fedprox"}]
    one = _exp(algorithms=algos, settings=[{"name": "default"}], base={"noise": 0.4})  # the rate in the base
    two = _exp(name="u", algorithms=algos, settings=[{"name": "p=0.2", "set": {"noise": 0.2}}])
    runs, curves = _evidence(one)
    none, _ = _evidence(two)
    noise_figure(PaperFigure("x", "adafbio", "a figure", ()), [(one, runs, curves), (two, none.assign(
        status="not run"), {})], tmp_path / "n.png", ("png",))
    drawn, empty = captured[-1].axes
    assert [t.get_text() for t in empty.texts] == ["no finished runs"] and not empty.lines
    assert not drawn.texts and len(drawn.lines) >= 2 and list(drawn.get_xticks()) == [0.4]


def test_rows_of_one_colour_differ_in_marker_and_dash_and_squeezed_ends_get_an_inset(tmp_path, captured):
    from fbo_cli.grids.plots import plot_experiment

    st = ps.row_styles([("FedNest", "fednest"), ("FedNest (tuned)", "fednest"), ("FedNest-SGD", "fednest-sgd")])
    assert len({s["color"] for s in st.values()}) == 1  # one method's colour, told apart in grey scale too
    assert len({s["marker"] for s in st.values()}) == 3 and len({s["ls"] for s in st.values()}) == 3
    exp = _exp()
    runs, curves = _evidence(exp)
    curves = {k: v.assign(test_acc=np.minimum(v.test_acc, 0.9 + 0.001 * len(k[0]))) for k, v in curves.items()}
    plot_experiment(exp, curves, tmp_path / "i.png", runs, formats=("png",), inset=0.15)
    insets = [c for ax in captured[-1].axes for c in ax.child_axes]
    assert insets and all(i.get_title() == "last half, zoomed" for i in insets)
    lo, hi = insets[0].get_ylim()
    assert hi - lo < 0.2  # fitted to the ends, not 0-1


def test_the_tuning_plot_shows_each_methods_rejected_values_apart_with_one_legend_entry(tmp_path, captured):
    from fbo_cli.grids.spec_types import TuneSpec
    from fbo_cli.grids.tune.record import plot_tuning

    ts = TuneSpec(seeds=[100], rounds=5, score="val_loss", mode="min", setting=None, tail=0.2,
                  tolerance=0.1, extra={}, grids={"A": {"lr": [0.01, 0.1, 1.0]}, "B": {"lr": [0.01, 0.1, 1.0]}})
    df = pd.DataFrame([{"algorithm": a, "setting": "s", "point": f"lr={v}", "lr": v, "score": 0.5 + v,
                        "rejected": v == 1.0, "grid": "grid"} for a in "AB" for v in (0.01, 0.1, 1.0)])
    plot_tuning(df, ts, tmp_path / "tuning.png", "t", {"A": "aggitd", "B": "fednest"})
    fig = captured[-1]
    xs = [ln for ln in fig.axes[0].lines if ln.get_label() == "_rejected"]
    assert len(xs) == 2 and len({ln.get_ydata()[0] for ln in xs}) == 2  # each method's x on its own row
    assert {ln.get_markeredgecolor() for ln in xs} == {ps.OI["vermillion"], ps.OI["blue"]}
    assert {ln.get_marker() for ln in xs} == {"o", "s"} and all(ln.get_markerfacecolor() == "none" for ln in xs)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sum("rejected" in t for t in labels) == 1 and {"A", "B"} <= set(labels)


def test_the_tuning_plots_y_label_stays_within_its_panel_below_the_title(tmp_path, captured):
    """issue 60: tuning.png's rotated y label ran into the figure's title."""
    from fbo_cli.grids.spec_types import TuneSpec
    from fbo_cli.grids.tune.record import plot_tuning

    ts = TuneSpec(seeds=[100], rounds=5, score="heldout_loss", mode="min", setting=None, tail=0.2, tolerance=0.1,
                  extra={}, grids={"A": {"lr": [0.01, 0.1, 1.0], "mu": [0.1, 1.0]}})
    df = pd.DataFrame([{"algorithm": "A", "setting": "s", "point": f"lr={v},mu={u}", "lr": v, "mu": u,
                        "score": 0.5 + v + u, "rejected": False, "grid": "grid"} for v in (0.01, 0.1, 1.0)
                       for u in (0.1, 1.0)])
    plot_tuning(df, ts, tmp_path / "tuning.png", "a long title " * 8, {"A": "aggitd"})
    fig = captured[-1]
    fig.canvas.draw()
    title = fig._suptitle.get_window_extent()
    labelled = [ax for ax in fig.axes if ax.get_visible() and ax.yaxis.label.get_text()]
    assert labelled and all(not ax.yaxis.label.get_text() for ax in fig.axes[1:2])  # the first column's only
    for ax in labelled:  # the label within its panel's height: clear of the title and of the panels around
        label, box = ax.yaxis.label.get_window_extent(), ax.get_window_extent()
        assert label.y1 <= min(box.y1, title.y0) + 1 and label.y0 >= box.y0 - 1
