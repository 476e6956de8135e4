"""The result store: save, find, list and delete runs (SQLite by default, any SQLAlchemy URL)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from types import TracebackType

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, selectinload

from commlens.results.records import Measurement, RecordError, Run, SystemInfo
from commlens.store.db import StoreError, default_db_url, db_url, make_engine, write_engine
from commlens.store.models import SCHEMA_VERSION, Base, MeasurementRow, RunRow, SampleRow, SchemaVersionRow

__all__ = ["MIN_PREFIX_LEN", "RunSummary", "Store"]

_log = logging.getLogger(__name__)

MIN_PREFIX_LEN = 4
_MAX_LISTED_MATCHES = 5


@dataclass(frozen=True)
class RunSummary:
    """One line of a run listing: what the run was, without its samples."""

    run_id: str
    started_at: str
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


class Store:
    """A connection to one result store; ``Store.open()`` with no URL uses ``default_db_url()``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._write = write_engine(engine)

    @property
    def url(self) -> str:
        """The store's URL with any password hidden, for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    @classmethod
    def open(cls, url: str | None = None) -> Store:
        """Connect to ``url`` (a SQLAlchemy URL or a file path), creating the tables if missing."""
        url = default_db_url() if url is None else db_url(url)
        store = cls(make_engine(url))
        try:
            store._ensure_schema()
        except SQLAlchemyError as e:
            store.close()
            shown = store.engine.url.render_as_string(hide_password=True)
            raise StoreError(f"cannot open result store {shown}: {getattr(e, 'orig', None) or e}") from None
        except BaseException:
            store.close()
            raise
        return store

    def _ensure_schema(self) -> None:
        if self._schema_version() == SCHEMA_VERSION:
            return
        with Session(self._write) as session, session.begin():
            Base.metadata.create_all(session.connection())
            version = session.scalar(select(func.max(SchemaVersionRow.version)))
            if version is None:
                session.add(SchemaVersionRow(version=SCHEMA_VERSION))
            elif version > SCHEMA_VERSION:
                raise StoreError(
                    f"result store schema version {version} is newer than this commlens reads "
                    f"({SCHEMA_VERSION}); upgrade commlens"
                )

    def _schema_version(self) -> int | None:
        with self.engine.connect() as conn:
            if not self.engine.dialect.has_table(conn, SchemaVersionRow.__tablename__):
                return None
            return conn.scalar(select(func.max(SchemaVersionRow.version)))

    def save_run(self, run: Run) -> str:
        """Store a run and all its samples in one transaction; returns its run_id."""
        row = _run_to_row(run)
        try:
            with Session(self._write) as session, session.begin():
                if session.get(RunRow, run.run_id) is not None:
                    raise StoreError(f"run {run.run_id!r} is already in the store")
                session.add(row)
        except IntegrityError:
            # Another process saved the same run_id between our check and our insert.
            raise StoreError(f"run {run.run_id!r} is already in the store") from None
        _log.debug("saved run %s (%d measurements)", run.run_id, len(run.measurements))
        return run.run_id

    def get_run(self, run_ref: str) -> Run:
        """The run whose id is ``run_ref`` or starts with it (a unique prefix of >= 4 characters)."""
        with Session(self.engine) as session, session.begin():
            run_id = _resolve(session, run_ref)
            row = session.scalars(
                select(RunRow)
                .where(RunRow.run_id == run_id)
                .options(selectinload(RunRow.measurements).selectinload(MeasurementRow.samples))
            ).one()
            return _run_from_row(row)

    def list_runs(
        self,
        *,
        tag: str | None = None,
        op: str | None = None,
        since: str | datetime | None = None,
        limit: int | None = 50,
    ) -> list[RunSummary]:
        """Runs newest first, optionally only those with ``tag``, measuring ``op``, or started at/after ``since``."""
        query = select(RunRow).order_by(RunRow.started_at_utc.desc(), RunRow.run_id.desc())
        if tag is not None:
            query = query.where(RunRow.tag == tag)
        if op is not None:
            query = query.where(
                select(MeasurementRow.id)
                .where(MeasurementRow.run_id == RunRow.run_id, MeasurementRow.op == op)
                .exists()
            )
        if since is not None:
            query = query.where(RunRow.started_at_utc >= _to_utc(since, what="since"))
        if limit is not None:
            query = query.limit(limit)
        with Session(self.engine) as session, session.begin():
            rows = session.scalars(query).all()
            ids = [r.run_id for r in rows]
            counts: dict[str, dict[str, int]] = {run_id: {} for run_id in ids}
            if ids:
                per_op = session.execute(
                    select(MeasurementRow.run_id, MeasurementRow.op, func.count())
                    .where(MeasurementRow.run_id.in_(ids))
                    .group_by(MeasurementRow.run_id, MeasurementRow.op)
                )
                for run_id, op_name, n in per_op:
                    counts[run_id][op_name] = n
            return [
                RunSummary(
                    run_id=r.run_id,
                    started_at=r.started_at,
                    status=r.status,
                    tag=r.tag,
                    revision=r.revision,
                    source=r.source,
                    world_size=r.world_size,
                    backend=r.backend,
                    nmeasurements=sum(counts[r.run_id].values()),
                    ops=tuple(sorted(counts[r.run_id])),
                    avg_busbw_bytes_per_s=r.avg_busbw_bytes_per_s,
                    fingerprint=r.fingerprint,
                )
                for r in rows
            ]

    def delete_run(self, run_ref: str) -> str:
        """Delete a run, its measurements and samples; returns the deleted run_id."""
        with Session(self._write) as session, session.begin():
            run_id = _resolve(session, run_ref)
            session.execute(delete(RunRow).where(RunRow.run_id == run_id))
        _log.debug("deleted run %s", run_id)
        return run_id

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _resolve(session: Session, run_ref: str) -> str:
    """The one run_id that ``run_ref`` names exactly or as a prefix of at least MIN_PREFIX_LEN."""
    if session.get(RunRow, run_ref) is not None:
        return run_ref
    if len(run_ref) < MIN_PREFIX_LEN:
        raise StoreError(
            f"no run matches {run_ref!r} (a run_id prefix needs at least {MIN_PREFIX_LEN} characters)"
        )
    candidates = session.scalars(
        select(RunRow.run_id).where(RunRow.run_id.startswith(run_ref, autoescape=True)).order_by(RunRow.run_id)
    ).all()
    matches = [c for c in candidates if c.startswith(run_ref)]  # SQLite's LIKE ignores case
    if not matches:
        raise StoreError(f"no run matches {run_ref!r}")
    if len(matches) > 1:
        shown = ", ".join(matches[:_MAX_LISTED_MATCHES])
        more = ", ..." if len(matches) > _MAX_LISTED_MATCHES else ""
        raise StoreError(f"{run_ref!r} matches {len(matches)} runs: {shown}{more}")
    return matches[0]


def _to_utc(value: str | datetime, *, what: str) -> datetime:
    """A naive UTC datetime; naive inputs are taken as UTC, as run timestamps are."""
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value  # Python 3.10 lacks "Z"
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise StoreError(f"{what} {value!r} is not an ISO 8601 time") from None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def _run_to_row(run: Run) -> RunRow:
    system = run.system
    return RunRow(
        run_id=run.run_id,
        started_at=run.started_at,
        started_at_utc=_to_utc(run.started_at, what=f"run {run.run_id!r}: started_at"),
        finished_at=run.finished_at,
        status=run.status,
        tag=run.tag,
        revision=run.revision,
        command_line=run.command_line,
        source=run.source,
        world_size=run.world_size,
        backend=system.backend,
        device=system.device,
        fingerprint=system.fingerprint(),
        nhosts=len(system.hosts),
        commlens_version=system.commlens_version,
        avg_busbw_bytes_per_s=run.avg_busbw_bytes_per_s(),
        system=asdict(system),
        config=run.config,
        notes=list(run.notes),
        measurements=[_measurement_to_row(i, m) for i, m in enumerate(run.measurements)],
    )


def _measurement_to_row(position: int, m: Measurement) -> MeasurementRow:
    stats = m.stats
    rank = None if m.rank_samples_s is None else [list(r) for r in m.rank_samples_s]
    return MeasurementRow(
        position=position,
        op=m.op,
        algo=m.algo,
        dtype=m.dtype,
        redop=m.redop,
        root=m.root,
        size_bytes=m.size_bytes,
        count=m.count,
        in_place=m.in_place,
        world_size=m.world_size,
        nwrong=m.nwrong,
        mean_s=stats.mean_s,
        p50_s=stats.p50_s,
        p95_s=stats.p95_s,
        p99_s=stats.p99_s,
        min_s=stats.min_s,
        max_s=stats.max_s,
        cv=stats.cv,
        algbw_bytes_per_s=m.algbw_bytes_per_s,
        busbw_bytes_per_s=m.busbw_bytes_per_s,
        samples=SampleRow(samples_s=list(m.samples_s), rank_samples_s=rank),
    )


def _run_from_row(row: RunRow) -> Run:
    try:
        return Run(
            run_id=row.run_id,
            started_at=row.started_at,
            finished_at=row.finished_at,
            status=row.status,  # type: ignore[arg-type]  # checked by the table and by Run
            tag=row.tag,
            revision=row.revision,
            command_line=row.command_line,
            source=row.source,
            config=row.config,
            notes=tuple(row.notes),
            system=SystemInfo(**row.system),
            measurements=tuple(_measurement_from_row(m) for m in row.measurements),
        )
    except (RecordError, TypeError) as e:
        raise StoreError(f"run {row.run_id!r} in the store is invalid: {e}") from None


def _measurement_from_row(row: MeasurementRow) -> Measurement:
    rank = row.samples.rank_samples_s
    return Measurement(
        op=row.op,
        algo=row.algo,
        dtype=row.dtype,
        redop=row.redop,
        root=row.root,
        size_bytes=row.size_bytes,
        count=row.count,
        in_place=row.in_place,
        world_size=row.world_size,
        nwrong=row.nwrong,
        samples_s=tuple(float(s) for s in row.samples.samples_s),
        rank_samples_s=None if rank is None else tuple(tuple(float(s) for s in r) for r in rank),
    )
