"""Which code made a run, and whether a finished run is stale.

Every run's ``summary.json`` records ``code``: the fbo version, the git commit of the checkout (when
there is one), and a hash of the source (``inspect.getsource``) of every class of its algorithm's MRO
but ``object`` (the class, the built-in algorithm it derives from, ``BilevelAlgorithm``, ``Algorithm``)
and of its task class's, each under ``module.Class``. A user's class (outside the package) is hashed
by the code its runs execute: its whole file and the local modules that file imports (a helper that
``step`` calls, a sibling file), :func:`user_code_hash`; fbo's own classes keep their class source hash,
so the committed evidence keeps its record.

**Staleness** (the rule, docs/fidelity.md#evidence): a finished run is *stale*, and
``compare``/``tune`` redo it, when the source of a class *outside the package* (a user's algorithm)
differs from the one recorded. A class of fbo itself that changed is *drift*: reported (``fbo compare``
says how many reused runs were made by other built-in code, and which classes), never rerun by
itself, since a built-in refactor must not force a rerun of the committed evidence; ``fbo check``
is the instrument that says whether such runs still reproduce, and ``--rerun`` redoes them. A run made
before code hashes existed (no ``code`` in its summary) is neither stale nor drifted. A user who knows
that an edit does not touch the numbers passes ``--accept-code-change``: the run is reused and its
summary records the acceptance (``code_accepted``: when, and the hashes accepted), which later checks
compare against.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import inspect
import json
import sys
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

from .. import __version__


@functools.lru_cache(maxsize=256)
def _source_hash(cls: type) -> str:
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return "unknown"
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def class_hashes(cls: type) -> dict[str, str]:
    """``{module.Class: hash of its source}`` over ``cls.__mro__`` but ``object``; a class outside fbo (a user's):
    the hash of the code its runs execute, :func:`user_code_hash`."""
    return {f"{_module(c)}.{c.__qualname__}": _source_hash(c) if c.__module__.startswith("fbo_cli")
            else user_code_hash(c) for c in cls.__mro__ if c is not object}


def source_key(source: str) -> str:
    """Where a user's algorithm lives, as it enters its runs' identity (:func:`fbo_cli.runs.config.comparable`): the
    file's folder, the file and the class, ``va/ln.py:LocalNeumann``, beside its code (:func:`code_key`). Moving
    the folder that holds them keeps their runs."""
    target, _, cls = str(source).rpartition(":")
    if not target.endswith(".py"):
        return str(source)
    p = Path(target)
    return f"{p.parent.name}/{p.name}:{cls}"


def local_files(mod: ModuleType) -> list[Path]:
    """The files of a user's module and of the local modules it imports, at any depth: those under the module's
    folder (``import helper`` or ``from helper import f`` of a file beside it, a package below it), found from
    what the module holds (modules, and the modules of its functions and classes); never an installed package's
    (``site-packages``) or fbo's."""
    root = Path(mod.__file__).resolve().parent
    seen: set[Path] = set()
    todo = [vars(mod)]  # module namespaces: a function's own (its __globals__), else its module's
    while todo:
        ns = todo.pop()
        f = ns.get("__file__")
        path = Path(f).resolve() if isinstance(f, str) else None
        if path is None or path in seen or not path.is_relative_to(root) or "site-packages" in path.parts \
                or str(ns.get("__name__", "")).startswith("fbo_cli"):
            continue
        seen.add(path)
        for v in list(ns.values()):
            if isinstance(v, ModuleType):
                todo.append(vars(v))
            elif isinstance(v, FunctionType):
                todo.append(v.__globals__)
            elif isinstance(v, type) and (m := sys.modules.get(v.__module__)) is not None:
                todo.append(vars(m))
    return sorted(seen)


def user_files(cls: type) -> dict[str, str] | None:
    """``{path relative to the file's folder: hash of its content}`` of the code a run of a user's class executes:
    its file and the local modules the file imports (:func:`local_files`: a helper function beside ``step`` or in
    a sibling file counts); None where the class has no file (or one cannot be read)."""
    mod = sys.modules.get(cls.__module__)
    if mod is None or not getattr(mod, "__file__", None):
        return None
    root = Path(mod.__file__).resolve().parent
    out = {}
    for f in local_files(mod):
        try:
            out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()[:16]
        except OSError:
            return None
    return out


def user_code_hash(cls: type) -> str:
    """The hash of the code a run of a user's class executes (:func:`user_files`), by the files' paths relative to
    the file's folder (moving the folder keeps the hash); the class's own source where it has no file."""
    files = user_files(cls)
    if files is None:
        return _source_hash(cls)
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def code_key(hashes: dict[str, str]) -> str:
    """What of a user's algorithm's code enters its runs' identity (``algo_code`` in its ``config.yaml``): one hash
    of the user classes of its MRO in ``hashes`` (:func:`class_hashes`, as ``RunConfig.code`` holds them). Two
    files of one name in two folders with other code are two algorithms with their own runs; an edit makes new
    runs (the run of the code before is *stale*, :func:`predecessor`, and ``--accept-code-change`` may adopt it)."""
    user = {k: v for k, v in hashes.items() if is_user(k)}
    return hashlib.sha256(json.dumps(user, sort_keys=True).encode()).hexdigest()[:12]


def _module(c: type) -> str:
    """A class's module; a user's file (loaded as ``fbo_user_<hash>_<stem>``) by its stem, so that moving
    its folder keeps the record."""
    m = c.__module__
    return m.split("_", 3)[3] if m.startswith("fbo_user_") and m.count("_") >= 3 else m


UNRECORDED = "unrecorded"  # a run's code.commit where fbo's own repository is not there to say


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of fbo's own repository (``+dirty`` with uncommitted changes to fbo_cli/), else "unrecorded"
    (:func:`~fbo_cli.runs.gitrepo.own_head`)."""
    from .gitrepo import own_head

    head = own_head()
    return head[0][:12] + ("+dirty" if head[1] else "") if head else UNRECORDED


ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile")  # flags that pick float kernels


@functools.lru_cache(maxsize=1)
def machine() -> dict[str, Any]:
    """The CPU a run's floats came from: its model, torch's kernel level and the instruction sets that pick
    MKL's and torch's kernels. Bit-for-bit agreement is promised between runs on the same machine kind only
    (on another, MKL's sgemm takes another path and rounds differently: a CODASCA run at eta = 9 moves by
    0.01 of test AUC at its first evaluation)."""
    import torch

    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"cpu": model, "capability": torch.backends.cpu.get_cpu_capability(),
            "isa": [f for f in ISA_FLAGS if f in flags], "torch": torch.__version__, "blas": blas_build()}


def fingerprint() -> dict[str, Any]:
    """The machine fingerprint a run's ``summary.json`` records as ``machine``: the CPU (:func:`machine`: model,
    ISA, torch and its BLAS build) and the threads torch computes with now (a reduction split over another
    number of threads sums in another order). Bit-for-bit agreement with a committed run is promised only where
    its recorded fingerprint equals this one (:func:`same_machine`); elsewhere within a measured tolerance."""
    import torch

    return {**machine(), "threads": torch.get_num_threads()}


def same_machine(recorded: dict | None, now: dict | None = None) -> bool:
    """Whether a run's recorded fingerprint is this machine's, every key of it (an older record that lacks
    torch, BLAS or threads is not: it cannot promise the same kernels)."""
    return bool(recorded) and recorded == (now if now is not None else fingerprint())


@functools.lru_cache(maxsize=1)
def blas_build() -> str:
    """torch's BLAS and its build ("mkl 2024.2-Product Build 20240605"; "unknown" where torch does not say)."""
    import re

    import torch

    cfg = torch.__config__.show()
    kind = re.search(r"BLAS_INFO=(\w+)", cfg)
    mkl = re.search(r"Math Kernel Library Version ([^\n]+?) for", cfg)
    return " ".join(filter(None, (kind.group(1) if kind else "unknown", mkl.group(1) if mkl else "")))


def code_identity(cfg) -> dict[str, Any]:
    """What ``summary.json`` records as ``code`` for a run of ``cfg`` (a :class:`~fbo_cli.runs.config.RunConfig`):
    a user's algorithm adds ``files``, the hash of each file of its code (:func:`user_files`), which names the
    file that changed when its run is stale."""
    from ..tasks import TASKS

    out = {"fbo": __version__, "commit": git_commit(), "algorithm": class_hashes(cfg.entry.cls),
           "task": class_hashes(TASKS[cfg.task])}
    if cfg.source:
        out["algo_source"] = cfg.source
        files = user_files(cfg.entry.cls)
        if files is not None:
            out["files"] = files
    return out


def is_user(key: str) -> bool:
    """A class outside the package (``module.Class`` not under ``fbo_cli``)."""
    return not key.startswith("fbo_cli.")


def user_code(cells) -> dict[str, dict[str, str]]:
    """``{algorithm: {module.Class: hash}}`` of the users' algorithms among ``cells`` (objects with ``algorithm``
    and ``cfg``): the code a tuning was made with (``tuned.yaml``'s ``code``), which ``fbo compare`` checks it
    against (:func:`fbo_cli.grids.plan.tuned_code_notes`)."""
    out = {}
    for c in cells:
        if c.cfg.source and c.algorithm not in out:
            out[c.algorithm] = {k: v for k, v in class_hashes(c.cfg.entry.cls).items() if is_user(k)}
    return out


def changes(cfg, summary: dict | None) -> tuple[list[str], list[str]]:
    """``(user classes changed, fbo classes changed)`` between a finished run's recorded code (and every code
    accepted since: an acceptance adds to the record, never replaces it) and the code ``cfg`` runs now; both
    empty for a run without a record."""
    rec = (summary or {}).get("code")
    if not isinstance(rec, dict) or not isinstance(rec.get("algorithm"), dict):
        return [], []
    then: dict[str, set] = {k: {v} for k, v in {**rec.get("algorithm", {}), **(rec.get("task") or {})}.items()}
    for acc in (summary or {}).get("code_accepted") or []:
        if isinstance(acc, dict) and isinstance(acc.get("classes"), dict):
            for k, v in acc["classes"].items():
                then.setdefault(k, set()).add(v)
    now = cfg.code
    now = {**now["algorithm"], **now["task"]}
    diff = sorted(k for k in set(then) | set(now) if now.get(k) not in then.get(k, {None}))
    return [k for k in diff if is_user(k)], [k for k in diff if not is_user(k)]


def stale_reason(cfg, summary: dict | None) -> str | None:
    """Why a finished run is stale (its user algorithm's code changed since it ran), or None; the files that
    changed are named where the run recorded them (a helper beside the class, not the class's file)."""
    user, _ = changes(cfg, summary)
    if not user:
        return None
    what = ", ".join(k.rsplit(".", 1)[-1] for k in user)
    then = ((summary or {}).get("code") or {}).get("files")
    now = cfg.code.get("files")
    if isinstance(then, dict) and isinstance(now, dict):
        root = Path(cfg.source.rpartition(":")[0]).parent
        files = [str(root / f) for f in sorted(set(then) | set(now)) if then.get(f) != now.get(f)]
        if files:
            return f"stale: {', '.join(files)} changed since the run of {what} was made"
    where = f" ({cfg.source.rpartition(':')[0]})" if cfg.source else ""
    return f"stale: the source of {what}{where} changed since the run was made"


def accepted(cfg, summary: dict) -> dict:
    """The summary with the record that the user accepts the current code for this run's numbers (the
    caller writes it into the run's ``summary.json``)."""
    now = cfg.code
    user, builtin = changes(cfg, summary)
    entry = {"at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "classes": {k: v for part in ("algorithm", "task") for k, v in now[part].items() if k in user + builtin},
             "commit": now["commit"], "by": "--accept-code-change"}
    if now.get("files"):
        entry["files"] = now["files"]
    return {**summary, "code_accepted": [*(summary.get("code_accepted") or []), entry]}
