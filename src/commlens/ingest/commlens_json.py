"""commlens' own run files (``"format": "commlens.run/N"``): one run, or a list of runs.

One run is what ``commlens bench --json`` writes; a JSON list of runs is what
``commlens export --format json`` writes. Each run keeps its run id, samples and
everything else; only what the caller passes (tag, revision, time) is applied on
top. Errors point at the line of the measurement that cannot be read.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from commlens.ingest.base import InputFormat, ParsedRun, PatternSniff, RunList, Source, json_line, load_json
from commlens.results.jsonfmt import FormatError, run_from_dict
from commlens.results.records import Run

__all__ = ["FORMAT", "is_run_list", "load_run_list", "parse_commlens_json"]

# A JSON list that opens with an object (or is empty); a log with ``[1,0]<stdout>:`` prefixes is not one.
_RUN_LIST_START = re.compile(r"\s*\[\s*[{\]]")
_HEAD_CHARS = 512
# A commlens run's own format tag, anywhere in a JSON document.
_SNIFF_RE = re.compile(r'"format"\s*:\s*"commlens\.run/')


def _error_line(source: Source, doc: Any, where: tuple[int, ...] = ()) -> int:
    """The line of the first measurement of ``doc`` (the run at ``where``) that does not load on its own,
    else the line of the run itself."""
    if isinstance(doc, dict):
        measurements = doc.get("measurements")
        try:
            run_from_dict({**doc, "measurements": []})
        except (FormatError, TypeError, ValueError):
            measurements = None  # the run itself, not one of its measurements
        if isinstance(measurements, list):
            for i, m in enumerate(measurements):
                try:
                    run_from_dict({**doc, "measurements": [m]})
                except (FormatError, TypeError, ValueError):
                    return json_line(source.text, (*where, "measurements", i))
    return json_line(source.text, where) if where else 1


def parse_commlens_json(source: Source, *, op: str | None = None) -> ParsedRun:
    """The run in a commlens JSON file; ``op`` is not needed (every measurement names its op)."""
    data = load_json(source)
    try:
        run = run_from_dict(data)
    except FormatError as e:
        raise source.error(_error_line(source, data), str(e)) from None
    return ParsedRun(
        source=run.source,
        system=run.system,
        measurements=list(run.measurements),
        config=run.config,
        notes=list(run.notes),
        command_line=run.command_line,
        started_at=run.started_at,
        finished_at=run.finished_at,
        status=run.status,
        run_id=run.run_id,
        config_as_written=True,
        tag=run.tag,
        revision=run.revision,
    )


def is_run_list(source: Source) -> bool:
    """Whether the text opens as a JSON list of objects, as ``commlens export --format json`` writes."""
    return bool(_RUN_LIST_START.match(source.text, 0, _HEAD_CHARS))


def load_run_list(
    source: Source,
    *,
    tag: str | None = None,
    revision: str | None = None,
    started_at: str | None = None,
) -> list[Run]:
    """The runs of a JSON list of ``commlens.run/N`` documents, in file order, each read completely.

    ``tag`` and ``revision`` replace every run's. ``started_at`` (ISO 8601 UTC, as
    ``commlens.ingest.parse_time`` gives it) replaces the start time of a list of one run
    (and drops its end time, as for any file); a list of several runs keeps each run's own
    time, and is refused with one. Raises IngestError at the line of what cannot be read.
    """
    data = load_json(source)
    if not isinstance(data, list):
        raise source.error(1, "expected a JSON list of commlens runs (as `commlens export --format json` writes)")
    if not data:
        raise source.error(1, "an empty list: no runs to ingest")
    if started_at is not None and len(data) > 1:
        raise source.error(
            1,
            f"{len(data)} runs, each with its own start time: one time for the whole file "
            f"applies only to a file of one run",
        )
    runs = []
    for i, doc in enumerate(data):
        try:
            run = run_from_dict(doc)
        except FormatError as e:
            raise source.error(_error_line(source, doc, (i,)), f"[{i}]: {e}") from None
        runs.append(_given(run, tag, revision, started_at))
    return runs


def _given(run: Run, tag: str | None, revision: str | None, started_at: str | None) -> Run:
    """The run with what the user gave in place of its own (a start time drops the end time)."""
    if tag is None and revision is None and started_at is None:
        return run
    return replace(
        run,
        tag=run.tag if tag is None else tag,
        revision=run.revision if revision is None else revision,
        started_at=run.started_at if started_at is None else started_at,
        finished_at=run.finished_at if started_at is None else None,
    )


FORMAT = InputFormat(
    name="commlens",
    description="commlens run JSON (one run, or a list as `commlens export` writes)",
    document="json",
    sniff=PatternSniff(_SNIFF_RE),
    marker='a commlens run ("format": "commlens.run/N")',
    parse=parse_commlens_json,
    sniff_first=True,
    run_list=RunList(sniff=is_run_list, load=load_run_list),
)
