"""What the CLI tests share: a runner, a tiny run's options, the one run directory of a results root."""

from typer.testing import CliRunner

from fbo_cli.cli import app

runner = CliRunner()
TINY = ["--dataset", "digits", "--clients", "6", "--participation", "0.5", "--rounds", "30", "--eval-every", "2",
        "--quiet"]


def run(*args):
    return runner.invoke(app, list(args))


def run_dir(out):
    dirs = list((out / "hyperrep").glob("*/*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def invoke(args):
    """The command line ``args`` through the runner, whose stdout is not a terminal (as `fbo list | grep`)."""
    return runner.invoke(app, list(args))


def error_of(r):
    """The error behind a command that exited with code 2: fbo's :class:`UsageError` (whose ``kind`` and fields a
    test asserts on, not its wording) or click's own (a bad option: ``typer.BadParameter``). ``user_errors`` raises
    ``typer.Exit(2)`` while it handles the UsageError and click turns that exit into ``SystemExit`` while it handles
    the exit, so the error is on the chain of contexts of ``r.exception``; None when there is none."""
    import typer

    from fbo_cli.errors import UsageError

    click_error = typer.BadParameter.__bases__[0]  # the UsageError of the click that typer runs on (its own copy)
    e = r.exception
    while e is not None and not isinstance(e, (UsageError, click_error)):
        e = e.__context__
    return e


def fails_with(r, kind: str, **fields) -> bool:
    """Whether the command exited with code 2 on a :class:`UsageError` of this ``kind`` whose fields (``field``,
    ``path``, ``value``) are as given; ``assert fails_with(r, "bad_value", field="seed"), r.output``."""
    e = error_of(r)
    return (r.exit_code == 2 and e is not None and getattr(e, "kind", None) == kind
            and all(getattr(e, k) == v for k, v in fields.items()))
