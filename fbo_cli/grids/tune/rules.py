"""The tuning's rules: how a run is scored, when a grid point is rejected, which point is chosen, where a
choice at a grid's edge goes on (extensions) and which choices need confirming (see :mod:`fbo_cli.grids.tune`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...runs.table import fmt_num
from ..spec import Cell, TuneSpec
from ..spec_types import Choice

MAX_EXTENSIONS = 6  # grid points added beyond one edge of one key, per (algorithm, setting)


CONFIRM_SEEDS = 2  # more seeds that a choice next to a rejected value must survive


MARGIN_SEEDS = 3  # a margin probe runs on the tuning seeds and, where they are fewer, the next seeds up to this many


RANKING_TOP = 3  # the accepted points per (algorithm, setting) that the ranking check runs at the full budget


UNSTABLE = ("diverged", "oscillates", "non-finite score", "collapsed")  # rejections: "the step is too large"


VETO_GRIDS = ("confirmation", "margin")  # runs that can veto a choice but never score or become one


def score_run(m: pd.DataFrame, score: str, tail: float, budget: int) -> tuple[float, float]:
    """(mean of the tail window, oscillation over it) of ``score`` in a run's metrics."""
    if score not in m or m.empty:
        return float("nan"), float("nan")
    m = m[m["rounds"] <= budget] if (m["rounds"] <= budget).any() else m
    w = m[score].to_numpy(float)[1:] if len(m) > 1 else m[score].to_numpy(float)  # row 0 is the start
    n = max(min(3, len(w)), math.ceil(tail * len(w)))  # at least 3 evaluations, to see an oscillation
    w = w[-n:]
    if not np.all(np.isfinite(w)):
        return float("nan"), float("nan")
    level = float(np.mean(np.abs(w))) or 1.0
    osc = (float(np.abs(np.diff(w)).sum()) - abs(float(w[-1] - w[0]))) / (2 * level) if len(w) > 1 else 0.0
    return float(np.mean(w)), osc


def collapse_reason(m: pd.DataFrame, score: str, metric: str | None, dataset: str) -> str | None:
    """Why a tuning run collapsed (:func:`fbo_cli.runs.table.collapsed`: its accuracy or AUC fell to chance level and
    stayed there), judged on the score's own split where it has an accuracy twin (``heldout_loss`` ->
    ``heldout_acc``, ``val_loss`` -> ``val_acc``), else on the run's headline metric; None when it did not."""
    from ...runs.table import chance_level, collapsed

    for col in (score.replace("_loss", "_acc"), score, metric):
        if col and col in m and chance_level(col, dataset) is not None:
            return collapsed(m[col], col, dataset)
    return None


def collect_tuning(cells: list[tuple[Cell, dict]], ts: TuneSpec,
                   extended: dict[tuple[str, str], list[dict]] | None = None,
                   recorded: dict[str, dict] | None = None,
                   margin: dict[tuple[str, str], list[dict]] | None = None,
                   states: dict | None = None) -> pd.DataFrame:
    """Every tuning run's score and verdict; a run absent here but in ``recorded`` (see
    :func:`recorded_runs`) stands as recorded. A run whose accuracy collapsed (:func:`collapse_reason`)
    is rejected as ``collapsed``, like one that diverged. ``states``: the run directories' states this command
    already holds (:meth:`fbo_cli.grids.plan.Plan.states`); the others are read here."""
    from ...runs.rundir import run_status

    rows = []
    for c, point in cells:
        extra = point in (extended or {}).get((c.algorithm, c.setting), [])
        probe = point in (margin or {}).get((c.algorithm, c.setting), [])
        state, s, _ = (states or {}).get(c.cfg.run_dir) or run_status(c.cfg.run_dir)
        status = (s or {}).get("status", "missing") if state == "finished" else "not run"
        mpath = c.cfg.run_dir / "metrics.csv"
        sc, osc, start = float("nan"), float("nan"), float("nan")
        cost = {"train_time_s": (s or {}).get("train_time_s"), "eval_time_s": (s or {}).get("eval_time_s")}
        old = (recorded or {}).get(c.cfg.run_dir.name) if status == "not run" else None  # by run id (record.run_key)
        if old is not None:
            status, sc, start, osc = old["status"], old["score"], old["start"], old["oscillation"]
            cost = {k: old.get(k) for k in cost}
        elif status in ("done", "diverged") and mpath.is_file():
            m = pd.read_csv(mpath)
            sc, osc = score_run(m, ts.score, ts.tail, ts.rounds or c.cfg.run.rounds)
            start = float(m[ts.score].iloc[0]) if ts.score in m and len(m) else float("nan")
            if status == "done" and collapse_reason(m, ts.score, (s or {}).get("metric"), c.cfg.run.dataset):
                status = "collapsed"
        rows.append({"algorithm": c.algorithm, "setting": c.setting, "seed": c.seed,
                     "point": point_name(point), **point,
                     "grid": ("margin" if probe else "confirmation" if c.seed not in ts.seeds
                              else "extension" if extra else "spec"),
                     "status": status, "score": sc, "start": start, "oscillation": osc,
                     "run_dir": str(c.cfg.run_dir), "recorded": old is not None,
                     # what the run cost (the report sums them into its section's compute, tuning included)
                     **cost})
    if not rows:  # nothing to judge (e.g. a ranking check after every point was rejected)
        return pd.DataFrame(columns=["algorithm", "setting", "seed", "point", "grid", "status", "score", "start",
                                     "oscillation", "run_dir", "recorded", "train_time_s", "eval_time_s", "reason",
                                     "rejected"])
    df = pd.DataFrame(rows)
    # a grid point is judged over all its tuning seeds; "no progress": the score ends no better than it began
    stuck = (df.score >= df.start) if ts.mode == "min" else (df.score <= df.start)
    bad = (df.status != "done") | ~np.isfinite(df.score) | (df.oscillation > ts.tolerance) | stuck
    df["reason"] = np.where(df.status != "done", df.status,
                            np.where(~np.isfinite(df.score), "non-finite score",
                                     np.where(df.oscillation > ts.tolerance, "oscillates",
                                              np.where(stuck, "no progress", ""))))
    df["rejected"] = bad
    conf = (df.grid == "confirmation") & (df.reason != "")
    df.loc[conf, "reason"] = df.reason[conf] + " on seed " + df.seed[conf].astype(str)
    # a point is judged over all its runs: a rejected run (a confirmation run's too) rejects the point
    df["rejected"] = df.groupby(["algorithm", "setting", "point"], sort=False).rejected.transform("any")
    return df


def point_name(point: dict) -> str:
    """A grid point as tuning.csv and ranking.csv name it: ``key=value, ...``."""
    return ", ".join(f"{k}={v}" for k, v in point.items())


def choose(df: pd.DataFrame, ts: TuneSpec, invalid: dict[tuple[str, str], list[tuple[dict, str]]] | None = None,
           ) -> dict[str, dict[str, Choice]]:
    """The best accepted point of each (algorithm, setting), with notes on how it sits in its grid:
    ``stable_edge`` (next to a rejected value, named), ``valid_edge`` (the last value of the key's
    valid range: the value beyond is not a valid configuration, named with the reason), ``at_grid_edge``
    (beyond the edge not tried yet), ``none`` (every point rejected), and ``margin`` (:func:`margin_probe`):
    a choice whose next larger value is unstable stands only when the step between them is stable too;
    otherwise it is rejected for want of margin and the next best is chosen."""
    chosen: dict[str, dict[str, Choice]] = {}
    for (algo, setting), g in df.groupby(["algorithm", "setting"], sort=False):
        g = g.copy()
        while True:  # reject a choice whose margin probe failed, then choose again
            scored = g[~g.grid.isin(VETO_GRIDS)]  # confirmation and margin runs veto a point; they never score
            agg = scored.groupby("point", sort=False).agg(score=("score", "mean"), rejected=("rejected", "any"))
            ok = agg[~agg.rejected]
            if ok.empty:
                break
            best = ok.score.idxmin() if ts.mode == "min" else ok.score.idxmax()
            row = scored[scored.point == best].iloc[0]
            vals = {k: plain(row[k]) for k in scored.columns if k not in _NOT_PARAMS and not pd.isna(row[k])}
            tried = g[g.grid != "margin"]  # the points tried and the runs that vetoed them
            probe = margin_probe(tried, ts.grids[algo], vals)
            runs = _rows_at(g[g.grid == "margin"], probe[0]) if probe else g.iloc[0:0]
            if not (len(runs) and runs.rejected.any()):
                break
            why = next(r for r in runs.reason if r)
            at = point_name(probe[0])
            g.loc[g.point == best, ["rejected", "reason"]] = [True, f"has no margin ({at}, {probe[1]}: {why})"]
        if ok.empty:
            chosen.setdefault(algo, {})[setting] = Choice(notes={"none": "every grid point was rejected"})
            continue
        notes: dict[str, list[str]] = {}
        for key, v, nxt, side in _edges(tried, ts.grids[algo], vals):
            col = key.split(",")[0].strip()
            beyond = tried[tried[col] == nxt] if nxt is not None else tried.iloc[0:0]
            for k in key_values(ts.grids[algo]):
                if k not in [p.strip() for p in key.split(",")] and k in beyond:
                    beyond = beyond[beyond[k] == vals[k]]
            bad = [why for p, why in (invalid or {}).get((algo, setting), [])
                   if all(p.get(part.strip()) == nxt for part in key.split(","))
                   and all(p.get(k) == vals.get(k) for k in p if k not in [q.strip() for q in key.split(",")])]
            if len(beyond) and beyond.rejected.any():
                why = next(r for r in beyond.reason if r)
                notes.setdefault("stable_edge", []).append(f"{key}={fmt_num(v)} is the {side} stable value: "
                                                           f"{key}={fmt_num(nxt)} {why}")
            elif bad:
                notes.setdefault("valid_edge", []).append(f"{key}={fmt_num(v)} is the {side} valid value: "
                                                          f"{key}={fmt_num(nxt)} is not valid ({bad[0]})")
            else:  # beyond the edge: not tried yet (or the extension limit, or no next value)
                notes.setdefault("at_grid_edge", []).append(key)
        notes["searched"] = [searched_note(tried[~tried.grid.isin(VETO_GRIDS)], ts.grids[algo], vals)]
        if probe:
            state = (f"stable on seeds {', '.join(str(s) for s in sorted(runs.seed.unique()))}" if len(runs)
                     else "not run yet")
            notes["margin"] = [f"{point_name(probe[0])} ({probe[1]}) is {state}"]
        chosen.setdefault(algo, {})[setting] = Choice(vals, {k: (", " if k == "at_grid_edge" else "; ").join(v)
                                                             for k, v in notes.items()})
    return chosen


def margin_probe(g: pd.DataFrame, grid: dict[str, list], best: dict[str, Any]) -> tuple[dict, str] | None:
    """The **margin rule**. A choice whose next larger value along a key was rejected as unstable
    (:data:`UNSTABLE`: diverged, oscillates, non-finite, collapsed) sits at the edge of stability, where
    a change of seed or hardware can push it over. It stands only if the geometric midpoint between it
    and that value (every such key moved at once, three significant digits) is stable on every tuning
    seed and, where the tuning seeds are fewer than :data:`MARGIN_SEEDS`, on the next seeds up to that many
    (:func:`fbo_cli.grids.tune.grid.margin_seeds`); and, as every choice next to a rejected value, on
    :data:`CONFIRM_SEEDS` more seeds (an integer key's midpoint is rounded, and not probed where it rounds onto an
    end). Returns
    (the probe point, what it is) or None when no key's larger neighbour is unstable."""
    point, what = dict(best), []
    for key, v, nxt, side in _edges(g, grid, best):
        parts = [p.strip() for p in key.split(",")]
        if side != "largest" or not _is_positive(v) or not _is_positive(nxt):
            continue
        beyond = _rows_at(g, {**best, **{p: nxt for p in parts}})
        reasons = [r.split(" on seed")[0] for r in beyond.reason if r]
        if not reasons or reasons[0] not in UNSTABLE:
            continue
        mid = plain(float(f"{math.sqrt(v * nxt):.3g}"))
        if all(isinstance(u, int) for u in key_values(grid)[parts[0]]):  # an integer key stays an integer
            mid = int(round(mid))
            if mid in (v, nxt):
                continue
        point.update({p: mid for p in parts})
        what.append(f"between the choice and {key}={fmt_num(nxt)}, which {reasons[0]}")
    return (point, "; ".join(what)) if what else None


def margin_probes(df: pd.DataFrame, chosen: dict[str, dict[str, Choice]], ts: TuneSpec,
                  margin: dict[tuple[str, str], list[dict]]) -> list[tuple[tuple[str, str], dict]]:
    """The margin probes still to run (:func:`margin_probe`), as ((algorithm, setting), point)."""
    out = []
    for algo, per in chosen.items():
        for setting, c in per.items():
            c = Choice.of(c)
            if not c.values:
                continue
            g = df[(df.algorithm == algo) & (df.setting == setting) & (df.grid != "margin")]
            probe = margin_probe(g, ts.grids[algo], dict(c.values))
            if probe and probe[0] not in margin.get((algo, setting), []):
                out.append(((algo, setting), probe[0]))
    return out


def _rows_at(g: pd.DataFrame, point: dict) -> pd.DataFrame:
    """The rows of ``g`` at ``point`` (every key of the point that ``g`` has, equal)."""
    keys = [k for k in point if k in g]
    return g[(g[keys].apply(lambda c: c.map(plain)) == pd.Series({k: point[k] for k in keys})).all(axis=1)] \
        if keys and len(g) else g.iloc[0:0]


def _is_positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def unconfirmed(chosen: dict[str, dict[str, Choice]]) -> list[tuple[tuple[str, str], dict]]:
    """The choices next to a rejected value (note ``stable_edge``), as ((algorithm, setting), point)."""
    return [((algo, setting), dict(c.values))
            for algo, per in chosen.items() for setting, c in per.items() if c.notes.get("stable_edge")]


def extensions(df: pd.DataFrame, chosen: dict, ts: TuneSpec, extended: dict[tuple[str, str], list[dict]],
               invalid: dict[tuple[str, str], list[tuple[dict, str]]] | None = None,
               ) -> list[tuple[tuple[str, str], dict]]:
    """The points to run next: for each choice at an edge whose value beyond has not been tried yet (nor
    found invalid), that point (the chosen values with the edge key moved one step beyond); at most
    :data:`MAX_EXTENSIONS` per (algorithm, setting)."""
    more = []
    for algo, per in chosen.items():
        for setting, c in per.items():
            c = Choice.of(c)  # a tuned.yaml's mapping, too
            if len(extended.get((algo, setting), [])) >= MAX_EXTENSIONS * len(ts.grids[algo]):  # per key
                continue
            g = df[(df.algorithm == algo) & (df.setting == setting) & ~df.grid.isin(VETO_GRIDS)]
            known = [p for p, _ in (invalid or {}).get((algo, setting), [])]  # not valid configurations
            if "none" in c.notes:  # every point rejected: below the grid, if every rejection was instability
                point = _below_unstable(g, ts.grids[algo])
                if point is not None and point not in known:
                    more.append(((algo, setting), point))
                continue
            best = dict(c.values)
            steps = [(key, nxt) for key, _, nxt, _ in _edges(g, ts.grids[algo], best) if nxt is not None]
            for key, nxt in steps + _revisits(g, ts.grids[algo], best):
                point = dict(best)
                for part in key.split(","):
                    point[part.strip()] = nxt
                if point not in known and not ((g[list(point)] == pd.Series(point)).all(axis=1)).any() \
                        and ((algo, setting), point) not in more:
                    more.append(((algo, setting), point))
    return more


def _line(g: pd.DataFrame, grid: dict[str, list], best: dict[str, Any], key: str) -> pd.DataFrame:
    """The rows of ``g`` along ``key`` through the point ``best`` (every other key at its value there)."""
    parts = [p.strip() for p in key.split(",")]
    for k in key_values(grid):
        if k not in parts and k in g:
            g = g[g[k] == best[k]]
    return g


def _revisits(g: pd.DataFrame, grid: dict[str, list], best: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each key not searched through the chosen point (one value tried along it there: the choice came from
    extending another key) with its neighbours there: the nearest values of its grid on each side, and beyond it
    (geometrically, :func:`_beyond`) where it is at the grid's edge; once two values are tried along it, a key at
    the edge is extended as any other (:func:`_edges`), until it is interior or the value beyond fails."""
    out = []
    for key, values in grid.items():
        col = key.split(",")[0].strip()
        v = best.get(col)
        tried = {plain(u) for u in _line(g, grid, best, key)[col].dropna()}
        if len(tried) >= 2 or v is None:
            continue
        known = sorted({plain(u) for u in values} | {plain(u) for u in g[col].dropna()} | {v},
                       key=lambda u: (not isinstance(u, (int, float)), u))
        if not all(isinstance(u, (int, float)) and not isinstance(u, bool) for u in known):
            out += [(key, u) for u in known if u != v]  # no order: every value of the grid
            continue
        below, above = [u for u in known if u < v], [u for u in known if u > v]
        for side in (below[-1:] or [_beyond(known, v)], above[:1] or [_beyond(known, v)]):
            if side and side[0] is not None and side[0] not in tried:
                out.append((key, side[0]))
    return out


def searched_note(g: pd.DataFrame, grid: dict[str, list], best: dict[str, Any]) -> str:
    """What was searched along each key, in words: every value tried, and those tried through the choice."""
    parts = []
    for key in grid:
        col = key.split(",")[0].strip()
        if col not in g:
            continue
        fmt = lambda vs: ", ".join(fmt_num(u) for u in vs)  # noqa: E731
        every = sorted({plain(u) for u in g[col].dropna()})
        at = sorted({plain(u) for u in _line(g, grid, best, key)[col].dropna()})
        parts.append(f"{key} over {fmt(every)}" + ("" if at == every else f" ({fmt(at)} at the choice)"))
    return "; ".join(parts)


def _edges(g: pd.DataFrame, grid: dict[str, list], best: dict[str, Any]) -> list[tuple[str, Any, Any, str]]:
    """(grid key, chosen value, the value beyond it, "largest" or "smallest") for each key whose chosen
    value is the largest or smallest *accepted* value along that key (the other keys at their chosen
    values). The value beyond is the nearest one tried there (rejected, then), else the grid's geometric
    continuation (None where there is none)."""
    out = []
    for key in grid:
        parts = [p.strip() for p in key.split(",")]
        line = _line(g, grid, best, key)
        tried = sorted(set(plain(v) for v in line[parts[0]].dropna()))
        ok = sorted(set(plain(v) for v in line[~line.rejected][parts[0]].dropna()))
        v = best.get(parts[0])
        if len(tried) < 2 or v not in ok:
            continue
        for side, at_end, past in (("largest", v == ok[-1], [u for u in tried if u > v]),
                                   ("smallest", v == ok[0], [u for u in tried if u < v][::-1])):
            if at_end:
                out.append((key, v, past[0] if past else _beyond(tried, v), side))
    return out


def _beyond(values: list, v) -> Any:
    """The next value beyond ``v``, an end of ``values``, continuing the grid geometrically (the ratio of
    ``v`` to its neighbour); None where that has no meaning (non-numbers, signs, one value). Below a 0
    at the bottom of a grid of non-negative numbers (e.g. ``mu_prox: [0, 0.001, 0.01]``) it is minus the
    next value: not a valid setting of any key (``resolve`` rejects negative numbers), so the choice of 0
    is labelled the smallest valid value."""
    nums = sorted(set(values))
    if len(nums) < 2 or not all(isinstance(u, (int, float)) and not isinstance(u, bool) and u >= 0 for u in nums):
        return None
    if v == nums[0] == 0:
        return -nums[1]
    nums = [u for u in nums if u > 0]  # a 0 at the bottom does not set the ratio at the top
    if len(nums) < 2:
        return None
    nb = nums[1] if v == nums[0] else nums[-2]
    nxt = v * (v / nb)
    if all(isinstance(u, int) for u in nums):
        nxt = int(round(nxt))
        if nxt == v or nxt < 1:
            return None
    return plain(float(f"{nxt:.3g}")) if not isinstance(nxt, int) else nxt


def _below_unstable(g: pd.DataFrame, grid: dict[str, list]) -> dict | None:
    """When every point of a grid was rejected and every rejection says the steps are too large
    (diverged, oscillates, non-finite), the point with every key one geometric step below its smallest
    value tried; None otherwise (e.g. "no progress", which a too-small or a too-large step can cause), or
    when that point was tried already."""
    g = g[~g.grid.isin(VETO_GRIDS)] if "grid" in g else g
    if g.empty or not g.rejected.all() or not g.reason.str.split(" on seed").str[0].isin(UNSTABLE).all():
        return None
    point = {}
    for key in grid:
        parts = [p.strip() for p in key.split(",")]
        tried = sorted(set(plain(v) for v in g[parts[0]].dropna()))
        nxt = _beyond(tried, tried[0]) if tried else None
        if nxt is None or (isinstance(nxt, (int, float)) and nxt < 0):
            return None
        point.update({p: nxt for p in parts})
    if ((g[list(point)] == pd.Series(point)).all(axis=1)).any():
        return None
    return point


def key_values(grid: dict[str, list]) -> dict[str, list]:
    """Each single key of a grid with its values (a key "a,b" gives a and b the same values)."""
    return {part.strip(): values for k, values in grid.items() for part in k.split(",")}


_NOT_PARAMS = {"algorithm", "setting", "seed", "point", "status", "score", "start", "oscillation", "run_dir",
               "reason", "rejected", "grid", "train_time_s", "eval_time_s", "recorded"}


def plain(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return int(v) if float(v).is_integer() and abs(v) > 1 else float(v)
    return v
