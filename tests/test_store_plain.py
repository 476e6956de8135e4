"""``commlens runs`` and ``commlens show`` read a SQLite store without SQLAlchemy (``commlens.store.plain``, issue
34's start-up): what they read equals what ``Store`` reads, anything unusual is read by ``Store``, and the
commands print exactly what they print through ``Store``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from store_backends import make_measurement, make_run, make_system

from commlens.results.records import MeasurementKey
from commlens.results.stats import TimeStats
from commlens.store import MeasurementFilter, RunFilter, Store
from commlens.store.plain import NotPlain, plain_store


def _runs() -> list:
    system = make_system()
    odd = replace(system, extra={"slurm_job": "7", "text": "ünï\ncode"})
    rows = (
        make_measurement("all_reduce", 1024, (1.5e-5, 2.25e-5, 1e-5), rank_samples_s=((1e-5, 2e-5, 1e-5),) * 8),
        make_measurement("all_gather", 4096, (3e-5, 3.5e-5, 4e-5, 3e-5), rounds=(2, 2), nwrong=0, in_place=True),
        make_measurement("broadcast", 2048, (), root=3, reported=TimeStats(2e-5, None, None, None, None, None, None, 0.05, 20)),
        make_measurement("all_reduce", 1024, (5e-5, 6e-5), group="dp-0"),
    )  # fmt: skip
    return [
        make_run("aaaa0001", tag="nightly", started_at="2024-05-01T12:00:00Z", revision="abc123"),
        make_run("aaaa0002", tag="nightly", started_at="2024-05-02T12:00:00.250+02:00", ops=("all_gather",)),
        make_run("bbbb0003", started_at="2024-05-03T00:00:00Z", system=make_system(cpu_model="Epyc"), scale=1.1),
        replace(make_run("cccc0004", tag="a_b%c", started_at="2024-05-01T12:00:00Z"), measurements=rows, system=odd),
    ]


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "results.db")
    with Store.open(path) as store:
        store.save_runs(_runs())
    return path


def test_listings_and_runs_read_plainly_equal_the_stores(db: str) -> None:
    fingerprint = make_system().fingerprint()
    filters: list[dict] = [
        {},
        {"tag": "nightly"},
        {"tag": "a_b%c"},
        {"tag": "a_b_c"},
        {"op": "broadcast"},
        {"op": "all_gather", "tag": "nightly"},
        {"fingerprint": fingerprint},
        {"fingerprint": fingerprint[:5].upper()},
        {"fingerprint": "%"},
    ]
    with Store.open(db, create=False) as store, plain_store(db) as plain:
        for f in filters:
            where = RunFilter(**f)
            assert plain.list_runs(where, limit=50) == store.list_runs(where, limit=50), f
        assert plain.list_runs(limit=2) == store.list_runs(limit=2)
        assert [r.run_id for r in plain.list_runs(RunFilter(op="broadcast"), limit=5)] == ["cccc0004"]
        for other in ({"since": "2024-01-01"}, {"until": "2024-01-01"}, {"source": "commlens"}, {"revision": "a"}):
            with pytest.raises(NotPlain):  # filters the plain reader leaves to Store
                plain.list_runs(RunFilter(**other))
        for run in _runs():
            assert plain.get_run(run.run_id) == store.get_run(run.run_id) == run
        for ref in ("aaaa0001", "cccc", "bbbb00"):
            assert plain.resolve(ref) == store.resolve(ref)
        assert plain.run_ids_with_tag("nightly") == store.run_ids_with_tag("nightly") == ["aaaa0001", "aaaa0002"]
        for ref in ("aaaa", "abc", "zzzz", "AAAA0001"):  # several, too short, none, case: Store says why
            with pytest.raises(NotPlain):
                plain.resolve(ref)


def test_detects_reads_plainly_equal_the_stores(db: str) -> None:
    from commlens.store.noise import NoiseFloor

    fingerprint = make_system().fingerprint()
    with Store.open(db) as store:
        store.floors.save(
            [
                NoiseFloor(
                    fingerprint,
                    MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 1024, False),
                    0.04,
                    6,
                    2,
                    "x",
                ),
                NoiseFloor(
                    "f" * 16,
                    MeasurementKey("broadcast", "builtin", "float32", None, 3, 2048, True, "dp-0"),
                    0.1,
                    4,
                    2,
                    "x",
                ),
            ],
        )
        with plain_store(db) as plain:
            for f in (
                {},
                {"tag": "nightly"},
                {"op": "all_reduce", "dtype": "float32", "size_bytes": 1024},
                {"fingerprint": fingerprint[:6]},
            ):
                where = MeasurementFilter(**f)
                assert plain.mean_history(where) == store.mean_history(where), f
            with pytest.raises(NotPlain):  # a filter the plain reader leaves to Store
                plain.mean_history(MeasurementFilter(since="2024-01-01"))
            for fp in (None, fingerprint, "f" * 16, "0" * 16):
                assert plain.floors(fp) == store.floors.load(None if fp is None else [fp]), fp
            assert len(plain.floors(None)) == 2 and not plain.has_thresholds()


def test_what_is_not_plain_is_left_to_the_store(db: str, tmp_path: Path) -> None:
    for location in ("postgresql://u@localhost/x", str(tmp_path / "absent.db"), f"sqlite:///{db}?timeout=3"):
        with pytest.raises(NotPlain), plain_store(location):
            pass
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET started_at_utc = 'yesterday' WHERE run_id = 'bbbb0003'")
        conn.execute("UPDATE runs SET config = '{oops' WHERE run_id = 'aaaa0002'")
        conn.execute(
            "DELETE FROM samples WHERE measurement_id = (SELECT min(id) FROM measurements WHERE run_id = 'aaaa0001')"
        )
    with plain_store(db) as plain:
        for read in (
            lambda: plain.list_runs(limit=50),
            lambda: plain.get_run("aaaa0002"),
            lambda: plain.get_run("aaaa0001"),
            lambda: plain.list_runs(limit=1 << 70),
        ):
            with pytest.raises(NotPlain):
                read()
        assert plain.get_run("cccc0004").run_id == "cccc0004"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0006'")
    with pytest.raises(NotPlain), plain_store(db):
        pass


RUN = """
import json, sys
if sys.argv[1] == "store":  # every read through Store, as before commlens.store.plain
    import commlens.store.plain as plain
    def refuse(db):
        raise plain.NotPlain("forced")
    plain.plain_store = refuse
sys.argv = ["commlens", *sys.argv[2:]]
from commlens.cli.app import main
try:
    main()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "sqlalchemy": "sqlalchemy" in sys.modules}), file=sys.stderr)
"""


def _run(mode: str, db: str, *argv: str) -> tuple[str, str, dict]:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "COMMLENS_DB": db}
    proc = subprocess.run(
        [sys.executable, "-c", RUN, mode, *argv], env=env, capture_output=True, text=True, timeout=120
    )
    *err, last = proc.stderr.rstrip("\n").split("\n")
    return proc.stdout, "\n".join(err), json.loads(last)


def _same_as_through_the_store(db: str, *argv: str) -> tuple[str, str, dict]:
    out, err, state = _run("plain", db, *argv)
    stores_out, stores_err, stores_state = _run("store", db, *argv)
    assert (out, err, state["code"]) == (stores_out, stores_err, stores_state["code"]), argv
    assert out or err, argv
    return out, err, state


def test_runs_show_and_detect_print_what_they_print_through_the_store_without_loading_sqlalchemy(db: str) -> None:
    with sqlite3.connect(db) as conn:  # one run that only Store can read: the listing warns and goes on
        conn.execute("UPDATE runs SET started_at_utc = 'yesterday' WHERE run_id = 'bbbb0003'")
    out, err, state = _same_as_through_the_store(db, "runs")  # the damaged run: Store reads the listing
    assert "bbbb0003" in err and "skipped" in err and "cccc00" in out and state["sqlalchemy"]
    for argv in (["runs", "--tag", "nightly", "--json"], ["show", "cccc"]):
        assert _same_as_through_the_store(db, *argv)[2]["sqlalchemy"] is False, argv

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET started_at_utc = '2024-05-03 00:00:00.000000' WHERE run_id = 'bbbb0003'")
    from commlens.store.series_meta import Threshold

    assert _same_as_through_the_store(db, "detect", "--json")[2]["sqlalchemy"] is False
    with Store.open(db) as store:
        store.thresholds.set(Threshold(op="all_reduce", min_change=0.5))
    for argv, plainly in [
        (["detect"], False),  # a stored threshold applies: Store reads it
        (["detect", "--save", "--min-change", "1%", "--alpha", "0.01"], False),  # a write: Store
    ]:
        assert _same_as_through_the_store(db, *argv)[2]["sqlalchemy"] is not plainly, argv
