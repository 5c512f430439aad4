"""``fbo run``: one algorithm on one task."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from ..errors import UsageError
from .common import err, interrupted_note, out, threads_first, user_errors


def run_progress(console: Console) -> Progress:
    """The run's bar: at 80 columns the count of rounds and the times keep their room; the label is cut first
    (to 20 columns), then the metric, which comes last (never wrapped)."""
    from rich.table import Column

    keep = lambda w: Column(no_wrap=True, min_width=w)  # noqa: E731
    cut = lambda w: Column(no_wrap=True, overflow="ellipsis", max_width=w)  # noqa: E731
    return Progress(TextColumn("{task.description}", style="bold", markup=False, table_column=cut(20)),
                    BarColumn(bar_width=16, table_column=keep(16)),
                    TextColumn("{task.completed:.0f}/{task.total:.0f} rounds", table_column=keep(16)),
                    TimeElapsedColumn(table_column=keep(7)), TextColumn("left", table_column=keep(4)),
                    TimeRemainingColumn(table_column=keep(7)),
                    TextColumn("{task.fields[metric]}", markup=False, table_column=cut(20)),
                    console=console, transient=False)


def _fmt_metric(row: dict[str, Any], metric: str) -> str:
    v = row.get(metric)
    return f"{metric}={v:.4f}" if isinstance(v, float) else ""


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
    from ..data import load_dataset
    from ..runs.config import load_config_file, parse_sets, resolve
    from ..runs.rundir import claim_root, make_dirs, prune_empty_run
    from ..runs.runner import Interrupted, LedgerError, execute

    threads_first()
    with user_errors():
        if tensorboard:
            try:
                import tensorboard as _  # noqa: F401
            except ImportError:
                raise UsageError("--tensorboard needs the tensorboard package: "
                                 "pip install -e '.[tensorboard]'", kind="unsupported", field="--tensorboard") from None
        task, algo, file_layer = config_layer(load_config_file(config) if config else {}, task, algo)
        cli_layer = {k: v for k, v in dict(
            dataset=dataset, partition=partition, clients=clients, participation=participation, alpha=alpha,
            lower=lower, rounds=rounds, max_iters=max_iters, time_limit=time_limit, eval_every=eval_every,
            target=target, seed=seed, device=device, data_dir=str(data_dir) if data_dir else None,
            out_dir=str(out_dir) if out_dir else None).items() if v is not None}
        cfg = resolve(task, algo, file_layer, cli_layer, parse_sets(set_))
        long_run_warning(cfg)
        if dry_run:
            from types import SimpleNamespace

            import yaml

            from ..runs.cost import cost_line

            typer.echo(f"# fbo run, resolved (run directory {cfg.run_dir}; nothing was run)")
            typer.echo(f"# time: {cost_line([SimpleNamespace(cfg=cfg)], 1)}")  # a comment: the YAML stays valid
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
            except Interrupted:  # the runner said where it stopped (its log line): once
                raise typer.Exit(130) from None
            except LedgerError as e:  # the algorithm's own bug: one message naming its step, no traceback of fbo's
                err.print(f"failed: {e} (results: {cfg.run_dir})", style="red", highlight=False)
                raise typer.Exit(1) from None
            except KeyboardInterrupt as e:  # after the loop's last look (its last evaluation): its checkpoint stays
                err.print(interrupted_note(e), style="yellow", highlight=False)
                raise typer.Exit(130) from None
    if tensorboard:
        from ..evidence.export import to_tensorboard

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


def long_run_warning(cfg) -> None:
    """Warn (stderr) when the cost model (:func:`fbo_cli.runs.cost.estimate_cost`: finished runs of the kind), at
    this machine's load now (:func:`fbo_cli.runs.cost.parallel`), puts this run above an hour."""
    from types import SimpleNamespace

    from ..runs.cost import LONG_RUN_S, longest_run, parallel

    secs, _ = longest_run([SimpleNamespace(cfg=cfg)])
    if secs > LONG_RUN_S:
        err.print(f"this run is estimated at about {secs / 3600:.1f} h on this machine ({parallel(1)[1]}; "
                  f"{cfg.run.rounds} rounds, {cfg.run.clients} clients x participation {cfg.run.participation:g}; "
                  f"from finished runs of its kind): fewer --rounds or --clients make it shorter; Ctrl-C keeps a "
                  "checkpoint", style="yellow", highlight=False)


def config_layer(data: dict[str, Any], task: str | None, algo: str | None) -> tuple[str, str, dict[str, Any]]:
    """(task, algorithm, override layer) of ``fbo run`` from a ``--config`` file: TASK and ``--algo`` may
    come from a run's config.yaml; an ``--algo`` that replaces the file's drops the file's hyperparameters
    the new algorithm does not have (said on stderr)."""
    from ..algorithms import REGISTRY
    from ..runs.config import _hints, flatten_run_config

    task = task or data.get("task")
    if not task:
        raise UsageError("give the TASK (e.g. `fbo run hyperrep --algo aggitd`), or --config with a run's "
                         "config.yaml", kind="missing", field="TASK")
    if data.get("task") and data["task"] != task:
        raise UsageError(f"the config file is for task '{data['task']}', not '{task}'",
                         kind="unsupported", field="task", value=task)
    algo = algo or data.get("algo_source") or data.get("algo")
    if not algo:
        raise UsageError("--algo is required (see `fbo list`), or --config with a run's config.yaml",
                         kind="missing", field="--algo")
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
