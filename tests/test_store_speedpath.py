"""Saving runs in bulk, on SQLite and PostgreSQL: a few statements whatever the size, each sample row with
its own measurement, stored aggregates equal to the records', and nothing left of a save that fails midway."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import event, func, select
from store_backends import WORLD, make_measurement, make_system, pg_server, pg_url, store_url  # noqa: F401

from commlens.results import Run, TimeStats
from commlens.store import Store, StoreError
from commlens.store.models import MeasurementModel, RunModel, SampleModel


def _big_run(run_id: str, n: int, seed: int) -> Run:
    """``n`` measurements, every one with samples of its own (a sample row given to the wrong measurement
    changes the loaded run): most with samples, every 7th with per-rank samples too, every 5th only with
    statistics a tool reported, and barriers, which the run's average busBW leaves out."""
    rng = random.Random(seed)
    measurements = []
    for i in range(n):
        size = 1024 * (i + 1)
        if i % 11 == 10:
            measurements.append(make_measurement("barrier", 0, (rng.random() * 1e-5,), count=0))
        elif i % 5 == 4:
            reported = TimeStats(
                mean_s=rng.random() * 1e-3,
                p50_s=None,
                p95_s=None,
                p99_s=None,
                min_s=None,
                max_s=None,
                stdev_s=None,
                cv=None,
                n=i,
            )
            measurements.append(make_measurement("all_gather", size, (), reported=reported, nwrong=0))
        else:
            samples = tuple(rng.random() * 1e-3 for _ in range(1 + i % 4))
            rank = tuple(tuple(rng.random() for _ in samples) for _ in range(WORLD)) if i % 7 == 0 else None
            measurements.append(make_measurement("all_reduce", size, samples, in_place=i % 2 == 0, rank_samples_s=rank))
    return Run(
        run_id=run_id,
        started_at=f"2024-06-0{seed}T00:00:00Z",
        system=make_system("nccl"),
        measurements=tuple(measurements),
        source="nccl-tests",
    )


def _count(store: Store, table: type) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(table))


def test_a_large_save_is_a_few_statements_and_loads_back_equal(store_url: str) -> None:
    # More measurements than one page of a bulk insert (1,000 rows), in runs of different sizes.
    runs = [_big_run("bulk000a", 1500, 1), _big_run("bulk000b", 700, 2), _big_run("bulk000c", 1, 3)]
    statements: list[str] = []
    with Store.open(store_url) as store:
        event.listen(store.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
        assert store.save_runs(runs) == ["bulk000a", "bulk000b", "bulk000c"]
        # SQLite: the store's integrity is checked once, before its first write (its own read transaction).
        checks = [i for i, sql in enumerate(statements) if "quick_check" in sql]
        assert len(checks) == (1 if store_url.startswith("sqlite") else 0), statements
        write = statements[checks[0] + 1 :] if checks else statements
        assert len(write) <= 6, write  # BEGIN (SQLite), check, runs, measurements, ids, samples
        assert (
            store.save_run(
                Run(run_id="empty000", started_at="2024-06-04T00:00:00Z", system=make_system("nccl"), measurements=())
            )
            == "empty000"
        )
    with Store.open(store_url) as store:
        assert store.get_runs(["bulk000a", "bulk000b", "bulk000c", "empty000"]) == [
            *runs,
            Run(run_id="empty000", started_at="2024-06-04T00:00:00Z", system=make_system("nccl"), measurements=()),
        ]
        assert (_count(store, MeasurementModel), _count(store, SampleModel)) == (2201, 2201)
        # The aggregates kept for queries are the records' own figures, to the bit.
        summaries = {s.run_id: s for s in store.list_runs(limit=None)}
        for run in runs:
            assert summaries[run.run_id].avg_busbw_bytes_per_s == run.avg_busbw_bytes_per_s()
            assert summaries[run.run_id].nmeasurements == len(run.measurements)
        assert summaries["empty000"].avg_busbw_bytes_per_s == 0.0
        rows = [r for r in store.measurement_rows() if r.run_id == "bulk000b"]
        assert [(r.mean_s, r.cv, r.busbw_bytes_per_s, r.samples_s) for r in rows] == [
            (m.stats.mean_s, m.stats.cv, m.busbw_bytes_per_s, m.samples_s) for m in runs[1].measurements
        ]
        with store.engine.connect() as conn:
            algbw = conn.scalars(
                select(MeasurementModel.algbw_bytes_per_s)
                .where(MeasurementModel.run_id == "bulk000a")
                .order_by(MeasurementModel.position)
            )
            assert list(algbw) == [m.algbw_bytes_per_s for m in runs[0].measurements]


def test_a_save_that_fails_midway_leaves_nothing(store_url: str) -> None:
    def full_disk(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO samples"):
            raise OSError("disk full")

    with Store.open(store_url) as store:
        store.save_run(_big_run("before00", 3, 1))
        event.listen(store.engine, "before_cursor_execute", full_disk)
        with pytest.raises(StoreError, match="the disk is full"):  # mapped, whatever raised it
            store.save_runs([_big_run("lost000a", 40, 2), _big_run("lost000b", 2, 3)])
        event.remove(store.engine, "before_cursor_execute", full_disk)
        assert [s.run_id for s in store.list_runs()] == ["before00"]
        assert [_count(store, t) for t in (RunModel, MeasurementModel, SampleModel)] == [1, 3, 3]
        store.save_runs([_big_run("lost000a", 40, 2), _big_run("lost000b", 2, 3)])  # the same runs, now whole
        assert _count(store, SampleModel) == 45
