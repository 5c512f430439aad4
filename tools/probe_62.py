"""Issue 62's cases of the fault probe (``make probe``, :mod:`fault_probe` calls :func:`issue62`): never write over
what is not a regular file (1), remove only what carries fbo's token (2), a tuning applies only to its own
procedure and a results folder is one spec file's (5), tampering is named (6), tracebacks and runaway inputs
(7), and issue 61's item 7 (the first Ctrl-C or SIGTERM cancels the queue). ``p`` holds the probe's helpers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

from fbo_cli.cli import app

QUICK = "experiments/quick_mnist5k.yaml"


def issue62(o: Path, env: dict, p) -> None:
    root = p.root / "i62"
    root.mkdir()
    writer(root, p)
    scratch(root, p)
    tuning(root, p)
    tampering(root, p)
    runaway(root, p)
    signals(root, env, p)


def writer(root: Path, p) -> None:
    """1. one writer: never over a device (a FIFO stands in), a link, a folder or a kernel file."""
    dev = root / "dev"
    dev.mkdir()
    os.mkfifo(dev / "null")
    os.mkfifo(dev / "full")
    (root / "from").mkdir()
    mine = p.keep(root / "precious.txt")
    (root / "link.md").symlink_to(mine)
    rep = ["report", "--spec", QUICK, "--from", str(root / "from")]
    p.case("report --md FIFO (as /dev/null)", [*rep, "--md", str(dev / "null"), "--html", str(root / "r.html")],
           says="FIFO")
    p.case("report --html FIFO (as /dev/full)", [*rep, "--html", str(dev / "full"), "--md", str(root / "r.md")],
           says="FIFO")
    p.check("... both stay FIFOs, nothing written beside them", all(stat.S_ISFIFO(os.lstat(dev / n).st_mode)
            for n in ("null", "full")) and sorted(os.listdir(dev)) == ["full", "null"]
            and not (root / "r.md").exists(), f"{os.listdir(dev)}")
    p.case("report --md a symbolic link to the user's file", [*rep, "--md", str(root / "link.md")],
           says="symbolic link")
    p.case("report --md ''", [*rep, "--md", ""], says="cannot write")
    p.case("report --md a folder", [*rep, "--md", str(root)], says="folder")
    p.case("report --html /proc/1/mem", [*rep, "--html", "/proc/1/mem"], says="kernel")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fbo_cli.errors import UsageError
    from fbo_cli.runs.rundir import save_figure

    (root / "fig.png").symlink_to(mine)
    try:
        save_figure(plt.figure(), root / "fig.png")
        why = "written through the link"
    except UsageError as e:
        why = str(e)
    p.check("a matplotlib figure onto a link is refused by the same check", "symbolic link" in why, why)


def _scratch(parent: Path, name: str, pid: int, start: str, before: bool = False) -> Path:
    d = parent / name
    (d / "sub").mkdir(parents=True)
    if before:  # a file of the user's, older than the token
        (d / "sub" / "mine.txt").write_text("mine")
        time.sleep(0.05)
    (d / ".fbo-scratch").write_text(f"fbo scratch folder\n{pid} {start}\n")
    (d / "sub" / "fig.png").write_text("x")
    return d


def scratch(root: Path, p) -> None:
    """2. a scratch folder goes only with fbo's token, its process gone, nothing older than the token in it."""
    from fbo_cli.files import started_at
    from fbo_cli.runs.rundir import claim_root

    # the system's temporary folder of this case: a private one (another program's sweep of /tmp, an older fbo's
    # among them, would otherwise remove what the case plants there)
    tmp, before = root / "systmp", tempfile.tempdir
    tmp.mkdir()
    tempfile.tempdir = str(tmp)
    try:
        _scratch_case(root, tmp, p, started_at, claim_root)
    finally:
        tempfile.tempdir = before


def _scratch_case(root: Path, tmp: Path, p, started_at, claim_root) -> None:
    res = root / "res"
    claim_root(res)
    names = ["fbo-report-2025-november", "fbo-mnist-60000-training", ".fbo-figures-2024-snapshot",
             "fbo-ray-1999-holidays"]
    alike = [p.keep(d / n / "mine.txt") for d in (tmp, res / "deep" / "er") for n in names]
    dead, me = 2**22 + 3, started_at(os.getpid())
    gone = [_scratch(tmp, f"fbo-report-{dead}-probe62a", dead, "1"),
            _scratch(tmp, f"fbo-ray-{dead}-probe62b", dead, "1"),
            _scratch(tmp, f"fbo-mnist-{os.getpid()}-probe62c", os.getpid(), str(int(me) + 1)),  # a reused pid
            _scratch(res, f".fbo-figures-{dead}-probe62d", dead, "1")]
    kept = [_scratch(tmp, f"fbo-report-{os.getpid()}-probe62e", os.getpid(), me),  # this process: alive
            _scratch(tmp, f"fbo-report-{dead}-probe62f", dead, "1", before=True)]
    r = CliRunner().invoke(app, ["clean", "--out-dir", str(res), "--yes"])
    p.check("clean --out-dir: the results root's dead scratch folder goes, the temporary folder is not swept",
            r.exit_code == 0 and not gone[3].exists() and all(d.exists() for d in gone[:3]), r.output[-300:])
    r = CliRunner().invoke(app, ["clean", "--temp", "--yes"])
    p.check("clean --temp: dead token folders go (a reused pid too)", r.exit_code == 0
            and not any(d.exists() for d in gone), r.output[-300:])
    p.check("... a live process's, and one holding a file older than its token, stay", all(d.is_dir() for d in kept),
            f"{[d.exists() for d in kept]}")
    p.check("... folders merely named like scratch folders stay (fbo-report-2025-november, ...)",
            all(f.is_file() for f in alike), "removed")
    for d in kept:
        shutil.rmtree(d)


def tuning(root: Path, p) -> None:
    """5. a tuned.yaml applies only to its procedure; a results folder is one spec file's."""
    out = root / "tune"
    text = ("name: tp62\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: A, algo: aggitd, tune: {outer_lr: [0.01, "
            "0.1]}}]\nbase: {dataset: digits, clients: CL, participation: 0.5, rounds: 8, threads: 1}\n"
            "tune: {seeds: SEEDS, rounds: budget}\n")
    sp = root / "tp62.yaml"
    sp.write_text(text.replace("CL", "4").replace("SEEDS", "[100]"))
    r = CliRunner().invoke(app, ["tune", str(sp), "--out-dir", str(out)])
    p.check("tune records its procedure in tuned.yaml (made_by)", r.exit_code == 0
            and "made_by" in (out / "compare" / "tp62" / "tuned.yaml").read_text(), r.output[-300:])
    for what, cl, seeds in [("the tuning seeds", "4", "[101]"), ("the clients", "5", "[100]")]:
        sp.write_text(text.replace("CL", cl).replace("SEEDS", seeds))
        p.case(f"compare after {what} changed under a tuned.yaml", ["compare", str(sp), "--out-dir", str(out),
               "--dry-run"], says="another tuning procedure")
    same = ("name: same62\ntask: hyperrep\nseeds: [0]\nalgorithms: [{name: A, algo: aggitd}]\n"
            "base: {dataset: digits, clients: 4, participation: 0.5, rounds: 2, threads: 1}\n")
    for d in ("a", "b"):
        (root / d).mkdir()
        (root / d / "spec.yaml").write_text(same)
    here = os.getcwd()
    try:
        os.chdir(root / "a")
        CliRunner().invoke(app, ["compare", "spec.yaml", "--out-dir", str(root / "shared")])
        os.chdir(root / "b")
        p.case("two spec.yaml of one name from two folders into one --out-dir", ["compare", "spec.yaml", "--out-dir",
               str(root / "shared")], says="a different spec with the same name")
    finally:
        os.chdir(here)


def tampering(root: Path, p) -> None:
    """6. fbo check judges every row, names a missing run and an edited or deleted config; a tampered witness run
    is named."""
    from fbo_cli.evidence.check import compare_run
    from fbo_cli.evidence.witness import tampered_note, witness_runs
    from fbo_cli.runs.rundir import file_sha256

    ev, sp = root / "ev", root / "chk62.yaml"
    sp.write_text("name: chk62\ntask: hyperrep\nseeds: [0, 1, 2, 3]\nalgorithms: [{name: A, algo: aggitd}]\n"
                  f"base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 4, threads: 1, out_dir: {ev}}}\n")
    CliRunner().invoke(app, ["compare", str(sp)])
    runs = sorted(ev.glob("hyperrep/aggitd/*"))
    shutil.rmtree(runs[0])
    cfg = runs[1] / "config.yaml"
    cfg.write_text(cfg.read_text().replace("seed: 1", "seed: 9"))
    (runs[2] / "config.yaml").unlink()
    r = CliRunner().invoke(app, ["check", str(sp), "--from", str(ev), "--out", str(root / "chk"), "--all"])
    md = (root / "chk" / "check.md").read_text() if (root / "chk" / "check.md").is_file() else ""
    p.check("check --all with a run removed: not 'N of N', exit 1, the run named", r.exit_code == 1
            and "1 of 4 reproduce" in md and f"{runs[0]}` (missing" in md, r.output[-300:])
    p.check("check names an edited and a deleted config.yaml", "is not this run's configuration" in md
            and "config.yaml is missing" in md, md[:300])
    for d, accs in (("a", [0.1, 0.5, 0.6, 0.7]), ("b", [0.1, 0.5, 0.6, 0.99])):
        (root / d / "run").mkdir(parents=True)
        (root / d / "run" / "metrics.csv").write_text("rounds,test_acc\n" + "".join(
            f"{7 * i},{a}\n" for i, a in enumerate(accs)))  # the last row, round 21, after the budget of 20
        (root / d / "run" / "summary.json").write_text(json.dumps({"status": "done", "metric": "test_acc",
                                                                    "ledger": {}}))
    out = compare_run(root / "a" / "run", root / "b" / "run", sd=0.5, rounds=20)["outcome"]
    p.check("check: a forged row after the budget's last evaluation differs (not a drift)", out == "differs", out)
    w = root / "wit" / "witness" / "fednest-iid-tau1-inner0.01-s0"
    w.mkdir(parents=True)
    (w / "metrics.csv").write_text("rounds,test_acc\n10,0.5\n")
    (w / "summary.json").write_text(json.dumps({"setting": "IID, tau=1", "final": 0.5, "rounds": 2000,
                                                "metrics_sha256": file_sha256(w / "metrics.csv")}))
    (w / "metrics.csv").write_text("rounds,test_acc\n10,0.9\n")
    note = tampered_note(witness_runs(root / "wit"))
    p.check("a witness run whose metrics.csv fails its hash is named, not dropped", str(w) in note, note)


def runaway(root: Path, p) -> None:
    """7. a 300-byte path component in every listed option, runaway numbers, a walk of /, --prune's own runs."""
    long = str(root / ("x" * 300))
    for args in (["check", "--from", long], ["check", f"{long}/s.yaml"], ["report", "--from", long],
                 ["report", "--spec", f"{long}/s.yaml", "--from", str(root)],
                 ["report", "--html", f"{long}/r.html", "--spec", QUICK, "--from", str(root)],
                 ["report", "--collect", long, "--from", str(root)], ["clean", "--out-dir", long],
                 ["fetch", "mnist", "--data-dir", long], ["export", long], ["bench", "--cases", long]):
        p.case(f"a 300-byte path component: {' '.join(a for a in args if a != long and not a.startswith(long))}",
               args, says="File name too long")
    p.case("diagnose truncation --rounds 1e23", ["diagnose", "truncation", "--rounds", str(10**23)], says="--rounds")
    t = time.time()
    p.case("report --spec S --from / (no walk of the file system)", ["report", "--spec", QUICK, "--from", "/",
           "--md", str(root / "w.md"), "--html", str(root / "w.html")], says="no finished runs")
    p.check("... within 60 s", time.time() - t < 60, f"{time.time() - t:.0f} s")
    from fbo_cli.errors import UsageError
    from fbo_cli.evidence.report import Paper, collect_evidence, prune_evidence
    from fbo_cli.evidence.report import evidence as evidence_mod

    sp = p.spec("pr62", extra="seeds: [0, 1]\n")
    res, ev = root / "pres", root / "pev"
    CliRunner().invoke(app, ["compare", str(sp), "--out-dir", str(res)])
    reg = (Paper("e", "E", "", given=(str(sp),)),)
    collect_evidence(res, ev, papers=reg)
    first = sorted(ev.glob("hyperrep/aggitd/*"))[0]
    mine = first.parent / "my-own-run"
    shutil.copytree(first, mine)
    (mine / "summary.json").write_text(json.dumps({**json.loads((mine / "summary.json").read_text()),
                                                   "run_id": "my-own-run"}))
    share, evidence_mod.PRUNE_SHARE = evidence_mod.PRUNE_SHARE, 0.5  # one of three: under the share
    try:
        prune_evidence(ev, papers=reg, remove=True)
        why = "removed"
    except UsageError as e:
        why = str(e)
    finally:
        evidence_mod.PRUNE_SHARE = share
    p.check("--prune under its share: a user's own finished run stays without --yes", "did not bring" in why
            and (mine / "summary.json").is_file(), why)


def signals(root: Path, env: dict, p) -> None:
    """7 and issue 61 item 7: Ctrl-C to the process group, and SIGTERM to the driver, with --jobs 2 and three runs:
    the queued third never starts, no worker prints a traceback, exit 130."""
    for what, group, at in [("Ctrl-C to the group", True, "running"), ("SIGTERM to the driver", False, "running"),
                            ("Ctrl-C to the group while the workers start", True, "starting")]:
        out = root / f"sig-{group}-{at}"
        out.mkdir()
        sp = out / "s.yaml"
        sp.write_text(f"name: s\ntask: hyperrep\nseeds: [0, 1, 2]\nalgorithms: [{{name: A, algo: aggitd}}]\nbase: "
                      f"{{dataset: digits, clients: 4, participation: 0.5, rounds: 100000, threads: 1, "
                      f"out_dir: {out}}}\n")
        k = subprocess.Popen([*p.fbo, "compare", str(sp), "--jobs", "2", "--batch", "off"], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        t = time.time()
        while time.time() - t < 120 and k.poll() is None and (
                len(list(out.glob("hyperrep/*/*/metrics.csv"))) < 2 if at == "running" else _spawned(k.pid) < 2):
            time.sleep(0.05)
        os.killpg(k.pid, signal.SIGINT) if group else k.send_signal(signal.SIGTERM)
        try:
            text, _ = k.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            os.killpg(k.pid, signal.SIGKILL)
            text, _ = k.communicate()
        started = list(out.glob("hyperrep/*/*"))
        p.check(f"--jobs 2, {what} ({at}): exit 130, no traceback, the queued third run never starts",
                k.returncode == 130 and "Traceback" not in text and len(started) <= 2,
                f"rc {k.returncode}, {len(started)} started: {text[-300:]}")


def _spawned(pid: int) -> int:
    """How many pool workers (spawned children) process ``pid`` has."""
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rpartition(")")[2].split()[1])
                n += ppid == pid and b"spawn_main" in Path(f"/proc/{d}/cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                pass
    return n
