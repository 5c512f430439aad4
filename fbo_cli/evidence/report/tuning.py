"""The tuning tally: each tuned choice classified from the tuning's own record (``tuning.csv``), and the
report's line that counts them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...grids.spec import Experiment
from ...grids.spec_types import Choice, Tuned
from ...grids.tune.rules import MARGIN_SEEDS  # a margin counts when shown on this many tuning seeds


def tuning_md(sections: list) -> list[str]:  # of .sections.Section (it imports this module)
    """The tuned choices of every section counted by how they relate to their grid (interior, the largest
    or smallest stable value, at an edge not resolved, none accepted), and each tuned spec's budget."""
    kinds = {"interior": 0, "stable": 0, "valid": 0, "edge": 0, "none": 0}
    unresolved, budget, ranked, neither, fragile = [], [], [], [], []
    margins = 0  # choices beside an unstable value whose margin was shown on MARGIN_SEEDS tuning seeds
    thin = []  # ... shown on fewer
    for sec in sections:
        if not sec.exp.tuned:
            continue
        tuned = Tuned.of(sec.exp.tuned)
        records = tuning_records(sec.exp)
        for algo, per in tuned.chosen.items():
            for setting, vals in per.items():
                kind, why = choice_kind(vals, records, algo, setting, (tuned.grids or {}).get(algo))
                kinds[kind] += 1
                if kind == "edge":
                    unresolved.append(f"{sec.exp.name}: {algo}, {setting}" + (f" ({why})" if why else ""))
                if not unstable_keys(vals, records, algo, setting, (tuned.grids or {}).get(algo)):
                    continue
                seeds = margin_seeds(records, algo, setting)
                if seeds >= MARGIN_SEEDS:
                    margins += 1
                else:
                    (thin if seeds else fragile).append(f"{sec.exp.name}: {algo}, {setting}")
        rounds = tuned.get("rounds")
        at_budget = rounds == "budget" or all(c.cfg.run.rounds <= rounds for c in sec.exp.cells)
        (budget if at_budget else ranked if tuned.get("ranking_check") else neither).append(sec.exp.name)
    if not any(kinds.values()):
        return []
    n_exp = len(budget + ranked + neither)
    line = (f"**Tuning.** {sum(kinds.values())} tuned choices (algorithm × setting) in {n_exp} experiments, each "
            f"classified from the tuning's own record (tuning.csv: along each tuned key through the chosen point, "
            f"the values run and which were rejected): "
            f"{kinds['interior']} interior to their grid; {kinds['stable']} the largest or smallest "
            f"stable value, with the rejected neighbour beyond it named in the section (the choice confirmed on "
            f"two more seeds where tuned since that rule); "
            + (f"{kinds['valid']} the last value of the key's valid range (e.g. a momentum weight "
               f"c alpha^2 <= 1), the invalid value beyond it named; " if kinds["valid"] else "")
            + f"{kinds['edge']} at a grid's edge, not resolved (no value run beyond it)"
            + (f" ({'; '.join(unresolved)})" if unresolved else "")
            + f"; {kinds['none']} with every grid point rejected. Beside a larger value that diverged, oscillated "
            f"or collapsed, on any tuned key: {margins + len(thin) + len(fragile)} choices, {margins} with their "
            f"margin (the step between them stable) shown on at least {MARGIN_SEEDS} tuning seeds, {len(thin)} on "
            f"fewer" + (f" ({'; '.join(thin)})" if thin else "") + f", {len(fragile)} without (tuned before the "
            f"margin rule; fragile: a change of seed or hardware can push them over)"
            + (f" ({'; '.join(fragile)})" if fragile else "")
            + f"; a counted verdict never rests on one without a margin on {MARGIN_SEEDS} seeds (such verdicts "
            "leave the counts, marked, with the probe they need and its cost)"
            + ". Tuned at the evaluation budget: "
            f"{len(budget)} experiments; at a shorter budget with the ranking check: {len(ranked)}"
            + (f" ({', '.join(ranked)})" if ranked else "")
            + f"; at a shorter budget without it: {len(neither)}"
            + (f" ({', '.join(neither)})" if neither else "") + ".")
    return ["", line]


def _beside_unstable(choice: Choice) -> bool:
    """Whether the tuner's note names a larger neighbour that was unstable (the margin rule's case)."""
    from ...grids.tune.rules import UNSTABLE

    note = choice.notes.get("stable_edge", "")
    return "largest stable value" in note and any(f" {w}" in note.split(";")[0] for w in UNSTABLE)


def tuning_records(exp: Experiment) -> pd.DataFrame | None:
    root = getattr(exp, "out_root", None)
    p = root / "compare" / exp.name / "tuning.csv" if root is not None else None
    return pd.read_csv(p) if p is not None and p.is_file() else None


def choice_kind(vals: Choice | dict, records: pd.DataFrame | None, algo: str, setting: str,
                grids: dict | None = None) -> tuple[str, str]:
    """(kind, why) of one tuned choice, from what the tuning ran (``tuning.csv``) where it is recorded: along
    each tuned key, through the chosen point, the choice is **interior** when a value was run on each side
    of it and neither neighbour was rejected; **stable** when a neighbour was rejected (the largest or
    smallest accepted value beside a rejected one); **edge** (not resolved) when no value was run beyond
    it on one side, unless the tuner marked it the last value of the key's valid range (**valid**);
    **none** when every point was rejected. Without records, the tuner's own notes decide."""
    choice = Choice.of(vals)
    vals, notes = choice.values, choice.notes
    if "none" in notes:
        return "none", ""
    keys = list(vals)
    flags = ("valid" if notes.get("valid_edge") else "stable" if notes.get("stable_edge")
             else "edge" if notes.get("at_grid_edge") else "interior")
    if records is None or "rejected" not in records or not keys or any(k not in records for k in keys):
        return flags, ""
    r = _grid_rows(records, algo, setting)
    worst, why = "interior", ""
    rank = {"interior": 0, "stable": 1, "valid": 1, "edge": 2}
    tied = _tied(grids)
    for k in keys:
        line = _line(r, vals, k, tied)
        if line.empty:
            continue
        bad = line.groupby(k).rejected.any()
        xs = sorted(float(x) for x in bad.index)
        v = float(vals[k])
        below, above = [x for x in xs if x < v * (1 - 1e-9)], [x for x in xs if x > v * (1 + 1e-9)]
        if not below or not above:
            kind = "valid" if notes.get("valid_edge") else "edge"
            note = f"{k}={vals[k]:g} is the {'smallest' if not below else 'largest'} value run"
        elif bad[below[-1]] or bad[above[0]]:
            kind = "stable"
            note = f"{k}={vals[k]:g} is beside the rejected {k}={below[-1] if bad[below[-1]] else above[0]:g}"
        else:
            kind, note = "interior", ""
        if rank[kind] > rank[worst]:
            worst, why = kind, note
    return worst, why


def _grid_rows(records: pd.DataFrame, algo: str, setting: str) -> pd.DataFrame:
    """The tuning's grid runs of one algorithm and setting (confirmation and margin runs aside)."""
    r = records[(records.algorithm == algo) & (records.setting == setting)]
    return r[~r.grid.fillna("grid").isin(["confirmation", "margin"])] if "grid" in r else r


def _tied(grids: dict | None) -> dict[str, set[str]]:
    """Keys tuned together ("lr,mom": one grid of pairs): each key's group."""
    return {k: set(g.split(",")) for g in (grids or {}) for k in g.split(",")}


def _line(r: pd.DataFrame, vals: dict, k: str, tied: dict) -> pd.DataFrame:
    """The runs along key ``k`` through the chosen point: every other key (not tied to ``k``) at its chosen value."""
    others = [o for o in vals if o not in tied.get(k, {k})]
    return r[np.logical_and.reduce([np.isclose(r[o].astype(float), float(vals[o])) for o in others])
             if others else np.ones(len(r), bool)]




def unstable_keys(vals: Choice | dict, records: pd.DataFrame | None, algo: str, setting: str,
                  grids: dict | None = None) -> list[str]:
    """The tuned keys along which the next larger value run beside the choice was rejected as unstable (diverged,
    oscillated, non-finite, collapsed: :data:`~fbo_cli.grids.tune.rules.UNSTABLE`), on any key, whatever the
    choice's kind on the others; without records, the tuner's note (the margin rule's case)."""
    from ...grids.tune.rules import UNSTABLE

    choice = Choice.of(vals)
    if records is None or "rejected" not in records or any(k not in records for k in choice.values):
        return ["(the tuner's note)"] if _beside_unstable(choice) or choice.notes.get("margin") else []
    r, tied, out = _grid_rows(records, algo, setting), _tied(grids), []
    for k, v in choice.values.items():
        line = _line(r, choice.values, k, tied)
        above = sorted(float(x) for x in line[k].dropna().unique() if float(x) > float(v) * (1 + 1e-9))
        if above:
            nxt = line[np.isclose(line[k].astype(float), above[0])]
            why = nxt.reason.fillna("").astype(str) if "reason" in nxt else pd.Series([""] * len(nxt))
            if (nxt.rejected.astype(bool) & why.map(lambda w: w.startswith(UNSTABLE))).any():
                out.append(k)
    return out


def margin_seeds(records: pd.DataFrame | None, algo: str, setting: str) -> int:
    """The tuning seeds on which the choice's margin probe ran stable (0 where none ran, or one was rejected)."""
    if records is None or "grid" not in records:
        return 0
    m = records[(records.algorithm == algo) & (records.setting == setting) & (records.grid == "margin")]
    return 0 if m.empty or m.rejected.astype(bool).any() else int(m.seed.nunique())


def probe_minutes(records: pd.DataFrame | None, algo: str, setting: str) -> float | None:
    """What a margin probe on :data:`MARGIN_SEEDS` tuning seeds costs: that many of the choice's tuning runs, at
    their recorded mean core-minutes (None where the record has no times)."""
    if records is None or "train_time_s" not in records:
        return None
    r = records[(records.algorithm == algo) & (records.setting == setting)]
    t = (r.train_time_s + r.eval_time_s.fillna(0)).dropna()
    return MARGIN_SEEDS * float(t.mean()) / 60 if len(t) else None


KIND_WORDS = {"stable": "beside a rejected value", "edge": "an unresolved edge", "valid": "the end of the valid range"}


def how_chosen(table_md: str, exp: Experiment) -> str:
    """The section table's "how chosen" cells told as the tally tells them (:func:`choice_kind`, from the tuning's
    own record): a bare "tuned" where the record shows the choice beside a rejected value or at an unresolved edge
    says so, so that a section and the tally never disagree."""
    if not exp.tuned:
        return table_md
    tuned, records = Tuned.of(exp.tuned), tuning_records(exp)
    lines = table_md.split("\n")
    for algo, per in tuned.chosen.items():
        for setting, vals in per.items():
            kind, why = choice_kind(vals, records, algo, setting, (tuned.grids or {}).get(algo))
            if kind not in KIND_WORDS:
                continue
            for i, line in enumerate(lines):
                cells = [c.strip() for c in line.strip("|").split(" | ")]
                if (len(cells) == 4 and cells[0] == algo and cells[3] == "tuned"
                        and (cells[1] == setting or cells[1].startswith(f"every setting (tuned at {setting})"))):
                    lines[i] = "| " + " | ".join(cells[:3] + [f"tuned ({KIND_WORDS[kind]}, from the tuning record"
                                                              + (f": {why})" if why else ")")]) + " |"
    return "\n".join(lines)
