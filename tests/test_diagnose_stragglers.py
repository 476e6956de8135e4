"""commlens diagnose stragglers: a recorded gloo training loop with a known late rank.

tests/data/stragglers_late_rank1/ holds the Kineto (PyTorch profiler) traces
of tests/scenarios/straggler_trace.py: 3 ranks on one host, 10 steps, rank 1
sleeping 20 ms before each all_reduce (broadcasts are on time).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commlens.cli import diagnose_cmd  # noqa: F401  (registers the diagnose commands)
from commlens.cli.app import app
from commlens.diagnose.stragglers import (
    StragglerError,
    StragglerParams,
    detect_stragglers,
    load_kineto_traces,
    table_from_durations,
)

TRACES = sorted((Path(__file__).parent / "data" / "stragglers_late_rank1").glob("trace_rank*.json"))


def _row(report, op: str, rank: int) -> dict:
    return next(r for r in report.ranks_table if r["op"] == op and r["rank"] == rank)


def test_late_rank_found_with_exact_figures() -> None:
    table = load_kineto_traces(TRACES)
    assert table.ranks == (0, 1, 2) and sorted(table.starts_s) == ["gloo:all_reduce", "gloo:broadcast"]
    assert len(table.starts_s["gloo:all_reduce"]) == 10
    report = detect_stragglers(table)
    assert report.shared_clock and report.n_collectives == 20
    [straggler] = report.stragglers
    assert (straggler.rank, straggler.kind, straggler.op) == (1, "late_arrival", "gloo:all_reduce")
    late = _row(report, "gloo:all_reduce", 1)
    assert late["lateness_p50_s"] == pytest.approx(27832.6e-6, abs=0.1e-6)  # 20 ms sleep + matmul skew
    assert late["last_arrival_fraction"] == 1.0
    assert _row(report, "gloo:all_reduce", 2)["lateness_p50_s"] == 0.0
    assert straggler.excess_s == pytest.approx(27416.3e-6, abs=0.1e-6)
    assert all(not r["verdicts"] for r in report.ranks_table if r["op"] == "gloo:broadcast")


def test_clock_offset_of_another_host_is_removed(tmp_path: Path) -> None:
    """Rank 2's trace moved to a host whose clock is 5 s ahead: same verdict, offset recovered."""
    paths = []
    for path in TRACES:
        data = json.loads(path.read_text())
        if data["distributedInfo"]["rank"] == 2:
            data["host_name"] = "other-host"
            for e in data["traceEvents"]:
                if "ts" in e:
                    e["ts"] = float(e["ts"]) + 5e6
        out = tmp_path / path.name
        out.write_text(json.dumps(data))
        paths.append(out)
    report = detect_stragglers(load_kineto_traces(paths))
    assert not report.shared_clock
    assert _row(report, "gloo:all_reduce", 2)["clock_offset_s"] == pytest.approx(5.0, abs=2e-3)
    assert [(s.rank, s.kind, s.op) for s in report.stragglers] == [(1, "late_arrival", "gloo:all_reduce")]
    assert _row(report, "gloo:all_reduce", 1)["own_time_p50_s"] is None  # not judged across clocks


def test_durations_only_still_find_the_late_rank() -> None:
    """commlens' own per-rank records hold durations [rank][iteration]; the late rank's are the shortest."""
    table = load_kineto_traces(TRACES)
    op = "gloo:all_reduce"
    durations = [[e - s for s, e in zip(col_s, col_e)]
                 for col_s, col_e in zip(zip(*table.starts_s[op]), zip(*table.ends_s[op]))]
    report = detect_stragglers(table_from_durations("all_reduce", durations))
    assert not report.arrival_known
    assert [(s.rank, s.kind) for s in report.stragglers] == [(1, "late_arrival")]


def test_no_straggler_under_a_higher_threshold() -> None:
    report = detect_stragglers(load_kineto_traces(TRACES), StragglerParams(late_threshold_s=0.05))
    assert report.stragglers == ()


def test_cli_exit_codes_and_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["diagnose", "stragglers", *map(str, TRACES)], catch_exceptions=False)
    assert result.exit_code == 1 and "stragglers: rank 1 (late_arrival, gloo:all_reduce)" in result.output
    result = runner.invoke(app, ["diagnose", "stragglers", "--json", *map(str, TRACES)], catch_exceptions=False)
    assert json.loads(result.output)["stragglers"][0]["rank"] == 1
    result = runner.invoke(app, ["diagnose", "stragglers", "--late-threshold-us", "50000", *map(str, TRACES)],
                           catch_exceptions=False)
    assert result.exit_code == 0 and "no straggler" in result.output
    broken = tmp_path / "trace_rank9.json"
    broken.write_text("{")
    result = runner.invoke(app, ["diagnose", "stragglers", str(TRACES[0]), str(broken)], catch_exceptions=False)
    assert result.exit_code == 2 and "trace_rank9.json: not a readable Chrome trace" in result.stderr
    with pytest.raises(StragglerError, match="at least 2 ranks"):
        load_kineto_traces(TRACES[:1])


def test_stored_run_with_per_rank_samples(tmp_path: Path) -> None:
    """``--run``: a run whose measurement keeps per-rank samples (here the recorded all_reduce durations)."""
    from commlens.results import Measurement, Run, SystemInfo
    from commlens.store import Store

    table = load_kineto_traces(TRACES)
    op = "gloo:all_reduce"
    durations = tuple(tuple(e - s for s, e in zip(col_s, col_e))
                      for col_s, col_e in zip(zip(*table.starts_s[op]), zip(*table.ends_s[op])))
    m = Measurement(op="all_reduce", dtype="float32", redop="sum", size_bytes=65536, count=16384, in_place=False,
                    world_size=3, samples_s=tuple(max(col) for col in zip(*durations)), rank_samples_s=durations)
    run = Run(run_id="straggler-run-1", started_at="2026-11-29T18:12:00+00:00",
              system=SystemInfo(world_size=3, backend="gloo", cpu_model="test-cpu", cpu_cores=2,
                                torch_version="2.13.0"),
              measurements=(m,))
    db = tmp_path / "runs.db"
    with Store.open(str(db)) as store:
        store.save_run(run)
    result = CliRunner().invoke(app, ["diagnose", "stragglers", "--run", "straggler-run-1", "--db", str(db), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["source"] == "run straggler-run-1" and out["arrival_known"] is False
    assert [(s["rank"], s["kind"], s["op"]) for s in out["stragglers"]] == [(1, "late_arrival", "all_reduce/65536B")]
