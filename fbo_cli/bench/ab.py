"""``fbo bench --against REV``: the same cases on two versions of the code, alternating fresh processes.
Both sides are timed by this bench (the same instrument): :mod:`fbo_cli.bench.child` loads this package
over the other tree's ``fbo_cli``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import torch

from ..runs.rundir import atomic_write

HERE = Path(__file__).resolve().parent  # this bench package


def commit_label() -> str:
    """``, commit <sha>`` of the code timed (``results.code_commit``), or '' on a tree that lacks it (the
    code before the speed work, BEFORE in the Makefile, has none)."""
    from ..runs import rundir as results

    return getattr(results, "code_commit", lambda: "")()


def _git(*args: str) -> str:
    """``git`` in this checkout (bench's own: an older tree's results.py, loaded under --against, has no helper)."""
    import subprocess

    return subprocess.run(["git", *args], cwd=HERE.parents[1], check=True,
                          capture_output=True, text=True).stdout.strip()


def is_revision(rev: str) -> bool:
    import subprocess

    try:
        return bool(_git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"))
    except (OSError, subprocess.CalledProcessError):
        return False


def _code_tree(against: str, tmp: Path) -> tuple[Path, str]:
    """``(folder whose fbo_cli/ is the code to compare, its name)``: ``against`` is a checkout (a folder with
    ``fbo_cli/``) or a git revision of this repository, whose ``fbo_cli/`` is exported to ``tmp``."""
    import subprocess
    import tarfile

    if (Path(against) / "fbo_cli").is_dir():
        return Path(against).resolve(), str(against)
    archive = tmp / "before.tar"
    try:
        sha = _git("rev-parse", "--short", f"{against}^{{commit}}")
        _git("archive", "-o", str(archive), sha, "fbo_cli")
    except (OSError, subprocess.CalledProcessError) as e:
        raise ValueError(f"--against {against}: neither a checkout with fbo_cli/ nor a git revision here") from e
    with tarfile.open(archive) as t:
        t.extractall(tmp / "before", filter="data")
    return tmp / "before", f"commit {sha}"


def ab_bench(against: str, only: list[str], rounds: int, threads: int, out: Path, con,
             after: Path | None = None, bench_dir: Path = HERE) -> pd.DataFrame:
    """Time ``only`` (substrings of case names) on the code of ``against`` ("before") and on this code
    ("after"): ``rounds`` rounds, each running this bench (``--only``) on both sides' code in fresh processes,
    before then after in odd rounds and the other way round in even ones, so that both see the same machine
    over the same minutes and neither always goes first. Keeps each case's fastest
    iteration over the rounds and its spread (slowest round's minimum over fastest), and writes
    ``ab.csv`` and ``ab.md``. The cases are those of this tree's ``experiments/bench.yaml``; ``after`` is
    this code's checkout and ``bench_dir`` this package unless given (a test gives its own)."""
    import subprocess
    import tempfile

    here = after or HERE.parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        before, label = _code_tree(against, tmp)
        frames, skipped = [], {}
        for r in range(rounds):
            for side, root in (("before", before), ("after", here))[::1 if r % 2 == 0 else -1]:
                con.print(f"round {r + 1}/{rounds}: {side} ({label if side == 'before' else 'this code'}) ...",
                          style="dim")
                dest = tmp / f"{side}{r}"
                opts = {"only": ",".join(only), "out": str(dest), "threads": threads}
                cmd = [sys.executable, str(HERE / "child.py"), str(root), str(bench_dir), json.dumps(opts)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode or not (dest / "bench.csv").is_file():
                    raise RuntimeError(f"the {side} bench failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
                for line in proc.stdout.splitlines():  # a case that fails on one side is reported, not hidden
                    if line.startswith("skipped "):
                        skipped.setdefault(line.split()[1].rstrip(":"), f"{side}: {line}")
                df = pd.read_csv(dest / "bench.csv")
                df["side"], df["round"] = side, r
                frames.append(df)
    runs = pd.concat(frames, ignore_index=True)
    runs["eff"] = runs["gflops"] / runs["sgemm_gflops"]
    best = runs.groupby(["case", "side"]).agg(s=("s_per_iteration", "min"), worst=("s_per_iteration", "max"),
                                              eff=("eff", "max")).unstack("side")
    rows = []
    for case in [c for c in dict.fromkeys(runs["case"]) if c in best.index]:
        b = best.loc[case]
        if b.isna().any():  # timed on one side only
            skipped.setdefault(case, "timed on one side only")
            continue
        rows.append({"case": case, "before_s": b[("s", "before")], "after_s": b[("s", "after")],
                     "speedup": b[("s", "before")] / b[("s", "after")],
                     "before_spread": b[("worst", "before")] / b[("s", "before")],
                     "after_spread": b[("worst", "after")] / b[("s", "after")],
                     "before_efficiency": b[("eff", "before")], "after_efficiency": b[("eff", "after")]})
    ab = pd.DataFrame(rows)
    md = [f"**fbo bench --against: {label} (before) and {commit_label().lstrip(', ') or 'this code'} (after), "
          f"{rounds} alternating rounds of fresh processes, torch {torch.__version__}, {threads} thread(s)**", "",
          "| case | before s / iteration | after s / iteration | speedup | efficiency before → after | "
          "spread before, after |", "|---|---|---|---|---|---|"]
    md += [f"| {r.case} | {r.before_s:.4f} | {r.after_s:.4f} | {r.speedup:.2f}x | {r.before_efficiency:.0%} → "
           f"{r.after_efficiency:.0%} | {r.before_spread:.2f}, {r.after_spread:.2f} |" for r in ab.itertuples()]
    md += ["", "Both sides timed by this bench, each on its own code. Each side's fastest iteration over the rounds "
           "(each round's own minimum of at least 3 iterations); spread: its slowest round over its fastest, the "
           "machine's noise in this window."]
    md += [f"Not compared: {c} ({why})." for c, why in skipped.items()]
    for c, why in skipped.items():
        con.print(f"[red]not compared: {c} ({why})[/red]")
    atomic_write(out / "ab.csv", ab.to_csv(index=False))
    atomic_write(out / "ab.md", "\n".join(md) + "\n")
    return ab

