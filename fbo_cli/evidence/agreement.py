"""``fbo check --against ROOT``: do the verdicts come out the same on another machine? The claim checks of the
evidence (or ``--from``) and of ROOT, read on their common runs and seeds only (runs matched by run id: the
resolved configuration's hash, the same on any device), compared kind by kind.

A check of *another kind* is one whose verdict differs (holds, does not hold, inconclusive); *reversed*: holds on
one root and does not hold on the other. The runs agree to rounding on most machines, but a verdict decided by a
hair is decided by the hardware's last bits; the sequential design's early looks ask for overwhelming evidence so
that this stays rare. The result goes to ``agreement.md``, which ``fbo report`` shows (:data:`FILE`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import UsageError

FILE = "check/agreement.md"  # under a results root: the last `fbo check --against`, read by the report
REVERSED = {frozenset(("holds", "does not hold"))}


@dataclass
class Compared:
    spec: str
    claim: str
    setting: str
    ours: object  # Verdict on the evidence
    theirs: object  # Verdict on ROOT

    @property
    def kind(self) -> str:
        """'same', 'reversed' or 'another kind'."""
        a, b = self.ours.verdict, self.theirs.verdict
        return "same" if a == b else "reversed" if frozenset((a, b)) in REVERSED else "another kind"


def _runs(spec: str, root: Path) -> tuple[object, pd.DataFrame]:
    from ..grids.compare import collect
    from ..grids.spec import load_spec

    exp = load_spec(spec, {"out_dir": str(root)})
    runs, _ = collect(exp)
    runs = runs[runs.status != "not run"].copy()
    runs["run_id"] = [Path(str(d)).name for d in runs.run_dir]
    return exp, runs


def checks(exp, runs: pd.DataFrame) -> dict[tuple[str, str], object]:
    """(claim, setting) -> its verdict on ``runs``, as the report reads it (rounds to a target as intervals:
    :func:`~fbo_cli.grids.resolution.rounds_verdict`; claims on a derived, grid-valued quantity aside: those need the
    section's derived table)."""
    from ..grids.resolution import rounds_verdict

    out = {}
    for claim in exp.claims:
        if claim.metric not in runs:
            continue
        pairs = claim.across or [[s.name, None] for s in exp.settings if not claim.settings or s.name in claim.settings]
        for s, t in pairs:
            out[(claim.text, s if t is None else f"{s} vs {t}")] = rounds_verdict(runs, claim, s, t, len(exp.seeds))
    return out


def compare(specs: list[str], ours: Path, theirs: Path) -> list[Compared]:
    """Every claim check of ``specs`` decided on both roots' common runs (by run id), side by side."""
    rows = []
    for spec in specs:
        if not Path(spec).is_file():
            raise UsageError(f"spec not found: {spec}", kind="not_found", field="spec", path=spec)
        exp, a = _runs(spec, ours)
        _, b = _runs(spec, theirs)
        common = set(a.run_id) & set(b.run_id)
        va, vb = checks(exp, a[a.run_id.isin(common)]), checks(exp, b[b.run_id.isin(common)])
        for key, v in va.items():
            w = vb.get(key)
            if w is not None and "no data" not in (v.verdict, w.verdict):
                rows.append(Compared(exp.name, key[0], key[1], v, w))
    return rows


def summary_line(rows: list[Compared]) -> str:
    """The last line: 'agreement: N checks compared, D of another kind, R reversed' (D includes R)."""
    d, r = sum(x.kind != "same" for x in rows), sum(x.kind == "reversed" for x in rows)
    return f"agreement: {len(rows)} checks compared, {d} of another kind, {r} reversed"


def report(rows: list[Compared], ours: Path, theirs: Path, command: str) -> str:
    """The Markdown of ``agreement.md``: the command, each check of another kind with both intervals and looks,
    the first-look checks' agreement, and the summary line last."""
    from ..runs.table import md_row

    first = [r for r in rows if r.ours.verdict != "inconclusive" and r.ours.look == 1
             or r.theirs.verdict != "inconclusive" and r.theirs.look == 1]
    lines = [f"# fbo check --against: the verdicts on two roots ({datetime.date.today().isoformat()})", "",
             f"`{command}`: `{ours}` against `{theirs}`, on their common runs (by run id) and seeds.", ""]
    diff = [r for r in rows if r.kind != "same"]
    if diff:
        lines += ["| spec | claim | setting | here | there | kind |", "|---|---|---|---|---|---|"]
        lines += [md_row((r.spec, r.claim, r.setting, f"**{r.ours.verdict}** {r.ours.interval} (look {r.ours.look})",
                          f"**{r.theirs.verdict}** {r.theirs.interval} (look {r.theirs.look})", r.kind))
                  for r in diff]
        lines.append("")
    same_first = sum(r.kind == "same" for r in first)
    lines += [f"Decided at the first look on either root: {len(first)}, of the same kind on both: {same_first}.", "",
              summary_line(rows)]
    return "\n".join(lines) + "\n"
