"""A run larger than one insert batch: saved a batch at a time, in one transaction, on SQLite and PostgreSQL.

The store inserts ``_INSERT_BATCH`` measurements per statement so that a run of a million
measurements never has all its rows in memory at once; these runs span three batches.
"""

from __future__ import annotations

import dataclasses

import pytest
from store_backends import make_measurement, make_run, pg_server, pg_url, store_url  # noqa: F401

from commlens.results.records import Run
from commlens.store import DatabaseFault, MeasurementFilter, Store
from commlens.store.repo import _INSERT_BATCH

SPANNING = 2 * _INSERT_BATCH + 1  # the last measurement alone in a third batch


def _big_run(run_id: str) -> Run:
    measurements = tuple(
        make_measurement(size_bytes=4 * (i + 1), samples_s=(1e-6 * (i + 1), 2e-6)) for i in range(SPANNING)
    )
    return dataclasses.replace(make_run(run_id), measurements=measurements)


def test_a_run_of_several_batches_reads_back_equal(store_url: str) -> None:
    """Every batch's samples land on their own measurement (ids read back per batch), also where a
    batch holds the end of one run and the start of the next."""
    runs = [make_run("aaaa0001"), _big_run("ffff0001"), make_run("bbbb0002")]
    with Store.open(store_url) as store:
        store.save_runs(runs)
        assert store.get_runs(["aaaa0001", "ffff0001", "bbbb0002"]) == runs


def test_a_failure_in_the_last_batch_stores_nothing_of_the_run(store_url: str) -> None:
    """Batches one and two are inserted before the third fails: the transaction takes them all back."""
    run = _big_run("ffff0002")
    object.__setattr__(run.measurements[-1], "size_bytes", 1 << 64)  # past records' checks, to the driver
    with Store.open(store_url) as store:
        store.save_run(make_run("aaaa0001"))
        with pytest.raises(DatabaseFault, match="too large for the store's 64-bit integers"):
            store.save_runs([make_run("eeee0005"), run])
        assert [s.run_id for s in store.list_runs()] == ["aaaa0001"]
        assert store.measurement_rows(MeasurementFilter(size_bytes=4)) == []  # not one measurement of the first batches
        store.save_run(_big_run("ffff0002"))  # the same id saves cleanly afterwards: nothing was left of it
        assert len(store.get_run("ffff0002").measurements) == SPANNING
