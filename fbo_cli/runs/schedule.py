"""When a run is evaluated: the one rule of the run loop (:func:`fbo_cli.runs.loop.step_loop`, a run alone and
the runs of a batch alike), so that every method of a compare can be read on
one round grid.

Two schedules:

- ``eval_rounds`` set (a number of communication rounds): the round grid. A run is evaluated at the first
  outer iteration whose rounds reach each multiple of ``eval_rounds`` (an iteration of 7 rounds meets the
  grid of 10 at 14, 21, 35, ...: never before the grid point, and at most one iteration after it), and at the
  last outer iteration within the budget (where the algorithm declares its rounds per iteration, so that the
  next one is known to overrun it). Methods with different iteration lengths are then evaluated at the same
  grid points, each as soon as it has trained that far; rounds to a target keep the resolution they have as
  an interval (:func:`fbo_cli.runs.table.read_columns`).
- ``eval_rounds`` unset (the default, and every committed run): every ``eval_every`` outer iterations, as
  before (each method on its own round grid: ``eval_every`` times its rounds per iteration).

Both then end with an evaluation at the run's last iteration (the runner's, after the loop), as before.
"""

from __future__ import annotations


def evaluation_due(r, led, last_rounds: int, rounds_per_iteration: int | None) -> bool:
    """Whether the outer iteration that just ended (the run, or a run batch, at the ledger ``led``'s iterations
    and rounds; its last evaluation at ``last_rounds``) is evaluated, by the run settings ``r``
    (:class:`fbo_cli.runs.config.RunSettings`)."""
    iterations, rounds, every = led.iterations, led.rounds, r.eval_rounds
    if not every:
        return iterations % r.eval_every == 0
    if rounds // every > last_rounds // every:  # the first iteration that reached a new grid point
        return True
    # the last iteration within the budget: the next one (of a declared length) would overrun it
    return rounds_per_iteration is not None and rounds <= r.rounds < rounds + rounds_per_iteration
