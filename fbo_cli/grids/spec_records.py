"""The records a spec's results folder holds beside its tables, checked: ``tuned.yaml`` (what ``fbo tune`` chose,
valid only under the tuning procedure that made it) and ``settled.yaml`` (the seeds ``compare --until-settled``
added), the tuned values a cell's config takes, and what the tuning record says under a table (how the
hyperparameters were chosen). Its own module because these are files a command wrote, not the
spec the user wrote; :mod:`fbo_cli.grids.spec` (the one module that reads YAML of a spec's) reads them and calls
these checks while loading a spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..runs.table import fmt_num, md_row
from .spec_checks import MAX_SEEDS, procedure_changes
from .spec_types import AlgorithmEntry, Choice, SettingEntry, Tuned


def check_settled(p: Path, d: dict) -> dict:
    """A ``settled.yaml`` ``d`` read from ``p`` (written by ``compare --until-settled``, :mod:`fbo_cli.grids.settle`),
    checked: ``added`` is a list of ``{setting, algorithms, seeds}``, a setting at most once, and no more seeds in
    all than a spec may have (``MAX_SEEDS``, the bound of ``--cap``)."""
    added = d.get("added")
    ok = isinstance(added, list) and all(
        isinstance(e, dict) and isinstance(e.get("setting"), str) and isinstance(e.get("algorithms"), list)
        and isinstance(e.get("seeds"), list) and all(isinstance(k, int) and 0 <= k < 2**32 for k in e["seeds"])
        for e in added)
    if not ok:
        raise UsageError(f"{p}: 'added' must be a list of {{setting, algorithms, seeds}}; run "
                         f"`fbo compare --until-settled` again to rewrite it (or delete the file)",
                         kind="bad_spec", field="added", path=p)
    seeds = {k for e in added for k in e["seeds"]}
    if len(seeds) > MAX_SEEDS or len({e["setting"] for e in added}) < len(added):
        raise UsageError(f"{p}: {len(seeds):,} seeds in {len(added):,} entries; a settled.yaml adds at most "
                         f"{MAX_SEEDS:,} seeds, each setting once (`fbo compare --until-settled` rewrites it)",
                         kind="bad_spec",
                         field="added.seeds" if len(seeds) > MAX_SEEDS else "added.setting", path=p, value=len(seeds))
    return d


# what a tuned.yaml written before made_by is checked on: its seeds, budget, score and its direction, tail, setting
# and grids (each is a top-level key of every tuned.yaml)
OLD_RECORD = ("seeds", "rounds", "score", "mode", "tail", "setting", "grids")


def check_tuned(p: Path, t: dict, exp) -> Tuned:
    """A ``tuned.yaml`` ``t`` read from ``p`` beside the results of ``exp`` (an
    :class:`~fbo_cli.grids.spec.Experiment`), checked: its choices' shape and values, and (a spec with a tune
    block) that it was made by the tuning procedure the spec declares now."""
    chosen = t.get("chosen") or {}
    ok = isinstance(chosen, dict) and all(
        isinstance(per, dict) and all(isinstance(v, dict) for v in per.values()) for per in chosen.values())
    if not ok:
        raise UsageError(f"{p}: 'chosen' must map algorithm -> setting -> {{key: value}}, got {chosen!r:.120}; "
                         f"run `fbo tune` again to rewrite it (or delete the file)",
                         kind="bad_spec", field="chosen", path=p)
    if exp.tune is not None:  # a tuning applies only under the procedure that made it
        made_by = dict(t["made_by"]) if isinstance(t.get("made_by"), dict) else {k: t[k] for k in OLD_RECORD if k in t}
        if isinstance(made_by.get("grids"), dict):  # rows with a grid only
            made_by["grids"] = {a: v for a, v in made_by["grids"].items() if v}
        if changed := procedure_changes(made_by, exp.procedure):
            raise UsageError(f"{p} was chosen by another tuning procedure than {exp.path or 'the spec'} now declares "
                             f"({'; '.join(changed.values())}): its values apply only to the procedure that made "
                             f"them. An edited spec is tuned again: `fbo tune {exp.path}` (it replaces the file), "
                             f"or delete the file to run the spec's own values",
                             kind="bad_spec", field="made_by", path=p, value=list(changed))
    tuned = Tuned.of(t)
    for algo, per in tuned.chosen.items():
        for setting, choice in per.items():
            for k, v in choice.values.items():
                if not isinstance(v, (int, float, str, bool)):
                    raise UsageError(f"{p}: chosen value {algo} / {setting} / {k} must be a number or a word, "
                                     f"got {v!r}", kind="bad_spec", field="chosen", path=p, value=v)
    return tuned


def tuned_entry(tuned: Tuned | dict | None, algorithm: str, setting: str) -> Choice:
    """The choice of one (algorithm, setting) in a ``tuned.yaml``: the setting's own, or the one tuned
    setting's; its values and its notes (empty when there is none)."""
    return Tuned.of(tuned).entry(algorithm, setting) if tuned else Choice()


def edge_note(entry: Choice | dict[str, Any]) -> str:
    """How a chosen value relates to its grid's edge, in words ('' when interior)."""
    return Choice.of(entry).edge_note()


def tuned_layer(tuned: Tuned | dict | None, algorithm: str, setting: str) -> dict[str, Any]:
    """The chosen values of one (algorithm, setting), notes left out: a config layer."""
    return dict(tuned_entry(tuned, algorithm, setting).values)


def tuning_budget_note(exp) -> str:
    """For the table of ``exp`` (an :class:`~fbo_cli.grids.spec.Experiment`): '' when the tuning ran at the
    evaluation budget; else what the ranking check found, or a warning that says both budgets when there was none."""
    if not exp.tuned or not isinstance(exp.tuned.get("rounds"), int):
        return ""
    budgets = sorted({c.cfg.run.rounds for c in exp.cells})
    if exp.tuned["rounds"] >= budgets[-1]:
        return ""
    head = f"Tuned at {exp.tuned['rounds']} rounds, evaluated at {', '.join(map(str, budgets))}"
    check = exp.tuned.get("ranking_check")
    if isinstance(check, dict) and check:
        failed = [k for k, v in check.items() if not (isinstance(v, dict) and v.get("holds"))]
        if not failed:
            return (f"{head}; the ranking check holds: each choice is still the best of its top "
                    f"{len(next(iter(check.values())).get('top', []))} points at the evaluation budget (ranking.csv).")
        return (f"**{head}; the ranking check fails for {'; '.join(failed)}**: at the evaluation budget another of "
                f"the top points scores better than the choice (ranking.csv).")
    return (f"**{head}**: the ranking of the grid was not checked at the evaluation budget, so a late instability "
            f"or a late change of order may be missed.")


def tuned_note(exp) -> str:
    """What the hyperparameters of the table of ``exp`` are and how they were chosen (Markdown, below the table:
    :func:`fbo_cli.grids.compare.table_markdown`)."""
    rows = []
    for a in map(AlgorithmEntry.of, exp.algorithms):
        for s in map(SettingEntry.of, exp.settings):
            vals = tuned_layer(exp.tuned, a.name, s.name)
            keys = list(a.tune)
            if vals:
                edge = tuned_entry(exp.tuned, a.name, s.name).how_chosen()
                how = "tuned" + (f" ({edge})" if edge else "")
                rows.append((a.name, s.name, ", ".join(f"{k}={fmt_num(v)}" for k, v in vals.items()), how))
            elif keys:
                fixed = {k: v for k, v in a.set.items()}
                text = ", ".join(f"{k}={fmt_num(v)}" for k, v in fixed.items()) or "defaults"
                none = tuned_entry(exp.tuned, a.name, s.name).notes.get("none")
                rows.append((a.name, s.name, text,
                             f"**not tuned: {none}**; the spec's values stand" if none
                             else "not tuned yet (run `fbo tune`)"))
    if not rows:
        return ""
    if exp.tuned and exp.tuned.get("setting") and len(exp.settings) > 1:  # tuned once: one row per algorithm
        per: dict[str, set] = {}
        for r in rows:
            per.setdefault(r[0], set()).add(r[2:])
        if all(len(v) == 1 for v in per.values()):
            rows = [(a, f"every setting (tuned at {exp.tuned['setting']})", *next(iter(v))) for a, v in per.items()]
    out = [""]
    if exp.tuned:
        out += [f"**Hyperparameters.** Tuned by `fbo tune`: {exp.tuned.get('procedure', '')}."
                + (f" {short}" if (short := tuning_budget_note(exp)) else ""), ""]
    else:
        out += ["**Hyperparameters.**", ""]
    out += ["| algorithm | setting | values | how chosen |", "|---|---|---|---|"]
    out += [md_row(r) for r in rows]
    return "\n".join(out) + "\n"
