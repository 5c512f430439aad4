"""``fbo export``: a run's ``metrics.csv`` in the formats other tools read.

TensorBoard: one scalar per metric column, stepped by communication rounds, in ``<run>/tensorboard/``
(``tensorboard --logdir results``). Needs the optional ``tensorboard`` package
(``pip install -e '.[tensorboard]'``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..runs.rundir import read_metrics

LEDGER = {"rounds", "iterations"}  # the steps, not scalars


def to_tensorboard(run_dir: Path) -> Path:
    """Write the run's metrics as TensorBoard scalars (replacing an earlier export); returns the folder."""
    import shutil

    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UsageError("TensorBoard export needs the tensorboard package: pip install -e '.[tensorboard]'",
                         kind="unsupported", field="tensorboard") from None
    df = read_metrics(Path(run_dir) / "metrics.csv")
    if df is None or df.empty:
        raise UsageError(f"{run_dir}: no readable metrics.csv to export", kind="not_found", field="run", path=run_dir)
    out = Path(run_dir) / "tensorboard"
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out} is a link or a file, not fbo's TensorBoard folder: move it away first",
                         kind="unwritable", field="link" if out.is_symlink() else "blocked", path=out)
    if out.is_dir():  # an earlier export: only its event files go
        if any(not p.name.startswith("events.out.tfevents.") or not p.is_file() or p.is_symlink()
               for p in out.iterdir()):
            raise UsageError(f"{out} holds files other than TensorBoard's event files: move them away first",
                             kind="not_fbos", path=out)
        shutil.rmtree(out)
    w = SummaryWriter(log_dir=str(out))
    try:
        for _, row in df.iterrows():
            step = int(row["rounds"])
            for col, v in row.items():
                if col not in LEDGER and isinstance(v, (int, float)) and v == v:
                    w.add_scalar(col, float(v), step)
    finally:
        w.close()
    return out
