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
