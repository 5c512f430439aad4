"""``fbo_cli.bench.ab``: ``fbo bench --against``, before and after in alternating fresh processes."""

import pytest


def test_bench_against_alternates_two_code_trees_and_keeps_each_sides_fastest(tmp_path):
    """``fbo bench --against``: each round runs one bench package on the before tree's code and on the after
    tree's, each in a fresh process that imports that tree's ``fbo_cli`` (not the one in the working
    directory) and loads the package as its ``fbo_cli.bench`` (relative imports reach that tree's modules),
    the order swapped every round; each case keeps its side's fastest round, the spread is the slowest round
    over the fastest, and a case timed on one side only is named, not compared."""
    from rich.console import Console

    from fbo_cli.bench.ab import ab_bench

    def tree(name, secs):
        pkg = tmp_path / name / "fbo_cli"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"SECS = {secs!r}\n")
        (pkg / "results.py").write_text("")
        return tmp_path / name

    bench = tmp_path / "fake_bench"  # the instrument, the same package on both sides
    bench.mkdir()
    (bench / "timing.py").write_text("from .. import SECS\n")  # the tree's fbo_cli, through the package
    (bench / "__init__.py").write_text(
        "import pathlib\n"
        "from dataclasses import dataclass\n"
        "from .timing import SECS\n"
        "@dataclass\n"
        "class BenchOptions:\n"
        "    only: str\n"
        "    out: str\n"
        "    threads: int\n"
        "def main(o):\n"
        "    out = pathlib.Path(o.out)\n"
        "    r = int(out.name[-1])\n"
        "    out.mkdir(parents=True)\n"
        "    rows = ''.join(f'{c},{s * (1 + 0.5 * r)},{1 / s},100\\n' for c, s in zip(o.only.split(','), SECS))\n"
        "    (out / 'bench.csv').write_text('case,s_per_iteration,gflops,sgemm_gflops\\n' + rows)\n")
    before, after = tree("old", [0.3, 0.2, 0.5]), tree("new", [0.1, 0.2])  # "c" fails on the after tree
    ab = ab_bench(str(before), ["a", "b", "c"], 2, 1, tmp_path / "out", Console(quiet=True), after=after,
                  bench_dir=bench)
    assert list(ab.case) == ["a", "b"]
    assert ab.speedup.tolist() == pytest.approx([3.0, 1.0]) and ab.before_s.tolist() == pytest.approx([0.3, 0.2])
    assert ab.after_spread.tolist() == pytest.approx([1.5, 1.5])
    md = (tmp_path / "out" / "ab.md").read_text()
    assert f"{before} (before)" in md and "| a | 0.3000 | 0.1000 | 3.00x |" in md
    assert "Not compared: c (timed on one side only)." in md
