"""What compare and detect do with a run whose results check failed (status ``check_failed``, as ingest stores an
nccl-tests log with ``# Out of bounds values : N FAILED``): compare does not judge its wrong rows, detect leaves
the run out of history. Runs are built as records and kept in a real SQLite store."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from commlens.cli import regress_cmd  # noqa: F401  (registers compare and detect)
from commlens.cli.app import app
from commlens.regress import compare_runs, detect_history
from commlens.results import Measurement, Run, SystemInfo
from commlens.store import Store

SYSTEM = SystemInfo(world_size=4, backend="gloo", cpu_model="test-cpu", cpu_cores=8, torch_version="2.4.0")
SIZES = (1024, 1 << 20)
T0 = datetime(2025, 3, 1, 2, 0, tzinfo=timezone.utc)


def _run(
    run_id: str,
    factor: dict[int, float],
    seed: int,
    *,
    wrong: dict[int, int | None] | None = None,
    status: str = "complete",
    when: datetime = T0,
) -> Run:
    rng = np.random.default_rng(seed)
    wrong = wrong or {}
    ms = [
        Measurement(
            op="all_reduce",
            dtype="float32",
            redop="sum",
            size_bytes=size,
            count=size // 4,
            in_place=False,
            world_size=4,
            nwrong=wrong.get(size, 0),
            samples_s=tuple((20e-6 + size / 5e9) * factor[size] * (1.0 + rng.normal(0.0, 0.01, 20))),
            rounds=(4,) * 5,
        )  # as bench --rounds 5 -n 20 times it
        for size in SIZES
    ]
    return Run(run_id=run_id, started_at=when.isoformat(), system=SYSTEM, measurements=tuple(ms), status=status)  # type: ignore[arg-type]


def test_compare_does_not_judge_rows_with_wrong_results() -> None:
    base = _run("base00000000", {1024: 1.0, 1 << 20: 1.0}, 1)
    # 30 % slower at 1 MiB, but that row's results were wrong: no regression is called on it.
    failed = _run("fail00000000", {1024: 1.0, 1 << 20: 1.3}, 2, wrong={1 << 20: 3}, status="check_failed")
    report = compare_runs([base], [failed], base_label="base", candidate_label="cand")
    small, large = report.rows
    assert small.verdict == "no change"
    assert (large.verdict, large.reason) == (
        "unknown",
        "results check failed (cand): wrong results are not timed results",
    )
    assert large.ratio > 1.25 and not report.has_regression
    assert report.warnings[-1] == (
        "cand: results check failed in run fail00000000: its rows with wrong results "
        "are not judged (verdict unknown); its other rows are"
    )
    # A failed run whose check does not say which rows (the pre-2.13 'error' column): no row is judged.
    unlocated = _run(
        "fail11111111", {1024: 1.0, 1 << 20: 1.3}, 3, wrong={1024: None, 1 << 20: None}, status="check_failed"
    )
    assert [r.verdict for r in compare_runs([base], [unlocated]).rows] == ["unknown", "unknown"]
    # The same slowdown on checked results is a regression.
    fine = dataclasses.replace(
        failed, status="complete", measurements=tuple(dataclasses.replace(m, nwrong=0) for m in failed.measurements)
    )
    assert [r.verdict for r in compare_runs([base], [fine]).rows] == ["no change", "regression"]


def test_detect_leaves_failed_runs_out_of_history(tmp_path: Path) -> None:
    """60 nightlies; the last 20 are 8 % slower at 1 MiB, and their check failed: no change is reported."""
    runs = [
        _run(
            f"run-{i:03d}",
            {1024: 1.0, 1 << 20: 1.08 if i >= 40 else 1.0},
            i,
            status="check_failed" if i >= 40 else "complete",
            when=T0 + timedelta(days=i),
        )
        for i in range(60)
    ]
    db = tmp_path / "r.db"
    with Store.open(str(db)) as store:
        store.save_runs(runs)
        rows = store.measurement_rows()
    assert {r.status for r in rows} == {"complete", "check_failed"}
    report = detect_history(rows)
    assert report.changes == () and report.points == 80
    assert report.excluded_runs == tuple(f"run-{i:03d}" for i in range(40, 60))
    assert report.summary_line() == (
        "2 series, 80 points: 0 changes (0 regressions, 0 improvements); 20 runs left out (results check failed)"
    )
    # Were they checked results, the step would be found at run 40.
    checked = detect_history([dataclasses.replace(r, status="complete") for r in rows])
    assert [c.run_id for c in checked.regressions] == ["run-040"]

    result = CliRunner().invoke(app, ["detect", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["excluded_runs"] == [f"run-{i:03d}" for i in range(40, 60)] and doc["changes"] == []
    table = CliRunner().invoke(app, ["detect", "--db", str(db)])
    assert table.exit_code == 0 and table.stdout.splitlines()[-1].endswith("20 runs left out (results check failed)")
