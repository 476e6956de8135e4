"""The store's tables: runs, their measurements, and each measurement's raw samples.

Types are portable (SQLite and PostgreSQL). Aggregates in ``measurements`` are copies
for querying; a loaded run recomputes them from ``samples``, which are kept losslessly.
A row ingested without samples keeps the statistics its tool reported in ``reported``
(JSON) and has NULL in the statistic columns that tool did not print.

These classes describe the latest schema. Changing them needs a migration under
``migrations/versions/`` and a new ``SCHEMA_REVISION`` (see ``docs/store.md``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from commlens.results.jsonvalue import JsonObject
from commlens.results.records import MAX_GROUP_NAME
from commlens.store.convert import KEY_COLUMNS
from commlens.store.db import SCHEMA_REVISION  # the Alembic revision these models describe (kept in db.py)

__all__ = [
    "LEGACY_SCHEMA_VERSION",
    "SCHEMA_REVISION",
    "Base",
    "BaselineModel",
    "ChangePointModel",
    "MeasurementModel",
    "RunModel",
    "NoiseFloorModel",
    "ReportModel",
    "SampleModel",
    "ThresholdModel",
    "SchemaVersionModel",
]

# What ``schema_version`` holds at SCHEMA_REVISION. commlens before Alembic wrote 1 there and
# refuses any larger value, so that table stays as a tripwire for old installs.
LEGACY_SCHEMA_VERSION = 2


class Base(DeclarativeBase):
    pass


class SchemaVersionModel(Base):
    """One row; pre-Alembic commlens read its schema version here (Alembic's table is ``alembic_version``)."""

    __tablename__ = "schema_version"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)


class RunModel(Base):
    """One benchmark run; ``system`` is the full ``SystemInfo``, its key fields copied out for queries."""

    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint("status IN ('complete', 'incomplete', 'check_failed')", name="ck_runs_status"),
        # The history of comparable runs: same fingerprint (and tag), in time order.
        Index("ix_runs_fingerprint_tag_started_at_utc", "fingerprint", "tag", "started_at_utc"),
    )

    run_id: Mapped[str] = mapped_column(String, primary_key=True)
    started_at: Mapped[str] = mapped_column(String)  # ISO 8601 exactly as the run has it
    started_at_utc: Mapped[datetime] = mapped_column(DateTime, index=True)  # parsed, for order and filters
    finished_at: Mapped[str | None] = mapped_column(String)
    status: Mapped[str] = mapped_column(String(16))
    tag: Mapped[str | None] = mapped_column(String, index=True)
    revision: Mapped[str | None] = mapped_column(String)
    command_line: Mapped[str] = mapped_column(String)
    source: Mapped[str] = mapped_column(String)
    world_size: Mapped[int] = mapped_column(Integer)
    backend: Mapped[str] = mapped_column(String)
    device: Mapped[str] = mapped_column(String)
    fingerprint: Mapped[str] = mapped_column(String(32))  # indexed with tag and time, above
    nhosts: Mapped[int] = mapped_column(Integer)
    commlens_version: Mapped[str] = mapped_column(String)
    avg_busbw_bytes_per_s: Mapped[float] = mapped_column(Float)
    system: Mapped[JsonObject] = mapped_column(JSON)
    config: Mapped[JsonObject] = mapped_column(JSON)
    notes: Mapped[list[str]] = mapped_column(JSON)

    measurements: Mapped[list[MeasurementModel]] = relationship(
        back_populates="run",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="MeasurementModel.position",
    )


class MeasurementModel(Base):
    """One row of a run's sweep, with its time statistics and bandwidths."""

    __tablename__ = "measurements"
    __table_args__ = (
        UniqueConstraint("run_id", "position", name="uq_measurements_run_position"),
        # A run's measurements of one key: the history of one series starts from its runs.
        Index("ix_measurements_run_key", "run_id", "op", "dtype", "size_bytes", "in_place"),
        # One series across runs: what compare and detect look up (NULL group_name: no process group).
        Index("ix_measurements_series", "op", "dtype", "size_bytes", "in_place", "group_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String, ForeignKey("runs.run_id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)  # order within the run
    op: Mapped[str] = mapped_column(String)
    algo: Mapped[str] = mapped_column(String)
    dtype: Mapped[str] = mapped_column(String)
    redop: Mapped[str] = mapped_column(String)
    root: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(BigInteger)
    in_place: Mapped[bool]
    world_size: Mapped[int] = mapped_column(Integer)  # the group's size for a row with a group
    nwrong: Mapped[int | None] = mapped_column(BigInteger)
    mean_s: Mapped[float] = mapped_column(Float)
    p50_s: Mapped[float | None] = mapped_column(Float)
    p95_s: Mapped[float | None] = mapped_column(Float)
    p99_s: Mapped[float | None] = mapped_column(Float)
    min_s: Mapped[float | None] = mapped_column(Float)
    max_s: Mapped[float | None] = mapped_column(Float)
    cv: Mapped[float | None] = mapped_column(Float)
    algbw_bytes_per_s: Mapped[float] = mapped_column(Float)
    busbw_bytes_per_s: Mapped[float] = mapped_column(Float)
    # TimeStats as the producing tool printed them (``as_dict()`` plus ``n``); NULL when it kept samples.
    reported: Mapped[JsonObject | None] = mapped_column(JSON(none_as_null=True))
    # The process group a row measured inside a job ran on (``Measurement.group``); NULL for a benchmark row.
    group_name: Mapped[str | None] = mapped_column(String(MAX_GROUP_NAME))

    run: Mapped[RunModel] = relationship(back_populates="measurements")
    samples: Mapped[SampleModel] = relationship(
        back_populates="measurement", cascade="all, delete-orphan", passive_deletes=True
    )


class SampleModel(Base):
    """A measurement's per-iteration times (JSON array of floats, empty if none were kept) and per-rank times."""

    __tablename__ = "samples"

    measurement_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    samples_s: Mapped[list[float]] = mapped_column(JSON)
    rank_samples_s: Mapped[list[list[float]] | None] = mapped_column(JSON(none_as_null=True))
    # Samples per round (``Measurement.rounds``); NULL when the row was timed in one round.
    rounds: Mapped[list[int] | None] = mapped_column(JSON(none_as_null=True))

    measurement: Mapped[MeasurementModel] = relationship(back_populates="samples")


class NoiseFloorModel(Base):
    """A series' run-to-run variation, learned from A/A-like history (``commlens noise learn``).

    One row per series (a ``FloorKey``: fingerprint and measurement key; ``redop`` and ``root`` encoded as
    in ``measurements``, ``none`` and ``-1`` for none, and ``group_name`` as ``''`` for no group, so the
    unique key holds: NULLs are never equal).
    ``sd_log`` is the standard deviation of the natural log of whole runs' typical times at one revision, pooled over the
    revisions that had at least two runs: 0.05 means runs of the same code scatter by about 5 %.
    """

    __tablename__ = "noise_floors"
    __table_args__ = (UniqueConstraint("fingerprint", *KEY_COLUMNS, name="uq_noise_floors_series"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String)
    op: Mapped[str] = mapped_column(String)
    algo: Mapped[str] = mapped_column(String)
    dtype: Mapped[str] = mapped_column(String)
    redop: Mapped[str] = mapped_column(String)
    root: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    in_place: Mapped[bool] = mapped_column()
    sd_log: Mapped[float] = mapped_column(Float)
    runs: Mapped[int] = mapped_column(Integer)  # runs the figure was learned from
    groups: Mapped[int] = mapped_column(Integer)  # revisions (or tags) with two runs or more among them
    learned_at: Mapped[str] = mapped_column(String)  # ISO 8601, UTC
    group_name: Mapped[str] = mapped_column(String(MAX_GROUP_NAME), server_default="")  # the process group; '': none


# -- what a team says about its series (commlens baseline / threshold, commlens serve) ----------------


class BaselineModel(Base):
    """The baseline of the series of one system under one tag (a branch, say): a run, or every run of a tag.

    ``tag`` is the series' tag, ``''`` for runs without one (NULLs are never equal in a UNIQUE key).
    ``ref_kind`` is ``run`` (``ref`` a full run id) or ``tag`` (``ref`` a tag whose runs are pooled).
    """

    __tablename__ = "baselines"
    __table_args__ = (
        UniqueConstraint("fingerprint", "tag", name="uq_baselines_series"),
        CheckConstraint("ref_kind IN ('run', 'tag')", name="ck_baselines_ref_kind"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(32))
    tag: Mapped[str] = mapped_column(String)
    ref_kind: Mapped[str] = mapped_column(String(8))
    ref: Mapped[str] = mapped_column(String)
    note: Mapped[str] = mapped_column(String, server_default="")
    set_at: Mapped[str] = mapped_column(String)  # ISO 8601, UTC


class ThresholdModel(Base):
    """How big a change must be (and how sure) before compare or detect calls it, for the series it matches.

    Each selector field is a value or ``'*'`` (any); ``size_bytes`` -1 is any size; ``tag`` and
    ``group_name`` ``''`` match no tag and no group. The most specific match wins (most fields
    given), then the newest. A NULL setting is not set here: the next match, then the default, decides.
    ``alpha`` is compare's significance level, ``detect_alpha`` detect's (their tests differ).
    """

    __tablename__ = "thresholds"
    __table_args__ = (
        UniqueConstraint(
            "fingerprint", "tag", "op", "dtype", "size_bytes", "group_name", name="uq_thresholds_selector"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(32))
    tag: Mapped[str] = mapped_column(String)
    op: Mapped[str] = mapped_column(String)
    dtype: Mapped[str] = mapped_column(String)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    group_name: Mapped[str] = mapped_column(String(MAX_GROUP_NAME))
    min_change: Mapped[float | None] = mapped_column(Float)
    alpha: Mapped[float | None] = mapped_column(Float)
    detect_alpha: Mapped[float | None] = mapped_column(Float)
    set_at: Mapped[str] = mapped_column(String)  # ISO 8601, UTC


class ChangePointModel(Base):
    """A change point ``commlens detect --save`` found: what Grafana annotates and the regressions page lists.

    The series' key as in ``noise_floors`` (``redop`` ``'none'``, ``root`` -1, ``group_name`` and ``tag`` ``''``
    for none). A save replaces every stored change of the series it examined.
    """

    __tablename__ = "change_points"
    __table_args__ = (
        Index("ix_change_points_started_at_utc", "started_at_utc"),
        Index("ix_change_points_series", "fingerprint", "tag", "op", "dtype", "size_bytes"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(32))
    tag: Mapped[str] = mapped_column(String)
    op: Mapped[str] = mapped_column(String)
    algo: Mapped[str] = mapped_column(String)
    dtype: Mapped[str] = mapped_column(String)
    redop: Mapped[str] = mapped_column(String)
    root: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    in_place: Mapped[bool] = mapped_column()
    group_name: Mapped[str] = mapped_column(String(MAX_GROUP_NAME))
    run_id: Mapped[str] = mapped_column(String)  # the first run at the new level
    started_at_utc: Mapped[datetime] = mapped_column(DateTime)  # that run's start
    revision: Mapped[str | None] = mapped_column(String)
    previous_run_id: Mapped[str] = mapped_column(String)
    previous_revision: Mapped[str | None] = mapped_column(String)
    mean_before_s: Mapped[float] = mapped_column(Float)
    mean_after_s: Mapped[float] = mapped_column(Float)
    change: Mapped[float] = mapped_column(Float)  # +0.08: 8 % slower
    p_value: Mapped[float] = mapped_column(Float)
    direction: Mapped[str] = mapped_column(String(16))  # regression | improvement
    detected_at: Mapped[str] = mapped_column(String)  # ISO 8601, UTC


class ReportModel(Base):
    """A diagnosis or projection kept for the dashboard: its ``--json`` document, as the command printed it.

    ``kind``: ``links``, ``stragglers``, ``hang``, ``projection`` or ``sweep``.
    """

    __tablename__ = "reports"
    __table_args__ = (
        CheckConstraint("kind IN ('links', 'stragglers', 'hang', 'projection', 'sweep')", name="ck_reports_kind"),
        Index("ix_reports_kind_created_at_utc", "kind", "created_at_utc"),
    )

    report_id: Mapped[str] = mapped_column(String, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    title: Mapped[str] = mapped_column(String)
    created_at_utc: Mapped[datetime] = mapped_column(DateTime)
    fingerprint: Mapped[str | None] = mapped_column(String(32))
    run_id: Mapped[str | None] = mapped_column(String)  # the stored run it came from, if any
    payload: Mapped[JsonObject] = mapped_column(JSON)
