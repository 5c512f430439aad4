"""Your method as safe as ours (issue 52): a user's algorithm is batched, resumed, re-run when its code
changed and held to its ledger exactly as a built-in one, or refused with a reason."""

import json
import textwrap

import pandas as pd
import pytest
from cli_helpers import fails_with
from typer.testing import CliRunner

from fbo_cli.cli import app
from fbo_cli.runs.config import resolve

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
    from fbo_cli.grids.run_batches import batchable, group_batches, state_refusal

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
    from fbo_cli.grids.run_batches import execute_batch

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
    import fbo_cli.runs.checkpoint as rn
    from fbo_cli.grids.run_batches import execute_batch

    ref = user(tmp_path, src)
    keys = {**KEYS, "rounds": 100, "checkpoint_every": 3}
    whole = [resolve("hyperrep", ref, {**keys, "outer_lr": lr, "out_dir": str(tmp_path / "a")}) for lr in (0.01, 0.02)]
    execute_batch(whole)
    cfgs = [resolve("hyperrep", ref, {**keys, "outer_lr": lr, "out_dir": str(tmp_path / "b")}) for lr in (0.01, 0.02)]
    real = rn.save_checkpoint

    def save_then_die(path, *a):
        real(path, *a)
        raise KeyboardInterrupt

    monkeypatch.setattr(rn, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        execute_batch(cfgs)
    monkeypatch.setattr(rn, "save_checkpoint", real)
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
    from fbo_cli.runs.runner import LedgerError, execute

    for src, msg in ((WRONG_ROUNDS, "charged 10 communication rounds, but its rounds_per_iteration() says 11"),
                     (NO_ROUND, "charged no communication round")):
        cfg = resolve("hyperrep", user(tmp_path, src, "x.py"), {**KEYS, "out_dir": str(tmp_path / "r")})
        with pytest.raises(LedgerError, match=cfg.algo) as e:
            execute(cfg)
        assert msg in str(e.value)
        assert json.loads((cfg.run_dir / "summary.json").read_text())["status"] == "failed"


# a method whose step reaches a module-level helper and a sibling file's function
LN = textwrap.dedent('''
    from fbo_cli.algorithms.fednest import FedNest
    from {helper} import shrink


    def factor():
        return 1.0


    class LocalNeumann(FedNest):
        def step(self):
            super().step()
            self.x = shrink(self.x) * factor()
''')
HELPER = "def shrink(x):\n    return x * 0.99\n"
SPEC = textwrap.dedent('''
    name: mine
    task: hyperrep
    metric: test_acc
    seeds: [0]
    base: {dataset: digits, clients: 4, participation: 0.5, rounds: 40, eval_every: 1, threads: 1}
    algorithms:
      - {name: FedNest, algo: fednest}
      - {name: Mine, algo: ./va/ln.py:LocalNeumann, tune: {outer_lr: [0.005, 0.01, 0.02]}}
    tune: {seeds: [100], rounds: 20}
''')


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def project(tmp_path, monkeypatch):
    for v, helper in (("va", "help52a"), ("vb", "help52b")):
        (tmp_path / v).mkdir()
        (tmp_path / v / "ln.py").write_text(LN.format(helper=helper))
        (tmp_path / v / f"{helper}.py").write_text(HELPER)
    (tmp_path / "mine.yaml").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_an_edit_of_a_helper_or_a_sibling_file_makes_the_run_stale(project):
    from fbo_cli.runs.identity import stale_reason
    from fbo_cli.runs.runner import execute

    keys = {**KEYS, "out_dir": str(project / "r")}
    cfg = resolve("hyperrep", "./va/ln.py:LocalNeumann", keys)
    s = execute(cfg)
    assert stale_reason(cfg, s) is None
    ln, helper = project / "va" / "ln.py", project / "va" / "help52a.py"
    for f, old, new in ((ln, "return 1.0", "return 0.995"), (helper, "0.99", "0.985")):
        text = f.read_text()
        f.write_text(text.replace(old, new))
        why = stale_reason(resolve("hyperrep", "./va/ln.py:LocalNeumann", keys), s)
        assert why and "LocalNeumann" in why, f
        f.write_text(text)
    assert stale_reason(resolve("hyperrep", "./va/ln.py:LocalNeumann", keys), s) is None
    # built-in classes keep their class-source hash: the evidence's record stands
    from fbo_cli.runs.identity import class_hashes

    assert class_hashes(resolve("hyperrep", "fednest", {}).entry.cls) == {
        k: v for k, v in class_hashes(cfg.entry.cls).items() if k.startswith("fbo_cli.")}


def test_two_versions_of_one_class_are_two_algorithms_and_moving_the_folder_keeps_the_runs(project, tmp_path_factory):
    import shutil

    from fbo_cli.grids.spec import load_spec

    (project / "vb" / "ln.py").write_text(LN.format(helper="help52b").replace("return 1.0", "return 0.9"))
    (project / "two.yaml").write_text(SPEC.replace("tune: {outer_lr: [0.005, 0.01, 0.02]}", "")
                                      .replace("tune: {seeds: [100], rounds: 20}\n", "")
                                      .replace("{name: FedNest, algo: fednest}",
                                               "{name: B, algo: ./vb/ln.py:LocalNeumann}"))
    exp = load_spec(project / "two.yaml")
    dirs = {c.algorithm: c.cfg.run_dir for c in exp.cells}
    assert dirs["Mine"] != dirs["B"] and dirs["Mine"].parent == dirs["B"].parent
    r = cli("compare", "two.yaml")
    assert r.exit_code == 0, r.output
    assert (dirs["Mine"] / "summary.json").is_file() and (dirs["B"] / "summary.json").is_file()
    moved = tmp_path_factory.mktemp("moved") / "p"
    shutil.copytree(project, moved)
    again = resolve("hyperrep", str(moved / "va" / "ln.py") + ":LocalNeumann", exp.cells[0].layers[0])
    assert again.run_id == next(c for c in exp.cells if c.algorithm == "Mine").cfg.run_id


def test_a_tuning_reruns_its_stale_points_and_compare_warns_of_a_tuning_of_other_code(project):
    from fbo_cli.grids.tune import run_tuning

    out = run_tuning(project / "mine.yaml", {}, ranking_check=False)
    tuned = (out / "tuned.yaml").read_text()
    assert "ln.LocalNeumann" in tuned  # the code the choice was made with
    runs = sorted((project / "results" / "hyperrep" / "LocalNeumann").iterdir())
    before = {d: json.loads((d / "summary.json").read_text())["code"]["algorithm"]["ln.LocalNeumann"] for d in runs}
    helper = project / "va" / "help52a.py"
    helper.write_text(helper.read_text().replace("0.99", "0.985"))
    r = cli("compare", "mine.yaml", "--dry-run")
    out_text = " ".join(r.output.split())
    assert "tuned.yaml's choices for Mine were made by other code" in out_text, out_text
    run_tuning(project / "mine.yaml", {}, ranking_check=False)
    # every recorded point ran again, under new run ids (the code is in a user run's identity); the old runs stay
    new = sorted(set((project / "results" / "hyperrep" / "LocalNeumann").iterdir()) - set(runs))
    after = {d: json.loads((d / "summary.json").read_text())["code"]["algorithm"]["ln.LocalNeumann"] for d in new}
    assert len(new) == len(runs) and not set(after.values()) & set(before.values())
    assert "made by other code" not in " ".join(cli("compare", "mine.yaml", "--dry-run").output.split())
    out_text = " ".join(cli("tune", "mine.yaml", "--dry-run").output.split())  # finished: it warns of no runs
    assert "finished" in out_text and "nothing left to run" in out_text and "up to" not in out_text, out_text


def test_a_tuning_whose_every_point_failed_with_an_error_exits_non_zero_naming_it(project):
    (project / "boom.py").write_text(FAILING)
    (project / "boom.yaml").write_text(SPEC.replace("./va/ln.py:LocalNeumann", "./boom.py:Boom")
                                       .replace("tune: {outer_lr:", "set: {boom: 1.0}, tune: {outer_lr:"))
    r = cli("tune", "boom.yaml")
    out = " ".join(r.output.split())
    assert r.exit_code != 0 and "failed with an error" in out and "RuntimeError: boom" in out, out
    assert not (project / "results" / "compare" / "mine" / "tuned.yaml").exists()


def test_compare_dry_run_checks_the_metric_as_the_real_run_does(project):
    (project / "bad.yaml").write_text(SPEC.replace("metric: test_acc", "metric: test_acc_typo"))
    r = cli("compare", "bad.yaml", "--dry-run")
    out = " ".join(r.output.split())
    assert fails_with(r, "unknown", field="metric", value="test_acc_typo"), out
    assert not (project / "results").exists()  # nothing half-written


def test_an_interrupted_run_alone_stops_the_batch(tmp_path, monkeypatch):
    import fbo_cli.runs.runner as rn
    from fbo_cli.grids.run_batches import execute_batch

    calls = []

    def interrupted(cfg, **kw):
        calls.append(cfg)
        raise rn.Interrupted(cfg.run_dir, 3)

    monkeypatch.setattr(rn, "execute", interrupted)
    cfgs = [resolve("hyperrep", user(tmp_path, MOM), {**KEYS, "outer_lr": lr}) for lr in (0.01, 0.02)]
    with pytest.raises(rn.Interrupted):
        execute_batch(cfgs)  # alone (undeclared state): the first run's Ctrl-C is not a failure to go past
    assert len(calls) == 1


# the template's method with rounds_per_iteration() None ("varies") and a step that forgets one round's charge
FORGETS = textwrap.dedent('''
    from fbo_cli.algorithms.template_bilevel import TemplateBilevel


    class Forgets(TemplateBilevel):
        rounds = "N + T + 3"

        def rounds_per_iteration(self):
            return None

        def hypergrad(self, x, y, train, val):  # with T = 0
            p = self.grad_mean(self.task.f, 1, x, y, self.noise(val.full()))
            self.ledger.comm(train.M, y.shape[-1])
            h = self.hypergradient(x, y, self.hp.lam * p, train, val, per_client=False).h
            return h  # forgot: self.ledger.comm(M, x.shape[-1], 0)
''')


def test_a_forgotten_round_fails_even_where_rounds_per_iteration_varies_in_one_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forgets.py").write_text(FORGETS)
    r = cli("run", "hyperrep", "--algo", "forgets.py:Forgets", "--dataset", "digits", "--clients", "4",
            "--participation", "0.5", "--rounds", "20", "--set", "T=0")
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "forgets.py" in "".join(r.output.split()) and "step()" in out and "charged 3" in out, out


# declares its state, but its step mixes the runs of a batch (a mean over every run's x): its batch differs
MIXES = textwrap.dedent('''
    from fbo_cli.algorithms.fednest import FedNest


    class Mixes(FedNest):
        batch_state = FedNest.batch_state

        def step(self):
            super().step()
            self.x = self.x - 0.01 * self.x.mean()
''')


def test_a_user_batch_is_checked_against_its_runs_alone_before_it_batches(tmp_path):
    from fbo_cli.grids import batch_check
    from fbo_cli.grids.run_batches import execute_batch

    batch_check._VERDICTS.clear()
    keys = {**KEYS, "rounds": 30, "out_dir": str(tmp_path / "r")}
    bad = [resolve("hyperrep", user(tmp_path, MIXES, "mixes.py"), {**keys, "outer_lr": lr}) for lr in (0.01, 0.02)]
    out = execute_batch(bad)
    assert all(s["status"] == "done" and "batch_runs" not in s for s in out)  # refused: they ran alone
    log = (bad[0].run_dir / "run.log").read_text()
    assert "differ from its runs alone" in log and "self.x" in log, log
    good = [resolve("hyperrep", user(tmp_path, DECLARED, "declared.py"), {**keys, "outer_lr": lr})
            for lr in (0.01, 0.02)]
    out = execute_batch(good)
    assert all(s["batch_runs"] == 2 for s in out)


def test_an_interrupted_user_batch_resumes_as_a_batch_bit_for_bit(tmp_path):
    from fbo_cli.grids.run_batches import execute_batch
    from fbo_cli.runs import runner

    src = user(tmp_path, DECLARED, "declared.py")
    cfgs = {w: [resolve("hyperrep", src, {**KEYS, "rounds": 40, "eval_every": 1, "outer_lr": lr,
                                          "out_dir": str(tmp_path / w)}) for lr in (0.01, 0.02)]
            for w in ("whole", "cut")}
    assert all(s["batch_runs"] == 2 for s in execute_batch(cfgs["whole"]))
    seen = []

    def stop_at_the_third(k, row):
        seen.append(k)
        if len(seen) == 6:  # both runs evaluated twice after the start
            runner.STOP.set()

    with pytest.raises(runner.Interrupted):
        execute_batch(cfgs["cut"], on_eval=stop_at_the_third)
    out = execute_batch(cfgs["cut"])
    assert [(s["resumed_from_iteration"], s["batch_runs"]) for s in out] == [(2, 2)] * 2
    assert "resume:" in (cfgs["cut"][0].run_dir / "run.log").read_text()
    for a, b in zip(cfgs["whole"], cfgs["cut"]):
        pd.testing.assert_frame_equal(metrics(a.run_dir), metrics(b.run_dir))
