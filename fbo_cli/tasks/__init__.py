"""The task registry: CLI name -> task class."""

from __future__ import annotations

from .base import BilevelTask, Task
from .hyperrep import HyperRep

TASKS: dict[str, type[Task]] = {
    "hyperrep": HyperRep,
}

__all__ = ["TASKS", "Task", "BilevelTask"]
