"""The bad-input catalogue: each case exits 2 with a message naming the key or file, prints no
traceback, and leaves no run directory or output file behind (half-written or not)."""

import gzip
from pathlib import Path

import pytest
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
    (["--seed", "-1"], "seed must be in [0, 2^32)"),
    (["--seed", "99999999999999999999"], "seed must be in [0, 2^32)"),
    (["--set", "threads=-1"], "threads must be in [1, 1024]"),
    (["--set", "shards_per_client=0", "--partition", "shards"], "shards_per_client must be in [1, 10000]"),
    (["--set", "alpha=nan", "--partition", "dirichlet"], "'alpha' must be a finite number"),
    (["--set", "time_limit=nan"], "'time_limit' must be a finite number"),
    (["--target", "nan"], "'target' must be a finite number"),
    (["--set", "batch_size=0"], "'batch_size' must be >= 1, got 0"),
    (["--set", "tau=0"], "'tau' must be >= 1, got 0"),
    (["--set", "outer_lr=nan"], "'outer_lr' must be a finite number"),
    (["--set", "outer_lr=-0.1"], "'outer_lr' must be >= 0"),
    (["--set", "inner_lr=inf"], "'inner_lr' must be a finite number"),
    (["--set", "lam=-1"], "'lam' must be >= 0"),
    (["--set", "algo=fednest"], "'algo' cannot be set with --set"),
    (["--set", "checkpoint_every=0"], "checkpoint_every must be >= 1"),
    (["--set", "val_frac=1.5"], "val_frac must be in (0, 1)"),
    (["--clients", "0"], "clients must be >= 1"),
    (["--eval-every", "0"], "eval_every must be >= 1"),
    (["--max-iters", "0"], "max_iters must be > 0"),
    (["--rounds", "-5"], "must be > 0"),
    (["--participation", "1.5"], "participation must be in (0, 1]"),
    (["--set", "tau=abc"], "'tau' expects int"),
    (["--set", "bogus=1"], "unknown key 'bogus'"),
    (["--set", "notakeyvalue"], "--set expects key=value"),
    (["--partition", "zebra"], "unknown partition"),
    (["--device", "tpu"], "device must be one of"),
    (["--dataset", "nope"], "unknown dataset 'nope'"),
    (["--clients", "5000"], "clients (5000) exceeds"),
    (["--seed", "4294967296"], "seed must be in [0, 2^32)"),
    (["--set", "hidden=0"], "'hidden' must be >= 1, got 0"),
    (["--set", "hidden=1000000000000"], "'hidden' must be <= 100000"),
    (["--set", "threads=100000"], "threads must be in [1, 1024]"),
    (["--set", "shards_per_client=1000000000", "--partition", "shards"], "shards_per_client must be in [1, 10000]"),
    (["--set", "lower_epochs=100000000"], "'lower_epochs' must be <= 1000"),
    (["--set", "N=1000000000"], "'N' must be <= 1000"),
    (["--set", "hidden=[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], "
      "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], "
      "&e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]]"], "an alias bomb"),
]


@pytest.mark.parametrize("args,msg", RUN_CASES, ids=[" ".join(a) for a, _ in RUN_CASES])
def test_run_bad_input(tmp_path, args, msg):
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), *args], msg)


def check(tmp_path, args, msg, extra_ok=()):
    r = runner.invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert msg in text, text
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and p.name != ".lock"] \
        if (tmp_path / "out").exists() else []
    assert not written, written


def test_algorithm_not_made_for_the_task(tmp_path):
    check(tmp_path, ["run", "hyperrep", "--algo", "codasca", "--out-dir", str(tmp_path / "out")],
          "algorithm 'codasca' does not run on task 'hyperrep'")


def test_algorithm_not_made_for_the_config(tmp_path):
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), "--lower", "local"], "lower=local")


def test_out_dir_under_a_regular_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    check(tmp_path, [*RUN, "--out-dir", str(f / "out")], "a part of that path is a regular file")


def test_data_dir_under_a_regular_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    check(tmp_path, [*RUN, "--dataset", "fashion-mnist", "--data-dir", str(f / "d"), "--out-dir",
                     str(tmp_path / "out")], str(f / "d"))


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


@pytest.mark.parametrize("text,msg", [("- a\n- b\n", "must hold a mapping"), ("tau: [1\n", "not valid YAML")])
def test_config_file_not_a_mapping(tmp_path, text, msg):
    c = tmp_path / "c.yaml"
    c.write_text(text)
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), "--config", str(c)], msg)


def test_config_file_missing(tmp_path):
    check(tmp_path, [*RUN, "--out-dir", str(tmp_path / "out"), "--config", str(tmp_path / "no.yaml")],
          "config file not found")


SPEC_CASES = [
    ("metric: test_ac", "metric 'test_ac' is not a metric"),
    ("metrics: [test_loss, tset_acc]", "metric 'tset_acc' is not a metric"),
    ("reference: [1, 2]", "reference must map"),
    ("reference: {A: {nope: {final: 1}}}", "names setting 'nope'"),
    ("reference: {Z: {default: {final: 1}}}", "names algorithm 'Z'"),
    ("settings: []", "'settings' is empty"),
    ("seeds: [-1]", "seeds must be distinct integers in [0, 2^32)"),
    ("seeds: [0, 0]", "seeds must be distinct"),
    ("target: .nan", "'target' must be a finite number"),
    ("x: bogus", "x and x_also must be among"),
    ("colour: red", "unknown key(s) colour"),
    ("settings: [{name: s, set: {tau: 0}}]", "'tau' must be >= 1"),
    ("settings: [{name: s, sett: {}}]", "unknown key(s) sett"),
    ("settings: [{set: {}}]", "needs a 'name' key"),
]


def _spec(tmp_path, extra="", algos=None):
    p = tmp_path / "s.yaml"
    text = SPEC.format(extra=extra).replace("dataset: digits,", f"dataset: digits, out_dir: {tmp_path / 'out'},")
    if algos is not None:
        text = text.replace("algorithms: [{name: A, algo: aggitd}]", algos)
    p.write_text(text)
    return p


@pytest.mark.parametrize("extra,msg", SPEC_CASES, ids=[e for e, _ in SPEC_CASES])
def test_spec_bad_input(tmp_path, extra, msg):
    check(tmp_path, ["compare", str(_spec(tmp_path, extra))], msg)


@pytest.mark.parametrize("algos,msg", [
    ("algorithms: []", "'algorithms' is empty"),
    ("algorithms: [{name: X, algo: aggitd}, {name: X, algo: fednest}]", "two algorithms are named 'X'"),
    ("algorithms: [{name: A, algo: aggitd}, {name: B, algo: aggitd}]", "are the same runs"),
    ("algorithms: [{name: A, algo: nope}]", "unknown algorithm 'nope'"),
    ("algorithms: [{name: A}]", "needs a 'algo' key"),
    ("algorithms: [{name: A, algo: codasca}]", "does not run on task"),
    ("algorithms: [{name: A, algo: aggitd, set: {algo: fednest}}]", "'algo' cannot be set"),
    ("", "missing required key 'algorithms'"),
])
def test_spec_bad_algorithms(tmp_path, algos, msg):
    check(tmp_path, ["compare", str(_spec(tmp_path, algos=algos))], msg)


@pytest.mark.parametrize("args,msg", [
    (["--set", "algo=fednest"], "'algo' and 'task' cannot be set"),
    (["--executor", "bogus"], "--executor must be one of"),
    (["--cpus-per-run", "2"], "go with --executor ray"),
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--seeds", "a,b"], "--seeds expects comma-separated integers"),
    (["--set", "outer_lr=nan"], "'outer_lr' must be a finite number"),
])
def test_compare_bad_options(tmp_path, args, msg):
    check(tmp_path, ["compare", str(_spec(tmp_path)), *args], msg)


def test_spec_not_a_mapping(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("- task: hyperrep\n")
    check(tmp_path, ["compare", str(p)], "must hold a mapping")


def test_spec_missing_task(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("algorithms: [{algo: aggitd}]\n")
    check(tmp_path, ["compare", str(p)], "missing required key 'task'")


def test_compare_out_dir_under_a_regular_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    check(tmp_path, ["compare", str(_spec(tmp_path)), "--out-dir", str(f / "o")], "regular file")


def test_no_run_on_empty_results(tmp_path):
    check(tmp_path, ["compare", str(_spec(tmp_path)), "--no-run"], "run it without --no-run")


@pytest.mark.parametrize("content", [b"", b"\x00\xff\x80binary"], ids=["empty", "binary"])
def test_empty_or_binary_spec(tmp_path, content):
    p = tmp_path / "s.yaml"
    p.write_bytes(content)
    r = runner.invoke(app, ["compare", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "s.yaml" in " ".join(r.output.split()), r.output


OTHER_CASES = [
    (["run", "auc", "--algo", "codasca", "--set", "channels=0", "--rounds", "2"], "'channels' must be >= 1"),
    (["run", "auc", "--algo", "codasca", "--set", "norm_groups=0", "--rounds", "2"], "'norm_groups' must be >= 1"),
    (["run", "auc", "--algo", "codasca", "--set", "I=1000000000", "--rounds", "2"], "'I' must be <= 100000"),
    (["run", "hyperrep", "--algo", "adafbio", "--set", "K=1000000000", "--rounds", "2"], "'K' must be <= 1000"),
    (["run", "hfl", "--algo", "zohfl", "--set", "tau=1e300", "--rounds", "2"], "'tau' must be <= 10000"),
    (["run", "hfl", "--algo", "zohfl", "--set", "num_dirs=1000000000", "--rounds", "2"], "'num_dirs' must be <= 1000"),
    (["run", "hfl", "--algo", "zohfl", "--set", "pretrain_steps=1000000000", "--rounds", "2"],
     "'pretrain_steps' must be <= 100000"),
]


@pytest.mark.parametrize("args,msg", OTHER_CASES, ids=[" ".join(a[1:]) for a, _ in OTHER_CASES])
def test_count_settings_have_upper_bounds(tmp_path, args, msg):
    check(tmp_path, [*args, "--out-dir", str(tmp_path / "out")], msg)


BOMB = "\n".join([f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "lol"] * 9) + "]" for i in range(9)])
SPEC_CASES_41 = [
    ("band: [std]", "'band' must be one of"),
    ("tolerance: abc", "'tolerance' must be a finite number >= 0"),
    ("tolerance: .nan", "'tolerance' must be a finite number >= 0"),
    ("seeds: [4294967296]", "seeds must be distinct integers in [0, 2^32)"),
    ("seeds: [" + ", ".join(map(str, range(1001))) + "]", "1,001 seeds; fbo takes at most 1,000"),
    ("claims: [{text: t, metric: test_acc, better: A, than: A, margin: abc}]", "'margin' must be a finite number"),
    ("tune: {score: 5, seeds: [100]}", "tune.score must be the name"),
    ("tune: {tolerance: .nan, seeds: [100]}", "tune.tolerance must be a number"),
    ("description: " + "[" * 20000 + "]" * 20000, "nested more than 50 levels deep"),
    ("title: &t [" + ", ".join(["x"] * 10) + "]\n" + BOMB.replace("lol", "*t"), "an alias bomb"),
]


@pytest.mark.parametrize("extra,msg", SPEC_CASES_41, ids=[m for _, m in SPEC_CASES_41])
def test_spec_values_sizes_and_yaml_bombs(tmp_path, extra, msg):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra=extra))
    check(tmp_path, ["compare", str(p), "--out-dir", str(tmp_path / "out"), "--dry-run"], msg)


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


def test_a_port_that_answers_but_is_not_ray(tmp_path):
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
    from fbo_cli.errors import UsageError
    from fbo_cli.grids.executors.raygrid import check_reachable

    with pytest.raises(UsageError, match="not a Ray cluster"):
        check_reachable(f"127.0.0.1:{srv.getsockname()[1]}")
    srv.close()


def test_cost_jobs_must_be_positive(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(extra=""))
    check(tmp_path, ["cost", str(p), "--jobs", "-3"], "--jobs must be >= 1")


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
