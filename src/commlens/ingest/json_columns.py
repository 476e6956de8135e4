"""Reading many small JSON records fast: each line parsed by the C scanner, the values then checked by column.

The readers of per-record files (NCCL Inspector logs, monitor JSONL) check every field of every record. Done
record by record in Python that is tens of microseconds a record; a job of 64 ranks x 10,000 collectives
has 640,000 of them. These helpers let a reader take a *fast path* instead: parse each line with the
standard library's C scanner, gather each field into a list, and check the lists at once (their types
with one ``set(map(type, ...))``, their ranges with numpy). The fast path only ever accepts a file whose
every line is well formed and every record passes every check; on anything else it returns None, and
the reader reads the file again on its record-by-record path, which says what is wrong where, counts
the damaged lines and reads the rest. Either path gives the same values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import numpy as np

__all__ = ["all_of", "column", "int_column", "scan_json_lines", "strings"]

_SCAN = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner json.loads runs, without its per-call wrapping


def scan_json_lines(text: str, max_chars: int) -> list[Any] | None:
    """Each line's JSON value, when every line is exactly one JSON value of at most ``max_chars`` characters
    (no blank line, no whitespace around it, no carriage return); None otherwise."""
    if "\r" in text:
        return None
    out: list[Any] = []
    append = out.append
    find = text.find
    scan = _SCAN
    pos = 0
    n = len(text)
    try:
        while pos < n:
            value, end = scan(text, pos)
            stop = find("\n", pos)
            if stop < 0:
                stop = n
            if stop != end or end - pos > max_chars:  # a value over several lines, or more after it
                return None
            append(value)
            pos = stop + 1
    except (StopIteration, ValueError, RecursionError):  # not a value here, invalid, or too deep / too long
        return None
    return out


def all_of(values: Iterable[Any], *types: type) -> bool:
    """Every value is exactly of one of ``types`` (``bool`` is not ``int`` here, as JSON tells them apart)."""
    return set(map(type, values)) <= set(types)


def int_column(values: list[Any], low: int, limit: int) -> np.ndarray | None:
    """The values as int64 when every one is an ``int`` (not a bool) with ``low <= v < limit``; else None."""
    if not all_of(values, int):
        return None
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        column = np.array(values, dtype=np.int64)
    except OverflowError:  # beyond 64 bits
        return None
    if int(column.min()) < low or int(column.max()) >= limit:
        return None
    return column


def strings(values: list[Any], low: int, high: int) -> bool:
    """Every value is a ``str`` of ``low..high`` characters."""
    if not all_of(values, str):
        return False
    if not values:
        return True
    lengths = list(map(len, values))
    return min(lengths) >= low and max(lengths) <= high


def column(rows: list[dict[str, Any]], key: str) -> list[Any] | None:
    """Each row's ``key`` (a field every row must have); None when a row lacks it."""
    try:
        return list(map(itemgetter(key), rows))
    except KeyError:
        return None
