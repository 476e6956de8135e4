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

from commlens.ingest.base import DEFAULT_MAX_INPUT_BYTES, IngestError, read_source
from commlens.results.collectives import CollectiveRecord, CollectiveRecordError, record_from_wire

__all__ = ["MAX_RECORDS", "MonitorRecords", "is_monitor_jsonl", "read_monitor_records"]

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
