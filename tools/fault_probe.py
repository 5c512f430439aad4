"""The fault probe (`make probe`): the bad inputs, planted files and kills of the safety issue, tried
against the CLI, each judged clean or not. Clean means: the expected exit code (2 for bad input), no
traceback, a clear message, nothing written outside --out-dir, no empty run or compare folder and no
stray .lock left, for planted files the planted thing refused, and no file fbo did not make removed
(every file the probe plants as "the user's" is checked at the end). Prints one line per input and
the count.

Not part of the test suite (the same cases live there as regressions, in tests/cli/test_faults.py,
tests/cli/test_bad_input.py, tests/cli/test_writes_only_regular_files.py and tests/grids/test_ray_cluster.py);
this is the probe's own count, rerun at will (`make probe`; issue 62's cases are in tools/probe_62.py):

    .venv/bin/python tools/fault_probe.py
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
from types import SimpleNamespace

from typer.testing import CliRunner

from fbo_cli.cli import app

ROOT = Path(tempfile.mkdtemp(prefix="fbo-probe-"))
FBO = [sys.executable, "-m", "fbo_cli.cli"]
BASE = "{dataset: digits, clients: 4, participation: 0.5, rounds: 5, threads: 1}"
results: list[tuple[str, bool, str]] = []
made = iter(range(10**6))
KEPT: dict[Path, bytes] = {}  # files of the user's that must never be removed or changed


def keep(path: Path, text: str = "mine") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    KEPT[path] = text.encode()
    return path


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
    if why:  # what it said, to tell fbo's fault from the probe's (another check answering first)
        why.append(f"said: {text[-240:]!r}")
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
    from fbo_cli.runs.rundir import run_status

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
    from fbo_cli.grids.executors import RAY_HINT

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
    (kd / ".metrics.csv.abc123_x.fbo-tmp").write_text("half")
    r = CliRunner().invoke(app, ["clean", "--out-dir", str(o / "kill"), "--yes"])
    check("temp file of a SIGKILLed run removed by fbo clean --yes",
          r.exit_code == 0 and not (kd / ".metrics.csv.abc123_x.fbo-tmp").exists(), r.output[-200:])
    removal(o)
    ray_probe(env)
    more_inputs(o, env)
    issue55(o, env)
    from probe_62 import issue62  # tools/, beside this file

    issue62(o, env, SimpleNamespace(case=case, check=check, spec=spec, keep=keep, root=ROOT, fbo=FBO))
    for f, text in KEPT.items():
        check(f"the user's file {f.relative_to(ROOT)} stays", f.is_file() and f.read_bytes() == text,
              "removed or changed")

    width = max(len(w) for w, _, _ in results)
    for what, ok, why in results:
        print(f"{'clean' if ok else 'PROBLEM':8} {what:{width}}  {why}")
    bad = sum(not ok for _, ok, _ in results)
    print(f"\n{len(results)} inputs tried, {len(results) - bad} handled cleanly, {bad} problem(s) left")
    shutil.rmtree(ROOT, ignore_errors=True)
    return 1 if bad else 0


def removal(o: Path) -> None:
    """Issue 41, data loss 1, 3, 5: fbo removes only what it made, never through a link."""
    h = ROOT / "h"
    keep(h / ".bashrc", "x")
    (h / ".lock").write_text("")
    keep(h / ".metrics.csv.abcdefgh", "looks like a temp file")
    case("fbo clean --out-dir h (a folder fbo did not make)", ["clean", "--out-dir", str(h), "--yes"],
         says="not a results root fbo made")
    check("h/.lock and h's files stay", (h / ".lock").exists(), "removed")
    root = o / "kill"  # made by fbo run: marked
    keep(root / ".gitignore", "*")
    keep(root / "notes" / ".hidden")
    (root / "hyperrep" / "elsewhere").symlink_to(h)  # a link to a folder full of the user's files
    run = next(root.glob("hyperrep/aggitd/*"))
    (run / ".config.yaml.k9x2m4q7.fbo-tmp").write_text("half")  # a killed atomic write's temporary file
    r = CliRunner().invoke(app, ["clean", "--out-dir", str(root)])
    check("fbo clean without --yes lists only", r.exit_code == 0 and "--yes" in r.output
          and (run / ".config.yaml.k9x2m4q7.fbo-tmp").exists(), r.output[-200:])
    r = CliRunner().invoke(app, ["clean", "--out-dir", str(root), "--yes"])
    check("fbo clean --yes in a root fbo made: its temporary file goes; dotfiles, the user's folders and links stay",
          r.exit_code == 0 and (root / "hyperrep" / "elsewhere").is_symlink()
          and not (run / ".config.yaml.k9x2m4q7.fbo-tmp").exists(), r.output[-200:])
    from fbo_cli.runs.rundir import remove_temp_files

    (ROOT / "linked-run").symlink_to(h)
    remove_temp_files(ROOT / "linked-run")  # a run directory that is a link: its target's files stay
    # report --collect: never removes anything under --from, copies only what its completion record vouches for
    spec_p = ROOT / "collect.yaml"
    spec_p.write_text("name: coll\ntask: hyperrep\nseeds: [0, 1]\nalgorithms: [{name: A, algo: aggitd}]\n"
                      f"base: {BASE}\n")
    src, ev = o / "csrc", ROOT / "MY_RUNS"
    CliRunner().invoke(app, ["compare", str(spec_p), "--out-dir", str(src)])
    CliRunner().invoke(app, ["compare", str(spec_p), "--out-dir", str(ev)])  # the user's own runs
    mine = sorted(ev.glob("hyperrep/aggitd/*/metrics.csv"))
    for m in mine:
        KEPT[m] = m.read_bytes()
    from fbo_cli.evidence.report import Paper, collect_evidence, prune_evidence

    runs = sorted(src.glob("hyperrep/aggitd/*"))
    runs[0].joinpath("metrics.csv").write_text(runs[0].joinpath("metrics.csv").read_text() + "9,9,9\n")  # no match
    runs[1].joinpath("metrics.csv").unlink()
    runs[1].joinpath("metrics.csv").symlink_to("/etc/hostname")
    refused: list = []
    reg = (Paper("c", "C", "", given=(str(spec_p),)),)
    n = collect_evidence(src, ev, papers=reg, refused=refused)
    check("--collect: a metrics.csv that fails its hash, and one linked to /etc/hostname, are refused",
          n == 0 and len(refused) == 2 and all(m.read_bytes() == KEPT[m] for m in mine), f"copied {n}: {refused}")
    stale = ev / "hyperrep" / "aggitd" / "not-in-any-spec"
    keep(stale / "config.yaml", "task: hyperrep\n")
    gone = prune_evidence(ev, papers=reg)  # lists; removes nothing
    check("--collect's pruning lists, removes nothing, and never a folder without a completion record",
          stale.exists() and stale not in gone, f"{gone}")
    r = CliRunner().invoke(app, ["report", "--collect", str(src), "--from", str(ev), "--md", str(ROOT / "c.md"),
                                 "--html", str(ROOT / "c.html")])
    check("fbo report --collect X --from MY_RUNS removes nothing under MY_RUNS",
          all(m.is_file() for m in mine) and stale.exists(), r.output[-300:])


def ray_probe(env: dict) -> None:
    """Issue 41, data loss 2: a `ray start --head` cluster is never listed or reaped; the agents of a
    killed fbo driver are."""
    try:
        import ray  # noqa: F401
    except ImportError:
        check("Ray (not installed)", True)
        return
    import socket

    from fbo_cli.grids.executors import orphaned_ray, reap_orphaned_ray

    ray_bin = Path(sys.executable).parent / "ray"
    tmp = Path(tempfile.mkdtemp(prefix="fbo-rp-"))  # this cluster's own folder: it is stopped by its pids alone
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    up = subprocess.run([str(ray_bin), "start", "--head", "--port", str(port), "--num-cpus", "1",
                         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"],
                        capture_output=True, env=env, timeout=120).returncode == 0
    time.sleep(2)
    cluster = own_ray(tmp, port)  # its processes, all still running at the end
    try:
        r = CliRunner().invoke(app, ["clean", "--out-dir", str(ROOT / "out" / "kill"), "--dry-run"])
        check("`ray start --head`, then fbo clean --dry-run lists none of its processes",
              up and "would stop" not in r.output and "0 orphaned Ray" in r.output, f"up {up}: {r.output[-300:]}")
        d = subprocess.Popen([sys.executable, "-c", "import ray, time; "
                              "from fbo_cli.grids.executors import mark_session; "
                              "ray.init(address='local', num_cpus=1, include_dashboard=False); mark_session(ray); "
                              "print('up', flush=True); time.sleep(600)"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        d.stdout.readline()
        time.sleep(2)
        d.kill()
        d.wait()
        deadline = time.time() + 30
        while not orphaned_ray() and time.time() < deadline:
            time.sleep(1)
        found = reap_orphaned_ray()
        time.sleep(1)
        alive = bool(cluster) and all(Path(f"/proc/{pid}").exists() for pid in cluster)
        check("Ray agents of a kill -9'd fbo driver reaped, the `ray start` cluster left running",
              bool(found) and not orphaned_ray() and alive, f"found {found}, cluster up {alive}")
    finally:
        stop_own_ray(tmp, port)


def own_ray(tmp: Path, port: int) -> list[int]:
    """The processes of the cluster started with ``--temp-dir tmp --port port``: its folder or port in their
    command line, or a file open in its folder (agents rename themselves)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            cmd = (proc / "cmdline").read_bytes()
            if str(tmp).encode() in cmd or f":{port}".encode() in cmd or any(
                    os.readlink(fd).startswith(str(tmp)) for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def stop_own_ray(tmp: Path, port: int) -> None:
    """Stop that cluster by its pids (never `ray stop`, which stops every Ray of this user on the machine)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in own_ray(tmp, port):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        time.sleep(3)
    shutil.rmtree(tmp, ignore_errors=True)


def more_inputs(o: Path, env: dict) -> None:
    """Issue 41, items 4 and 6 to 12."""
    import errno

    import fbo_cli.files as res  # the one writer

    # 4. a full disk
    real = res._umask
    for cmd in ("compare", "tune"):
        calls = []

        def full(calls=calls):
            calls.append(1)
            if len(calls) > 4:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real()

        res._umask = full
        try:
            fs = spec("full" + cmd, extra="tune: {seeds: [100], rounds: 3}\n",
                      algos="[{name: A, algo: aggitd, tune: {outer_lr: [0.1]}}]")
            case(f"{cmd} on a full disk", [cmd, str(fs), "--out-dir", str(o / ("full" + cmd))], code=1,
                 says="No space left on device")
        finally:
            res._umask = real
    from fbo_cli.runs.config import resolve
    from fbo_cli.runs.rundir import CHECKPOINT
    from fbo_cli.runs.runner import execute

    cfg = resolve("hyperrep", "aggitd", {"dataset": "digits", "clients": 4, "threads": 1, "max_iters": 4,
                                         "rounds": 10**6, "checkpoint_every": 2, "out_dir": str(o / "ck")})
    import fbo_cli.runs.checkpoint as rn  # the checkpoint's writer

    real_w, n = rn.atomic_write, []

    def ck_full(path, data):
        if str(path).endswith(CHECKPOINT):
            n.append(1)
            if len(n) > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_w(path, data)

    rn.atomic_write = ck_full
    try:
        execute(cfg)
    except OSError:
        pass
    finally:
        rn.atomic_write = real_w
    check("a failed checkpoint write keeps the last good checkpoint", (cfg.run_dir / CHECKPOINT).is_file(), "removed")
    s = execute(cfg)
    check("... and the rerun resumes from it", s.get("resumed_from_iteration") == 2,
          f"{s.get('resumed_from_iteration')}")
    # 6. fbo check: finals from metrics.csv, unusable evidence named
    ev = o / "chk-ev"
    sp = spec("chk", extra="seeds: [0, 1]\n",
              base=BASE.replace("rounds: 5", f"rounds: 4, eval_every: 1, out_dir: {ev}"))
    CliRunner().invoke(app, ["compare", str(sp)])
    from fbo_cli.runs.rundir import file_sha256

    m = next(ev.glob("hyperrep/aggitd/*/metrics.csv"))
    lines = m.read_text().splitlines()
    head, last = lines[0].split(","), lines[-1].split(",")
    last[head.index("test_acc")] = "0.99"
    m.write_text("\n".join(lines[:-1] + [",".join(last)]) + "\n")
    sj = m.parent / "summary.json"
    import json

    sj.write_text(json.dumps({**json.loads(sj.read_text()), "metrics_sha256": file_sha256(m)}))
    case("fbo check: evidence whose last test_acc was edited (hash updated)",
         ["check", str(sp), "--from", str(ev), "--out", str(o / "chk"), "--all"], code=1, says="differs")
    with open(m, "a") as f:
        f.write("5,5,5\n")
    case("fbo check: an evidence run failing its hash is named",
         ["check", str(sp), "--from", str(ev), "--out", str(o / "chk2"), "--all"], code=1, says="could not be used")
    # 8-9. hangs and sizes: refused at once
    bomb = "&a0 [l, l, l, l, l, l, l, l, l]" + "".join(f", x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
                                                     for i in range(1, 9))
    deep = "[" * 20000 + "]" * 20000
    for where, text in [("description", f"description: {{x: {bomb}}}\n"),
                        ("base value", ""), ("setting name", "")]:
        if where == "base value":
            p = spec(base=BASE[:-1] + f", data_dir: {{x: {bomb}}}}}")
        elif where == "setting name":
            p = spec(extra=f"settings: [{{name: {{x: {bomb}}}, set: {{}}}}]\n")
        else:
            p = spec(extra=text)
        t = time.time()
        case(f"YAML alias bomb in a spec's {where}", ["compare", str(p), "--out-dir", str(o / "y"), "--dry-run"],
             says="alias bomb")
        check(f"... answered within 10 s ({where})", time.time() - t < 10, f"{time.time() - t:.0f} s")
    cfgf = ROOT / "bomb-config.yaml"
    cfgf.write_text(f"hidden: {{x: {bomb}}}\n")
    case("YAML alias bomb in a --config value", ["run", "--config", str(cfgf), "hyperrep", "--algo", "aggitd",
                                                 "--out-dir", str(o / "y")], says="alias bomb")
    (ROOT / "deep.yaml").write_text(f"name: deep\nx: {deep}\n")
    case("20,000-deep YAML", ["compare", str(ROOT / "deep.yaml"), "--out-dir", str(o / "y")], says="levels deep")
    cwd = os.getcwd()
    (ROOT / "lst" / "experiments").mkdir(parents=True)
    (ROOT / "lst" / "experiments" / "t.yaml").write_text(f"title: {{x: {bomb}}}\nalgorithms: []\n")
    os.chdir(ROOT / "lst")
    try:
        t = time.time()
        case("YAML alias bomb in a title under experiments/ (fbo list)", ["list"], code=0)
        check("... fbo list answered within 10 s", time.time() - t < 10, f"{time.time() - t:.0f} s")
    finally:
        os.chdir(cwd)
    grid = "{" + ", ".join(f"k{i}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" for i in range(6)) + "}"
    big = spec("big", extra="tune: {seeds: [100]}\n", algos=f"[{{name: A, algo: aggitd, tune: {grid}}}]")
    case("a tune grid of 10^6 points (--dry-run)", ["tune", str(big), "--dry-run", "--out-dir", str(o / "y")],
         says="1,000,000 points")
    case("a tune grid of 10^6 points (fbo cost)", ["cost", str(big), "--out-dir", str(o / "y")],
         says="1,000,000 points")
    (ROOT / "seeds.yaml").write_text("name: many\ntask: hyperrep\nalgorithms: [{name: A, algo: aggitd}]\n"
                                     f"base: {BASE}\nseeds: [" + ", ".join(map(str, range(200_000))) + "]\n")
    case("200,000 seeds (--dry-run)", ["compare", str(ROOT / "seeds.yaml"), "--dry-run", "--out-dir", str(o / "y")],
         says="bytes")
    for task, algo, kv, says in [("hyperrep", "aggitd", "lower_epochs=100000000", "'lower_epochs' must be <= 1000"),
                                 ("hyperrep", "fednest", "N=1000000000", "'N' must be <= 1000"),
                                 ("auc", "codasca", "I=1000000000", "'I' must be <= 100000"),
                                 ("hfl", "zohfl", "pretrain_steps=1000000000", "'pretrain_steps' must be <= 100000"),
                                 ("hyperrep", "aggitd", "threads=100000", "threads must be in [1, 1024]"),
                                 ("hyperrep", "aggitd", "hidden=1000000000000", "'hidden' must be <= 100000"),
                                 ("hfl", "zohfl", "num_dirs=1000000000", "'num_dirs' must be <= 1000"),
                                 ("hyperrep", "aggitd", "shards_per_client=1000000000", "shards_per_client must be in"),
                                 ("hyperrep", "adafbio", "K=1000000000", "'K' must be <= 1000"),
                                 ("hfl", "zohfl", "tau=1e300", "'tau' must be <= 10000"),
                                 ("hyperrep", "aggitd", "hidden=0", "'hidden' must be >= 1"),
                                 ("auc", "codasca", "channels=0", "'channels' must be >= 1"),
                                 ("auc", "codasca", "norm_groups=0", "'norm_groups' must be >= 1")]:
        case(f"{algo} {kv}", ["run", task, "--algo", algo, "--set", kv, "--rounds", "8", "--out-dir", str(o / "z")],
             says=says, out=o / "z")
    # Ctrl-C twice inside a long outer iteration
    k = subprocess.Popen([*FBO, "run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--set", "N=1000",
                          "--set", "lower_epochs=1000", "--out-dir", str(o / "cc"), "--quiet"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list((o / "cc").glob("hyperrep/aggitd/*/metrics.csv")):
        time.sleep(0.2)
    k.send_signal(signal.SIGINT)
    time.sleep(0.5)
    t = time.time()
    k.send_signal(signal.SIGINT)
    try:
        rc = k.wait(timeout=30)
    except subprocess.TimeoutExpired:
        k.kill()
        rc = None
    err_text = k.stderr.read()
    check("Ctrl-C twice stops a long outer iteration at once", rc == 130 and time.time() - t < 10
          and "Traceback" not in err_text, f"rc {rc} after {time.time() - t:.0f} s: {err_text[-200:]}")
    # 10. Rich markup in user text
    mk = spec("mk", algos='[{name: "A[/x] [tuned]", algo: aggitd}]', extra='settings: [{name: "p=[/b]", set: {}}]\n')
    case("display name A[/x], setting p=[/b], --out-dir [/x]", ["compare", str(mk), "--out-dir", str(o / "[/x]")],
         code=0, says="A[/x] [tuned]")
    # 11. exit 2 and a message
    for extra, says in [("seeds: [4294967296]", "[0, 2^32)"), ("tolerance: abc", "'tolerance' must be"),
                        ("band: [std]", "'band' must be"), ("tune: {score: 5, seeds: [100]}", "tune.score must be"),
                        ("tolerance: .nan", "'tolerance' must be"),
                        ("claims: [{text: t, metric: test_acc, better: A, than: A, margin: abc}]", "'margin' must be")]:
        case(f"spec {extra[:40]}", ["compare", str(spec(extra=extra + "\n")), "--out-dir", str(o / "e")], says=says,
             out=o / "e")
    case("spec algo: [aggitd]", ["compare", str(spec(algos="[{name: A, algo: [aggitd]}]")), "--out-dir", str(o / "e")],
         says="single name", out=o / "e")
    for addr in [":", "localhost"]:
        case(f"--address {addr}", ["compare", str(spec()), "--executor", "ray", "--address", addr, "--out-dir",
                                   str(o / "e")], says="--address must be HOST:PORT", out=o / "e")
    try:
        import ray  # noqa: F401

        r = subprocess.run([*FBO, "compare", str(spec()), "--executor", "ray", "--address", "auto", "--out-dir",
                            str(o / "e")], env=env, capture_output=True, text=True, timeout=300)
        text = " ".join((r.stdout + r.stderr).split())
        check("--address auto without a cluster", r.returncode == 2 and "Traceback" not in text
              and ("no Ray cluster runs on this node" in text or "Ray did not start" in text),
              f"rc {r.returncode}: {text[-200:]}")
        import socket
        import threading

        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)

        def answer():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                c.recv(100)
                c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                c.close()

        threading.Thread(target=answer, daemon=True).start()
        t = time.time()
        # its own --out-dir: in o/e, --address auto above left spec-N.yaml's folder for the name 'p', which
        # refuses this spec file (another file of that name) before Ray is reached
        case("--address at a port that answers but is not Ray", ["compare", str(spec()), "--executor", "ray",
             "--address", f"127.0.0.1:{srv.getsockname()[1]}", "--out-dir", str(o / "nr")], says="not a Ray cluster")
        check("... answered within 30 s", time.time() - t < 30, f"{time.time() - t:.0f} s")
        srv.close()
    except ImportError:
        pass
    fig = o / "fig"
    fig.mkdir()
    (fig / "runs.csv").write_text("a,b\n1,2\n")
    case("fbo figure codasca-imax on a foreign runs.csv", ["figure", "codasca-imax", str(fig)], says="not a runs table")
    run_args = ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "4", "--out-dir",
                str(o / "zb"), "--quiet"]
    CliRunner().invoke(app, run_args)
    zd = next((o / "zb").glob("hyperrep/aggitd/*"))
    (zd / "summary.json").unlink()
    (zd / "checkpoint.pt").write_bytes(b"")
    case("a 0-byte checkpoint.pt", run_args, code=0)
    case("... and the rerun after it", run_args, code=0)
    import fbo_cli.runs.loop as loop  # run.log's handler, a class of its own (patching logging's misses it)

    real_fh = loop.LogFile
    (zd / "summary.json").unlink()

    def denied(*a, **k):  # as a run directory we may not write to, which chmod cannot make for root
        raise PermissionError(errno.EACCES, "Permission denied")

    loop.LogFile = denied
    try:
        case("a rerun into an existing unwritable run directory", run_args, says="Permission denied")
    finally:
        loop.LogFile = real_fh
    # 12. smaller
    tq = spec("tq2", extra="tune: {seeds: [100]}\n", algos="[{name: A, algo: aggitd, tune: {outer_lr: [0.5, 5]}}]")
    (o / "tq" / "compare" / "tq2").mkdir(parents=True)
    (o / "tq" / "compare" / "tq2" / "tuned.yaml").write_text("grids: {A: {outer_lr: [0.01, 0.1]}}\n"
                                                            "chosen: {A: {default: {outer_lr: 10}}}\n")
    case("an edited spec and the old tuned.yaml", ["compare", str(tq), "--out-dir", str(o / "tq")],
         says="another tuning grid")
    case("fbo cost --jobs -3", ["cost", str(spec()), "--jobs", "-3"], says="--jobs must be >= 1")
    case("fbo reproduce --dry-run --jobs 100000000", ["reproduce", "--dry-run", "--jobs", "100000000"],
         says="at most 4096 processes")
    (ROOT / "mn" / "MNIST" / "raw").mkdir(parents=True)
    for nm in ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte"]:
        (ROOT / "mn" / "MNIST" / "raw" / nm).write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")
    case("an installed MNIST that fails its checksum", ["run", "hyperrep", "--algo", "aggitd", "--dataset", "mnist",
                                                        "--data-dir", str(ROOT / "mn"), "--out-dir", str(o / "mn")],
         says="does not match MNIST's SHA-256", out=o / "mn")
    lk = resolve("hyperrep", "aggitd", {"dataset": "digits", "clients": 4, "rounds": 2, "out_dir": str(o / "lk")})
    lk.run_dir.mkdir(parents=True)
    (lk.run_dir / ".lock").symlink_to(ROOT / "lock-target")
    r = CliRunner().invoke(app, ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--set", "clients=4",
                                 "--rounds", "2", "--out-dir", str(o / "lk")])
    check(".lock symlinked out: refused, its target not created",
          r.exit_code == 2 and not (ROOT / "lock-target").exists(), f"exit {r.exit_code}")
    tt = spec("term", base=BASE.replace("rounds: 5", "rounds: 400"), extra="tune: {seeds: [100, 101], rounds: 400}\n",
              algos="[{name: A, algo: aggitd, tune: {outer_lr: [0.01, 0.02, 0.03]}}]")
    k = subprocess.Popen([*FBO, "tune", str(tt), "--out-dir", str(o / "term")], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list((o / "term").glob("hyperrep/aggitd/*/summary.json")):
        time.sleep(0.1)
    k.send_signal(signal.SIGTERM)
    try:
        rc = k.wait(timeout=60)
    except subprocess.TimeoutExpired:
        k.kill()
        rc = None
    text = k.stdout.read()
    check("SIGTERM of fbo tune between runs: a message and exit 130", rc == 130 and "interrupted" in text
          and "Traceback" not in text, f"rc {rc}: {text[-200:]}")
    # 7. a SIGKILLed --jobs 2 worker
    pool = spec("pool", base=BASE.replace("rounds: 5", "rounds: 300"), extra="seeds: [0, 1, 2, 3]\n")
    k = subprocess.Popen([*FBO, "compare", str(pool), "--jobs", "2", "--out-dir", str(o / "pool")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 180
    victim = None
    while time.time() < deadline and victim is None and k.poll() is None:
        time.sleep(0.5)
        if list((o / "pool").glob("hyperrep/aggitd/*/metrics.csv")):
            kids = [int(c) for c in Path(f"/proc/{k.pid}/task/{k.pid}/children").read_text().split()]
            workers = [c for c in kids if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
            victim = workers[0] if workers else None
    if victim:
        os.kill(victim, signal.SIGKILL)
    try:
        rc = k.wait(timeout=300)
    except subprocess.TimeoutExpired:
        k.kill()
        rc = None
    text = k.stdout.read()
    check("a SIGKILLed --jobs 2 worker: the grid goes on, no traceback", victim is not None and rc in (0, 1)
          and "BrokenProcessPool" not in text and "worker process died" in text and "| A " in text,
          f"victim {victim}, rc {rc}: {text[-300:]}")


def issue55(o: Path, env: dict) -> None:
    """Issue 55: removal proves ownership per file, --prune refuses when it cannot tell, a user's file cannot
    take over fbo, and the remaining tracebacks."""
    import fbo_cli.algorithms.external as external
    from fbo_cli.evidence.report import Paper, prune_evidence
    from fbo_cli.runs.rundir import temp_folder

    # 1. --prune from a folder without experiments/ (nothing removed), and a cut past 20% without --yes
    ev = o / "ev55"
    CliRunner().invoke(app, ["compare", str(spec("ev55", extra="seeds: [0, 1, 2]\n")), "--out-dir", str(ev)])
    runs = sorted(ev.glob("hyperrep/aggitd/*/summary.json"))
    bare, here = ROOT / "bare", os.getcwd()
    bare.mkdir()
    os.chdir(bare)
    try:
        case("report --prune from a folder without experiments/", ["report", "--from", str(ev), "--prune", "--md",
             "x.md", "--html", "x.html"], says="cannot read the reproduction specs")
        case("reproduce --dry-run from a folder without experiments/", ["reproduce", "--dry-run"],
             says="no reproduction specs")
    finally:
        os.chdir(here)
    check("... removes nothing (3 runs stay)", len(runs) == 3 and all(p.is_file() for p in runs), f"{runs}")
    one = spec("ev55", extra="seeds: [0]\n")
    try:
        prune_evidence(ev, papers=(Paper("e", "E", "", given=(str(one),)),), remove=True)
        cut = "removed"
    except Exception as e:  # noqa: BLE001
        cut = str(e)
    check("--prune that would remove 2 of 3 runs without --yes: refused", "would remove 2 of the 3" in cut
          and all(p.is_file() for p in runs), cut)
    # 2. ownership per file: a planted marker in a home, a foreign folder of runs
    home = ROOT / "home55"
    looks = [".config/app/.lock", ".env.template", "proj/.vimrc.original", "notes/.draft.abcdefgh",
             "sub/only/.lock", "photos/.thumb.a1b2c3d4.png"]
    for f in looks:
        keep(home / f)
    (home / ".fbo-results").write_text("")
    case("fbo clean --yes in a home with a planted .fbo-results", ["clean", "--out-dir", str(home), "--yes"], code=0)
    other = ROOT / "other55"
    keep(other / "x" / "y" / "z" / "summary.json", "{}")
    case("fbo run into a folder of another tool's runs", ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits",
         "--rounds", "2", "--set", "clients=4", "--out-dir", str(other)], code=0)
    check("... does not mark it .fbo-results", not (other / ".fbo-results").exists(), "marked")
    dead = 2**22 + 1
    left = [Path(tempfile.gettempdir()) / f"fbo-report-{dead}-probe55a", Path(tempfile.gettempdir()) /
            f"fbo-mnist-{dead}-probe55b", o / "kill" / "report" / f".fbo-figures-{dead}-probe55c"]
    for d in left:  # as a killed command left them: fbo's token (its pid, a start time), then its files
        (d / "f").mkdir(parents=True, exist_ok=True)
        (d / ".fbo-scratch").write_text(f"fbo scratch folder\n{dead} 1\n")
        (d / "f" / "x").write_text("x")
    live = temp_folder("report")
    r = CliRunner().invoke(app, ["clean", "--out-dir", str(o / "kill"), "--yes"])
    r2 = CliRunner().invoke(app, ["clean", "--temp", "--yes"])
    check("fbo clean sweeps killed commands' scratch folders (fbo-report/-mnist/.fbo-figures), not a live one's",
          r.exit_code == r2.exit_code == 0 and not any(d.exists() for d in left) and live.is_dir(),
          (r.output + r2.output)[-200:])
    shutil.rmtree(live, ignore_errors=True)
    # 3. a user's file at import
    u = ROOT / "user55"
    (u / "algorithms").mkdir(parents=True)
    algo = "from fbo_cli.algorithms.fednest import FedNest\nclass Mine(FedNest):\n    name = 'mine55'\n"
    dry = ["run", "hyperrep", "--dataset", "digits", "--dry-run", "--algo"]
    for what, code, want, says in [("sys.exit(0)", "import sys\nsys.exit(0)\n", 2, "sys.exit(0)"),
                                   ("sys.exit(3)", "import sys\nsys.exit(3)\n", 2, "sys.exit(3)"),
                                   ("an argparse", "import argparse\nargparse.ArgumentParser().parse_args()\n", 0, ""),
                                   ("raise KeyboardInterrupt", "raise KeyboardInterrupt\n", 2, "KeyboardInterrupt")]:
        f = u / f"f{next(made)}.py"
        f.write_text(code + algo)
        case(f"a user file calling {what} at import", [*dry, f"{f}:Mine"], code=want, says=says)
    (u / "boom55.py").write_text("raise RuntimeError('boom55')\n")
    sys.path.insert(0, str(u))
    case("module:Class whose import raises", [*dry, "boom55:Mine"], says="RuntimeError: boom55")
    sys.path.remove(str(u))
    looping = ROOT / "looping55"
    (u / "loop.py").write_text(f"open({str(looping)!r}, 'w')\n"
                               "while True:\n    try:\n        pass\n    except BaseException:\n        pass\n")
    k = subprocess.Popen([*FBO, *dry, f"{u / 'loop.py'}:Mine"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not looping.exists():  # fbo's start-up, then the file's loop
        time.sleep(0.2)
    time.sleep(1)
    k.send_signal(signal.SIGINT)
    time.sleep(2)
    if k.poll() is None:
        k.send_signal(signal.SIGINT)
    try:
        rc = k.wait(timeout=30)
    except subprocess.TimeoutExpired:
        k.kill()
        rc = None
    check("SIGINT while a user file loops at import (swallowing KeyboardInterrupt): exit 130", rc == 130, f"rc {rc}")
    # 4. fbo list reads ./algorithms/ without running it
    ran = ROOT / "ran55"
    (u / "algorithms" / "a.py").write_text(f"open({str(ran)!r}, 'w')\n" + algo.replace("mine55", "Decay"))
    (u / "algorithms" / "b.py").write_text(algo.replace("mine55", "Decay"))
    (u / "algorithms" / "broken.py").write_text("def (\n")
    (u / "algorithms" / "loops.py").write_text("while True:\n    pass\n")
    real_eps = external.entry_points
    external.entry_points = lambda: {"ep55": "no_such_module_55:X"}
    os.chdir(u)
    try:
        case("fbo list with a broken, a looping and a two-of-one-name ./algorithms/ and a broken entry point",
             ["list"], code=0, says="broken.py")
        r = CliRunner().invoke(app, ["list"], env={"COLUMNS": "250"})
        check("... runs none of them, lists the entry point as broken", not ran.exists() and "ep55" in r.output
              and "broken: no module 'no_such_module_55'" in " ".join(r.output.split()), r.output[-300:])
        case("two classes named Decay in ./algorithms/", [*dry, "Decay"], says="two classes named 'Decay'")
    finally:
        os.chdir(here)
        external.entry_points = real_eps
    # 5. tracebacks and wrong exits
    keep(ROOT / "afile55")
    for args, says in [(["aggitd-fig2", "--out", str(ROOT / "afile55")], "regular file"),
                       (["aggitd-fig2", "--out", "/proc/x"], "cannot create directory"),
                       (["zohfl-fig1", "mnist", "--seed", "-1", "--out", str(o / "zf")], "--seed in"),
                       (["zohfl-fig1", "mnist", "--seed", str(10**20), "--out", str(o / "zf")], "--seed in")]:
        case(f"fbo figure {' '.join(args)[:50]}", ["figure", *args], says=says)
    co = ROOT / "FedNest55"
    (co / "core").mkdir(parents=True)
    (co / "core" / "test.py").write_text("def test_img(net, data, args):\n    return 0, 0\n")
    raw = ROOT / "raw55"
    keep(raw / "train-images-idx3-ubyte", "")
    wit = ["witness", "fednest", "--checkout", str(co), "--mnist-raw", str(raw), "--seeds", "0", "--settings",
           "iid-tau1", "--rounds", "10", "--out-dir"]
    (co / "main_hr.py").write_text("raise SystemExit(3)\n")
    case("fbo witness when the checkout's code fails", [*wit, str(o / "w55")], says="failed (exit 3")
    (co / "main_hr.py").write_text("import sys, yaml\nyaml.safe_dump({'round': [10]}, "
                                   "open(sys.argv[sys.argv.index('--output') + 1], 'w'))\n")
    case("fbo witness when the log has no test_acc", [*wit, str(o / "w55")], says="test_acc")
    case("fbo witness with an unwritable --out-dir", [*wit, "/proc/w55"], says="cannot create directory")
    deep = ROOT / "deep55.yaml"
    deep.write_text("[" * 20000 + "]" * 20000)
    bomb = ROOT / "bomb55.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(8)))
    notyaml, five = ROOT / "notyaml55.yaml", ROOT / "five55.yaml"
    notyaml.write_bytes(b"\x00\x01{{ :")
    five.write_text("cases: 5\n")
    for f, says in [(deep, "levels deep"), (bomb, "alias bomb"), (notyaml, "not"), (five, "'cases' must be a list")]:
        case(f"fbo bench --cases {f.name}", ["bench", "--cases", str(f)], says=says)
    long = str(ROOT / ("s" * 300) / "x.yaml")
    case("a spec path component over 255 bytes", ["compare", long], says="File name too long")
    # 6. smaller
    for word in ("no", "on", "off"):
        case(f"--out-dir {word} and --data-dir {word} (YAML 1.1 booleans)", ["run", "hyperrep", "--algo", "aggitd",
             "--dataset", "digits", "--out-dir", str(o / word), "--data-dir", word, "--dry-run"], code=0,
             says=f"{word}/hyperrep")
    sp = spec("set55")
    (o / "s55" / "compare" / "set55").mkdir(parents=True)
    (o / "s55" / "compare" / "set55" / "settled.yaml").write_text(
        "cap: 10\nadded: [{setting: default, algorithms: [A], seeds: [%s]}]\n" % ", ".join(map(str, range(1, 90001))))
    t = time.time()
    case("a settled.yaml with 90,000 seeds (compare --dry-run)", ["compare", str(sp), "--dry-run", "--out-dir",
         str(o / "s55")], says="90,000 seeds")
    check("... refused within 90 s", time.time() - t < 90, f"{time.time() - t:.0f} s")
    m = sorted(ev.glob("hyperrep/aggitd/*/metrics.csv"))[0]
    m.write_text(m.read_text().replace("0.", "0.9", 1))
    sp3 = spec("ev55", extra="seeds: [0, 1, 2]\n")
    r = CliRunner().invoke(app, ["report", "--from", str(ev), "--spec", str(sp3), "--md", str(ROOT / "t55.md"),
                                 "--html", str(ROOT / "t55.html")])
    md = (ROOT / "t55.md").read_text() if (ROOT / "t55.md").is_file() else ""
    check("fbo report names a run whose metrics.csv fails its hash as tampered", r.exit_code == 0
          and "tampered or damaged: metrics.csv does not match the hash" in md, r.output[-300:])


if __name__ == "__main__":
    sys.exit(main())
