"""The evidence behind the report: copying finished reproduction runs into docs/results/ and pruning
what no spec refers to.
"""

from __future__ import annotations

from pathlib import Path

from ...grids.spec import load_spec
from ...runs.rundir import ROOT_MARKER, atomic_write, below, claim_root, is_fbo_root, remove_run, run_status
from .papers import PAPERS

EVIDENCE_FILES = ("config.yaml", "metrics.csv", "summary.json")


SPEC_FILES = ("tuned.yaml", "settled.yaml", "tuning.csv", "ranking.csv", "tuning.partial.yaml", "tuning.partial.csv")


# CPU, GPU, the latency-bound cases on the code before the speed work and on this code (fbo bench --against), run
# batches against runs one by one (fbo bench --batch R; its csv prices batches in fbo cost), and the code before and
# after runs kept the memory a step frees (fbo bench --against, bench/alloc)
BENCH_FILES = ("bench/bench.md", "bench/cuda/bench.md", "bench/ab.md", "bench/batch.md", "bench/batch.csv",
               "bench/cuda/batch.md", "bench/alloc/ab.md")

# the last reproduction check (make reproduce-check): committed runs rerun and compared with the evidence
CHECK_FILES = ("check/check.md", "check/check.csv", "check/agreement.md")  # agreement: `fbo check --against`


# --------------------------------------------------------------------------------------------------
# Evidence


def _plain(p: Path, root: Path) -> bool:
    """``p`` is a regular file inside ``root`` with no symbolic link on its way (nor itself one)."""
    return below(root, p) and p.is_file()


def _copy(src: Path, src_root: Path, dst: Path, dst_root: Path) -> bool:
    """Copy one file atomically when it is a plain file of ``src_root`` and ``dst`` lies in ``dst_root``
    without links; False (nothing written) otherwise."""
    if not _plain(src, src_root) or not below(dst_root, dst):
        return False
    atomic_write(dst, src.read_bytes())
    return True


# the runs `fbo report --collect` brought into an evidence root (one run folder a line, relative to the root): the
# only runs --prune removes without --yes (a finished run of the user's own in that root is never one of them)
COLLECTED = ".fbo-collected"


def collected(evidence: Path) -> set[str]:
    """The run folders (relative to ``evidence``) that ``--collect`` brought there (:data:`COLLECTED`)."""
    p = Path(evidence) / COLLECTED
    try:
        return set(p.read_text().split()) if _plain(p, evidence) else set()
    except (OSError, UnicodeDecodeError):
        return set()


def _ids(d: Path, f: str, root: Path) -> set | None:
    """What a spec's record holds, to tell an older record from a newer one: the run ids of a tuning table
    (``tuning.csv``, ``tuning.partial.csv``), the (setting, algorithm, seed) cells a ``settled.yaml`` added; None
    where the file is not there or not readable."""
    import pandas as pd
    import yaml

    if not _plain(d / f, root):
        return None
    try:
        if f == "settled.yaml":
            added = (yaml.safe_load((d / f).read_text()) or {}).get("added") or []
            return {(e["setting"], a, k) for e in added for a in e["algorithms"] for k in e["seeds"]}
        return {Path(str(x)).name for x in pd.read_csv(d / f, usecols=["run_dir"]).run_dir.dropna()}
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        return None


def _older_record(here: Path, there: Path, f: str, results: Path, evidence: Path) -> str:
    """Why ``here / f`` (a spec's tuning or settling record in the results being collected) must not replace the
    differing ``there / f`` in the evidence ('' where it may): a record replaces another only when it holds all
    that one holds (its tuning table's runs, its settled cells), so that collecting from an older results root
    never puts back an older tuning or fewer seeds."""
    if not _plain(here / f, results) or not _plain(there / f, evidence):
        return ""
    if (here / f).read_bytes() == (there / f).read_bytes():
        return ""
    table = "settled.yaml" if f == "settled.yaml" else (
        "tuning.partial.csv" if f.startswith("tuning.partial") else "tuning.csv")
    new, old = _ids(here, table, results), _ids(there, table, evidence)
    if old is None or (new is not None and new >= old):  # nothing there to lose, or all of it here
        return ""
    return (f"the evidence's {f} holds what this one lacks ({table}: {len(old or ())} entries there, "
            f"{len(new or ())} here, not a superset): kept; remove it from the evidence to replace it")


def collect_evidence(results: Path, evidence: Path, papers=PAPERS, refused: list | None = None) -> int:
    """Copy every finished reproduction run's compact files (and each spec's tuning record) from
    ``results`` into ``evidence`` (same layout); returns the number of runs copied. Only runs whose
    completion record holds (:func:`fbo_cli.runs.rundir.run_status`: summary.json's ``metrics_sha256`` is that of
    metrics.csv, and the summary names this run) and whose files are plain files are copied; nothing is
    read or written through a symbolic link, and nothing is removed. A spec's record (``tuned.yaml``,
    ``tuning.csv``, ``settled.yaml``, ...) replaces the evidence's only when it holds all the evidence's holds
    (:func:`_older_record`). The runs and records refused (finished-looking, but failing those checks) are
    appended to ``refused`` as ``(path, why)``."""
    n = 0
    claim_root(evidence)
    refused = refused if refused is not None else []
    brought = collected(evidence)
    for paper in papers:
        for spec in paper.specs:
            if not Path(spec).is_file():
                continue
            exp = load_spec(spec, {"out_dir": str(results)})
            for c in exp.cells:
                src = c.cfg.run_dir
                if not (src / "summary.json").exists() and not (src / "summary.json").is_symlink():
                    continue
                dst = evidence / src.relative_to(results)
                state, _, why = run_status(src)
                bad = ("a symbolic link on its path" if not below(results, src) else
                       f"not finished ({why or state})" if state != "finished" else
                       next((f"{f} is not a plain file" for f in EVIDENCE_FILES if not _plain(src / f, results)),
                            "") or ("its place in the evidence is a symbolic link" if not below(evidence, dst)
                                    else ""))
                if bad:
                    refused.append((src, bad))
                    continue
                data = {f: (src / f).read_bytes() for f in EVIDENCE_FILES}
                for f in sorted(EVIDENCE_FILES, key=lambda f: f == "summary.json"):  # the completion record last
                    atomic_write(dst / f, data[f])
                brought.add(str(dst.relative_to(evidence)))
                n += 1
            here, there = results / "compare" / exp.name, evidence / "compare" / exp.name
            for f in SPEC_FILES:
                if why := _older_record(here, there, f, results, evidence):
                    refused.append((here / f, why))
                else:
                    _copy(here / f, results, there / f, evidence)
    if brought != collected(evidence):
        atomic_write(evidence / COLLECTED, "".join(f"{d}\n" for d in sorted(brought)))
    for paper in papers:  # count tables written by `fbo figure` (ZO-HFL Fig. 1)
        for f in paper.counts:
            _copy(results / f, results, evidence / f, evidence)
    for f in BENCH_FILES + CHECK_FILES:  # the bench's and the check's own tables, shown as they are
        _copy(results / f, results, evidence / f, evidence)
    return n


# --prune removes at most this share of the evidence's runs without --yes (a larger cut is more likely a
# mistake, e.g. specs that moved, than runs a retuning replaced)
PRUNE_SHARE = 0.2


def _finished_partial(here: Path, evidence: Path) -> bool:
    """Whether the partial tuning record in ``here`` is what the finished tuning beside it left: every run it holds
    is in that tuning's ``tuning.csv`` (by run id). A partial holding runs the record lacks is a re-tuning under
    way (e.g. margin probes stopped before they finished), which ``fbo tune`` resumes from: not a leftover."""
    if not _plain(here / "tuning.partial.csv", evidence):
        return True  # no partial table: the yaml alone is a leftover
    partial, done = _ids(here, "tuning.partial.csv", evidence), _ids(here, "tuning.csv", evidence)
    return partial is not None and done is not None and partial <= done


def prune_evidence(evidence: Path, papers=PAPERS, remove: bool = False, yes: bool = False) -> list[Path]:
    """The run directories under ``evidence`` that no reproduction spec refers to any more (e.g. runs with
    step sizes a later tuning replaced), and the partial tuning records of tunings that finished
    (:func:`_finished_partial`: not a re-tuning under way); removed
    only with ``remove``, and then only inside a results root fbo made (``.fbo-results``), never through a
    symbolic link, and only fbo's own: a run directory with its completion record (its own files go, and the
    folder when that empties it), a ``tuning.partial.*`` beside its ``tuned.yaml``. Returns them.

    A UsageError, before anything is removed, when a paper's specs cannot be read (run outside the checkout,
    without ``experiments/``: every run would look referred to by no spec), and, without ``yes``, when it
    would remove more than :data:`PRUNE_SHARE` of the runs under ``evidence``."""
    from ...errors import UsageError

    keep: set[Path] = set()
    partial: list[Path] = []
    for paper in papers:
        unread = [s for s in paper.specs if not Path(s).is_file()]
        if not paper.specs or unread:
            raise UsageError(f"cannot read the reproduction specs of paper '{paper.key}' ("
                             + (f"no file {unread[0]}" if unread else "no experiments/*.yaml names it here")
                             + f"; run fbo report from the repository root): nothing under {evidence} is pruned",
                             kind="not_found", field="specs", path=unread[0] if unread else None, value=paper.key)
        for spec in paper.specs:
            exp = load_spec(spec, {"out_dir": str(evidence)})
            keep.update(c.cfg.run_dir for c in exp.cells)
            here = evidence / "compare" / exp.name
            if _plain(here / "tuned.yaml", evidence) and _finished_partial(here, evidence):
                partial += [here / f for f in SPEC_FILES if f.startswith("tuning.partial")
                            and _plain(here / f, evidence)]
    runs = [c.parent for c in sorted(evidence.glob("*/*/*/summary.json"))]
    stale = [d for d in runs if d not in keep and below(evidence, d) and run_status(d)[0] == "finished"]
    if remove and (stale or partial):
        if not is_fbo_root(evidence):
            raise UsageError(f"--prune: {evidence} is not a results root fbo made (no {ROOT_MARKER}); nothing "
                             f"removed", kind="not_fbos", path=evidence)
        if len(stale) > PRUNE_SHARE * len(runs) and not yes:
            raise UsageError(f"--prune would remove {len(stale)} of the {len(runs)} runs under {evidence} (more "
                             f"than {PRUNE_SHARE:.0%}; e.g. {stale[0]}): nothing removed. `fbo report --collect "
                             f"...` without --prune lists them; add --yes to remove them all",
                             kind="needs_yes", field="--prune", path=evidence, value=len(stale))
        theirs = collected(evidence)
        own = [d for d in stale if str(d.relative_to(evidence)) not in theirs]
        if own and not yes:
            raise UsageError(f"--prune would remove {len(own)} finished run(s) under {evidence} that `fbo report "
                             f"--collect` did not bring there (your own? e.g. {own[0]}): nothing removed. Move them "
                             f"elsewhere, or add --yes to remove them too",
                             kind="needs_yes", field="--prune", path=evidence, value=len(own))
        for d in stale:
            remove_run(d)
        for f in partial:
            f.unlink(missing_ok=True)
    return stale + partial


# --------------------------------------------------------------------------------------------------
# Verdicts
