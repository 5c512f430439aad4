"""The idx file format of MNIST and Fashion-MNIST (LeCun et al.): a 4-byte magic number
``0x00 0x00 <dtype> <ndim>``, ``ndim`` big-endian uint32 sizes, then the data in C order.

:func:`read_idx` checks every field against the file's size and names the file in each error, so a
truncated, empty or foreign file is a clear message, never a traceback."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..errors import UsageError

_DTYPES = {0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
           0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in an idx file (uncompressed)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror or e})",
                         kind="unreadable", path=path, value=e.errno) from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise UsageError(f"{path}: not an idx file ({len(raw)} bytes; an idx file starts with 00 00 <type> <ndim>)",
                         kind="corrupt", path=path)
    dtype, ndim = _DTYPES[raw[2]], raw[3]
    head = 4 + 4 * ndim
    if ndim == 0 or len(raw) < head:
        raise UsageError(f"{path}: truncated idx header ({len(raw)} bytes, {ndim} dimensions)",
                         kind="corrupt", path=path)
    shape = struct.unpack(f">{ndim}I", raw[4:head])
    n = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - head != n:
        raise UsageError(f"{path}: idx header says shape {shape} ({n} bytes of data), the file holds "
                         f"{len(raw) - head} (truncated or corrupt)", kind="corrupt", path=path)
    return np.frombuffer(raw, dtype=dtype, offset=head).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` as an idx file (used by the tests to make small ones)."""
    array = np.ascontiguousarray(array)
    code = next(c for c, d in _DTYPES.items() if d.kind == array.dtype.kind and d.itemsize == array.dtype.itemsize)
    data = array.astype(_DTYPES[code]).tobytes()
    from ..files import atomic_write

    atomic_write(path, bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + data)
