"""The bench's cases, all in one file (``experiments/bench.yaml``): ``cases`` (each: ``name``, ``task``,
``algo``, ``set``: any run key or hyperparameter; ``quick: true`` for the cases of ``--quick``),
``growth`` (FedNest's growth sweeps: ``sweep``, ``M`` participating clients), ``profile`` (the names
``--profile`` profiles), ``ab`` (the substrings of the latency-bound cases ``--against`` times) and
``reference`` (the name of the case the per-client-loop reference and the whole-run line stand beside)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class Cases:
    cases: list[dict]
    growth: list[dict]
    profile: list[str]
    ab: list[str]
    reference: dict


def load_cases(path: Path) -> Cases:
    """The cases file, read by fbo's bounded YAML loader (an alias bomb or a 20,000-deep file is refused) and
    checked: anything malformed is a UsageError naming the file. Not a spec (``load_config_file``): a file of
    its own kind, read by the same bounded ``load_yaml``."""
    from ..runs.config import MAX_YAML_BYTES, load_yaml

    try:
        if path.stat().st_size > MAX_YAML_BYTES:  # refused before it is read
            raise UsageError(f"{path} is {path.stat().st_size:,} bytes; fbo reads YAML files up to "
                             f"{MAX_YAML_BYTES:,} bytes", kind="bad_yaml", field="bytes", path=path)
        d = load_yaml(path.read_bytes(), str(path))
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}", kind="unreadable", path=path,
                         value=e.errno) from None
    if not isinstance(d, dict):
        raise UsageError(f"{path} must hold a mapping of key: value (cases, growth, ...), got {type(d).__name__}",
                         kind="bad_spec", field="mapping", path=path)
    cases, growth = d.get("cases") or [], d.get("growth") or []
    for key, rows in (("cases", cases), ("growth", growth)):
        if not isinstance(rows, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                 and isinstance(c.get("set", {}), dict) for c in rows):
            raise UsageError(f"{path}: '{key}' must be a list of mappings, each with a 'name' (and 'set' a "
                             f"mapping), got {str(rows)[:80]}", kind="bad_spec", field=key, path=path)
    for key in ("profile", "ab"):
        if not isinstance(d.get(key) or [], list) or not all(isinstance(x, str) for x in d.get(key) or []):
            raise UsageError(f"{path}: '{key}' must be a list of names", kind="bad_spec", field=key, path=path)
    ref = next((c for c in cases if c["name"] == d.get("reference")), None)
    if ref is None:
        raise UsageError(f"{path}: 'reference' must name one of its cases, got {d.get('reference')!r}",
                         kind="bad_spec", field="reference", path=path, value=d.get("reference"))
    return Cases(cases, growth, list(d.get("profile") or []), list(d.get("ab") or []), ref)
