"""``fbo diagnose``: diagnostics behind choices recorded in docs/fidelity.md."""

from __future__ import annotations

import typer

from ..errors import UsageError
from .common import user_errors

MAX_ROUNDS = 100_000  # a diagnostic trains a few hundred rounds; more is a typo
diagnose_app = typer.Typer(no_args_is_help=True, help="Diagnostics behind choices recorded in docs/fidelity.md.")


@diagnose_app.command("truncation")
def diagnose_truncation(
    dataset: str = typer.Option("fashion-mnist", help="Dataset of the per-client-head setting."),
    grid: bool = typer.Option(False, help="A grid of Neumann steps and Q instead of each algorithm's defaults."),
    rounds: int = typer.Option(0, help="Train this many FedBiO-Local rounds first."),
    max_examples: int = typer.Option(1000, help="Examples per client and split."),
) -> None:
    """How much of the implicit hypergradient term the local-lower-level estimators keep (FedBiO-Local,
    FedBiOAcc-Local, AdaFBiO), against the exact one, on the per-client-head setting."""
    from ..evidence.diagnostics import truncation

    with user_errors():
        if not 0 <= rounds <= MAX_ROUNDS or not 1 <= max_examples <= 10**7:  # a typo of 1e23 would never end
            raise UsageError(f"--rounds must be in [0, {MAX_ROUNDS:,}] and --max-examples in [1, 10,000,000], got "
                             f"{rounds:.3g}, {max_examples:.3g}", kind="bad_value", field="--rounds/--max-examples",
                             value=(rounds, max_examples))
        truncation(dataset, grid, rounds, max_examples, echo=typer.echo)
