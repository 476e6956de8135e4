"""Reading stored runs back: summaries, full runs and measurement rows, and runs that cannot be read.

A damaged row (JSON that does not parse, a date that is not one, a measurement without its
samples) raises ``CorruptRunError`` naming the run; ``Store`` listings can skip such runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from commlens.results.jsonvalue import JsonObject
from commlens.results.records import MeasurementKey, RecordError, Run
from commlens.store.convert import decode_redop_root, reported_from_json, run_from_model
from commlens.store.db import StoreError
from commlens.store.models import MeasurementModel, RunModel
from commlens.store.summaries import SUMMARY_COLUMNS, RunSummary, summary_from_columns

__all__ = [
    "UNREADABLE",
    "CorruptRunError",
    "MeasurementRow",
    "OnCorrupt",
    "RunSummary",
    "load_runs",
    "load_summaries",
    "measurement_row",
    "short_reason",
]


@dataclass(frozen=True)
class MeasurementRow:
    """One stored measurement with what the regression gate needs of its run.

    ``samples_s`` is empty for rows ingested from tools that printed only statistics;
    then ``mean_s``, ``cv`` and ``iterations`` are what that tool reported (``cv`` may
    be None, ``iterations`` 0 when unknown).
    """

    run_id: str
    started_at: datetime  # UTC, timezone-aware
    revision: str | None
    tag: str | None
    fingerprint: str
    source: str
    key: MeasurementKey  # what makes two rows the same experiment (as ``Measurement.key``)
    world_size: int
    mean_s: float
    cv: float | None
    iterations: int
    busbw_bytes_per_s: float
    samples_s: tuple[float, ...]
    status: str = "complete"  # the run's: complete, incomplete, check_failed


class CorruptRunError(StoreError):
    """A stored run that cannot be read back: one of its columns holds what commlens never writes."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(f"run {run_id!r} in the store cannot be read back (corrupted column?): {short_reason(cause)}")
        self.run_id = run_id


OnCorrupt = Callable[[CorruptRunError], None]
# What decoding a damaged row raises: bad JSON or dates (ValueError), wrong shapes (TypeError,
# KeyError, AttributeError: a measurement without its samples row), invalid records.
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, RecordError, StoreError)


def measurement_row(
    run_id: str,
    started: datetime,
    revision: str | None,
    run_tag: str | None,
    fp: str,
    source: str,
    run_status: str,
    op_name: str,
    algo: str,
    dtype_name: str,
    redop: str,
    root: int,
    size: int,
    in_place: bool,
    world_size: int,
    mean_s: float,
    cv: float | None,
    busbw: float,
    reported: JsonObject | None,
    samples: list[Any] | None,
    group_name: str | None,
) -> MeasurementRow:
    """One row of ``Store.measurement_rows``' query as a MeasurementRow."""
    stats = reported_from_json(reported)
    redop_or_none, root_or_none = decode_redop_root(redop, root)
    samples = samples if samples is not None else []  # None: not read (``with_samples=False``)
    return MeasurementRow(
        run_id=run_id,
        started_at=started.replace(tzinfo=timezone.utc),
        revision=revision,
        tag=run_tag,
        fingerprint=fp,
        source=source,
        key=MeasurementKey(op_name, algo, dtype_name, redop_or_none, root_or_none, size, in_place, group_name),
        world_size=world_size,
        mean_s=mean_s,
        cv=cv,
        iterations=len(samples) if samples or stats is None else stats.n,
        busbw_bytes_per_s=busbw,
        samples_s=tuple(float(x) for x in samples),
        status=run_status,
    )


def load_runs(session: Session, run_ids: list[str]) -> dict[str, Run]:
    """Full runs with these ids, keyed by run_id: three queries in all."""
    rows = session.scalars(
        select(RunModel)
        .where(RunModel.run_id.in_(run_ids))
        .options(selectinload(RunModel.measurements).selectinload(MeasurementModel.samples))
    ).all()
    return {row.run_id: run_from_model(row) for row in rows}


def load_summaries(session: Session, run_ids: list[str]) -> dict[str, RunSummary]:
    """Summaries of the runs with these ids (no JSON column read), keyed by run_id: two queries."""
    r = RunModel
    columns = [getattr(r, name) for name in SUMMARY_COLUMNS]
    rows = session.execute(select(*columns, r.started_at_utc).where(r.run_id.in_(run_ids))).all()
    counts: dict[str, dict[str, int]] = {run_id: {} for run_id in run_ids}
    per_op = session.execute(
        select(MeasurementModel.run_id, MeasurementModel.op, func.count())
        .where(MeasurementModel.run_id.in_(run_ids))
        .group_by(MeasurementModel.run_id, MeasurementModel.op)
    )
    for run_id, op_name, n in per_op:
        counts[run_id][op_name] = n
    return {
        row.run_id: summary_from_columns(
            row._asdict(), row.started_at_utc.replace(tzinfo=timezone.utc), counts[row.run_id]
        )
        for row in rows
    }


def short_reason(error: BaseException) -> str:
    """An exception's message, one line, at most 200 characters: stored text can be anything."""
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]
