"""One run loop for R >= 1 runs: a run alone and the runs of a batch step in the same loop
(:mod:`fbo_cli.runs.loop`), no other module of the runs and grids layers steps an algorithm, and the run
directory's files go through :class:`fbo_cli.runs.rundir.RunDir`."""

import ast
from pathlib import Path

import pandas as pd

import fbo_cli
from fbo_cli.runs import loop
from fbo_cli.runs.config import resolve
from fbo_cli.runs.rundir import CHECKPOINT, RunDir

ROOT = Path(fbo_cli.__file__).parent
HR = {"dataset": "digits", "clients": 4, "participation": 0.5, "hidden": 8, "threads": 1, "max_iters": 4,
      "rounds": 10**6, "eval_every": 1}


def _step_calls(path: Path) -> int:
    return sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
               and not n.args and not n.keywords for n in ast.walk(ast.parse(path.read_text())))


def test_only_the_run_loop_steps_an_algorithm():
    """Every ``x.step()`` of the runs and grids layers is the loop's one call: no second loop."""
    calls = {str(f.relative_to(ROOT)): n for layer in ("runs", "grids") for f in sorted((ROOT / layer).rglob("*.py"))
             if (n := _step_calls(f))}
    assert calls == {"runs/loop.py": 1}


def test_no_private_name_crosses_the_loop_the_runner_and_the_batches():
    """The runs layer and the batches import only public names of fbo's modules (``_x`` stays in its module)."""
    batches = [ROOT / "grids" / f for f in ("run_batches.py", "batch_resume.py")]
    files = [*sorted((ROOT / "runs").rglob("*.py")), *batches]
    crossing = [f"{f.name}: {a.name}" for f in files for n in ast.walk(ast.parse(f.read_text()))
                if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("fbo_cli"))
                for a in n.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert crossing == []


def test_a_run_alone_and_a_batch_step_in_the_same_loop(tmp_path, monkeypatch):
    """``execute`` (a batch of one, :class:`~fbo_cli.runs.loop.Steps`) and ``execute_batch`` (the stacked runs,
    :class:`~fbo_cli.runs.loop.Stacked`) both run :func:`fbo_cli.runs.loop.step_loop`; the run alone's
    metrics are those of the same run in the batch."""
    from fbo_cli.grids.run_batches import execute_batch
    from fbo_cli.runs.runner import execute

    seen, real = [], loop.step_loop

    def spy(algo, steps, members, stop):
        seen.append((type(steps).__name__, len(members)))
        return real(algo, steps, members, stop)

    monkeypatch.setattr(loop, "step_loop", spy)
    lr = resolve("hyperrep", "aggitd", HR).hp.outer_lr
    alone = resolve("hyperrep", "aggitd", {**HR, "out_dir": str(tmp_path / "alone")})
    batch = [resolve("hyperrep", "aggitd", {**HR, "out_dir": str(tmp_path / "batch"), "outer_lr": lr * f})
             for f in (1.0, 0.5)]
    assert execute(alone)["status"] == "done"
    assert [s["status"] for s in execute_batch(batch)] == ["done", "done"]
    assert seen == [("Steps", 1), ("Stacked", 2)]
    pd.testing.assert_frame_equal(pd.read_csv(alone.run_dir / "metrics.csv").drop(columns="train_time"),
                                  pd.read_csv(batch[0].run_dir / "metrics.csv").drop(columns="train_time"),
                                  check_exact=True)


def test_a_run_directory_that_writes_nothing_and_a_malformed_checkpoint(tmp_path):
    """``RunDir(write=False)`` leaves no file; a checkpoint that is not one of ours is moved aside, and says so."""
    quiet = RunDir(tmp_path / "quiet", write=False)
    quiet.begin()
    quiet.append([{"rounds": 0}])
    assert not quiet.path.exists() and quiet.load_checkpoint(None, None) == (None, "")
    rd = RunDir(tmp_path / "r")
    rd.begin()
    (rd.path / CHECKPOINT).write_bytes(b"not a checkpoint")
    c, why = rd.load_checkpoint(None, None)
    assert c is None and why.startswith("malformed") and not rd.checkpoint.exists()
    assert (rd.path / "checkpoint.bad").read_bytes() == b"not a checkpoint"
