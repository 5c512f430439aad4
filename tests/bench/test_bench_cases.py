"""``fbo_cli.bench.cases`` and ``BenchOptions``: every case in one file, the options checked once, no
second command line."""

from pathlib import Path

import pytest

from fbo_cli.bench import BenchOptions
from fbo_cli.bench.cases import load_cases
from fbo_cli.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def test_every_case_lives_in_bench_yaml():
    book = load_cases(ROOT / "experiments" / "bench.yaml")
    names = [c["name"] for c in book.cases]
    assert len(names) == len(set(names))
    quick = [c["name"] for c in book.cases if c.get("quick")]
    assert quick == ["fednest-mlp-fmnist-m100-C0.1", "fednest-mlp-fmnist-m100-C1.0", "aggitd-mlp-fmnist-m100-C0.1",
                     "aggitd-mlp-fmnist-m100-C1.0"]
    assert book.reference["name"] == "fednest-mlp-fmnist-m100-C0.1"
    assert set(book.profile) <= set(names)  # every profiled case exists
    assert all(any(k in n for n in names) for k in book.ab)  # every A/B substring picks a case
    assert [g["M"] for g in book.growth if g["sweep"] == "participating"] == [10, 20, 50, 100]
    assert all(g["set"]["participation"] * g["set"]["clients"] == pytest.approx(g["M"]) for g in book.growth)


def test_bench_options_are_checked_when_made_and_no_module_parses_argv():
    with pytest.raises(UsageError, match="--device must be cpu or cuda"):
        BenchOptions(device="tpu", cases=str(ROOT / "experiments" / "bench.yaml"))
    with pytest.raises(UsageError, match="--rounds must be >= 1"):
        BenchOptions(rounds=0, cases=str(ROOT / "experiments" / "bench.yaml"))
    with pytest.raises(UsageError, match="--cases: no file"):
        BenchOptions(cases="no/such.yaml")
    assert not [str(f) for f in (ROOT / "fbo_cli").rglob("*.py") if "argparse" in f.read_text()]
