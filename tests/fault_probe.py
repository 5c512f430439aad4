"""The fault probe (`make probe`): the bad inputs, planted files and kills of the safety issue, tried
against the CLI, each judged clean or not. Clean means: the expected exit code (2 for bad input), no
traceback, nothing written outside --out-dir, no empty run or compare folder and no stray .lock left,
and, for planted files, the planted thing refused. Prints one line per input and the count.

Not part of the test suite (the same cases live there as regressions, in tests/test_faults.py,
tests/test_bad_input.py and tests/test_ray_cluster.py); this is the probe's own count, rerun at will:

    .venv/bin/python tests/fault_probe.py
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

from fbo_cli.cli import app

ROOT = Path(tempfile.mkdtemp(prefix="fbo-probe-"))
FBO = [sys.executable, "-m", "fbo_cli.cli"]
BASE = "{dataset: digits, clients: 4, participation: 0.5, rounds: 5, threads: 1}"
results: list[tuple[str, bool, str]] = []
made = iter(range(10**6))


def spec(name="p", extra="", algos="[{name: A, algo: aggitd}]", base=BASE) -> Path:
    p = ROOT / f"spec-{next(made)}.yaml"
    p.write_text(f"name: {name}\ntask: hyperrep\nseeds: [0]\nalgorithms: {algos}\nbase: {base}\n{extra}")
    return p


def stray(out: Path) -> list[str]:
    """Empty folders (below the results root) and .lock files left under ``out``."""
    if not out.exists():
        return []
    bad = [str(p) for p in out.rglob(".lock")]
    bad += [str(d) for d in out.rglob("*") if d.is_dir() and not any(d.iterdir())]
    return bad


def case(what: str, args: list[str], code: int = 2, says: str = "", out: Path | None = None,
         outside: Path | None = None) -> None:
    r = CliRunner().invoke(app, args)
    text = " ".join((r.output or "").split())
    why = []
    if r.exit_code != code:
        why.append(f"exit {r.exit_code}, expected {code}")
    if "Traceback" in (r.output or "") or (r.exception and not isinstance(r.exception, SystemExit)):
        why.append(f"traceback ({type(r.exception).__name__})")
    if says and says not in text:
        why.append(f"does not say '{says}'")
    if outside is not None and outside.exists():
        why.append(f"wrote {outside}")
    if out is not None and (left := stray(out)):
        why.append(f"left {left[:2]}")
    results.append((what, not why, "; ".join(why)))


def check(what: str, ok: bool, why: str = "") -> None:
    results.append((what, ok, "" if ok else why))


def main() -> int:
    o = ROOT / "out"
    # 1. names are data, never paths
    for name in ["/tmp/fbo-probe-escape", "../../fbo-probe-up", "[a, b]", ".", "x" * 300, "a/b", "''"]:
        case(f"spec name {name[:20]!r}", ["compare", str(spec(name)), "--out-dir", str(o / "a")],
             says="'name' must be", outside=Path("/tmp/fbo-probe-escape"))
    case("--out-dir of 300 characters", ["compare", str(spec()), "--out-dir", str(ROOT / ("d" * 300))])
    # 2. checkpoints are data
    cfg_args = ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "6",
                "--out-dir", str(o / "r"), "--set", "clients=4", "--set", "participation=0.5", "--quiet"]
    r = CliRunner().invoke(app, cfg_args)
    run_dir = next((o / "r").glob("hyperrep/aggitd/*"))
    marker = ROOT / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for what, blob in [("planted pickle payload", pickle.dumps({"run_id": run_dir.name, "x": Payload()})),
                       ("checkpoint of the right run, keys missing", None),
                       ("checkpoint of random bytes", os.urandom(300))]:
        (run_dir / "summary.json").unlink(missing_ok=True)
        if blob is None:
            import torch

            torch.save({"run_id": run_dir.name, "rows": "not a list"}, run_dir / "checkpoint.pt")
        else:
            (run_dir / "checkpoint.pt").write_bytes(blob)
        r = CliRunner().invoke(app, cfg_args)
        ok = r.exit_code == 0 and not marker.exists() and (run_dir / "summary.json").is_file()
        check(what, ok, f"exit {r.exit_code}, payload ran: {marker.exists()}")
        r2 = CliRunner().invoke(app, cfg_args)  # and it is not stuck
        check(what + ", rerun", r2.exit_code == 0, f"exit {r2.exit_code}")
    # 3. a run directory proves it is itself
    other = run_dir.parent.parent / "fednest" / run_dir.name
    other.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run_dir, other)
    from fbo_cli.results import run_status

    check("copied run directory", run_status(other)[0] == "corrupt", "accepted as finished")
    shutil.rmtree(other)
    other.symlink_to(run_dir)
    check("linked run directory", run_status(other)[0] == "corrupt", "accepted as finished")
    other.unlink()
    # 4. two specs, one name
    grid = "tune: {seeds: [100], rounds: 5}\n"
    a, b = spec("tiny"), spec("tiny", algos="[{name: B, algo: fednest, tune: {outer_lr: [0.01, 0.1]}}]", extra=grid)
    CliRunner().invoke(app, ["compare", str(a), "--out-dir", str(o / "t")])
    case("second spec with a taken name (compare)", ["compare", str(b), "--out-dir", str(o / "t")],
         says="a different spec with the same name")
    case("second spec with a taken name (tune)", ["tune", str(b), "--out-dir", str(o / "t")],
         says="a different spec with the same name")
    # 6. Ray that cannot be served
    case("ray --gpus-per-run 1 without a GPU", ["compare", str(spec("g")), "--executor", "ray", "--gpus-per-run", "1",
                                                "--out-dir", str(o / "g")], says="GPU")
    t = time.time()
    case("ray --address 127.0.0.1:1", ["compare", str(spec("h")), "--executor", "ray", "--address", "127.0.0.1:1",
                                       "--out-dir", str(o / "h")], says="no Ray cluster answers")
    check("ray dead address within 30 s", time.time() - t < 30, f"{time.time() - t:.0f} s")
    # 7. bad values
    case("x_also given as a word", ["compare", str(spec(extra="x_also: iterations\n")), "--out-dir", str(o / "x")],
         says="'x_also' must be a list", out=o / "x")
    case("--seeds 99999999999999999999", ["compare", str(spec()), "--seeds", "99999999999999999999",
                                          "--out-dir", str(o / "s")], says="seeds must be", out=o / "s")
    for chosen in ["5", "{A: [1]}"]:
        p = spec("tq")
        (o / "q" / "compare" / "tq").mkdir(parents=True, exist_ok=True)
        (o / "q" / "compare" / "tq" / "tuned.yaml").write_text(f"chosen: {chosen}\n")
        case(f"tuned.yaml chosen: {chosen}", ["compare", str(p), "--out-dir", str(o / "q")], says="tuned.yaml")
    (ROOT / "idx" / "MNIST" / "raw").mkdir(parents=True)
    for n in ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]:
        (ROOT / "idx" / "MNIST" / "raw" / n).write_bytes(b"")
    case("empty idx file", ["run", "hyperrep", "--algo", "aggitd", "--dataset", "mnist",
                            "--data-dir", str(ROOT / "idx"), "--out-dir", str(o / "i")],
         says="train-images-idx3-ubyte", out=o / "i")
    # 8. a failing setting, first or last
    bad, good = '{name: "too many", set: {clients: 5000}}', "{name: ok, set: {}}"
    for order, sets in [("first", f"[{bad}, {good}]"), ("last", f"[{good}, {bad}]")]:
        case(f"failing setting {order}", ["compare", str(spec("f" + order, extra=f"settings: {sets}\n")),
                                          "--out-dir", str(o / ("f" + order))], says="setting 'too many'",
             out=o / ("f" + order))
    # 10. nothing half-written
    (ROOT / "nodata").mkdir()
    case("missing MNIST", ["run", "hyperrep", "--algo", "aggitd", "--dataset", "mnist", "--data-dir",
                           str(ROOT / "nodata"), "--out-dir", str(o / "m"), "--set", "download=false"],
         says="not found", out=o / "m")
    check("missing MNIST leaves no data folder", not any((ROOT / "nodata").iterdir()), "left a folder")
    case("unknown algorithm", ["compare", str(spec(algos="[{name: Z, algo: nope}]")), "--out-dir", str(o / "u")],
         out=o / "u")
    case("unknown base key", ["compare", str(spec(base="{dataset: digits, nope: 1}")), "--out-dir", str(o / "k")],
         out=o / "k")
    case("unknown dataset", ["run", "hyperrep", "--algo", "aggitd", "--dataset", "nope", "--out-dir", str(o / "d")],
         out=o / "d")
    # 11. smaller
    (ROOT / "empty").mkdir()
    case("report from an empty folder",
         ["report", "--from", str(ROOT / "empty"), "--md", str(ROOT / "r.md"), "--html", str(ROOT / "r.html")],
         says="no finished runs", outside=ROOT / "r.md")
    same = "settings: [{name: one, set: {tau: 1}}, {name: two, set: {tau: 1}}]\n"
    case("two settings with the same values", ["compare", str(spec("dup", extra=same)), "--out-dir", str(o / "dup")],
         says="are the same runs", out=o / "dup")
    from fbo_cli.executors import RAY_HINT

    check("the missing-Ray hint keeps [ray]", "[ray]" in RAY_HINT)
    # 9 and 5. kills: a killed run leaves temp files that the next start removes; a killed Ray driver's agents
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    k = subprocess.Popen([*FBO, "run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "100000",
                          "--out-dir", str(o / "kill"), "--quiet"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not list((o / "kill").glob("hyperrep/aggitd/*/metrics.csv")):
        time.sleep(0.2)
    k.send_signal(signal.SIGKILL)
    k.wait()
    kd = next((o / "kill").glob("hyperrep/aggitd/*"))
    (kd / ".metrics.csv.abc123").write_text("half")
    r = CliRunner().invoke(app, ["clean", "--out-dir", str(o / "kill")])
    check("temp file of a SIGKILLed run removed by fbo clean",
          r.exit_code == 0 and not (kd / ".metrics.csv.abc123").exists())
    try:
        import ray  # noqa: F401

        from fbo_cli.executors import orphaned_ray, reap_orphaned_ray

        d = subprocess.Popen([sys.executable, "-c", "import ray, time; ray.init(num_cpus=1, include_dashboard=False); "
                              "print('up', flush=True); time.sleep(600)"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        d.stdout.readline()
        time.sleep(2)
        d.kill()
        d.wait()
        deadline = time.time() + 30
        while not orphaned_ray() and time.time() < deadline:
            time.sleep(1)
        found = reap_orphaned_ray()
        time.sleep(1)
        check("Ray agents of a kill -9'd driver found and reaped", bool(found) and not orphaned_ray(),
              f"found {found}")
    except ImportError:
        check("Ray agents of a kill -9'd driver (Ray not installed)", True)

    width = max(len(w) for w, _, _ in results)
    for what, ok, why in results:
        print(f"{'clean' if ok else 'PROBLEM':8} {what:{width}}  {why}")
    bad = sum(not ok for _, ok, _ in results)
    print(f"\n{len(results)} inputs tried, {len(results) - bad} handled cleanly, {bad} problem(s) left")
    shutil.rmtree(ROOT, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
