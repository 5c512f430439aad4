"""``fbo check``: do the committed numbers reproduce? Rerun a sample of the runs behind the report and
compare them with the evidence (``docs/results/``), value by value.

Regenerating every paper costs tens of core-hours (``make reproduce-cost``); checking that the code
at hand still gives the committed numbers should not. ``fbo check`` takes the compared runs of the
reproduction specs (the evidence's resolved configurations, tuned step sizes included: no tuning
runs), picks a sample that fits a budget of core-minutes (every spec in turn, within a spec every
algorithm in turn, each algorithm's cheapest run first), reruns them on the device their evidence ran
on, and compares:

* every value of ``metrics.csv`` but the wall-clock column, at every evaluation: *identical* (bit for
  bit), *agrees* (within ``rtol``, relative, with an absolute floor ``atol``: float rounding that a
  different summation order leaves), *drifts* (the same run for at least the first evaluation after the
  start, then float rounding grown beyond ``rtol`` over a long run, as it does in nonconvex training,
  with the final headline metric within ``DRIFT`` seed-to-seed standard deviations of the evidence's
  cell), or *differs*;
* the communication ledger of ``summary.json`` (rounds, floats up and down, oracle calls, samples):
  exactly, or the run *differs*;
* the run's ending (done or diverged).

Every evaluation row is judged, those after the budget's last evaluation too (a forged one there differs,
it is no drift). An evidence run that is missing, whose completion record fails, or whose ``config.yaml`` was
deleted or edited (it no longer hashes to the run's id) is named and counted (never "N of N").

It writes ``check.md`` and ``check.csv`` (and the reruns under ``runs/``) in its output folder and
exits 1 when a run differs or fails, or an evidence run could not be used. The training seconds of the
evidence and of the rerun stand side by side for context only: the evidence's were measured on another
day, often two runs at once.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from ..grids.spec import Cell, load_spec
from ..runs.cost import estimate_cost
from ..runs.rundir import atomic_write, code_commit, is_finished, read_metrics, read_summary, run_status
from ..runs.table import md_row

EVIDENCE = Path("docs/results")
CLOCK = ("train_time",)  # wall-clock columns of metrics.csv: not results
DRIFT = 0.5  # a drift: the final headline metric within this many seed-to-seed standard deviations


@dataclasses.dataclass
class Pick:
    spec: str  # the experiment's name
    cell: Cell  # run directory under the evidence
    secs: float  # estimated core-seconds of a rerun


def committed_runs(specs: list[str | Path], evidence: Path = EVIDENCE, unusable: list | None = None) -> list[Pick]:
    """The finished compared runs of ``specs`` in ``evidence`` (one per run directory) that can rerun on
    this machine (a run whose evidence ran on a GPU needs one), with their estimated cost
    (``estimate_cost``; the evidence's own seconds where no estimate exists). An evidence run that is
    there but cannot be used (its completion record fails: metrics.csv does not match its hash, the summary
    names another run, files missing) is appended to ``unusable`` as ``(run directory, why)``."""
    import torch

    picks, seen = [], set()
    for spec in specs:
        exp = load_spec(spec, {"out_dir": str(evidence)})
        for c in exp.cells:
            d = c.cfg.run_dir
            if d in seen:
                continue
            seen.add(d)
            if not is_finished(d):
                state, summ, why = run_status(d)
                if unusable is not None and state in ("missing", "partial"):
                    unusable.append((d, "missing from the evidence: no finished run there (removed?)"))
                elif unusable is not None and (state == "corrupt" or (state == "finished" and summ)):
                    unusable.append((d, why or f"it ended {summ.get('status')}"))
                continue
            if why := config_changed(d, c.cfg):
                if unusable is not None:
                    unusable.append((d, why))
                continue
            s = read_summary(d) or {}
            if s.get("device") == "cuda" and not torch.cuda.is_available():
                continue
            secs, unknown = estimate_cost([c], roots=(evidence,))
            if unknown:
                secs = float(s.get("train_time_s") or 0) + float(s.get("eval_time_s") or 0)
            picks.append(Pick(exp.name, c, secs))
    return picks


def config_changed(run_dir: Path, cfg) -> str:
    """Why the evidence run's ``config.yaml`` is not the configuration of the run it sits in ('' when it is):
    deleted, unreadable, or edited (what it says no longer hashes to the run's id)."""
    from ..runs.config import identity_of, load_yaml

    p = Path(run_dir) / "config.yaml"
    if not p.is_file() or p.is_symlink():
        return "config.yaml is missing (deleted?)"
    try:
        data = load_yaml(p.read_bytes(), str(p))
        same = isinstance(data, dict) and identity_of(data) == cfg.identity()
    except (UsageError, OSError, TypeError, ValueError) as e:
        return f"config.yaml is unreadable ({str(e)[:120]})"
    return "" if same else "config.yaml is not this run's configuration (edited?)"


def select(picks: list[Pick], minutes: float | None, batch: str | int = "off") -> list[Pick]:
    """A sample within ``minutes`` core-minutes (all of them for None): the specs in turn, within a spec
    its algorithms in turn, each algorithm's runs cheapest first; a run that does not fit the budget
    left is passed over for the next. With ``batch`` (``auto`` or R, as ``--batch``), a chosen run's batch
    partners (the committed runs it would step with: :func:`fbo_cli.grids.run_batches.group_batches`) come right after
    it, as far as the budget goes, so that the sample checks batched runs where the evidence has them."""
    from ..grids.run_batches import group_batches

    by_spec: dict[str, dict[str, list[Pick]]] = {}
    for p in picks:
        by_spec.setdefault(p.spec, {}).setdefault(p.cell.algorithm, []).append(p)
    queues = []
    for algos in by_spec.values():
        for runs in algos.values():
            runs.sort(key=lambda p: (p.secs, p.cell.seed, p.cell.setting))
        queues.append([p for turn in itertools.zip_longest(*algos.values()) for p in turn if p])
    order = [p for turn in itertools.zip_longest(*queues) for p in turn if p]
    if minutes is None:
        return order
    groups = group_batches([p.cell.cfg for p in picks], batch)
    partners = {id(picks[i]): [picks[j] for j in g] for g in groups for i in g}
    chosen, taken, left = [], set(), minutes * 60
    for p in order:
        for q in [p, *partners[id(p)]] if id(p) not in taken and p.secs <= left else []:
            if id(q) not in taken and q.secs <= left:
                chosen.append(q)
                taken.add(id(q))
                left -= q.secs
    return chosen


def rerun_cell(p: Pick, runs: Path) -> Cell:
    """The cell of ``p`` writing under ``runs`` (never into the evidence), on the device its evidence ran
    on (``device``); as a last layer, so that every executor (they resolve the layers) sees it."""
    import torch

    from ..runs.config import resolve

    ran = (read_summary(p.cell.cfg.run_dir) or {}).get("device")
    here = "cuda" if torch.cuda.is_available() else "cpu"
    layers = (*p.cell.layers, {"out_dir": str(runs)} | ({"device": ran} if ran and ran != here else {}))
    cfg = resolve(p.cell.cfg.task, p.cell.cfg.algo_ref, *layers)
    rest = lambda c: {k: v for k, v in c.as_dict().items() if k not in ("out_dir", "device")}
    if Path(cfg.run.out_dir).resolve() == Path(p.cell.cfg.run.out_dir).resolve() or rest(cfg) != rest(p.cell.cfg):
        raise UsageError(f"--out {runs}: the rerun of {p.cell.cfg.run_dir} would not be a separate copy of it",
                         kind="bad_value", field="--out", path=runs)
    return dataclasses.replace(p.cell, cfg=cfg, layers=layers)


def final_value(df, metric: str | None, rounds: int | None = None) -> float:
    """A run's final headline metric recomputed from its ``metrics.csv`` (as the runner defines it: the last
    evaluation within the round budget ``rounds``), never taken from ``summary.json``; NaN without one."""
    if df is None or not metric or metric not in df or df.empty:
        return math.nan
    if rounds is not None and (df["rounds"] <= rounds).any():
        df = df[df["rounds"] <= rounds]
    try:
        return float(df[metric].iloc[-1])
    except (TypeError, ValueError):
        return math.nan


def compare_run(old: Path, new: Path, rtol: float = 1e-3, atol: float = 1e-6, sd: float = math.nan,
                rounds: int | None = None) -> dict[str, Any]:
    """How the run in ``new`` compares with the evidence in ``old`` (module docstring); ``sd`` is the
    seed-to-seed standard deviation of the evidence's final headline metric in the run's cell. The finals
    are recomputed from each run's metrics.csv (within the round budget ``rounds``)."""
    so, sn = read_summary(old) or {}, read_summary(new) or {}
    mo, mn = read_metrics(old / "metrics.csv"), read_metrics(new / "metrics.csv")
    metric = so.get("metric")
    out: dict[str, Any] = {"metric": metric, "final_then": final_value(mo, metric, rounds),
                           "final_now": final_value(mn, metric, rounds),
                           "seed_sd": sd, "s_then": so.get("train_time_s"), "s_now": sn.get("train_time_s"),
                           "ledger": so.get("ledger") == sn.get("ledger") and "ledger" in so,
                           "max_rel_diff": math.nan, "apart_from_round": None}
    if sn.get("status") not in ("done", "diverged") or mn is None:
        return {**out, "outcome": "failed", "why": sn.get("error") or "the rerun did not finish"}
    if mo is None or list(mo.columns) != list(mn.columns) or len(mo) != len(mn):
        return {**out, "outcome": "differs", "why": "metrics.csv: other columns or evaluations"}
    if not out["ledger"]:
        return {**out, "outcome": "differs", "why": "the communication ledger differs"}
    if so.get("status") != sn.get("status"):
        return {**out, "outcome": "differs", "why": f"ended {sn.get('status')}, the evidence {so.get('status')}"}
    cols = [c for c in mo.columns if c not in CLOCK]
    a, b = mo[cols].to_numpy(float), mn[cols].to_numpy(float)
    both = np.isfinite(a) & np.isfinite(b)
    rel = np.abs(a - b)[both] / np.maximum(np.maximum(np.abs(a), np.abs(b))[both], atol)
    out["max_rel_diff"] = float(rel.max()) if rel.size else 0.0
    if np.array_equal(a, b, equal_nan=True):
        return {**out, "outcome": "identical", "why": ""}
    close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all(axis=1)
    if close.all():
        return {**out, "outcome": "agrees", "why": ""}
    first = int(np.argmin(close))  # the first evaluation beyond rtol
    out["apart_from_round"] = int(mo["rounds"].iloc[first])
    # every row is judged: the final within the budget, and each evaluation after the budget's last one (a run
    # whose iterations overshoot the budget), which the final leaves alone and a forged row would hide in
    beyond = (mo["rounds"] > rounds).to_numpy() if rounds is not None else np.zeros(len(mo), bool)
    delta = max([abs(out["final_now"] - out["final_then"]), *_gaps(mo, mn, metric)[beyond]])
    if first >= 2 and math.isfinite(sd) and sd > 0 and delta <= DRIFT * sd:
        return {**out, "outcome": "drifts", "why": f"apart from round {out['apart_from_round']}; final off by "
                f"{delta:.2g} = {delta / sd:.2f} seed sd"}
    bad = [c for c, col_a, col_b in zip(cols, a.T, b.T)
           if not np.allclose(col_a, col_b, rtol=rtol, atol=atol, equal_nan=True)]
    return {**out, "outcome": "differs", "why": f"from round {out['apart_from_round']}, beyond rtol in "
            + ", ".join(bad[:4]) + ("..." if len(bad) > 4 else "")}


def _gaps(mo, mn, metric: str | None) -> np.ndarray:
    """Per evaluation row, how far the headline metric of two runs lies apart (NaN against a number, or no
    such column: infinitely)."""
    if not metric or metric not in mo or metric not in mn:
        return np.full(len(mo), np.inf)
    a, b = mo[metric].to_numpy(float), mn[metric].to_numpy(float)
    return np.nan_to_num(np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b)), nan=np.inf)


def seed_sd(picks: list[Pick]) -> dict[tuple[str, str, str], float]:
    """The seed-to-seed standard deviation of the evidence's final headline metric per (spec, algorithm,
    setting)."""
    finals: dict[tuple[str, str, str], list[float]] = {}
    for p in picks:
        d = p.cell.cfg.run_dir
        f = final_value(read_metrics(d / "metrics.csv"), (read_summary(d) or {}).get("metric"), p.cell.cfg.run.rounds)
        if math.isfinite(f):
            finals.setdefault((p.spec, p.cell.algorithm, p.cell.setting), []).append(float(f))
    return {k: float(np.std(v, ddof=1)) if len(v) > 1 else math.nan for k, v in finals.items()}


def _num(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else ""


def report(rows: list[dict[str, Any]], rtol: float, atol: float, command: str, commit: str = "",
           unusable: list | None = None) -> str:
    """``check.md``: the command and the code's commit (``, commit <sha>``), the verdict line, the evidence
    runs that could not be used, then one row per rerun."""
    n = {k: sum(r["outcome"] == k for r in rows) for k in ("identical", "agrees", "drifts", "differs", "failed")}
    then = sum(r["s_then"] or 0 for r in rows)
    now = sum(r["s_now"] or 0 for r in rows)
    ok = n["identical"] + n["agrees"] + n["drifts"]
    gone = f", {len(unusable)} could not be checked (below)" if unusable else ""
    head = [f"# fbo check: {len(rows)} committed run(s) rerun and compared with the evidence", "",
            f"`{command}`{commit}, {datetime.date.today().isoformat()}", "",
            f"**{ok} of {len(rows) + len(unusable or [])} reproduce{gone}**: {n['identical']} identical bit for bit, "
            f"{n['agrees']} within "
            f"rtol {rtol:g} (atol {atol:g}) at every evaluation; {n['drifts']} drift (the same run until float "
            f"rounding grew beyond rtol, the final headline metric within {DRIFT:g} seed-to-seed standard "
            f"deviation of the evidence); {n['differs']} differ, {n['failed']} failed. The communication ledger "
            "is compared exactly.", ""]
    batched = [r for r in rows if (r.get("batch") or 1) > 1]
    if batched:
        nb = {k: sum(r["outcome"] == k for r in batched) for k in ("identical", "agrees", "drifts")}
        head += [f"**{len(batched)} of the reruns stepped in run batches** (column *batch*: the runs stepped "
                 f"together; `--batch`, docs/fidelity.md#batches): {nb['identical']} identical, {nb['agrees']} "
                 f"agree, {nb['drifts']} drift.", ""]
    if unusable:
        head += [f"**{len(unusable)} evidence run(s) could not be used** (not rerun, no other run checked in "
                 f"their place): " + "; ".join(f"`{d}` ({why})" for d, why in unusable) + ".", ""]
    if then and now:
        head += [f"Training time: {then / 60:.1f} min in the evidence, {now / 60:.1f} min in the reruns "
                 f"({then / now:.1f}x; context only: the evidence's runs ran on another day, often two at once).", ""]
    cols = ["spec", "algorithm", "setting", "seed", "metric", "final (evidence)", "final (rerun)", "seed sd",
            "max rel. diff", "ledger", "outcome", "batch", "s (evidence)", "s (rerun)"]
    lines = [md_row(cols), md_row(["---"] * len(cols))]
    for r in rows:
        lines.append(md_row([r["spec"], r["algorithm"], r["setting"], r["seed"], r["metric"],
                             _num(r["final_then"], ".4f"), _num(r["final_now"], ".4f"), _num(r["seed_sd"], ".4f"),
                             _num(r["max_rel_diff"], ".1e"), "same" if r["ledger"] else "differs",
                             r["outcome"] + (f" ({r['why']})" if r["why"] else ""), r.get("batch") or 1,
                             _num(r["s_then"], ".0f"), _num(r["s_now"], ".0f")]))
    return "\n".join(head + lines) + "\n"


def write(rows: list[dict[str, Any]], out: Path, rtol: float, atol: float, command: str,
          unusable: list | None = None) -> None:
    import pandas as pd

    atomic_write(out / "check.csv", pd.DataFrame(rows).to_csv(index=False))
    atomic_write(out / "check.md", report(rows, rtol, atol, command, code_commit(), unusable))


def check_args(minutes: float | None, rtol: float, atol: float) -> None:
    if minutes is not None and not (math.isfinite(minutes) and minutes > 0):
        raise UsageError(f"--minutes must be a positive number of core-minutes, got {minutes}",
                         kind="bad_value", field="--minutes", value=minutes)
    for name, v in (("--rtol", rtol), ("--atol", atol)):
        if not (math.isfinite(v) and v >= 0):
            raise UsageError(f"{name} must be >= 0, got {v}", kind="bad_value", field=name, value=v)


@dataclasses.dataclass
class Plan:
    """What ``fbo check`` reruns: the ``chosen`` sample of the usable committed runs (``picks``), the
    evidence runs it cannot use with the reason, and a line that says what it costs."""

    picks: list[Pick]
    chosen: list[Pick]
    unusable: list[tuple[Path, str]]
    what: str
    batch: str | int = "auto"  # --batch: how the sample's runs are grouped into run batches


def plan(specs: list[Path] | None, minutes: float | None, jobs: int, evidence: Path, out: Path, rtol: float,
         atol: float, warn=None, batch: str | int = "auto") -> Plan:
    """The sample of ``specs`` (default: every spec of the report) that fits ``minutes`` core-minutes
    (None: every run), its runs' batch partners with it (``batch``), its options checked first; ``warn``
    hears of each unusable evidence run."""
    from ..grids.run_batches import group_batches, parse_batch
    from .report.papers import reproduction_specs

    check_args(minutes, rtol, atol)
    batch = parse_batch(batch)
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}", kind="bad_value", field="--jobs", value=jobs)
    if not evidence.is_dir():
        raise UsageError(f"--from {evidence}: no such folder (the committed evidence is docs/results)",
                         kind="not_found", field="--from", path=evidence)
    if (out / "runs").resolve() == evidence.resolve():
        raise UsageError(f"--out {out}: the reruns would land in the evidence ({evidence}); choose another folder",
                         kind="bad_value", field="--out", path=out)
    for s in specs or []:
        if not s.is_file():
            raise UsageError(f"{s}: no such spec file", kind="not_found", field="spec", path=s)
    spec_list = list(specs) if specs else reproduction_specs()
    unusable: list = []
    picks = committed_runs(spec_list, evidence, unusable)
    for d, why in unusable:
        if warn is not None:
            warn(f"evidence run not usable: {d} ({why})")
    if not picks:
        raise UsageError(f"no finished run of {'these specs' if specs else 'the report'} under {evidence}",
                         kind="not_found", field="runs", path=evidence)
    chosen = select(picks, minutes, batch)
    secs = sum(p.secs for p in chosen)
    units = group_batches([p.cell.cfg for p in chosen], batch)
    n_batched = sum(len(u) for u in units if len(u) > 1)
    what = (f"{len(chosen)} of {len(picks)} committed runs from {len({p.spec for p in chosen})} spec(s)"
            + (f", {n_batched} of them in {sum(len(u) > 1 for u in units)} run batch(es)" if n_batched else "")
            + f": at most about {secs / 60:.0f} core-minutes, as if run one by one ({secs / 60 / jobs:.0f} min of "
            f"wall time with {jobs} job{'s' if jobs > 1 else ''})")
    if not chosen:
        raise UsageError(f"no committed run fits in {minutes:g} core-minutes; the cheapest takes about "
                         f"{min(p.secs for p in picks) / 60:.0f}: raise --minutes",
                         kind="bad_value", field="--minutes", value=minutes)
    return Plan(picks, chosen, unusable, what, batch)


def run_check(pl: Plan, out: Path, jobs: int, rtol: float, atol: float, command: str,
              console=None) -> list[dict[str, Any]]:
    """Rerun the plan's sample under ``out/runs``, compare each rerun with its evidence, write
    ``check.md`` and ``check.csv`` into ``out``; returns the rows."""
    from ..grids.executors import run_cells

    cells = [rerun_cell(p, out / "runs") for p in pl.chosen]
    run_cells(cells, jobs=jobs, console=console, rerun=True, title="check", batch=pl.batch)
    sd = seed_sd(pl.picks)
    rows = [{"spec": p.spec, "algorithm": p.cell.algorithm, "setting": p.cell.setting, "seed": p.cell.seed,
             "evidence": str(p.cell.cfg.run_dir), "rerun": str(c.cfg.run_dir),
             "batch": (read_summary(c.cfg.run_dir) or {}).get("batch_runs") or 1,
             **compare_run(p.cell.cfg.run_dir, c.cfg.run_dir, rtol, atol,
                           sd.get((p.spec, p.cell.algorithm, p.cell.setting), float("nan")), p.cell.cfg.run.rounds)}
            for p, c in zip(pl.chosen, cells)]
    write(rows, out, rtol, atol, command, pl.unusable)
    return rows
