"""Before a long measurement: would saving a run to the store work? Checked up front, changing nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from commlens.store.db import StoreError, db_url, default_db_url, sqlite_file_missing, write_engine
from commlens.store.schema import open_engine, read_status

__all__ = ["MIN_FREE_BYTES", "preflight"]

# Below this much free space next to a SQLite store, a run's save is likely to fail (disk full).
MIN_FREE_BYTES = 1 << 20
_PROBE_TABLE = "commlens_preflight_probe"


def preflight(url: str | None = None) -> None:
    """Raise StoreError unless a run could be saved to the store at ``url`` (default: ``default_db_url()``).

    1. The URL must parse and name SQLite or PostgreSQL.
    2. SQLite, no file yet: the nearest existing directory must take a new file (one is made
       and removed) and have at least ``MIN_FREE_BYTES`` free; nothing else is created.
    3. Otherwise, in one write transaction that is rolled back (SQLite: ``BEGIN IMMEDIATE``, so
       the write lock is taken; waits for it as a save would): the schema must be this
       commlens' or empty, and a probe table is created and written to.
    4. SQLite: at least ``MIN_FREE_BYTES`` free next to the file.

    Errors read as a save's would (read-only, locked, corrupted, unreachable: see ``DatabaseFault``).
    """
    url = default_db_url() if url is None else db_url(url)
    if sqlite_file_missing(url):
        _check_new_file(Path(make_url(url).database or "").expanduser())
        return
    with open_engine(url, doing="write to") as engine:
        with write_engine(engine).connect() as conn:
            transaction = conn.begin()
            try:
                status = read_status(conn)
                if status.state == "old":
                    raise StoreError(
                        f"result store {status.url} has schema {status.revision}, this commlens "
                        f"needs {status.head}: run `commlens db upgrade` (with the same --db) first"
                    )
                if status.state == "newer":
                    raise StoreError(
                        f"result store {status.url}: database schema {status.revision} is newer "
                        f"than this commlens ({status.head}); upgrade commlens"
                    )
                conn.execute(text(f"CREATE TABLE {_PROBE_TABLE} (x INTEGER)"))
                conn.execute(text(f"INSERT INTO {_PROBE_TABLE} (x) VALUES (1)"))
            finally:
                transaction.rollback()
        if engine.dialect.name == "sqlite":
            _check_free_space(Path(make_url(url).database or "").expanduser().parent)


def _check_new_file(database: Path) -> None:
    """A SQLite file could be created at ``database``: its nearest existing directory takes a file."""
    directory = database.parent
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    if not directory.is_dir():
        raise StoreError(f"cannot create result store {database}: {directory} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".commlens-preflight-")
    except OSError as e:
        raise StoreError(f"cannot create result store {database}: {directory}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(probe)
    _check_free_space(directory)


def _check_free_space(directory: Path) -> None:
    free_bytes = shutil.disk_usage(directory).free
    if free_bytes < MIN_FREE_BYTES:
        raise StoreError(
            f"result store in {directory}: the disk is full ({free_bytes} bytes free, "
            f"a save needs at least {MIN_FREE_BYTES})"
        )
