"""A run's ``code.commit`` is the commit of fbo's own repository: a copy of fbo sitting untracked inside another
git repository records "unrecorded", not that repository's commit (the H200 runs recorded such a one)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import fbo_cli

PKG = Path(fbo_cli.__file__).parent


def _git(cwd, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _recorded(root: Path) -> str:
    code = "from fbo_cli.runs.identity import git_commit; print(git_commit())"
    return subprocess.run([sys.executable, "-B", "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                           check=True, capture_output=True, text=True).stdout.strip()


def test_a_copy_inside_another_repository_records_no_commit_until_it_is_tracked(tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    _git(outer, "init", "-q")
    (outer / "README").write_text("another project\n")
    _git(outer, "add", "README")
    _git(outer, "commit", "-q", "-m", "other")
    shutil.copytree(PKG, outer / "fbo_cli", ignore=shutil.ignore_patterns("__pycache__"))
    assert _recorded(outer) == "unrecorded"  # before: the outer repository's commit
    _git(outer, "add", "fbo_cli")
    _git(outer, "commit", "-q", "-m", "fbo")
    assert _recorded(outer) == _git(outer, "rev-parse", "HEAD")[:12]
