"""``fbo check --against``: the claim verdicts of two roots on their common runs, kind by kind."""

import subprocess
import sys

from fbo_cli.evidence.agreement import Compared, summary_line
from fbo_cli.grids.verdicts import Verdict

SPEC = "experiments/aggitd_table2_heldout.yaml"


def _c(a, b):
    return Compared("s", "c", "x", Verdict(a, "", "", 3, look=1), Verdict(b, "", "", 3, look=1))


def test_kinds_and_the_summary_line():
    rows = [_c("holds", "holds"), _c("holds", "inconclusive"), _c("does not hold", "holds")]
    assert [r.kind for r in rows] == ["same", "another kind", "reversed"]
    assert summary_line(rows) == "agreement: 3 checks compared, 2 of another kind, 1 reversed"


def test_a_root_against_itself_agrees_everywhere_and_exits_0(tmp_path):
    r = subprocess.run([sys.executable, "-m", "fbo_cli.cli", "check", "--against", "docs/results", "--spec", SPEC,
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("agreement:")]
    n = int(last[0].split()[1])
    assert n > 0 and last[0] == f"agreement: {n} checks compared, 0 of another kind, 0 reversed"
    assert (tmp_path / "agreement.md").read_text().rstrip().endswith(last[0])
