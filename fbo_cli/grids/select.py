"""A subset of a spec chosen on the command line (``fbo compare SPEC -a NAME --setting NAME``, benchopt's
``-s``/``-d``): rerunning one's own method needs no edit of the spec. The subset's runs are the spec's very runs
(the same run ids and results folder, reused and resumed as ever); its table, in the spec's folder, holds the
selected rows and the claims among them."""

from __future__ import annotations

from dataclasses import replace

from ..errors import UsageError
from .spec import Experiment


def _pick(what: str, asked: list[str], names: list[str]) -> list[str]:
    bad = [a for a in asked if a not in names]
    if bad:
        raise UsageError(f"unknown {what} {', '.join(repr(b) for b in bad)} in this spec; choose among: "
                         + ", ".join(names), kind="unknown", field=what, value=bad[0])
    return [n for n in names if n in asked]


def select(exp: Experiment, algorithms: list[str] | None, settings: list[str] | None) -> Experiment:
    """``exp`` restricted to the named algorithms and settings (None or empty: all); an unknown name is a
    :class:`UsageError` listing the allowed ones."""
    if not algorithms and not settings:
        return exp
    algos = _pick("algorithm", algorithms or [], [a.name for a in exp.algorithms]) if algorithms else None
    sets = _pick("setting", settings or [], [s.name for s in exp.settings]) if settings else None
    keep_a = set(algos) if algos is not None else {a.name for a in exp.algorithms}
    keep_s = set(sets) if sets is not None else {s.name for s in exp.settings}
    claims = [c for c in exp.claims if c.better in keep_a and c.than in keep_a
              and not (c.across and any(s not in keep_s for pair in c.across for s in pair))]
    return replace(exp, algorithms=[a for a in exp.algorithms if a.name in keep_a],
                   settings=[s for s in exp.settings if s.name in keep_s],
                   cells=[c for c in exp.cells if c.algorithm in keep_a and c.setting in keep_s], claims=claims,
                   outcomes={})
