"""The paper's own code as a witness: the public FedNest code (``ucr-optml/FedNest``, ``main_hr.py``; the
code Xiao & Ji's FBO-AggITD experiments build on) run at Table 2's settings, its curves recorded as
run directories beside ours (``fbo witness fednest``, ``make witness-fednest FEDNEST=<checkout>``).

Nothing of that code is copied into fbo or edited. The checkout is copied to a temporary folder beside
a link to fbo's MNIST idx files (the code reads ``../data/mnist/``) and run by a small driver that, before
``runpy`` runs ``main_hr.py`` unchanged:

1. seeds Python's, NumPy's and torch's generators with the run's seed (the code itself seeds nothing:
   every run of it is a fresh random draw) and sets one torch thread, as fbo's runs use;
2. stubs two imports the code never uses (``cv2.log``, ``importlib_metadata.requires``);
3. serves each MNIST image's transformed tensor from a cache filled on first use by the dataset's own
   transform (``ToTensor`` then ``Normalize``, deterministic: the same tensors the code would make again
   on every access; the code's per-sample PIL transforms are most of its time);
4. skips the code's evaluation of the *training* set after each outer iteration (``test_img`` is called
   for the training set, then the test set; the first call of each pair returns NaN). That evaluation
   feeds nothing we compare and takes about half of the code's time per iteration; it draws no random
   numbers and changes no state (the model is in eval mode for both calls), so training is unchanged.

The run's ``metrics.csv`` holds, per outer iteration, the code's own communication-round counter
(``comm_round``: 2 for the SVRG lower phase, 1 + N + 1 + 1 for FedOut, 10 per iteration at N = 5, the
same count as fbo's FedNest ledger at Table 2's settings) and its test accuracy (a fraction here; the
code logs percent) and loss. ``summary.json`` is a completion record like a run's (``metrics_sha256``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from ..errors import UsageError

# reproduce/fig2.sh of the public code, FedNest (SVRG lower solver, global-batch HVPs); the inner (lower) step
# --lr is the run's: 0.01 in that script, 0.003 in Xiao & Ji's App. A.3
COMMON = ["--hlr", "0.01", "--local_bs", "64", "--round", "10000000", "--gpu", "-1"]
SCRIPT_INNER_LR = 0.01
DRIVER = '''
import os, random, runpy, sys
import numpy as np, torch
seed = int(os.environ["FBO_WITNESS_SEED"])
random.seed(seed); np.random.seed(seed); torch.manual_seed(seed); torch.set_num_threads(1)
import torchvision.datasets as tvd
_get = tvd.MNIST.__getitem__
def _cached(self, i):  # the dataset's own transform, applied once per image: the same tensors
    c = self.__dict__.get("_fbo_cache")
    if c is None:
        c = self._fbo_cache = [_get(self, j) for j in range(len(self))]
    return c[i]
tvd.MNIST.__getitem__ = _cached
import core.test as ct
_test, _calls = ct.test_img, [0]
def test_img(net, data, args):
    _calls[0] += 1
    if _calls[0] % 2 == 1:  # main_hr.py evaluates the training set first, then the test set
        net.eval()
        return torch.tensor(float("nan")), float("nan")
    return _test(net, data, args)
ct.test_img = test_img
sys.argv = ["main_hr.py", *sys.argv[1:]]
runpy.run_path("main_hr.py", run_name="__main__")
'''


UNRECORDED = "unrecorded"  # the checkout has no commit git can name (a copy without .git, an empty repository)


def checkout_commit(checkout: Path) -> str:
    """The commit the public code's checkout is at (40 hex digits), or ``unrecorded`` where git cannot name
    one: never what ``rev-parse`` echoes on failure (in a repository without commits it prints ``HEAD``)."""
    try:
        r = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return UNRECORDED
    sha = r.stdout.strip()
    return sha if r.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", sha) else UNRECORDED


def run_public_fednest(checkout: Path, mnist_raw: Path, setting: str, seed: int, rounds: int, out: Path,
                       target: float = 0.90, echo=print, inner_lr: float = SCRIPT_INNER_LR) -> dict:
    """One run of the public code at ``setting`` (a key of
    :data:`fbo_cli.grids.spec_checks.WITNESS_SETTINGS`) until its round counter passes
    ``rounds``; writes ``out/{config.yaml, metrics.csv, summary.json}`` and returns the summary."""
    import pandas as pd

    from ..bench.reference import prepared
    from ..grids.spec_checks import WITNESS_SETTINGS
    from ..runs.rundir import atomic_write, file_sha256

    name, extra = WITNESS_SETTINGS[setting]
    iters = rounds // 10 + 1  # 10 rounds per outer iteration; the code also stops once past --round
    args = [*COMMON, "--lr", f"{inner_lr:g}", *extra, "--epochs", str(iters)]
    with tempfile.TemporaryDirectory(prefix="fbo-witness-") as tmp:
        cwd = prepared(checkout, mnist_raw, Path(tmp), DRIVER)
        log = Path(tmp) / "log.yaml"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "FBO_WITNESS_SEED": str(seed),
               "PYTHONPATH": str(Path(tmp) / "stubs")}
        t0 = time.time()
        with subprocess.Popen([sys.executable, "-u", "_fbo_driver.py", *args, "--output", str(log)], cwd=cwd,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            tail = []
            for line in proc.stdout:
                tail = (tail + [line])[-20:]
                if "Comm round:" in line:
                    echo(f"{setting} seed {seed}: {line.strip()}")
        wall = time.time() - t0
        if proc.returncode or not log.is_file():
            raise UsageError(f"the public FedNest code in {checkout} failed (exit {proc.returncode}"
                             f"{'' if log.is_file() else ', no log written'}); its last lines:\n{''.join(tail)}",
                             kind="failed", path=checkout, value=proc.returncode)
        try:
            logs = yaml.safe_load(log.read_text())
            df = pd.DataFrame({"iterations": range(1, len(logs["round"]) + 1), "rounds": logs["round"],
                               "test_acc": [a / 100 for a in logs["test_acc"]], "test_loss": logs["test_loss"]})
        except (yaml.YAMLError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
            raise UsageError(f"the public FedNest code in {checkout} wrote a log fbo cannot read (round, test_acc "
                             f"and test_loss per iteration): {type(e).__name__}: {e}", kind="failed", field="log",
                             path=checkout, value=type(e).__name__) from None
        if df.empty:
            raise UsageError(f"the public FedNest code in {checkout} logged no iteration", kind="failed", field="log",
                             path=checkout)
    df = df[df.rounds <= rounds] if (df.rounds <= rounds).any() else df
    hit = df[df.test_acc >= target]
    atomic_write(out / "metrics.csv", df.to_csv(index=False))
    commit = checkout_commit(checkout)
    config = {"code": "ucr-optml/FedNest main_hr.py (public code, unedited)", "commit": commit,
              "setting": name, "seed": seed, "rounds": rounds, "args": " ".join(args),
              "driver": "fbo_cli/witness.py: seeds random/numpy/torch, 1 thread, skips the training-set evaluation"}
    atomic_write(out / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    summary = {"status": "done", "setting": name, "seed": seed, "inner_lr": inner_lr, "commit": commit,
               "final": float(df.test_acc.iloc[-1]),
               "rounds": int(df.rounds.iloc[-1]), "iterations": int(df.iterations.iloc[-1]), "target": target,
               "rounds_to_target": int(hit.rounds.iloc[0]) if len(hit) else None,
               "iterations_to_target": int(hit.iterations.iloc[0]) if len(hit) else None,
               "wall_time_s": round(wall, 1), "metrics_sha256": file_sha256(out / "metrics.csv")}
    atomic_write(out / "summary.json", json.dumps(summary, indent=1))
    return summary


def run_name(setting: str, inner_lr: float, seed: int) -> str:
    """The run's folder under ``<root>/witness/`` (two levels down, so that nothing that walks fbo's own
    ``<task>/<algo>/<run>`` folders takes it for one of fbo's runs)."""
    return f"fednest-{setting}-inner{inner_lr:g}-s{seed}"


def witness_state(run_dir: Path) -> tuple[str, dict | None, str]:
    """``(state, summary, why)`` of one witness run: ``finished`` (its completion record holds), ``tampered`` (a
    summary whose ``metrics.csv`` is missing, a link, or fails its hash: named, never taken as finished nor
    dropped in silence) or ``missing``."""
    from ..runs.rundir import file_sha256

    s, m = Path(run_dir) / "summary.json", Path(run_dir) / "metrics.csv"
    if not s.is_file():
        return "missing", None, ""
    try:
        d = json.loads(s.read_text())
    except (OSError, ValueError):
        return "tampered", None, "summary.json is not valid JSON"
    if not isinstance(d, dict):
        return "tampered", None, "summary.json is not a record"
    if not m.is_file() or m.is_symlink():
        return "tampered", d, "metrics.csv is missing beside summary.json"
    if file_sha256(m) != d.get("metrics_sha256"):
        return "tampered", d, "metrics.csv does not match the hash in summary.json"
    return "finished", d, ""


def witness_runs(root: Path) -> "pd.DataFrame":  # noqa: F821
    """The witness runs under ``root/witness/fednest-*/`` whose completion record matches: one row each. Those
    whose record fails (:func:`witness_state`) are in ``attrs["tampered"]`` as ``(run directory, why)``."""
    import pandas as pd

    rows, tampered = [], []
    for s in sorted((Path(root) / "witness").glob("fednest-*/summary.json")):
        state, d, why = witness_state(s.parent)
        if state == "finished":
            rows.append({**d, "run_dir": str(s.parent)})
        else:
            tampered.append((str(s.parent), why))
    df = pd.DataFrame(rows)
    df.attrs["tampered"] = tampered
    return df


def tampered_note(runs: "pd.DataFrame") -> str:  # noqa: F821
    """A line naming the witness runs left out because their record fails ('' when none)."""
    bad = runs.attrs.get("tampered") or []
    return ("" if not bad else f"Left out, tampered or damaged: {len(bad)} witness run(s): "
            + "; ".join(f"`{d}` ({why})" for d, why in bad) + ".")
