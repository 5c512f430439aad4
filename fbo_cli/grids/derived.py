"""Quantities read across a spec's settings (``derived:`` in a spec): CODASCA's I_max (Yuan, Guo, Xu, Ying & Yang,
ICML 2021, Fig. 1), the largest communication window I whose final AUC stays within ``delta`` of the AUC at I = 1,
per algorithm, client count K and seed. The report tests claims on it (:mod:`fbo_cli.evidence.report.sections`)
and ``fbo compare --until-settled`` adds the seeds its next look needs to every window it is read across
(:mod:`fbo_cli.grids.settle`); both read it here."""

from __future__ import annotations

import math
import re
from pathlib import Path

from ..errors import UsageError


def _run_keys(run_dir: str) -> tuple[int | None, int | None]:
    from ..runs.config import load_yaml

    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        return None, None
    try:
        c = load_yaml(p.read_bytes(), str(p))
    except (UsageError, OSError):
        return None, None
    return (c.get("hp") or {}).get("I"), c.get("clients")


def with_keys(runs: "pd.DataFrame") -> "pd.DataFrame":  # noqa: F821
    """``runs`` with the window ``I`` and client count ``K`` of each run (its config, else the setting's name)."""
    Is, Ks = [], []
    for _, r in runs.iterrows():
        I, K = _run_keys(r["run_dir"]) if "run_dir" in r else (None, None)
        m_i = re.search(r"\bI\s*=\s*(\d+)", str(r["setting"]))
        m_k = re.search(r"\bK\s*=\s*(\d+)", str(r["setting"]))
        Is.append(I if I is not None else (int(m_i.group(1)) if m_i else None))
        Ks.append(K if K is not None else (int(m_k.group(1)) if m_k else None))
    return runs.assign(I=Is, K=Ks)


def windows(settings: list[dict]) -> dict[int, set[int]]:
    """The windows I a spec's settings run per client count K (``set: {clients, I}``)."""
    out: dict[int, set[int]] = {}
    for st in settings:
        kv = st.get("set") or {}
        if "I" in kv and "clients" in kv:
            out.setdefault(int(kv["clients"]), set()).add(int(kv["I"]))
    return out


def imax_per_seed(runs: "pd.DataFrame", expected: dict[int, set[int]] | None = None,  # noqa: F821
                  delta: float = 0.01) -> "pd.DataFrame":  # noqa: F821
    """One row per (algorithm, K, seed): ``I_max``, the largest I whose final AUC is >= that seed's AUC
    at I = 1 minus ``delta``, as ``claim_verdict`` reads runs (``setting`` = ``K=<K>``, status done).
    An I_max at the grid's top (the largest window run for that K) is censored: the largest tolerable window
    is at least that, not that, so it is +∞ (above every window run; ``claim_verdict(..., exact=True)``
    reads it as "≥ the grid's top"). A seed without a finished I = 1 run, or (``expected``: the windows per
    K) without a run at every window, has no row; a diverged or failed run at some I does not count as
    tolerated."""
    import pandas as pd

    runs = with_keys(runs)
    rows = []
    for (algo, K, seed), g in runs.groupby(["algorithm", "K", "seed"]):
        base = g[(g.I == 1) & (g.status == "done")]["final"]
        if base.empty or (expected and not expected.get(int(K), set()) <= set(g.I.dropna().astype(int))):
            continue
        ok = g[(g.status == "done") & (g["final"] >= base.iloc[0] - delta)]
        top = max(expected.get(int(K), set()) | set(g.I.dropna().astype(int))) if expected else g.I.max()
        imax = float(ok.I.max())
        rows.append({"algorithm": algo, "setting": f"K={int(K)}", "seed": seed, "status": "done",
                     "I_max": math.inf if imax >= top else imax})
    return pd.DataFrame(rows, columns=["algorithm", "setting", "seed", "status", "I_max"])


def derived_tables(exp, runs) -> dict[str, tuple]:
    """Per derived quantity of ``exp`` (an :class:`~fbo_cli.grids.spec.Experiment`): ``(its per-seed table, as
    claim verdicts read runs; its setting names; {setting name: the spec's settings it is read across})``."""
    if "imax" not in exp.derived:
        return {}
    win = windows(exp.settings)
    across = {f"K={k}": [st.name for st in exp.settings
                         if str((st.set or {}).get("clients")) == str(k) and "I" in (st.set or {})] for k in win}
    return {"I_max": (imax_per_seed(runs, win), [f"K={k}" for k in sorted(win, reverse=True)], across)}
