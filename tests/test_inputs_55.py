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
