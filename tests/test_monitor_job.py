"""The collector as a Python call (issue 29): ``run_collector(CollectorJob)`` gives what ``commlens monitor
collect --json`` prints, and a job that cannot run is refused when it is made, before any port is bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchutil import commlens

from commlens.ingest.nccl_inspector import records_from_inspector
from commlens.monitor.collect import CollectError
from commlens.monitor.job import CollectorJob, run_collector

DUMPS = Path(__file__).parent / "data" / "nccl_inspector" / "compact"


def test_a_python_caller_gets_the_summary_the_command_prints() -> None:
    summary = run_collector(CollectorJob(has_records=True, replay=True), records_from_inspector(DUMPS))
    printed = commlens("monitor", "collect", "--inspector", str(DUMPS), "--replay", "--json")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == json.loads(json.dumps(summary))
    assert summary["records"] > 0 and summary["groups"]


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
