"""Issue 55: the remaining bad inputs are exit 2 with a message, and the smaller items."""

import pytest
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.config import coerce, load_yaml

runner = CliRunner()


@pytest.mark.parametrize("word", ["no", "on", "off", "yes", "n"])
def test_yaml_1_1_boolean_words_are_folder_names(tmp_path, monkeypatch, word):
    assert load_yaml(f"out_dir: {word}\nx: true\ny: False\n", "t") == {"out_dir": word, "x": True, "y": False}
    assert coerce("download", word, bool) is (word in ("on", "yes"))  # a bool key still reads them
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--out-dir", word,
                            "--data-dir", word, "--dry-run"])
    assert r.exit_code == 0 and f"run directory {word}/hyperrep" in r.output, r.output


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8))


@pytest.mark.parametrize("text, says", [(BOMB, "alias bomb"), ("[" * 20000 + "]" * 20000, "levels deep"),
                                        ("\x00\x01 {{ :", "not"), ("cases: 5\n", "'cases' must be a list"),
                                        ("- 1\n", "must hold a mapping"),
                                        ("cases: [{name: a}]\nreference: b\n", "'reference' must name")])
def test_bench_cases_that_are_not_a_cases_file_are_exit_2(tmp_path, text, says):
    f = tmp_path / "cases.yaml"
    f.write_text(text)
    r = runner.invoke(app, ["bench", "--cases", str(f)])
    assert r.exit_code == 2 and says in " ".join(r.output.split()) and "Traceback" not in r.output, r.output


SPEC = ("name: s55\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: A, algo: aggitd}]\n"
        "base: {dataset: digits, clients: 4, rounds: 2}\n")


@pytest.mark.parametrize("added, says", [
    ("[{setting: default, algorithms: [A], seeds: [%s]}]" % ", ".join(map(str, range(1, 1_502))), "1,501 seeds"),
    ("[{setting: default, algorithms: [A], seeds: [1]}, {setting: default, algorithms: [A], seeds: [2]}]",
     "each setting once")])
def test_a_settled_yaml_cannot_carry_more_seeds_than_a_spec_may(tmp_path, added, says):
    import time

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    (tmp_path / "out" / "compare" / "s55").mkdir(parents=True)
    (tmp_path / "out" / "compare" / "s55" / "settled.yaml").write_text(f"cap: 10\nadded: {added}\n")
    t = time.monotonic()
    r = runner.invoke(app, ["compare", str(spec), "--dry-run", "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 2 and says in " ".join(r.output.split()), r.output
    assert time.monotonic() - t < 10
