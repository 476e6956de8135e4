"""Writing files safely, and where commlens keeps a user's data: one helper each, for every writer.

A leaf module (it imports nothing of commlens), so every stage may use it, as ``commlens.specdata``.
"""

from __future__ import annotations

import errno
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_bytes", "atomic_text", "read_at_most", "user_data_dir"]

_CHUNK_BYTES = 1 << 20


def user_data_dir() -> Path:
    """``$XDG_DATA_HOME/commlens``, else ``~/.local/share/commlens`` (a relative XDG_DATA_HOME is ignored,
    as the XDG spec says)."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "commlens"


def read_at_most(fp: IO[bytes] | io.BufferedIOBase, limit_bytes: int) -> bytes:
    """Up to ``limit_bytes`` from ``fp``, read in 1 MiB chunks: memory follows what the file holds.

    ``fp.read(limit_bytes)`` reserves the whole limit before reading a byte (a 2 GiB bound is 2 GiB of
    address space even for a 3 KB file, which fails under ``ulimit -v``).
    """
    out = io.BytesIO()  # getvalue() hands over its buffer: no second copy of what was read
    left = limit_bytes
    while left > 0:
        chunk = fp.read(min(_CHUNK_BYTES, left))
        if not chunk:
            break
        out.write(chunk)
        left -= len(chunk)
    return out.getvalue()


@contextmanager
def atomic_text(
    path: str | Path, newline: str | None = None, *, fsync: bool = False, make_parents: bool = True
) -> Iterator[IO[str]]:
    """A text file written whole or not at all (a reader never sees half of it); ``-`` is stdout.

    The file gets the mode ``open()`` would give it under the umask (``mkstemp`` alone makes 0600);
    ``fsync``: on disk before it is renamed into place (a file others read back after a crash);
    ``make_parents=False``: a missing directory is a ``FileNotFoundError`` (a path a user typed), not created.
    """
    if str(path) == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    with _atomic(Path(path), "w", newline, fsync, make_parents) as fp:
        yield fp


@contextmanager
def atomic_bytes(path: str | Path, *, fsync: bool = False) -> Iterator[IO[bytes]]:
    """:func:`atomic_text` for bytes (no stdout)."""
    with _atomic(Path(path), "wb", None, fsync) as fp:
        yield fp


@contextmanager
def _atomic(path: Path, mode: str, newline: str | None, fsync: bool, make_parents: bool = True) -> Iterator[Any]:
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"no directory {path.parent}", str(path))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, newline=newline) if "b" not in mode else os.fdopen(fd, mode) as fp:
            yield fp
            if fsync:
                fp.flush()
                os.fsync(fp.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
