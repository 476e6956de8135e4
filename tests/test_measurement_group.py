"""A measurement's process group: rows of a live job's collectives are kept per group, end to end.

A job with TP groups of 2 and DP groups of 4 issues the same all_reduce on several groups; each
group's rows are their own series in the records, the JSON format, the store, compare, detect and
the noise floors. Benchmark rows have no group, and everything about them reads as before.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import insert, text
from sqlalchemy.exc import IntegrityError
from store_backends import make_run, pg_server, pg_url, store_url  # noqa: F401
from test_store_migrations import make_old_store

from commlens.regress import compare_runs, detect_history, learn_floors
from commlens.results import FormatError, Measurement, MeasurementKey, RecordError, Run, SystemInfo, run_to_dict
from commlens.results.jsonfmt import dump_run, load_run, run_from_dict
from commlens.results.records import FloorKey
from commlens.store import MeasurementFilter, Store, StoreError, make_engine, upgrade_schema
from commlens.store.export import export_runs
from commlens.store.models import SCHEMA_REVISION, NoiseFloorModel
from commlens.store.noise import NoiseFloor

JOB_WORLD = 8  # TP = 2, DP = 4
MiB = 1 << 20


def _row(group: str | None, world_size: int, scale: float = 1.0, **kw: object) -> Measurement:
    """One window's all_reduce of 64 MiB bfloat16 on ``group``: 2 ms a call on 2 ranks, 3 ms on 4."""
    base = 2e-3 if world_size == 2 else 3e-3
    fields: dict[str, object] = dict(
        op="all_reduce",
        dtype="bfloat16",
        size_bytes=64 * MiB,
        count=32 * MiB,
        in_place=True,
        redop="sum",
        world_size=world_size,
        samples_s=tuple(base * scale * f for f in (1.0, 1.01, 0.99, 1.02)),
        group=group,
    )
    fields.update(kw)
    return Measurement(**fields)  # type: ignore[arg-type]


def _job_run(run_id: str, *, tp1_scale: float = 1.0, started_at: str = "2026-11-30T10:00:00Z", **kw: object) -> Run:
    """A monitor run: the same all_reduce on two TP groups and one DP group (``tp1_scale`` slows tp1)."""
    return Run(
        run_id=run_id,
        started_at=started_at,
        source="monitor",
        system=SystemInfo(world_size=JOB_WORLD, backend="gloo", hosts=("node-a", "node-b")),
        measurements=(_row("tp0", 2), _row("tp1", 2, tp1_scale), _row("dp0", 4)),
        **kw,  # type: ignore[arg-type]
    )


def _jittered(run: Run, rng: np.random.Generator) -> Run:
    """``run`` with each row's times scaled by a factor within 2 %: runs of one code are never identical."""
    factors = rng.uniform(0.98, 1.02, size=len(run.measurements))
    rows = (replace(m, samples_s=tuple(s * f for s in m.samples_s)) for m, f in zip(run.measurements, factors))
    return replace(run, measurements=tuple(rows))


# -- records ------------------------------------------------------------------------------------------


def test_rows_identical_but_for_group_are_different_keys_ordered_no_group_first() -> None:
    tp0, tp1, bench = _row("tp0", 2), _row("tp1", 2), _row(None, 2)
    assert tp0.key != tp1.key != bench.key
    assert (tp0.key.group, bench.key.group) == ("tp0", None)
    assert tp0.key._replace(group=None) == bench.key  # the group is the only difference
    # positional construction without a group still works and means "no group"
    assert bench.key == MeasurementKey("all_reduce", "builtin", "bfloat16", "sum", None, 64 * MiB, True)
    small = _row("tp0", 2, size_bytes=MiB, count=MiB // 2)
    keys = sorted([tp1.key, small.key, tp0.key, bench.key], key=MeasurementKey.order)
    assert [(k.group, k.size_bytes) for k in keys] == [
        (None, 64 * MiB),
        ("tp0", MiB),
        ("tp0", 64 * MiB),
        ("tp1", 64 * MiB),
    ]


def test_a_group_name_must_be_1_to_200_characters() -> None:
    assert _row("g" * 200, 2).group == "g" * 200
    with pytest.raises(
        RecordError, match=r"^group must be None \(no group\) or a name of 1\.\.200 characters, got 201"
    ):
        _row("g" * 201, 2)
    with pytest.raises(RecordError, match=r"^group must be .* got 0 characters"):
        _row("", 2)
    with pytest.raises(RecordError, match=r"^group must be .* got int"):
        _row(7, 2)  # type: ignore[arg-type]


def test_a_grouped_row_may_span_less_than_the_job_but_never_more() -> None:
    assert _job_run("job00001").measurements[0].world_size == 2
    with pytest.raises(RecordError, match=r"group 'big': world_size 16 is larger than the run's 8"):
        Run(
            run_id="r",
            started_at="2026-11-30T10:00:00Z",
            system=SystemInfo(world_size=8),
            measurements=(_row("big", 16),),
        )
    # a benchmark row still spans exactly the run's ranks
    with pytest.raises(RecordError, match=r"measurement world_size 2 != run world_size 8"):
        Run(
            run_id="r",
            started_at="2026-11-30T10:00:00Z",
            system=SystemInfo(world_size=8),
            measurements=(_row(None, 2),),
        )


# -- the JSON format ----------------------------------------------------------------------------------


def test_grouped_run_round_trips_through_json(tmp_path: Path) -> None:
    run = _job_run("job00001")
    d = run_to_dict(run)
    assert d["format"] == "commlens.run/5"
    assert [m["group"] for m in d["measurements"]] == ["tp0", "tp1", "dp0"]
    assert [m["world_size"] for m in d["measurements"]] == [2, 2, 4]
    assert run_from_dict(json.loads(json.dumps(d))) == run
    path = tmp_path / "job.json"
    with path.open("w") as fp:
        dump_run(run, fp)
    assert load_run(path) == run


def test_a_benchmark_run_is_written_as_before_without_group() -> None:
    run = make_run("bench0001")
    d = run_to_dict(run)
    assert d["format"] == "commlens.run/5"
    assert all("group" not in m for m in d["measurements"])
    assert run_from_dict(json.loads(json.dumps(d))) == run


def test_a_reader_of_an_older_version_refuses_a_newer_file_not_drop_what_it_adds() -> None:
    d = json.loads(json.dumps(run_to_dict(_job_run("job00001"))))
    d["format"] = "commlens.run/6"  # what this commlens is to a newer file, as /5 was to one that read up to /4
    with pytest.raises(FormatError, match=r"commlens.run/6 is newer than this commlens reads \(commlens.run/5\)"):
        run_from_dict(d)


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ("g" * 201, r"group must be None \(no group\) or a name of 1\.\.200 characters, got 201 characters"),
        (7, r"group: expected a string or null, got 7"),
        (["tp0"], r"group: expected a string or null, got \['tp0'\]"),
    ],
)
def test_a_bad_group_in_a_file_is_refused_naming_the_field(group: object, message: str) -> None:
    d = json.loads(json.dumps(run_to_dict(_job_run("job00001"))))
    d["measurements"][1]["group"] = group
    with pytest.raises(FormatError, match=message):
        run_from_dict(d)


# -- compare ------------------------------------------------------------------------------------------


def test_compare_pairs_each_group_with_itself() -> None:
    rng = np.random.default_rng(15)
    base = [_jittered(_job_run(f"base{i:04d}", started_at=f"2026-11-30T10:0{i}:00Z"), rng) for i in range(3)]
    cand = [
        _jittered(_job_run(f"cand{i:04d}", tp1_scale=2.0, started_at=f"2026-11-30T11:0{i}:00Z"), rng) for i in range(3)
    ]
    report = compare_runs(base, cand)
    assert [(r.group, round(r.ratio, 1)) for r in report.rows] == [("dp0", 1.0), ("tp0", 1.0), ("tp1", 2.0)]
    assert [r.verdict == "regression" for r in report.rows] == [False, False, True]
    assert [r["group"] for r in report.as_dict()["rows"]] == ["dp0", "tp0", "tp1"]
    bench = compare_runs([make_run("bench0001")], [make_run("bench0002", scale=1.1)])
    assert all("group" not in r for r in bench.as_dict()["rows"])  # benchmark reports read as before


# -- the store ----------------------------------------------------------------------------------------


def test_grouped_run_round_trips_through_the_store(store_url: str) -> None:
    job, bench = _job_run("job00001", tag="train"), make_run("bench0001")
    with Store.open(store_url) as store:
        store.save_runs([job, bench])
        assert store.get_runs(["job00001", "bench0001"]) == [job, bench]
        rows = store.measurement_rows(MeasurementFilter(op="all_reduce", size_bytes=64 * MiB))
        assert [(r.run_id, r.key.group, r.world_size) for r in rows] == [
            ("job00001", "tp0", 2),
            ("job00001", "tp1", 2),
            ("job00001", "dp0", 4),
        ]
        assert len({r.key for r in rows}) == 3
        assert {r.key.group for r in store.measurement_rows(MeasurementFilter(op="all_reduce", size_bytes=1024))} == {
            None
        }


def test_detect_finds_the_slowdown_of_one_group_only(store_url: str) -> None:
    rng = np.random.default_rng(15)
    runs = [
        _jittered(
            _job_run(f"job{i:05d}", tp1_scale=2.0 if i >= 12 else 1.0, started_at=f"2026-11-30T10:{i:02d}:00Z"), rng
        )
        for i in range(24)
    ]
    with Store.open(store_url) as store:
        store.save_runs(runs)
        rows = store.measurement_rows(MeasurementFilter(op="all_reduce"))
    report = detect_history(rows)
    assert report.series == 3
    assert [(c.series.key.group, c.run_id, c.direction) for c in report.changes] == [("tp1", "job00012", "regression")]
    change = report.as_dict()["changes"][0]
    assert (change["group"], change["op"], change["size_bytes"]) == ("tp1", "all_reduce", 64 * MiB)


def test_noise_floors_are_kept_per_group(store_url: str) -> None:
    rng = np.random.default_rng(15)
    runs = [
        _jittered(_job_run(f"job{i:05d}", revision="r1", started_at=f"2026-11-30T10:{i:02d}:00Z"), rng)
        for i in range(3)
    ]
    learned = learn_floors(runs)
    assert sorted(f.key.group for f in learned) == ["dp0", "tp0", "tp1"]
    bench_floor = replace(learned[0], key=learned[0].key._replace(group=None), sd_log=0.5)
    with Store.open(store_url) as store:
        store.floors.save([*learned, bench_floor])
        listed = store.floors.list()
        assert [f.key.group for f in listed] == [None, "dp0", "tp0", "tp1"]
        assert sorted(listed, key=lambda f: f.key.order()) == sorted(
            [*learned, bench_floor], key=lambda f: f.key.order()
        )
        floors = store.floors.load()
        tp0 = next(f for f in learned if f.key.group == "tp0")
        assert floors[FloorKey(tp0.fingerprint, tp0.key)] == tp0.sd_log
        assert floors[bench_floor.series] == 0.5
        # learning again replaces each group's floor and leaves the others
        store.floors.save([replace(tp0, sd_log=0.25)])
        assert [(f.key.group, f.sd_log == 0.25) for f in store.floors.list()] == [
            (None, False),
            ("dp0", False),
            ("tp0", True),
            ("tp1", False),
        ]
        # the unique key holds for a series without a group too (stored as '', not NULL)
        fields = {"fingerprint": bench_floor.fingerprint, **bench_floor.key._asdict(), **bench_floor.as_dict()}
        row = {c.name: fields[c.name] for c in NoiseFloorModel.__table__.c if c.name in fields}
        row.update(redop="sum", root=-1, group_name="")
        with pytest.raises(IntegrityError), store.engine.begin() as conn:
            conn.execute(insert(NoiseFloorModel), [{k: v for k, v in row.items() if k != "id"}])


def test_csv_export_names_each_rows_group(tmp_path: Path) -> None:
    out = tmp_path / "all.csv"
    export_runs([_job_run("job00001"), make_run("bench0001")], out, "csv")
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["group"] for r in rows] == ["tp0", "tp1", "dp0", "", ""]


# -- the migration ------------------------------------------------------------------------------------


def test_migration_0004_to_0005_keeps_every_row_without_a_group(store_url: str, tmp_path: Path) -> None:
    runs = [make_run("old00001", tag="nightly", revision="r1"), make_run("old00002", revision="r1", scale=1.5)]
    floor = NoiseFloor(
        fingerprint=runs[0].system.fingerprint(),
        key=MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 1024, False),
        sd_log=0.04,
        runs=2,
        groups=1,
        learned_at="2026-11-30T00:00:00+00:00",
    )
    make_old_store(store_url, runs, tmp_path, revision="0004", floors=[floor])
    with pytest.raises(StoreError, match=rf"has schema 0004, this commlens needs {SCHEMA_REVISION}"):
        Store.open(store_url)

    done = upgrade_schema(store_url)
    assert (done.before, done.after) == ("0004", SCHEMA_REVISION)
    engine = make_engine(store_url)
    try:
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM measurements WHERE group_name IS NULL")) == 4
            assert conn.scalar(text("SELECT count(*) FROM measurements")) == 4
            assert conn.scalar(text("SELECT group_name FROM noise_floors")) == ""
    finally:
        engine.dispose()
    with Store.open(store_url) as store:
        assert store.get_runs(["old00001", "old00002"]) == runs  # bit for bit, no group
        assert store.floors.list() == [floor]
        # what 0005 added works on the upgraded store
        store.save_run(_job_run("job00001"))
        assert store.get_run("job00001") == _job_run("job00001")
        grouped = replace(floor, key=floor.key._replace(group="tp0"), sd_log=0.08)
        store.floors.save([grouped])
        assert store.floors.list() == [floor, grouped]


def test_the_compare_table_shows_each_rows_group(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from commlens.cli import regress_cmd  # noqa: F401  (registers compare)
    from commlens.cli.app import app
    from commlens.store import Store

    db = f"sqlite:///{tmp_path / 'g.db'}"
    rng = np.random.default_rng(3)
    with Store.open(db) as store:
        store.save_run(_jittered(_job_run("base0000aaaa"), rng))
        store.save_run(_jittered(_job_run("cand0000bbbb", tp1_scale=2.0, started_at="2026-11-30T11:00:00Z"), rng))
    result = CliRunner().invoke(app, ["compare", "base0000aaaa", "cand0000bbbb", "--db", db])
    lines = [line for line in result.output.splitlines() if "all_reduce" in line]
    assert "group" in result.output
    assert len(lines) == 3 and [line.split()[0] for line in lines] == ["dp0", "tp0", "tp1"], result.output


def test_show_prints_one_table_per_process_group_and_no_bench_preamble(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from commlens.cli import runs_cmd  # noqa: F401  (registers show)
    from commlens.cli.app import app
    from commlens.store import Store

    db = f"sqlite:///{tmp_path / 'g.db'}"
    with Store.open(db) as store:
        store.save_run(_job_run("job00000aaaa", tp1_scale=2.0))
    result = CliRunner().invoke(app, ["show", "job00000aaaa", "--db", db])
    assert result.exit_code == 0, result.output
    out = result.output
    assert [line for line in out.splitlines() if line.startswith("# process group")] == [
        "# process group dp0",
        "# process group tp0",
        "# process group tp1",
    ]
    rows = [line for line in out.splitlines() if line.strip() and not line.startswith("#")]
    assert len(rows) == 3  # the two TP groups' rows of one size are not merged into one
    assert "# ops" not in out  # a monitor run's config is no bench config
