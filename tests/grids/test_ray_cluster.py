"""Ray beyond one process and under interruption, on this machine:

- a two-node cluster (``ray.cluster_utils.Cluster``: a head and a second node, one CPU each, with no
  results folder of their own: the files travel through Ray) runs a grid whose tables equal the serial
  executor's, and both nodes ran runs;
- one node killed mid-grid: the grid completes with every run accounted for;
- Ctrl-C in the driver brings the running run's checkpoint home into its run directory and leaves no
  worker temporary folder;
- the agents of a local Ray whose driver was killed (``kill -9``) are found and reaped.

Skipped when Ray is not installed (pip install -e '.[ray]'). About a minute on 2 cores."""

import glob
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pandas as pd
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from fbo_cli.grids import compare as cmp  # noqa: E402
from fbo_cli.grids.executors import GridInterrupted, GridOptions, orphaned_ray, reap_orphaned_ray, run_cells  # noqa: E402


def _spec(tmp_path, out, rounds=20, seeds="[0, 1]"):
    p = tmp_path / f"{out}.yaml"
    p.write_text(f"""
name: r{out}
task: hyperrep
seeds: {seeds}
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: {rounds}, threads: 1, out_dir: {tmp_path / out}}}
algorithms: [{{name: A, algo: aggitd}}, {{name: F, algo: fednest}}]
""")
    return p


@pytest.fixture
def two_nodes():
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    second = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()
    yield cluster, second
    ray.shutdown()
    cluster.shutdown()


def _once_running(before=None, patience=120.0):
    """Returns once a Ray worker's run (in a temporary folder not in ``before``) has written metrics."""
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "fbo-ray-*"))) if before is None else before
    t = time.time()
    while time.time() - t < patience:
        if [f for f in glob.glob(os.path.join(tempfile.gettempdir(), "fbo-ray-*/hyperrep/*/*/metrics.csv"))
                if not any(f.startswith(b) for b in before)]:
            return
        time.sleep(0.2)


def _nodes(out):
    logs = glob.glob(str(out / "hyperrep/*/*/run.log"))
    return {line.split("ran on Ray node ")[1].split()[0] for f in logs for line in open(f) if "ran on Ray node" in line}


def test_two_node_cluster_equals_serial_and_survives_a_node_loss(tmp_path, two_nodes):
    cluster, second = two_nodes
    tables = {}
    for ex in ("serial", "ray"):
        exp = cmp.load_spec(_spec(tmp_path, ex))
        cmp.run_experiment(exp, GridOptions(executor=ex))
        out = cmp.report_experiment(exp)
        assert exp.incomplete == 0
        tables[ex] = pd.read_csv(out / "table.csv")
    pd.testing.assert_frame_equal(tables["serial"], tables["ray"])
    assert len(_nodes(tmp_path / "ray")) == 2  # both nodes ran runs

    exp = cmp.load_spec(_spec(tmp_path, "loss", rounds=60))
    killer = threading.Thread(target=lambda: (_once_running(), cluster.remove_node(second, allow_graceful=False)))
    killer.start()  # the second node goes once a run is under way (joined below: it never outlives the cluster)
    out = run_cells(exp.cells, executor="ray")
    killer.join()
    assert len(out) == len(exp.cells) == 4
    assert all(s["status"] in ("done", "failed") for s in out), [s["status"] for s in out]
    for c, s in zip(exp.cells, out):  # accounted for: a completion record, or an error said
        assert (c.cfg.run_dir / "summary.json").is_file() if s["status"] == "done" else s.get("error")
    assert sum(s["status"] == "done" for s in out) >= 3  # a run on the lost node is retried on the head


@pytest.fixture
def one_cpu_ray():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ctrl_c_brings_the_checkpoint_home_and_leaves_no_temp_folder(tmp_path, one_cpu_ray):
    exp = cmp.load_spec(_spec(tmp_path, "int", rounds=10**6, seeds="[0]"))
    cell = exp.cells[0]
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "fbo-ray-*")))
    # the worker's run has evaluated once: Ctrl-C
    threading.Thread(target=lambda: (_once_running(before), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
    with pytest.raises(GridInterrupted, match="1 run\\(s\\) in flight wrote their checkpoints"):
        run_cells([cell], executor="ray")
    assert (cell.cfg.run_dir / "checkpoint.pt").is_file() and (cell.cfg.run_dir / "metrics.csv").is_file()
    assert not (cell.cfg.run_dir / "summary.json").exists()
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "fbo-ray-*"))) <= before


def test_ctrl_c_in_a_ray_grid_is_a_flag_the_loop_reads_not_an_exception():
    from fbo_cli.grids.executors.raygrid import ctrl_c_flag

    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_flag() as hits:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # no KeyboardInterrupt: the handler only counts
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        assert len(hits) == 2
    assert signal.getsignal(signal.SIGINT) is before


def test_a_killed_drivers_ray_agents_are_reaped(tmp_path):
    if ray.is_initialized():
        ray.shutdown()
    code = ("import ray, time; from fbo_cli.grids.executors import mark_session; "  # as fbo's driver does
            "ray.init(num_cpus=1, include_dashboard=False); mark_session(ray); print('up', flush=True); "
            "time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    assert p.stdout.readline().strip() == b"up"
    time.sleep(2)
    p.kill()  # the driver alone
    p.wait()
    deadline = time.time() + 30
    left = orphaned_ray()
    while not any("Agent" in name for _, name, _ in left) and time.time() < deadline:
        time.sleep(1)
        left = orphaned_ray()
    assert any("Agent" in name for _, name, _ in left), left
    reap_orphaned_ray()
    time.sleep(1)
    assert not orphaned_ray()
