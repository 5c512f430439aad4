"""Every YAML file fbo reads (a spec, a run's ``config.yaml``, a ``tuned.yaml``, a config file) is parsed here, bounded
before anything is expanded: a hostile or broken file (an alias bomb, a 1 GB file, 10,000 nested brackets) is a
:class:`UsageError` naming it, never an out-of-memory or a RecursionError. Booleans follow YAML 1.2 (a folder named
``no`` stays a folder). Apart from :mod:`fbo_cli.runs.config`, which resolves what these files say into a run."""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import UsageError

MAX_YAML_BYTES = 1_000_000  # a spec, a config or a tuned.yaml is a few kB
MAX_YAML_NODES = 100_000  # values after every alias is expanded (an alias bomb expands to billions)
MAX_YAML_DEPTH = 50  # nesting (specs nest four or five levels)


class _Limit(ValueError):
    """A limit a YAML text passes: ``args`` are the message and the field of the UsageError it becomes."""

    def __str__(self) -> str:
        return self.args[0]


def _yaml_size(node, depth: int = 0, memo: dict | None = None, busy: frozenset = frozenset()) -> int:
    """How many values ``node`` (a composed YAML node, aliases not yet expanded) holds once expanded; a
    shared (aliased) node is counted each time it is used, computed once. ``ValueError`` past the limits."""
    memo = {} if memo is None else memo
    if id(node) in memo:
        return memo[id(node)]
    if depth > MAX_YAML_DEPTH:
        raise _Limit(f"nested more than {MAX_YAML_DEPTH} levels deep", "depth")
    if id(node) in busy:
        raise _Limit("an alias refers to itself", "aliases")
    kids = node.value if isinstance(node.value, list) else []
    n = 1
    for k in kids:
        for c in (k if isinstance(k, tuple) else (k,)):
            n += _yaml_size(c, depth + 1, memo, busy | {id(node)})
            if n > MAX_YAML_NODES:
                raise _Limit(f"more than {MAX_YAML_NODES:,} values once its aliases are expanded (an alias bomb?)",
                             "aliases")
    memo[id(node)] = n
    return n


def _yaml12_bools(loader):
    """``loader`` with YAML 1.2's booleans: only true/false (any case) are; ``no``, ``on``, ``off``, ``y``
    stay strings (a folder named ``no`` is a folder, not False)."""
    import re

    bool_tag = "tag:yaml.org,2002:bool"
    cls = type(loader.__name__, (loader,), {})
    cls.yaml_implicit_resolvers = {k: [r for r in v if r[0] != bool_tag]
                                   for k, v in loader.yaml_implicit_resolvers.items()}
    cls.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return cls


_SAFE = _yaml12_bools(yaml.SafeLoader)
_CSAFE = _yaml12_bools(yaml.CSafeLoader) if hasattr(yaml, "CSafeLoader") else None


def _loader(text: str):
    """libyaml's safe loader (the same constructor and resolver, about 20x faster: the cost model reads the
    evidence's 800 config.yaml) where the text cannot nest deeper than its composer's C recursion takes: a
    small text with few flow brackets (block nesting in 100 kB stays under 450 levels); else PyYAML's own,
    whose RecursionError is caught below."""
    if _CSAFE is not None and len(text) <= 100_000 and text.count("[") + text.count("{") <= 1000:
        return _CSAFE
    return _SAFE


def load_yaml(text: str | bytes, what: str) -> Any:
    """``yaml.safe_load`` bounded before anything is expanded: at most ``MAX_YAML_BYTES``, ``MAX_YAML_DEPTH``
    levels and ``MAX_YAML_NODES`` values with every alias expanded. Every YAML fbo reads goes through here;
    anything else is a UsageError naming ``what``."""
    if len(text) > MAX_YAML_BYTES:
        raise UsageError(f"{what} is {len(text):,} bytes; fbo reads YAML files up to {MAX_YAML_BYTES:,} bytes",
                         kind="bad_yaml", field="bytes", path=what)
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise UsageError(f"{what} is not a text (YAML) file", kind="bad_yaml", field="text", path=what) from None
    loader = _loader(text)(text)  # a safe loader: SafeLoader or libyaml's CSafeLoader
    try:
        node = loader.get_single_node()  # parsed once: composed, measured, then built
        if node is None:
            return None
        _yaml_size(node)
        return loader.construct_document(node)
    except ValueError as e:
        raise UsageError(f"{what}: {e}", kind="bad_yaml", field=e.args[1] if isinstance(e, _Limit) else "syntax",
                         path=what) from None
    except RecursionError:
        raise UsageError(f"{what}: nested more than {MAX_YAML_DEPTH} levels deep", kind="bad_yaml", field="depth",
                         path=what) from None
    except yaml.YAMLError as e:
        raise UsageError(f"{what} is not valid YAML: {str(e).splitlines()[0]}", kind="bad_yaml", field="syntax",
                         path=what) from None
    finally:
        loader.dispose()
