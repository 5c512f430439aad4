"""How an algorithm says that its runs step in run batches (fbo_cli/grids/run_batches.py, docs/fidelity.md#batches):
one declaration in its class body, ``batch = Batching(state=..., fixed=..., seeds=..., clients=...)``.

The six class attributes that said it before (``batches``, ``batch_state``, ``batch_fixed``, ``batch_seeds``,
``seeds_unbatched``, ``client_state``) are still read from a user's class (an algorithm written for the old API runs
unchanged): :func:`declare`, called for every subclass of ``Algorithm``, makes ``cls.batch`` of them, and sets them on
a class that declares ``batch``, so that ``FedNest.batch_state + ("z",)`` in a user's class still reads FedNest's.
What a class's own body says (:func:`says`) matters for a user's class: it batches its own state, or seeds, only where
it says so itself (:func:`fbo_cli.grids.run_batches.state_refusal`, ``seeds_batch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

FIELDS = ("on", "state", "fixed", "seeds", "clients")
SEEDS_APART = "its step reads each seed's data outside the samplers a seed batch carries"


@dataclass(frozen=True)
class Batching:
    """The run batches of an algorithm. ``state``: the attributes that carry a leading run dimension (its iterates,
    ``[R, ...]``; the only per-run state a batch keeps); ``fixed``: float hyperparameters the runs of a batch must share
    (one number in the step: a stage's decay, a clip); ``seeds``: True where runs of several seeds may share a batch
    (each its own data, generator and ledger), else why they never do (``fbo show``); ``clients``: the attributes of
    ``state`` that are per client (``[K, ...]`` alone, ``[R, K, ...]`` between rounds, folded to ``[R*K, ...]``
    within one: :class:`fbo_cli.algorithms.client_runs.ClientRuns`); ``on``: False for an algorithm whose runs run
    alone. ``declared``: the fields the declaring class's own body names (not compared)."""

    state: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    seeds: bool | str = SEEDS_APART
    clients: tuple[str, ...] = ()
    on: bool = True
    declared: frozenset = field(default=frozenset(FIELDS), compare=False)

    def but(self, **kw) -> "Batching":
        """This declaration with some fields changed (a subclass's from its parent's)."""
        return replace(self, **kw)


NO_BATCH = Batching(on=False, declared=frozenset())

# the old class attributes -> the field each names (``batch_seeds`` and ``seeds_unbatched`` both set ``seeds``)
OLD = {"batches": "on", "batch_state": "state", "batch_fixed": "fixed", "client_state": "clients",
       "batch_seeds": "seeds", "seeds_unbatched": "why"}  # "why": only the text, not whether seeds batch


def declare(cls: type) -> None:
    """``cls.batch`` from what its own body declares: ``batch`` (then the old attributes are set from it) or any of
    the old attributes (over its parent's ``batch``); a class that declares neither inherits both."""
    own = vars(cls)
    old = [k for k in OLD if k in own]
    if "batch" not in own and not old:
        return
    b = own["batch"] if "batch" in own else getattr(cls, "batch", NO_BATCH)
    if "batch" not in own:  # the old form, over the parent's declaration
        seeds = b.seeds
        if "batch_seeds" in own or "seeds_unbatched" in own:  # the reason: its own, else the nearest parent's
            seeds = True if own.get("batch_seeds", b.seeds is True) else getattr(cls, "seeds_unbatched", SEEDS_APART)
        b = replace(b, on=bool(own.get("batches", b.on)), state=tuple(own.get("batch_state", b.state)),
                    fixed=tuple(own.get("batch_fixed", b.fixed)), clients=tuple(own.get("client_state", b.clients)),
                    seeds=seeds, declared=frozenset(OLD[k] for k in old))
        cls.batch = b
        return
    b = cls.batch = replace(NO_BATCH if b is None else b, declared=frozenset(FIELDS))  # its own: every field
    cls.batches, cls.batch_state, cls.batch_fixed, cls.client_state = b.on, b.state, b.fixed, b.clients
    cls.batch_seeds = b.seeds is True
    if b.seeds is not True:
        cls.seeds_unbatched = b.seeds


def says(cls: type, what: str) -> bool:
    """Whether ``cls``'s own body declares ``what`` (a field of :class:`Batching`): in a ``batch`` of its own, or an
    old attribute that names it."""
    b = vars(cls).get("batch")
    return isinstance(b, Batching) and what in b.declared
