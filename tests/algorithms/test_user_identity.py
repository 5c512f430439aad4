"""Your method, never confused with another (issue 61): a user algorithm's run identity is its code, so two files
of one name in two folders never share a run, ``--accept-code-change`` adopts only a run its own file made, and
an acceptance adds to the record instead of replacing it."""

import json
import textwrap
from types import SimpleNamespace

import pytest

from fbo_cli.runs.config import resolve
from fbo_cli.runs.todo import todo_runs

# one name, one folder name, two update rules
STORM = textwrap.dedent('''
    from fbo_cli.algorithms.fednest import FedNest
    from stormhelp import damp


    class StormBiO(FedNest):
        def step(self):
            super().step()
            self.x = damp(self.x)
''')
HELP = "def damp(x):\n    return x * {f}\n"
SPEC = textwrap.dedent('''
    name: two
    task: hyperrep
    metric: test_acc
    seeds: [0]
    base: {dataset: digits, clients: 4, participation: 0.5, rounds: 20, eval_every: 1, threads: 1}
    algorithms:
      - {name: A, algo: ./proj_a/my_algos/stormbio.py:StormBiO}
      - {name: B, algo: ./proj_b/my_algos/stormbio.py:StormBiO}
''')


@pytest.fixture
def two(tmp_path, monkeypatch):
    for proj, f in (("proj_a", "0.999"), ("proj_b", "0.99")):
        d = tmp_path / proj / "my_algos"
        d.mkdir(parents=True)
        (d / "stormbio.py").write_text(STORM)
        (d / "stormhelp.py").write_text(HELP.format(f=f))
    (tmp_path / "two.yaml").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cfg_of(root, proj):
    return resolve("hyperrep", f"./{proj}/my_algos/stormbio.py:StormBiO",
                   {"dataset": "digits", "clients": 4, "participation": 0.5, "rounds": 20, "threads": 1,
                    "out_dir": str(root / "results")})


def cells(*cfgs):
    return [SimpleNamespace(cfg=c) for c in cfgs]


def test_two_files_of_one_name_never_share_a_run_and_run_side_by_side(two):
    from fbo_cli.grids.spec import load_spec

    a, b = cfg_of(two, "proj_a"), cfg_of(two, "proj_b")
    assert a.run_id != b.run_id and a.run_dir.parent == b.run_dir.parent
    exp = load_spec(two / "two.yaml")  # was refused as "the same runs"
    assert len({c.cfg.run_dir for c in exp.cells}) == 2


def test_accept_code_change_never_adopts_a_run_another_file_made(two):
    from fbo_cli.runs.runner import execute

    a, b = cfg_of(two, "proj_a"), cfg_of(two, "proj_b")
    execute(a)
    stale: dict = {}
    assert todo_runs(cells(b), accept=True, stale=stale) == cells(b) and not stale
    assert not (b.run_dir / "summary.json").exists()


def test_accept_then_restore_keeps_the_runs_and_the_stale_message_names_the_helper(two):
    from fbo_cli.runs.runner import execute

    a = cfg_of(two, "proj_a")
    execute(a)
    helper = two / "proj_a" / "my_algos" / "stormhelp.py"
    text = helper.read_text()
    helper.write_text(text + "# a comment\n")
    edited = cfg_of(two, "proj_a")
    stale: dict = {}
    assert len(todo_runs(cells(edited), stale=stale)) == 1
    why = next(iter(stale.values()))
    assert "stormhelp.py" in why and "stormbio.py" not in why, why
    assert todo_runs(cells(edited), accept=True) == []  # adopted: the run of the code before, recorded
    s = json.loads((edited.run_dir / "summary.json").read_text())
    assert s["code_accepted"][-1]["by"] == "--accept-code-change"
    assert (edited.run_dir / "metrics.csv").read_bytes() == (a.run_dir / "metrics.csv").read_bytes()
    helper.write_text(text)  # restored: the runs made by exactly this code are not stale
    again = cfg_of(two, "proj_a")
    assert todo_runs(cells(again)) == []
    helper.write_text(text + "# a comment\n")  # and the accepted edit again: its run stands
    assert todo_runs(cells(cfg_of(two, "proj_a"))) == []


def test_accepted_hashes_add_to_the_record():
    from fbo_cli.runs.identity import accepted, changes

    cfg = SimpleNamespace(code={"algorithm": {"u.U": "new"}, "task": {}, "commit": None})
    s = {"code": {"algorithm": {"u.U": "old"}, "task": {}}}
    s = accepted(cfg, s)
    assert changes(cfg, s) == ([], [])
    back = SimpleNamespace(code={"algorithm": {"u.U": "old"}, "task": {}, "commit": None})
    assert changes(back, s) == ([], [])  # the recorded code is still the run's


def test_a_helper_imported_inside_step_is_found_during_the_run(tmp_path):
    from fbo_cli.runs.runner import execute

    (tmp_path / "lazy").mkdir()
    (tmp_path / "lazy" / "lazyhelp61.py").write_text(HELP.format(f="0.999"))
    (tmp_path / "lazy" / "lz.py").write_text(textwrap.dedent('''
        from fbo_cli.algorithms.fednest import FedNest


        class Lazy(FedNest):
            def step(self):
                from lazyhelp61 import damp

                super().step()
                self.x = damp(self.x)
    '''))
    cfg = resolve("hyperrep", f"{tmp_path / 'lazy' / 'lz.py'}:Lazy",
                  {"dataset": "digits", "clients": 4, "participation": 0.5, "rounds": 10, "threads": 1,
                   "out_dir": str(tmp_path / "r")})
    assert execute(cfg)["status"] == "done"


def test_a_user_file_that_patches_a_built_in_cannot_make_or_reuse_its_runs(tmp_path, monkeypatch):
    """Issue 62: ``FedNest.outer_lr = lambda self: 0.0`` at import, beside the built-in fednest: refused, naming
    the attribute (the patched run would otherwise be stored and reused under the built-in's run id)."""
    import fbo_cli.algorithms.external as external
    from fbo_cli.algorithms.fednest import FedNest
    from fbo_cli.errors import UsageError
    from fbo_cli.grids.spec import load_spec

    monkeypatch.chdir(tmp_path)
    (tmp_path / "u.py").write_text("from fbo_cli.algorithms.fednest import FedNest\n\n"
                                   "FedNest.outer_lr = lambda self: 0.0\n\n\nclass U(FedNest):\n    pass\n")
    (tmp_path / "s.yaml").write_text(SPEC.replace("./proj_a/my_algos/stormbio.py:StormBiO", "./u.py:U")
                                     .replace("./proj_b/my_algos/stormbio.py:StormBiO", "fednest"))
    real = FedNest.__dict__.get("outer_lr")
    monkeypatch.setattr(external, "PATCHED", {}, raising=False)
    try:
        with pytest.raises(UsageError) as e:
            [c.cfg.run_id for c in load_spec(tmp_path / "s.yaml").cells]
        assert (e.value.kind, e.value.field) == ("user_code", "patched"), e.value  # refused, naming the change
        assert e.value.value == f"FedNest.outer_lr (changed by {tmp_path / 'u.py'})", e.value
    finally:
        if real is None:
            del FedNest.outer_lr
        else:
            FedNest.outer_lr = real
