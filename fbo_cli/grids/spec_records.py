"""The records a spec's results folder holds beside its tables, checked: ``tuned.yaml`` (what ``fbo tune`` chose,
valid only under the tuning procedure that made it) and ``settled.yaml`` (the seeds ``compare --until-settled``
added), and the tuned values a cell's config takes. Its own module because these are files a command wrote, not the
spec the user wrote; :mod:`fbo_cli.grids.spec` (the one module that reads YAML of a spec's) reads them and calls
these checks while loading a spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from .spec_checks import MAX_SEEDS, procedure_changes
from .spec_types import Choice, Tuned


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
                         f"`fbo compare --until-settled` again to rewrite it (or delete the file)")
    seeds = {k for e in added for k in e["seeds"]}
    if len(seeds) > MAX_SEEDS or len({e["setting"] for e in added}) < len(added):
        raise UsageError(f"{p}: {len(seeds):,} seeds in {len(added):,} entries; a settled.yaml adds at most "
                         f"{MAX_SEEDS:,} seeds, each setting once (`fbo compare --until-settled` rewrites it)")
    return d


# what a tuned.yaml written before made_by is checked on: its seeds, budget, setting and grids (the committed
# evidence holds one whose score was renamed since: adafbio_hyperclean, upper_loss -> heldout_loss)
OLD_RECORD = ("seeds", "rounds", "setting", "grids")


def check_tuned(p: Path, t: dict, exp) -> Tuned:
    """A ``tuned.yaml`` ``t`` read from ``p`` beside the results of ``exp`` (an
    :class:`~fbo_cli.grids.spec.Experiment`), checked: its choices' shape and values, and (a spec with a tune
    block) that it was made by the tuning procedure the spec declares now."""
    chosen = t.get("chosen") or {}
    ok = isinstance(chosen, dict) and all(
        isinstance(per, dict) and all(isinstance(v, dict) for v in per.values()) for per in chosen.values())
    if not ok:
        raise UsageError(f"{p}: 'chosen' must map algorithm -> setting -> {{key: value}}, got {chosen!r:.120}; "
                         f"run `fbo tune` again to rewrite it (or delete the file)")
    if exp.tune is not None:  # a tuning applies only under the procedure that made it
        made_by = dict(t["made_by"]) if isinstance(t.get("made_by"), dict) else {k: t[k] for k in OLD_RECORD if k in t}
        if isinstance(made_by.get("grids"), dict):  # rows with a grid only
            made_by["grids"] = {a: v for a, v in made_by["grids"].items() if v}
        if changed := procedure_changes(made_by, exp.procedure):
            raise UsageError(f"{p} was chosen by another tuning procedure than {exp.path or 'the spec'} now declares "
                             f"({'; '.join(changed)}): its values apply only to the procedure that made them. An "
                             f"edited spec is tuned again: `fbo tune {exp.path}` (it replaces the file), or delete "
                             f"the file to run the spec's own values")
    tuned = Tuned.of(t)
    for algo, per in tuned.chosen.items():
        for setting, choice in per.items():
            for k, v in choice.values.items():
                if not isinstance(v, (int, float, str, bool)):
                    raise UsageError(f"{p}: chosen value {algo} / {setting} / {k} must be a number or a word, "
                                     f"got {v!r}")
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
