"""Your method as safe as ours (issue 52): a user's algorithm is batched, resumed, re-run when its code
changed and held to its ledger exactly as a built-in one, or refused with a reason."""

import json
import textwrap

import pandas as pd
import pytest
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.config import resolve

runner = CliRunner()

# heavy-ball momentum on FedNest's outer step: state of its own (self.mom) that it does not declare
MOM = textwrap.dedent('''
    import torch
    from fbo_cli.algorithms.fednest import FedNest


    class MomNest(FedNest):
        """FedNest with heavy-ball momentum on the outer step."""

        def __init__(self, task, hp, fed):
            super().__init__(task, hp, fed)
            self.mom = torch.zeros_like(self.x)

        def step(self):
            x0 = self.x
            super().step()
            self.mom = 0.5 * self.mom + (self.x - x0)
            self.x = x0 + self.mom
''')
# the same, declared: its runs batch, the momentum per run
DECLARED = MOM.replace("class MomNest(FedNest):",
                       "class MomNest(FedNest):\n    batch_state = FedNest.batch_state + (\"mom\",)")
# a step that fails in a batch only (a batch-only bug), and one whose hyperparameter boom > 0 fails it
FAILING = textwrap.dedent('''
    from dataclasses import dataclass

    from fbo_cli.algorithms.fednest import FedNest


    class Boom(FedNest):
        batch_state = FedNest.batch_state

        @dataclass
        class HP(FedNest.HP):
            boom: float = 0.0

        def step(self):
            b = self.hp.boom
            if any(v > 0 for v in getattr(b, "v", [b])):
                raise RuntimeError("boom")
            super().step()
''')
KEYS = {"dataset": "digits", "clients": 4, "participation": 0.5, "rounds": 60, "threads": 1}


def user(tmp_path, src, name="mom.py"):
    (tmp_path / name).write_text(src)
    return f"{tmp_path / name}:{src.split('class ')[1].split('(')[0]}"


def metrics(summary_or_dir):
    return pd.read_csv(summary_or_dir / "metrics.csv").drop(columns="train_time")


def test_a_subclass_with_undeclared_state_runs_alone_and_show_says_why(tmp_path):
    from fbo_cli.batch import batchable, group_batches, state_refusal

    cfgs = [resolve("hyperrep", user(tmp_path, MOM), {**KEYS, "outer_lr": lr}) for lr in (0.01, 0.02)]
    why = state_refusal(cfgs[0].entry.cls)
    assert "self.mom" in why and "batch_state" in why
    assert not batchable(cfgs[0]) and group_batches(cfgs, 8) == [[0], [1]]
    r = runner.invoke(app, ["show", str(cfgs[0].source), "--task", "hyperrep"])
    out = " ".join(r.output.split())
    assert r.exit_code == 0 and "its runs run alone" in out and "self.mom" in out, out
    # credited with its own docstring, not FedNest's paper; no "lower_lr = lower_lr"
    assert "FedNest with heavy-ball momentum" in out and "Tarzanagh" not in out.split("rounds per")[0]
    assert "lower_lr = lower_lr" not in out
    declared = resolve("hyperrep", user(tmp_path, DECLARED, "dec.py"), KEYS)
    assert state_refusal(declared.entry.cls) is None and batchable(declared)


def test_partners_of_a_diverging_or_failing_run_finish(tmp_path):
    from fbo_cli.batch import execute_batch

    out = str(tmp_path / "r")
    # undeclared state: alone (on the old code the batch dropped the diverged run but not its momentum: the
    # partners failed on a shape mismatch)
    for src, name in ((MOM, "mom.py"), (DECLARED, "dec.py")):
        ref = user(tmp_path, src, name)
        cfgs = [resolve("hyperrep", ref, {**KEYS, "outer_lr": lr, "out_dir": out}) for lr in (0.01, 1000.0, 0.02)]
        got = [s["status"] for s in execute_batch(cfgs)]
        assert got == ["done", "diverged", "done"], (name, got)
        alone = resolve("hyperrep", ref, {**KEYS, "outer_lr": 0.02, "out_dir": str(tmp_path / "alone" / name)})
        execute_batch([alone])
        pd.testing.assert_frame_equal(metrics(cfgs[2].run_dir), metrics(alone.run_dir))
    # a batched step that raises: every run again alone, where each fails or finishes on its own
    ref = user(tmp_path, FAILING, "boom.py")
    cfgs = [resolve("hyperrep", ref, {**KEYS, "boom": b, "outer_lr": lr, "out_dir": out})
            for b, lr in ((0.0, 0.01), (1.0, 0.01), (0.0, 0.02))]
    res = execute_batch(cfgs)
    assert [s["status"] for s in res] == ["done", "failed", "done"] and "boom" in res[1]["error"]
    assert json.loads((cfgs[1].run_dir / "summary.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("src", [MOM, DECLARED], ids=["alone", "batched"])
def test_a_subclass_with_extra_state_resumes_bit_for_bit(tmp_path, src, stop_after_checkpoint, monkeypatch):
    import fbo_cli.runner as rn
    from fbo_cli.batch import execute_batch

    ref = user(tmp_path, src)
    keys = {**KEYS, "rounds": 100, "checkpoint_every": 3}
    whole = [resolve("hyperrep", ref, {**keys, "outer_lr": lr, "out_dir": str(tmp_path / "a")}) for lr in (0.01, 0.02)]
    execute_batch(whole)
    cfgs = [resolve("hyperrep", ref, {**keys, "outer_lr": lr, "out_dir": str(tmp_path / "b")}) for lr in (0.01, 0.02)]
    real = rn._save_checkpoint

    def save_then_die(path, *a):
        real(path, *a)
        raise KeyboardInterrupt

    monkeypatch.setattr(rn, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        execute_batch(cfgs)
    monkeypatch.setattr(rn, "_save_checkpoint", real)
    again = execute_batch(cfgs)
    assert again[0].get("resumed_from_iteration") == 3
    for w, c in zip(whole, cfgs):
        pd.testing.assert_frame_equal(metrics(w.run_dir), metrics(c.run_dir))


WRONG_ROUNDS = textwrap.dedent('''
    from fbo_cli.algorithms.fednest import FedNest


    class Wrong(FedNest):
        def rounds_per_iteration(self):
            return super().rounds_per_iteration() + 1
''')
NO_ROUND = textwrap.dedent('''
    from fbo_cli.algorithms.fednest import FedNest


    class Silent(FedNest):
        def step(self):
            self.x = self.x * 0.999
''')


def test_the_ledger_contract_is_checked(tmp_path):
    from fbo_cli.runner import LedgerError, execute

    for src, msg in ((WRONG_ROUNDS, "charged 10 communication rounds, but its rounds_per_iteration() says 11"),
                     (NO_ROUND, "charged no communication round")):
        cfg = resolve("hyperrep", user(tmp_path, src, "x.py"), {**KEYS, "out_dir": str(tmp_path / "r")})
        with pytest.raises(LedgerError, match=cfg.algo) as e:
            execute(cfg)
        assert msg in str(e.value)
        assert json.loads((cfg.run_dir / "summary.json").read_text())["status"] == "failed"
