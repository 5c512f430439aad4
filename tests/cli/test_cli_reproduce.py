"""``fbo reproduce`` and ``fbo cost``: the reproduction is the specs that name their paper, nothing kept by
hand (the Makefile's targets are one line each)."""

import re
from pathlib import Path

from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_every_spec_the_report_shows_is_reproduced(monkeypatch):
    from fbo_cli.evidence.report.papers import PAPERS
    from fbo_cli.evidence.reproduce import plan

    monkeypatch.chdir(ROOT)
    steps = plan()
    reproduced = [s.spec for s in steps]
    shown = [s for p in PAPERS for s in p.specs if Path(s).is_file()]  # the report's sections, in its order
    assert reproduced == shown
    named = {str(f.relative_to(ROOT)) for f in (ROOT / "experiments").glob("*.yaml")
             if re.search(r"^paper:", f.read_text(), re.M)}
    assert set(reproduced) == named  # every spec that names a paper, and no other
    # the two the hand-kept list of the Makefile missed
    assert {"experiments/zohfl_stress_mnist.yaml", "experiments/fedbio_local_hyperrep_mnist.yaml"} <= set(reproduced)
    tunes = {s.spec: s.tune for s in steps}
    assert tunes["experiments/aggitd_table2.yaml"] and not tunes["experiments/aggitd_fig3_mnist.yaml"]


def test_the_makefile_targets_are_one_fbo_reproduce_line_each():
    make = (ROOT / "Makefile").read_text()

    def body(target):
        m = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)*)", make, re.M)
        return m.group(1).strip().splitlines()

    assert body("reproduce-all") == ["$(FBO) reproduce --jobs $(JOBS)"]
    assert body("reproduce-cost") == ["$(FBO) cost --jobs $(JOBS)"]
    for paper in ("aggitd", "fedbio", "adafbio", "codasca", "zohfl"):
        assert body(f"reproduce-{paper}") == [f"$(FBO) reproduce --paper {paper} --jobs $(JOBS)"]
    assert "REPRODUCE_SPECS" not in make


def _spec(folder: Path, name: str, paper: str, order: int, tune: bool) -> None:
    grid = ", tune: {outer_lr: [0.01, 0.1]}" if tune else ""
    block = "tune: {seeds: [100], rounds: 4}\n" if tune else ""
    (folder / f"{name}.yaml").write_text(
        f"name: {name}\ntask: hyperrep\npaper: {paper}\norder: {order}\nseeds: [0]\n{block}"
        f"base: {{dataset: mnist5k, clients: 4, rounds: 4}}\nalgorithms:\n  - {{name: A, algo: aggitd{grid}}}\n")


def test_dry_run_lists_tune_then_compare_in_report_order_and_runs_nothing(tmp_path, monkeypatch):
    (tmp_path / "experiments").mkdir()
    _spec(tmp_path / "experiments", "second", "aggitd", 20, tune=False)
    _spec(tmp_path / "experiments", "first", "aggitd", 10, tune=True)
    _spec(tmp_path / "experiments", "other", "zohfl", 10, tune=False)
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["reproduce", "--paper", "aggitd", "--dry-run", "--jobs", "2"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("fbo ")]
    assert lines == ["fbo tune experiments/first.yaml --jobs 2", "fbo compare experiments/first.yaml --jobs 2",
                     "fbo compare experiments/second.yaml --jobs 2", "fbo report --collect results"]
    assert "core-hours expected" in r.output  # the cost comes first
    assert not (tmp_path / "results").exists()
    r = runner.invoke(app, ["cost"])  # no spec: the same list, every paper
    assert r.exit_code == 0, r.output
    assert all(n in r.output for n in ("first", "second", "other")), r.output


def test_bad_paper_and_jobs_are_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["reproduce", "--paper", "nope", "--dry-run"])
    assert fails_with(r, "unknown", field="paper", value="nope"), r.output
    r = runner.invoke(app, ["reproduce", "--jobs", "0", "--dry-run"])
    assert fails_with(r, "bad_value", field="--jobs", value=0), r.output
