"""``fbo cost --until-settled``: per spec, the price of its next look and of every open claim to the cap."""

from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.grids import settle

SPEC = "experiments/aggitd_table2_heldout.yaml"


def test_cost_until_settled_prices_the_next_look_and_the_cap_per_spec(monkeypatch):
    asked = []

    def dry(exp, spec, overrides, cap, jobs, dry_run=False, batch="auto"):
        asked.append((str(spec), cap, dry_run, str(overrides.get("out_dir"))))
        return settle.SecondLook(["open"], cost="until settled, the next look: 4 runs\nuntil settled, every open "
                                              "claim to the cap (8 seeds; at most): 9 runs")

    monkeypatch.setattr(settle, "second_look", dry)
    r = CliRunner().invoke(app, ["cost", "--until-settled", "--cap", "8", "--out-dir", "docs/results", SPEC])
    assert r.exit_code == 0, r.output
    assert asked == [(SPEC, 8, True, "docs/results")]  # a dry run: nothing written, nothing run
    lines = [ln for ln in r.output.splitlines() if ln.startswith("aggitd_table2_heldout:")]
    assert len(lines) == 2 and "the next look: 4 runs" in lines[0] and "to the cap (8 seeds" in lines[1]
