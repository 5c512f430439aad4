"""The one writer of every file fbo writes, and fbo's scratch folders. Under every layer (like ``errors``), so that
the data loaders, the runs, the figures and the report all write through it.

A file is written atomically (a temporary file ``.<name>.<8 random>.fbo-tmp`` beside it, then a rename), with
the user's umask, and only over a regular file or nothing: a target that is a symbolic link, a folder, a device,
a FIFO or a socket, or a file of the kernel (``/proc``, ``/sys``) is refused (a :class:`UsageError`, exit 2,
naming it) before anything is written beside it, so ``fbo report --md /dev/null`` never replaces the system's
``/dev/null`` nor leaves ``/dev/null-figures/`` behind.

A scratch folder (:func:`temp_folder`, ``[.]fbo-KIND-PID-XXXXXXXX``) holds, from its creation, fbo's token
``.fbo-scratch``: the process that uses it, as its pid and its start time (``/proc/PID/stat``: a reused pid has
another). A folder is fbo's to remove (:func:`stale_scratch`) only when its name, its token and its owner say
so, that process is gone, and nothing in it is older than the token (nothing put there before fbo made it);
a folder that merely looks like one (``fbo-report-2025-november/``) is never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterator

from .errors import UsageError

TEMP_TOKEN = ".fbo-tmp"  # the suffix of an atomic write's temporary file
SCRATCH_TOKEN = ".fbo-scratch"  # the token file inside a scratch folder
_SCRATCH = re.compile(r"\.?fbo-(?P<kind>report|mnist|figures|ray)-(?P<pid>\d+)-[a-z0-9_]{8}")
_KERNEL = ("/proc", "/sys")


def short(path: Path | str) -> str:
    """A path as a message shows it: at most 300 characters (a 300-byte name is data, not a screenful)."""
    s = str(path)
    return s if len(s) <= 300 else s[:150] + "..." + s[-100:]


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def check_target(path: Path | str, what: str = "") -> Path:
    """``path`` if fbo may write a file there: nothing is there, or a regular file that is not a symbolic link, and
    it is not a file of the kernel. Otherwise a :class:`UsageError` naming it (``what``: the option, for the
    message). Checked before anything is created beside it."""
    raw = str(path)
    path = Path(path)
    lead = f"{what}: " if what else ""
    if not raw or raw.endswith("/") or path.name in ("", ".", ".."):
        raise UsageError(f"{lead}cannot write {raw!r}: name a file, not a folder", kind="unwritable", field="folder",
                         path=raw)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise UsageError(f"{lead}cannot write {short(path)}: a part of that path is a regular file", kind="unwritable",
                         field="blocked", path=path) from None
    except OSError as e:  # a name longer than the file system allows, a loop of links, ...
        raise UsageError(f"{lead}cannot write {short(path)}: {e.strerror or e}", kind="unwritable", field="os",
                         path=path, value=e.errno) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{lead}cannot write {short(path)}: it is a symbolic link, and fbo never writes through a "
                         "link (remove the link, or name another file)", kind="unwritable", field="link", path=path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{lead}cannot write {short(path)}: it exists and is {_kind(st.st_mode)}, not a regular "
                         "file (fbo writes only regular files; name another file)", kind="unwritable",
                         field="not_regular", path=path)
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        where = Path(os.path.realpath(path.parent))
        if any(where == Path(k) or Path(k) in where.parents for k in _KERNEL):
            raise UsageError(f"{lead}cannot write {short(path)}: a file of the kernel ({where}), not a regular file",
                             kind="unwritable", field="kernel", path=path)
    return path


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that reports a path blocked by a regular file, or unwritable, as bad input."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        why = _blocked(Path(path))
        raise UsageError(f"cannot create directory {short(path)}: {why}", kind="unwritable",
                         field="dangling" if why.endswith(_DANGLING) else "blocked", path=path) from None
    except PermissionError:
        raise UsageError(f"cannot create directory {short(path)}: permission denied", kind="unwritable",
                         field="permission", path=path) from None
    except OSError as e:  # e.g. a name longer than the file system allows
        raise UsageError(f"cannot create directory {short(path)}: {e.strerror or e}", kind="unwritable", field="os",
                         path=path, value=e.errno) from None


_DANGLING = "(dangling): remove it, or name another folder"


def _blocked(path: Path) -> str:
    """What part of ``path`` keeps it from being a folder: a dangling link, a link, or a file."""
    for q in [*reversed(path.parents), path]:
        if q.is_symlink() and not q.exists():
            return f"{short(q)} is a symbolic link to nothing {_DANGLING}"
        if q.exists() and not q.is_dir():
            return f"{short(q)} is {'a symbolic link to ' if q.is_symlink() else ''}a regular file"
    return "a part of that path is a regular file"


@contextlib.contextmanager
def atomic_file(path: Path | str, what: str = "") -> Iterator[IO[bytes]]:
    """A binary file to write ``path`` through: written whole or not at all (a temporary file beside it, renamed
    over it when the block ends without an error), only where :func:`check_target` allows."""
    path = check_target(path, what)
    make_dirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_TOKEN)
    except OSError as e:
        raise UsageError(f"cannot write {short(path)}: {e.strerror or e}", kind="unwritable", field="os", path=path,
                         value=e.errno) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
        check_target(path, what)  # what appeared there meanwhile (a link planted while writing) is not replaced
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno and not e.filename:
            raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(path)) from None  # say which file
        raise


def atomic_write(path: Path | str, text: str | bytes, what: str = "") -> None:
    """Write ``text`` (str as UTF-8) to ``path`` through :func:`atomic_file`."""
    with atomic_file(path, what) as f:
        f.write(text.encode() if isinstance(text, str) else text)


def write_figure(fig, path: Path | str, **savefig) -> None:
    """Save a matplotlib figure to ``path`` through :func:`atomic_file` (its format from the suffix)."""
    path = Path(path)
    with atomic_file(path) as f:
        fig.savefig(f, format=savefig.pop("format", path.suffix.lstrip(".") or "png"), **savefig)


# ---- scratch folders --------------------------------------------------------------------------------------------


def started_at(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat), None when it is gone: a pid
    with another start time is another process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError, ValueError):
        return None


def _token(pid: int, start: str | None) -> str:
    return f"fbo scratch folder\n{pid} {start}\n"


def temp_folder(kind: str, parent: Path | None = None) -> Path:
    """A new private scratch folder ``fbo-KIND-PID-XXXXXXXX`` (``.fbo-...`` inside ``parent``, default the
    system's temporary folder) holding fbo's token (this process's pid and start time), so that what a killed
    command left is removed by ``fbo clean`` once that process is gone (:func:`stale_scratch`)."""
    where = parent or tempfile.gettempdir()
    try:
        d = Path(tempfile.mkdtemp(prefix=f"{'.' if parent else ''}fbo-{kind}-{os.getpid()}-", dir=parent))
        fd = os.open(d / SCRATCH_TOKEN, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_token(os.getpid(), started_at(os.getpid())))
    except OSError as e:
        raise UsageError(f"cannot create a scratch folder in {short(where)}: {e.strerror or e}",
                         kind="unwritable", field="os", path=where, value=e.errno) from None
    return d


def scratch_token(d: Path) -> Path | None:
    """``d``'s token file, ``None`` when it has none."""
    t = Path(d) / SCRATCH_TOKEN
    return t if t.is_file() and not t.is_symlink() else None


def stale_scratch(p: Path) -> bool:
    """``p`` is a :func:`temp_folder` whose process is gone: its name, its owner (this user) and its token (the
    pid of its name and a start time no living process has) say so, and nothing in it is older than the token
    (whatever was there before fbo made the folder, or was moved in before, keeps it)."""
    p = Path(p)
    m = _SCRATCH.fullmatch(p.name)
    try:
        if not m or p.is_symlink() or not p.is_dir() or p.lstat().st_uid != os.getuid():
            return False
        t = scratch_token(p)
        if t is None:
            return False
        head, _, rest = t.read_text()[:200].partition("\n")
        pid, start = rest.split()
        if head != "fbo scratch folder" or pid != m["pid"] or t.lstat().st_uid != os.getuid():
            return False
        if started_at(int(pid)) == start:
            return False  # still running
        born = t.lstat().st_ctime_ns
        for here, dirs, files in os.walk(p):
            for x in dirs + files:
                q = Path(here, x)
                st = q.lstat()
                if q != t and (st.st_ctime_ns < born or st.st_uid != os.getuid()):
                    return False
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return True


def stale_scratch_folders(parent: Path | None = None) -> list[Path]:
    """The :func:`temp_folder` folders in ``parent`` (default the system's temporary folder) that killed commands
    left: ``fbo-report-*``, ``fbo-mnist-*``, ``fbo-ray-*``, ``.fbo-figures-*``, each proven by its token."""
    parent = Path(parent or tempfile.gettempdir())
    return sorted(p for p in parent.glob("*fbo-*-*-*") if stale_scratch(p))
