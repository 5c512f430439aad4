"""The batch bench's table: `--only` measures some cases again and keeps the other rows."""

from fbo_cli.bench.batch import CASES, _merged


def test_only_replaces_its_rows_and_keeps_the_rest(tmp_path):
    a, b, c = (case["name"] for case in CASES[:3])
    csv = tmp_path / "batch.csv"
    csv.write_text(f"case,ratio\n{c},1.5\n{a},2.0\n")
    rows = _merged(csv, [{"case": a, "ratio": 3.0, "seeds_bound": 1.8, "measured": "abc 2026-11-28"}])
    assert [r["case"] for r in rows] == [a, c]  # the cases' order
    assert rows[0]["ratio"] == 3.0 and rows[0]["seeds_bound"] == 1.8 and rows[1]["ratio"] == "1.5"
    assert _merged(tmp_path / "none.csv", [{"case": b}]) == [{"case": b}]
