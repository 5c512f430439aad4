"""Errors a user can fix. The CLI prints them without a traceback and exits with code 2."""

from __future__ import annotations

from pathlib import Path


class UsageError(Exception):
    """Bad input: unknown name, invalid value, unreadable spec. Exit code 2.

    The message is for the user; what a program (a test, a caller that recovers) tells cases apart by is
    ``kind``, a short slug that does not change when the wording does, and the fields that name the offending
    input: ``field`` (a key or an option: ``rounds``, ``--seed``), ``path`` (a file or folder) and ``value`` (what
    was given). Kinds in use:

    - ``unknown``: a name fbo does not know (``field`` says which sort: ``key``, ``algorithm``, ``task``, ...);
    - ``unsupported``: a known name that does not go with another (an algorithm on a task, a dataset);
    - ``bad_value``: a value of the wrong type or out of its range (``field``, ``value``);
    - ``bad_yaml``: a YAML file that is not valid, too large, too deep, an alias bomb (``path``, ``field``:
      ``bytes``, ``depth``, ``aliases``, ``syntax``, ``text``);
    - ``bad_spec``: a spec, cases file, ``settled.yaml`` or ``tuned.yaml`` whose content breaks its rules
      (``path``, ``field``: the entry at fault);
    - ``not_found``: a file or folder that is not there (``path``);
    - ``unreadable``: a file the system will not read (``path``; ``value``: the errno);
    - ``corrupt``: a data or results file the system reads whose content is not what fbo expects (a truncated idx
      file, a dataset file that is damaged or not the dataset's own, a runs table without its columns; ``path``;
      ``field``: ``dataset`` with its name as ``value``, ``sha256`` with the digest found, ``columns``);
    - ``bad_path``: a path the file system cannot hold or fbo may not change, met anywhere in a command (``path``;
      ``value``: the errno: ENAMETOOLONG, ELOOP, EACCES, EPERM);
    - ``unwritable``: a path fbo may not write (``path``; ``field``: ``blocked``, ``link``, ``not_regular``,
      ``kernel``, ``permission``, ``os`` with the errno as ``value``);
    - ``not_fbos``: a folder fbo would remove files from that fbo did not make (``path``);
    - ``failed``: an external program fbo ran failed, or a step that found no answer (a tuning whose every point
      failed, ``--relabel`` choosing otherwise; ``value``: its exit status or error);
    - ``user_code``: a user's algorithm file or module misbehaved at import (``field``: ``exit`` with the
      ``sys.exit`` code as ``value``, ``exception`` with the exception's type name, ``guard`` for an ``os._exit``,
      an exit handler or a change of folder; ``path``: the file), or changed fbo's classes (``patched``, with
      ``'Class.attr' (changed by FILE)`` as ``value``);
    - ``missing``: a required argument or option not given (``field``: ``TASK``, ``--algo``);
    - ``needs_yes``: a step that would remove much, or what may be the user's own, asks for ``--yes`` (``field``:
      the option, ``--prune``; ``value``: how many it would remove);
    - ``busy``: a run directory another fbo process holds (``path``; raised as :class:`RunBusy`);
    - ``usage``: the default, which no raise in fbo_cli relies on (``tests/test_architecture.py`` refuses a
      ``UsageError(...)`` without ``kind=``; an explicit ``kind="usage"`` says why in a comment).

    In a spec (``bad_spec``, ``unknown``) ``path`` is the spec file and ``field`` its top-level key (``seeds``,
    ``settings``, ``claims``, ``tune.score``); an error of a cell (a setting's ``tau: 0``) keeps its own kind and
    field, reworded to say where (:meth:`reworded`).
    """

    def __init__(self, message: str = "", *, kind: str = "usage", field: str | None = None,
                 path: str | Path | None = None, value=None):
        super().__init__(message)
        self.kind, self.field, self.value = kind, field, value
        self.path = None if path is None else str(path)

    def reworded(self, message: str) -> UsageError:
        """The same error (kind and fields) told in other words: a caller that adds where it happened."""
        return UsageError(message, kind=self.kind, field=self.field, path=self.path, value=self.value)


class DatasetMissing(UsageError):
    def __init__(self, name: str, looked: list[Path], hint: str = "", cause: str = ""):
        where = ", ".join(str(p) for p in looked)
        msg = (f"dataset '{name}' not found (looked in {where}). Get it by running with network access "
               f"(it downloads into --data-dir), or copy it into --data-dir")
        if hint:
            msg += f", {hint}"
        msg += (". Offline datasets: mnist (`fbo fetch mnist`), fashion-mnist (Debian package), mnist5k, digits, "
                "breast-cancer, synthetic.")
        if cause:
            msg += f" (download failed: {cause.splitlines()[0][:200]})"
        super().__init__(msg, kind="not_found", field="dataset", value=name)


class Terminated(KeyboardInterrupt):
    """SIGTERM to the command (a scheduler's stop, ``kill``): ends it as Ctrl-C does, but reached this process
    alone, so the executors pass it on to the processes they started (Ctrl-C reaches the whole process group)."""
