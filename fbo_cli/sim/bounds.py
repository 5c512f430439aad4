"""A setting declared once: its default, its bounds and its meaning (``bounded``), and the one check of the
bounds (``check_hp``). Algorithms' ``HP``, tasks' ``Params`` and the run settings (``config.RunSettings``)
declare their fields with it; ``fbo show`` prints the meanings (:mod:`fbo_cli.runs.describe`)."""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

from ..errors import UsageError


def bounded(default: Any, *, ge: float | None = None, gt: float | None = None, lt: float | None = None,
            le: float | None = None, choices: tuple[str, ...] | None = None, doc: str = "") -> Any:
    """A dataclass field with its bounds and its meaning, declared once: ``N: int = bounded(1, ge=0, doc="lower
    rounds per outer iteration")``, ``solver: str = bounded("svrg", choices=("svrg", "sgd"), doc=...)``.
    :func:`check_hp` enforces the bounds before any data loads (``None`` always passes: it means "the default
    rule", e.g. "= batch_size"); ``doc`` is what ``fbo show`` prints as the setting's meaning (the paper's
    symbol first, where it has one). Every count that sets the work of one outer iteration or the size of a
    model has an upper bound ``le``, so that no setting asks for terabytes or a days-long iteration
    (docs/fidelity.md#bounds)."""
    meta: dict[str, Any] = {k: v for k, v in (("ge", ge), ("gt", gt), ("lt", lt), ("le", le), ("choices", choices))
                            if v is not None}
    if doc:
        meta["doc"] = doc
    return field(default=default, metadata=meta)


def check_hp(params: Any) -> None:
    """The one check of declared bounds: the first field out of its bounds is a UsageError that names
    the key, the rule and the value."""
    for f in fields(params):
        v, m = getattr(params, f.name), f.metadata
        if v is None or not m:
            continue
        if "choices" in m and v not in m["choices"]:
            raise UsageError(f"'{f.name}' must be one of {', '.join(m['choices'])}; got {v!r}", kind="bad_value",
                             field=f.name, value=v)
        for op, bad in (("ge", lambda a, b: a < b), ("gt", lambda a, b: a <= b), ("lt", lambda a, b: a >= b),
                        ("le", lambda a, b: a > b)):
            if op in m and bad(v, m[op]):
                sym = {"ge": ">=", "gt": ">", "lt": "<", "le": "<="}[op]
                raise UsageError(f"'{f.name}' must be {sym} {m[op]:g}, got {v}", kind="bad_value", field=f.name,
                                 value=v)
