"""Run directories: ``config.yaml``, ``metrics.csv``, ``checkpoint.pt``, ``summary.json``, ``curves.png``.

Every file is written atomically (a temporary file in the same folder, then a rename), so a killed
run never leaves a half-written file; files get the user's umask (``0o666 & ~umask``).

A run is *finished* only when ``summary.json`` is its completion record: written last, it holds
the SHA-256 of the ``metrics.csv`` it summarizes (``metrics_sha256``), and :func:`run_status`
checks that hash against the file. A run that starts deletes its old summary first, so a summary
can never vouch for the metrics of another (interrupted) attempt. ``.lock`` (``fcntl.flock``,
released by the OS when its process dies) keeps two processes from running the same run at once.

This module holds the run directories' files and locks; :mod:`.table` names and formats results for
tables and figures (labels, Markdown rows, numbers, targets) and :mod:`.cost` is the cost model (what a
set of runs will cost). Their public names are importable from here too, as the rest of fbo imports them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import pandas as pd
import yaml

# the one writer and the scratch folders (fbo_cli.files), importable from here as the rest of fbo imports them
from ..files import TEMP_TOKEN, atomic_write, make_dirs, stale_scratch, temp_folder, write_figure  # noqa: F401
from ..files import stale_scratch_folders as stale_temp_folders  # noqa: F401
from .table import METRIC_LABELS, X_AXES

CHECKPOINT = "checkpoint.pt"


def code_commit() -> str:
    """``, commit <short sha>`` of the code that ran (a before/after pair names its two commits), or '' where fbo's
    own repository is not there (:func:`~fbo_cli.runs.gitrepo.own_head`)."""
    from .gitrepo import own_head

    head = own_head()
    if head is None:
        return ""
    return f", commit {head[0][:7]}{' with uncommitted changes to fbo_cli/' if head[1] else ''}"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def open_lock(run_dir: Path) -> int:
    """Make the run directory (marking its results root, :func:`claim_root`) and open its ``.lock``; a
    ``.lock`` that is a symbolic link is refused, never followed."""
    from ..errors import UsageError

    run_dir = Path(run_dir)
    claim_root(run_dir.parents[2])
    make_dirs(run_dir)
    try:
        fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        raise UsageError(f"cannot open {run_dir / '.lock'}: {e.strerror or e} (a symbolic link, or not writable)",
                         kind="unwritable", field="os", path=run_dir / ".lock", value=e.errno) from None
    if os.fstat(fd).st_size == 0:  # fbo's record that it made this lock (fbo clean removes only such locks)
        os.pwrite(fd, LOCK_TOKEN, 0)
    return fd


def lock_run(run_dir: Path, wait: bool = True) -> int | None:
    """Open and hold ``run_dir/.lock`` (an exclusive ``flock``): the descriptor, whose closing releases
    it; None, without waiting, when another process holds it and ``wait`` is False. The OS drops the lock
    when its holder dies."""
    fd = open_lock(run_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def run_lock(run_dir: Path, wait: bool = True) -> Iterator[bool]:
    """:func:`lock_run` for a ``with`` block: yields whether the lock is held."""
    fd = lock_run(run_dir, wait)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


ROOT_MARKER = ".fbo-results"
# What fbo may remove carries a token only fbo writes: its temporary files end in TEMP_TOKEN (mkstemp's prefix
# ``.<name>.``, 8 random characters, the token, save_figure's .png) and its run locks hold LOCK_TOKEN. A file
# that merely looks like one (a user's ``.lock``, ``.draft.abcdefgh``) is never removed.
LOCK_TOKEN = b"fbo run lock\n"
_TEMP = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.fbo-tmp(\.png)?")
RUN_FILES = frozenset({"config.yaml", "metrics.csv", "summary.json", CHECKPOINT, "curves.png", "run.log"})


def is_fbo_root(root: Path) -> bool:
    """A results root fbo made: it holds the marker ``.fbo-results`` (a regular file)."""
    m = Path(root) / ROOT_MARKER
    return m.is_file() and not m.is_symlink()


def claim_root(root: Path) -> None:
    """Mark ``root`` as a results root fbo made (``.fbo-results``) when fbo creates it or finds it empty;
    never because it holds files that look like runs (another tool's ``*/*/*/summary.json``). Any other
    folder (a home directory, a checkout, a root of an older fbo) is never marked: runs may still be written
    there, but nothing in it is ever removed by fbo (:func:`leftovers`)."""
    root = Path(root)
    if is_fbo_root(root) or (root.is_dir() and any(root.iterdir())):
        return
    atomic_write(root / ROOT_MARKER, "A results root made by fbo. fbo removes only what it made below it "
                 "(README, 'What fbo removes').\n")


def below(root: Path, p: Path) -> bool:
    """``p`` lies inside ``root`` and no part of its path below ``root`` is a symbolic link."""
    try:
        rel = Path(p).relative_to(root)
    except ValueError:
        return False
    q = Path(root)
    for part in rel.parts:
        if part == "..":
            return False
        q = q / part
        if q.is_symlink():
            return False
    return True


def is_temp_file(p: Path, names: frozenset[str] | None = None) -> bool:
    """``p`` is a temporary file of :func:`atomic_write` or :func:`save_figure` (``.<name>.<8 random>.fbo-tmp``,
    a regular file, not a link), of one of ``names`` when given."""
    m = _TEMP.fullmatch(p.name)
    return bool(m) and (names is None or m.group("name") in names) and p.is_file() and not p.is_symlink()


def _unheld_lock(p: Path) -> bool:
    """``p`` is a run lock fbo made (it holds :data:`LOCK_TOKEN`, a regular file) that nobody holds."""
    try:
        fd = os.open(p, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:  # a link, or not ours to open
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.pread(fd, len(LOCK_TOKEN) + 1, 0) != LOCK_TOKEN:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def leftovers(root: Path) -> list[Path]:
    """What interrupted work left under a results root fbo made (:func:`is_fbo_root`; any other folder:
    nothing), each proven fbo's by a token only fbo writes: temporary files of atomic writes (exactly
    ``.<name>.<8 random characters>.fbo-tmp``), ``.lock`` files holding :data:`LOCK_TOKEN` that nobody holds,
    the scratch folders of killed commands (:func:`temp_folder`, e.g. the report's figures), and the
    directories that removing them leaves empty (never the root). Symbolic links are neither followed nor
    removed; every other file (``.spec`` marks, held locks, the user's own, however named) stays."""
    root = Path(root)
    if not root.is_dir() or not is_fbo_root(root):
        return []
    found: list[Path] = []
    for here, dirs, files in os.walk(root):  # does not descend into linked folders
        d = Path(here)
        found += [d / x for x in sorted(dirs) if stale_scratch(d / x)]  # removed whole
        dirs[:] = sorted(x for x in dirs if not (d / x).is_symlink() and d / x not in found)
        for f in sorted(files):
            p = d / f
            if p.is_symlink():
                continue
            if is_temp_file(p) or (f == ".lock" and d != root and p.is_file() and _unheld_lock(p)):
                found.append(p)
    gone = set(found)
    for d in sorted({p.parent for p in found}, key=lambda d: -len(d.parts)):
        while d != root and below(root, d) and d not in gone and all(c in gone for c in d.iterdir()):
            found.append(d)
            gone.add(d)
            d = d.parent
    return found


def remove_leftover(p: Path) -> None:
    """Remove one of :func:`leftovers`: a file by ``unlink`` (a link itself, never its target), a folder by
    ``rmdir`` (only when empty), a killed command's :func:`temp_folder` whole."""
    import shutil

    if stale_scratch(p):
        shutil.rmtree(p, ignore_errors=True)
        return
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(p) if p.is_dir() and not p.is_symlink() else os.unlink(p)


def remove_temp_files(run_dir: Path) -> None:
    """Remove the temporary files a killed atomic write left in one run directory: only those of the run's
    own files (``.metrics.csv.<8 random>``, ...), and nothing when the run directory is a link."""
    d = Path(run_dir)
    if d.is_symlink() or not d.is_dir():
        return
    for p in d.glob(".*"):
        if is_temp_file(p, RUN_FILES):
            p.unlink(missing_ok=True)


def remove_run(run_dir: Path) -> None:
    """Remove a run directory's own files (those fbo writes, its lock, its temporary files), then the folder
    when that empties it: a file fbo did not make keeps the folder. Never through a link."""
    d = Path(run_dir)
    if d.is_symlink() or not d.is_dir():
        return
    for p in d.iterdir():
        if ((p.name in RUN_FILES or p.name == "checkpoint.bad" or is_temp_file(p)) and not p.is_dir()
                or p.name == ".lock" and _unheld_lock(p)):
            p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        d.rmdir()


def prune_empty_run(run_dir: Path) -> None:
    """Remove a run directory that holds nothing but its ``.lock`` (bad input found while building the
    run), and its algorithm and task folders when that leaves them empty: nothing half-made stays."""
    d = Path(run_dir)
    if d.is_symlink() or not d.is_dir() or any(p.name != ".lock" for p in d.iterdir()):
        return
    lock = d / ".lock"
    if lock.is_symlink() or (lock.exists() and not lock.is_file()):
        return
    lock.unlink(missing_ok=True)
    for x in (d, d.parent, d.parent.parent):
        try:
            x.rmdir()
        except OSError:
            return
    root = d.parents[2]  # a results root holding nothing but fbo's mark goes too
    if is_fbo_root(root) and [p.name for p in root.iterdir()] == [ROOT_MARKER]:
        (root / ROOT_MARKER).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.rmdir()


class RunState(NamedTuple):
    """A run directory's state as read once (:func:`run_status`, :meth:`RunDir.state`) and carried in results:
    ``state`` is ``finished``, ``partial``, ``missing`` or ``corrupt``, ``summary`` the summary read (or None),
    ``why`` what is wrong with a corrupt one. A tuple, so ``state, summary, why = run_status(d)`` still reads."""

    state: str
    summary: dict[str, Any] | None
    why: str

    @property
    def ended(self) -> bool:
        """A completion record with an ending (:data:`ENDINGS`): reused, never run again."""
        return ended(self.state, self.summary)


class RunDir:
    """One run's directory as an object: its path, its lock, its state (read once: :meth:`state` caches) and its
    files, each written atomically: ``config.yaml``, ``metrics.csv`` (:meth:`append`), ``checkpoint.pt``
    (:meth:`save_checkpoint`, :meth:`load_checkpoint`: :mod:`fbo_cli.runs.checkpoint`) and the completion record
    (:meth:`finish`). ``write`` False: a run that leaves no trace (every write is skipped; no checkpoint is read)."""

    def __init__(self, path: Path, write: bool = True):
        self.path = Path(path)
        self.write = write
        self._state: RunState | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def lock(self, wait: bool = True):
        """``with rd.lock(wait) as held:`` (:func:`run_lock`)."""
        return run_lock(self.path, wait)

    def state(self, fresh: bool = False) -> RunState:
        """The directory's :class:`RunState`, read from disk once (``fresh``: read again, e.g. under the lock)."""
        if fresh or self._state is None:
            self._state = run_status(self.path)
        return self._state

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    def begin(self) -> None:
        """An attempt starts (under the lock): what a killed atomic write left goes, and so does the old summary,
        so that no summary may vouch for this attempt's metrics."""
        if self.write:
            make_dirs(self.path)
            remove_temp_files(self.path)
            (self.path / "summary.json").unlink(missing_ok=True)
            self._state = None

    def write_config(self, cfg, device) -> None:
        if self.write:
            write_yaml(self.path / "config.yaml", {**cfg.as_dict(), "device_used": str(device)})

    def append(self, rows: list[dict[str, Any]]) -> None:
        """``metrics.csv`` holding ``rows``, the run's evaluations so far (the last one new)."""
        if self.write:
            write_csv(self.path / "metrics.csv", rows)

    def save_checkpoint(self, cfg, b, base, rows, train_time: float, eval_time: float) -> None:
        """:func:`fbo_cli.runs.checkpoint.save_checkpoint` of run ``cfg`` (``b``: its build, ``base``: its baseline)."""
        if self.write:
            from . import checkpoint

            checkpoint.save_checkpoint(self.checkpoint, cfg, b, base, rows, train_time, eval_time)

    def load_checkpoint(self, cfg, b) -> tuple[dict | None, str]:
        """:func:`fbo_cli.runs.checkpoint.load_checkpoint` into ``b``; a malformed one is moved aside to
        ``checkpoint.bad`` (so that no later run trips on it again) and the reason says so. (None, '') where
        there is none."""
        if not (self.write and self.checkpoint.is_file()):
            return None, ""
        from . import checkpoint

        c, why = checkpoint.load_checkpoint(self.checkpoint, cfg, b)
        if c is None and why.startswith("malformed"):
            os.replace(self.checkpoint, self.path / "checkpoint.bad")
            why += f"; moved to {self.path / 'checkpoint.bad'}"
        return c, why

    def drop_checkpoint(self) -> None:
        if self.write:
            self.checkpoint.unlink(missing_ok=True)

    def finish(self, summary: dict[str, Any], rows: list[dict], df: pd.DataFrame, title: str,
               keep_checkpoint: bool = False) -> dict[str, Any]:
        """The completion record: the final ``metrics.csv``, ``curves.png``, then ``summary.json`` (last, with the
        hash of the metrics it summarizes); the checkpoint goes once the run has an ending (:data:`ENDINGS`) unless
        ``keep_checkpoint`` (a failed run keeps its last good one). Returns ``summary``."""
        if self.write:
            write_csv(self.path / "metrics.csv", rows)
            if rows:
                plot_run(self.path / "curves.png", df, title, summary["metric"])
            summary["metrics_sha256"] = file_sha256(self.path / "metrics.csv")
            write_json(self.path / "summary.json", summary)  # the completion record: last
            self._state = None
            if not keep_checkpoint and summary["status"] in ENDINGS:
                self.drop_checkpoint()
        return summary


def run_status(run_dir: Path) -> RunState:
    """The run's :class:`RunState` ``(state, summary, why)``; state is ``finished`` (summary.json is the
    completion record of the metrics.csv beside it), ``partial`` (a checkpoint to resume), ``missing`` (nothing, or only
    an interrupted attempt without checkpoint) or ``corrupt`` (a summary that does not match its
    metrics, or unreadable files: reported, then redone)."""
    d = Path(run_dir)
    if (d / "summary.json").exists():
        s = read_summary(d)
        m = d / "metrics.csv"
        if s is None:
            return RunState("corrupt", None, "summary.json is not valid JSON")
        own = (s.get("run_id"), s.get("algo"), s.get("task"))
        if own != (d.name, d.parent.name, d.parent.parent.name):
            return RunState("corrupt", s, (f"summary.json is that of run {'/'.join(map(str, own[::-1]))}, not of this "
                                           f"directory {'/'.join(d.parts[-3:])} (a copy or a link of another run?)"))
        if not m.is_file():
            return RunState("corrupt", s, "metrics.csv is missing beside summary.json")
        if "metrics_sha256" in s:
            if file_sha256(m) != s["metrics_sha256"]:
                return RunState("corrupt", s, "metrics.csv does not match the hash in summary.json")
            return RunState("finished", s, "")
        # summaries written before completion records: the last row must be the summary's ledger
        df = read_metrics(m)
        led = s.get("ledger") or {}
        if df is None or df.empty or any(k not in df or int(df[k].iloc[-1]) != led.get(k)
                                          for k in ("rounds", "iterations")):
            return RunState("corrupt", s, "metrics.csv does not end where summary.json says the run ended")
        return RunState("finished", s, "")
    if (d / CHECKPOINT).is_file():
        return RunState("partial", None, "")
    return RunState("missing", None, "")


ENDINGS = ("done", "diverged")  # a finished run's statuses that end it: reused, never run again


def ended(state: str, summary: dict[str, Any] | None) -> bool:
    """Whether a run in ``state`` with ``summary`` (what :func:`run_status` read) has its completion record and an
    ending (:data:`ENDINGS`): the one reading of a run's state that the runner, the batches and the executors
    share."""
    return state == "finished" and (summary or {}).get("status") in ENDINGS


def is_finished(run_dir: Path) -> bool:
    """A run with its completion record and an ending (done or diverged): reused, never run again."""
    return ended(*run_status(run_dir)[:2])


def read_metrics(path: Path) -> pd.DataFrame | None:
    """``metrics.csv`` as a frame, or None when it is empty, binary, cut mid-row or not a regular file (a FIFO
    planted there would block the read forever)."""
    if not Path(path).is_file():
        return None
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.endswith("\n"):
        return None  # cut mid-row
    import io

    try:
        df = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError):
        return None
    if "rounds" not in df or df.isna().all(axis=1).any():
        return None
    return df


def write_yaml(path: Path, data: Any) -> None:
    atomic_write(path, yaml.safe_dump(data, sort_keys=False))


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write(path, pd.DataFrame(rows).to_csv(index=False))


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    p = Path(run_dir) / "summary.json"
    if not p.is_file():
        return None
    try:
        s = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None
    return s if isinstance(s, dict) else None


def plot_run(path: Path, df: pd.DataFrame, title: str, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    # the headline metric, the test loss and the task's own quantities (hyper-cleaning's F1, ZO-HFL's loss)
    cols = list(dict.fromkeys(c for c in (metric, "test_loss", "f1", "global_loss", "server_loss") if c in df))
    fig, axes = plt.subplots(1, len(cols), figsize=(5.2 * len(cols), 3.8), squeeze=False)
    for ax, c in zip(axes[0], cols):
        ax.plot(df["rounds"], df[c], color="C0", lw=1.6)
        ax.set_xlabel(X_AXES["rounds"])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(METRIC_LABELS.get(c, c))
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(title, fontsize=11)
    # fixed margins: tight_layout is half of the figure's cost, and a grid pays it per run (issue 37)
    fig.subplots_adjust(left=1.0 / (5.2 * len(cols)), right=1 - 0.1 / len(cols), bottom=0.14, top=0.87,
                        wspace=0.28)
    save_figure(fig, path, tight=False)


def save_figure(fig, path: Path, tight: bool = True) -> None:
    """Write a matplotlib figure atomically as PNG (:func:`fbo_cli.files.write_figure`) and close it (``tight``:
    fit its layout first)."""
    import matplotlib.pyplot as plt

    try:
        if tight:
            fig.tight_layout()
        write_figure(fig, path, dpi=130, format="png")
    finally:
        plt.close(fig)
