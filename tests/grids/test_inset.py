"""The "last half, zoomed" inset goes where it covers no curve (issue 60), or is left out."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fbo_cli.grids.plots import INSET_SPOTS, inset_spot  # noqa: E402


def _ax(*lines):
    fig, (a, b) = plt.subplots(1, 2, sharey=True)
    a.plot([0, 100], [0.0, 1.0])  # the shared y axis spans 0..1 before the second panel's lines
    for x, y in lines:
        b.plot(x, y)
    return fig, b


def test_the_inset_avoids_the_lines_and_is_left_out_where_they_fill_the_panel():
    x = np.linspace(0, 100, 50)
    fig, ax = _ax((x, np.full(50, 0.95)))  # a line along the top: a low spot is free
    spot = inset_spot(ax, [(x, np.full(50, 0.95))])
    assert spot in INSET_SPOTS and spot[1] + spot[3] < 0.9
    fig, ax = _ax((x, 0.5 + 0.45 * np.sin(x / 3)))  # a line over the whole panel (on a shared y axis): no spot
    assert inset_spot(ax, [(x, 0.5 + 0.45 * np.sin(x / 3))]) is None
    plt.close("all")
