"""A tuning's record in ``<out>/compare/<name>/``: writing it (``tuning.csv``, ``tuned.yaml`` with the
procedure in words, ``ranking.csv``, ``tuning.png``, and an unfinished tuning's ``tuning.partial.*``),
reading it back (a resumed tuning, ``--relabel``, ``--ranking-only``) and the chosen-values table that
``fbo tune`` prints."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...runs.config import load_yaml
from ...runs.identity import user_code
from ...runs.rundir import atomic_write, write_yaml
from ...runs.table import fmt_num
from ..spec import Experiment, TuneSpec
from ..spec_types import Choice, chosen_on_disk
from .rules import CONFIRM_SEEDS, MARGIN_SEEDS, MAX_EXTENSIONS, _line

PARTIAL = ("tuning.partial.yaml", "tuning.partial.csv")  # an unfinished tuning's record (:mod:`fbo_cli.grids.tune`)


def tuning_rule(ts: TuneSpec) -> dict[str, Any]:
    return {"score": ts.score, "tail": ts.tail, "rounds": ts.rounds or "budget"}


def run_key(run_dir: str | Path) -> str:
    """A tuning run's key in a recorded tuning: its run id (the folder's name), whatever the results root it was
    recorded under (``results/...`` on one machine, ``docs/results/...`` or an absolute path on another)."""
    return Path(str(run_dir)).name


def recorded_runs(exp: Experiment, ts: TuneSpec) -> dict[str, dict]:
    """The runs of this spec's recorded tuning (``<out>/compare/<name>/tuning.csv``, and the record of an
    unfinished one, ``tuning.partial.csv``) that finished, by :func:`run_key`, where they were scored by
    today's rule (same score, tail and budget); else nothing."""

    outdir = exp.out_root / "compare" / exp.name
    records = []
    try:
        _, tuned, table = recorded_tuning(exp)
        records.append((tuned, table))
    except UsageError:
        pass
    meta, csv = (outdir / f for f in PARTIAL)
    if meta.is_file() and csv.is_file():
        records.append((load_yaml(meta.read_bytes(), str(meta)) or {}, pd.read_csv(csv, keep_default_na=False,
                                                                             na_values=[""])))
    keep = ["status", "score", "start", "oscillation", "train_time_s", "eval_time_s"]
    out: dict[str, dict] = {}
    for tuned, table in records:  # the unfinished tuning's record last: it is the newer
        if {k: tuned.get(k) for k in ("score", "tail", "rounds")} != tuning_rule(ts):
            continue
        rows = table[table.status.isin(["done", "diverged", "failed"])]
        out.update({run_key(r["run_dir"]): {k: r[k] for k in keep if k in r} for _, r in rows.iterrows()})
    return out


def write_partial(outdir: Path, ts: TuneSpec, table: pd.DataFrame) -> None:
    """The record of an unfinished tuning (its rule and its table so far), rewritten before each batch of
    runs: a tuning stopped in it resumes from here elsewhere."""
    write_yaml(outdir / PARTIAL[0], {**tuning_rule(ts), "note": "an unfinished tuning's runs so far"})
    atomic_write(outdir / PARTIAL[1], table.to_csv(index=False))


def write_record(exp: Experiment, spec_path: str | Path, ts: TuneSpec, outdir: Path, table: pd.DataFrame,
                 chosen: dict[str, dict[str, Choice]], extended: dict[tuple[str, str], list[dict]],
                 confirm: dict[tuple[str, str], list[dict]], extra_seeds: list[int], ranking,
                 margin: dict[tuple[str, str], list[dict]] | None = None) -> None:
    """A finished tuning's record: ``tuning.csv``, ``ranking.csv`` (when the ranking was checked),
    ``tuned.yaml`` and ``tuning.png``; the unfinished tuning's record goes."""
    atomic_write(outdir / "tuning.csv", table.to_csv(index=False))
    for f in PARTIAL:  # the finished record below replaces the unfinished one
        (outdir / f).unlink(missing_ok=True)
    if ranking is not None:
        atomic_write(outdir / "ranking.csv", ranking[0].to_csv(index=False))
    write_yaml(outdir / "tuned.yaml", {
        "spec": str(spec_path), "procedure": procedure_text(ts), "score": ts.score, "mode": ts.mode,
        "seeds": ts.seeds, "rounds": ts.rounds or "budget", "tail": ts.tail,
        "tolerance": ts.tolerance if math.isfinite(ts.tolerance) else "off",
        "setting": ts.setting, "grids": ts.grids,
        "extended": {f"{a} | {s}": pts for (a, s), pts in extended.items()},
        "confirmed": {f"{a} | {s}": {"points": pts, "seeds": extra_seeds} for (a, s), pts in confirm.items()},
        "margin": {f"{a} | {s}": pts for (a, s), pts in (margin or {}).items()},
        "chosen": chosen_on_disk(chosen),
        "made_by": exp.procedure,  # the procedure these values apply to (load_tuned checks the spec against it)
        **({"code": user_code(exp.cells)} if user_code(exp.cells) else {}),
        **({"ranking_check": ranking[1]} if ranking is not None else {})})
    plot_tuning(table, ts, outdir / "tuning.png", exp.title or exp.name, {a.name: a.algo for a in exp.algorithms},
                chosen)


def keep_the_rest(exp: Experiment, ts: TuneSpec, table: pd.DataFrame, chosen: dict, extended: dict, confirm: dict,
                  margin: dict, ranking) -> tuple:
    """A tuning of a subset of the spec (``fbo tune -a/-S``) completed with the recorded tuning of the rest, so that
    its record (``tuning.csv``, ``tuned.yaml``, ``ranking.csv``) still holds every (algorithm, setting): the rows,
    choices, extensions, confirmations, margin probes and ranking verdicts of the pairs it did not tune are kept as
    recorded. Returns ``(table, chosen, extended, confirm, margin, ranking)``."""
    mine = {(a.name, s.name) for a in exp.algorithms for s in exp.settings if ts.setting in (None, s.name)}
    try:
        outdir, tuned, old = recorded_tuning(exp)
    except UsageError:  # nothing recorded yet: the subset is the record
        return table, chosen, extended, confirm, margin, ranking
    theirs = lambda a, s: (a, s) not in mine  # noqa: E731
    table = pd.concat([old[[theirs(a, s) for a, s in zip(old.algorithm, old.setting)]], table], ignore_index=True)
    merged = {a: {s: Choice.of(c) for s, c in per.items() if theirs(a, s)}
              for a, per in (tuned.get("chosen") or {}).items()}
    for a, per in chosen.items():
        merged.setdefault(a, {}).update(per)
    pairs = lambda d: {tuple(k.split(" | ")): v for k, v in (d or {}).items() if theirs(*k.split(" | "))}  # noqa: E731
    extended = {**pairs(tuned.get("extended")), **extended}
    confirm = {**{k: v["points"] for k, v in pairs(tuned.get("confirmed")).items()}, **confirm}
    margin = {**pairs(tuned.get("margin")), **(margin or {})}
    if ranking is not None and isinstance(tuned.get("ranking_check"), dict) and (outdir / "ranking.csv").is_file():
        rows = pd.read_csv(outdir / "ranking.csv")
        rows = rows[[theirs(a, s) for a, s in zip(rows.algorithm, rows.setting)]]
        ranking = (pd.concat([rows, ranking[0]], ignore_index=True),
                   {**{k: v for k, v in tuned["ranking_check"].items() if theirs(*k.split(" | "))}, **ranking[1]})
    return table, merged, extended, confirm, margin, ranking


def recorded_tuning(exp: Experiment) -> tuple[Path, dict, pd.DataFrame]:
    """A recorded tuning: its folder, ``tuned.yaml`` and ``tuning.csv`` (older tables completed)."""

    outdir = exp.out_root / "compare" / exp.name
    if not (outdir / "tuned.yaml").is_file() or not (outdir / "tuning.csv").is_file():
        raise UsageError(f"no tuned.yaml and tuning.csv in {outdir} (run `fbo tune` first)",
                         kind="not_found", field="tuning", path=outdir)
    table = pd.read_csv(outdir / "tuning.csv", keep_default_na=False, na_values=[""])
    table["reason"] = table["reason"].astype(object).fillna("") if "reason" in table else ""
    if "grid" not in table:  # recorded before extensions were marked: every row a grid point
        table["grid"] = "spec"
    return outdir, load_yaml((outdir / "tuned.yaml").read_bytes(), str(outdir / "tuned.yaml")), table


def stale_records(table: pd.DataFrame, recorded: dict[str, dict], rtol: float = 1e-6) -> list[str]:
    """Runs scored from their files today whose score differs from the recorded tuning's score for the
    same run directory: the run was made again (same configuration, changed code or machine) after the
    record was written. Today's files decide; this says that the two disagreed."""
    out = []
    for _, r in table[~table.recorded.astype(bool)].iterrows():
        old = recorded.get(run_key(r.run_dir))
        if old is None or not np.isfinite(r.score) or not np.isfinite(old.get("score", np.nan)):
            continue
        if abs(r.score - old["score"]) > rtol * max(abs(r.score), abs(old["score"])):
            out.append(f"{r.algorithm}, {r.point}, seed {r.seed}: the run on disk scores {r.score:.6g}, the recorded "
                       f"tuning {old['score']:.6g} (the run was made again after the record; the run decides)")
    return out


def chosen_rows(outdir: Path) -> tuple[str, list[tuple[str, str, str, str]]]:
    """The title and the rows (algorithm, setting, values, note) of the choices recorded in ``outdir``'s
    ``tuned.yaml``, as ``fbo tune`` prints them."""
    tuned = load_yaml((outdir / "tuned.yaml").read_bytes(), str(outdir / "tuned.yaml"))
    rows = [(algo, setting, ", ".join(f"{k}={fmt_num(v)}" for k, v in vals.items() if not k.startswith("_")),
             vals.get("_none") or Choice.of(vals).how_chosen())
            for algo, per in (tuned.get("chosen") or {}).items() for setting, vals in per.items()]
    return f"Chosen by fbo tune ({tuned['score']}, {tuned['mode']})", rows


def procedure_text(ts: TuneSpec) -> str:
    budget = f"{ts.rounds} communication rounds" if ts.rounds else "the setting's own evaluation budget"
    where = f"on setting '{ts.setting}' (values used for every setting)" if ts.setting else "per setting"
    oscillation = (f", and scores oscillating by more than {ts.tolerance:g} (relative up-and-down movement "
                   "beyond the trend) over that window" if math.isfinite(ts.tolerance)
                   else " (no oscillation check: tolerance off)")
    return (f"grid search {where}, tuning seeds {ts.seeds} (disjoint from the evaluation seeds), "
            f"{budget} each; score: {ts.mode} of the mean {ts.score} over the last "
            f"{ts.tail:.0%} of evaluations, at least 3 (validation data, never the test set), averaged over "
            f"the tuning seeds; rejected: failed or diverged runs, non-finite scores, no progress over the first "
            f"evaluation{oscillation}; every key is searched through the choice (a key the choice reached only by "
            f"extending another is tried at its neighbours there), and a choice at a grid's edge is extended "
            f"geometrically, one value at a time (at most {MAX_EXTENSIONS} per key), until it is interior or the "
            f"value beyond it is rejected (a grid whose every "
            f"point diverged or oscillated goes on below its smallest values); a run whose accuracy collapsed to "
            f"chance level is rejected like one that diverged; a choice next to a larger value that diverged, "
            f"oscillated or collapsed stands only if the geometric midpoint between them is stable on every tuning "
            f"seed and the next seeds up to {MARGIN_SEEDS} in all (its margin), else the next value inside the "
            f"stable band is chosen; and a choice next to a rejected value must also survive {CONFIRM_SEEDS} more "
            f"seeds, else the next best is chosen")


def plot_tuning(df: pd.DataFrame, ts: TuneSpec, path: Path, title: str, algo_of: dict | None = None,
                chosen: dict | None = None) -> None:
    """The tuning grid: per key, the score along it through the choice (the other keys at their chosen values:
    what was searched there; the best over the other keys where ``chosen`` is not given), a line per algorithm,
    the choice ringed; a
    value whose every point was rejected is the algorithm's marker, hollow, at the foot of the panel (it has no
    score), each algorithm of the panel on its own row there, so that no algorithm's mark hides another's."""
    from matplotlib.ticker import LogLocator

    from .. import plots as ps

    df = df[~df.grid.isin(("confirmation", "margin"))]  # their verdicts are in "rejected"; their scores do not count
    keys = list(dict.fromkeys(k for g in ts.grids.values() for k in g))
    settings = list(dict.fromkeys(df.setting))
    ncol = min(3, len(keys))  # panels wrap after 3 keys; one block of rows per setting
    rows = math.ceil(len(keys) / ncol)
    fig, axes = ps.subplots(rows * len(settings), ncol, panel_h=2.1)
    for ax in axes.flat[len(keys) * len(settings):]:
        ax.set_visible(False)
    algos = list(ts.grids)
    styles = ps.row_styles([(a, (algo_of or {}).get(a, a)) for a in algos])  # each method's colour
    for i, s in enumerate(settings):
        for j, key in enumerate(keys):
            ax = axes[i * rows + j // ncol][j % ncol]
            col = key.split(",")[0].strip()
            for k, a in enumerate(a for a in algos if key in ts.grids[a]):
                st = styles[a]
                g = df[(df.algorithm == a) & (df.setting == s)]
                pick = Choice.of(((chosen or {}).get(a) or {}).get(s)).values
                if pick:
                    g = _line(g, ts.grids[a], pick, key)
                per = g.groupby("point", sort=False).agg(v=(col, "first"), score=("score", "mean"),
                                                         rejected=("rejected", "any"))
                ok = per[~per.rejected].groupby("v").score
                best = (ok.min() if ts.mode == "min" else ok.max()).sort_index()
                if len(best):
                    ax.plot(best.index, best.values, color=st["color"], marker=st["marker"], ls=st["ls"], label=a)
                    if pick.get(col) in best.index:
                        ax.plot([pick[col]], [best[pick[col]]], ls="none", marker="o", ms=11, mfc="none",
                                mec=st["color"], label="_choice")
                rej = sorted(set(per[per.rejected].v) - set(best.index))
                if rej:
                    ax.plot(rej, [0.04 + 0.07 * k] * len(rej), ls="none", marker=st["marker"], mfc="none",
                            mec=st["color"], ms=6, mew=1.3, clip_on=False, transform=ax.get_xaxis_transform(),
                            label="_rejected")
            vals = [v for a in algos for v in ts.grids[a].get(key, [])]
            if vals and min(vals) > 0 and max(vals) / min(vals) >= 10:
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(LogLocator(numticks=5))
                ax.xaxis.set_minor_formatter("")  # minor tick labels crowd the major ones
            ax.set_xlabel(key)
            # two short lines, on the first column only: a long rotated label runs past a 2.1 in panel into the title
            ax.set_ylabel(f"{ts.score}\n({ts.mode})" if j % ncol == 0 else "")
            ax.set_title(s if len(settings) > 1 or ts.setting else key)
    from matplotlib.lines import Line2D

    rejected = [Line2D([], [], ls="none", marker="o", mfc="none", mec="0.3", ms=6, mew=1.3,
                       label="hollow, at the foot: every point at that value rejected (a row per method, its marker)")]
    ps.shared_legend(fig, rejected if any(ln.get_label() == "_rejected" for ax in fig.axes for ln in ax.lines)
                     else None)
    along = ("along each key through the choice (the other keys at their chosen values; ringed: the choice)"
             if chosen else "best over the other keys at each value")
    ps.suptitle(fig, f"Tuning: {title}. {ts.score} {along}; a hollow marker at the "
                f"foot: every point at that value rejected, one row per method")
    ps.save(fig, path)
