"""``fbo export``: finished runs' metrics for other tools."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UsageError
from .common import out, user_errors


def export(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories (results/<task>/<algo>/<run-id>)."),
    tensorboard: bool = typer.Option(True, "--tensorboard/--no-tensorboard",
                                     help="Write TensorBoard scalars into <run>/tensorboard/."),
) -> None:
    """Export finished runs' metrics for other tools: TensorBoard scalars per metric, stepped by rounds
    (`tensorboard --logdir results`; needs pip install -e '.\\[tensorboard]')."""
    from ..evidence.export import to_tensorboard

    with user_errors():
        for d in run_dirs:
            if not (d / "metrics.csv").is_file():
                raise UsageError(f"{d}: not a run directory (no metrics.csv)", kind="not_found", field="run", path=d)
        if tensorboard:
            for d in run_dirs:
                out.print(f"written: {to_tensorboard(d)}", highlight=False)
