"""The task registry: CLI name -> task class."""

from __future__ import annotations

from .auc import AUC
from .base import BilevelTask, Task
from .hfl import HFL
from .hyperclean import HyperClean
from .hyperrep import HyperRep

TASKS: dict[str, type[Task]] = {
    "hyperrep": HyperRep,
    "hyperclean": HyperClean,
    "hfl": HFL,
    "auc": AUC,
}

__all__ = ["TASKS", "Task", "BilevelTask"]
