"""Export stored runs: CSV with one row per measurement, or JSON as a list of ``commlens.run/N`` documents.

Files are written atomically (a temporary file renamed into place), so a reader or a
dashboard never sees half an export; ``-`` writes to stdout.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path
from typing import IO, Literal

from commlens.files import atomic_text
from commlens.results.jsonfmt import run_to_dict
from commlens.results.records import Measurement, Run
from commlens.store.convert import measurement_figures, to_utc

__all__ = ["CSV_COLUMNS", "ExportFormat", "ExportCounts", "csv_row", "export_runs"]

ExportFormat = Literal["csv", "json"]

CSV_COLUMNS: tuple[str, ...] = (
    "run_id",
    "started_at",
    "tag",
    "revision",
    "fingerprint",
    "world_size",
    "backend",
    "op",
    "algo",
    "dtype",
    "redop",
    "root",
    "size_bytes",
    "count",
    "in_place",
    "iterations",
    "mean_s",
    "p50_s",
    "p95_s",
    "p99_s",
    "min_s",
    "max_s",
    "cv",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "nwrong",
    "group",  # the process group of a row measured inside a job; empty for a benchmark row
)


@dataclass
class ExportCounts:
    """How much an export wrote."""

    runs: int = 0
    measurements: int = 0


def csv_row(run: Run, m: Measurement) -> dict[str, str | int | float | None]:
    """One CSV row: the run's metadata, then the measurement (``redop`` and ``root`` as the store's columns:
    ``none`` and -1). ``started_at`` is UTC (``...Z``); statistics a tool did not report are empty;
    ``in_place`` is ``true``/``false``."""
    started = to_utc(run.started_at, what="started_at").replace(tzinfo=timezone.utc)
    return {
        "run_id": run.run_id,
        "started_at": started.isoformat().replace("+00:00", "Z"),
        "tag": run.tag,
        "revision": run.revision,
        "fingerprint": run.system.fingerprint(),
        "world_size": run.world_size,
        "backend": run.system.backend,
        **measurement_figures(m),
        "in_place": "true" if m.in_place else "false",
        "iterations": len(m.samples_s) if m.samples_s else m.stats.n,
        "group": m.group,
    }


def export_runs(runs: Iterable[Run], output: str | Path, fmt: ExportFormat) -> ExportCounts:
    """Write ``runs`` (any iterable: they are streamed, not held) to ``output`` as CSV or JSON."""
    counts = ExportCounts()
    with _atomic_text(output) as fp:
        if fmt == "csv":
            writer = csv.DictWriter(fp, fieldnames=CSV_COLUMNS, lineterminator="\n")
            writer.writeheader()
            for run in runs:
                counts.runs += 1
                for m in run.measurements:
                    writer.writerow(csv_row(run, m))
                    counts.measurements += 1
        elif fmt == "json":
            fp.write("[")
            for run in runs:
                fp.write(",\n" if counts.runs else "\n")
                json.dump(run_to_dict(run), fp, indent=1)
                counts.runs += 1
                counts.measurements += len(run.measurements)
            fp.write("\n]\n" if counts.runs else "]\n")
        else:
            raise ValueError(f"unknown export format {fmt!r}")
    return counts


def _atomic_text(output: str | Path) -> ContextManager[IO[str]]:
    return atomic_text(output, newline="", make_parents=False)  # a directory the user misspelt is not made
