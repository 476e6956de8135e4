"""The result store: save, find, list, tag and delete runs, and query measurements across runs.

``Store.open(url)`` connects to SQLite (a path or ``sqlite:///...``, the default) or
PostgreSQL (``postgresql+psycopg://...``) and checks the schema revision (see
``commlens.store.schema``).

Query API for analysis (the regression gate):

- ``Store.measurement_rows(MeasurementFilter(op=, dtype=, size_bytes=, tag=, fingerprint=, since=, until=))``:
  one ``MeasurementRow`` per stored measurement that matches, with its run's time (UTC),
  revision, tag, fingerprint and source, its key (op, algo, dtype, redop, root, size,
  placement, process group), mean time, CV, iteration count, busBW and raw samples (empty for rows
  ingested without samples); oldest run first, then the run's own order. One query.
- ``Store.mean_history(MeasurementFilter(...))``: what ``commlens detect`` reads, the
  same rows' mean times only, as plain tuples, and their runs. Two queries.
- ``Store.runs_with_tag(tag)``: the full runs with that tag, oldest first.
- ``Store.list_runs(RunFilter(...))``: run summaries, newest first, filtered by tag, op, time, fingerprint,
  source, revision or run ids (``Store.count_runs``: how many).

Time filters take ISO 8601 strings or datetimes (naive ones are UTC). ``since`` is
inclusive; so is ``until``, and a bare date as ``until`` covers that whole day.
A fingerprint filter matches the full fingerprint or a prefix of it.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, and_, delete, func, insert, literal, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from commlens.results.records import Run
from commlens.store.convert import RunRow, is_date, measurement_rows, run_row, to_utc
from commlens.store.db import (
    DatabaseFault,
    NoStoreError,
    StoreError,
    check_sqlite_integrity,
    db_url,
    default_db_url,
    driver_reason,
    is_sqlite,
    make_engine,
    map_driver_error,
    shown_url,
    sqlite_file_missing,
    write_engine,
)
from commlens.store.kinds import Baselines, ChangePoints, Floors, Reports, Thresholds
from commlens.store.loading import (
    UNREADABLE,
    CorruptRunError,
    MeasurementRow,
    OnCorrupt,
    RunSummary,
    load_runs,
    load_summaries,
    measurement_row,
    short_reason,
)
from commlens.store.models import MeasurementModel, RunModel, SampleModel
from commlens.store.plain import HistoryPoint, HistoryRun, history_points
from commlens.store.schema import check_schema
from commlens.store.summaries import MeasurementFilter, RunFilter

__all__ = ["MIN_PREFIX_LEN", "CorruptRunError", "MeasurementRow", "OnCorrupt", "RunFilter", "RunSummary", "Store"]

_log = logging.getLogger(__name__)

MIN_PREFIX_LEN = 4
_MAX_LISTED_MATCHES = 5
_LOAD_BATCH = 200  # runs loaded per query; bounds the size of IN (...) lists
_INSERT_BATCH = 5_000  # measurements inserted per statement; bounds a save's memory, whatever the run's size
_Loaded = TypeVar("_Loaded")
# Store.mean_history's rows: (run_id, started_at UTC, revision, tag, fingerprint, status) and
# (run_id, op, algo, dtype, redop, root, size_bytes, in_place, group, mean_s), redop and root None when none.


class Store:
    """A connection to one result store; ``Store.open()`` with no URL uses ``default_db_url()``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._write = write_engine(engine)
        self._checked = False  # the SQLite file's integrity, checked before this store's first write
        # the other kinds of stored object, one repository each (store/kinds.py)
        self.baselines = Baselines(self)
        self.thresholds = Thresholds(self)
        self.floors = Floors(self)
        self.reports = Reports(self)
        self.change_points = ChangePoints(self)

    def _before_write(self) -> None:
        if not self._checked:
            check_sqlite_integrity(self.engine)
            self._checked = True

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

        Bulk inserts of a batch of rows at a time (``_INSERT_BATCH`` measurements), all in the
        one transaction: a run of a million measurements holds one batch of rows in memory, and
        a failure in its last batch still stores nothing of it.
        """
        ids = [run.run_id for run in runs]
        repeated = [run_id for run_id, n in Counter(ids).items() if n > 1]
        if repeated:
            raise StoreError(f"run {repeated[0]!r} is given more than once")
        run_rows = [run_row(run) for run in runs]
        self._before_write()
        try:
            with self._write.begin() as conn:
                existing = conn.scalars(select(RunModel.run_id).where(RunModel.run_id.in_(ids))).first()
                if existing is not None:
                    raise StoreError(f"run {existing!r} is already in the store")
                _insert_runs(conn, runs, run_rows)
        except DatabaseFault:
            check_sqlite_integrity(self.engine)  # a write that failed on a damaged file says so
            raise
        except IntegrityError:
            # Another process saved one of these run_ids between our check and our insert.
            raise StoreError(
                f"run {ids[0]!r} is already in the store"
                if len(ids) == 1
                else "one of these runs was saved by another process meanwhile"
            ) from None
        _log.debug("saved %d runs (%s)", len(runs), ", ".join(ids))
        return ids

    @contextlib.contextmanager
    def batch(self) -> Iterator[RunBatch]:
        """One transaction for many saves (``commlens ingest`` of many files): each ``RunBatch.save_new``
        checks its runs (a run the store cannot hold is refused alone) and queues them; they are inserted
        a batch at a time and committed together when the ``with`` ends, and an error out of it (a database
        fault, Ctrl-C) stores none of them. On SQLite the write lock is held from the start to the end."""
        self._before_write()
        try:
            with self._write.begin() as conn:
                batch = RunBatch(conn)
                yield batch
                batch.flush()
        except DatabaseFault:
            check_sqlite_integrity(self.engine)  # a write that failed on a damaged file says so
            raise

    def set_tag(self, run_ref: str, tag: str | None) -> tuple[str, str | None]:
        """Set, replace (or with None remove) a run's tag; returns (run_id, previous tag)."""
        if tag is not None and not tag.strip():
            raise StoreError("a tag must not be empty")
        self._before_write()
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
        self._before_write()
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
            batch = list(run_ids[start : start + _LOAD_BATCH])
            loaded, skipped = self._readable(batch, load_runs, on_corrupt)
            missing = [run_id for run_id in batch if run_id not in loaded and run_id not in skipped]
            if missing:
                raise StoreError(f"no run matches {missing[0]!r} (deleted meanwhile?)")
            yield from (loaded[run_id] for run_id in batch if run_id in loaded)

    def run_ids_with_tag(self, tag: str) -> list[str]:
        """The ids of every run with ``tag``, oldest first."""
        query = select(RunModel.run_id).where(RunModel.tag == tag).order_by(RunModel.started_at_utc, RunModel.run_id)
        with Session(self.engine) as session, session.begin():
            return list(session.scalars(query))

    def runs_with_tag(self, tag: str, on_corrupt: OnCorrupt | None = None) -> list[Run]:
        """Every run with ``tag``, with samples, oldest first (a week of nightlies, say)."""
        return list(self.iter_runs(self.run_ids_with_tag(tag), on_corrupt))

    def list_runs(
        self,
        where: RunFilter = RunFilter(),
        *,
        limit: int | None = 50,
        offset: int = 0,
        on_corrupt: OnCorrupt | None = None,
    ) -> list[RunSummary]:
        """Runs newest first that match ``where`` (every run by default).

        ``offset`` skips that many matches first (a page of a listing).
        A run whose summary cannot be read back raises CorruptRunError, or with ``on_corrupt``
        is handed to it and left out.
        """
        if limit is not None and limit < 1:
            raise StoreError(f"limit must be >= 1, got {limit}")
        if offset < 0:
            raise StoreError(f"offset must be >= 0, got {offset}")
        query = select(RunModel.run_id).order_by(RunModel.started_at_utc.desc(), RunModel.run_id.desc())
        query = query.where(*self._listing_filters(where))
        if limit is not None:
            query = query.limit(limit)
        if offset:
            query = query.offset(offset)
        with Session(self.engine) as session, session.begin():
            ids = list(session.scalars(query))
        summaries: list[RunSummary] = []
        for start in range(0, len(ids), _LOAD_BATCH):
            batch = ids[start : start + _LOAD_BATCH]
            loaded, _ = self._readable(batch, load_summaries, on_corrupt)
            summaries += [loaded[run_id] for run_id in batch if run_id in loaded]
        return summaries

    def count_runs(self, where: RunFilter = RunFilter()) -> int:
        """How many runs ``list_runs`` with the same filter (and no limit) would list."""
        conditions = self._listing_filters(where)
        with Session(self.engine) as session, session.begin():
            return int(session.scalar(select(func.count()).select_from(RunModel).where(*conditions)) or 0)

    @staticmethod
    def _listing_filters(where: RunFilter) -> list[ColumnElement[bool]]:
        conditions = _run_filters(tag=where.tag, since=where.since, until=where.until, fingerprint=where.fingerprint)
        if where.op is not None:
            conditions.append(
                select(MeasurementModel.id)
                .where(MeasurementModel.run_id == RunModel.run_id, MeasurementModel.op == where.op)
                .exists()
            )
        if where.source is not None:
            conditions.append(RunModel.source == where.source)
        if where.revision is not None:
            conditions.append(RunModel.revision.startswith(where.revision.strip(), autoescape=True))
        if where.run_ids is not None:
            conditions.append(RunModel.run_id.in_(list(where.run_ids)))
        return conditions

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
        except UNREADABLE as e:
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
        self, where: MeasurementFilter = MeasurementFilter(), *, with_samples: bool = True
    ) -> list[MeasurementRow]:
        """Every stored measurement ``where`` matches, oldest run first; one query.

        ``with_samples=False`` leaves the samples unread (``samples_s`` empty, ``iterations`` the
        reported count or 0): what a history of mean times needs, at a fraction of the cost.
        """
        m, r, s = MeasurementModel, RunModel, SampleModel
        run_conditions, measurement_conditions = _measurement_filters(where)
        conditions = run_conditions + measurement_conditions
        query = (
            select(
                r.run_id,
                r.started_at_utc,
                r.revision,
                r.tag,
                r.fingerprint,
                r.source,
                r.status,
                m.op,
                m.algo,
                m.dtype,
                m.redop,
                m.root,
                m.size_bytes,
                m.in_place,
                m.world_size,
                m.mean_s,
                m.cv,
                m.busbw_bytes_per_s,
                m.reported,
                s.samples_s if with_samples else literal(None).label("samples_s"),
                m.group_name,
            )
            .join(m, m.run_id == r.run_id)
            .where(*conditions)
            .order_by(r.started_at_utc, r.run_id, m.position)
        )
        if with_samples:
            query = query.join(s, s.measurement_id == m.id)
        with self._reading_measurements():
            with Session(self.engine) as session, session.begin():
                # Rows as plain sequences: mypy cannot match ``*row`` of a 21-column Row (typed past
                # its tenth column as ``*tuple[Any, ...]``) to measurement_row's parameters.
                result: Sequence[Sequence[Any]] = session.execute(query).all()
            return [measurement_row(*row) for row in result]

    def mean_history(
        self, where: MeasurementFilter = MeasurementFilter()
    ) -> tuple[list[HistoryRun], list[HistoryPoint]]:
        """What ``commlens detect`` reads: every stored measurement's mean time ``where`` matches, as plain
        tuples, oldest run first (as ``measurement_rows``), and the runs they belong to. Two queries, no
        samples and no object per row.
        """
        m, r = MeasurementModel, RunModel
        run_conditions, measurement_conditions = _measurement_filters(where)
        conditions = run_conditions + measurement_conditions
        points_query = (
            select(m.run_id, m.op, m.algo, m.dtype, m.redop, m.root, m.size_bytes, m.in_place, m.group_name, m.mean_s)
            .join(r, m.run_id == r.run_id)
            .where(*conditions)
            .order_by(r.started_at_utc, r.run_id, m.position)
        )
        runs_query = select(r.run_id, r.started_at_utc, r.revision, r.tag, r.fingerprint, r.status).where(
            *run_conditions
        )
        with self._reading_measurements():
            with self.engine.connect() as conn:  # points first: a run saved in between is only never used
                found = _plain_rows(conn, points_query)
                runs = [
                    (run_id, started.replace(tzinfo=timezone.utc), revision, run_tag, fp, status)
                    for run_id, started, revision, run_tag, fp, status in conn.execute(runs_query)
                ]
            return runs, history_points(found, runs)

    @contextlib.contextmanager
    def _reading_measurements(self) -> Iterator[None]:
        """A read of stored measurements: a value that does not decode (a corrupted column) is a StoreError
        that says so; a fault of the database itself passes as it is."""
        try:
            yield
        except DatabaseFault:
            raise
        except UNREADABLE as e:
            raise StoreError(
                f"result store {self.url}: a stored measurement cannot be read back "
                f"(corrupted column?): {short_reason(e)}"
            ) from None

    def unreadable_runs(self) -> list[CorruptRunError]:
        """Read every stored run back, a batch at a time; the ones that cannot be, oldest first."""
        found: list[CorruptRunError] = []
        ids = [summary.run_id for summary in reversed(self.list_runs(limit=None, on_corrupt=found.append))]
        for _ in self.iter_runs(ids, on_corrupt=found.append):
            pass
        return found

    def generation(self) -> tuple[str, ...]:
        """What a document computed from the store depends on, in one query: the runs, baselines, thresholds
        and noise floors held (how many, and the newest). Any write through commlens changes it, so a cache
        of such documents stays valid while it is the same."""
        from commlens.store.models import BaselineModel, NoiseFloorModel, ThresholdModel

        parts = [
            select(func.count()).select_from(RunModel).scalar_subquery(),
            select(func.max(RunModel.started_at_utc)).scalar_subquery(),
            select(func.max(RunModel.run_id)).scalar_subquery(),
            select(func.count()).select_from(BaselineModel).scalar_subquery(),
            select(func.max(BaselineModel.set_at)).scalar_subquery(),
            select(func.count()).select_from(ThresholdModel).scalar_subquery(),
            select(func.max(ThresholdModel.set_at)).scalar_subquery(),
            select(func.count()).select_from(NoiseFloorModel).scalar_subquery(),
            select(func.max(NoiseFloorModel.learned_at)).scalar_subquery(),
        ]
        with Session(self.engine) as session:
            return tuple(str(v) for v in session.execute(select(*parts)).one())

    def refresh_statistics(self) -> None:
        """Give SQLite's planner statistics (an approximate ANALYZE, a fraction of a second on 1,000,000 rows).

        Without them it reads a series' history through the index on the key alone, every run's row of the
        key across systems and tags, rather than from the series' runs: 3x slower on a 10,000-run store.
        PostgreSQL's autovacuum keeps its own: nothing is done there. Raises what the database raises (a
        store that cannot be written, say); the caller decides whether that matters.
        """
        if not is_sqlite(self.engine):
            return
        with self._write.begin() as conn:
            conn.exec_driver_sql("PRAGMA analysis_limit=400")
            conn.exec_driver_sql("ANALYZE")

    def measured_slices(self, since: datetime) -> list[tuple[str, str, int]]:
        """The (op, dtype, size) measured by runs started at or after ``since`` (naive: UTC), in order."""
        m = MeasurementModel
        query = (
            select(m.op, m.dtype, m.size_bytes)
            .join(RunModel, RunModel.run_id == m.run_id)
            .where(RunModel.started_at_utc >= to_utc(since, what="since"))
            .distinct()
            .order_by(m.op, m.dtype, m.size_bytes)
        )
        with Session(self.engine) as session:
            return [(op, dtype, int(size)) for op, dtype, size in session.execute(query)]

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class RunBatch:
    """The saves of one ``Store.batch()`` transaction: runs are checked as they are given and inserted
    ``_INSERT_BATCH`` measurements at a time, a few statements for many small files."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._pending: list[tuple[str, list[Run], list[RunRow]]] = []  # (label, runs, their rows)
        self._size = 0  # measurements and runs pending
        self._added: set[str] = set()  # run ids saved in this transaction
        self.refused: list[tuple[str, StoreError]] = []  # (label, why) of saves refused when inserted

    def save_new(self, runs: Sequence[Run], label: str = "") -> set[str]:
        """Save those of ``runs`` not yet stored (before, or earlier in this transaction); returns the ids that
        were there already. StoreError, with nothing of ``runs`` saved, when a run cannot be stored. A save
        that another process makes collide at insert time is left out and listed in ``refused`` under
        ``label``; the others stay."""
        ids = [run.run_id for run in runs]
        repeated = [run_id for run_id, n in Counter(ids).items() if n > 1]
        if repeated:
            raise StoreError(f"run {repeated[0]!r} is given more than once")
        stored = self._stored(ids) | (set(ids) & self._added)
        new = [run for run in runs if run.run_id not in stored]
        rows = [run_row(run) for run in new]
        self._added.update(run.run_id for run in new)
        self._pending.append((label, new, rows))
        self._size += len(new) + sum(len(run.measurements) for run in new)
        if self._size >= _INSERT_BATCH:
            self.flush()
        return stored

    def flush(self) -> None:
        """Insert the pending runs: all in one savepoint or, if one of them collides with a run another
        process saved meanwhile (PostgreSQL; SQLite holds the write lock), each save in its own."""
        pending, self._pending, self._size = self._pending, [], 0
        runs = [run for _, some, _ in pending for run in some]
        if not runs:
            return
        try:
            with self._conn.begin_nested():
                _insert_runs(self._conn, runs, [row for _, _, rows in pending for row in rows])
            return
        except IntegrityError:
            pass
        except DatabaseFault as e:
            raise _first_fault(e) from None
        for label, some, rows in pending:
            try:
                with self._conn.begin_nested():
                    _insert_runs(self._conn, some, rows)
            except IntegrityError:
                ids = [run.run_id for run in some]
                if self._stored(ids) != set(ids):
                    self.refused.append((label, StoreError("one of these runs was saved by another process meanwhile")))

    def _stored(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the store holds: a statement per file, so straight to the driver (compiling a
        SQLAlchemy statement each time would cost more than running it)."""
        found: set[str] = set()
        mark = "?" if self._conn.dialect.paramstyle == "qmark" else "%s"
        cursor = self._conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            for start in range(0, len(ids), _LOAD_BATCH):
                batch = ids[start : start + _LOAD_BATCH]
                cursor.execute(f"SELECT run_id FROM runs WHERE run_id IN ({', '.join([mark] * len(batch))})", batch)
                found.update(run_id for (run_id,) in cursor.fetchall())
        except self._conn.dialect.loaded_dbapi.Error as e:
            raise map_driver_error(shown_url(self._conn.engine), e) from None
        finally:
            cursor.close()
        return found


def _first_fault(fault: DatabaseFault) -> DatabaseFault:
    """The fault a write met, rather than the one its savepoint's rollback met after it: SQLite ends the whole
    transaction on a full disk or an I/O error, so rolling back to the savepoint then fails ("no such
    savepoint") and would hide what went wrong."""
    cause = fault.__context__
    while "savepoint" in str(fault).lower() and cause is not None:
        if isinstance(cause, DatabaseFault):
            return cause
        cause = cause.__context__
    return fault


def _insert_runs(conn: Connection, runs: Sequence[Run], run_rows: Sequence[RunRow]) -> None:
    """Insert the runs (``run_rows``, one executemany), then their measurements and samples a batch
    of ``_INSERT_BATCH`` at a time: a handful of statements for many small runs, bounded rows for a
    big one."""
    if not runs:
        return
    conn.execute(insert(RunModel), list(run_rows))
    for spans in _batches(runs):
        _insert_batch(conn, spans)


_Span = tuple[Run, int, int]  # a run and the positions [start, stop) of its measurements in one batch


def _batches(runs: Sequence[Run]) -> Iterator[list[_Span]]:
    """The runs' measurements in order, cut into batches of at most ``_INSERT_BATCH``."""
    batch: list[_Span] = []
    size = 0
    for run in runs:
        start = 0
        while start < len(run.measurements):
            stop = min(len(run.measurements), start + _INSERT_BATCH - size)
            batch.append((run, start, stop))
            size += stop - start
            start = stop
            if size == _INSERT_BATCH:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def _insert_batch(conn: Connection, spans: list[_Span]) -> None:
    """Insert one batch of measurements and their samples, one executemany per table.

    A sample row needs the id the database gave its measurement; the ids are read back by
    (run_id, position), the measurements' unique key. (``INSERT ... RETURNING`` in
    parameter order would need no query, but SQLite then sends one statement per row, and
    psycopg parses each 1,000-row statement in Python: with 20,000 measurements, about 1.4
    times as long on SQLite and 2-3 times on PostgreSQL.)
    """
    rows = [row for run, start, stop in spans for row in measurement_rows(run, start, stop)]
    keys = [(run.run_id, p) for run, start, stop in spans for p in range(start, min(stop, len(run.measurements)))]
    conn.execute(insert(MeasurementModel), [measurement for measurement, _ in rows])
    m = MeasurementModel
    whole = [run.run_id for run, start, stop in spans if start == 0 and stop == len(run.measurements)]
    parts = [
        and_(m.run_id == run.run_id, m.position >= start, m.position < stop)
        for run, start, stop in spans
        if not (start == 0 and stop == len(run.measurements))
    ]
    inserted = select(m.id, m.run_id, m.position).where(or_(*parts, *([m.run_id.in_(whole)] if whole else [])))
    measurement_ids = {(run_id, position): id_ for id_, run_id, position in conn.execute(inserted)}
    conn.execute(
        insert(SampleModel),
        [{"measurement_id": measurement_ids[key], **sample} for key, (_, sample) in zip(keys, rows, strict=True)],
    )


def _plain_rows(conn: Connection, query: Any) -> list[tuple[Any, ...]]:
    """``query``'s rows as the driver returns them (plain tuples, no SQLAlchemy row per result): a read of a
    hundred thousand rows at a fraction of the cost. Only for columns whose driver values are what the
    caller needs (no JSON, no dates); a driver error becomes DatabaseFault, as through the engine."""
    compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    params: Any = compiled.construct_params()
    if compiled.positional:
        params = tuple(params[name] for name in compiled.positiontup or ())
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(str(compiled), params)
        return list(cursor.fetchall())
    except conn.dialect.loaded_dbapi.Error as e:
        raise map_driver_error(shown_url(conn.engine), e) from None
    finally:
        cursor.close()


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
        fp = fingerprint.strip().lower()
        # a whole fingerprint (16 hex digits) by equality, which the (fingerprint, tag, time) index serves
        exact = len(fp) == _FINGERPRINT_CHARS
        conditions.append(RunModel.fingerprint == fp if exact else RunModel.fingerprint.startswith(fp, autoescape=True))
    return conditions


def _measurement_filters(where: MeasurementFilter) -> tuple[list[ColumnElement[bool]], list[ColumnElement[bool]]]:
    """The conditions of ``where`` on a measurement's run, and those on the measurement itself."""
    runs = _run_filters(tag=where.tag, since=where.since, until=where.until, fingerprint=where.fingerprint)
    if where.run_ids is not None:
        runs.append(RunModel.run_id.in_(list(where.run_ids)))
    m = MeasurementModel
    measurements: list[ColumnElement[bool]] = []
    if where.op is not None:
        measurements.append(m.op == where.op)
    if where.dtype is not None:
        measurements.append(m.dtype == where.dtype)
    if where.size_bytes is not None:
        measurements.append(m.size_bytes == where.size_bytes)
    return runs, measurements


_FINGERPRINT_CHARS = 16  # SystemInfo.fingerprint(): the first 16 hex digits of a SHA-256


def _resolve(session: Session, run_ref: str) -> str:
    """The one run_id that ``run_ref`` names exactly or as a prefix of at least MIN_PREFIX_LEN."""
    if session.scalar(select(RunModel.run_id).where(RunModel.run_id == run_ref)) is not None:
        return run_ref  # (the id alone: a run with a damaged column still resolves, then fails to load)
    if len(run_ref) < MIN_PREFIX_LEN:
        raise StoreError(f"no run matches {run_ref!r} (a run_id prefix needs at least {MIN_PREFIX_LEN} characters)")
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
