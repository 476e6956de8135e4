"""The store's tables: runs, their measurements, and each measurement's raw samples.

Types are portable (SQLite and PostgreSQL). Aggregates in ``measurements`` are copies
for querying; a loaded run recomputes them from ``samples``, which are kept losslessly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

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

__all__ = ["SCHEMA_VERSION", "Base", "SchemaVersionRow", "RunRow", "MeasurementRow", "SampleRow"]

# Bump with a migration whenever the tables change; an older commlens refuses a newer database.
SCHEMA_VERSION = 1


class Base(DeclarativeBase):
    pass


class SchemaVersionRow(Base):
    """One row: the schema version this database was created or migrated to."""

    __tablename__ = "schema_version"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)


class RunRow(Base):
    """One benchmark run; ``system`` is the full ``SystemInfo``, its key fields copied out for queries."""

    __tablename__ = "runs"
    __table_args__ = (CheckConstraint("status IN ('complete', 'incomplete')", name="ck_runs_status"),)

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
    fingerprint: Mapped[str] = mapped_column(String(32), index=True)
    nhosts: Mapped[int] = mapped_column(Integer)
    commlens_version: Mapped[str] = mapped_column(String)
    avg_busbw_bytes_per_s: Mapped[float] = mapped_column(Float)
    system: Mapped[dict[str, Any]] = mapped_column(JSON)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    notes: Mapped[list[str]] = mapped_column(JSON)

    measurements: Mapped[list[MeasurementRow]] = relationship(
        back_populates="run",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="MeasurementRow.position",
    )


class MeasurementRow(Base):
    """One row of a run's sweep, with its time statistics and bandwidths."""

    __tablename__ = "measurements"
    __table_args__ = (
        UniqueConstraint("run_id", "position", name="uq_measurements_run_position"),
        Index("ix_measurements_run_id", "run_id"),
        Index("ix_measurements_op_size_bytes", "op", "size_bytes"),
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
    world_size: Mapped[int] = mapped_column(Integer)
    nwrong: Mapped[int | None] = mapped_column(BigInteger)
    mean_s: Mapped[float] = mapped_column(Float)
    p50_s: Mapped[float] = mapped_column(Float)
    p95_s: Mapped[float] = mapped_column(Float)
    p99_s: Mapped[float] = mapped_column(Float)
    min_s: Mapped[float] = mapped_column(Float)
    max_s: Mapped[float] = mapped_column(Float)
    cv: Mapped[float] = mapped_column(Float)
    algbw_bytes_per_s: Mapped[float] = mapped_column(Float)
    busbw_bytes_per_s: Mapped[float] = mapped_column(Float)

    run: Mapped[RunRow] = relationship(back_populates="measurements")
    samples: Mapped[SampleRow] = relationship(
        back_populates="measurement", cascade="all, delete-orphan", passive_deletes=True
    )


class SampleRow(Base):
    """A measurement's per-iteration times (JSON array of floats) and, if kept, per-rank times."""

    __tablename__ = "samples"

    measurement_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    samples_s: Mapped[list[float]] = mapped_column(JSON)
    rank_samples_s: Mapped[list[list[float]] | None] = mapped_column(JSON(none_as_null=True))

    measurement: Mapped[MeasurementRow] = relationship(back_populates="samples")
