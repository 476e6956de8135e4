"""Reading an input file within a byte limit, gzip or not, and its JSON as the standard has it: one helper
each for the trace, dump and plan readers.

Each reader keeps its own words: these raise what reading raises (``OSError``; ``EOFError`` or
``zlib.error`` for broken gzip data; ``ValueError``, ``UnicodeDecodeError`` or ``RecursionError`` for bad
JSON), and the reader says it in its messages.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from commlens.files import read_at_most

__all__ = ["GZIP_MAGIC", "loads_strict_json", "open_input", "read_capped"]

GZIP_MAGIC = b"\x1f\x8b"


@contextmanager
def open_input(path: Path) -> Iterator[tuple[IO[bytes] | io.BufferedIOBase, bool]]:
    """The file open for reading, decompressed where it starts with gzip's magic bytes (the content
    decides, not the name); and whether it does."""
    with path.open("rb") as fp:
        gzipped = fp.read(2) == GZIP_MAGIC
        fp.seek(0)
        if not gzipped:
            yield fp, False
            return
        with gzip.GzipFile(fileobj=fp) as gz:
            yield gz, True


def read_capped(path: Path, max_bytes: int, *, gunzip: bool = False) -> bytes | None:
    """The file's bytes (decompressed where ``gunzip`` and it is gzip, :func:`open_input`); None where it
    holds more than ``max_bytes``, of which no more than one byte over is read."""
    if gunzip:
        with open_input(path) as (fp, _):
            data = read_at_most(fp, max_bytes + 1)
    else:
        with path.open("rb") as plain:
            data = read_at_most(plain, max_bytes + 1)
    return data if len(data) <= max_bytes else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_strict_json(data: bytes) -> Any:
    """``json.loads`` refusing ``NaN``, ``Infinity`` and ``-Infinity``, which JSON has no place for
    (``ValueError: NaN is not a JSON number``)."""
    return json.loads(data, parse_constant=_reject_constant)
