"""Errors a user can fix. The CLI prints them without a traceback and exits with code 2."""

from __future__ import annotations

from pathlib import Path


class UsageError(Exception):
    """Bad input: unknown name, invalid value, unreadable spec. Exit code 2."""


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
        super().__init__(msg)


class Terminated(KeyboardInterrupt):
    """SIGTERM to the command (a scheduler's stop, ``kill``): ends it as Ctrl-C does, but reached this process
    alone, so the executors pass it on to the processes they started (Ctrl-C reaches the whole process group)."""
