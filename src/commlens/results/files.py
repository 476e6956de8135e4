"""Writing files safely, and where commlens keeps a user's data: one helper each, for every writer."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["atomic_text", "user_data_dir"]


def user_data_dir() -> Path:
    """``$XDG_DATA_HOME/commlens``, else ``~/.local/share/commlens`` (a relative XDG_DATA_HOME is ignored,
    as the XDG spec says)."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "commlens"


@contextmanager
def atomic_text(path: str | Path, newline: str | None = None) -> Iterator[IO[str]]:
    """A text file written whole or not at all (a reader never sees half of it); ``-`` is stdout.

    The file gets the mode ``open()`` would give it under the umask (``mkstemp`` alone makes 0600).
    """
    if str(path) == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline=newline) as fp:
            yield fp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
