"""The ``fbo`` command line: a module per command (``fbo_cli/cli/<command>.py``: parse, call, print),
their shared helpers in :mod:`fbo_cli.cli.common`.

Exit codes: 0 done, 1 the run failed or diverged, 2 usage error (bad input; no traceback).
"""

from __future__ import annotations

import typer

from . import (
    bench,
    check,
    clean,
    common,
    compare,
    cost,
    diagnose,
    export,
    fetch,
    figure,
    list,
    report,
    reproduce,
    run,
    show,
    tune,
    witness,
)

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
    help="Experiment runner for federated bilevel and federated minimax optimization.\n\n"
         "[bold]fbo run TASK --algo ALGO[/bold] runs one algorithm; "
         "[bold]fbo compare SPEC.yaml[/bold] runs a paper's grid and writes its table and plots; "
         "[bold]fbo list[/bold] shows tasks, algorithms, datasets and experiment specs.")

def _version(value: bool) -> None:
    if value:
        from .. import __version__
        from ..runs.identity import git_commit

        commit = git_commit()
        shown = commit if commit != "unrecorded" else "unknown: not in fbo's own git repository"
        typer.echo(f"fbo {__version__} (commit {shown})")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print fbo's version and the commit of its checkout, then exit.")) -> None:
    pass


# in the order `fbo --help` lists them
app.command(no_args_is_help=True)(run.run)
app.command(no_args_is_help=True)(compare.compare)
app.command()(cost.cost)
app.command("check")(check.check_cmd)
app.command(no_args_is_help=True)(tune.tune)
app.command()(reproduce.reproduce)
app.command()(report.report)
app.command(no_args_is_help=True)(fetch.fetch)
app.add_typer(figure.figure_app, name="figure")
app.command(no_args_is_help=True)(show.show)
app.command(no_args_is_help=True)(export.export)
app.command()(clean.clean)
app.command()(bench.bench)
app.command(no_args_is_help=True)(witness.witness)
app.add_typer(diagnose.diagnose_app, name="diagnose")
app.command("list")(list.list_)


def _unwrap(doc: str | None) -> str | None:
    """A help text as paragraphs: the source's line breaks inside a paragraph are spaces (the terminal wraps it,
    never mid-sentence where the source did)."""
    if not doc:
        return doc
    import inspect
    import re

    return "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", inspect.cleandoc(doc)))


def _unwrap_helps(t: typer.Typer) -> None:
    for c in t.registered_commands:
        c.help = _unwrap(c.help or (c.callback.__doc__ if c.callback else None))
    for g in t.registered_groups:
        g.typer_instance.info.help = _unwrap(g.typer_instance.info.help)
        _unwrap_helps(g.typer_instance)


_unwrap_helps(app)


def _guard(t: typer.Typer) -> None:
    """Every command behind :func:`.common.path_errors` (a path too long for the file system is bad input)."""
    for c in t.registered_commands:
        c.callback = common.path_errors(c.callback)
    for g in t.registered_groups:
        _guard(g.typer_instance)


_guard(app)


def main() -> None:
    app()
