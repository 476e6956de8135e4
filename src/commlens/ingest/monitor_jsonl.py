"""The commlens monitor's per-rank files (``monitor-rank<R>.jsonl``): its collective records, read back.

A running job's :class:`commlens.monitor.Monitor` writes one JSON object per line: ``{"type": "record", ...}``
with the fields of :meth:`~commlens.results.collectives.CollectiveRecord.as_wire` (every collective it
recorded), ``"window"`` rows, ``"hang"`` reports, ``"note"`` lines and an ``"end"`` line when the job
stopped cleanly. This reader keeps the records, counts the rest, and refuses a file holding none.

A record's ``seq`` is the monitor's own count of the collectives it saw on that process group, from 0 at
:meth:`Monitor.install`; ``rank`` is the process's global rank. Damaged lines (a job killed mid-write, a
corrupt byte) are left out and counted, never fatal; at most :data:`MAX_RECORDS` records are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commlens.ingest.base import DEFAULT_MAX_INPUT_BYTES, IngestError, read_source
from commlens.ingest.json_columns import (
    CollectiveColumns,
    all_of,
    codes,
    fields,
    float_column,
    int_column,
    scan_json_lines,
    strings,
)
from commlens.ops import UnknownOpError, get_op
from commlens.results.collectives import (
    MAX_GROUP_NAME,
    MAX_GROUP_RANKS,
    TIMINGS,
    CollectiveRecord,
    CollectiveRecordError,
    record_from_wire,
)
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import DTYPE_SIZES, MAX_RANKS, MAX_SIZE_BYTES

__all__ = [
    "MAX_RECORDS",
    "MonitorColumns",
    "MonitorRecords",
    "is_monitor_jsonl",
    "read_monitor_columns",
    "read_monitor_records",
]

MAX_RECORDS = 4_000_000  # records read from one set of files (about 1.2 GB of memory)
MAX_FILES = 16384
_MAX_LINE_CHARS = 1 << 16


@dataclass(frozen=True)
class MonitorRecords:
    """What the files held: the records, the files read, lines left out, and whether each rank ended cleanly."""

    records: list[CollectiveRecord]
    files: tuple[Path, ...]
    bad_lines: int
    ended: tuple[Path, ...]  # files with an "end" line (the job left the monitor cleanly)


def is_monitor_jsonl(path: Path) -> bool:
    """A ``monitor-rank*.jsonl`` file, or a directory holding one."""
    if path.is_dir():
        return any(path.glob("monitor-rank*.jsonl"))
    return path.name.startswith("monitor-rank") and path.name.endswith(".jsonl")


def read_monitor_records(path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> MonitorRecords:
    """Every record of a ``monitor-rank<R>.jsonl`` file, or of each such file in a directory.

    IngestError when no file is there, or the files hold no record.
    """
    root = Path(path)
    files = sorted(root.glob("monitor-rank*.jsonl")) if root.is_dir() else [root]
    if not files:
        raise IngestError(root, 0, "no monitor-rank<R>.jsonl file: not a commlens monitor directory")
    if len(files) > MAX_FILES:
        raise IngestError(root, 0, f"more than {MAX_FILES} monitor files")
    records: list[CollectiveRecord] = []
    bad = 0
    ended: list[Path] = []
    for file in files:
        source = read_source(file, max_bytes=max_bytes)
        for line in source.iter_lines():
            if not line.strip():
                continue
            if len(line) > _MAX_LINE_CHARS:
                bad += 1
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                bad += 1
                continue
            if not isinstance(obj, dict):
                bad += 1
                continue
            kind = obj.get("type")
            if kind == "end":
                ended.append(file)
            if kind != "record":
                continue
            try:
                records.append(record_from_wire(obj))
            except CollectiveRecordError:
                bad += 1
                continue
            if len(records) > MAX_RECORDS:
                raise IngestError(file, 0, f"more than {MAX_RECORDS} records: read fewer files at once")
    if not records:
        raise IngestError(
            root, 0, "no collective records (lines of type 'record'): was the monitor run with records on?"
        )
    return MonitorRecords(records=records, files=tuple(files), bad_lines=bad, ended=tuple(ended))


@dataclass(frozen=True)
class MonitorColumns(CollectiveColumns):
    """The records of monitor files as columns (what :func:`read_monitor_records` reads, without an object a
    record)."""

    files: tuple[Path, ...]
    rank: np.ndarray  # the process's global rank
    group_rank: np.ndarray  # its rank in the group (the global rank where the group's ranks are not listed)
    group_sizes: dict[str, int]  # each group's size as its last record says


def read_monitor_columns(path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> MonitorColumns | None:
    """The records of a monitor file or directory as columns, when every line is a well-formed JSON object and
    every record passes :func:`~commlens.results.collectives.record_from_wire`'s checks (then the values are
    the same as :func:`read_monitor_records`'); None otherwise: read it with :func:`read_monitor_records`,
    which counts the damaged lines and keeps the rest."""
    root = Path(path)
    files = sorted(root.glob("monitor-rank*.jsonl")) if root.is_dir() else [root]
    if not files or len(files) > MAX_FILES:
        return None
    parts: list[MonitorColumns] = []
    count = 0
    try:
        for file in files:  # a file at a time: its parsed lines are let go before the next is read
            text = read_source(file, max_bytes=max_bytes).text
            lines = scan_json_lines(text, _MAX_LINE_CHARS, beyond_64_bits=False)  # see _columns
            if lines is None or not all_of(lines, dict):
                return None
            records = [d for d in lines if d.get("type") == "record"]
            del lines, text
            count += len(records)
            if count > MAX_RECORDS:
                return None
            if records:
                part = _columns(tuple(files), records)
                if part is None:
                    return None
                parts.append(part)
    except IngestError:
        return None
    if not parts:
        return None
    return _merge(parts)


def _merge(parts: list[MonitorColumns]) -> MonitorColumns:
    """Files' columns as one, their name codes merged."""
    if len(parts) == 1:
        return parts[0]
    group, groups = _merged_codes(parts, "group", "groups")
    op, ops = _merged_codes(parts, "op", "ops")
    host, hosts = _merged_codes(parts, "host", "hosts")
    sizes: dict[str, int] = {}
    for p in parts:
        sizes.update(p.group_sizes)

    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])

    return MonitorColumns(
        files=parts[0].files,
        rank=joined("rank"),
        group_rank=joined("group_rank"),
        group=group,
        groups=groups,
        group_sizes=sizes,
        seq=joined("seq"),
        op=op,
        ops=ops,
        size_bytes=joined("size_bytes"),
        start_s=joined("start_s"),
        end_s=joined("end_s"),
        host=host,
        hosts=hosts,
    )


def _merged_codes(parts: list[MonitorColumns], coded: str, names: str) -> tuple[np.ndarray, list[str]]:
    """One name column of the files (``coded`` into each file's ``names``) as codes into the names of all."""
    table: dict[str, int] = {}
    columns = []
    for p in parts:
        remap = np.array([table.setdefault(n, len(table)) for n in getattr(p, names)] + [-1], dtype=np.int32)
        columns.append(remap[getattr(p, coded)])
    return np.concatenate(columns), list(table)


_FIELDS = (
    "rank",
    "group_size",
    "seq",
    "size_bytes",
    "start_s",
    "end_s",
    "group",
    "dtype",
    "op",
    "timing",
    "step",
    "host",
    "group_ranks",
)


def _columns(files: tuple[Path, ...], records: list[JsonObject]) -> MonitorColumns | None:
    """Every check of record_from_wire (and CollectiveRecord), by column; None when any record fails one.

    An integer beyond 64 bits (which orjson reads as a float) is refused: integer fields take only ints, and
    the times refuse magnitudes of 2**63 or more."""
    col = fields(records, _FIELDS)
    get = col.__getitem__
    rank = int_column(get("rank"), 0, MAX_RANKS)
    group_size = int_column(get("group_size"), 1, MAX_RANKS + 1)
    seq = int_column(get("seq"), 0, 2**62)
    size = int_column(get("size_bytes"), 0, MAX_SIZE_BYTES)
    if rank is None or group_size is None or seq is None or size is None:
        return None
    times = []
    for key in ("start_s", "end_s"):
        column = float_column(get(key))
        if column is None:
            return None
        if not (np.abs(column) < 2.0**63).all():  # finite, and no integer beyond 64 bits read as a float
            return None
        times.append(column)
    start, end = times
    if (end < start).any():
        return None
    group_names = get("group")
    dtypes = get("dtype")
    op_names = get("op")
    if not (strings(group_names, 1, MAX_GROUP_NAME) and strings(dtypes, 1, 20) and strings(op_names, 1, 40)):
        return None
    if any(t not in DTYPE_SIZES and t != "other" for t in set(dtypes)):
        return None
    timings = get("timing")
    if None in timings:  # absent: "cpu"; null stays None (and is refused)
        timings = [d.get("timing", "cpu") for d in records]
    if not all_of(timings, str) or not set(timings) <= set(TIMINGS):
        return None
    steps = get("step")
    if not all_of(steps, int, type(None)):
        return None
    given = [st for st in steps if st is not None] if None in steps else steps
    if given and (min(given) < 0 or max(given) >= 2**62):
        return None
    host_names = get("host")
    if not all_of(host_names, str, type(None)) or any(len(h) > MAX_GROUP_NAME for h in set(host_names) - {None}):
        return None
    catalog: dict[str, str] = {}
    for name in set(op_names):
        try:
            catalog[name] = get_op(name).name
        except UnknownOpError:
            return None
    group_rank = rank
    listed = get("group_ranks")
    if listed.count(None) != len(listed):
        group_rank = rank.copy()
        index_of: dict[tuple[Any, ...], dict[int, int] | None] = {}
        for i, ranks in enumerate(listed):
            if ranks is None:
                continue
            if type(ranks) is not list or len(ranks) > MAX_GROUP_RANKS:
                return None
            listed_key = tuple(ranks)
            if listed_key not in index_of:
                index_of[listed_key] = _rank_index(ranks)
            where = index_of[listed_key]
            if where is None or len(ranks) != group_size[i] or int(rank[i]) not in where:
                return None
            group_rank[i] = where[int(rank[i])]
    group_code: dict[str, int] = {}
    op_code: dict[str, int] = {}
    host_code: dict[str | None, int] = {None: -1}
    ops = list(map(catalog.__getitem__, op_names))
    sizes: dict[str, int] = dict(zip(group_names, group_size.tolist()))
    return MonitorColumns(
        files=files,
        rank=rank,
        group_rank=group_rank,
        group=codes(group_code, group_names),
        groups=list(group_code),
        group_sizes=sizes,
        seq=seq,
        op=codes(op_code, ops),
        ops=list(op_code),
        size_bytes=size,
        start_s=start,
        end_s=end,
        host=codes(host_code, host_names, -1),
        hosts=[h for h in host_code if h is not None],
    )


def _rank_index(ranks: list[Any]) -> dict[int, int] | None:
    """A group's listed ranks -> each one's first place in the list, when every one is a rank; else None."""
    if not all_of(ranks, int) or any(not 0 <= r < MAX_RANKS for r in ranks):
        return None
    where: dict[int, int] = {}
    for i, r in enumerate(ranks):
        where.setdefault(r, i)
    return where
