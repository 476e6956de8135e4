"""The collector as a Python call (issue 29): ``run_collector(CollectorJob)`` gives a frozen report whose
``as_dict()`` is what ``commlens monitor collect --json`` prints, and a job that cannot run is refused when it is made, before any port is bound."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from benchutil import commlens
from test_monitor import synthetic_job

from commlens.ingest.nccl_inspector import records_from_inspector
from commlens.monitor.collect import CollectError, Collector, CollectSettings, replay
from commlens.monitor.job import CollectorJob, run_collector

DUMPS = Path(__file__).parent / "data" / "nccl_inspector" / "compact"


def test_a_python_caller_gets_the_summary_the_command_prints() -> None:
    report = run_collector(CollectorJob(has_records=True, replay=True), records_from_inspector(DUMPS))
    printed = commlens("monitor", "collect", "--inspector", str(DUMPS), "--replay", "--json")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == json.dumps(report.as_dict(), indent=2) + "\n"
    assert report.records > 0 and report.groups and all(g.joined > 0 for g in report.groups)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.records = 0  # type: ignore[misc]


def test_the_report_of_a_late_rank_is_the_collectors_own_summary_with_its_alerts_frozen() -> None:
    records = synthetic_job(60, late_rank=2, late_from=20, late_s=0.05)
    settings = CollectSettings(persist=3)
    report = run_collector(CollectorJob(has_records=True, replay=True, settings=settings, interval_s=0.2), records)
    collector = Collector(settings)
    replay(records, collector, 0.2)
    assert report.as_dict() == collector.summary()
    assert [(a.kind, a.rank, a.cleared_at_s) for a in report.alerts] == [("straggler", 2, None)]
    assert report.active == report.alerts and "arrives late" in report.alerts[0].text
    assert isinstance(report.alerts[0].detail, dict) and report.alerts[0].detail is not collector.history[0].detail


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give the job's --endpoint"),
        ({"endpoints": ("127.0.0.1:1",), "replay": True}, "--replay reads files"),
        ({"endpoints": ("localhost",)}, "expected HOST:PORT"),
        ({"has_records": True, "interval_s": 0.0}, "--interval 0.0: must be a number > 0"),
        ({"has_records": True, "duration_s": float("inf")}, "--duration inf"),
    ],
)
def test_a_job_that_cannot_run_is_refused_when_made(fields: dict, message: str) -> None:
    with pytest.raises(CollectError, match=message.replace("(", r"\(")) as caught:
        CollectorJob(**fields)
    assert caught.value.exit_code == 2
