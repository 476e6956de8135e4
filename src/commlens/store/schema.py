"""The store's schema revision: checked on open, created on a fresh database, upgraded in place.

A store's revision is Alembic's (table ``alembic_version``); the migrations live in
``commlens/store/migrations/versions/``. Stores written before commlens used Alembic
have only ``schema_version`` = 1: they are at revision 0001, unstamped.

What a database can be, and what happens to it:

1. empty (no commlens tables): ``Store.open`` creates the latest schema and stamps it.
2. current (at ``SCHEMA_REVISION``): used as is.
3. old (an earlier revision): ``Store.open`` refuses; ``commlens db upgrade`` runs the
   migrations in place, in one transaction.
4. newer (a revision this commlens does not know): refused; upgrade commlens.

Creating and upgrading hold an exclusive lock (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL:
a transaction-scoped advisory lock), so several processes opening a fresh store at once
create it once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from sqlalchemy import Connection, Engine, func, insert, select, text
from sqlalchemy.exc import SQLAlchemyError

from commlens.store.db import (
    DatabaseFault,
    NoStoreError,
    StoreError,
    db_url,
    default_db_url,
    driver_reason,
    is_sqlite,
    make_engine,
    shown_url,
    sqlite_file_missing,
    write_engine,
)
from commlens.store.models import LEGACY_SCHEMA_VERSION, SCHEMA_REVISION, Base, RunModel, SchemaVersionModel

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = [
    "SchemaState",
    "SchemaStatus",
    "SchemaUpgrade",
    "check_schema",
    "open_engine",
    "read_status",
    "schema_status",
    "upgrade_schema",
]

_log = logging.getLogger(__name__)

SchemaState = Literal["empty", "current", "old", "newer"]

_MIGRATIONS = "commlens.store:migrations"
_VERSION_TABLE = "alembic_version"
_PRE_ALEMBIC_REVISION = "0001"  # what schema_version = 1 means
_PG_LOCK_KEY = int.from_bytes(b"commlens", "big") >> 1  # any fixed 63-bit number


@dataclass(frozen=True)
class SchemaStatus:
    """Where a database's schema stands against this commlens."""

    url: str  # password hidden
    revision: str | None  # None: no commlens schema yet
    head: str  # the revision this commlens reads and writes
    state: SchemaState
    stamped: bool  # False for stores from before Alembic (revision known from schema_version)
    nruns: int | None  # None when there is no runs table (yet)
    # What the integrity check found ("ok" on a sound SQLite file), or what was checked instead;
    # None when there is no database to check. integrity_ok is None when nothing was checked.
    integrity: str | None = None
    integrity_ok: bool | None = None


_QUICK_CHECK_ROWS = 20  # problems SQLite's quick_check reports at most


def schema_status(url: str | None = None) -> SchemaStatus:
    """Read the store's revision and compare it with this commlens', and check the database's integrity
    (SQLite: ``PRAGMA quick_check``); changes nothing, creates no file."""
    url = default_db_url() if url is None else db_url(url)
    if sqlite_file_missing(url):
        return SchemaStatus(url=url, revision=None, head=SCHEMA_REVISION, state="empty", stamped=False, nruns=None)
    with open_engine(url) as engine, _snapshot(engine) as conn:
        try:
            integrity, integrity_ok = _integrity(conn)
        except DatabaseFault as e:  # too damaged for the check to run
            raise StoreError(f"result store {shown_url(engine)} fails its integrity check: {e.problem}") from None
        try:
            status = read_status(conn, counting=True)
        except DatabaseFault:
            if integrity_ok is not False:
                raise
            raise StoreError(f"result store {shown_url(engine)} fails its integrity check: {integrity}") from None
        return replace(status, integrity=integrity, integrity_ok=integrity_ok)


def _integrity(conn: Connection) -> tuple[str, bool | None]:
    """SQLite: every page, index and constraint checked (``quick_check``, linear in the file's size).
    PostgreSQL has no such check from a client: the server verifies page checksums as it reads, when
    the cluster was initialised with them; say which."""
    if conn.dialect.name == "sqlite":
        found = [str(row) for row in conn.exec_driver_sql(f"PRAGMA quick_check({_QUICK_CHECK_ROWS})").scalars()]
        if found == ["ok"]:
            return "ok", True
        return "; ".join(found)[:2000], False
    checksums = conn.scalar(text("SHOW data_checksums"))
    return (
        f"not checked by commlens (PostgreSQL verifies page checksums as it reads them: data_checksums {checksums})"
    ), None


@dataclass(frozen=True)
class SchemaUpgrade:
    """What ``upgrade_schema`` did: ``before`` is None when it created the schema in an empty
    database, equal to ``after`` when there was nothing to do."""

    url: str  # password hidden
    before: str | None
    after: str


def upgrade_schema(url: str | None = None) -> SchemaUpgrade:
    """Migrate the store at ``url`` to this commlens' revision, in place and in one transaction."""
    url = default_db_url() if url is None else db_url(url)
    with open_engine(url, doing="upgrade") as engine:
        before, after = _upgrade(engine)
        return SchemaUpgrade(url=shown_url(engine), before=before, after=after)


def check_schema(engine: Engine, *, create: bool = True) -> None:
    """Make sure the store is at this commlens' revision: create it if empty, else refuse with advice.

    ``create=False`` (readers): an empty database is refused with NoStoreError, and nothing is written.
    """
    with _snapshot(engine) as conn:
        status = read_status(conn)
    if status.state == "current":
        return
    if status.state == "empty" and not create:
        raise NoStoreError(f"no result store at {status.url}: nothing stored yet")
    # Decide under the lock: another process may be creating the schema right now.
    with _exclusive(engine) as conn:
        status = read_status(conn)
        if status.state == "empty":
            _create_latest(conn)
            _log.info("created result store schema %s at %s", SCHEMA_REVISION, status.url)
            return
    if status.state == "old":
        raise StoreError(
            f"result store {status.url} has schema {status.revision}, this commlens needs "
            f"{status.head}: run `commlens db upgrade` (with the same --db) to upgrade it in place"
        )
    if status.state == "newer":
        raise _newer_error(status)


def _upgrade(engine: Engine) -> tuple[str | None, str]:
    with _exclusive(engine, foreign_keys=False) as conn:
        status = read_status(conn)
        if status.state == "newer":
            raise _newer_error(status)
        if status.state == "current":
            return status.revision, status.head
        if status.state == "empty":
            _create_latest(conn)
            return None, status.head

        from alembic import command
        from alembic.runtime.migration import MigrationContext

        if not status.stamped:
            MigrationContext.configure(conn).stamp(_script(), _PRE_ALEMBIC_REVISION)
        command.upgrade(_alembic_config(conn), "head")
        reached = read_status(conn)
        if reached.state != "current":  # a migration chain that stops short of SCHEMA_REVISION
            raise StoreError(f"upgrade reached schema {reached.revision}, expected {status.head}")
        if is_sqlite(engine):
            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
            if broken:
                raise StoreError(f"upgrade would leave rows without their parent: {broken[:5]}")
    _log.info("upgraded result store %s from %s to %s", status.url, status.revision, status.head)
    return status.revision, status.head


@contextmanager
def open_engine(url: str, doing: str = "open") -> Iterator[Engine]:
    """An engine for one schema operation; database errors become StoreError naming the store."""
    engine = make_engine(url)
    try:
        yield engine
    except (SQLAlchemyError, DatabaseFault) as e:
        raise StoreError(f"cannot {doing} result store {shown_url(engine)}: {driver_reason(e)}") from None
    finally:
        engine.dispose()


def read_status(conn: Connection, *, counting: bool = False) -> SchemaStatus:
    url = conn.engine.url.render_as_string(hide_password=True)
    has_table = conn.dialect.has_table
    stamped = has_table(conn, _VERSION_TABLE)
    revision: str | None = None
    if stamped:
        revisions = conn.scalars(text(f"SELECT version_num FROM {_VERSION_TABLE}")).all()
        if len(revisions) > 1:
            raise StoreError(f"result store {url} has several schema revisions {revisions}: not a commlens store")
        revision = revisions[0] if revisions else None
        stamped = revision is not None
    if revision is None and has_table(conn, SchemaVersionModel.__tablename__):
        version = conn.scalar(select(func.max(SchemaVersionModel.version)))
        revision = _PRE_ALEMBIC_REVISION if version == 1 else str(version)
    if revision is None:
        if has_table(conn, RunModel.__tablename__):
            raise StoreError(f"{url} has a 'runs' table but no commlens schema revision: not a commlens store")
        return SchemaStatus(url=url, revision=None, head=SCHEMA_REVISION, state="empty", stamped=False, nruns=None)
    nruns = None
    if counting and has_table(conn, RunModel.__tablename__):
        nruns = conn.scalar(select(func.count()).select_from(RunModel))
    if revision == SCHEMA_REVISION:
        state: SchemaState = "current"
    else:
        state = "old" if revision in _known_revisions() else "newer"
    return SchemaStatus(url=url, revision=revision, head=SCHEMA_REVISION, state=state, stamped=stamped, nruns=nruns)


def _newer_error(status: SchemaStatus) -> StoreError:
    return StoreError(
        f"result store {status.url}: database schema {status.revision} is newer than this commlens "
        f"({status.head}); upgrade commlens"
    )


def _create_latest(conn: Connection) -> None:
    from alembic.runtime.migration import MigrationContext

    Base.metadata.create_all(conn)
    conn.execute(insert(SchemaVersionModel).values(version=LEGACY_SCHEMA_VERSION))
    MigrationContext.configure(conn).stamp(_script(), "head")


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection whose reads all see one snapshot, so a schema being created meanwhile is seen
    whole or not at all (SQLite transactions are like that anyway; PostgreSQL's default is not)."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        yield conn


@contextmanager
def _exclusive(engine: Engine, *, foreign_keys: bool = True) -> Iterator[Connection]:
    """A connection in a transaction that no other commlens process can be in at once.

    ``foreign_keys=False`` turns SQLite's foreign key enforcement off for the transaction
    (it can only change outside one): copying a table in batch mode drops the original,
    which would otherwise delete the rows that reference it.
    """
    sqlite = is_sqlite(engine)
    with write_engine(engine).connect() as conn:
        # The driver's own connection: a PRAGMA through SQLAlchemy would begin the transaction early.
        raw = conn.connection.driver_connection if sqlite and not foreign_keys else None
        if raw is not None:
            raw.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.begin():
                if engine.dialect.name == "postgresql":
                    conn.execute(select(func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
                yield conn
        finally:
            if raw is not None:
                raw.execute("PRAGMA foreign_keys = ON")


def _alembic_config(conn: Connection | None = None) -> Config:
    """Alembic's configuration, built here: commlens ships no alembic.ini."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", _MIGRATIONS)
    if conn is not None:
        config.attributes["connection"] = conn  # read by migrations/env.py
    return config


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config())


@lru_cache(maxsize=1)
def _known_revisions() -> frozenset[str]:
    return frozenset(rev.revision for rev in _script().walk_revisions())
