"""How the launcher names the rank at fault from the ranks' error reports (``error-rank{R}.json``), when some
of those files are damaged: a report that is not what a rank writes counts as no report, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlens.bench.launcher import explain_failure


def _report(workdir: Path, who: int, **fields: object) -> None:
    (workdir / f"error-rank{who}.json").write_text(json.dumps(fields))


def test_the_first_rank_that_failed_is_named_and_the_others_said_to_have_waited(tmp_path: Path) -> None:
    _report(tmp_path, 0, rank=0, kind="failure", message="rank 0: all_reduce: Connection closed by peer", time=4.0)
    _report(tmp_path, 1, rank=1, kind="failure", message="rank 1: all_reduce: boom first", time=5.0)
    failure = explain_failure(tmp_path, 2, {}, 30.0)
    assert str(failure) == "rank 1: all_reduce: boom first (ranks 0 stopped waiting for it)"


@pytest.mark.parametrize(
    "damaged",
    [
        "not json {",
        json.dumps(["a", "list"]),
        json.dumps({"rank": 1, "kind": "failure", "time": 1.0}),  # no message
        json.dumps({"rank": 1, "kind": "failure", "message": "x", "time": "soon"}),
        json.dumps({"rank": "1", "kind": "failure", "message": "x", "time": 1.0}),
        json.dumps({"rank": 1, "kind": "failure", "message": "x", "time": True}),
    ],
)
def test_a_damaged_report_counts_as_none(damaged: str, tmp_path: Path) -> None:
    _report(tmp_path, 0, rank=0, kind="failure", message="rank 0: Connection closed by peer", time=10.0)
    (tmp_path / "error-rank1.json").write_text(damaged)
    (tmp_path / "state-rank1.txt").write_text("rank 1: all_reduce size 1024 B float32 sum")
    failure = explain_failure(tmp_path, 2, {}, 30.0)
    # rank 1 left no usable report: it is the rank that went silent, named where its state file last saw it
    assert str(failure) == (
        "rank 1 hung or died without a report (last seen: rank 1: all_reduce size 1024 B float32 sum); "
        "ranks 0 gave up after the 30 s timeout"
    )
