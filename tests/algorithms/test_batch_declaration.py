"""An algorithm declares its run batches once (``batch = Batching(...)``, fbo_cli/algorithms/batching.py); a user's
class written for the old API (the six class attributes ``batches``, ``batch_state``, ``batch_fixed``,
``batch_seeds``, ``seeds_unbatched``, ``client_state``) is read the same."""

from __future__ import annotations

import pytest

from fbo_cli.algorithms import REGISTRY
from fbo_cli.algorithms.batching import OLD, Batching, says
from fbo_cli.algorithms.codasca import CodaPlus
from fbo_cli.algorithms.fedbio import FedBiO
from fbo_cli.algorithms.fednest import FedNest
from fbo_cli.grids.run_batches import seeds_line, state_refusal

BUILTIN = sorted({e.cls for e in REGISTRY.values()}, key=lambda c: c.__name__)


def old_form(cls: type) -> dict:
    """What ``cls`` declares, written as the old class attributes."""
    return {k: getattr(cls, k) for k in OLD}


@pytest.mark.parametrize("cls", BUILTIN, ids=[c.__name__ for c in BUILTIN])
def test_every_algorithms_declaration_reads_the_same_from_the_old_attributes(cls):
    old = type("Old", cls.__bases__, {"__module__": "user_algo", **old_form(cls)})
    assert old.batch == cls.batch
    assert old_form(old) == old_form(cls)
    assert seeds_line(old) == seeds_line(cls)


class OldMom(FedNest):
    batch_state = FedNest.batch_state + ("mom",)
    batch_fixed = ("outer_lr_t0", "decay")

    def step(self):
        self.mom = 1.0


class NewMom(FedNest):
    batch = FedNest.batch.but(state=FedNest.batch.state + ("mom",), fixed=("outer_lr_t0", "decay"))

    def step(self):
        self.mom = 1.0


class OldSeeds(FedBiO):
    batch_seeds = False
    seeds_unbatched = "mine"


class OldClients(CodaPlus):
    client_state = ("vk",)


def test_a_users_class_is_read_the_same_in_either_form():
    assert OldMom.batch == NewMom.batch and OldMom.batch_state == NewMom.batch_state == ("x", "y", "mom")
    assert OldMom.batch_fixed == NewMom.batch.fixed and OldMom.batch.on and NewMom.batches
    # both declare their state themselves, so both batch (a batch-only attribute would be refused the same way)
    assert says(OldMom, "state") and says(NewMom, "state")
    assert state_refusal(OldMom) is None and state_refusal(NewMom) is None
    assert OldSeeds.batch == FedBiO.batch.but(seeds="mine") and not OldSeeds.batch_seeds
    assert OldClients.batch.clients == ("vk",) and OldClients.batch.state == CodaPlus.batch.state


def test_what_a_users_class_says_itself_decides_its_state_and_its_seeds():
    class Undeclared(FedNest):
        def step(self):
            self.mom = 1.0

    class TextOnly(FedBiO):
        seeds_unbatched = "only the words"

    class NoSeeds(FedBiO):
        batch_seeds = False

    assert not says(Undeclared, "state") and "declares no batch_state" in state_refusal(Undeclared)
    # a reason alone is not a say on whether seeds batch (the old rule: batch_seeds in the class body)
    assert not says(TextOnly, "seeds") and TextOnly.batch.seeds is True
    assert not says(OldMom, "seeds") and says(NewMom, "seeds")  # a whole declaration says every field
    # seeds turned off in the old form: the reason is the nearest parent's, as the old attribute inherited it
    assert NoSeeds.batch.seeds == FedBiO.seeds_unbatched and "its lower rounds" in seeds_line(NoSeeds)


def test_off_and_the_base_declaration():
    from fbo_cli.algorithms.base import Algorithm

    assert not Algorithm.batch.on and not Algorithm.batches and Algorithm.batch_state == ()
    assert Batching(state=("x",)).on and Batching(state=("x",)) == Batching(state=("x",)).but()
