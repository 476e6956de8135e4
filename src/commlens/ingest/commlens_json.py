"""commlens' own run files (``"format": "commlens.run/N"``, written by ``commlens bench --json``).

The run keeps its run id, samples and everything else; only what the caller
passes (tag, revision, time) is applied on top. Errors point at the line of
the measurement that cannot be read.
"""

from __future__ import annotations

from typing import Any

from commlens.ingest.base import ParsedRun, Source, json_line
from commlens.ingest.nccltests_json import load_json
from commlens.results.jsonfmt import FormatError, run_from_dict

__all__ = ["parse_commlens_json"]


def _line_of_bad_measurement(source: Source, data: dict[str, Any]) -> int:
    """The line of the first measurement that does not load on its own, else of the document."""
    measurements = data.get("measurements")
    try:
        run_from_dict({**data, "measurements": []})
    except (FormatError, TypeError, ValueError):
        return 1  # the run itself, not one of its measurements
    if isinstance(measurements, list):
        for i, m in enumerate(measurements):
            try:
                run_from_dict({**data, "measurements": [m]})
            except (FormatError, TypeError, ValueError):
                return json_line(source.text, ("measurements", i))
    return 1


def parse_commlens_json(source: Source, *, op: str | None = None) -> ParsedRun:
    """The run in a commlens JSON file; ``op`` is not needed (every measurement names its op)."""
    data = load_json(source)
    try:
        run = run_from_dict(data)
    except FormatError as e:
        line = _line_of_bad_measurement(source, data) if isinstance(data, dict) else 1
        raise source.error(line, str(e)) from None
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
        tag=run.tag,
        revision=run.revision,
    )
