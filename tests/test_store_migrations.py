"""Schema migrations on SQLite and PostgreSQL: a store from before Alembic upgraded in place, data intact;
older and newer schemas refused with advice; the models and the migrations describing the same schema."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, MetaData, create_engine, func, insert, inspect, select, text
from store_backends import make_measurement, make_run, pg_server, pg_url, store_url  # noqa: F401

from commlens.results import BenchSettings, IngestedSettings, Measurement, Run, SystemInfo, TimeStats
from commlens.results.records import MeasurementKey
from commlens.store import MeasurementFilter, Store, StoreError, make_engine, schema_status, upgrade_schema
from commlens.store.models import SCHEMA_REVISION, Base, MeasurementModel, SampleModel
from commlens.store.noise import NoiseFloor
from commlens.store.schema import _alembic_config

LEGACY_DUMP = Path(__file__).parent / "data" / "store" / "legacy-0001.sql"


def _legacy_runs() -> list[Run]:
    """What tests/data/store/legacy-0001.sql holds, as records: saved by commlens before Alembic."""

    def sysinfo(backend: str, ws: int, hosts: tuple[str, ...]) -> SystemInfo:
        return SystemInfo(
            world_size=ws,
            hosts=hosts,
            ranks_per_host={h: ws // len(hosts) for h in hosts},
            backend=backend,
            backend_version="2.19.3" if backend == "nccl" else "",
            device="cuda" if backend == "nccl" else "cpu",
            device_names=("NVIDIA H100 80GB HBM3",) * ws if backend == "nccl" else (),
            torch_version="2.4.0",
            python_version="3.11.7",
            cpu_model="Xeon 8480",
            cpu_cores=112,
            os="Linux-6.5",
            commlens_version="0.1.0",
            env={"NCCL_ALGO": "Ring"},
            extra={"slurm_job": "77"},
        )

    def m(op: str, size: int, samples: tuple[float, ...], ws: int, **kw: object) -> Measurement:
        kw.setdefault("redop", "sum" if op in ("all_reduce", "reduce_scatter", "reduce") else None)
        return Measurement(
            op=op,
            dtype=kw.pop("dtype", "float32"),
            size_bytes=size,  # type: ignore[arg-type]
            count=size // 4,
            in_place=kw.pop("in_place", False),
            world_size=ws,  # type: ignore[arg-type]
            samples_s=samples,
            **kw,
        )  # type: ignore[arg-type]

    return [
        Run(
            run_id="legacy0a1b2c3d4e5f",
            started_at="2024-04-30T22:15:00.250000Z",
            finished_at="2024-04-30T22:16:02Z",
            tag="nightly",
            revision="a1b2c3d",
            command_line="commlens bench --nproc 8 -b 8 -e 1M -f 1024",
            config=BenchSettings({"iters": 3, "warmup_iters": 1}),
            system=sysinfo("nccl", 8, ("gpu-01",)),
            measurements=(
                m("all_reduce", 8, (1.5e-5, 1.25e-5, 1.75e-5), 8, nwrong=0),
                m("all_reduce", 8, (1.0e-5, 1.1e-5, 0.1 + 0.2), 8, in_place=True, nwrong=0),
                m("all_reduce", 1 << 20, (6.1e-5, 6.2e-5, 6.05e-5), 8, nwrong=0),
                m("all_gather", 1 << 20, (4.4e-5, 4.5e-5, 1 / 3 * 1e-4), 8, nwrong=0),
            ),
        ),
        Run(
            run_id="legacy1f2e3d4c5b6a",
            started_at="2024-05-01T09:00:00+02:00",
            tag="nightly",
            revision="b2c3d4e",
            system=sysinfo("nccl", 8, ("gpu-01",)),
            measurements=(
                m("all_reduce", 8, (1.6e-5, 1.3e-5), 8),
                m(
                    "broadcast",
                    4096,
                    (2e-5, 2.5e-5),
                    8,
                    root=3,
                    algo="tree",
                    dtype="bfloat16",
                    rank_samples_s=tuple((2e-5 - r * 1e-7, 2.5e-5 - r * 1e-7) for r in range(8)),
                ),
            ),
        ),
        Run(
            run_id="legacy2aaaabbbbcccc",
            started_at="2024-05-02T03:30:00Z",
            status="incomplete",
            source="nccl-tests",
            config=IngestedSettings(),  # its stored config, {} of an nccl-tests run: ingested settings (by source)
            notes=("rank 3 slow",),
            system=sysinfo("gloo", 4, ("node-a", "node-b")),
            measurements=(
                m("reduce_scatter", 65536, (3e-4, 5e-324, 2.2250738585072014e-308), 4, redop="max", nwrong=2),
                m("barrier", 0, (1e-6,), 4, redop=None),
            ),
        ),
    ]


def _load_dump(path: Path) -> None:
    con = sqlite3.connect(path)
    try:
        con.executescript(LEGACY_DUMP.read_text())
    finally:
        con.close()


def _migrate(engine: Engine, revision: str) -> None:
    """Run the shipped migrations up to ``revision`` on ``engine``, as Alembic would."""
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), revision)


def _make_pre_alembic_store(url: str, tmp_path: Path) -> None:
    """A store as commlens wrote it before Alembic: schema 0001, ``schema_version`` = 1, the legacy runs.

    SQLite: the dump itself. PostgreSQL: migration 0001, its stamp removed, the dump's rows copied in.
    """
    if url.startswith("sqlite"):
        _load_dump(Path(url.removeprefix("sqlite:///")))
        return
    dump = tmp_path / "legacy.db"
    _load_dump(dump)
    source, target = create_engine(f"sqlite:///{dump}"), make_engine(url)
    try:
        _migrate(target, "0001")
        with source.connect() as src, target.begin() as dst:
            dst.execute(text("DROP TABLE alembic_version"))
            src_tables, dst_tables = MetaData(), MetaData()
            src_tables.reflect(src)
            dst_tables.reflect(dst)
            for name in ("runs", "measurements", "samples"):
                rows = [dict(r) for r in src.execute(select(src_tables.tables[name])).mappings()]
                dst.execute(insert(dst_tables.tables[name]), rows)
            # Rows copied with their ids: move the id sequence past them, as real inserts would have.
            dst.execute(text("SELECT setval(pg_get_serial_sequence('measurements', 'id'), max(id)) FROM measurements"))
    finally:
        source.dispose()
        target.dispose()


def _counts(store: Store) -> tuple[int, int]:
    with store.engine.connect() as conn:
        return (
            conn.scalar(select(func.count()).select_from(MeasurementModel)),
            conn.scalar(select(func.count()).select_from(SampleModel)),
        )


def test_store_from_before_alembic_is_refused_then_upgraded_in_place(store_url: str, tmp_path: Path) -> None:
    _make_pre_alembic_store(store_url, tmp_path)

    with pytest.raises(
        StoreError, match=rf"has schema 0001, this commlens needs {SCHEMA_REVISION}: run `commlens db upgrade`"
    ):
        Store.open(store_url)
    status = schema_status(store_url)
    assert (status.revision, status.state, status.stamped, status.nruns) == ("0001", "old", False, 3)

    done = upgrade_schema(store_url)
    assert (done.before, done.after) == ("0001", SCHEMA_REVISION)
    status = schema_status(store_url)
    assert (status.revision, status.state, status.stamped, status.nruns) == (SCHEMA_REVISION, "current", True, 3)

    expected = _legacy_runs()
    with Store.open(store_url) as store:
        # Every run, measurement and sample survived, bit for bit.
        assert store.get_runs([r.run_id for r in expected]) == expected
        assert _counts(store) == (8, 8)
        assert [s.run_id for s in store.list_runs()] == [r.run_id for r in reversed(expected)]
        rows = store.measurement_rows(MeasurementFilter(op="all_reduce", size_bytes=8))
        assert [(r.run_id, r.key.in_place, r.samples_s) for r in rows] == [
            ("legacy0a1b2c3d4e5f", False, (1.5e-5, 1.25e-5, 1.75e-5)),
            ("legacy0a1b2c3d4e5f", True, (1.0e-5, 1.1e-5, 0.1 + 0.2)),
            ("legacy1f2e3d4c5b6a", False, (1.6e-5, 1.3e-5)),
        ]

        # The new columns work: a row with reported statistics and no samples.
        reported = TimeStats(
            mean_s=3e-5, p50_s=None, p95_s=None, p99_s=None, min_s=None, max_s=None, stdev_s=None, cv=None, n=20
        )
        new = Run(
            run_id="after-upgrade",
            started_at="2024-05-03T00:00:00Z",
            source="nccl-tests",
            system=expected[0].system,
            measurements=(
                Measurement(
                    op="all_reduce",
                    dtype="float32",
                    size_bytes=8,
                    count=2,
                    in_place=False,
                    world_size=8,
                    redop="sum",
                    samples_s=(),
                    reported=reported,
                ),
            ),
        )
        store.save_run(new)
        assert store.get_run("after-upgrade") == new
        assert _counts(store) == (9, 9)

        # The copied measurements table kept its foreign keys: deleting a run still cascades.
        store.delete_run("legacy0a1b")
        assert _counts(store) == (5, 5)
        with store.engine.connect() as conn:
            # commlens from before Alembic reads this and refuses the store ("newer than this commlens").
            assert conn.scalar(text("SELECT version FROM schema_version")) == 2

    again = upgrade_schema(store_url)
    assert (again.before, again.after) == (SCHEMA_REVISION, SCHEMA_REVISION)


def _schema(engine: Engine) -> dict[str, object]:
    """Tables as the database describes them: columns, keys, indexes."""
    insp = inspect(engine)
    out: dict[str, object] = {}
    for table in sorted(insp.get_table_names()):
        out[table] = {
            "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns(table)],
            "pk": insp.get_pk_constraint(table)["constrained_columns"],
            "fks": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"], f["options"].get("ondelete"))
                for f in insp.get_foreign_keys(table)
            ),
            "unique": sorted((u["name"], tuple(u["column_names"])) for u in insp.get_unique_constraints(table)),
            "indexes": sorted((i["name"], tuple(i["column_names"])) for i in insp.get_indexes(table)),
        }
    return out


def test_migration_0001_creates_the_schema_of_commlens_before_alembic(tmp_path: Path) -> None:
    legacy, migrated = tmp_path / "legacy.db", tmp_path / "migrated.db"
    _load_dump(legacy)
    legacy_engine, migrated_engine = make_engine(f"sqlite:///{legacy}"), make_engine(f"sqlite:///{migrated}")
    try:
        _migrate(migrated_engine, "0001")
        expected = _schema(legacy_engine)
        got = _schema(migrated_engine)
        assert got.pop("alembic_version")
        assert got == expected
    finally:
        legacy_engine.dispose()
        migrated_engine.dispose()


def test_migrations_and_models_describe_the_same_schema(store_url: str) -> None:
    """A store created fresh (from the models) and one migrated from nothing must not differ."""
    engine = make_engine(store_url)
    try:
        _migrate(engine, "head")
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
            assert conn.scalar(text("SELECT version_num FROM alembic_version")) == SCHEMA_REVISION
    finally:
        engine.dispose()
    assert diff == [], "write a migration for these model changes"


def test_newer_schema_is_refused_with_advice(store_url: str) -> None:
    Store.open(store_url).close()
    engine = make_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    message = rf"database schema 0099 is newer than this commlens \({SCHEMA_REVISION}\); upgrade commlens"
    with pytest.raises(StoreError, match=message):
        Store.open(store_url)
    with pytest.raises(StoreError, match=message):
        upgrade_schema(store_url)
    assert schema_status(store_url).state == "newer"


def test_pre_alembic_version_other_than_1_is_newer(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    _load_dump(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE schema_version SET version = 99")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match=rf"database schema 99 is newer than this commlens \({SCHEMA_REVISION}\)"):
        Store.open(str(path))


def test_upgrade_creates_an_empty_store_and_status_changes_nothing(store_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "not-yet" / "r.db"
    status = schema_status(str(missing))
    assert (status.revision, status.state, status.nruns) == (None, "empty", None)
    assert not missing.parent.exists()  # status created nothing

    assert schema_status(store_url).state == "empty"
    done = upgrade_schema(store_url)
    assert (done.before, done.after) == (None, SCHEMA_REVISION)
    status = schema_status(store_url)
    assert (status.revision, status.state, status.stamped, status.nruns) == (SCHEMA_REVISION, "current", True, 0)
    with Store.open(store_url) as store:
        store.save_run(make_run("first000"))


def test_foreign_tables_without_a_revision_are_not_taken_for_a_store(store_url: str) -> None:
    engine = make_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE runs (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(StoreError, match="has a 'runs' table but no commlens schema revision"):
        Store.open(store_url)
    with pytest.raises(StoreError, match="not a commlens store"):
        upgrade_schema(store_url)


def make_old_store(
    url: str, runs: list[Run], tmp_path: Path, revision: str = "0003", floors: Sequence[NoiseFloor] = ()
) -> None:
    """A store at schema ``revision`` holding ``runs`` (and noise ``floors``, from 0004 on), with the rows today's
    commlens writes for them, less the columns later revisions added."""
    current = tmp_path / "current.db"
    with Store.open(str(current)) as store:
        store.save_runs(runs)
        store.floors.save(floors)
    source, target = create_engine(f"sqlite:///{current}"), make_engine(url)
    try:
        _migrate(target, revision)
        with source.connect() as src, target.begin() as dst:
            src_tables, dst_tables = MetaData(), MetaData()
            src_tables.reflect(src)
            dst_tables.reflect(dst)
            assert dst.scalar(text("SELECT version_num FROM alembic_version")) == revision
            assert not floors or "noise_floors" in dst_tables.tables, f"schema {revision} has no noise floors"
            for name in ("runs", "measurements", "samples", "noise_floors"):
                if name not in dst_tables.tables:
                    continue
                columns = dst_tables.tables[name].c.keys()
                rows = [{c: r[c] for c in columns} for r in src.execute(select(src_tables.tables[name])).mappings()]
                if rows:
                    dst.execute(insert(dst_tables.tables[name]), rows)
                if rows and url.startswith("postgresql") and "id" in columns:
                    # Rows copied with their ids: move the id sequence past them, as real inserts would have.
                    dst.execute(text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), max(id)) FROM {name}"))
    finally:
        source.dispose()
        target.dispose()


def test_migration_0003_to_0004_keeps_every_run_and_adds_rounds_and_floors(store_url: str, tmp_path: Path) -> None:
    runs = [
        make_run("old00001", tag="nightly", revision="r1"),
        make_run("old00002", revision="r1", scale=1.5),
        Run(**{**make_run("old00003").__dict__, "status": "check_failed"}),
    ]
    make_old_store(store_url, runs, tmp_path)
    engine = make_engine(store_url)
    try:
        insp = inspect(engine)
        assert "rounds" not in [c["name"] for c in insp.get_columns("samples")] and not insp.has_table("noise_floors")
    finally:
        engine.dispose()
    with pytest.raises(
        StoreError, match=rf"has schema 0003, this commlens needs {SCHEMA_REVISION}: run `commlens db upgrade`"
    ):
        Store.open(store_url)
    assert schema_status(store_url).nruns == 3

    done = upgrade_schema(store_url)
    assert (done.before, done.after) == ("0003", SCHEMA_REVISION)
    status = schema_status(store_url)
    assert (status.revision, status.state, status.nruns) == (SCHEMA_REVISION, "current", 3)
    with Store.open(store_url) as store:
        assert store.get_runs([r.run_id for r in runs]) == runs  # bit for bit, each row one round
        assert {m.rounds for r in store.get_runs([r.run_id for r in runs]) for m in r.measurements} == {None}
        assert _counts(store) == (6, 6)
        # what 0004 added works on the upgraded store
        assert store.floors.list() == []
        floor = NoiseFloor(
            fingerprint="fp",
            key=MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 1024, False),
            sd_log=0.04,
            runs=2,
            groups=1,
            learned_at="2025-01-01T00:00:00+00:00",
        )
        store.floors.save([floor])
        assert store.floors.list() == [floor]
        m = make_measurement(samples_s=(1e-5, 2e-5, 3e-5), rounds=(1, 2))
        new = Run(**{**make_run("new00001").__dict__, "measurements": (m,)})
        store.save_run(new)
        assert store.get_run("new00001").measurements[0].rounds == (1, 2)
        assert _counts(store) == (7, 7)
