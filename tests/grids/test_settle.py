"""Seeds until settled: `fbo compare --until-settled` follows the sequential design: it adds the next look's
seeds to the open claims' settings, runs them and looks again, up to the cap, writes settled.yaml, and the
spec's cells include them from then on."""

import yaml
from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.grids.spec import load_spec

runner = CliRunner()


def write_spec(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(f"""
name: s
task: hyperrep
seeds: [0, 1]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 30, threads: 1, out_dir: {tmp_path}}}
algorithms:
  - {{name: AggITD, algo: aggitd}}
  - {{name: FedNest, algo: fednest}}
  - {{name: Other, algo: aggitd, set: {{outer_lr: 0.02}}}}
settings: [{{name: iid, set: {{partition: iid}}}}, {{name: shards, set: {{partition: shards}}}}]
claims:
  - {{text: "AggITD beats FedNest", metric: final, better: AggITD, than: FedNest, mode: max, margin: 0.08,
      settings: [iid]}}
""")
    return p


def test_until_settled_adds_seeds_to_the_inconclusive_claims_settings_only(tmp_path):
    p = write_spec(tmp_path)
    r = runner.invoke(app, ["compare", str(p), "--until-settled", "--cap", "4", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "every claim is decided, or at the cap, or not yet run" in " ".join(r.output.split())  # nothing run yet
    r = runner.invoke(app, ["compare", str(p), "--until-settled", "--cap", "4"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "adds seeds 2-2 to iid: AggITD, FedNest" in text  # 2 seeds: before the first look (3)
    assert "adds seeds 2-3 to iid: AggITD, FedNest" in text  # open at look 1: up to the second and last look (4)
    settled = yaml.safe_load((tmp_path / "compare" / "s" / "settled.yaml").read_text())
    assert settled["looks"] == [3, 4] and abs(sum(settled["alpha"]) - 0.05) < 1e-5 and settled["added"] == [
        {"setting": "iid", "algorithms": ["AggITD", "FedNest"], "seeds": [2, 3]}]
    exp = load_spec(p)  # the added cells are part of the experiment now: 2 x 3 x 2 + 2 x 2
    assert len(exp.cells) == 16 and {(c.algorithm, c.seed) for c in exp.cells if c.seed > 1} == {
        ("AggITD", 2), ("AggITD", 3), ("FedNest", 2), ("FedNest", 3)}
    assert all(c.cfg.run_dir.joinpath("summary.json").is_file() for c in exp.cells)  # and they ran
    assert len(load_spec(p, seeds=[0]).cells) == 6  # --seeds replaces them
    r = runner.invoke(app, ["compare", str(p), "--until-settled", "--cap", "4"])  # at the cap: no further look
    assert r.exit_code == 0 and "no seeds to add" in " ".join(r.output.split())
    r = runner.invoke(app, ["compare", str(p), "--until-settled", "--seeds", "0"])
    assert fails_with(r, "bad_value", field="--until-settled"), r.output


def test_looks_takes_one_look_at_a_time(tmp_path):
    p = write_spec(tmp_path)
    r = runner.invoke(app, ["compare", str(p), "--until-settled", "--cap", "4", "--looks", "1"])
    assert r.exit_code == 0, r.output
    settled = yaml.safe_load((tmp_path / "compare" / "s" / "settled.yaml").read_text())
    assert settled["added"] == [{"setting": "iid", "algorithms": ["AggITD", "FedNest"], "seeds": [2]}]


def test_a_claim_on_a_quantity_read_across_settings_gets_seeds_in_every_setting_it_reads():
    """CODASCA's I_max at K = 4 is read across every window I of K = 4: its next look adds seeds to all of them."""
    from types import SimpleNamespace

    import pandas as pd

    from fbo_cli.grids.settle import plan
    from fbo_cli.grids.spec_types import Claim, SettingEntry

    windows = (1, 8, 32)
    settings = [SettingEntry(f"K=4, I={i}", {"clients": 4, "I": i}) for i in windows]
    auc = {"A": (0.9, 0.85, 0.8), "B": (0.9, 0.9, 0.85)}  # I_max 1 against 8 on every seed
    runs = pd.DataFrame([{"algorithm": a, "setting": f"K=4, I={i}", "seed": k, "status": "done", "final": f}
                         for a in auc for i, f in zip(windows, auc[a]) for k in range(3)])
    exp = SimpleNamespace(settings=settings, seeds=[0, 1, 2], settled=None, derived=["imax"],
                          algorithms=[SimpleNamespace(name="A"), SimpleNamespace(name="B")],
                          claims=[Claim(text="B tolerates a larger window", metric="I_max", better="B", than="A")])
    added, why = plan(exp, runs)
    assert added == [{"setting": s.name, "algorithms": ["A", "B"], "seeds": [3, 4, 5]} for s in settings]
    assert len(why) == 1 and why[0].startswith("B tolerates a larger window (K=4")
