"""``fbo tune`` revisits every key at the chosen point (issue 61, item 3): a key whose line through the choice was
never searched (the choice came from extending another key) gets its neighbours there, and one at its grid's edge
is extended like the first key; the notes and the figure say what was searched per key."""

import math

import pandas as pd

from fbo_cli.grids.spec import TuneSpec
from fbo_cli.grids.tune import choose, extensions
from fbo_cli.grids.tune.record import plot_tuning

TS = TuneSpec([100], 10, "val_loss", "min", None, 0.25, math.inf, {}, {"A": {"outer_lr": [0.01, 0.1], "a": [0.1, 0.5]}})


def _rows(points):
    return pd.DataFrame([{"algorithm": "A", "setting": "s", "seed": 100, "point": f"outer_lr={lr}, a={a}",
                          "outer_lr": lr, "a": a, "grid": grid, "status": "done", "score": sc, "start": 9.0,
                          "oscillation": 0.0, "run_dir": "", "reason": "", "rejected": False}
                         for lr, a, sc, grid in points])


GRID = [(0.01, 0.1, 0.9, "spec"), (0.01, 0.5, 0.8, "spec"), (0.1, 0.1, 0.7, "spec"), (0.1, 0.5, 0.6, "spec")]


def test_a_key_left_at_its_edge_by_another_keys_extension_is_revisited_at_the_choice():
    # outer_lr was extended to 1 at a = 0.5 (the best a at the top of the grid), and 1 is interior now
    df = _rows(GRID + [(1.0, 0.5, 0.4, "extension"), (10.0, 0.5, 0.5, "extension")])
    chosen = choose(df, TS)
    assert chosen["A"]["s"].values == {"outer_lr": 1.0, "a": 0.5}
    more = extensions(df, chosen, TS, {("A", "s"): [{"outer_lr": 1.0, "a": 0.5}, {"outer_lr": 10.0, "a": 0.5}]})
    # a at the choice: its grid's neighbour below (0.1) and beyond its top (0.5 * 5 = 2.5)
    assert more == [(("A", "s"), {"outer_lr": 1.0, "a": 0.1}), (("A", "s"), {"outer_lr": 1.0, "a": 2.5})]
    assert "a over 0.1, 0.5 (0.5 at the choice)" in chosen["A"]["s"].notes["searched"]
    # once a is searched there and 0.5 is still best but at its edge, it is extended like the first key
    df2 = pd.concat([df, _rows([(1.0, 0.1, 0.45, "extension")])])
    more = extensions(df2, choose(df2, TS), TS, {})
    assert more == [(("A", "s"), {"outer_lr": 1.0, "a": 2.5})]


def test_the_how_chosen_text_and_the_figure_follow_the_choice(tmp_path):
    df = _rows(GRID + [(1.0, 0.5, 0.4, "extension"), (1.0, 0.1, 0.45, "extension")])
    c = choose(df, TS)["A"]["s"]
    assert "searched: outer_lr over 0.01, 0.1, 1;" in c.how_chosen() and "a over 0.1, 0.5" in c.how_chosen()
    plot_tuning(df, TS, tmp_path / "tuning.png", "t", {"A": "aggitd"}, {"A": {"s": c}})
    assert (tmp_path / "tuning.png").stat().st_size > 0
