"""fbo's own git repository: the commit a run records, and only where that repository tracks the fbo_cli package (a
copy of fbo sitting untracked inside another repository must not record that repository's commit)."""

from __future__ import annotations


def own_head() -> tuple[str, bool] | None:
    """(HEAD's sha, whether fbo_cli/ has uncommitted changes) of the git repository that tracks the fbo_cli package;
    None where there is none: no git, or a copy of fbo sitting untracked inside another repository (whose commit
    says nothing of fbo's code: the H200 runs recorded such a one)."""
    import subprocess
    from pathlib import Path

    here = Path(__file__).parents[1]  # fbo_cli/
    try:
        run = lambda *a: subprocess.run(["git", *a], cwd=here, text=True, capture_output=True, timeout=10)  # noqa: E731
        if run("ls-files", "--error-unmatch", "__init__.py").returncode != 0:  # not tracked here: not fbo's own
            return None
        sha = run("rev-parse", "HEAD").stdout.strip()
        if not sha:
            return None
        return sha, bool(run("status", "--porcelain", "--", str(here)).stdout.strip())
    except (OSError, ValueError, Exception):
        return None
