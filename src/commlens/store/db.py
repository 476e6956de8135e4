"""Where the result store lives, and engines that several processes can write through at once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

__all__ = ["StoreError", "db_url", "default_db_url", "make_engine", "write_engine", "SQLITE_BUSY_TIMEOUT_MS"]

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Execution option read by the SQLite "begin" hook: "IMMEDIATE" takes the write lock up front.
_BEGIN_MODE = "commlens_sqlite_begin"


class StoreError(Exception):
    """A result store operation that cannot be done: bad location, unknown or ambiguous run, duplicate."""


def db_url(location: str) -> str:
    """A SQLAlchemy URL as is; a plain file path becomes ``sqlite:///ABS_PATH``."""
    if "://" in location:
        return location
    return "sqlite:///" + str(Path(location).expanduser().resolve())


def default_db_url() -> str:
    """``$COMMLENS_DB`` (URL or path) if set, else ``$XDG_DATA_HOME/commlens/results.db``."""
    location = os.environ.get("COMMLENS_DB")
    if location:
        return db_url(location)
    data_home = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec says to ignore a relative XDG_DATA_HOME.
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return db_url(str(base / "commlens" / "results.db"))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; on SQLite: parent directory created, WAL, 30 s busy timeout, foreign keys on."""
    try:
        parsed = make_url(url)
        is_sqlite = parsed.get_backend_name() == "sqlite"
        if is_sqlite:
            database = parsed.database or ""
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url)
    except (ArgumentError, NoSuchModuleError) as e:
        raise StoreError(f"bad database URL {url!r}: {e}") from None
    except OSError as e:
        raise StoreError(f"cannot create the directory for {url!r}: {e}") from None
    if is_sqlite:
        _configure_sqlite(engine)
    return engine


def write_engine(engine: Engine) -> Engine:
    """The same engine, but SQLite transactions take the write lock at BEGIN (no lock-upgrade failures)."""
    return engine.execution_options(**{_BEGIN_MODE: "IMMEDIATE"})


def _configure_sqlite(engine: Engine) -> None:
    # pysqlite's own transaction handling delays BEGIN and commits before DDL; take it over
    # (the recipe from SQLAlchemy's SQLite dialect documentation).
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_BEGIN_MODE)
        conn.exec_driver_sql(f"BEGIN {mode}" if mode else "BEGIN")
