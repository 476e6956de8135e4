"""commlens diagnose stragglers: recorded gloo jobs, an NCCL multi-host fixture, HTA's real traces.

tests/data/stragglers_late_rank1/ holds the Kineto (PyTorch profiler) traces
of tests/scenarios/straggler_trace.py: 3 ranks on one host, 10 steps, rank 1
sleeping 20 ms before each all_reduce (broadcasts are on time).
tests/data/kineto_gloo_sampled/ is the same job profiled on a schedule (gzip,
rank 2's window one step later). tests/data/kineto_nccl_4rank_2host/ is a
4-rank NCCL job on 2 hosts (node-b's clock 2.5 s ahead, rank 3 late by 3 ms
at every all_reduce) in the layout of a real NCCL trace (see its README).
"""

from __future__ import annotations

import gzip
import json
import random
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

DATA = Path(__file__).parent / "data"
TRACES = sorted((DATA / "stragglers_late_rank1").glob("trace_rank*.json"))
NCCL_2HOST = sorted((DATA / "kineto_nccl_4rank_2host").glob("rank-*.pt.trace.json.gz"))
GLOO_SAMPLED = sorted((DATA / "kineto_gloo_sampled").glob("*.pt.trace.json.gz"))


def _rewrite(paths: list[Path], out: Path, change) -> list[Path]:  # type: ignore[no-untyped-def]
    """Copies of ``paths`` under ``out``, each trace passed through ``change(trace)`` first (gzipped)."""
    written = []
    for path in paths:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        change(data)
        target = out / (path.name if path.name.endswith(".gz") else path.name + ".gz")
        target.write_bytes(gzip.compress(json.dumps(data).encode()))
        written.append(target)
    return written


def _row(report, op: str, rank: int) -> dict:
    return next(r for r in report.ranks_table if r["op"] == op and r["rank"] == rank)


def test_late_rank_found_with_exact_figures() -> None:
    table = load_kineto_traces(TRACES)
    assert table.ranks == (0, 1, 2) and sorted(table.starts_s) == ["gloo:all_reduce", "gloo:broadcast"]
    assert len(table.starts_s["gloo:all_reduce"]) == 10
    report = detect_stragglers(table)
    assert report.shared_clock and report.clock_method == "shared_clock" and report.n_collectives == 20
    assert report.matching["matched"] == 20 and report.matching["method"].startswith("order within")
    [straggler] = report.stragglers
    assert (straggler.rank, straggler.kind, straggler.op) == (1, "late_arrival", "gloo:all_reduce")
    late = _row(report, "gloo:all_reduce", 1)
    assert late["lateness_p50_s"] == pytest.approx(27832.6e-6, abs=0.1e-6)  # 20 ms sleep + matmul skew
    assert late["last_arrival_fraction"] == 1.0
    assert _row(report, "gloo:all_reduce", 2)["lateness_p50_s"] == 0.0
    assert straggler.excess_s == pytest.approx(27416.3e-6, abs=0.1e-6)
    assert all(not r["verdicts"] for r in report.ranks_table if r["op"] == "gloo:broadcast")
    assert all(r["own_time_p50_s"] is None for r in report.ranks_table if r["op"] == "gloo:broadcast")


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
    assert not report.shared_clock and report.clock_method == "estimated_offsets"
    assert "other-host +5.000296 s (spread 44 µs, 10 ends)" in report.clock_note
    assert _row(report, "gloo:all_reduce", 2)["clock_offset_s"] == pytest.approx(5.0, abs=2e-3)
    assert [(s.rank, s.kind, s.op) for s in report.stragglers] == [(1, "late_arrival", "gloo:all_reduce")]
    assert _row(report, "gloo:all_reduce", 1)["own_time_p50_s"] is None  # not judged across clocks


def test_durations_only_still_find_the_late_rank() -> None:
    """commlens' own per-rank records hold durations [rank][iteration]; the late rank's are the shortest."""
    table = load_kineto_traces(TRACES)
    op = "gloo:all_reduce"
    durations = [
        [e - s for s, e in zip(col_s, col_e)] for col_s, col_e in zip(zip(*table.starts_s[op]), zip(*table.ends_s[op]))
    ]
    report = detect_stragglers(table_from_durations("all_reduce", durations))
    assert not report.arrival_known
    assert [(s.rank, s.kind) for s in report.stragglers] == [(1, "late_arrival")]


def test_no_straggler_under_a_higher_threshold() -> None:
    report = detect_stragglers(load_kineto_traces(TRACES), StragglerParams(late_threshold_s=0.05))
    assert report.stragglers == ()


def test_cli_exit_codes_and_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["diagnose", "stragglers", *map(str, TRACES)], catch_exceptions=False)
    assert result.exit_code == 1
    assert "stragglers (shared_clock): rank 1 (late_arrival, gloo:all_reduce)" in result.output
    assert "# matched: 20 collectives matched on all 3 ranks by order within" in result.output
    result = runner.invoke(app, ["diagnose", "stragglers", "--json", *map(str, TRACES)], catch_exceptions=False)
    assert json.loads(result.output)["stragglers"][0]["rank"] == 1
    result = runner.invoke(
        app, ["diagnose", "stragglers", "--late-threshold-us", "50000", *map(str, TRACES)], catch_exceptions=False
    )
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
    durations = tuple(
        tuple(e - s for s, e in zip(col_s, col_e))
        for col_s, col_e in zip(zip(*table.starts_s[op]), zip(*table.ends_s[op]))
    )
    m = Measurement(
        op="all_reduce",
        dtype="float32",
        redop="sum",
        size_bytes=65536,
        count=16384,
        in_place=False,
        world_size=3,
        samples_s=tuple(max(col) for col in zip(*durations)),
        rank_samples_s=durations,
    )
    run = Run(
        run_id="straggler-run-1",
        started_at="2026-11-29T18:12:00+00:00",
        system=SystemInfo(world_size=3, backend="gloo", cpu_model="test-cpu", cpu_cores=2, torch_version="2.13.0"),
        measurements=(m,),
    )
    db = tmp_path / "runs.db"
    with Store.open(str(db)) as store:
        store.save_run(run)
    result = CliRunner().invoke(
        app, ["diagnose", "stragglers", "--run", "straggler-run-1", "--db", str(db), "--json"], catch_exceptions=False
    )
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["source"] == "run straggler-run-1" and out["arrival_known"] is False
    assert [(s["rank"], s["kind"], s["op"]) for s in out["stragglers"]] == [(1, "late_arrival", "all_reduce/65536B")]


def test_nccl_two_hosts_offsets_estimated_from_kernel_ends() -> None:
    """4 NCCL ranks on 2 hosts, node-b 2.5 s ahead, rank 3 late 3 ms: the offset recovered, rank 3 named."""
    table = load_kineto_traces(NCCL_2HOST)
    assert table.span == "gpu_kernel" and table.hosts == ("node-a", "node-a", "node-b", "node-b")
    report = detect_stragglers(table)
    assert report.clock_method == "estimated_offsets" and not report.shared_clock
    assert report.clock_note == "2 hosts; offsets against node-a: node-b +2.500000 s (spread 2 µs, 20 ends)"
    assert report.matching["matched"] == 15 and report.matching["steps"] == [11, 12, 13, 14, 15]
    assert report.matching["unmatched"] == {"0": 3, "1": 3, "2": 3, "3": 3}
    assert report.n_collectives == 15
    [straggler] = report.stragglers
    assert (straggler.rank, straggler.kind, straggler.op) == (3, "late_arrival", "nccl:all_reduce")
    assert straggler.excess_s == pytest.approx(2989.2e-6, abs=0.1e-6)
    row = _row(report, "nccl:all_reduce", 3)
    assert row["clock_offset_s"] == pytest.approx(2.5, abs=1e-6)
    assert row["lateness_p50_s"] == pytest.approx(2998.0e-6, abs=0.1e-6) and row["last_arrival_fraction"] == 1.0
    assert row["shortest_fraction"] == 1.0  # started last, ran shortest: HTA's rule agrees with the clock
    assert _row(report, "nccl:broadcast", 3)["shortest_fraction"] is None
    assert row["own_time_p50_s"] is None  # not judged across clocks


def test_nccl_hosts_unknown_each_rank_its_own_clock(tmp_path: Path) -> None:
    paths = _rewrite(NCCL_2HOST, tmp_path, lambda t: t.pop("host_name"))
    report = detect_stragglers(load_kineto_traces(paths))
    assert report.clock_method == "estimated_offsets"
    assert report.clock_note.startswith("hosts unknown (the traces have no host_name); offsets against rank 0: ")
    assert [round(r["clock_offset_s"], 3) for r in report.ranks_table if r["op"] == "nccl:all_reduce"] == [
        0.0,
        0.0,
        2.5,
        2.5,
    ]
    assert [(s.rank, s.op) for s in report.stragglers] == [(3, "nccl:all_reduce")]


def test_nccl_without_usable_offsets_judged_from_kernel_durations(tmp_path: Path) -> None:
    """node-b's clock jumps by up to ±20 ms per collective: no offset fits, HTA's rule (shortest kernel) decides."""
    rng = random.Random(3)

    def drift(trace: dict) -> None:
        if trace["host_name"] != "node-b":
            return
        jumps: dict[int, float] = {}
        for e in trace["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_user_annotation"):
                key = e["args"]["External id"] // 3
                e["ts"] += jumps.setdefault(key, rng.uniform(-20e3, 20e3))

    report = detect_stragglers(load_kineto_traces(_rewrite(NCCL_2HOST, tmp_path, drift)))
    assert report.clock_method == "durations"
    assert "clock offsets cannot be estimated" in report.clock_note
    assert [(s.rank, s.kind, s.op) for s in report.stragglers] == [(3, "late_arrival", "nccl:all_reduce")]
    assert _row(report, "nccl:all_reduce", 3)["lateness_p50_s"] == pytest.approx(2998.0e-6, abs=30e-6)
    assert _row(report, "nccl:broadcast", 0)["verdicts"] == ["not judged"]  # a broadcast's durations say nothing


def test_sequence_numbers_match_where_recorded(tmp_path: Path) -> None:
    """Newer PyTorch records "Seq" on record_param_comms: identity then beats order and steps."""

    def add_seq(trace: dict) -> None:
        rank = trace["distributedInfo"]["rank"]
        first_step = 11 if rank == 2 else 10
        n = (first_step - 10) * 3
        trace["traceEvents"] = [e for e in trace["traceEvents"] if not e.get("name", "").startswith("ProfilerStep")]
        for e in trace["traceEvents"]:
            if e.get("name") == "record_param_comms":
                e["args"]["Seq"] = n
                n += 1

    (tmp_path / "seq").mkdir()
    report = detect_stragglers(load_kineto_traces(_rewrite(NCCL_2HOST, tmp_path / "seq", add_seq)))
    assert report.matching["method"] == "sequence number" and report.matching["matched"] == 15
    assert report.matching["steps"] is None
    assert [(s.rank, s.op) for s in report.stragglers] == [(3, "nccl:all_reduce")]

    def mismatch(trace: dict) -> None:
        add_seq(trace)
        if trace["distributedInfo"]["rank"] == 1:
            rpc = next(
                e for e in trace["traceEvents"] if e.get("name") == "record_param_comms" and e["args"]["Seq"] == 4
            )
            rpc["args"]["In msg nelems"] = 1024

    (tmp_path / "bad").mkdir()
    with pytest.raises(StragglerError, match="process group 0 sequence number 4: ranks ran different collectives"):
        load_kineto_traces(_rewrite(NCCL_2HOST, tmp_path / "bad", mismatch))


def test_real_sampled_gloo_windows_aligned_on_shared_steps() -> None:
    report = detect_stragglers(load_kineto_traces(GLOO_SAMPLED))
    assert report.matching["steps"] == [3, 4, 5] and report.matching["matched"] == 6
    assert report.matching["unmatched"] == {"0": 2, "1": 2, "2": 2}
    assert report.clock_method == "shared_clock"
    assert [(s.rank, s.kind, s.op) for s in report.stragglers] == [(1, "late_arrival", "gloo:all_reduce")]
    assert _row(report, "gloo:all_reduce", 1)["lateness_p50_s"] == pytest.approx(20361.0e-6, abs=0.1e-6)


def test_hta_sampled_ranks_of_a_128_rank_job(realdata: Path) -> None:
    """Two ranks' sampled windows: matched on what they share; a pair whose kernel ends are 320 ms apart left out."""
    paths = [realdata / "kineto" / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
    report = detect_stragglers(load_kineto_traces(paths))
    assert report.matching["matched"] == 6 and report.matching["steps"] == [551, 552]
    assert report.matching["unmatched"] == {"0": 4, "1": 4}
    assert report.clock_method == "estimated_offsets" and "hosts unknown" in report.clock_note
    assert report.excluded == ("nccl:all_to_all #2: ends 320.389 ms apart (more than 10 ms): not one collective",)
    assert report.n_collectives == 5
    assert _row(report, "nccl:all_reduce", 1)["lateness_p50_s"] == pytest.approx(12810.9e-6, abs=0.5e-6)
    assert [(s.rank, s.op) for s in report.stragglers] == [(1, "nccl:all_reduce")]
    assert _row(report, "nccl:all_to_all", 1)["verdicts"] == ["not judged"]  # seen once: no pattern


def test_negative_own_time_is_a_reading_error(tmp_path: Path) -> None:
    """On one clock, a rank cannot leave an all_reduce before the last rank arrived: refuse, don't rank."""

    def early_end(trace: dict) -> None:
        if trace["distributedInfo"]["rank"] == 0:
            span = next(e for e in trace["traceEvents"] if e.get("name") == "gloo:all_reduce")
            span["dur"] = 1.0

    paths = _rewrite(TRACES, tmp_path, early_end)
    with pytest.raises(
        StragglerError, match=r"gloo:all_reduce #4: rank 0 ends 20115.5 µs before the last rank arrived"
    ):
        detect_stragglers(load_kineto_traces(paths))
    result = CliRunner().invoke(app, ["diagnose", "stragglers", *map(str, paths)], catch_exceptions=False)
    assert result.exit_code == 2 and "reading error" in result.stderr and "error: " in result.stderr


def test_cli_json_says_method_and_matching() -> None:
    result = CliRunner().invoke(
        app, ["diagnose", "stragglers", "--json", *map(str, NCCL_2HOST)], catch_exceptions=False
    )
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["clock_method"] == "estimated_offsets" and out["span"] == "gpu_kernel"
    assert out["matching"]["matched"] == 15 and out["stragglers"][0]["rank"] == 3
    result = CliRunner().invoke(app, ["diagnose", "stragglers", *map(str, NCCL_2HOST)], catch_exceptions=False)
    assert (
        "# clock: estimated_offsets: clock offsets estimated from the ends of synchronizing collectives"
        in result.output
    )
    assert "stragglers (estimated_offsets): rank 3 (late_arrival, nccl:all_reduce)" in result.output


def test_cli_bad_traces_exit_2(tmp_path: Path, realdata: Path) -> None:
    runner = CliRunner()
    not_gz = tmp_path / "rank5.json.gz"
    not_gz.write_text("{}")
    bomb = tmp_path / "rank6.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (3 << 20)))
    no_events = tmp_path / "rank7.json"
    no_events.write_text('{"distributedInfo": {"rank": 7}}')
    negative = tmp_path / "rank8.json"
    negative.write_text(
        json.dumps(
            {
                "distributedInfo": {"rank": 8},
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": "gloo:all_reduce",
                        "pid": 1,
                        "tid": 1,
                        "ts": 5.0,
                        "dur": -2.0,
                    }
                ],
            }
        )
    )
    cases = [
        ([str(not_gz)], "rank5.json.gz: not gzip data"),
        (["--max-trace-mib", "1", str(bomb)], "rank6.json.gz: more than 1048576 bytes of JSON once decompressed"),
        ([str(no_events)], "rank7.json: not a Chrome trace (no traceEvents list)"),
        ([str(realdata / "kineto" / "rank_unavailable_rank_not_found.json.gz")], "distributedInfo has no rank"),
        ([str(negative)], "rank8.json: traceEvents[0] ('gloo:all_reduce'): negative duration -2.0"),
        ([str(realdata / "kineto" / "nccl_parser_config_nccl_data.json.gz")], "need traces of at least 2 ranks"),
    ]
    for args, message in cases:
        extra = [] if "nccl_parser" in args[-1] else [str(TRACES[0])]  # the bad trace comes first
        result = runner.invoke(app, ["diagnose", "stragglers", *args, *extra], catch_exceptions=False)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    result = runner.invoke(app, ["diagnose", "stragglers"], catch_exceptions=False)
    assert result.exit_code == 2 and "give either trace files or --run" in result.stderr


@pytest.mark.parametrize("command", [["diagnose", "stragglers"], ["diagnose", "job"]])
def test_broken_gzip_data_is_a_clear_error_not_a_traceback(tmp_path: Path, command: list[str]) -> None:
    """A file that starts with gzip's magic bytes but holds broken data: `error: ...` naming it, exit 2."""
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": []}')[:10] + b"not deflate data at all")
    result = CliRunner().invoke(app, [*command, str(bad), str(bad)], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and str(bad) in result.stderr
    assert "Traceback" not in result.stderr + result.output
