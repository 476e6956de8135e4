"""Where the result store lives, and engines that several processes can write through at once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

__all__ = [
    "PG_CONNECT_TIMEOUT_S",
    "SQLITE_BUSY_TIMEOUT_MS",
    "StoreError",
    "db_url",
    "default_db_url",
    "driver_reason",
    "is_sqlite",
    "make_engine",
    "shown_url",
    "sqlite_file_missing",
    "write_engine",
]

SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 10  # unless the URL says otherwise (?connect_timeout=...)
# Execution option read by the SQLite "begin" hook: "IMMEDIATE" takes the write lock up front.
_BEGIN_MODE = "commlens_sqlite_begin"


class StoreError(Exception):
    """A result store operation that cannot be done: bad location, unknown or ambiguous run, duplicate."""


# URL schemes that name PostgreSQL without a driver; commlens talks to it through psycopg 3.
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def db_url(location: str) -> str:
    """A SQLAlchemy URL; a plain file path becomes ``sqlite:///ABS_PATH``.

    ``postgresql://`` and ``postgres://`` (libpq's spelling) become ``postgresql+psycopg://``,
    the driver commlens installs.
    """
    for scheme in _POSTGRES_SCHEMES:
        if location.startswith(scheme):
            return "postgresql+psycopg://" + location[len(scheme):]
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
    """An engine for ``url``; on SQLite: parent directory created, WAL, 30 s busy timeout, foreign keys on.

    On PostgreSQL: a 10 s connect timeout unless the URL sets one.
    """
    try:
        parsed = make_url(url)
        is_sqlite = parsed.get_backend_name() == "sqlite"
        if is_sqlite:
            database = parsed.database or ""
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {}
        if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
            kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
        engine = create_engine(url, **kwargs)
    except (ArgumentError, NoSuchModuleError) as e:
        raise StoreError(f"bad database URL {url!r}: {e}") from None
    except OSError as e:
        raise StoreError(f"cannot create the directory for {url!r}: {e}") from None
    if is_sqlite:
        _configure_sqlite(engine)
    return engine


def driver_reason(e: SQLAlchemyError) -> str:
    """The database driver's own message, first line: what went wrong, without SQLAlchemy's wrapping."""
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def sqlite_file_missing(url: str) -> bool:
    """Whether ``url`` names a SQLite file that does not exist (yet)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return False
    return not Path(database).expanduser().exists()


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def shown_url(engine: Engine) -> str:
    """The engine's URL with any password hidden, for messages."""
    return engine.url.render_as_string(hide_password=True)


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
