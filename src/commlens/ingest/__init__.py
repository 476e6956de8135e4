"""Read other tools' outputs (and commlens' own files) into runs: one file, one run.

The formats are the entries of :data:`FORMATS` (``commlens.ingest.registry``; see ``docs/ingest.md``).
Adding one is a module that declares its ``FORMAT`` (name, description, sniffer, parser) and a line in
the registry. The stage's entry is :func:`run`: one :class:`IngestRequest` (a file and what to stamp on its runs) in,
the file's runs out; :func:`load_runs` is its shorthand.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from commlens.ingest.base import (
    DEFAULT_MAX_INPUT_BYTES,
    STDIN,
    GivenFacts,
    IngestError,
    IngestOptionError,
    IngestWarning,
    InputFormat,
    ParsedRun,
    Source,
    content_run_id,
    read_source,
)
from commlens.ingest.registry import FORMATS, detect_format, detect_source_format, get_format
from commlens.ops import UnknownOpError, get_op
from commlens.results.records import RecordError, Run
from commlens.results.runconfig import RUN_CONFIGS, IngestedSettings

__all__ = [
    "FORMATS",
    "DEFAULT_MAX_INPUT_BYTES",
    "STDIN",
    "GivenFacts",
    "IngestError",
    "IngestOptionError",
    "IngestWarning",
    "IngestRequest",
    "InputFormat",
    "Source",
    "detect_format",
    "get_format",
    "load_runs",
    "load_source_runs",
    "parse_time",
    "read_source",
    "run",
]


def parse_time(text: str) -> str:
    """An ISO 8601 date or date/time as ISO UTC; a time without a zone is taken as UTC, a date as its midnight
    (else IngestOptionError)."""
    value = text.strip()
    iso = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        raise IngestOptionError(
            f"{text!r} is not an ISO 8601 date or date/time (e.g. 2025-05-01 or 2025-05-01T13:45:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class IngestRequest:
    """One file to read into runs, and what to stamp on them. Checked when built, in this order
    (:class:`IngestOptionError`): ``time`` an ISO 8601 date or date/time, ``op`` a known collective, ``fmt`` a
    registered format."""

    path: str | Path  # the file; ``-``: standard input
    tag: str | None = None  # label every run with this tag
    revision: str | None = None  # the code revision the runs measured
    time: str | None = None  # ISO 8601: the runs' started_at (default: the file's own start time, else its mtime)
    fmt: str = "auto"  # a name of FORMATS, or auto (detected from the text)
    op: str | None = None  # the collective of a log that does not name it (nccl-tests text without its command)
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES  # a file over this is refused, read no further
    given: GivenFacts | None = None  # what a fragment of a log lacks (world size, hosts, GPU), stored as the user's

    def __post_init__(self) -> None:
        if self.time is not None:
            parse_time(self.time)
        if self.op is not None:
            try:
                get_op(self.op)
            except UnknownOpError as e:
                raise IngestOptionError(str(e)) from None
        if self.fmt != "auto":
            get_format(self.fmt)

    @property
    def started_at(self) -> str | None:
        """``time`` as ISO UTC (:func:`parse_time`), or None."""
        return parse_time(self.time) if self.time is not None else None


def run(request: IngestRequest) -> tuple[Run, ...]:
    """The runs in one file, read completely before anything is returned.

    Without ``request.time`` a run's ``started_at`` is the file's own start time, else the file's modification
    time. Raises :class:`IngestError` (``FILE:LINE: ...``) for a file that cannot be read; warns
    (:class:`IngestWarning`) about figures that look inconsistent.
    """
    source = read_source(request.path, max_bytes=request.max_input_bytes)
    _, runs = load_source_runs(
        source,
        tag=request.tag,
        revision=request.revision,
        started_at=request.started_at,
        fmt=request.fmt,
        op=request.op,
        given=request.given,
    )
    return tuple(runs)


def load_runs(
    path: str | Path,
    *,
    tag: str | None = None,
    revision: str | None = None,
    time: str | None = None,
    fmt: str = "auto",
    op: str | None = None,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    given: GivenFacts | None = None,
) -> list[Run]:
    """Shorthand for :func:`run` of the :class:`IngestRequest` these arguments make (its fields), as a list."""
    return list(run(IngestRequest(path, tag, revision, time, fmt, op, max_input_bytes, given)))


def load_source_runs(
    source: Source,
    *,
    tag: str | None = None,
    revision: str | None = None,
    started_at: str | None = None,
    fmt: str = "auto",
    op: str | None = None,
    given: GivenFacts | None = None,
) -> tuple[str, list[Run]]:
    """The format and runs of text already read (``read_source``): detected, parsed and hashed from memory.

    ``started_at`` is ISO UTC (as :func:`parse_time` gives it). A JSON list of commlens runs (what
    ``commlens export --format json`` writes) gives each of its runs; a log of several nccl-tests
    invocations with different settings one run each; any other file one run.
    """
    candidates = tuple(FORMATS.values()) if fmt == "auto" else (get_format(fmt),)
    for candidate in candidates:
        if candidate.run_list is not None and candidate.run_list.sniff(source):
            runs = candidate.run_list.load(source, tag=tag, revision=revision, started_at=started_at)
            return candidate.name, runs
    chosen = get_format(detect_source_format(source)) if fmt == "auto" else get_format(fmt)
    if given and not chosen.takes_given:
        raise IngestOptionError(
            f"{source.path}: the world size, hosts or GPU can be given only for nccl-tests logs, not {chosen.name} input"
        )
    if chosen.takes_given:  # its parser takes ``given`` beside what every Parser takes
        parsed = cast(Any, chosen.parse)(source, op=op, given=given)
    else:
        parsed = chosen.parse(source, op=op)
    parts = parsed.split or [parsed]
    return chosen.name, [
        _to_run(
            source,
            chosen.name,
            part,
            tag=tag,
            revision=revision,
            started_at=started_at,
            part=(i, len(parts)) if len(parts) > 1 else None,
        )
        for i, part in enumerate(parts)
    ]


def _to_run(
    source: Source,
    fmt: str,
    parsed: ParsedRun,
    *,
    tag: str | None,
    revision: str | None,
    started_at: str | None,
    part: tuple[int, int] | None = None,
) -> Run:
    """``part``: (index, count) of a run that is one of several in its file; its id is the file's and its index."""
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
    config = parsed.config
    if not isinstance(config, RUN_CONFIGS):
        settings = IngestedSettings(dict(config))
        config = settings if parsed.config_as_written else settings.with_file(source.path.name)
    try:
        return Run(
            run_id=parsed.run_id
            or content_run_id(fmt if part is None else f"{fmt}#{part[0] + 1}/{part[1]}", source.text),
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
