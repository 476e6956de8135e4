"""The result store on SQLite and PostgreSQL: lossless round trip, lookup, listing, deletion, concurrent writers."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from store_backends import make_measurement, make_run, make_system, pg_server, pg_url, store_url  # noqa: F401

from commlens.results import IngestedSettings, Measurement, Run, SystemInfo, TimeStats, run_to_dict
from commlens.store import RunFilter, Store, StoreError, db_url, default_db_url, make_engine
from commlens.store.models import MeasurementModel, SampleModel

WORLD = 4
_system = make_system
_measurement = make_measurement
_run = make_run


def _count(store: Store, table: type) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(table))


def test_round_trip_is_identical_and_samples_bit_exact(store_url: str) -> None:
    rng = random.Random(7)
    awkward = (0.1 + 0.2, 1 / 3, 5e-324, 12345.678901234567, 0.0, 2.2250738585072014e-308) + tuple(
        rng.random() * 1e-3 for _ in range(200)
    )
    run = Run(
        run_id="0123456789abcdef",
        started_at="2024-05-01T12:00:00.123456+02:00",
        finished_at="2024-05-01T12:05:00+02:00",
        status="incomplete",
        tag="nightly",
        revision="deadbeef",
        command_line="commlens bench -b 8 -e 128M -f 2",
        source="nccl-tests",
        config=IngestedSettings({"warmup_iters": 5, "iters": 20, "sizes": [8, 16], "check": True}),
        notes=("rank 3 slow", "stopped early"),
        system=_system("nccl"),
        measurements=(
            _measurement("all_reduce", 8 << 30, awkward, nwrong=0),
            _measurement("all_reduce", 8 << 30, awkward[:3], in_place=True, nwrong=None),
            _measurement(
                "broadcast",
                4096,
                (3e-5,),
                root=2,
                algo="tree",
                dtype="bfloat16",
                count=2048,
                rank_samples_s=tuple(tuple(rng.random() for _ in range(1)) for _ in range(WORLD)),
            ),
            _measurement("barrier", 0, (1e-6, 2e-6), count=0),
        ),
    )
    with Store.open(store_url) as store:
        assert store.save_run(run) == run.run_id
    with Store.open(store_url) as store:  # a fresh connection: nothing cached
        loaded = store.get_run(run.run_id)
    assert loaded == run
    assert run_to_dict(loaded) == run_to_dict(run)
    for got, want in zip(loaded.measurements, run.measurements):
        assert struct.pack(f"{len(want.samples_s)}d", *got.samples_s) == struct.pack(
            f"{len(want.samples_s)}d", *want.samples_s
        )
        assert got.rank_samples_s == want.rank_samples_s


def test_prefix_lookup_and_clear_errors(store_url: str) -> None:
    with Store.open(store_url) as store:
        for run_id in ("abcd1234", "abcd5678", "abce0000", "xyz99999", "r1", "a_c%1111"):
            store.save_run(_run(run_id))
        assert store.get_run("abce").run_id == "abce0000"
        assert store.get_run("abcd12").run_id == "abcd1234"
        assert store.get_run("r1").run_id == "r1"  # exact id, however short
        with pytest.raises(StoreError, match=r"^'abcd' matches 2 runs: abcd1234, abcd5678$"):
            store.get_run("abcd")
        with pytest.raises(StoreError, match=r"^no run matches 'zzzz'$"):
            store.get_run("zzzz")
        with pytest.raises(StoreError, match=r"no run matches 'xyz' \(a run_id prefix needs at least 4"):
            store.get_run("xyz")
        with pytest.raises(StoreError, match="no run matches 'ABCE'"):  # ids are case-sensitive
            store.get_run("ABCE")
        with pytest.raises(StoreError, match="no run matches 'abc%'"):  # LIKE wildcards are literal
            store.get_run("abc%")
        assert store.get_run("a_c%").run_id == "a_c%1111"


def test_list_runs_newest_first_and_filters(store_url: str) -> None:
    runs = [
        _run("run-old1", tag="nightly", started_at="2024-01-01T00:00:00Z", ops=("all_reduce",)),
        # Same instant as 13:00Z, written in another zone: ordering must use the real time.
        _run("run-mid2", tag="ci", started_at="2024-03-01T15:00:00+02:00", ops=("all_gather", "all_reduce")),
        _run("run-new3", tag="nightly", started_at="2024-03-01T14:00:00Z", ops=("broadcast",)),
    ]
    with Store.open(store_url) as store:
        for run in runs:
            store.save_run(run)
        assert [s.run_id for s in store.list_runs()] == ["run-new3", "run-mid2", "run-old1"]
        assert [s.run_id for s in store.list_runs(RunFilter(tag="nightly"))] == ["run-new3", "run-old1"]
        assert [s.run_id for s in store.list_runs(RunFilter(op="all_reduce"))] == ["run-mid2", "run-old1"]
        assert [s.run_id for s in store.list_runs(RunFilter(op="all_reduce", tag="ci"))] == ["run-mid2"]
        assert store.list_runs(RunFilter(op="all_to_all")) == []
        assert [s.run_id for s in store.list_runs(RunFilter(since="2024-03-01T13:00:00Z"))] == ["run-new3", "run-mid2"]
        assert [s.run_id for s in store.list_runs(limit=1)] == ["run-new3"]

        mid = store.list_runs(RunFilter(tag="ci"))[0]
        assert mid.ops == ("all_gather", "all_reduce")
        assert mid.nmeasurements == 4
        assert mid.started_at == "2024-03-01T15:00:00+02:00"
        assert mid.avg_busbw_bytes_per_s == runs[1].avg_busbw_bytes_per_s() > 0
        assert mid.fingerprint == runs[1].system.fingerprint()
        assert (mid.status, mid.source, mid.world_size, mid.backend) == ("complete", "commlens", WORLD, "gloo")


def test_delete_cascades_to_measurements_and_samples(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.save_run(_run("keep0000", ops=("all_reduce", "broadcast")))
        store.save_run(_run("gone0000", ops=("all_reduce", "all_gather", "broadcast")))
        assert (_count(store, MeasurementModel), _count(store, SampleModel)) == (10, 10)

        assert store.delete_run("gone") == "gone0000"

        assert (_count(store, MeasurementModel), _count(store, SampleModel)) == (4, 4)
        with pytest.raises(StoreError, match="no run matches 'gone0000'"):
            store.get_run("gone0000")
        with pytest.raises(StoreError, match="no run matches 'gone'"):
            store.delete_run("gone")
        assert store.get_run("keep0000") == _run("keep0000", ops=("all_reduce", "broadcast"))


def test_duplicate_run_id_is_refused_and_nothing_is_written(store_url: str) -> None:
    original = _run("dup00000", tag="first")
    with Store.open(store_url) as store:
        store.save_run(original)
        counts = (_count(store, MeasurementModel), _count(store, SampleModel))
        with pytest.raises(StoreError, match="run 'dup00000' is already in the store"):
            store.save_run(_run("dup00000", tag="second", ops=("all_gather", "broadcast")))
        assert (_count(store, MeasurementModel), _count(store, SampleModel)) == counts
        assert store.get_run("dup00000") == original


def test_bad_started_at_is_refused_before_writing(store_url: str) -> None:
    with Store.open(store_url) as store:
        with pytest.raises(StoreError, match="started_at 'yesterday' is not an ISO 8601 time"):
            store.save_run(_run("badtime0", started_at="yesterday"))
        assert store.list_runs() == []


def test_default_db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("COMMLENS_DB", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert default_db_url() == f"sqlite:///{tmp_path}/home/.local/share/commlens/results.db"

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_url() == f"sqlite:///{tmp_path}/xdg/commlens/results.db"

    monkeypatch.setenv("COMMLENS_DB", "sub/mine.db")  # a relative path becomes absolute
    assert default_db_url() == f"sqlite:///{tmp_path}/sub/mine.db"
    # libpq's spellings get the driver commlens ships (psycopg 3); explicit drivers stay.
    monkeypatch.setenv("COMMLENS_DB", "postgresql://bench@db.example/commlens")
    assert default_db_url() == "postgresql+psycopg://bench@db.example/commlens"
    assert db_url("postgres://u:pw@h:5433/db?sslmode=require") == "postgresql+psycopg://u:pw@h:5433/db?sslmode=require"
    assert db_url("postgresql+psycopg://h/db") == "postgresql+psycopg://h/db"
    assert db_url("sqlite:///:memory:") == "sqlite:///:memory:"


def test_open_without_url_uses_default_and_creates_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMMLENS_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with Store.open() as store:
        store.save_run(_run("default0"))
        with store.engine.connect() as conn:
            assert conn.scalar(text("SELECT version_num FROM alembic_version")) == "0007"
            assert conn.scalar(text("SELECT version FROM schema_version")) == 2  # pre-Alembic commlens refuses
    assert (tmp_path / "xdg" / "commlens" / "results.db").is_file()


def test_sqlite_engine_is_set_up_for_concurrent_writers(tmp_path: Path) -> None:
    engine = make_engine(db_url(str(tmp_path / "deep" / "dir" / "r.db")))
    try:
        with engine.connect() as conn:
            assert conn.scalar(text("PRAGMA journal_mode")) == "wal"
            assert conn.scalar(text("PRAGMA busy_timeout")) == 30_000
            assert conn.scalar(text("PRAGMA foreign_keys")) == 1
    finally:
        engine.dispose()


def test_a_store_another_process_is_writing_in_rollback_mode_is_waited_for(tmp_path: Path) -> None:
    """Switching a file to WAL while another connection holds its write lock (a fresh store being created,
    or a file an older tool writes in rollback mode) must wait for the lock like any other write; SQLite
    answers "database is locked" at once there, without its busy handler. Found by CI: one of four
    writers opening a fresh store at once failed in 8 ms."""
    path = tmp_path / "r.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t(x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    started = time.monotonic()
    with Store.open(str(path)) as store:
        waited = time.monotonic() - started
        with store.engine.connect() as conn:
            assert conn.scalar(text("PRAGMA journal_mode")) == "wal"
        assert store.list_runs() == []
    release.join()
    holder.close()
    assert waited >= 0.4

    # A lock that is never released: the URL's timeout is honoured, and the message names the lock.
    other = tmp_path / "held.db"
    holder = sqlite3.connect(other, isolation_level=None)
    holder.execute("CREATE TABLE t(x)")
    holder.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(StoreError, match="locked by another process and the wait timed out"):
        Store.open(f"{db_url(str(other))}?timeout=0.3")
    assert 0.25 <= time.monotonic() - started < 5
    holder.rollback()
    holder.close()


def test_bad_and_unreachable_urls_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="bad database URL 'nosuchdb://x'"):
        Store.open("nosuchdb://x")
    # Nothing listens on port 1; the password must not appear in the message.
    hidden = r"^cannot open result store postgresql\+psycopg://u:\*\*\*@127\.0\.0\.1:1/db: "
    with pytest.raises(StoreError, match=hidden):
        Store.open("postgresql://u:secret@127.0.0.1:1/db")
    with pytest.raises(StoreError, match="cannot open result store sqlite:///"):
        Store.open(str(tmp_path))  # a directory, not a database file


def test_rows_without_samples_round_trip_with_missing_statistics(store_url: str) -> None:
    """nccl-tests without -I prints a time per row, no samples: such rows come back exactly."""
    reported = TimeStats(
        mean_s=2.5e-5, p50_s=None, p95_s=None, p99_s=None, min_s=None, max_s=None, stdev_s=None, cv=None, n=20
    )
    partial = TimeStats(
        mean_s=1 / 3, p50_s=0.3, p95_s=None, p99_s=None, min_s=0.25, max_s=0.5, stdev_s=0.01, cv=0.03, n=0
    )
    run = Run(
        run_id="nosamples",
        started_at="2024-05-01T12:00:00Z",
        source="nccl-tests",
        system=_system("nccl"),
        measurements=(
            _measurement("all_reduce", 1 << 20, (), reported=reported, nwrong=0),
            _measurement("all_gather", 1 << 20, (), reported=partial, in_place=True),
            _measurement("all_gather", 8, (4e-6, 5e-6)),
        ),
    )
    with Store.open(store_url) as store:
        store.save_run(run)
    with Store.open(store_url) as store:
        loaded = store.get_run("nosamples")
        with store.engine.connect() as conn:
            stored = conn.execute(
                select(
                    MeasurementModel.mean_s,
                    MeasurementModel.p50_s,
                    MeasurementModel.cv,
                    MeasurementModel.busbw_bytes_per_s,
                ).order_by(MeasurementModel.position)
            ).all()
    assert loaded == run
    assert loaded.measurements[0].samples_s == () and loaded.measurements[0].reported == reported
    assert loaded.measurements[1].stats == partial
    assert run_to_dict(loaded) == run_to_dict(run)
    assert stored[0] == (2.5e-5, None, None, run.measurements[0].busbw_bytes_per_s)
    assert stored[1][:3] == (1 / 3, 0.3, 0.03)


def test_save_runs_is_all_or_nothing(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.save_run(_run("taken000"))
        with pytest.raises(StoreError, match="run 'taken000' is already in the store"):
            store.save_runs([_run("fresh000"), _run("taken000"), _run("fresh111")])
        with pytest.raises(StoreError, match="run 'twice000' is given more than once"):
            store.save_runs([_run("twice000"), _run("twice000")])
        assert [s.run_id for s in store.list_runs()] == ["taken000"]
        assert store.save_runs([_run("fresh000", started_at="2024-05-02T00:00:00Z"), _run("fresh111")]) == [
            "fresh000",
            "fresh111",
        ]
        assert [s.run_id for s in store.list_runs()] == ["fresh000", "taken000", "fresh111"]


def _writer(url: str, writer: int, ready: Any, go: Any) -> None:
    """One `commlens bench`-like process: opens the store itself and saves 20 runs, one transaction each."""
    system = SystemInfo(world_size=2, backend="gloo")
    ready.set()
    go.wait()
    with Store.open(url) as store:  # fresh store: the tables are created by whichever writer is first
        for i in range(20):
            m = Measurement(
                op="all_reduce",
                dtype="float32",
                size_bytes=1024,
                count=256,
                in_place=False,
                world_size=2,
                redop="sum",
                samples_s=(1e-5 * (i + 1), 2e-5),
            )
            store.save_run(
                Run(
                    run_id=f"w{writer}-{i:02d}",
                    started_at=f"2024-05-01T12:{i:02d}:00Z",
                    system=system,
                    measurements=(m,),
                    tag=f"writer{writer}",
                )
            )


def test_concurrent_writers_from_separate_processes(store_url: str) -> None:
    """Four processes start writing at once to a fresh store (SQLite file or PostgreSQL database):
    the schema is created once and no run is lost. Forked, so each starts without re-importing."""
    url = store_url
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = []
    for w in range(4):
        ready = ctx.Event()
        procs.append(ctx.Process(target=_writer, args=(url, w, ready, go)))
        procs[-1].start()
        assert ready.wait(30)
    try:
        go.set()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0, f"writer exited with {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()

    with Store.open(url) as store:
        summaries = store.list_runs(limit=None)
        assert len(summaries) == 80
        assert sorted(s.run_id for s in summaries) == sorted(f"w{w}-{i:02d}" for w in range(4) for i in range(20))
        assert len(store.list_runs(RunFilter(tag="writer2"), limit=None)) == 20
        assert store.get_run("w3-19").measurements[0].samples_s == (2e-4, 2e-5)
        assert (_count(store, MeasurementModel), _count(store, SampleModel)) == (80, 80)
