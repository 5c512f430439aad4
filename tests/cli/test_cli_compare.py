"""``fbo compare``: a grid run, its table beside the paper's numbers, finished runs reused."""

import pandas as pd
import pytest
from cli_helpers import fails_with, invoke, run


def test_compare_runs_then_reuses(tmp_path):
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""
name: tiny
task: hyperrep
target: 0.5
seeds: [0, 1]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 20, out_dir: {tmp_path}}}
algorithms: [{{name: A, algo: aggitd}}, {{name: F, algo: fednest}}]
settings: [{{name: iid, set: {{partition: iid}}}}]
reference: {{A: {{iid: {{final: 0.9}}}}}}
""")
    r = run("compare", str(spec))
    assert r.exit_code == 0, r.output
    out = tmp_path / "compare" / "tiny"
    for f in ("table.md", "table.csv", "runs.csv", "curves.png"):
        assert (out / f).is_file()
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and set(runs.algorithm) == {"A", "F"}
    table = pd.read_csv(out / "table.csv")
    assert "paper final" in table and table.loc[table.algorithm == "A", "paper final"].iloc[0] == 0.9
    a = table[table.algorithm == "A"].iloc[0]  # numbers, one unit (fractions, as in metrics.csv)
    assert a["final n"] == 2 and 0 <= a["final"] <= 1 and a["final std"] >= 0
    assert a["final"] == pytest.approx(runs[runs.algorithm == "A"].final.mean())
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.glob("hyperrep/*/*/summary.json")}
    r = run("compare", str(spec))
    assert r.exit_code == 0
    assert mtimes == {p: p.stat().st_mtime_ns for p in tmp_path.glob("hyperrep/*/*/summary.json")}


def test_compare_prints_unbroken_markdown(tmp_path):
    spec = tmp_path / "exp.yaml"
    long = "AggITD with a deliberately long display name that makes the table wider than 80 columns"
    spec.write_text(f"""
name: wide
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {tmp_path}}}
algorithms: [{{name: "{long}", algo: aggitd}}]
""")
    r = invoke(["compare", str(spec)])
    assert r.exit_code == 0, r.output
    table = (tmp_path / "compare" / "wide" / "table.md").read_text().splitlines()
    assert any(len(line) > 80 for line in table)
    printed = r.stdout.splitlines()
    table_lines = [line for line in table if line.startswith("|")]
    assert table_lines and all(line in printed for line in table_lines)
    start = printed.index(table_lines[0])
    block = printed[start:start + len(table_lines)]
    assert all(line.startswith("|") for line in block)


def test_plot_bands_are_chosen_and_checked(tmp_path):
    for band, code in (("ci95", 0), ("bogus", 2)):
        spec = tmp_path / f"{band}.yaml"
        spec.write_text(f"name: b{band}\ntask: hyperrep\nseeds: [0, 1]\nband: {band}\n"
                        f"base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, out_dir: {tmp_path}}}\n"
                        f"algorithms: [{{name: A, algo: aggitd}}]\n")
        r = invoke(["compare", str(spec)])
        assert r.exit_code == code, r.output
    assert (tmp_path / "compare" / "bci95" / "curves.png").stat().st_size > 1000
    assert fails_with(r, "bad_spec", field="band", value="bogus"), r.output
