"""``Run.config`` as a typed union (bench settings, ingested settings, monitor job, replay): written with its kind
in commlens.run/5, read back typed from files of every older version and from store rows written before kinds
(SQLite and PostgreSQL), and refused with a message naming the field when it is not one of the kinds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from store_backends import make_run, make_system, pg_server, pg_url, store_url  # noqa: F401  (fixtures)

from commlens.ingest import load_runs
from commlens.results import (
    BenchSettings,
    FormatError,
    IngestedSettings,
    MonitorJob,
    RecordError,
    ReplayRun,
    Run,
    RunConfig,
    load_run,
    run_from_dict,
    run_to_dict,
)
from commlens.results.collectives import CollectiveRecord, aggregate
from commlens.store import Store, db_url

BENCH = BenchSettings({"ops": ["all_reduce"], "iters": 20, "dtypes": ["float32"], "extra": {"tag": "nightly"}})
INGESTED = IngestedSettings({"format": "nccl-tests", "runs": [{"op": "all_reduce", "check": "passed"}]})
REPLAY = ReplayRun(
    plan_source="kineto",
    plan_backend=None,
    plan_world_size=4,
    plan_calls=12,
    plan_files=("trace-0.json",),
    settings={"iterations": 3, "compute": "sleep"},
    comparison={"collectives": 2, "recorded_total_s": 0.5},
)


def _windows() -> MonitorJob:
    records = [
        CollectiveRecord(rank=0, group="dp0", group_size=4, seq=i, op=op, size_bytes=size, dtype="bfloat16",
                         start_s=100.0 + i, end_s=100.0 + i + 0.002 * (i + 1), step=i)
        for i, (op, size) in enumerate([("all_reduce", 1 << 20), ("all_reduce", 1 << 20), ("all_gather", 4096)])
    ]  # fmt: skip
    rows = aggregate(records, window=0, start_s=100.0, end_s=110.0)
    return MonitorJob(
        job_id="job-7",
        rank=0,
        window_s=10.0,
        window_steps=None,
        model="gpt 1.3b on 4 ranks",
        windows=tuple(rows),
        size_buckets=("4K", "1M"),
    )


MONITOR = _windows()
KINDS: dict[str, tuple[str, RunConfig]] = {
    "bench": ("commlens", BENCH),
    "ingested": ("nccl-tests", INGESTED),
    "monitor": ("monitor", MONITOR),
    "replay": ("replay", REPLAY),
}


def _run(kind: str) -> Run:
    source, config = KINDS[kind]
    run = make_run("c0ffee" + kind)
    return Run(**{**run.__dict__, "source": source, "config": config})


def _older(d: dict[str, Any], version: int) -> dict[str, Any]:
    """``d`` (a version-5 run) as versions 1-4 wrote it: no config kind; 1 and 2 with nccl-tests' "none"/-1."""
    config = {k: v for k, v in d["config"].items() if k != "kind"}
    measurements = d["measurements"]
    if version < 3:
        measurements = [{**m, "root": -1 if m["root"] is None else m["root"]} for m in measurements]
    return {**d, "format": f"commlens.run/{version}", "config": config, "measurements": measurements}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_config_is_written_with_its_kind_and_read_back_typed(kind: str, tmp_path: Path) -> None:
    run = _run(kind)
    d = json.loads(json.dumps(run_to_dict(run)))
    assert d["format"] == "commlens.run/5"
    assert next(iter(d["config"])) == "kind" and d["config"]["kind"] == kind
    back = run_from_dict(d)
    assert type(back.config) is type(run.config) and back == run


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_files_of_every_older_version_load_with_the_kind_their_source_wrote(
    kind: str, version: int, tmp_path: Path
) -> None:
    run = _run(kind)
    path = tmp_path / f"v{version}.json"
    path.write_text(json.dumps(_older(json.loads(json.dumps(run_to_dict(run))), version)))
    loaded = load_run(path)
    assert loaded.config == run.config and loaded == run


def test_an_old_monitor_run_arrives_with_typed_windows(tmp_path: Path) -> None:
    d = _older(json.loads(json.dumps(run_to_dict(_run("monitor")))), 4)
    d["config"]["windows"].append({"window": "1", "op": "all_reduce"})  # a hand-edited window: dropped, counted
    path = tmp_path / "monitor-v4.json"
    path.write_text(json.dumps(d))
    job = load_run(path).config
    assert isinstance(job, MonitorJob) and job.dropped_windows == 1
    assert [(w.op, w.size_bucket, w.count) for w in job.windows] == [
        ("all_gather", 4096, 1),
        ("all_reduce", 1 << 20, 2),
    ]
    assert [w.as_wire() for w in job.windows] == d["config"]["windows"][:2]


@pytest.mark.parametrize(
    ("source", "config", "message"),
    [
        ("commlens", {"kind": "sweep"}, "config.kind: expected one of bench, ingested, monitor, replay, got 'sweep'"),
        ("commlens", [1, 2], "config: expected an object, got list"),
        ("monitor", {"rank": 0, "window_s": 10, "windows": []}, "config.job_id: expected a string"),
        ("monitor", {"job_id": "j", "rank": -1, "window_s": 10}, "config.rank: expected an integer >= 0"),
        ("monitor", {"job_id": "j", "rank": 0, "window_s": "10"}, "config.window_s: expected a finite number"),
        ("replay", {"replay": {"plan_source": "kineto"}}, "config.plan_world_size: expected an integer >= 0"),
    ],
)
def test_a_config_that_is_no_kind_is_refused_naming_the_field(source: str, config: Any, message: str) -> None:
    d = json.loads(json.dumps(run_to_dict(make_run("bad"))))
    d.update(format="commlens.run/4", source=source, config=config)
    with pytest.raises(FormatError) as info:
        run_from_dict(d)
    assert message in str(info.value)


def test_a_run_refuses_a_plain_dict_as_its_config() -> None:
    with pytest.raises(RecordError, match="config must be a run config"):
        Run(run_id="x", started_at="2024-01-01T00:00:00Z", system=make_system(), measurements=(), config={})  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_store_rows_from_before_kinds_load_typed(store_url: str, kind: str) -> None:  # noqa: F811
    run = _run(kind)
    with Store.open(store_url) as store:
        store.save_runs([run])
        old = {k: v for k, v in run.config.as_dict().items() if k != "kind"}  # as the column held it before
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE runs SET config = :c WHERE run_id = :r"), {"c": json.dumps(old), "r": run.run_id})
        back = store.get_run(run.run_id)
    assert type(back.config) is type(run.config) and back == run


def test_an_ingested_commlens_file_keeps_its_kind(tmp_path: Path) -> None:
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(run_to_dict(_run("monitor"))))
    (run,) = load_runs(path)
    assert run.config == MONITOR
    with Store.open(db_url(str(tmp_path / "s.db"))) as store:
        store.save_runs([run])
        assert store.get_run(run.run_id).config == MONITOR
