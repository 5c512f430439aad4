"""The bad-input catalogue: each case exits 2 with a message naming the key or file, prints no
traceback, and leaves no run directory or output file behind (half-written or not)."""

import gzip
from pathlib import Path

import pytest
from cli_helpers import error_of
from typer.testing import CliRunner

from fbo_cli.cli import app

runner = CliRunner()
RUN = ["run", "hyperrep", "--algo", "aggitd", "--dataset", "digits", "--rounds", "5", "--quiet"]
FASHION = Path("/usr/share/datasets/fashion-mnist")

SPEC = """
name: b
task: hyperrep
base: {{dataset: digits, clients: 6, rounds: 5, threads: 1}}
algorithms: [{{name: A, algo: aggitd}}]
{extra}
"""

RUN_CASES = [
    (["--seed", "-1"], "bad_value", "seed"),
    (["--seed", "99999999999999999999"], "bad_value", "seed"),
    (["--set", "threads=-1"], "bad_value", "threads"),
    (["--set", "shards_per_client=0", "--partition", "shards"], "bad_value", "shards_per_client"),
    (["--set", "alpha=nan", "--partition", "dirichlet"], "bad_value", "alpha"),
    (["--set", "time_limit=nan"], "bad_value", "time_limit"),
    (["--target", "nan"], "bad_value", "target"),
    (["--set", "batch_size=0"], "bad_value", "batch_size"),
    (["--set", "tau=0"], "bad_value", "tau"),
    (["--set", "outer_lr=nan"], "bad_value", "outer_lr"),
    (["--set", "outer_lr=-0.1"], "bad_value", "outer_lr"),
    (["--set", "inner_lr=inf"], "bad_value", "inner_lr"),
    (["--set", "lam=-1"], "bad_value", "lam"),
    (["--set", "algo=fednest"], "bad_value", "algo"),
    (["--set", "checkpoint_every=0"], "bad_value", "checkpoint_every"),
    (["--set", "val_frac=1.5"], "bad_value", "val_frac"),
    (["--clients", "0"], "bad_value", "clients"),
    (["--eval-every", "0"], "bad_value", "eval_every"),
    (["--max-iters", "0"], "bad_value", "max_iters"),
    (["--rounds", "-5"], "bad_value", "rounds"),
    (["--participation", "1.5"], "bad_value", "participation"),
    (["--set", "tau=abc"], "bad_value", "tau"),
    (["--set", "bogus=1"], "unknown", "key"),
    (["--set", "notakeyvalue"], "bad_value", "--set"),
    (["--partition", "zebra"], "unknown", "partition"),
    (["--device", "tpu"], "bad_value", "device"),
    (["--dataset", "nope"], "unknown", "dataset"),
    (["--clients", "5000"], "bad_value", "clients"),
    (["--seed", "4294967296"], "bad_value", "seed"),
    (["--set", "hidden=0"], "bad_value", "hidden"),
    (["--set", "hidden=1000000000000"], "bad_value", "hidden"),
    (["--set", "threads=100000"], "bad_value", "threads"),
    (["--set", "shards_per_client=1000000000", "--partition", "shards"], "bad_value", "shards_per_client"),
    (["--set", "lower_epochs=100000000"], "bad_value", "lower_epochs"),
    (["--set", "N=1000000000"], "bad_value", "N"),
    (["--set", "hidden=[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], "
      "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], "
      "&e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]]"], "bad_yaml", "aliases"),
]


@pytest.mark.parametrize("args,kind,field", RUN_CASES, ids=[" ".join(a) for a, *_ in RUN_CASES])
def test_run_bad_input(tmp_path, args, kind, field):
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), *args], (kind, field))


def check(tmp_path, args, says, extra_ok=()):
    """``args`` exit 2 on an error that ``says``: its ``(kind, field)`` or ``(kind, field, value)``, or (where the
    error has no kind yet) a fragment of its message; no traceback, and nothing written under ``out``."""
    r = runner.invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit), r.output
    if isinstance(says, tuple):
        e = error_of(r)
        assert (e.kind, e.field, e.value)[:len(says)] == says, text
    else:
        assert says in text, text
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and p.name != ".lock"] \
        if (tmp_path / "out").exists() else []
    assert not written, written


def test_algorithm_not_made_for_the_task(tmp_path):
    check(tmp_path, ["run", "hyperrep", "--algo", "codasca", "--out-dir", str(tmp_path / "out")],
          ("unsupported", "task", "hyperrep"))


def test_algorithm_not_made_for_the_config(tmp_path):
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), "--lower", "local"], ("unsupported", "lower", "local"))


def test_out_dir_under_a_regular_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    check(tmp_path, [*RUN, "--out-dir", str(f / "out")], ("unwritable", "blocked"))


def test_data_dir_under_a_regular_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    check(tmp_path, [*RUN, "--dataset", "fashion-mnist", "--data-dir", str(f / "d"), "--out-dir",
                     str(tmp_path / "out")], ("unwritable", "blocked"))


@pytest.mark.skipif(not FASHION.is_dir(), reason="needs Debian's Fashion-MNIST")
@pytest.mark.parametrize("size", [0, 1000], ids=["empty", "truncated"])
def test_truncated_or_empty_dataset_file(tmp_path, size):
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for n in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
              "t10k-labels-idx1-ubyte"):
        with gzip.open(FASHION / f"{n}.gz") as src:
            (raw / n).write_bytes(src.read(size))
    check(tmp_path, [*RUN, "--dataset", "fashion-mnist", "--data-dir", str(tmp_path / "data"), "--out-dir",
                     str(tmp_path / "out")], "train-images-idx3-ubyte:")  # the message names the bad file


@pytest.mark.parametrize("text,error", [("- a\n- b\n", ("bad_spec", "mapping")), ("tau: [1\n", ("bad_yaml", "syntax"))])
def test_config_file_not_a_mapping(tmp_path, text, error):
    c = tmp_path / "c.yaml"
    c.write_text(text)
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), "--config", str(c)], error)


def test_config_file_missing(tmp_path):
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), "--config", str(tmp_path / "no.yaml")],
          ("not_found", None))


# (spec line, the error's (kind, field[, value])): a spec's own entry is a bad_spec naming its key; a cell's value
# (a setting's tau) keeps the kind and key of the run's check
SPEC_CASES = [
    ("metric: test_ac", ("unknown", "metric", "test_ac")),
    ("metrics: [test_loss, tset_acc]", ("unknown", "metric", "tset_acc")),
    ("reference: [1, 2]", ("bad_spec", "reference")),
    ("reference: {A: {nope: {final: 1}}}", ("bad_spec", "reference", "nope")),
    ("reference: {Z: {default: {final: 1}}}", ("bad_spec", "reference", "Z")),
    ("settings: []", ("bad_spec", "settings")),
    ("seeds: [-1]", ("bad_spec", "seeds")),
    ("seeds: [0, 0]", ("bad_spec", "seeds")),
    ("target: .nan", ("bad_spec", "target")),
    ("x: bogus", ("bad_spec", "x", "bogus")),
    ("colour: red", ("unknown", "key", "colour")),
    ("settings: [{name: s, set: {tau: 0}}]", ("bad_value", "tau", 0)),
    ("settings: [{name: s, sett: {}}]", ("unknown", "key", "sett")),
    ("settings: [{set: {}}]", ("bad_spec", "settings")),
]


def _spec(tmp_path, extra="", algos=None):
    p = tmp_path / "s.yaml"
    text = SPEC.format(extra=extra).replace("dataset: digits,", f"dataset: digits, out_dir: {tmp_path / 'out'},")
    if algos is not None:
        text = text.replace("algorithms: [{name: A, algo: aggitd}]", algos)
    p.write_text(text)
    return p


@pytest.mark.parametrize("extra,error", SPEC_CASES, ids=[e for e, _ in SPEC_CASES])
def test_spec_bad_input(tmp_path, extra, error):
    check(tmp_path, ["compare", str(_spec(tmp_path, extra))], error)


@pytest.mark.parametrize("algos,error", [
    ("algorithms: []", ("bad_spec", "algorithms")),
    ("algorithms: [{name: X, algo: aggitd}, {name: X, algo: fednest}]", ("bad_spec", "algorithms", "X")),
    ("algorithms: [{name: A, algo: aggitd}, {name: B, algo: aggitd}]", ("bad_spec", "algorithms", "B")),
    ("algorithms: [{name: A, algo: nope}]", ("unknown", "algorithm", "nope")),
    ("algorithms: [{name: A}]", ("bad_spec", "algorithms")),
    ("algorithms: [{name: A, algo: codasca}]", ("unsupported", "task", "hyperrep")),
    ("algorithms: [{name: A, algo: aggitd, set: {algo: fednest}}]", ("bad_value", "algo")),
    ("", ("bad_spec", "algorithms")),
])
def test_spec_bad_algorithms(tmp_path, algos, error):
    check(tmp_path, ["compare", str(_spec(tmp_path, algos=algos))], error)


@pytest.mark.parametrize("args,error", [
    (["--set", "algo=fednest"], ("bad_value", "algo", "--set")),
    (["--executor", "bogus"], ("unknown", "--executor", "bogus")),
    (["--cpus-per-run", "2"], ("unsupported", "--executor")),
    (["--jobs", "0"], ("bad_value", "--jobs", 0)),
    (["--seeds", "a,b"], ("bad_value", "--seeds", "a,b")),
    (["--set", "outer_lr=nan"], ("bad_value", "outer_lr")),
])
def test_compare_bad_options(tmp_path, args, error):
    check(tmp_path, ["compare", str(_spec(tmp_path)), *args], error)


def test_spec_not_a_mapping(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("- task: hyperrep\n")
    check(tmp_path, ["compare", str(p)], ("bad_spec", "mapping"))


def test_spec_missing_task(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("algorithms: [{algo: aggitd}]\n")
    check(tmp_path, ["compare", str(p)], ("bad_spec", "task"))


def test_compare_out_dir_under_a_regular_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    check(tmp_path, ["compare", str(_spec(tmp_path)), "--out-dir", str(f / "o")], ("unwritable", "blocked"))


def test_no_run_on_empty_results(tmp_path):
    check(tmp_path, ["compare", str(_spec(tmp_path)), "--no-run"], ("not_found", "--no-run"))


@pytest.mark.parametrize("content,error", [(b"", ("bad_spec", "task")), (b"\x00\xff\x80binary", ("bad_yaml", "text"))],
                         ids=["empty", "binary"])
def test_empty_or_binary_spec(tmp_path, content, error):
    p = tmp_path / "s.yaml"
    p.write_bytes(content)
    r = runner.invoke(app, ["compare", str(p)])
    e = error_of(r)
    assert r.exit_code == 2 and "Traceback" not in r.output and (e.kind, e.field, e.path) == (*error, str(p)), r.output


OTHER_CASES = [
    (["run", "auc", "--algo", "codasca", "--set", "channels=0", "--rounds", "2"], ("bad_value", "channels")),
    (["run", "auc", "--algo", "codasca", "--set", "norm_groups=0", "--rounds", "2"], ("bad_value", "norm_groups")),
    (["run", "auc", "--algo", "codasca", "--set", "I=1000000000", "--rounds", "2"], ("bad_value", "I")),
    (["run", "hyperrep", "--algo", "adafbio", "--set", "K=1000000000", "--rounds", "2"], ("bad_value", "K")),
    (["run", "hfl", "--algo", "zohfl", "--set", "tau=1e300", "--rounds", "2"], ("bad_value", "tau")),
    (["run", "hfl", "--algo", "zohfl", "--set", "num_dirs=1000000000", "--rounds", "2"], ("bad_value", "num_dirs")),
    (["run", "hfl", "--algo", "zohfl", "--set", "pretrain_steps=1000000000", "--rounds", "2"],
     ("bad_value", "pretrain_steps")),
]


@pytest.mark.parametrize("args,error", OTHER_CASES, ids=[" ".join(a[1:]) for a, _ in OTHER_CASES])
def test_count_settings_have_upper_bounds(tmp_path, args, error):
    check(tmp_path, [*args, "--out-dir", str(tmp_path / "out")], error)


BOMB = "\n".join([f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "lol"] * 9) + "]" for i in range(9)])
SPEC_VALUE_CASES = [
    ("band", "band: [std]", ("bad_spec", "band", ["std"])),
    ("tolerance word", "tolerance: abc", ("bad_spec", "tolerance", "abc")),
    ("tolerance nan", "tolerance: .nan", ("bad_spec", "tolerance")),
    ("seed 2^32", "seeds: [4294967296]", ("bad_spec", "seeds")),
    ("1001 seeds", "seeds: [" + ", ".join(map(str, range(1001))) + "]", ("bad_spec", "seeds", 1001)),
    ("claim margin", "claims: [{text: t, metric: test_acc, better: A, than: A, margin: abc}]",
     ("bad_spec", "claims", "t")),
    ("tune score", "tune: {score: 5, seeds: [100]}", ("bad_spec", "tune.score", 5)),
    ("tune tolerance", "tune: {tolerance: .nan, seeds: [100]}", ("bad_spec", "tune.tolerance")),
    ("deep yaml", "description: " + "[" * 20000 + "]" * 20000, ("bad_yaml", "depth")),
    ("alias bomb", "title: &t [" + ", ".join(["x"] * 10) + "]\n" + BOMB.replace("lol", "*t"), ("bad_yaml", "aliases")),
]


@pytest.mark.parametrize("extra,error", [c[1:] for c in SPEC_VALUE_CASES], ids=[c[0] for c in SPEC_VALUE_CASES])
def test_spec_values_sizes_and_yaml_bombs(tmp_path, extra, error):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra=extra))
    check(tmp_path, ["compare", str(p), "--out-dir", str(tmp_path / "out"), "--dry-run"], error)


def test_an_algorithm_list_and_a_huge_tuning_grid_are_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra="").replace("algo: aggitd", "algo: [aggitd]"))
    check(tmp_path, ["compare", str(p), "--out-dir", str(tmp_path / "out")], "must be a single name")
    grid = "{" + ", ".join(f"k{i}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" for i in range(6)) + "}"
    p.write_text(SPEC.format(extra="tune: {seeds: [100]}").replace("algo: aggitd", f"algo: aggitd, tune: {grid}"))
    for cmd in (["tune", str(p), "--dry-run"], ["cost", str(p)]):
        check(tmp_path, [*cmd, "--out-dir", str(tmp_path / "out")], "1,000,000 points")


@pytest.mark.parametrize("address", [":", "localhost", "host:port", "h:99999"])
def test_a_malformed_ray_address(tmp_path, address):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra=""))
    check(tmp_path, ["compare", str(p), "--executor", "ray", "--address", address, "--out-dir", str(tmp_path / "out")],
          "--address must be HOST:PORT")


def _not_ray_server():
    """A local server that answers once, as a web server would: something listens, but not Ray's GCS."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def answer():
        c, _ = srv.accept()
        c.recv(100)
        c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        c.close()

    threading.Thread(target=answer, daemon=True).start()
    return srv


def test_a_port_that_answers_but_is_not_ray(tmp_path):
    from fbo_cli.errors import UsageError
    from fbo_cli.grids.executors.raygrid import check_reachable

    srv = _not_ray_server()
    with pytest.raises(UsageError, match="not a Ray cluster"):
        check_reachable(f"127.0.0.1:{srv.getsockname()[1]}")
    srv.close()


@pytest.mark.parametrize("cmd", ["compare", "tune"])
def test_a_grid_at_a_port_that_answers_but_is_not_ray_writes_nothing(tmp_path, cmd):
    """The whole command, not only the check: exit 2 on a ``bad_value`` of ``--address`` before Ray connects
    (Ray itself would wait for ever on a server that is not its GCS) and before the grid writes anything: no
    results root marked, no spec folder claimed (a later spec file of that name found it taken)."""
    pytest.importorskip("ray")
    srv = _not_ray_server()
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra="tune: {seeds: [100]}").replace("algo: aggitd",
                                                                    "algo: aggitd, tune: {outer_lr: [0.5, 5]}"))
    address = f"127.0.0.1:{srv.getsockname()[1]}"
    check(tmp_path, [cmd, str(p), "--executor", "ray", "--address", address, "--out-dir", str(tmp_path / "out")],
          ("bad_value", "--address", address))
    srv.close()


def test_cost_jobs_must_be_positive(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra=""))
    check(tmp_path, ["cost", str(p), "--jobs", "-3"], ("bad_value", "--jobs"))


def test_a_tuned_yaml_of_another_grid_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra="tune: {seeds: [100]}").replace("algo: aggitd",
                                                                    "algo: aggitd, tune: {outer_lr: [0.5, 5]}"))
    d = tmp_path / "out" / "compare" / "b"
    d.mkdir(parents=True)
    (d / "tuned.yaml").write_text("grids: {A: {outer_lr: [0.01, 0.1]}}\nchosen: {A: {default: {outer_lr: 0.1}}}\n")
    r = runner.invoke(app, ["compare", str(p), "--out-dir", str(tmp_path / "out"), "--dry-run"])
    assert r.exit_code == 2 and "another tuning grid" in " ".join(r.output.split()), r.output
    (d / "tuned.yaml").write_text("grids: {A: {outer_lr: [0.5, 5]}, Old: {}}\nchosen: {A: {default: {outer_lr: 5}}}\n")
    r = runner.invoke(app, ["compare", str(p), "--out-dir", str(tmp_path / "out"), "--dry-run"])
    assert r.exit_code == 0, r.output  # a row without a grid, added or removed, changes no tuned choice


def test_a_lock_linked_out_of_the_run_is_not_followed(tmp_path):
    from fbo_cli.errors import UsageError
    from fbo_cli.runs.config import resolve
    from fbo_cli.runs.runner import execute

    cfg = resolve("hyperrep", "aggitd", {"dataset": "digits", "clients": 4, "rounds": 2, "threads": 1,
                                         "out_dir": str(tmp_path / "out")})
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / ".lock").symlink_to(tmp_path / "target")
    with pytest.raises(UsageError, match="symbolic link"):
        execute(cfg)
    assert not (tmp_path / "target").exists()


def test_user_text_is_printed_as_text_never_as_markup(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra='settings: [{name: "p=[/b]", set: {}}]')
                 .replace("name: A,", 'name: "A[/x] [tuned]",').replace("rounds: 5", "rounds: 2"))
    out = tmp_path / "[/x]"
    r = runner.invoke(app, ["compare", str(p), "--out-dir", str(out)])
    assert r.exit_code == 0 and r.exception is None, r.output
    flat = " ".join(r.output.split())
    assert "A[/x] [tuned]" in flat and "p=[/b]" in flat and f"{out}/compare/b/table.md" in r.output.replace("\n", "")
