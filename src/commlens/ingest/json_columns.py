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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import contains, itemgetter
from typing import Any

import numpy as np
import orjson

from commlens.results.jsonvalue import JsonObject

__all__ = [
    "CollectiveColumns",
    "all_of",
    "codes",
    "float_column",
    "column",
    "fields",
    "int_column",
    "loads_like_json",
    "scan_json_lines",
    "strings",
]


@dataclass(frozen=True)
class CollectiveColumns:
    """Completed collective records as columns, one row each, as a reader's fast path gives them: ``group``,
    ``op`` and ``host`` are codes into ``groups``, ``ops`` and ``hosts`` (-1: no host name), times epoch seconds.
    A reader's own class adds its columns and what the file said besides."""

    group: np.ndarray
    groups: list[str]
    seq: np.ndarray
    op: np.ndarray
    ops: list[str]
    size_bytes: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    host: np.ndarray
    hosts: list[str]


_SCAN = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner json.loads runs, without its per-call wrapping


def scan_json_lines(text: str, max_chars: int, *, beyond_64_bits: bool = True) -> list[Any] | None:
    """Each line's JSON value, when every line is exactly one JSON value of at most ``max_chars`` characters
    (no blank line, no whitespace around it, no carriage return); None otherwise.

    Lines are parsed by orjson where it gives the standard library's value (:func:`loads_like_json`), else
    by the standard library's C scanner as before. With ``beyond_64_bits=False`` the text is not searched for
    integers beyond 64 bits, which orjson reads as floats of magnitude 2**63 or more: for a caller that takes
    only ints (``type(v) is int``) in its integer fields and refuses such magnitudes in its number fields."""
    if "\r" in text:
        return None
    if not text:
        return []
    lines = text.split("\n")  # a JSON string holds no raw newline: each value is within its line
    if text.endswith("\n"):
        lines.pop()
    if beyond_64_bits:
        try:
            long_int = _may_hold_long_int(text.encode())
        except UnicodeEncodeError:  # a lone surrogate: orjson refuses the line anyway
            long_int = True
        if long_int:  # orjson reads integers beyond 64 bits as floats
            return _scan_lines(lines, max_chars)
    if not lines or min(map(len, lines)) == 0 or max(map(len, lines)) > max_chars:
        return None
    if any(line[0] in " \t" or line[-1] in " \t" for line in lines):  # the C scanner refuses these
        return None
    if max(map(str.count, lines, repeat("["))) + max(map(str.count, lines, repeat("{"))) <= _DEEP:
        try:  # no line nests past the C scanner's depth: all by orjson
            return list(map(orjson.loads, lines))
        except (orjson.JSONDecodeError, RecursionError):  # NaN, 1e400, a lone surrogate, ...: line by line
            pass
    return _orjson_lines(lines)


def _orjson_lines(lines: list[str]) -> list[Any] | None:
    """Each line by orjson, or by the C scanner where orjson refuses it or it may nest deep."""
    out: list[Any] = []
    append = out.append
    loads = orjson.loads
    try:
        for line in lines:
            if len(line) > _DEEP and line.count("[") + line.count("{") > _DEEP:  # possibly past the C scanner's depth
                value = _scan_line(line)
            else:
                try:
                    value = loads(line)
                except (orjson.JSONDecodeError, RecursionError):  # NaN, 1e400, a lone surrogate, ...: as before
                    value = _scan_line(line)
            append(value)
    except (StopIteration, ValueError, RecursionError):  # not a value here, invalid, or too deep / too long
        return None
    return out


def loads_like_json(raw: bytes, *, beyond_64_bits: bool = True) -> Any:
    """``json.loads(raw)``, by orjson where the two give the same value (no integer beyond 64 bits, which orjson
    reads as a float; valid UTF-8; no NaN or out-of-range literal; nested under orjson's limit); the standard
    library otherwise, raising what it raises. With ``beyond_64_bits=False`` the text is not searched for
    such integers: the caller looks for floats of magnitude 2**63 or more where they matter."""
    if not (beyond_64_bits and _may_hold_long_int(raw)):
        try:
            return orjson.loads(raw)
        except (orjson.JSONDecodeError, RecursionError):
            pass
    return json.loads(raw)


_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _may_hold_long_int(raw: bytes) -> bool:
    """A run of 20 digits, or a minus and 19: an integer there may be beyond 64 bits (a match in a string or a
    fraction is harmless: such texts are read by the standard library, as before)."""
    zeros = raw.translate(_DIGITS_AS_ZERO)
    return b"0" * 20 in zeros or b"-" + b"0" * 19 in zeros


_DEEP = 256  # a line with more brackets than this may nest beyond the C scanner's recursion limit


def _scan_line(line: str) -> Any:
    value, end = _SCAN(line, 0)
    if end != len(line):
        raise ValueError("more after the value")
    return value


def _scan_lines(lines: list[str], max_chars: int) -> list[Any] | None:
    out: list[Any] = []
    try:
        for line in lines:
            if len(line) > max_chars:
                return None
            out.append(_scan_line(line))
    except (StopIteration, ValueError, RecursionError):
        return None
    return out


def all_of(values: Iterable[Any], *types: type) -> bool:
    """Every value is exactly of one of ``types`` (``bool`` is not ``int`` here, as JSON tells them apart)."""
    return set(map(type, values)) <= set(types)


def float_column(values: Sequence[Any]) -> np.ndarray | None:
    """The values as float64 when every one is an ``int`` or ``float`` (not a bool) that float64 holds; else None.
    The caller checks the range (NaN and infinities included)."""
    if not all_of(values, int, float):
        return None
    try:
        return np.array(values, dtype=np.float64)
    except OverflowError:  # an int beyond a float's range
        return None


def int_column(values: Sequence[Any], low: int, limit: int) -> np.ndarray | None:
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


def strings(values: Sequence[Any], low: int, high: int) -> bool:
    """Every value is a ``str`` of ``low..high`` characters."""
    if not all_of(values, str):
        return False
    if not values:
        return True
    lengths = list(map(len, values))
    return min(lengths) >= low and max(lengths) <= high


def column(rows: Sequence[Mapping[str, object]], key: str) -> list[Any] | None:
    """Each row's ``key`` (a field every row must have); None when a row lacks it."""
    try:
        return list(map(itemgetter(key), rows))
    except KeyError:
        return None


def fields(rows: Sequence[JsonObject], keys: tuple[str, ...]) -> dict[str, Sequence[Any]]:
    """Each key's column: the rows' values, None where a row lacks the key (``dict.get``'s), in one pass
    where every row has the keys the first has (the usual file), a pass a key otherwise."""
    if not rows:
        return {k: [] for k in keys}
    have = tuple(k for k in keys if k in rows[0])
    out: dict[str, Sequence[Any]] = {}
    try:
        if len(have) > 1:
            out = dict(zip(have, zip(*map(itemgetter(*have), rows))))
        elif have:
            out = {have[0]: list(map(itemgetter(have[0]), rows))}
    except KeyError:  # a row lacks one of them
        return {k: list(map(dict.get, rows, repeat(k))) for k in keys}
    for k in keys:
        if k not in out:
            out[k] = list(map(dict.get, rows, repeat(k))) if any(map(contains, rows, repeat(k))) else [None] * len(rows)
    return out


def codes(table: dict[Any, int], values: Sequence[Any], offset: int = 0) -> np.ndarray:
    """Each value's code in ``table`` (int32), a new value getting ``len(table) + offset`` as first met: what
    ``[table.setdefault(v, len(table) + offset) for v in values]`` gives, a dict lookup a distinct value."""
    local: dict[Any, int] = dict.fromkeys(values, 0)
    for v in local:
        local[v] = table.setdefault(v, len(table) + offset)
    return np.fromiter(map(local.__getitem__, values), dtype=np.int32, count=len(values))
