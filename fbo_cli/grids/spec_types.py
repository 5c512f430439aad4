"""The experiment spec's parts as types: an algorithm row, a setting, a claim, the witness, the tune block
and what ``fbo tune`` chose (the values and their notes apart).

Plain dataclasses, not pydantic: the spec's checks are few and specific (names that must exist in the
spec, grids of lists, a claim's ``across`` pairs), their messages name the file and the key in the
project's words, and every bound of a run is checked by ``config.resolve`` (run settings, the task's
parameters, the algorithm's hyperparameters), which :func:`fbo_cli.grids.spec.load_spec` calls on every cell
before any data loads. One validator (``load_spec``) builds these types from the YAML; nothing else
reads a spec's YAML. ``tuned.yaml`` keeps its format on disk: a choice's notes are its keys that start
with ``_`` (``_stable_edge``, ``_valid_edge``, ``_at_grid_edge``, ``_none``); in memory
:class:`Choice` keeps them apart from the values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Iterator


class _Keys:
    """Read also as the YAML mapping it came from (``entry["name"]``, ``entry.get("tune")``): a few
    callers outside the spec's modules still do (cli.py, bench.py); new code reads the attributes."""

    def __getitem__(self, key: str) -> Any:
        v = getattr(self, key, None) if key in {f.name for f in fields(self)} else None  # type: ignore[arg-type]
        if v is None:
            raise KeyError(key)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None


@dataclass
class AlgorithmEntry(_Keys):
    """One row of ``algorithms:``: the display name, the registry key (or a user algorithm's absolute
    source), its fixed values and its tuning grid."""

    name: str
    algo: str
    set: dict[str, Any] = field(default_factory=dict)
    tune: dict[str, list] = field(default_factory=dict)
    algo_name: str | None = None  # a user's algorithm: its own name (``algo`` is then its source)

    @classmethod
    def of(cls, d: AlgorithmEntry | Mapping) -> AlgorithmEntry:
        if isinstance(d, AlgorithmEntry):
            return d
        algo = d.get("algo", d.get("name"))  # load_spec has checked the spec's rows; a caller's may be partial
        return cls(str(d.get("name", algo)), algo, dict(d.get("set") or {}), d.get("tune") or {}, d.get("algo_name"))


@dataclass
class SettingEntry(_Keys):
    """One entry of ``settings:``: its name and the values it sets."""

    name: str
    set: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, d: SettingEntry | Mapping) -> SettingEntry:
        return d if isinstance(d, SettingEntry) else cls(str(d["name"]), dict(d.get("set") or {}))


@dataclass
class Claim(_Keys):
    """One of the paper's claims (``claims:``), checked by the report
    (:func:`fbo_cli.evidence.report.claim_verdict`)."""

    text: str
    metric: str
    better: str
    than: str
    mode: str = "max"  # max | min | equal
    margin: float | None = None  # None: the rule's default
    factor: float | None = None  # better needs at most 1/factor of than's value (mode min)
    settings: list[str] = field(default_factory=list)  # the settings it is about (empty: all)
    across: list[list[str]] = field(default_factory=list)  # [setting of better, setting of than] pairs

    @classmethod
    def of(cls, d: Claim | Mapping) -> Claim:
        if isinstance(d, Claim):
            return d
        return cls(d["text"], d["metric"], d["better"], d["than"], d.get("mode", "max"), d.get("margin"),
                   d.get("factor"), list(d.get("settings") or []), [list(p) for p in d.get("across") or []])


@dataclass
class Witness(_Keys):
    """``witness:``: the public code's runs (``fbo witness``) shown beside one algorithm's."""

    algorithm: str
    settings: dict[str, str]  # spec setting -> the witness's setting
    inner_lr: float = 0.01  # the public code's --lr


@dataclass
class Attribution(_Keys):
    """``attribution:``: how much of each row's gap to the paper one change explains (``pairs``: the row
    before the change -> the row after it, same settings and seeds)."""

    change: str  # what differs between the two rows, in words
    pairs: dict[str, str]


@dataclass
class TuneSpec:
    seeds: list[int]
    rounds: int | None  # None ("budget" in the spec): each setting's own evaluation budget
    score: str
    mode: str
    setting: str | None
    tail: float
    tolerance: float
    extra: dict[str, Any]
    grids: dict[str, dict[str, list]]  # algorithm display name -> {key (maybe "a,b"): values}


NOTES = ("stable_edge", "valid_edge", "at_grid_edge", "none")  # a choice's notes (``_<note>`` on disk)


@dataclass(eq=False)  # compared as a mapping (Mapping.__eq__), like the dict it was
class Choice(Mapping):
    """What ``fbo tune`` chose for one (algorithm, setting): ``values`` (a config layer) and ``notes`` (how
    the choice sits in its grid: ``stable_edge``, ``valid_edge``, ``at_grid_edge``; ``none`` when every
    point was rejected). As a mapping it reads as ``tuned.yaml`` holds it: the values, then ``_<note>``."""

    values: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, d: Choice | Mapping | None) -> Choice:
        if isinstance(d, Choice):
            return d
        d = d or {}
        return cls({k: v for k, v in d.items() if not k.startswith("_")},
                   {k[1:]: v for k, v in d.items() if k.startswith("_")})

    def on_disk(self) -> dict[str, Any]:
        return {**self.values, **{f"_{k}": v for k, v in self.notes.items()}}

    def __getitem__(self, key: str) -> Any:
        return self.notes[key[1:]] if key.startswith("_") else self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.on_disk())

    def __len__(self) -> int:
        return len(self.values) + len(self.notes)

    def edge_note(self) -> str:
        """How the chosen value relates to its grid's edge, in words ('' when interior)."""
        n, out = self.notes, []
        if n.get("stable_edge"):
            out.append(f"beside a rejected value: {n['stable_edge']}")  # interior to the grid as extended
        if n.get("valid_edge"):
            out.append(f"at the end of the valid range: {n['valid_edge']}")
        if n.get("at_grid_edge"):
            out.append(f"an unresolved edge: the best value of {n['at_grid_edge']} is the last one tried, no "
                       "rejected value beyond it")
        return "; ".join(out)

    def how_chosen(self) -> str:
        """The edge note, the margin probe beside an unstable value (``margin``: where and on which seeds it ran)
        and what was searched along each key (``searched``: every value tried, and those tried through the
        choice), in words."""
        searched, margin = self.notes.get("searched"), self.notes.get("margin")
        return "; ".join(x for x in (self.edge_note(), f"margin: {margin}" if margin else "",
                                     f"searched: {searched}" if searched else "") if x)


@dataclass
class Tuned:
    """A ``tuned.yaml``: the choices typed, the rest of the record kept as written (``record``)."""

    chosen: dict[str, dict[str, Choice]]
    record: dict[str, Any]

    @classmethod
    def of(cls, d: Tuned | Mapping) -> Tuned:
        if isinstance(d, Tuned):
            return d
        chosen = {a: {s: Choice.of(v) for s, v in per.items()} for a, per in (d.get("chosen") or {}).items()}
        return cls(chosen, dict(d))

    @property
    def setting(self) -> str | None:
        return self.record.get("setting")

    @property
    def grids(self) -> dict | None:
        return self.record.get("grids")

    def __getitem__(self, key: str) -> Any:  # cli.py reads tuned.yaml's keys (score, mode)
        return self.record[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.record.get(key, default)

    def entry(self, algorithm: str, setting: str) -> Choice:
        """The choice of one (algorithm, setting): the setting's own, or the one tuned setting's."""
        per = self.chosen.get(algorithm) or {}
        return per.get(setting) or (per.get(self.setting) if self.setting else None) or Choice()


def chosen_on_disk(chosen: Mapping[str, Mapping[str, Mapping]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``tuned.yaml``'s ``chosen``: algorithm -> setting -> {values, then the ``_`` notes}."""
    return {a: {s: Choice.of(c).on_disk() for s, c in per.items()} for a, per in chosen.items()}
