"""The algorithm registry: CLI name -> (class, preset overrides of its paper defaults).

Adding an algorithm means adding one file with one class and one line here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .aggitd import AggITD
from .base import Algorithm
from .fednest import FedNest


@dataclass(frozen=True)
class Entry:
    cls: type[Algorithm]
    preset: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # the name papers and plots use

    @property
    def tasks(self) -> tuple[str, ...]:
        return self.cls.tasks


REGISTRY: dict[str, Entry] = {
    "aggitd": Entry(AggITD, {}, "FBO-AggITD"),
    "aggitd-sgd": Entry(AggITD, {"lower": "sgd"}, "FBO-AggITD_SGD"),
    "fednest": Entry(FedNest, {}, "FedNest"),
    "fednest-sgd": Entry(FedNest, {"lower": "sgd"}, "FedNest_SGD"),
    "lfednest": Entry(FedNest, {"local_hypergrad": True}, "LFedNest"),
    "lfednest-sgd": Entry(FedNest, {"local_hypergrad": True, "lower": "sgd"}, "LFedNest_SGD"),
}
