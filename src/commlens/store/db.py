"""Where the result store lives, and engines that several processes can write through at once."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:  # SQLAlchemy itself on first use: naming the store or its errors costs no import
    from sqlalchemy import Engine
    from sqlalchemy.engine import URL, ExceptionContext

from commlens.errors import CommlensError
from commlens.files import user_data_dir

__all__ = [
    "PG_CONNECT_TIMEOUT_S",
    "SQLITE_BUSY_TIMEOUT_MS",
    "DatabaseFault",
    "NoStoreError",
    "StoreError",
    "check_sqlite_integrity",
    "db_url",
    "default_db_url",
    "driver_reason",
    "is_sqlite",
    "make_engine",
    "map_driver_error",
    "parse_url",
    "shown_url",
    "sqlite_file_missing",
    "write_engine",
]

SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 10  # unless the URL says otherwise (?connect_timeout=...)
# Execution option read by the SQLite "begin" hook: "IMMEDIATE" takes the write lock up front.
_BEGIN_MODE = "commlens_sqlite_begin"


class StoreError(CommlensError):
    """A result store operation that cannot be done: bad location, unknown or ambiguous run, duplicate."""


class NoStoreError(StoreError):
    """A read found no result store: the SQLite file is missing, or the database has no commlens tables."""


class DatabaseFault(StoreError):
    """The database refused an operation (read-only, disk full, locked, corrupted, overflow, unreachable).

    Every driver error of an engine made by ``make_engine`` becomes one of these, in one place
    (``map_driver_error``); ``problem`` says what went wrong in words, with the driver's reason.
    """

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(f"result store {url}: {problem}")
        self.url = url
        self.problem = problem


# The Alembic revision the models of ``commlens.store.models`` describe: the head of migrations/versions/. Here
# (not in models.py) so that a read without SQLAlchemy (``commlens.store.plain``) can check a store's revision.
SCHEMA_REVISION = "0007"

# URL schemes that name PostgreSQL without a driver; commlens talks to it through psycopg 3.
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_BACKENDS = ("sqlite", "postgresql")


def db_url(location: str) -> str:
    """A SQLAlchemy URL; a plain file path becomes ``sqlite:///ABS_PATH``.

    ``postgresql://`` and ``postgres://`` (libpq's spelling) become ``postgresql+psycopg://``,
    the driver commlens installs.
    """
    for scheme in _POSTGRES_SCHEMES:
        if location.startswith(scheme):
            return "postgresql+psycopg://" + location[len(scheme) :]
    if "://" in location:
        return location
    return "sqlite:///" + str(Path(location).expanduser().resolve())


def default_db_url() -> str:
    """``$COMMLENS_DB`` (URL or path) if set, else ``$XDG_DATA_HOME/commlens/results.db``."""
    location = os.environ.get("COMMLENS_DB")
    if location:
        return db_url(location)
    return db_url(str(user_data_dir() / "results.db"))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; on SQLite: parent directory created, WAL, 30 s busy timeout, foreign keys on.

    On PostgreSQL: a 10 s connect timeout unless the URL sets one.
    """
    from sqlalchemy import create_engine, event
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    parsed = parse_url(url)
    backend = parsed.get_backend_name()
    if backend not in _BACKENDS:
        raise StoreError(
            f"bad database URL {parsed.render_as_string(hide_password=True)!r}: "
            f"unsupported database {backend!r} (commlens stores runs in SQLite or PostgreSQL)"
        )
    try:
        is_sqlite = backend == "sqlite"
        if is_sqlite:
            database = parsed.database or ""
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, object] = {}  # create_engine options
        frozen = is_sqlite and _on_read_only_mount(Path(database).expanduser())
        if frozen:
            # A WAL store on a read-only mount opens only as immutable (no -shm file can be made);
            # nobody can write it there, so that is safe, and every write fails as read-only.
            uri = "file:" + quote(str(Path(database).expanduser())) + "?immutable=1"
            kwargs["creator"] = lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)
        if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
            kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
        engine = create_engine(url, **kwargs)
    except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as e:
        raise StoreError(f"bad database URL {url!r}: {e}") from None
    except OSError as e:
        raise StoreError(f"cannot create the directory for {url!r}: {e}") from None
    if is_sqlite:
        _configure_sqlite(engine, wal=not frozen)
    event.listen(engine, "handle_error", _raise_mapped)
    return engine


# (words, SQLite message fragments, PostgreSQL SQLSTATEs or their class prefixes)
_PROBLEMS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "the database is read-only (check the file, its directory and the mount, or the role's rights)",
        ("readonly database", "read-only"),
        ("25006", "42501"),
    ),
    ("the disk is full", ("disk is full", "disk full"), ("53100",)),
    (
        "the store is locked by another process and the wait timed out",
        ("database is locked", "database table is locked"),
        ("55P03", "57014"),
    ),
    ("the database is corrupted (see `commlens db status`)", ("malformed", "not a database"), ("XX001", "XX002")),
    ("the disk failed a read or write (full, or failing)", ("disk i/o error",), ("58030",)),
    ("a number is too large for the store's 64-bit integers", ("too large", "out of range"), ("22003",)),
    ("cannot reach or open the database", ("unable to open",), ("08",)),
    (
        "text that is not valid UTF-8 (a tag, note or name read from undecodable bytes)",
        ("codec can't encode", "surrogates not allowed"),
        ("22021",),
    ),
)


def map_driver_error(url: str, error: BaseException) -> DatabaseFault:
    """The StoreError that says what the database driver's ``error`` means for a user."""
    orig = getattr(error, "orig", None) or error
    reason = _first_line(orig)
    sqlstate = getattr(orig, "sqlstate", None) or ""
    lowered = reason.lower()
    if isinstance(orig, OSError) and orig.errno == errno.ENOSPC:
        lowered += " disk full"
    for words, fragments, states in _PROBLEMS:
        if any(f in lowered for f in fragments) or any(sqlstate.startswith(st) for st in states):
            return DatabaseFault(url, f"{words}: {reason}")
    return DatabaseFault(url, reason)


def _raise_mapped(context: ExceptionContext) -> None:
    """``handle_error`` hook: driver errors become DatabaseFault; a duplicate key stays IntegrityError
    (the store reports which run), and Ctrl-C stays what it is."""
    from sqlalchemy.exc import IntegrityError

    if isinstance(context.sqlalchemy_exception, IntegrityError) or context.is_disconnect and context.is_pre_ping:
        return
    if not isinstance(context.original_exception, Exception):
        return
    engine = context.engine
    url = engine.url.render_as_string(hide_password=True) if engine is not None else "?"
    fault = map_driver_error(url, context.original_exception)
    if engine is not None and engine.dialect.name == "sqlite":
        fault = _sqlite_cause(fault, Path(engine.url.database or ""))
    raise fault from None


def _sqlite_cause(fault: DatabaseFault, database: Path) -> DatabaseFault:
    """SQLite's vaguer errors made precise from the file system: "unable to open database file" when
    a WAL store's directory is read-only, "disk I/O error" when the disk is full (on tmpfs, say)."""
    if not database.exists():
        return fault
    if "unable to open" in fault.problem and not os.access(database.parent, os.W_OK):
        return DatabaseFault(fault.url, f"{_PROBLEMS[0][0]}: {database.parent} is not writable")
    if "disk failed" in fault.problem and shutil.disk_usage(database.parent).free < _FULL_BYTES:
        return DatabaseFault(fault.url, f"the disk is full: {fault.problem.split(': ', 1)[-1]}")
    return fault


_FULL_BYTES = 64 << 10  # less free than this next to a store whose write failed: the disk is full


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


def parse_url(url: str) -> URL:
    """``url`` parsed; StoreError naming it (password hidden where it parses) when it is malformed."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as e:
        shown = re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)
        raise StoreError(f"bad database URL {shown!r}: {e}") from None
    if parsed.get_backend_name() == "sqlite":
        _busy_timeout_ms(parsed)
    return parsed


def _busy_timeout_ms(parsed: URL) -> int:
    """How long a SQLite writer waits for another's lock: 30 s, or the URL's ?timeout=SECONDS (pysqlite's)."""
    if "timeout" not in parsed.query:
        return SQLITE_BUSY_TIMEOUT_MS
    problem = f"bad database URL {parsed.render_as_string(hide_password=True)!r}: timeout must be a number of seconds"
    try:
        timeout_ms = round(float(str(parsed.query["timeout"])) * 1000)
    except (ValueError, OverflowError):
        raise StoreError(problem) from None
    if not 0 <= timeout_ms < 1 << 31:
        raise StoreError(f"{problem} >= 0")
    return timeout_ms


def driver_reason(e: BaseException) -> str:
    """What went wrong, first line: a DatabaseFault's problem, else the driver's own message."""
    if isinstance(e, DatabaseFault):
        return e.problem
    return _first_line(getattr(e, "orig", None) or e)


def sqlite_file_missing(url: str) -> bool:
    """Whether ``url`` names a SQLite file that does not exist (yet)."""
    plain = url.removeprefix("sqlite:///")
    if plain != url and plain and not any(c in plain for c in "?%") and not plain.startswith(("file:", ":memory:")):
        return not Path(plain).expanduser().exists()  # a plain path: no need to load SQLAlchemy's URL parser
    parsed = parse_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return False
    return not Path(database).expanduser().exists()


def check_sqlite_integrity(engine: Engine) -> None:
    """Raise DatabaseFault naming the file when SQLite's ``PRAGMA quick_check`` finds the store damaged.

    Run before a write and after a failed one: SQLite writes into a file with corrupt pages without a word
    wherever its b-tree walk does not touch them, so a store damaged mid-file would take new runs and fail
    every check afterwards. ``quick_check`` reads each page once (it skips the index-content comparison of
    ``integrity_check``): 0.95 s for a 191 MiB file on a busy 2-core machine. Nothing is checked on PostgreSQL, which checks its own pages.
    """
    if not is_sqlite(engine):
        return
    url = shown_url(engine)
    try:
        with engine.connect() as conn:
            found = [str(row[0]) for row in conn.exec_driver_sql("PRAGMA quick_check(5)")]
    except DatabaseFault as e:
        if "corrupted" in e.problem:
            raise
        return  # locked, unreadable: the write itself will say so
    if found != ["ok"]:
        first = " ".join(" ".join(found).split())[:200] if found else "no answer"
        raise DatabaseFault(
            url,
            f"the database is corrupted (PRAGMA quick_check: {first}); nothing was written: restore {engine.url.database} "
            f"from a backup, or move it aside to start a new store",
        )


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def shown_url(engine: Engine) -> str:
    """The engine's URL with any password hidden, for messages."""
    return engine.url.render_as_string(hide_password=True)


def write_engine(engine: Engine) -> Engine:
    """The same engine, but SQLite transactions take the write lock at BEGIN (no lock-upgrade failures)."""
    return engine.execution_options(**{_BEGIN_MODE: "IMMEDIATE"})


def _on_read_only_mount(database: Path) -> bool:
    """Whether ``database`` is an existing file on a file system mounted read-only."""
    try:
        return database.is_file() and bool(os.statvfs(database.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _set_wal(cursor: sqlite3.Cursor, busy_timeout_ms: int) -> None:
    """Put the file in WAL mode, waiting like any other lock for up to the busy timeout.

    Switching a file to WAL takes its exclusive lock, and SQLite answers "database is locked" at once,
    without calling its busy handler, while another connection holds the file's write lock in rollback
    mode: a fresh store that another process is creating (CI saw one of four writers fail so, in 8 ms),
    or a file an older tool writes. Retried here, backing off, until the busy timeout.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause_s = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() + pause_s > deadline:
                raise
        time.sleep(pause_s)
        pause_s = min(pause_s * 2, 0.1)


def _configure_sqlite(engine: Engine, *, wal: bool = True) -> None:
    from sqlalchemy import event

    busy_timeout_ms = _busy_timeout_ms(engine.url)

    # pysqlite's own transaction handling delays BEGIN and commits before DDL; take it over
    # (the recipe from SQLAlchemy's SQLite dialect documentation).
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            if wal:
                _set_wal(cursor, busy_timeout_ms)
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_BEGIN_MODE)
        conn.exec_driver_sql(f"BEGIN {mode}" if mode else "BEGIN")
