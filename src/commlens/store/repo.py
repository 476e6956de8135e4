"""The result store: save, find, list, tag and delete runs, and query measurements across runs.

``Store.open(url)`` connects to SQLite (a path or ``sqlite:///...``, the default) or
PostgreSQL (``postgresql+psycopg://...``) and checks the schema revision (see
``commlens.store.schema``).

Query API for analysis (the regression gate):

- ``Store.measurement_rows(op=, dtype=, size_bytes=, tag=, fingerprint=, since=, until=)``:
  one ``MeasurementRow`` per stored measurement that matches, with its run's time (UTC),
  revision, tag, fingerprint and source, its key (op, algo, dtype, redop, root, size,
  placement), mean time, CV, iteration count, busBW and raw samples (empty for rows
  ingested without samples); oldest run first, then the run's own order. One query.
- ``Store.runs_with_tag(tag)``: the full runs with that tag, oldest first.
- ``Store.list_runs(...)``: run summaries, newest first, with the same filters.

Time filters take ISO 8601 strings or datetimes (naive ones are UTC). ``since`` is
inclusive; so is ``until``, and a bare date as ``until`` covers that whole day.
A fingerprint filter matches the full fingerprint or a prefix of it.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Callable, Collection, Iterable, Iterator, Sequence, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, delete, func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, selectinload

from commlens.results.records import RecordError, Run
from commlens.store.convert import RunRows, is_date, reported_from_json, run_from_model, run_to_rows, to_utc
from commlens.store.db import (
    DatabaseFault,
    NoStoreError,
    StoreError,
    db_url,
    default_db_url,
    driver_reason,
    make_engine,
    shown_url,
    sqlite_file_missing,
    write_engine,
)
from commlens.store.models import MeasurementModel, RunModel, SampleModel
from commlens.store.schema import check_schema

__all__ = ["MIN_PREFIX_LEN", "CorruptRunError", "MeasurementRow", "OnCorrupt", "RunSummary", "Store"]

_log = logging.getLogger(__name__)

MIN_PREFIX_LEN = 4
_MAX_LISTED_MATCHES = 5
_LOAD_BATCH = 200  # runs loaded per query; bounds the size of IN (...) lists


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
    op: str
    algo: str
    dtype: str
    redop: str
    root: int
    size_bytes: int
    in_place: bool
    world_size: int
    mean_s: float
    cv: float | None
    iterations: int
    busbw_bytes_per_s: float
    samples_s: tuple[float, ...]
    status: str = "complete"  # the run's: complete, incomplete, check_failed

    @property
    def key(self) -> tuple[str, str, str, str, int, int, bool]:
        """What makes two rows the same experiment (as ``Measurement.key``)."""
        return (self.op, self.algo, self.dtype, self.redop, self.root, self.size_bytes, self.in_place)


class CorruptRunError(StoreError):
    """A stored run that cannot be read back: one of its columns holds what commlens never writes."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(f"run {run_id!r} in the store cannot be read back (corrupted column?): {_short(cause)}")
        self.run_id = run_id


OnCorrupt = Callable[[CorruptRunError], None]
_Loaded = TypeVar("_Loaded")
# What decoding a damaged row raises: bad JSON or dates (ValueError), wrong shapes (TypeError,
# KeyError, AttributeError: a measurement without its samples row), invalid records.
_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, RecordError, StoreError)


class Store:
    """A connection to one result store; ``Store.open()`` with no URL uses ``default_db_url()``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._write = write_engine(engine)

    @property
    def url(self) -> str:
        """The store's URL with any password hidden, for messages."""
        return shown_url(self.engine)

    @classmethod
    def open(cls, url: str | None = None, *, create: bool = True) -> Store:
        """Connect to ``url`` (a SQLAlchemy URL or a file path); create the schema in an empty database.

        ``create=False`` is for commands that only read: a missing SQLite file or a database
        without commlens tables raises NoStoreError, and nothing is created (no file, no table).
        Raises StoreError when the database cannot be reached, or its schema is older
        (run ``commlens db upgrade``) or newer (upgrade commlens) than this commlens.
        """
        url = default_db_url() if url is None else db_url(url)
        if not create and sqlite_file_missing(url):
            raise NoStoreError(f"no result store at {make_url(url).database}: nothing stored yet")
        store = cls(make_engine(url))
        try:
            check_schema(store.engine, create=create)
        except (SQLAlchemyError, DatabaseFault) as e:
            store.close()
            raise StoreError(f"cannot open result store {store.url}: {driver_reason(e)}") from None
        except BaseException:
            store.close()
            raise
        return store

    # -- writing -------------------------------------------------------------------------

    def save_run(self, run: Run) -> str:
        """Store a run and all its samples in one transaction; returns its run_id."""
        return self.save_runs([run])[0]

    def save_runs(self, runs: Sequence[Run]) -> list[str]:
        """Store several runs in one transaction: all of them or, on any error, none.

        Bulk inserts, a handful of statements whatever the number of runs and measurements:
        the runs, then all their measurements, then all samples.
        """
        ids = [run.run_id for run in runs]
        repeated = [run_id for run_id, n in Counter(ids).items() if n > 1]
        if repeated:
            raise StoreError(f"run {repeated[0]!r} is given more than once")
        rows = [run_to_rows(run) for run in runs]
        try:
            with self._write.begin() as conn:
                existing = conn.scalars(select(RunModel.run_id).where(RunModel.run_id.in_(ids))).first()
                if existing is not None:
                    raise StoreError(f"run {existing!r} is already in the store")
                _insert_rows(conn, rows)
        except IntegrityError:
            # Another process saved one of these run_ids between our check and our insert.
            raise StoreError(f"run {ids[0]!r} is already in the store" if len(ids) == 1
                             else "one of these runs was saved by another process meanwhile") from None
        _log.debug("saved %d runs (%s)", len(runs), ", ".join(ids))
        return ids

    def set_tag(self, run_ref: str, tag: str | None) -> tuple[str, str | None]:
        """Set, replace (or with None remove) a run's tag; returns (run_id, previous tag)."""
        if tag is not None and not tag.strip():
            raise StoreError("a tag must not be empty")
        with Session(self._write) as session, session.begin():
            run_id = _resolve(session, run_ref)
            previous = session.scalar(select(RunModel.tag).where(RunModel.run_id == run_id))
            session.execute(update(RunModel).where(RunModel.run_id == run_id).values(tag=tag))
        return run_id, previous

    def delete_run(self, run_ref: str) -> str:
        """Delete a run, its measurements and samples; returns the deleted run_id."""
        return self.delete_runs([run_ref])[0]

    def delete_runs(self, run_refs: Iterable[str]) -> list[str]:
        """Delete runs in one transaction; every reference must name a run, else nothing is deleted."""
        with Session(self._write) as session, session.begin():
            run_ids = list(dict.fromkeys(_resolve(session, ref) for ref in run_refs))
            session.execute(delete(RunModel).where(RunModel.run_id.in_(run_ids)))
        _log.debug("deleted runs %s", ", ".join(run_ids))
        return run_ids

    # -- reading runs -------------------------------------------------------------------

    def resolve(self, run_ref: str) -> str:
        """The run_id that ``run_ref`` names: exactly, or as a unique prefix of >= 4 characters."""
        with Session(self.engine) as session, session.begin():
            return _resolve(session, run_ref)

    def get_run(self, run_ref: str) -> Run:
        """The run whose id is ``run_ref`` or starts with it (a unique prefix of >= 4 characters)."""
        return self.get_runs([run_ref])[0]

    def get_runs(self, run_refs: Iterable[str]) -> list[Run]:
        """Full runs (with samples), in the order asked; a few queries per batch of runs, not per run.

        A run that cannot be read back (a corrupted column) raises CorruptRunError."""
        with Session(self.engine) as session, session.begin():
            run_ids = [_resolve(session, ref) for ref in run_refs]
        return list(self.iter_runs(run_ids))

    def iter_runs(self, run_ids: Sequence[str], on_corrupt: OnCorrupt | None = None) -> Iterator[Run]:
        """Full runs by exact id, in that order, loaded a batch at a time (for exports of any size).

        A run that cannot be read back raises CorruptRunError, or with ``on_corrupt`` is handed
        to it and left out (a listing goes on past one damaged run).
        """
        for start in range(0, len(run_ids), _LOAD_BATCH):
            batch = list(run_ids[start:start + _LOAD_BATCH])
            loaded, skipped = self._readable(batch, _load_runs, on_corrupt)
            missing = [run_id for run_id in batch if run_id not in loaded and run_id not in skipped]
            if missing:
                raise StoreError(f"no run matches {missing[0]!r} (deleted meanwhile?)")
            yield from (loaded[run_id] for run_id in batch if run_id in loaded)

    def runs_with_tag(self, tag: str, on_corrupt: OnCorrupt | None = None) -> list[Run]:
        """Every run with ``tag``, with samples, oldest first (a week of nightlies, say)."""
        query = select(RunModel.run_id).where(RunModel.tag == tag).order_by(RunModel.started_at_utc,
                                                                             RunModel.run_id)
        with Session(self.engine) as session, session.begin():
            run_ids = list(session.scalars(query))
        return list(self.iter_runs(run_ids, on_corrupt))

    def list_runs(
        self,
        *,
        tag: str | None = None,
        op: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        fingerprint: str | None = None,
        run_ids: Collection[str] | None = None,
        limit: int | None = 50,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[RunSummary]:
        """Runs newest first that match every filter given; ``run_ids`` keeps only those exact ids.

        A run whose summary cannot be read back raises CorruptRunError, or with ``on_corrupt``
        is handed to it and left out.
        """
        if limit is not None and limit < 1:
            raise StoreError(f"limit must be >= 1, got {limit}")
        query = select(RunModel.run_id).order_by(RunModel.started_at_utc.desc(), RunModel.run_id.desc())
        conditions = _run_filters(tag=tag, since=since, until=until, fingerprint=fingerprint)
        if op is not None:
            conditions.append(
                select(MeasurementModel.id)
                .where(MeasurementModel.run_id == RunModel.run_id, MeasurementModel.op == op)
                .exists()
            )
        if run_ids is not None:
            conditions.append(RunModel.run_id.in_(list(run_ids)))
        query = query.where(*conditions)
        if limit is not None:
            query = query.limit(limit)
        with Session(self.engine) as session, session.begin():
            ids = list(session.scalars(query))
        summaries: list[RunSummary] = []
        for start in range(0, len(ids), _LOAD_BATCH):
            batch = ids[start:start + _LOAD_BATCH]
            loaded, _ = self._readable(batch, _load_summaries, on_corrupt)
            summaries += [loaded[run_id] for run_id in batch if run_id in loaded]
        return summaries

    def _readable(
        self,
        run_ids: list[str],
        load: Callable[[Session, list[str]], dict[str, _Loaded]],
        on_corrupt: OnCorrupt | None,
    ) -> tuple[dict[str, _Loaded], set[str]]:
        """``load`` of a batch; if one run in it cannot be decoded, each run alone, to name it.

        Returns what was loaded and the ids handed to ``on_corrupt``."""
        try:
            with Session(self.engine) as session, session.begin():
                return load(session, run_ids), set()
        except DatabaseFault:
            raise
        except _UNREADABLE as e:
            if len(run_ids) == 1:
                error = CorruptRunError(run_ids[0], e)
                if on_corrupt is None:
                    raise error from None
                on_corrupt(error)
                return {}, {run_ids[0]}
        loaded: dict[str, _Loaded] = {}
        skipped: set[str] = set()
        for run_id in run_ids:
            one, bad = self._readable([run_id], load, on_corrupt)
            loaded.update(one)
            skipped |= bad
        return loaded, skipped

    # -- reading measurements across runs -----------------------------------------------

    def measurement_rows(
        self,
        *,
        op: str | None = None,
        dtype: str | None = None,
        size_bytes: int | None = None,
        tag: str | None = None,
        fingerprint: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
    ) -> list[MeasurementRow]:
        """Every stored measurement matching the filters, oldest run first; one query."""
        m, r, s = MeasurementModel, RunModel, SampleModel
        conditions = _run_filters(tag=tag, since=since, until=until, fingerprint=fingerprint)
        if op is not None:
            conditions.append(m.op == op)
        if dtype is not None:
            conditions.append(m.dtype == dtype)
        if size_bytes is not None:
            conditions.append(m.size_bytes == size_bytes)
        query = (
            select(
                r.run_id, r.started_at_utc, r.revision, r.tag, r.fingerprint, r.source, r.status,
                m.op, m.algo, m.dtype, m.redop, m.root, m.size_bytes, m.in_place, m.world_size,
                m.mean_s, m.cv, m.busbw_bytes_per_s, m.reported, s.samples_s,
            )
            .join(m, m.run_id == r.run_id)
            .join(s, s.measurement_id == m.id)
            .where(*conditions)
            .order_by(r.started_at_utc, r.run_id, m.position)
        )
        try:
            with Session(self.engine) as session, session.begin():
                result = session.execute(query).all()
            return [_measurement_row(*row) for row in result]
        except DatabaseFault:
            raise
        except _UNREADABLE as e:
            raise StoreError(f"result store {self.url}: a stored measurement cannot be read back "
                             f"(corrupted column?): {_short(e)}") from None

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _insert_rows(conn: Connection, rows: Sequence[RunRows]) -> None:
    """Insert runs, their measurements and samples with one executemany per table.

    A sample row needs the id the database gave its measurement; the ids are read back by
    (run_id, position), the measurements' unique key. (``INSERT ... RETURNING`` in
    parameter order would need no query, but SQLite then sends one statement per row, and
    psycopg parses each 1,000-row statement in Python: with 20,000 measurements, about 1.4
    times as long on SQLite and 2-3 times on PostgreSQL.)
    """
    if not rows:
        return
    conn.execute(insert(RunModel), [r.run for r in rows])
    measurements = [m for r in rows for m in r.measurements]
    if not measurements:
        return
    conn.execute(insert(MeasurementModel), measurements)
    inserted = select(MeasurementModel.id, MeasurementModel.run_id, MeasurementModel.position).where(
        MeasurementModel.run_id.in_([r.run["run_id"] for r in rows])
    )
    measurement_ids = {(run_id, position): id_ for id_, run_id, position in conn.execute(inserted)}
    conn.execute(insert(SampleModel), [
        {"measurement_id": measurement_ids[r.run["run_id"], position], **sample}
        for r in rows
        for position, sample in enumerate(r.samples)
    ])


def _measurement_row(
    run_id: str, started: datetime, revision: str | None, run_tag: str | None, fp: str, source: str,
    run_status: str, op_name: str, algo: str, dtype_name: str, redop: str, root: int, size: int, in_place: bool,
    world_size: int, mean_s: float, cv: float | None, busbw: float, reported: dict | None, samples: list,
) -> MeasurementRow:
    """One row of ``Store.measurement_rows``' query as a MeasurementRow."""
    stats = reported_from_json(reported)
    return MeasurementRow(
        run_id=run_id,
        started_at=started.replace(tzinfo=timezone.utc),
        revision=revision,
        tag=run_tag,
        fingerprint=fp,
        source=source,
        op=op_name,
        algo=algo,
        dtype=dtype_name,
        redop=redop,
        root=root,
        size_bytes=size,
        in_place=in_place,
        world_size=world_size,
        mean_s=mean_s,
        cv=cv,
        iterations=len(samples) if samples or stats is None else stats.n,
        busbw_bytes_per_s=busbw,
        samples_s=tuple(float(x) for x in samples),
        status=run_status,
    )


def _run_filters(
    *,
    tag: str | None,
    since: str | datetime | None,
    until: str | datetime | None,
    fingerprint: str | None,
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if tag is not None:
        conditions.append(RunModel.tag == tag)
    if since is not None:
        conditions.append(RunModel.started_at_utc >= to_utc(since, what="since"))
    if until is not None:
        bound = to_utc(until, what="until")
        if is_date(until):
            conditions.append(RunModel.started_at_utc < bound + timedelta(days=1))
        else:
            conditions.append(RunModel.started_at_utc <= bound)
    if fingerprint is not None:
        conditions.append(RunModel.fingerprint.startswith(fingerprint.strip().lower(), autoescape=True))
    return conditions


def _load_runs(session: Session, run_ids: list[str]) -> dict[str, Run]:
    """Full runs with these ids, keyed by run_id: three queries in all."""
    rows = session.scalars(
        select(RunModel)
        .where(RunModel.run_id.in_(run_ids))
        .options(selectinload(RunModel.measurements).selectinload(MeasurementModel.samples))
    ).all()
    return {row.run_id: run_from_model(row) for row in rows}


def _load_summaries(session: Session, run_ids: list[str]) -> dict[str, RunSummary]:
    """Summaries of the runs with these ids (no JSON column read), keyed by run_id: two queries."""
    r = RunModel
    rows = session.execute(
        select(r.run_id, r.started_at, r.started_at_utc, r.status, r.tag, r.revision, r.source, r.world_size,
               r.backend, r.avg_busbw_bytes_per_s, r.fingerprint)
        .where(r.run_id.in_(run_ids))
    ).all()
    counts: dict[str, dict[str, int]] = {run_id: {} for run_id in run_ids}
    per_op = session.execute(
        select(MeasurementModel.run_id, MeasurementModel.op, func.count())
        .where(MeasurementModel.run_id.in_(run_ids))
        .group_by(MeasurementModel.run_id, MeasurementModel.op)
    )
    for run_id, op_name, n in per_op:
        counts[run_id][op_name] = n
    return {
        row.run_id: RunSummary(
            run_id=row.run_id,
            started_at=row.started_at,
            started_at_utc=row.started_at_utc.replace(tzinfo=timezone.utc),
            status=row.status,
            tag=row.tag,
            revision=row.revision,
            source=row.source,
            world_size=row.world_size,
            backend=row.backend,
            nmeasurements=sum(counts[row.run_id].values()),
            ops=tuple(sorted(counts[row.run_id])),
            avg_busbw_bytes_per_s=row.avg_busbw_bytes_per_s,
            fingerprint=row.fingerprint,
        )
        for row in rows
    }


def _short(error: BaseException) -> str:
    """An exception's message, one line, at most 200 characters: stored text can be anything."""
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def _resolve(session: Session, run_ref: str) -> str:
    """The one run_id that ``run_ref`` names exactly or as a prefix of at least MIN_PREFIX_LEN."""
    if session.scalar(select(RunModel.run_id).where(RunModel.run_id == run_ref)) is not None:
        return run_ref  # (the id alone: a run with a damaged column still resolves, then fails to load)
    if len(run_ref) < MIN_PREFIX_LEN:
        raise StoreError(
            f"no run matches {run_ref!r} (a run_id prefix needs at least {MIN_PREFIX_LEN} characters)"
        )
    candidates = session.scalars(
        select(RunModel.run_id).where(RunModel.run_id.startswith(run_ref, autoescape=True)).order_by(RunModel.run_id)
    ).all()
    matches = [c for c in candidates if c.startswith(run_ref)]  # SQLite's LIKE ignores case
    if not matches:
        raise StoreError(f"no run matches {run_ref!r}")
    if len(matches) > 1:
        shown = ", ".join(matches[:_MAX_LISTED_MATCHES])
        more = ", ..." if len(matches) > _MAX_LISTED_MATCHES else ""
        raise StoreError(f"{run_ref!r} matches {len(matches)} runs: {shown}{more}")
    return matches[0]
