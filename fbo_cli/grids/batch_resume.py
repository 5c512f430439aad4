"""An interrupted run batch resumes as a batch (issue 61).

When a batch is interrupted, each of its runs writes its own checkpoint (the run as it would be alone,
:func:`fbo_cli.algorithms.runs_as_clients.show`). The runs of one seed that all hold a checkpoint of the same outer
iteration, the same generator state and the same ledger resume together: each checkpoint is restored in turn into
the seed's one build (its batch state kept aside), the batch is stacked from the last, and every run's batch
state is put back at its position. The batch then steps on as the uninterrupted batch would have, bit for bit.
Runs whose checkpoints do not agree (another iteration: one was interrupted alone) resume alone, as before.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


class ResumeApart(ValueError):
    """The checkpoints of a seed group cannot resume as one batch (they resume alone)."""


def restore_runs(runs: Sequence[Any], bt) -> tuple[list[dict[str, Any]], int]:
    """Restore each run's checkpoint into the seed's build ``bt`` in turn (its rows and times into the run):
    ``([each run's batch_state tensors], the iteration)``; :class:`ResumeApart` where they disagree or one is
    not loadable (nothing of a run is changed on disk)."""
    from ..runs.checkpoint import load_checkpoint

    view = bt.algo
    states, marks = [], set()
    for run in runs:
        c, why = load_checkpoint(run.rundir.checkpoint, run.cfg, bt)
        if c is None:
            raise ResumeApart(f"{run.cfg.run_dir.name}: {why}")
        marks.add((bt.ledger.iterations, bt.ledger.rounds, bytes(c["gen"].numpy()), bytes(c["torch_rng"].numpy())))
        if len(marks) > 1:
            raise ResumeApart("their checkpoints are of different iterations or random states")
        states.append({k: getattr(view, k).clone() for k in type(view).batch_state
                       if isinstance(getattr(view, k, None), torch.Tensor)})
        run.rows, run.train_time, run.eval_time = list(c["rows"]), c["train_time"], c["eval_time"]
        if not run.rows:
            raise ResumeApart(f"{run.cfg.run_dir.name}: its checkpoint holds no evaluation")
    return states, bt.ledger.iterations


def put_states(algo, states: list[dict[str, Any]]) -> None:
    """Each run's batch state (:func:`restore_runs`) at its position of the batched ``algo``."""
    for k in type(algo).batch_state:
        if all(k in s for s in states):
            setattr(algo, k, torch.stack([s[k] for s in states]).to(getattr(algo, k).device))
