"""The algorithm registry: CLI name -> (class, preset overrides of its paper defaults).

Adding an algorithm means adding one file with one class and one line here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .adafbio import AdaFBiO
from .aggitd import AggITD
from .base import Algorithm
from .codasca import CodaPlus, Codasca
from .fedavg import FedAvg, FedProx, Scaffold
from .fedavg_bounds import FedAvgBound
from .fedavg_ce import FedAvgCE
from .fedbio import FedBiO, FedBiOAcc
from .fedbio_local import FedBiOLocal
from .fedbioacc_local import FedBiOAccLocal
from .fednest import FedNest
from .server_only import ServerOnly
from .zohfl import ZOHFL


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
    "aggitd-sgd": Entry(AggITD, {"lower_solver": "sgd"}, "FBO-AggITD_SGD"),
    "fednest": Entry(FedNest, {}, "FedNest"),
    "fednest-sgd": Entry(FedNest, {"lower_solver": "sgd"}, "FedNest_SGD"),
    "lfednest": Entry(FedNest, {"local_hypergrad": True}, "LFedNest"),
    "lfednest-sgd": Entry(FedNest, {"local_hypergrad": True, "lower_solver": "sgd"}, "LFedNest_SGD"),
    "fedbio": Entry(FedBiO, {}, "FedBiO"),
    "fedbioacc": Entry(FedBiOAcc, {}, "FedBiOAcc"),
    "fedbio-local": Entry(FedBiOLocal, {}, "FedBiO-Local"),
    "fedbioacc-local": Entry(FedBiOAccLocal, {}, "FedBiOAcc-Local"),
    "adafbio": Entry(AdaFBiO, {}, "AdaFBiO"),
    "adafbio-adabelief": Entry(AdaFBiO, {"adaptive": "adabelief"}, "AdaFBiO (AdaBelief)"),
    "adafbio-none": Entry(AdaFBiO, {"adaptive": "none"}, "AdaFBiO (non-adaptive)"),
    "fedavg-noisy": Entry(FedAvgBound, {"data": "noisy"}, "FedAvg (noisy)"),
    "fedavg-clean": Entry(FedAvgBound, {"data": "clean"}, "FedAvg (clean, oracle)"),
    "zohfl": Entry(ZOHFL, {}, "ZO-HFL"),
    "fedavg": Entry(FedAvg, {}, "FedAvg"),
    "fedprox": Entry(FedProx, {}, "FedProx"),
    "scaffold": Entry(Scaffold, {}, "SCAFFOLD"),
    "server-only": Entry(ServerOnly, {}, "Server only"),
    "codaplus": Entry(CodaPlus, {}, "CODA+"),
    "codasca": Entry(Codasca, {}, "CODASCA"),
    "fedavg-ce": Entry(FedAvgCE, {}, "FedAvg-CE (extra)"),
}
