"""The Ray executor on a local Ray with 2 CPUs: same tables as the serial executor; a dead worker's run
is retried, then recorded as failed. Skipped when Ray is not installed (pip install -e '.[ray]')."""

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from fbo_cli.grids import compare as cmp  # noqa: E402
from fbo_cli.grids.executors import GridOptions, run_cells  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _spec(tmp_path, out):
    p = tmp_path / f"{out}.yaml"
    p.write_text(f"""
name: r
task: hyperrep
seeds: [0]
base: {{dataset: digits, clients: 6, participation: 0.5, rounds: 20, threads: 1, out_dir: {tmp_path / out}}}
algorithms: [{{name: A, algo: aggitd}}, {{name: F, algo: fednest}}]
""")
    return p


def test_ray_tables_equal_serial(tmp_path, local_ray):
    tables = {}
    for ex in ("serial", "ray"):
        exp = cmp.load_spec(_spec(tmp_path, ex))
        cmp.run_experiment(exp, GridOptions(executor=ex))
        out = cmp.report_experiment(exp)
        assert exp.incomplete == 0
        tables[ex] = pd.read_csv(out / "table.csv")
        for c in exp.cells:
            assert (c.cfg.run_dir / "summary.json").is_file() and not (c.cfg.run_dir / "checkpoint.pt").exists()
    pd.testing.assert_frame_equal(tables["serial"], tables["ray"])
    a = sorted((tmp_path / "serial").glob("hyperrep/*/*/metrics.csv"))
    b = sorted((tmp_path / "ray").glob("hyperrep/*/*/metrics.csv"))
    for x, y in zip(a, b):
        pd.testing.assert_frame_equal(pd.read_csv(x).drop(columns="train_time"),
                                      pd.read_csv(y).drop(columns="train_time"), check_exact=True)


def test_ray_worker_death_is_retried_then_failed(tmp_path, local_ray, monkeypatch):
    import fbo_cli.grids.executors.raygrid as ex

    exp = cmp.load_spec(_spec(tmp_path, "die"))
    calls = tmp_path / "calls"

    def die(*a, **k):
        import os

        with open(calls, "a") as f:
            f.write("x")
        os._exit(1)  # the worker process dies

    monkeypatch.setattr(ex, "ray_task", die)
    out = run_cells(exp.cells[:1], executor="ray")
    err = out[0]["error"]
    assert out[0]["status"] == "failed" and ("Worker" in err or "died" in err), err
    assert len(calls.read_text()) == 2  # tried, then retried once


def test_resources_the_cluster_lacks_and_a_dead_address_fail_at_once(tmp_path, local_ray):
    import time

    from fbo_cli.errors import UsageError
    from fbo_cli.grids.executors.raygrid import check_reachable

    exp = cmp.load_spec(_spec(tmp_path, "gpu"))
    t = time.time()
    with pytest.raises(UsageError) as e:  # more GPUs per run than the cluster has
        run_cells(exp.cells, executor="ray", gpus_per_run=1)
    assert (e.value.kind, e.value.field, e.value.value) == ("unsupported", "--gpus-per-run", 1)
    with pytest.raises(UsageError) as e:
        check_reachable("127.0.0.1:1", timeout=2)
    assert (e.value.kind, e.value.field, e.value.value) == ("not_found", "--address", "127.0.0.1:1")
    assert time.time() - t < 30
