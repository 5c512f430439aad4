"""The report's layout (issue 53): scorecards first, the detail behind folds, figures reused when their
inputs did not change."""

import re

import pandas as pd
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.evidence.report import Paper, build_report, collect_evidence
from fbo_cli.grids.plot_reuse import reuse, reusing

runner = CliRunner()


def tiny(tmp_path, claims=True):
    p = tmp_path / "exp.yaml"
    claim = ('claims:\n  - {text: "AggITD beats FedNest", metric: final, better: AggITD, than: FedNest, mode: max}\n'
             if claims else "")
    p.write_text(f"""
name: t
title: Tiny
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 3, threads: 1, out_dir: {tmp_path}}}
algorithms:
  - {{name: AggITD, algo: aggitd}}
  - {{name: FedNest, algo: fednest}}
settings: [{{name: iid, set: {{partition: iid}}}}]
reference_on: {{dataset: digits}}
reference:
  AggITD: {{iid: {{final: 0.5}}}}
{claim}""")
    return p


def test_scorecards_first_detail_folded_and_unchanged_figures_reused(tmp_path):
    p = tiny(tmp_path)
    assert runner.invoke(app, ["compare", str(p)]).exit_code == 0
    assert "shaded bands: min to max over those seeds" in (tmp_path / "compare" / "t" / "table.md").read_text()
    ev = tmp_path / "evidence"
    assert collect_evidence(tmp_path, ev, papers=(Paper("t", "T", "", given=(str(p),)),)) == 2
    md_path, html_path = tmp_path / "r.md", tmp_path / "r.html"
    said = []
    first = build_report(ev, md_path, html_path, specs=[str(p)], say=said.append)
    assert first["drawn"] >= 1 and first["reused"] == 0 and "no previous report's figures" in said[0]
    md = md_path.read_text()
    # the index's scorecards come before the rule; the paper's card opens its part, before any fold
    assert md.index("## Scorecards: what reproduces") < md.index("**Verdict rule.**")
    part = md.split("## Experiments", 1)[1]
    assert part.index("**Scorecard.** Claims: 1 claim check ") < part.index("<!-- fold:")
    assert re.search(r"\| \[t\]\(#tiny\) \| AggITD, iid: final \| 0.5 \| [0-9.]+", part)  # a number, with a verdict
    html = (tmp_path / "r-specs.html").read_text()
    assert "<details><summary>" in html and "&lt;!--" not in html  # the markers became folds
    section = html[html.index('id="tiny"'):]
    assert section.index("<details>") < section.index("<figure>")  # the figures are behind the fold
    # a second report with nothing changed draws nothing and says so first
    said.clear()
    second = build_report(ev, md_path, html_path, specs=[str(p)], say=said.append)
    assert second["drawn"] == 0 and second["reused"] == first["drawn"] and "are reused" in said[0]
    assert (tmp_path / "r-figures" / "t.svg").is_file() and md_path.read_text() == md


def test_a_figure_is_reused_only_while_its_inputs_and_files_are_the_same(tmp_path):
    calls = []

    def draw(folder, text):
        def produce():
            calls.append(text)
            (folder / "f.png").write_text(text)
            (folder / "f.svg").write_text(text)
            return len(text)
        return produce

    runs = pd.DataFrame({"final": [0.5, 0.6]})
    old = tmp_path / "old"
    old.mkdir()
    with reusing(tmp_path / "none", old):
        assert reuse(old / "f.png", (runs,), draw(old, "a")) == 1
    for changed, result, text in ((runs, 1, "a"), (runs.assign(final=[0.5, 0.7]), 2, "bb")):
        new = tmp_path / f"new{result}"
        new.mkdir()
        with reusing(old, new):  # the same inputs: the old files and result; others: drawn
            assert reuse(new / "f.png", (changed,), draw(new, "bb")) == result
        assert (new / "f.svg").read_text() == text and (new / "reuse.json").is_file()
    assert calls == ["a", "bb"]
    assert reuse(tmp_path / "f.png", (runs,), draw(tmp_path, "cc")) == 2  # outside a report: always drawn


def test_a_report_without_verdicts_counts_no_inconclusive_line(tmp_path):
    p = tiny(tmp_path, claims=False)
    p.write_text(p.read_text().split("reference_on")[0])  # no claims, no paper numbers
    assert runner.invoke(app, ["compare", str(p)]).exit_code == 0
    build_report(tmp_path, tmp_path / "r.md", tmp_path / "r.html", specs=[str(p)])
    md = (tmp_path / "r.md").read_text()
    assert "None of this report's verdicts is inconclusive." in md and "lines of this report say" not in md
