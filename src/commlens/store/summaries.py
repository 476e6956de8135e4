"""A stored run's summary (one line of ``commlens runs``) and the filter of a run listing: their own module, so
that a listing read without SQLAlchemy (``commlens.store.plain``) takes and builds the same objects as
``Store.list_runs``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from commlens.results.jsonvalue import JsonObject

__all__ = ["SUMMARY_COLUMNS", "MeasurementFilter", "RunFilter", "RunSummary", "summary_from_columns"]


@dataclass(frozen=True)
class RunSummary:
    """One line of a run listing: what the run was, without its samples."""

    run_id: str
    started_at: str  # as the run has it
    started_at_utc: datetime  # the same instant, UTC, timezone-aware
    status: str
    tag: str | None
    revision: str | None
    source: str
    world_size: int
    backend: str
    nmeasurements: int
    ops: tuple[str, ...]
    avg_busbw_bytes_per_s: float
    fingerprint: str

    def as_dict(self) -> JsonObject:
        """Every field, JSON-ready (``commlens runs --json``): the UTC instant in ISO 8601, ops as a list."""
        d = asdict(self)
        d["started_at_utc"] = self.started_at_utc.isoformat()
        d["ops"] = list(self.ops)
        return d


# The columns of ``runs`` a summary shows as they are, by name (a listing's query reads them, with
# ``started_at_utc``, whose stored form each reader converts itself).
SUMMARY_COLUMNS = tuple(
    "run_id started_at status tag revision source world_size backend avg_busbw_bytes_per_s fingerprint".split()
)


def summary_from_columns(
    columns: Mapping[str, Any], started_at_utc: datetime, op_counts: Mapping[str, int]
) -> RunSummary:
    """A run's summary from its row (``SUMMARY_COLUMNS`` by name), its start in UTC (aware) and how many
    measurements it has of each op."""
    return RunSummary(
        **{name: columns[name] for name in SUMMARY_COLUMNS},
        started_at_utc=started_at_utc,
        nmeasurements=sum(op_counts.values()),
        ops=tuple(sorted(op_counts)),
    )


@dataclass(frozen=True)
class RunFilter:
    """Which stored runs a listing keeps (``Store.list_runs``, ``Store.count_runs``): those that match every
    field given; None matches any run, and ``RunFilter()`` every run.

    ``op``: runs that measured it. ``since``/``until``: started at or after / at or before (ISO 8601, UTC
    unless it says; a date as ``until`` is the end of that day). ``fingerprint``: the system fingerprint or its
    prefix. ``source``: the producing tool (``commlens``, ``nccl-tests``, ``monitor``, ...). ``revision``: a
    revision or its prefix. ``run_ids``: only these exact ids.
    """

    tag: str | None = None
    op: str | None = None
    since: str | datetime | None = None
    until: str | datetime | None = None
    fingerprint: str | None = None
    source: str | None = None
    revision: str | None = None
    run_ids: Collection[str] | None = None

    def __post_init__(self) -> None:
        """A time that is not ISO 8601 is refused here (``StoreError`` naming the field), not only once a store
        with runs is read: an empty or missing store would otherwise answer 'no runs match'."""
        from commlens.store.convert import to_utc

        for what, value in (("since", self.since), ("until", self.until)):
            if value is not None:
                to_utc(value, what=what)


@dataclass(frozen=True)
class MeasurementFilter:
    """Which stored measurements a history query reads (``Store.measurement_rows``, ``Store.mean_history``):
    those that match every field given; None matches any, and ``MeasurementFilter()`` every measurement.

    ``op``, ``dtype``, ``size_bytes``: the measurement's. ``tag``, ``fingerprint`` (or its prefix),
    ``since``/``until`` and ``run_ids``: its run's, as in :class:`RunFilter`.
    """

    op: str | None = None
    dtype: str | None = None
    size_bytes: int | None = None
    tag: str | None = None
    fingerprint: str | None = None
    since: str | datetime | None = None
    until: str | datetime | None = None
    run_ids: Collection[str] | None = None
