"""Read other tools' outputs (and commlens' own files) into runs: one file, one run.

Formats (see ``docs/ingest.md``): ``nccl-tests`` (text logs), ``nccl-tests-json``
(``-J`` files), ``param`` (PARAM comms ``COMMS-RES`` output), ``commlens``
(``commlens.run/N`` JSON). Adding one is a module with a ``parse_*(source, *, op)``
function and a line in ``PARSERS``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Callable

from commlens.ingest.base import (
    DEFAULT_MAX_INPUT_BYTES,
    STDIN,
    IngestError,
    IngestWarning,
    ParsedRun,
    Source,
    content_run_id,
    read_source,
)
from commlens.ingest.commlens_json import is_run_list, load_run_list, parse_commlens_json
from commlens.ingest.detect import detect_format, detect_source_format
from commlens.ingest.nccltests_json import parse_nccl_tests_json
from commlens.ingest.nccltests_text import parse_nccl_tests_text
from commlens.ingest.param import parse_param
from commlens.ops import UnknownOpError, get_op
from commlens.results.records import RecordError, Run

__all__ = [
    "FORMATS", "PARSERS", "DEFAULT_MAX_INPUT_BYTES", "STDIN", "IngestError", "IngestWarning", "Source",
    "detect_format", "load_runs", "load_source_runs", "parse_time", "read_source",
]

PARSERS: dict[str, Callable[..., ParsedRun]] = {
    "nccl-tests": parse_nccl_tests_text,
    "nccl-tests-json": parse_nccl_tests_json,
    "param": parse_param,
    "commlens": parse_commlens_json,
}
FORMATS: tuple[str, ...] = tuple(PARSERS)


def parse_time(text: str) -> str:
    """An ISO 8601 date or date/time as ISO UTC; a time without a zone is taken as UTC, a date as its midnight."""
    value = text.strip()
    iso = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date or date/time (e.g. 2025-05-01 or "
                         f"2025-05-01T13:45:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def load_runs(
    path: str | Path,
    *,
    tag: str | None = None,
    revision: str | None = None,
    time: str | None = None,
    fmt: str = "auto",
    op: str | None = None,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> list[Run]:
    """The runs in one file (``-``: standard input), read completely before anything is returned.

    ``time`` (ISO 8601) places the run in history as its ``started_at``; without
    it the file's own start time is used, else the file's modification time.
    ``op`` names the collective of a log that does not say (nccl-tests text
    without its command line). Raises :class:`IngestError` (``FILE:LINE: ...``)
    for a file that cannot be read; warns (:class:`IngestWarning`) about
    figures that look inconsistent. A file over ``max_input_bytes`` is refused, read no further.
    """
    started_at = parse_time(time) if time is not None else None
    if op is not None:
        try:
            get_op(op)
        except UnknownOpError as e:
            raise ValueError(str(e)) from None
    if fmt != "auto" and fmt not in PARSERS:
        raise ValueError(f"unknown format {fmt!r}; known: auto, {', '.join(FORMATS)}")
    source = read_source(path, max_bytes=max_input_bytes)
    return load_source_runs(source, tag=tag, revision=revision, started_at=started_at, fmt=fmt, op=op)[1]


def load_source_runs(
    source: Source,
    *,
    tag: str | None = None,
    revision: str | None = None,
    started_at: str | None = None,
    fmt: str = "auto",
    op: str | None = None,
) -> tuple[str, list[Run]]:
    """The format and runs of text already read (``read_source``): detected, parsed and hashed from memory.

    ``started_at`` is ISO UTC (as :func:`parse_time` gives it). A JSON list of commlens runs (what
    ``commlens export --format json`` writes) gives each of its runs; any other file one run.
    """
    if fmt in ("auto", "commlens") and is_run_list(source):
        return "commlens", load_run_list(source, tag=tag, revision=revision, started_at=started_at)
    if fmt == "auto":
        fmt = detect_source_format(source)
    parser = PARSERS.get(fmt)
    if parser is None:
        raise ValueError(f"unknown format {fmt!r}; known: auto, {', '.join(FORMATS)}")
    parsed = parser(source, op=op)
    return fmt, [_to_run(source, fmt, parsed, tag=tag, revision=revision, started_at=started_at)]


def _to_run(source: Source, fmt: str, parsed: ParsedRun, *, tag: str | None, revision: str | None,
            started_at: str | None) -> Run:
    notes = list(parsed.notes)
    finished_at = parsed.finished_at
    if started_at is not None:
        finished_at = None  # the file's end time belongs to its own start time, not to the one given
    else:
        started_at = parsed.started_at
        if started_at is not None and parsed.started_at_note:
            notes.append(parsed.started_at_note)
    if started_at is None and source.mtime_s is not None:
        mtime = dt.datetime.fromtimestamp(source.mtime_s, dt.timezone.utc)
        started_at = mtime.isoformat(timespec="seconds")
        notes.append("the file does not say when it ran: started_at is its modification time (set --time)")
    elif started_at is None:
        started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        notes.append("the input (a pipe) does not say when it ran: started_at is when it was read (set --time)")
    config = dict(parsed.config)
    if fmt != "commlens":  # a commlens run keeps its own config as written
        config.setdefault("ingested_from", source.path.name)
    try:
        return Run(
            run_id=parsed.run_id or content_run_id(fmt, source.text),
            started_at=started_at,
            finished_at=finished_at,
            system=parsed.system,
            measurements=tuple(parsed.measurements),
            status=parsed.status,
            tag=tag if tag is not None else parsed.tag,
            revision=revision if revision is not None else parsed.revision,
            command_line=parsed.command_line,
            source=parsed.source,
            config=config,
            notes=tuple(notes),
        )
    except RecordError as e:
        raise source.error(1, str(e)) from None
