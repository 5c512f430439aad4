"""Checkpoint and resume: every registered algorithm continues bit for bit from a checkpoint; a real
``fbo run`` / ``fbo compare`` killed with SIGKILL and run again ends with the uninterrupted metrics."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from fbo_cli.algorithms import REGISTRY
from fbo_cli.runs.config import resolve
from fbo_cli.runs.rundir import CHECKPOINT, run_status
from fbo_cli.runs.runner import Interrupted, execute

# the smallest config of each algorithm's first task
SMALL = {
    "hyperrep": {"dataset": "digits", "clients": 4, "participation": 0.5},
    "hyperclean": {"dataset": "digits", "clients": 4, "participation": 1.0},
    "auc": {"dataset": "synth-c100", "clients": 4, "partition": "class-disjoint", "I": 2},
    "hfl": {"dataset": "synthetic", "clients": 5, "participation": 0.6},
}
LOCAL = {"fedbio-local", "fedbioacc-local"}


def _cfg(algo, out, **kw):
    task = REGISTRY[algo].tasks[0]
    base = {**SMALL[task], "threads": 1, "max_iters": 6, "rounds": 10**6, "out_dir": str(out), "checkpoint_every": 3}
    if algo in LOCAL:
        base.update(lower="local", participation=1.0)
    if algo.startswith("adafbio"):
        base["participation"] = 1.0
    return resolve(task, algo, {**base, **kw})


def _metrics(cfg):
    return pd.read_csv(cfg.run_dir / "metrics.csv").drop(columns="train_time")


@pytest.mark.parametrize("algo", list(REGISTRY))
def test_every_algorithm_resumes_bit_for_bit(algo, tmp_path, stop_after_checkpoint):
    full = _cfg(algo, tmp_path / "full")
    execute(full)
    part = _cfg(algo, tmp_path / "part")
    stop_after_checkpoint(part)  # right after the checkpoint at iteration 3, as SIGKILL would
    assert run_status(part.run_dir)[0] == "partial"
    s = execute(part)
    assert s["resumed_from_iteration"] == 3
    pd.testing.assert_frame_equal(_metrics(full), _metrics(part), check_exact=True)
    assert not (part.run_dir / CHECKPOINT).exists()  # removed once finished (keep_checkpoint: false)


def test_sigint_writes_checkpoint(tmp_path):
    cfg = _cfg("aggitd", tmp_path, max_iters=40, checkpoint_every=1000)
    import fbo_cli.runs.runner as runner

    calls = []

    def on_eval(row):
        calls.append(row)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(Interrupted):
        runner.execute(cfg, on_eval=on_eval)
    assert run_status(cfg.run_dir)[0] == "partial"
    s = runner.execute(cfg)
    assert s["status"] == "done" and s["resumed_from_iteration"] >= 2


CLI = [sys.executable, "-m", "fbo_cli.cli"]


def _uninterrupted(args):
    """The reference a killed command is compared with, run in this process (torch already imported: seconds
    less than a fresh interpreter and its workers): the same command line, whose numbers do not depend on the
    process that computes them."""
    from cli_helpers import invoke

    r = invoke(args)
    assert r.exit_code == 0, r.output
    return r

TINY = ["--dataset", "digits", "--clients", "6", "--participation", "0.5", "--eval-every", "1", "--quiet",
        "--set", "threads=1", "--set", "checkpoint_every=1"]


def _kill_when(proc, cond, timeout=60):
    t0 = time.time()
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.time() - t0 < timeout
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_sigkilled_run_resumes(tmp_path):
    # long enough (30 iterations, a checkpoint after each) that the kill lands mid-run even on a fast machine
    args = ["run", "hyperrep", "--algo", "fednest", "--rounds", "300", *TINY]
    _uninterrupted(args + ["--out-dir", str(tmp_path / "full")])
    p = subprocess.Popen(CLI + args + ["--out-dir", str(tmp_path / "kill")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)

    def mid():
        f = list((tmp_path / "kill").glob("hyperrep/*/*/metrics.csv"))
        return f and len(f[0].read_text().splitlines()) > 4  # a header and 4 iterations: checkpointed

    _kill_when(p, mid)
    d = next((tmp_path / "kill").glob("hyperrep/*/*"))
    assert run_status(d)[0] == "partial"
    r = _uninterrupted(args + ["--out-dir", str(tmp_path / "kill")])  # resumed in this process
    assert "resuming" in r.stderr
    full = pd.read_csv(next((tmp_path / "full").glob("hyperrep/*/*/metrics.csv"))).drop(columns="train_time")
    kill = pd.read_csv(d / "metrics.csv").drop(columns="train_time")
    pd.testing.assert_frame_equal(full, kill, check_exact=True)
    assert json.loads((d / "summary.json").read_text())["resumed_from_iteration"] > 0


def _children(pid):
    out = []
    for st in os.listdir("/proc"):
        if st.isdigit():
            try:
                fields = open(f"/proc/{st}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(st))
    return out


def _alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _all_gone(pids, deadline=60.0) -> bool:
    """Whether every process of ``pids`` has exited within ``deadline`` seconds (a loaded machine is slow)."""
    t0 = time.time()
    while any(_alive(w) for w in pids) and time.time() - t0 < deadline:
        time.sleep(0.1)
    return not any(_alive(w) for w in pids)


def test_sigkilled_compare_resumes_and_its_workers_die(tmp_path):
    def spec(out):
        p = out / "exp.yaml"
        out.mkdir()
        p.write_text(f"""
name: k
task: hyperrep
seeds: [0, 1]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 200, checkpoint_every: 1, threads: 1,
        out_dir: {out}}}
algorithms: [{{name: F, algo: fednest}}]
""")
        return str(p)

    _uninterrupted(["compare", spec(tmp_path / "full"), "--jobs", "1"])  # serial: in this process
    kill = tmp_path / "kill"
    p = subprocess.Popen(CLI + ["compare", spec(kill), "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    # kill while a run is mid-way: its checkpoint exists from its first iteration of 20 until it finishes, so
    # that the kill lands mid-run even on a fast machine, where the two workers may start a second apart
    def mid():
        return any(kill.glob("hyperrep/*/*/checkpoint.pt"))

    workers = []

    def mid_and_workers():
        if mid():
            workers.extend(c for c in _children(p.pid) if _alive(c))
            return True
        return False

    _kill_when(p, mid_and_workers)
    assert _all_gone(workers), "workers outlived their SIGKILLed parent"
    _uninterrupted(["compare", str(kill / "exp.yaml"), "--jobs", "1"])  # resumed in this process
    for a, b in zip(sorted((tmp_path / "full").glob("hyperrep/*/*/metrics.csv")),
                    sorted(kill.glob("hyperrep/*/*/metrics.csv"))):
        pd.testing.assert_frame_equal(pd.read_csv(a).drop(columns="train_time"),
                                      pd.read_csv(b).drop(columns="train_time"), check_exact=True)
    ta = pd.read_csv(tmp_path / "full" / "compare" / "k" / "table.csv")
    tb = pd.read_csv(kill / "compare" / "k" / "table.csv")
    pd.testing.assert_frame_equal(ta, tb)
    assert any(json.loads(s.read_text()).get("resumed_from_iteration") for s in kill.glob("hyperrep/*/*/summary.json"))


def test_a_runs_code_identity_is_computed_once_and_carried(tmp_path, monkeypatch):
    """Checkpoints (one per outer iteration here), the resume's code check and the summary read the identity the
    run's config computed once; none asks the class sources again."""
    from fbo_cli.runs import identity

    calls = []
    real = identity.code_identity
    monkeypatch.setattr(identity, "code_identity", lambda cfg: calls.append(cfg) or real(cfg))
    cfg = _cfg("aggitd", tmp_path, max_iters=4, checkpoint_every=1, keep_checkpoint=True)
    s = execute(cfg)
    assert s["code"] == real(cfg) and len(calls) == 1
    execute(cfg, fresh=False)  # resumes from the kept checkpoint: its code key is the carried one
    assert len(calls) == 1


def test_sigterm_to_a_pooled_compare_stops_it_and_starts_no_queued_run(tmp_path):
    """SIGTERM to the driver alone (a scheduler's stop): its workers are told to stop (they write their checkpoints),
    the queued runs never start, and it exits 130 promptly (before: the pool ran every queued run to its end)."""
    out = tmp_path / "t"
    out.mkdir()
    spec = out / "exp.yaml"
    spec.write_text(f"""
name: t
task: hyperrep
seeds: [0, 1, 2, 3, 4, 5]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 4000, checkpoint_every: 5, threads: 1,
        out_dir: {out}}}
algorithms: [{{name: F, algo: fednest}}]
""")
    p = subprocess.Popen(CLI + ["compare", str(spec), "--jobs", "2", "--batch", "off"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)  # its own group: the signal reaches it alone
    t0 = time.time()
    while not any(out.glob("hyperrep/*/*/checkpoint.pt")):
        assert p.poll() is None, p.communicate()
        assert time.time() - t0 < 120
        time.sleep(0.05)
    workers = [c for c in _children(p.pid) if _alive(c)]
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=150)
    assert p.returncode == 130, err
    # a worker told to stop writes its checkpoint first: checked at once it may still be alive (a race)
    assert _all_gone(workers), "workers outlived their SIGTERMed parent"
    started = list(out.glob("hyperrep/*/*"))
    # the two in flight only: the call the pool had handed on already is not started either (issue 61 item 7),
    # the others queued never began, and none ran to its end
    assert 1 <= len(started) <= 2, started
    assert all(run_status(d)[0] != "done" for d in started), [run_status(d) for d in started]


def test_ctrl_c_to_the_process_group_of_a_pooled_compare_starts_no_queued_run_and_prints_no_traceback(tmp_path):
    """Issue 61 item 7 / issue 62 item 7: SIGINT to the whole group (Ctrl-C) with --jobs 2 and three runs: the two
    running write their checkpoints, the third (already handed to a worker by the pool) never starts, and no
    worker prints a traceback; before, it started after the Ctrl-C and ran to its end."""
    out = tmp_path / "g"
    out.mkdir()
    spec = out / "exp.yaml"
    spec.write_text(f"""
name: g
task: hyperrep
seeds: [0, 1, 2]
base: {{dataset: digits, clients: 4, participation: 0.5, rounds: 100000, eval_every: 1, threads: 1,
        out_dir: {out}}}
algorithms: [{{name: A, algo: aggitd}}]
""")
    p = subprocess.Popen(CLI + ["compare", str(spec), "--jobs", "2", "--batch", "off"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.time()
    while len(list(out.glob("hyperrep/*/*/metrics.csv"))) < 2:  # both workers are inside their runs
        assert p.poll() is None, p.communicate()
        assert time.time() - t0 < 120
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGINT)
    o, err = p.communicate(timeout=150)
    assert p.returncode == 130, err
    assert "Traceback" not in o + err, err
    started = sorted(out.glob("hyperrep/*/*"))
    assert len(started) == 2 and all((d / "checkpoint.pt").is_file() for d in started), started
