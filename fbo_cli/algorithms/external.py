"""The user's own algorithms: found outside the package, used like the built-in ones.

An algorithm is named, wherever fbo takes one (``--algo``, a spec's ``algo:``, ``fbo show``), by

* a registry name (``fednest``: the built-in ones, ``fbo list``);
* a file and a class, ``path/to/file.py:Class`` (a spec's path is relative to the spec's folder, the
  command line's to the working folder);
* a class name found in a folder ``algorithms/`` beside the spec (or in the working folder), as
  benchopt finds the solvers of a benchmark: every ``*.py`` there is read and its :class:`Algorithm`
  subclasses are offered by class name;
* an installed package's entry point in the group ``fbo.algorithms`` (``name = "pkg.module:Class"``), or
  ``pkg.module:Class`` directly.

The class is an :class:`~fbo_cli.algorithms.base.Algorithm` like the built-in ones: it may subclass one
(``class DecayFedNest(FedNest)``) and change one step. Its name (results folder, tables) is its ``name``
attribute when the class sets one, else the class name; its ``label`` likewise. A resolved user algorithm
carries its *source*: the absolute ``file.py:Class`` (or ``module:Class``), which a run's ``config.yaml``
records as ``algo_source`` so that a rerun from it, and a grid's worker process, finds the same class.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import os
import signal
import sys
from pathlib import Path

from ..errors import UsageError

ENTRY_POINT_GROUP = "fbo.algorithms"
_FILES: dict[tuple[str, int, int], object] = {}  # (path, mtime_ns, size) -> module
# the modules a user's file imported from its folder (``import helper``): name -> file. Before another folder's file
# loads, they leave sys.modules, so that two versions side by side (va/ln.py, vb/ln.py) import each its own helper
_LOCAL: dict[str, Path] = {}


def is_reference(ref: str) -> bool:
    """``file.py:Class`` or ``module:Class`` (anything with a ':'), as opposed to a plain name."""
    return ":" in ref


class _Forbidden(BaseException):
    """What a user's code did at import that would forge fbo's outcome (its exit status, its files' place)."""


def _library(fn) -> bool:
    """Whether ``fn`` (a callable given to ``atexit.register``) is an installed library's or Python's own, as
    opposed to the user's (a lambda or function of their file, a ``partial`` of ``os._exit``)."""
    import inspect
    import sysconfig

    try:
        f = Path(inspect.getfile(fn)).resolve()
    except (TypeError, OSError):
        return False
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(f.is_relative_to(Path(r).resolve()) for r in roots)


@contextlib.contextmanager
def _guards(did: list):
    """While a user's code is imported: ``os._exit``, an exit handler of the user's (``atexit.register``) and a
    change of the working folder (``os.chdir``, or any way: checked after) raise, and are recorded in ``did``,
    so that no import can choose fbo's exit status or move where a relative ``--out-dir`` lands."""
    import atexit
    import posix

    def forbid(why):
        did.append(why)
        raise _Forbidden(why)

    def _exit(code=0, *a):
        forbid(f"it called os._exit({code!r})")

    def register(fn, *a, **kw):
        if not _library(fn):
            forbid("it registered an exit handler (atexit.register)")
        return real_register(fn, *a, **kw)

    def chdir(path, *a, **kw):
        forbid(f"it changed the working folder (os.chdir({str(path)!r}))")

    real = (os._exit, posix._exit, atexit.register, os.chdir, os.fchdir)
    real_register = atexit.register
    cwd = os.getcwd()
    os._exit = posix._exit = _exit
    atexit.register, os.chdir, os.fchdir = register, chdir, chdir
    try:
        yield
    finally:
        os._exit, posix._exit, atexit.register, os.chdir, os.fchdir = real
        if os.getcwd() != cwd:
            os.chdir(cwd)
            did.append("it changed the working folder")


@contextlib.contextmanager
def _user_code(where: str, path: Path | None = None):
    """Contain the import of a user's code: ``sys.exit``, a ``KeyboardInterrupt`` it raises and any exception
    become a UsageError (exit 2) naming ``where`` and the error, and so do ``os._exit``, an exit handler and a
    change of the working folder (:func:`_guards`), even when the code catches what they raise; ``sys.argv`` is
    the file alone while it runs (an argument parser run at import sees none of fbo's) and fbo's again after. A
    real Ctrl-C (SIGINT) meanwhile stops fbo with 130 (a second one even when the code swallows the first). The
    error's kind is ``user_code``, its ``path`` the file (None for a module)."""
    hit = []
    did: list[str] = []
    hard_exit = os._exit  # the real one (the guards replace it)

    def interrupt(signum, frame):
        if hit:
            os.write(2, b"interrupted while importing a user's algorithm\n")
            hard_exit(130)
        hit.append(signum)
        raise KeyboardInterrupt

    argv, sys.argv = sys.argv, [where]
    try:
        old = signal.signal(signal.SIGINT, interrupt)
    except ValueError:  # not the main thread: no handler of ours
        old = None
    error = None
    try:
        with _guards(did):
            yield
    except BaseException as e:
        error = e
    finally:
        sys.argv = argv
        if old is not None:
            signal.signal(signal.SIGINT, old)
    if hit:  # whatever the code made of the interrupt (it may have swallowed it)
        print(f"interrupted while importing {where}: nothing was run", file=sys.stderr)
        raise SystemExit(130)
    if did:  # whatever the code made of what the guard raised
        raise UsageError(f"{where}: {did[0]} at import; fbo's exit status and working folder are its own "
                         "(nothing was run)", kind="user_code", field="guard", path=path, value=did[0])
    if isinstance(error, UsageError):
        raise error
    if error is not None:
        exited = isinstance(error, SystemExit)
        what = (f"it called sys.exit({error.code!r})" if exited else
                f"loading it failed: {type(error).__name__}: {error}")
        raise UsageError(f"{where}: {what}", kind="user_code", field="exit" if exited else "exception", path=path,
                         value=error.code if exited else type(error).__name__) from None


# fbo's classes a user's code changed at import (``FedNest.outer_lr = ...``): class -> {attribute: the file}. A
# built-in algorithm's run in such a process would be another code's under the built-in's run id
# (:func:`patched`).
PATCHED: dict[type, dict[str, str]] = {}
_MISSING = object()


def _fbo_classes() -> dict[type, dict]:
    """``{class: a copy of its namespace}`` of every class of fbo's modules loaded now (and the classes nested in
    them, ``FedNest.HP``)."""
    out: dict[type, dict] = {}
    for name, mod in list(sys.modules.items()):
        if name != "fbo_cli" and not name.startswith("fbo_cli."):
            continue
        todo = [v for v in list(vars(mod).values()) if isinstance(v, type) and v.__module__ == name]
        while todo:
            c = todo.pop()
            if c not in out:
                out[c] = dict(vars(c))
                todo += [v for v in out[c].values() if isinstance(v, type) and v.__module__ == name]
    return out


def _record_patches(before: dict[type, dict], where: str) -> None:
    """Add to :data:`PATCHED` what of ``before`` (:func:`_fbo_classes`) differs now."""
    for c, was in before.items():
        now = vars(c)
        for k in (set(was) | set(now)) - {"__annotations__"}:  # Python may create that one on a read
            if was.get(k, _MISSING) is not now.get(k, _MISSING):
                PATCHED.setdefault(c, {})[k] = where


def patched(cls: type, task_cls: type) -> str | None:
    """Which attribute of ``cls``'s or ``task_cls``'s classes (their MROs and nested classes) a user's code changed
    at import, and where (:data:`PATCHED`), as ``'FedNest.outer_lr' (by FILE)``; None when none."""
    for c in [*cls.__mro__, *task_cls.__mro__]:
        for owner in [c, *(v for v in vars(c).values() if isinstance(v, type))]:
            if PATCHED.get(owner):
                attr = sorted(PATCHED[owner])[0]
                return f"{owner.__qualname__}.{attr} (changed by {PATCHED[owner][attr]})"
    return None


def _load_file(path: Path):
    """The module of a user's Python file, loaded once per version of the file, registered in
    ``sys.modules`` (dataclasses and type hints need it), with the file's folder first on ``sys.path`` while it
    loads (so that it may import a helper beside it), and last after (so that ``step()`` may import one too; two
    folders whose helpers share a name should import them at the top of the file, where each finds its own)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key in _FILES:
        return _FILES[key]
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"fbo_user_{digest}_{''.join(c if c.isalnum() else '_' for c in path.stem)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: not a Python file fbo can load", kind="bad_value", field="algo", path=path)
    mod = importlib.util.module_from_spec(spec)
    old = sys.modules.get(name)
    sys.modules[name] = mod
    for m in [m for m, f in _LOCAL.items() if f.parent != path.parent]:  # another folder's helper of that name
        sys.modules.pop(m, None)
    sys.path.insert(0, str(path.parent))
    before = _fbo_classes()
    try:
        with _user_code(str(path), path):
            spec.loader.exec_module(mod)
        _record_patches(before, str(path))
        _LOCAL.update({m: Path(v.__file__) for m, v in list(sys.modules.items()) if m != name
                       and getattr(v, "__file__", None) and Path(v.__file__).parent == path.parent})
    except BaseException:
        if old is not None:
            sys.modules[name] = old
        else:
            sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    if str(path.parent) not in sys.path:  # a helper imported inside step() is found for the run too (last, so
        sys.path.append(str(path.parent))  # that it shadows no installed module)
    _FILES[key] = mod
    return mod


def _algorithm_class(mod, cls_name: str, where: str):
    from .base import Algorithm

    cls = getattr(mod, cls_name, None)
    if cls is None:
        found = sorted(n for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, Algorithm)
                       and v.__module__ == mod.__name__)
        raise UsageError(f"{where}: no class '{cls_name}'" + (f"; its algorithms: {', '.join(found)}" if found
                                                               else "; it defines no Algorithm subclass"),
                         kind="unknown", field="class", value=cls_name)
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise UsageError(f"{where}: '{cls_name}' is not a subclass of fbo_cli.algorithms.base.Algorithm "
                         f"(or of a built-in algorithm such as FedNest)",
                         kind="bad_value", field="class", value=cls_name)
    if not cls.tasks:
        raise UsageError(f"{where}: '{cls_name}' declares no tasks (set `tasks = (\"hyperrep\",)` on the class)",
                         kind="bad_value", field="tasks", value=cls_name)
    return cls


def algo_name(cls) -> str:
    """A user algorithm's name: its own ``name`` attribute, else its class name."""
    return cls.__dict__.get("name") or cls.__name__


def load_reference(ref: str, base: Path | None = None):
    """``(class, source)`` of ``file.py:Class`` (relative to ``base``, default the working folder) or
    ``module:Class``; ``source`` is the absolute form that finds the class again from anywhere."""
    target, _, cls_name = ref.rpartition(":")
    if not target or not cls_name.isidentifier():
        raise UsageError(f"'{ref}': an algorithm by file is named FILE.py:CLASS "
                         "(e.g. ./my_algos/decay.py:DecayFedNest)", kind="bad_value", field="algo", value=ref)
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        path = path.resolve()
        if not path.is_file():
            raise UsageError(f"'{ref}': no file {path}", kind="not_found", field="algo", path=path)
        return _algorithm_class(_load_file(path), cls_name, str(path)), f"{path}:{cls_name}"
    before = _fbo_classes()
    with _user_code(f"'{ref}': module '{target}'"):
        mod = importlib.import_module(target)
    _record_patches(before, target)
    return _algorithm_class(mod, cls_name, target), f"{target}:{cls_name}"


def read_folder(folder: Path) -> tuple[list[dict], dict[str, str]]:
    """Read, never run, the ``*.py`` of ``folder`` (names starting with ``_`` are helpers): ``(classes,
    broken)``, every top-level class that has a base as ``{ref: 'file.py:Class', names: [its literal
    ``name``, its class name], tasks: its literal ``tasks`` or None, bases: its bases' names}``, and
    ``{file: why}`` of the files that do not parse."""
    classes: list[dict] = []
    broken: dict[str, str] = {}
    for f in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        if f.name.startswith("_"):
            continue
        f = f.resolve()
        try:
            tree = ast.parse(f.read_bytes(), str(f))
        except (SyntaxError, ValueError, OSError, RecursionError, MemoryError) as e:
            broken[str(f)] = f"{type(e).__name__}: {e}"
            continue
        for c in tree.body:
            if not isinstance(c, ast.ClassDef) or not c.bases:
                continue
            attrs = {t.id: n.value for n in c.body if isinstance(n, ast.Assign) for t in n.targets
                     if isinstance(t, ast.Name)}
            literal = {}
            for k in ("name", "tasks"):
                with contextlib.suppress(ValueError, TypeError, SyntaxError, KeyError, RecursionError):
                    literal[k] = ast.literal_eval(attrs[k])
            name = literal.get("name") if isinstance(literal.get("name"), str) else None
            classes.append({"ref": f"{f}:{c.name}", "names": list(dict.fromkeys(n for n in (name, c.name) if n)),
                            "tasks": literal.get("tasks"),
                            "bases": [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in c.bases]})
    return classes, broken


def folder_algorithms(folder: Path) -> tuple[list[dict], dict[str, str]]:
    """``(classes, broken)``: :func:`read_folder`'s classes that derive, as far as their source says, from
    :class:`Algorithm` or a built-in algorithm (directly or through another class of the folder): what
    ``fbo list`` shows, without running any of it."""
    from . import REGISTRY
    from .base import Algorithm

    classes, broken = read_folder(folder)
    known = {"Algorithm"} | {e.cls.__name__ for e in REGISTRY.values()}
    todo = [Algorithm]  # and fbo's bases (BilevelAlgorithm, the client-state and hfl families)
    while todo:
        for c in todo.pop().__subclasses__():
            if c.__module__.startswith("fbo_cli.") and c.__name__ not in known:
                known.add(c.__name__)
                todo.append(c)
    found: dict[str, dict] = {}
    while grew := [c for c in classes if c["ref"] not in found and set(c["bases"]) & known]:
        for c in grew:
            found[c["ref"]] = c
            known.add(c["ref"].rpartition(":")[2])
    return list(found.values()), broken


def _in_folder(folder: Path, name: str, broken: dict[str, str]) -> str | None:
    """The ``file.py:Class`` of the class named ``name`` (class name or literal ``name``) in ``folder``,
    read from the sources (the files that do not parse go to ``broken``); a UsageError when two define one."""
    classes, bad = read_folder(folder)
    broken.update(bad)
    refs = list(dict.fromkeys(c["ref"] for c in classes if name in c["names"]))  # a class redefined in one file
    if len(refs) > 1:
        raise UsageError(f"two classes named '{name}' in {folder}: {refs[0]} and {refs[1]} (rename one)",
                         kind="bad_value", field="algorithm", path=folder, value=name)
    return refs[0] if refs else None


def entry_points() -> dict[str, str]:
    """``{name: 'module:Class'}`` of the installed packages' entry points in the group ``fbo.algorithms``."""
    from importlib.metadata import entry_points as eps

    return {ep.name: ep.value for ep in eps(group=ENTRY_POINT_GROUP)}


def entry_point_problem(ref: str) -> str | None:
    """What is wrong with an entry point's ``module:Class`` that can be seen without running any of its code (its
    form, whether its top-level package is installed), or None: ``fbo list`` names entry points without importing
    them (an import may loop, exit or print)."""
    target, _, cls = ref.rpartition(":")
    if not target or not cls.isidentifier() or not all(p.isidentifier() for p in target.split(".")):
        return f"not module:Class: {ref!r}"
    try:
        found = importlib.util.find_spec(target.split(".")[0])  # a top-level name: finding it runs nothing
    except (ImportError, ValueError):
        found = None
    return None if found is not None else f"no module '{target.split('.')[0]}' is installed"


def find(name: str, base: Path | None = None):
    """``(class, source)`` of a user algorithm given by reference or by name (``algorithms/`` under
    ``base`` or the working folder, then the entry points); ``None`` when the name is unknown."""
    if is_reference(name):
        return load_reference(name, base)
    broken: dict[str, str] = {}
    for folder in dict.fromkeys([(base or Path.cwd()) / "algorithms", Path.cwd() / "algorithms"]):
        ref = _in_folder(folder, name, broken)
        if ref:
            return load_reference(ref)
    ref = entry_points().get(name)
    if ref:
        return load_reference(ref)
    if broken:  # the name may be in a file that does not parse
        f, why = next(iter(broken.items()))
        raise UsageError(f"unknown algorithm '{name}'; {f} could not be read ({why})",
                         kind="unknown", field="algorithm", path=f, value=name)
    return None
