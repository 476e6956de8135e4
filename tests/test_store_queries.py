"""The store's query API on SQLite and PostgreSQL: measurement rows across runs (what the regression
gate reads), runs by tag, filters by time and fingerprint, tagging, deleting several runs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from sqlalchemy import event
from store_backends import WORLD, make_measurement, make_run, make_system, pg_server, pg_url, store_url  # noqa: F401

from commlens.results import Measurement, Run, TimeStats
from commlens.results.records import MeasurementKey
from commlens.store import MeasurementFilter, MeasurementRow, RunFilter, Store, StoreError

OTHER_SYSTEM = make_system(cpu_model="EPYC")


def _history() -> list[Run]:
    """Five runs: three nightlies on one system, one CI run, one nightly on another system."""
    return [
        make_run("n1", tag="nightly", started_at="2024-05-01T02:00:00Z", revision="r1", ops=("all_reduce",)),
        make_run(
            "n2",
            tag="nightly",
            started_at="2024-05-02T04:00:00+02:00",
            revision="r2",
            ops=("all_reduce", "all_gather"),
            scale=1.1,
        ),
        make_run("ci", tag="ci", started_at="2024-05-02T12:00:00Z", revision="r2", ops=("broadcast",)),
        make_run("n3", tag="nightly", started_at="2024-05-03T02:00:00Z", revision="r3", ops=("all_reduce",), scale=1.2),
        make_run("other", tag="nightly", started_at="2024-05-02T03:00:00Z", ops=("all_reduce",), system=OTHER_SYSTEM),
    ]


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as s:
        s.save_runs(_history())
        yield s


def _ids(rows: list[MeasurementRow]) -> list[tuple[str, str, int]]:
    return [(r.run_id, r.key.op, r.key.size_bytes) for r in rows]


def test_measurement_rows_carry_run_metadata_and_samples_oldest_first(store: Store) -> None:
    rows = store.measurement_rows(MeasurementFilter(op="all_reduce", size_bytes=4096))
    assert _ids(rows) == [
        ("n1", "all_reduce", 4096),
        ("n2", "all_reduce", 4096),
        ("other", "all_reduce", 4096),
        ("n3", "all_reduce", 4096),
    ]
    n2 = rows[1]
    assert n2 == MeasurementRow(
        run_id="n2",
        started_at=datetime(2024, 5, 2, 2, 0, tzinfo=timezone.utc),
        revision="r2",
        tag="nightly",
        fingerprint=make_system().fingerprint(),
        source="commlens",
        key=MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 4096, False),
        world_size=WORLD,
        mean_s=n2.samples_s[0] / 2 + n2.samples_s[1] / 2,
        cv=_history()[1].measurements[1].stats.cv,
        iterations=2,
        busbw_bytes_per_s=_history()[1].measurements[1].busbw_bytes_per_s,
        samples_s=(1e-5 * 1.1, 2e-5 * 1.1),
    )
    assert n2.key == _history()[1].measurements[1].key


def test_measurement_rows_filters(store: Store) -> None:
    fp = make_system().fingerprint()
    assert len(store.measurement_rows()) == 2 + 4 + 2 + 2 + 2
    assert {r.run_id for r in store.measurement_rows(MeasurementFilter(tag="ci"))} == {"ci"}
    assert _ids(store.measurement_rows(MeasurementFilter(op="all_gather"))) == [
        ("n2", "all_gather", 1024),
        ("n2", "all_gather", 4096),
    ]
    assert store.measurement_rows(MeasurementFilter(dtype="bfloat16")) == []
    assert {r.run_id for r in store.measurement_rows(MeasurementFilter(fingerprint=fp))} == {"n1", "n2", "ci", "n3"}
    assert {r.run_id for r in store.measurement_rows(MeasurementFilter(fingerprint=fp[:6].upper()))} == {
        "n1",
        "n2",
        "ci",
        "n3",
    }
    assert {r.run_id for r in store.measurement_rows(MeasurementFilter(fingerprint=OTHER_SYSTEM.fingerprint()))} == {
        "other"
    }
    # since and until are inclusive; a bare date as until covers that whole day.
    assert [
        r.run_id
        for r in store.measurement_rows(
            MeasurementFilter(op="all_reduce", size_bytes=1024, since="2024-05-02T02:00:00Z")
        )
    ] == ["n2", "other", "n3"]
    assert [
        r.run_id
        for r in store.measurement_rows(
            MeasurementFilter(op="all_reduce", size_bytes=1024, until="2024-05-02T02:00:00Z")
        )
    ] == ["n1", "n2"]
    assert [
        r.run_id
        for r in store.measurement_rows(
            MeasurementFilter(op="all_reduce", size_bytes=1024, since="2024-05-02", until="2024-05-02")
        )
    ] == ["n2", "other"]
    aware = datetime(2024, 5, 3, 4, 0, tzinfo=timezone.utc).astimezone()
    assert [
        r.run_id for r in store.measurement_rows(MeasurementFilter(op="all_reduce", size_bytes=1024, since=aware))
    ] == []
    with pytest.raises(StoreError, match="until 'soon' is not an ISO 8601 time"):
        store.measurement_rows(MeasurementFilter(until="soon"))


def test_measurement_rows_is_one_query_however_many_runs(store: Store) -> None:
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        rows = store.measurement_rows(MeasurementFilter(tag="nightly"))
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert len(rows) == 10
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 1


def test_rows_without_samples_report_the_tools_statistics(store: Store) -> None:
    reported = TimeStats(
        mean_s=4e-5, p50_s=None, p95_s=None, p99_s=None, min_s=None, max_s=None, stdev_s=None, cv=None, n=50
    )
    run = Run(
        run_id="ingested",
        started_at="2024-05-04T00:00:00Z",
        source="nccl-tests",
        system=make_system(),
        measurements=(make_measurement("all_reduce", 1024, (), reported=reported),),
    )
    store.save_run(run)
    (row,) = store.measurement_rows(MeasurementFilter(since="2024-05-04"))
    assert (row.samples_s, row.mean_s, row.cv, row.iterations, row.source) == ((), 4e-5, None, 50, "nccl-tests")
    assert row.busbw_bytes_per_s == run.measurements[0].busbw_bytes_per_s


def test_runs_with_tag_are_full_runs_oldest_first(store: Store) -> None:
    history = {r.run_id: r for r in _history()}
    assert store.runs_with_tag("nightly") == [history[i] for i in ("n1", "n2", "other", "n3")]
    assert store.runs_with_tag("ci") == [history["ci"]]
    assert store.runs_with_tag("weekly") == []


def test_list_runs_by_time_fingerprint_and_ids(store: Store) -> None:
    fp = make_system().fingerprint()
    assert [s.run_id for s in store.list_runs(RunFilter(until="2024-05-02"))] == [
        "ci",
        "other",
        "n2",
        "n1",
    ]  # newest first
    assert [s.run_id for s in store.list_runs(RunFilter(since="2024-05-02", until="2024-05-02T03:00:00Z"))] == [
        "other",
        "n2",
    ]
    assert [s.run_id for s in store.list_runs(RunFilter(fingerprint=fp[:4], tag="nightly"))] == ["n3", "n2", "n1"]
    assert [s.run_id for s in store.list_runs(RunFilter(run_ids=["n1", "ci", "missing"]))] == ["ci", "n1"]
    assert store.list_runs(RunFilter(fingerprint="ffff_")) == []  # LIKE wildcards are literal
    assert store.list_runs(limit=1)[0].started_at_utc == datetime(2024, 5, 3, 2, 0, tzinfo=timezone.utc)
    with pytest.raises(StoreError, match="limit must be >= 1"):
        store.list_runs(limit=0)


def test_get_runs_in_the_order_asked(store: Store) -> None:
    history = {r.run_id: r for r in _history()}
    assert store.get_runs(["n3", "n1", "other"]) == [history["n3"], history["n1"], history["other"]]
    assert list(store.iter_runs(["ci", "n2"])) == [history["ci"], history["n2"]]
    with pytest.raises(StoreError, match="no run matches 'zzzz'"):
        store.get_runs(["n1", "zzzz"])


def test_set_tag_replaces_and_removes(store: Store) -> None:
    assert store.set_tag("ci", "release") == ("ci", "ci")
    assert store.get_run("ci").tag == "release"
    assert store.set_tag("ci", None) == ("ci", "release")
    assert store.get_run("ci").tag is None
    assert store.set_tag("ci", "ci") == ("ci", None)
    with pytest.raises(StoreError, match="a tag must not be empty"):
        store.set_tag("ci", " ")
    with pytest.raises(StoreError, match="no run matches 'nope'"):
        store.set_tag("nope", "x")


def test_delete_runs_is_all_or_nothing(store: Store) -> None:
    with pytest.raises(StoreError, match="no run matches 'nope'"):
        store.delete_runs(["n1", "nope"])
    assert len(store.list_runs()) == 5
    assert store.delete_runs(["n1", "n2", "n1"]) == ["n1", "n2"]
    assert sorted(s.run_id for s in store.list_runs()) == ["ci", "n3", "other"]
    assert {r.run_id for r in store.measurement_rows()} == {"ci", "n3", "other"}


def test_measurement_row_for_every_placement_and_op(store: Store) -> None:
    run = Run(
        run_id="mixed",
        started_at="2024-06-01T00:00:00Z",
        system=make_system(),
        measurements=(
            make_measurement("broadcast", 64, (1e-6,), root=2, algo="tree", in_place=True),
            Measurement(
                op="reduce",
                dtype="bfloat16",
                size_bytes=64,
                count=32,
                in_place=False,
                world_size=WORLD,
                redop="max",
                root=1,
                samples_s=(2e-6, 3e-6),
            ),
        ),
    )
    store.save_run(run)
    rows = store.measurement_rows(MeasurementFilter(since="2024-06-01"))
    assert [r.key for r in rows] == [m.key for m in run.measurements]
