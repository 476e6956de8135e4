"""Store faults a user meets: read-only, full, locked, corrupted stores, numbers too large, bad URLs.

Each is ``error: ...`` with exit 2 (no traceback), and the data are intact on a second read.
Real parts only: read-only and full disks are real tmpfs mounts (root) or permissions; the lock
is held by another process; corruption is written into the real file or column.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from store_backends import make_measurement, make_run, pg_server, pg_url, store_url  # noqa: F401
from typer.testing import CliRunner, Result

from commlens.cli.app import _register, app
from commlens.store import DatabaseFault, NoStoreError, Store, StoreError, db_url, preflight

_register()

RUN_IDS = ("aaaa0001", "bbbb0002", "cccc0003")


def _cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def _fill(url: str) -> str:
    with Store.open(url) as store:
        store.save_runs(
            [
                make_run(run_id, started_at=f"2024-05-0{i + 1}T02:00:00Z", tag="nightly")
                for i, run_id in enumerate(RUN_IDS)
            ]
        )
    return url


def _stored(url: str) -> list[str]:
    with Store.open(url, create=False) as store:
        return sorted(s.run_id for s in store.list_runs())


def _is_root() -> bool:
    return os.geteuid() == 0


@pytest.fixture
def mount_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory of its own tmpfs (512 KiB) when root, so it can be made read-only or filled."""
    path = tmp_path / "mnt"
    path.mkdir()
    if not _is_root():
        yield path
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def _set_read_only(path: Path, read_only: bool) -> None:
    if _is_root():
        subprocess.run(["mount", "-o", f"remount,{'ro' if read_only else 'rw'}", str(path)], check=True)
    else:
        for p in (path, *path.iterdir()):
            p.chmod((0o555 if p.is_dir() else 0o444) if read_only else (0o755 if p.is_dir() else 0o644))


def _error(result: Result) -> str:
    """The one-line ``error: ...`` a failed command printed (exit 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return result.stderr


# -- read-only --------------------------------------------------------------------------------


def test_read_only_sqlite_store_refuses_writes_and_keeps_the_runs(mount_dir: Path) -> None:
    url = _fill(db_url(str(mount_dir / "results.db")))
    _set_read_only(mount_dir, True)
    try:
        for args in (("runs", "tag", "aaaa0001", "new"), ("runs", "delete", "--yes", "bbbb0002")):
            assert "the database is read-only" in _error(_cli(*args, "--db", url)), args
        with pytest.raises(StoreError, match="read-only"):
            preflight(url)
        listed = _cli("runs", "--db", url)  # reading still works (immutable on a read-only mount)
        assert (listed.exit_code, listed.stdout.count("nightly")) == (0, 3), listed.output
        assert "integrity ok" in _cli("db", "status", "--db", url).stdout
        with pytest.raises(StoreError, match="cannot create result store .*other.db: .*Read-only|not writable"):
            preflight(str(mount_dir / "other.db"))
    finally:
        _set_read_only(mount_dir, False)
    assert _stored(url) == sorted(RUN_IDS)
    with Store.open(url) as store:
        assert store.get_run("aaaa0001").tag == "nightly"


def test_read_only_postgresql_transaction_refuses_writes(pg_url: str) -> None:
    _fill(pg_url)
    read_only = pg_url + ("&" if "?" in pg_url else "?") + "options=-c%20default_transaction_read_only%3Don"
    assert "the database is read-only" in _error(_cli("runs", "tag", "aaaa0001", "new", "--db", read_only))
    with pytest.raises(DatabaseFault, match="read-only transaction"):
        with Store.open(read_only) as store:
            store.save_run(make_run("dddd0004"))
    with pytest.raises(StoreError, match="read-only"):
        preflight(read_only)
    assert _stored(pg_url) == sorted(RUN_IDS)
    assert _cli("show", "aaaa0001", "--db", pg_url).stdout.count("tag nightly") == 1


# -- disk full --------------------------------------------------------------------------------


def _big_run(run_id: str) -> object:
    run = make_run(run_id)
    samples = tuple(1e-5 + i * 1e-9 for i in range(2000))
    return dataclasses.replace(
        run, measurements=tuple(make_measurement(size_bytes=1024 << i, samples_s=samples) for i in range(20))
    )


@pytest.mark.skipif(not _is_root(), reason="a full disk needs a tmpfs mount (root)")
def test_full_disk_is_a_clear_error_and_keeps_the_store(mount_dir: Path) -> None:
    url = _fill(db_url(str(mount_dir / "results.db")))
    filler = mount_dir / "filler"
    with open(filler, "wb", buffering=0) as fp:  # fill the rest of the tmpfs
        try:
            while True:
                fp.write(b"\0" * 4096)
        except OSError:
            pass
    with pytest.raises(StoreError, match="the disk is full"):
        preflight(url)
    with pytest.raises(StoreError, match="the disk is full"):  # opening or saving, whichever meets it
        with Store.open(url) as store:
            store.save_run(_big_run("dddd0004"))  # type: ignore[arg-type]
    filler.unlink()
    assert _stored(url) == sorted(RUN_IDS)
    assert "integrity ok" in _cli("db", "status", "--db", url).stdout


# -- lock timeout -----------------------------------------------------------------------------


_HOLD_SQLITE_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
"""


def test_locked_sqlite_store_times_out_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    _fill(db_url(str(path)))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SQLITE_LOCK, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        url = f"sqlite:///{path}?timeout=0.2"
        assert "locked by another process" in _error(_cli("runs", "tag", "aaaa0001", "new", "--db", url))
        with pytest.raises(StoreError, match="locked by another process"):
            preflight(url)
    finally:
        holder.communicate("")  # stdin closed: the holder ends and its transaction rolls back
    assert _stored(str(path)) == sorted(RUN_IDS)
    assert _cli("runs", "tag", "aaaa0001", "new", "--db", str(path)).exit_code == 0


def test_locked_postgresql_table_times_out_with_a_clear_error(pg_url: str) -> None:
    _fill(pg_url)
    holder = create_engine(pg_url)
    try:
        with holder.connect() as conn, conn.begin():
            conn.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
            waiting = pg_url + ("&" if "?" in pg_url else "?") + "options=-c%20lock_timeout%3D200"
            assert "locked by another process" in _error(_cli("runs", "tag", "aaaa0001", "new", "--db", waiting))
    finally:
        holder.dispose()
    assert _stored(pg_url) == sorted(RUN_IDS)


# -- integer overflow -------------------------------------------------------------------------


def test_integers_beyond_the_columns_are_refused_and_nothing_is_written(store_url: str) -> None:
    """Records refuse such sizes themselves; this reaches past them to the store's own mapping."""
    _fill(store_url)
    huge = make_measurement()
    object.__setattr__(huge, "size_bytes", 1 << 64)
    run = dataclasses.replace(make_run("dddd0004"), measurements=(make_measurement(), huge))
    with Store.open(store_url) as store:
        with pytest.raises(DatabaseFault, match="too large for the store's 64-bit integers"):
            store.save_runs([make_run("eeee0005"), run])
    assert _stored(store_url) == sorted(RUN_IDS)  # nothing of the batch was written


def test_a_number_too_large_for_the_driver_is_mapped_in_one_place(store_url: str) -> None:
    """A value no check upstream caught (here --limit) reaches the driver: DatabaseFault, exit 2."""
    _fill(store_url)
    message = _error(_cli("runs", "--limit", str(1 << 70), "--db", store_url))
    assert "too large" in message or "out of range" in message
    assert _stored(store_url) == sorted(RUN_IDS)


# -- URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, says",
    [
        ("postgresql://bench:secret@db.example:notaport/results", "bad database URL 'postgresql+psycopg://bench:***@"),
        ("mysql://bench:secret@db.example/results", "unsupported database 'mysql'"),
        ("foo://x", "unsupported database 'foo'"),
        ("sqlite:///x.db?timeout=soon", "timeout must be a number of seconds"),
    ],
)
def test_malformed_urls_and_unsupported_dialects(url: str, says: str) -> None:
    for args in (
        ("runs",),
        ("show", "aaaa0001"),
        ("export",),
        ("db", "status"),
        ("db", "upgrade"),
        ("runs", "tag", "aaaa0001", "x"),
    ):
        message = _error(_cli(*args, "--db", url))
        assert says in message, args
        assert "secret" not in message
    with pytest.raises(StoreError, match=re.escape(says)):
        preflight(url)


# -- corruption ---------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_garbage_in_the_middle_of_a_sqlite_file_is_reported_and_not_written(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    with Store.open(str(path)) as store:
        store.save_runs([_big_run(f"{i:04d}big") for i in range(3)])  # type: ignore[list-item]
    size = path.stat().st_size
    assert size > 64 * 4096
    with open(path, "r+b") as fp:
        fp.seek(size // 2)
        fp.write(os.urandom(3 * 4096))
    before = _sha256(path)
    status = _cli("db", "status", "--db", str(path))
    assert "fails its integrity check" in _error(status)
    for args in (("runs",), ("show", "0001big"), ("export", "-o", str(tmp_path / "out.csv"))):
        result = _cli(*args, "--db", str(path))
        assert "Traceback" not in result.output
        assert result.exit_code in (0, 2), args
        if result.exit_code == 2:
            assert result.stderr.startswith("error: ") and "\n" == result.stderr[-1]
    assert _sha256(path) == before  # read commands changed nothing


def test_a_file_that_is_no_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    path.write_bytes(os.urandom(8192))
    before = _sha256(path)
    for args in (("runs",), ("show", "aaaa0001"), ("export",), ("db", "status"), ("runs", "tag", "aaaa", "x")):
        assert "the database is corrupted" in _error(_cli(*args, "--db", str(path))), args
    with pytest.raises(StoreError, match="the database is corrupted"):
        preflight(str(path))
    assert _sha256(path) == before


def _corrupt_column(url: str, run_id: str) -> None:
    """Write into one run's JSON column what commlens never writes: bad JSON (SQLite), a number (PostgreSQL)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "sqlite":
                conn.execute(text("UPDATE runs SET config = '{not json' WHERE run_id = :r"), {"r": run_id})
            else:
                conn.execute(text("UPDATE runs SET system = '5'::json WHERE run_id = :r"), {"r": run_id})
    finally:
        engine.dispose()


def test_one_corrupted_run_is_skipped_by_listings_with_a_warning(store_url: str, tmp_path: Path) -> None:
    _fill(store_url)
    _corrupt_column(store_url, "bbbb0002")
    listed = _cli("runs", "--db", store_url)
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["cccc0003", "bbbb0002", "aaaa0001"]
    out = tmp_path / "all.json"
    exported = _cli("export", "--db", store_url, "-o", str(out))
    assert exported.exit_code == 0, exported.output
    assert "warning: run 'bbbb0002' in the store cannot be read back (corrupted column?)" in exported.stderr
    assert "skipped" in exported.stderr
    assert "exported 4 measurements of 2 runs" in exported.stderr
    assert '"bbbb0002"' not in out.read_text() and '"aaaa0001"' in out.read_text()
    assert "run 'bbbb0002' in the store cannot be read back" in _error(_cli("show", "bbbb0002", "--db", store_url))
    status = _cli("db", "status", "--runs", "--db", store_url)
    assert "error: 1 stored run cannot be read back" in _error(status)
    assert "unreadable runs 1\n  run 'bbbb0002' in the store cannot be read back" in status.stdout
    assert "unreadable runs 0" in _cli("db", "status", "--runs", "--db", _fill(db_url(str(tmp_path / "ok.db")))).stdout
    with Store.open(store_url, create=False) as store:  # the others read back whole
        assert [r.run_id for r in store.get_runs(["aaaa0001", "cccc0003"])] == ["aaaa0001", "cccc0003"]
        assert [r.run_id for r in store.runs_with_tag("nightly", on_corrupt=lambda e: None)] == ["aaaa0001", "cccc0003"]


def test_a_corrupted_summary_column_is_skipped_by_the_run_listing(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    url = _fill(db_url(str(path)))
    con = sqlite3.connect(path)
    con.execute("UPDATE runs SET started_at_utc = 'yesterday' WHERE run_id = 'aaaa0001'")
    con.commit()
    con.close()
    listed = _cli("runs", "--db", url)
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["cccc0003", "bbbb0002"]
    assert listed.stderr.startswith("warning: run 'aaaa0001' in the store cannot be read back")


# -- read commands create nothing ---------------------------------------------------------------


def test_read_commands_never_create_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "results.db"
    assert _cli("runs", "--db", str(missing)).stdout == "no runs stored yet: `commlens bench` stores one\n"
    for args in (
        ("show", "aaaa0001"),
        ("export",),
        ("runs", "tag", "aaaa0001", "x"),
        ("detect", "--op", "all_reduce"),
        ("compare", "aaaa0001", "bbbb0002"),
    ):
        assert "no result store at" in _error(_cli(*args, "--db", str(missing))), args
    assert _cli("db", "status", "--db", str(missing)).exit_code == 0
    assert not missing.parent.exists()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for args in (("show", "aaaa0001"), ("export",)):
        assert "no result store at" in _error(_cli(*args, "--db", str(empty))), args
    assert _cli("runs", "--db", str(empty)).exit_code == 0
    assert _cli("db", "status", "--db", str(empty)).exit_code == 0
    con = sqlite3.connect(empty)
    assert con.execute("SELECT name FROM sqlite_master").fetchall() == []
    con.close()


def test_read_commands_create_no_tables_in_an_empty_postgresql_database(pg_url: str) -> None:
    for args in (("runs",), ("show", "aaaa0001"), ("export",), ("db", "status")):
        assert "Traceback" not in _cli(*args, "--db", pg_url).output
    with pytest.raises(NoStoreError):
        Store.open(pg_url, create=False)
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")) == 0
    finally:
        engine.dispose()


# -- preflight ----------------------------------------------------------------------------------


def test_preflight_passes_on_a_writable_store_and_changes_nothing(store_url: str, tmp_path: Path) -> None:
    preflight(store_url)  # empty database: a save would create the schema
    _fill(store_url)
    preflight(store_url)
    assert _stored(store_url) == sorted(RUN_IDS)
    new = tmp_path / "a" / "b" / "results.db"
    preflight(str(new))
    assert not (tmp_path / "a").exists()  # nothing created, not even the directory
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="file is not a directory"):
        preflight(str(tmp_path / "file" / "results.db"))


def test_preflight_refuses_a_store_with_an_older_or_newer_schema(store_url: str) -> None:
    _fill(store_url)
    engine = create_engine(store_url)
    try:
        for revision, says in (("0002", "run `commlens db upgrade`"), ("0099", "upgrade commlens")):
            with engine.begin() as conn:
                conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
            with pytest.raises(StoreError, match=says.replace("`", ".")):
                preflight(store_url)
    finally:
        engine.dispose()


def test_a_corrupted_samples_column_makes_compare_and_detect_a_clear_error(store_url: str) -> None:
    _fill(store_url)
    engine = create_engine(store_url)
    try:
        with engine.begin() as conn:
            bad = "'{not json'" if engine.dialect.name == "sqlite" else "'5'::json"
            conn.execute(
                text(
                    f"UPDATE samples SET samples_s = {bad} WHERE measurement_id = "
                    "(SELECT min(measurement_id) FROM samples)"
                )
            )
    finally:
        engine.dispose()
    # compare reads the samples; detect reads only mean times (issue 34), which are intact
    assert "cannot be read back (corrupted column?)" in _error(_cli("compare", *RUN_IDS[:2], "--db", store_url))
    assert _cli("detect", "--db", store_url).exit_code == 0
    if engine.dialect.name == "sqlite":  # a mean time that is no number (PostgreSQL's float column holds none)
        engine = create_engine(store_url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text("UPDATE measurements SET mean_s = 'fast' WHERE id = (SELECT min(id) FROM measurements)")
                )
        finally:
            engine.dispose()
        error = _error(_cli("detect", "--db", store_url))
        assert "a stored measurement cannot be read back (corrupted column?)" in error


def test_db_status_says_what_is_checked_on_postgresql(pg_url: str) -> None:
    _fill(pg_url)
    status = _cli("db", "status", "--db", pg_url)
    assert status.exit_code == 0
    assert (
        "integrity not checked by commlens (PostgreSQL verifies page checksums as it reads them: data_checksums "
    ) in status.stdout


def test_text_that_is_not_utf8_is_a_clear_error_and_writes_nothing(store_url: str) -> None:
    """A tag from undecodable bytes (a surrogate escape, as os.fsdecode makes) cannot be stored."""
    _fill(store_url)
    with Store.open(store_url) as store, pytest.raises(DatabaseFault, match="text that is not valid UTF-8"):
        store.save_run(make_run("dddd0004", tag="bad\udcfftag"))
    assert _stored(store_url) == sorted(RUN_IDS)
