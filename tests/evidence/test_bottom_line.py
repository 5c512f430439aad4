"""The bottom line per paper (issue 60): a paper's headline claims counted once over specs and settings, claims
about another paper's method on that paper's line, the look and seeds where the verdicts give them, "reached"
only for equivalence, and the seeds an open paper number needs."""

import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import yaml
from scipy.stats import t

from fbo_cli.evidence.report.bottomline import bottom_line_md, claim_line, paper_bottom_md
from fbo_cli.evidence.report.headlines import FINDINGS, HEADLINES
from fbo_cli.evidence.report.numbers import need_text, number_notes, seeds_needed
from fbo_cli.evidence.report.papers import PAPERS
from fbo_cli.evidence.report.scorecard import scorecard
from fbo_cli.evidence.report.sections import Section
from fbo_cli.grids.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]


def section(name, verdicts, dataset="mnist", rows=(), notes=(), reference_on=None):
    cells = [SimpleNamespace(cfg=SimpleNamespace(run=SimpleNamespace(dataset=dataset)))]
    exp = SimpleNamespace(name=name, title=name, cells=cells, reference_on=reference_on or {}, attribution=None)
    return Section(f"{name}.yaml", exp, verdicts=list(verdicts), paper_rows=list(rows), paper_notes=list(notes))


def v(verdict, n=3, **kw):
    return Verdict(verdict, "", "", n)._replace(**kw)


def test_a_headline_counts_once_over_specs_and_settings_and_names_its_agreement():
    h = HEADLINES["aggitd"][0]  # fewer rounds to 90% than FedNest: Table 2, Fig. 2
    secs = {"aggitd": [section("t2", [(h.checks[0] + " (paper's steps)", "IID", v("holds")),
                                      (h.checks[0] + " (paper's steps)", "non-IID", v("inconclusive")),
                                      (h.checks[0] + " (tuned steps)", "IID", v("see t2_heldout"))]),
                       section("fig3", [(h.checks[1], "non-IID", v("holds", n=10))], dataset="fashion-mnist")]}
    line = claim_line("aggitd", h, secs)
    assert line.startswith(f"- *{h.where}*: {h.words} — **reproduces**: holds in 2 of 3 settings, inconclusive in 1")
    assert "3-10 seeds" in line and "MNIST, analog F-MNIST" in line  # the "see" row counts where it points
    secs["aggitd"].append(section("t2f", [(h.checks[2], "IID", v("does not hold"))]))
    assert "**mixed**: holds in 2 of 4 settings, does not hold in 1, inconclusive in 1" in claim_line("aggitd", h, secs)


def test_the_look_shows_where_the_verdicts_record_it_and_degrades_without():
    h = HEADLINES["zohfl"][0]
    found = [(h.checks[0], "a", v("does not hold", n=3, look=1)), (h.checks[1], "b", v("does not hold", n=10, look=3))]
    assert "at looks 1-3 (3-10 seeds)" in claim_line("zohfl", h, {"zohfl": [section("z", found)]})
    assert "at look 2 (6 seeds)" in claim_line("zohfl", h, {"zohfl": [section("z", [(h.checks[0], "a",
                                                                                      v("holds", n=6, look=2))])]})
    plain = claim_line("zohfl", h, {"zohfl": [section("z", [(h.checks[0], "a", v("holds", n=3, look=0))])]})
    assert "· 3 seeds ·" in plain and "look" not in plain


def test_a_claim_about_another_papers_method_lands_on_that_papers_bottom_line():
    ada = next(h for h in HEADLINES["adafbio"] if "AdaFBiO beats FedNest" in h.checks)
    secs = {"fedbio": [section("fedbio_hyperclean", [("AdaFBiO beats FedNest", "p=0.2", v("holds"))])],
            "adafbio": []}
    ada_page = "\n".join(paper_bottom_md(next(p for p in PAPERS if p.key == "adafbio"), secs))
    fed_page = "\n".join(paper_bottom_md(next(p for p in PAPERS if p.key == "fedbio"), secs))
    assert f"{ada.words} — **reproduces**: holds in 1 of 1 setting" in ada_page
    assert "reproduces" not in fed_page  # FedBiO's lines are not checked here
    index = "\n".join(bottom_line_md(PAPERS, secs))
    assert index.index("**Our own findings**") > index.index(ada.words)  # our findings are a list of their own


def test_every_headline_names_a_claim_of_the_specs_and_every_paper_has_one():
    texts = [c["text"] for f in (ROOT / "experiments").glob("*.yaml")
             for c in (yaml.safe_load(f.read_text()) or {}).get("claims") or []]
    for key, heads in {**HEADLINES, **{f"{k} (ours)": x for k, x in FINDINGS.items()}}.items():
        for h in heads:
            for prefix in h.checks:
                assert any(t_.startswith(prefix) for t_ in texts), f"{key}: no spec claim starts with {prefix!r}"
    assert {p.key for p in PAPERS} <= set(HEADLINES)


def test_reached_is_equivalence_only_and_above_a_collapse_contradicts_the_paper():
    rows = [("A", "s1", "final", "0.39", "0.86", "above"), ("A", "s2", "final", "0.87", "0.90", "above"),
            ("A", "s3", "final", "0.90", "0.90", "consistent with"), ("A", "s4", "final", "0.9", "0.8", "below"),
            ("A", "s5", "rounds", "500", "900", "above (slower)")]
    sec = section("z", [], rows=rows, notes=["contradicts the paper's collapse", "", "", "", ""],
                  reference_on={"dataset": "mnist", "collapse": [["A", "s1"]]})
    card = scorecard(PAPERS[-1], [sec])
    assert card.tally["reached"] == 1 == sum(r[-1] == "consistent with" for r in rows)
    assert card.tally["ours above"] == 2 and card.tally["ours below"] == 1 and card.tally["ours slower"] == 1
    outcomes = [r[-1] for r in card.numbers]
    assert outcomes[0] == "ours above (contradicts the paper's collapse)" and outcomes[1] == "ours above"
    assert not any(o.startswith("reached") for o, r in zip(outcomes, rows) if r[-1] != "consistent with")


def test_the_seeds_an_open_number_needs():
    vals = np.array([0.870, 0.875, 0.880])
    paper, tol = 0.874, 0.0036  # |mean - paper| = 0.001; room 0.0026; sd 0.005
    n = seeds_needed(vals, paper, tol)  # beyond the design's 10: the last look of a larger --cap
    from fbo_cli.grids.verdicts import look_alphas

    half = lambda k: t.ppf(1 - look_alphas(k)[-1], k - 1) * 0.005 / math.sqrt(k)  # noqa: E731
    assert n > 10 and half(n) < 0.0026 <= half(n - 1)
    assert seeds_needed(np.array([0.86, 0.87, 0.88]), 0.85, 0.01) is None  # |mean - paper| = 0.02 >= tolerance
    exp = SimpleNamespace(reference={"A": {"s": {"final": paper}}, "B": {"s": {"final": 0.85}}},
                          reference_on={"dataset": "mnist"})
    runs = pd.DataFrame({"algorithm": ["A"] * 3 + ["B"] * 3, "setting": "s", "status": "done",
                         "final": [*vals, 0.86, 0.87, 0.88]})
    notes = number_notes(exp, runs, [("A", "s", "final", "", "", "inconclusive"),
                                     ("B", "s", "final", "", "", "inconclusive")], tol)
    assert re.search(rf"needs {n} seeds", notes[0]) and "not reachable" in notes[1]
    assert f"({n - 3} more runs, about {(n - 3) * 2.5:,.0f} core-minutes)" in need_text(vals, paper, tol, 2.5)


def test_a_claim_undecided_at_its_last_look_reads_inconclusive_not_open():
    h = HEADLINES["zohfl"][0]
    capped = [(h.checks[0], "a", v("inconclusive", n=10, look=3, more=0))]
    line = claim_line("zohfl", h, {"zohfl": [section("z", capped)]})
    assert "**inconclusive**: inconclusive in 1 of 1 setting" in line
    early = [(h.checks[0], "a", v("inconclusive", n=3, look=1, more=3))]
    assert "**open**" in claim_line("zohfl", h, {"zohfl": [section("z", early)]})
