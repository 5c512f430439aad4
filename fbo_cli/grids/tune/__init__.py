"""``fbo tune``: choose each method's hyperparameters on validation data, by a recorded procedure.

An experiment spec declares, per algorithm, the grid to search (``tune: {key: [values]}``; a key
``"a,b"`` sets both keys to each value, e.g. a lower step and the auxiliary step tied together), and
in a top-level ``tune:`` block how to search it:

```yaml
tune:
  seeds: [100]        # tuning seeds, disjoint from the evaluation seeds
  rounds: 40          # every tuning run's budget (communication rounds); budget: each setting's own
  score: heldout_loss # default: the task's (bilevel: the upper loss on 10% of each client's rows that
                      # neither level trains on; set: {heldout_frac: ...} changes the share); never the test set
  mode: min           # min | max (default: the task's)
  setting: "p=0.4"    # optional: tune on this setting only and use the values for every setting
  tail: 0.25          # the last quarter of the evaluations (at least 3): the score is their mean
  tolerance: 0.05     # reject a run whose score oscillates by more than this (relative) in that tail; off: no check
  set: {eval_every: 1}  # extra keys for the tuning runs
```

For every (algorithm, setting) the grid runs on the tuning seeds with the short budget (ordinary runs:
same run ids and cache as ``compare``, so an interrupted tuning continues). A grid point is
**rejected** when a run failed or diverged, when its score is not finite, when it ends no better than
its first evaluation (no progress), or when the score oscillates: over the tail window ``w_1..w_n``
of evaluations (the last ``tail`` share, at least 3), the oscillation
``(Σ|w_{k+1} - w_k| - |w_n - w_1|) / (2 mean|w|)`` (the up-and-down movement beyond the net trend,
relative to the level) exceeds ``tolerance``. Among the accepted points the best mean tail score over
the tuning seeds wins (ties: the first in grid order). Written to ``<out>/compare/<name>/``:
``tuned.yaml`` (the procedure and the chosen values), ``tuning.csv`` (every grid point's score,
oscillation, status and verdict) and ``tuning.png`` (the score against each tuned key, one line per
algorithm: the best score over the other keys at that value). ``fbo compare`` then runs the
evaluation seeds with the chosen values and says so in its table.

**Stability confirmation.** A choice next to a rejected value (the largest or smallest *stable*
value of a key) sits one grid step from instability, and one tuning seed may miss that: such a choice
runs on :data:`CONFIRM_SEEDS` more seeds (after the tuning seeds, never evaluation seeds), and if any
of those runs is rejected (failed, diverged, ...) the point is rejected and the next best is chosen
(and confirmed in turn when it too sits next to a rejected value). The confirmation runs veto a point;
they do not enter its score. ``tuned.yaml``'s ``confirmed`` lists each confirmed choice and its seeds.

**Ranking check.** When the tuning budget is shorter than a setting's evaluation budget, the top 3
accepted points of each (algorithm, setting) run again at the evaluation budget on the tuning seeds,
scored the same way: the check *holds* when the choice is still the best of them (a run that fails or
diverges there is rejected). ``ranking.csv`` has both scores of each point and ``tuned.yaml``'s
``ranking_check`` the verdicts, which ``fbo compare`` and the report state; ``--no-ranking-check``
skips it (``fbo compare`` then warns that the short budget was not checked).

**Resuming a recorded tuning.** Tuning runs are not committed evidence; their ``tuning.csv`` is. A
tuning resumed where the runs are absent (a fresh machine, the evidence copied into
``<out>/compare/<name>/``) takes each absent run's status, score, oscillation and cost from the
recorded ``tuning.csv`` when it was scored by the same rule (score, tail, budget), and runs only the
new points: a widened grid, its extensions, confirmations. ``tuning.csv`` marks those rows
``recorded``; ``--rerun`` runs everything again. An unfinished tuning keeps its record too: before
each batch of runs ``tuning.partial.csv`` (the table so far) and ``tuning.partial.yaml`` (its rule)
are rewritten, the report's evidence carries them, and the finished tuning removes them.

The package, in the order a tuning goes: :mod:`.grid` (the grids, their points and each tuning run's
configuration), :mod:`.rules` (scoring a run, rejecting a point, choosing, extending, confirming),
:mod:`.search` (the loop that runs them, the ranking check, ``--relabel`` and ``--ranking-only``),
:mod:`.record` (``tuning.csv``, ``tuned.yaml``, ``ranking.csv``, ``tuning.png``, the unfinished record and
the chosen-values table) and :mod:`.estimate` (what a tuning will cost, ``--dry-run``). The names below are
the package's interface: the commands and the tests import them from here.
"""

from __future__ import annotations

from .estimate import dry_run_text, tuning_estimate
from .grid import grid_points, point_error, tune_cells, tune_spec
from .record import chosen_rows, procedure_text
from .rules import (
    CONFIRM_SEEDS,
    MAX_EXTENSIONS,
    RANKING_TOP,
    _beyond,  # noqa: F401  (its tests)
    choose,
    extensions,
    score_run,
    unconfirmed,
)
from .search import ranking_only, relabel, run_tuning

__all__ = ["CONFIRM_SEEDS", "MAX_EXTENSIONS", "RANKING_TOP", "choose", "chosen_rows", "dry_run_text",
           "extensions", "grid_points", "point_error", "procedure_text", "ranking_only", "relabel", "run_tuning",
           "score_run", "tune_cells", "tune_spec", "tuning_estimate", "unconfirmed"]
