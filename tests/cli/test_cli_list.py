"""``fbo list`` and the ``fbo`` entry point (``python -m fbo_cli.cli``)."""

import subprocess
import sys
from pathlib import Path

from cli_helpers import invoke, run


def test_list_and_entry_point():
    r = run("list")
    assert r.exit_code == 0 and "aggitd" in r.output and "hyperrep" in r.output
    p = subprocess.run([sys.executable, "-m", "fbo_cli.cli", "run", "hyperrep", "--algo", "nope"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "unknown algorithm" in p.stderr


def test_list_piped_keeps_whole_names(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    r = invoke(["list"])
    assert r.exit_code == 0, r.output
    words = set(r.stdout.split())
    assert {"fedbioacc-local", "server-only", "fedbio-local"} <= words
    for p in Path("experiments").glob("*.yaml"):
        if "algorithms:" in p.read_text():
            assert str(p) in words, p
