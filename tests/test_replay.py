"""commlens replay: plans extracted from real traces and records, the plan format refusing bad input, scale-down,
and a real replay on gloo ranks stored as a run of source replay."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.bench.launcher import Local, OnCluster
from commlens.replay import PlanCall, PlanGroup, RankCalls, ReplayPlan, ReplayPlanError, extract_plan, load_plan
from commlens.replay.plan import check_runnable, overlapping_calls, parse_plan, write_plan
from commlens.replay.transform import first_ranks, select_group

ROOT = Path(__file__).resolve().parent.parent
DDP = ROOT / "tests" / "data" / "replay" / "ddp-4rank-gloo"
DLRM = ROOT.parent / "shared" / "realdata" / "kineto" / "param-dlrm-8rank-step12"


def commlens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "commlens", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


@pytest.mark.skipif(not DLRM.is_dir(), reason="the real DLRM trace set (../shared/realdata/kineto) is absent")
def test_real_dlrm_traces_give_each_rank_its_eight_collectives_in_order(tmp_path: Path) -> None:
    plan = extract_plan([DLRM])
    assert plan.source == "kineto" and plan.backend == "nccl" and plan.world_size == 8
    assert [g.name for g in plan.groups] == ["world"] and plan.groups[0].ranks == tuple(range(8))
    ops = [c.op for c in plan.ranks[0].calls]
    assert ops == ["all_to_all"] * 4 + ["all_reduce", "all_to_all", "all_reduce", "all_reduce"]
    first = plan.ranks[0].calls[0]
    # In msg nelems 6144 float over 8 ranks: nccl-tests' all_to_all count is per peer
    assert (first.count, first.dtype) == (768, "float32")
    assert first.duration_s == pytest.approx(2146e-6, abs=1e-6)  # the NCCL kernel's span
    assert plan.ranks[0].calls[4].count == 394241 and plan.ranks[0].calls[4].redop == "sum"
    assert all(c.gap_s >= 0 for r in plan.ranks for c in r.calls)
    assert any("no reduction" in n for n in plan.notes)
    write_plan(plan, tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json") == plan


def test_monitor_records_of_a_real_ddp_run_become_a_plan() -> None:
    plan = extract_plan([DDP / f"monitor-rank{r}.jsonl" for r in range(4)])
    assert plan.source == "monitor" and plan.backend == "gloo" and plan.world_size == 4
    assert plan.groups == (PlanGroup("world", (0, 1, 2, 3)),)
    calls = plan.ranks[1].calls
    assert len(calls) == 23 and {c.op for c in calls} == {"all_reduce"}
    assert {(c.count, c.dtype) for c in calls} == {(99968, "float32")}  # 399,872 B
    assert [c.seq for c in calls] == sorted(c.seq for c in calls if c.seq is not None)
    check_runnable(plan)


def test_the_committed_kineto_plan_loads_and_runs_on_four_ranks() -> None:
    plan = load_plan(DDP / "plan-kineto.json")
    assert plan.world_size == 4 and all(len(r.calls) == 20 for r in plan.ranks)
    check_runnable(plan)


def _plan(**top: object) -> dict[str, object]:
    base: dict[str, object] = {
        "format": "commlens.replay-plan/1",
        "source": "kineto",
        "world_size": 2,
        "groups": [{"name": "0", "ranks": [0, 1]}],
        "notes": [],
        "files": [],
        "ranks": [
            {
                "rank": r,
                "calls": [
                    {
                        "op": "all_reduce",
                        "group": "0",
                        "count": 8,
                        "dtype": "float32",
                        "redop": "sum",
                        "start_s": 1.0,
                        "duration_s": 0.001,
                        "gap_s": 0.0,
                    }
                ],
            }
            for r in (0, 1)
        ],
    }
    base.update(top)
    return base


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "commlens.replay-plan/2"}, "newer than this commlens reads"),
        ({"format": "commlens.run/1"}, "not a replay plan"),
        ({"world_size": 0}, "world_size must be an integer in 1"),
        ({"groups": [{"name": "0", "ranks": [0, 5]}]}, "a rank outside 0..1"),
        ({"groups": [{"name": "1", "ranks": [0, 1]}]}, "process group '0' is not in the plan's groups"),
        (
            {"ranks": [{"rank": 0, "calls": [{"op": "all_reduce", "group": "0", "count": -1, "redop": "sum"}]}]},
            "ranks[0].calls[0].count",
        ),
        (
            {
                "ranks": [
                    {
                        "rank": 0,
                        "calls": [
                            {
                                "op": "all_reduce",
                                "group": "0",
                                "count": 1,
                                "dtype": "float32",
                                "start_s": 0,
                                "duration_s": float("nan"),
                                "gap_s": 0,
                                "redop": "sum",
                            }
                        ],
                    }
                ]
            },
            "ranks[0].calls[0].duration_s",
        ),
        ({"ranks": [{"rank": 0, "calls": [{"op": "frobnicate"}]}]}, "ranks[0].calls[0].op must be one of"),
        (
            {
                "ranks": [
                    {
                        "rank": 0,
                        "calls": [
                            {
                                "op": "all_gather",
                                "group": "0",
                                "count": 1,
                                "dtype": "float32",
                                "start_s": 0,
                                "duration_s": 0,
                                "gap_s": 0,
                                "redop": "sum",
                            }
                        ],
                    }
                ]
            },
            "all_gather does not reduce",
        ),
        (
            {
                "ranks": [
                    {
                        "rank": 0,
                        "calls": [
                            {
                                "op": "send",
                                "group": "0",
                                "count": 1,
                                "dtype": "float32",
                                "start_s": 0,
                                "duration_s": 0,
                                "gap_s": 0,
                                "peer": 0,
                            }
                        ],
                    }
                ]
            },
            "needs a peer other than the rank itself",
        ),
        ({"ranks": [{"rank": 0, "calls": []}, {"rank": 0, "calls": []}]}, "rank 0 listed twice"),
        ({"notes": [[[[[[[[[[]]]]]]]]]]}, "nested deeper"),
    ],
)
def test_a_bad_plan_is_refused_naming_the_field(change: dict[str, object], message: str) -> None:
    with pytest.raises(ReplayPlanError) as e:
        parse_plan(json.loads(json.dumps(_plan(**change))))
    assert message in str(e.value)


def test_plan_files_are_bounded_and_refused_with_exit_2(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps(_plan()))
    with pytest.raises(ReplayPlanError, match="larger than 100 bytes"):
        load_plan(big, max_bytes=100)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "commlens.replay-plan/1", "world_size": NaN}')
    r = commlens("replay", "run", str(bad))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {bad}: not JSON"), r.stderr
    r = commlens("replay", "plan", str(tmp_path / "missing.json"), "-o", str(tmp_path / "out.json"))
    assert r.returncode == 2 and "no such file" in r.stderr and not (tmp_path / "out.json").exists()
    (tmp_path / "notes.txt").write_text("hello")
    r = commlens("replay", "plan", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "out.json"))
    assert r.returncode == 2 and "not a source replay reads" in r.stderr and not (tmp_path / "out.json").exists()


def test_a_gzip_file_with_a_corrupt_stream_is_refused_with_exit_2_not_a_traceback(tmp_path: Path) -> None:
    good = gzip.compress(json.dumps({"traceEvents": [], "distributedInfo": {"rank": 0}}).encode())
    broken = tmp_path / "rank-0.json.gz"
    broken.write_bytes(good[:10] + b"\xff\xff\xff\xff" + good[14:])  # a deflate block of no valid type
    r = commlens("replay", "plan", str(broken), "-o", str(tmp_path / "out.json"))
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"error: {broken}: cannot read (Error -3 while decompressing data: invalid block type)\n"
    assert not (tmp_path / "out.json").exists()
    with pytest.raises(ReplayPlanError, match="cannot read .error: Error -3"):
        extract_plan([broken], source="chakra")


def test_a_plan_whose_replay_would_hang_is_refused() -> None:
    plan = parse_plan(_plan())
    short = ReplayPlan("kineto", 2, plan.groups, (plan.ranks[0], RankCalls(1, ())))
    with pytest.raises(ReplayPlanError, match="rank 0: 1, rank 1: 0"):
        check_runnable(short)


def _call(op: str, group: str, start: float, **kw: object) -> PlanCall:
    return PlanCall(op=op, group=group, count=16, dtype="float32", start_s=start, duration_s=0.01, gap_s=0.0, **kw)


def _layout() -> ReplayPlan:
    """4 ranks: tensor parallel pairs (0,1) (2,3), data parallel pairs (0,2) (1,3)."""
    groups = (PlanGroup("tp0", (0, 1)), PlanGroup("tp1", (2, 3)), PlanGroup("dp0", (0, 2)), PlanGroup("dp1", (1, 3)))
    ranks = []
    for r in range(4):
        tp, dp = f"tp{r // 2}", f"dp{r % 2}"
        calls = (_call("all_gather", tp, 0.0), _call("all_reduce", dp, 0.05, redop="sum"), _call("all_gather", tp, 0.1))
        ranks.append(RankCalls(r, calls))
    return ReplayPlan("kineto", 4, groups, tuple(ranks))


def test_one_group_alone_keeps_the_step_by_waiting_out_the_rest() -> None:
    plan = select_group(_layout(), "dp1")
    assert plan.world_size == 2 and plan.groups == (PlanGroup("dp1", (0, 1)),)
    assert [len(r.calls) for r in plan.ranks] == [1, 1]
    plan = select_group(_layout(), "tp0")
    # the all_reduce on dp0 between the two all_gathers is left out: its time joins the gap
    assert [c.gap_s for c in plan.ranks[0].calls] == pytest.approx([0.0, 0.09])
    assert "left out" in plan.notes[-1]
    check_runnable(plan)


def test_mapping_onto_fewer_ranks_keeps_whole_inner_groups() -> None:
    plan = first_ranks(_layout(), 2)
    assert {g.name: g.ranks for g in plan.groups} == {"tp0": (0, 1), "dp0": (0,), "dp1": (1,)}
    assert [len(r.calls) for r in plan.ranks] == [3, 3]
    assert "dp0, dp1 shrunk" in plan.notes[-1]
    check_runnable(plan)
    with pytest.raises(ReplayPlanError, match="--map-ranks must be in 1..4"):
        first_ranks(_layout(), 5)


@pytest.mark.parametrize("mode", ["--no-gaps", "--timeline"])
def test_replay_on_three_gloo_ranks_is_compared_and_stored(tmp_path: Path, mode: str) -> None:
    """Odd world, a subgroup, rooted ops and point-to-point: every call issued (blocking back to back, or
    asynchronously on the recorded timeline), timed, compared and stored."""
    groups = (PlanGroup("0", (0, 1, 2)), PlanGroup("pair", (0, 2)))
    pause = 1.0  # after the reduce_scatter: on the timeline, gloo's reduce_scatter Work (no future) must end
    ranks = []  # when it completes, not when the pass's last call has been issued
    for r in range(3):
        calls = [
            _call("all_reduce", "0", 0.0, redop="sum"),
            _call("broadcast", "0", 0.02, root=0),
            _call("all_gather", "0", 0.04),
            _call("reduce_scatter", "0", 0.06, redop="sum"),
            _call("all_to_all", "0", 0.08 + pause),
        ]
        if r in (0, 2):
            calls.append(_call("all_reduce", "pair", 0.1 + pause, redop="sum"))
            calls.append(_call("send" if r == 0 else "recv", "pair", 0.12 + pause, peer=2 - r))
        ranks.append(RankCalls(r, tuple(calls)))
    plan = ReplayPlan("monitor", 3, groups, tuple(ranks), backend="gloo")
    write_plan(plan, tmp_path / "plan.json")
    db = tmp_path / "r.db"
    r = commlens("replay", "run", str(tmp_path / "plan.json"), "--db", str(db), mode, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["collectives"] == 6 + 2  # five on the world group, one on the pair, a send and a recv
    assert {g["group"]: g["calls"] for g in out["groups"]} == {"0": 5, "pair": 3}
    assert out["replayed_total_s"] > 0 and out["recorded_total_s"] == pytest.approx(0.08)
    if mode == "--timeline":  # issued at the recorded offsets: the last call no earlier than 1.12 s in
        # the span leaves out the first collective's wait for a late peer (compare.py: skew, not the rank's time),
        # while the offsets run from the timeline's start: a loaded machine's first wait of a few ms may take the
        # span that much under 1.12 s (1.1185 s in one CI run). Back to back it would be tens of ms.
        assert out["replayed_span_s"] >= 0.12 + pause - 0.05
    shown = commlens("runs", "show", out["run_id"], "--db", str(db), "--json")
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    run = run.get("run", run)
    assert run["source"] == "replay"
    (scatter,) = [m for m in run["measurements"] if m["op"] == "reduce_scatter"]
    assert max(scatter["samples_s"]) < pause / 2  # its own time, not the wait for the calls issued after it
    assert sorted((m["op"], m.get("group")) for m in run["measurements"]) == [
        ("all_gather", "0"),
        ("all_reduce", "0"),
        ("all_reduce", "pair"),
        ("all_to_all", "0"),
        ("broadcast", "0"),
        ("reduce_scatter", "0"),
    ]


def _async_plan() -> ReplayPlan:
    """2 ranks; the second all-gather issued 0.5 s in, while the first (recorded 0.6 s long) was in flight."""
    calls = (_timed("all_gather", "world", 0.0, 0.6), _timed("all_gather", "world", 0.5, 0.55))
    return ReplayPlan("monitor", 2, (PlanGroup("world", (0, 1)),), tuple(RankCalls(r, calls) for r in range(2)))


def test_overlapping_calls_are_counted_per_rank() -> None:
    assert overlapping_calls(_async_plan()) == 2  # one per rank
    assert overlapping_calls(_layout()) == 0  # each call ends (10 ms) before the next starts


def test_a_plan_whose_calls_overlap_is_replayed_on_its_timeline_by_default(tmp_path: Path) -> None:
    """Blocking, the second call would follow the first at once (its gap is 0); on the timeline it is issued
    0.5 s in, as recorded. Two modes at once are refused."""
    write_plan(_async_plan(), tmp_path / "plan.json")
    r = commlens("replay", "run", str(tmp_path / "plan.json"), "--no-store", "--json")
    assert r.returncode == 0, r.stderr
    assert "2 of the plan's 4 calls were issued before an earlier call" in r.stderr
    assert json.loads(r.stdout)["replayed_span_s"] >= 0.5
    bad = commlens("replay", "run", str(tmp_path / "plan.json"), "--no-store", "--timeline", "--blocking")
    assert bad.returncode == 2 and "three modes: give one" in bad.stderr


def _timed(op: str, group: str, start: float, end: float) -> PlanCall:
    return PlanCall(op=op, group=group, count=16, dtype="float32", start_s=start, duration_s=end - start, gap_s=0.0)


@pytest.mark.parametrize("host", ["h", None])
def test_a_collective_recorded_beside_compute_is_not_compared_as_isolated(host: str | None) -> None:
    """Rank 2 computes (is between calls) while ranks 0 and 1 run an all-reduce on their pair: that one is not
    isolated; the two world all-reduces, during which every rank of the host was in a call, are. Without a
    host, who shared the cores is unknown and nothing is called isolated; nor on NCCL (GPUs)."""
    from commlens.bench.sysinfo import SystemInfo
    from commlens.replay.compare import compare_replay
    from commlens.replay.runner import ReplayTimes
    from commlens.replay.settings import ReplaySettings

    calls = {
        0: (
            _timed("all_reduce", "w", 0.0, 1.0),
            _timed("all_reduce", "pair", 1.2, 1.4),
            _timed("all_reduce", "w", 1.5, 2.1),
        ),
        1: (
            _timed("all_reduce", "w", 0.2, 1.0),
            _timed("all_reduce", "pair", 1.3, 1.4),
            _timed("all_reduce", "w", 1.5, 2.1),
        ),
        2: (_timed("all_reduce", "w", 0.5, 1.0), _timed("all_reduce", "w", 2.0, 2.1)),
    }
    plan = ReplayPlan(
        "kineto",
        3,
        (PlanGroup("pair", (0, 1)), PlanGroup("w", (0, 1, 2))),
        tuple(RankCalls(r, c, host) for r, c in calls.items()),
    )
    replayed = {r: [[(0.0, 0.01)] * len(c)] for r, c in calls.items()}
    system = SystemInfo(world_size=3, backend="gloo", cpu_model="test-cpu", cpu_cores=2, torch_version="2.13.0")
    cmp = compare_replay(plan, ReplayTimes(ReplaySettings(gaps=False), system, "2026-12-04T00:00:00+00:00", replayed))
    overlap = {(c.group, c.index): c.recorded_overlap for c in cmp.collectives}
    if host is None:
        assert set(overlap.values()) == {None} and cmp.isolated == () and cmp.overlap_known == 0
        return
    assert overlap == {("pair", 0): pytest.approx(1.0), ("w", 0): 0.0, ("w", 1): 0.0}
    assert {(c.group, c.index) for c in cmp.isolated} == {("w", 0), ("w", 1)}
    assert cmp.isolated_ratio == pytest.approx(0.02 / 0.6)  # own times: rank 2's 0.5 s and 0.1 s
    assert cmp.as_dict()["isolated"]["collectives"] == 2
    on_gpus = ReplayPlan("kineto", 3, plan.groups, plan.ranks, backend="nccl")  # compute beside is on other GPUs
    times = ReplayTimes(ReplaySettings(gaps=False), system, "2026-12-04T00:00:00+00:00", replayed)
    assert compare_replay(on_gpus, times).overlap_known == 0


@pytest.mark.parametrize("host", ["h", None])
def test_a_late_rank_s_wait_is_not_counted_as_communication(host: str | None) -> None:
    """Rank 1 reached the first all-reduce 0.9 s after rank 0 (unequal compute): rank 0's 1.0 s in it is 0.9 s of
    waiting and 0.1 s of the collective. The replay, back to back, has no such skew: both ranks 0.1 s. Compared
    per rank (or as the earliest rank saw it) the replay would read 0.18x its recording; the collective's own
    time (the last arriver's) makes it 1.0x. On one clock (one host), from the last entry to the last exit
    holds no wait either, but it keeps rank 0's late exit in the second call (0.15 s where the own time is
    0.1 s); without a host the recorded ranks' clocks are not known to be one, and that figure is left out."""
    from commlens.bench.sysinfo import SystemInfo
    from commlens.replay.compare import compare_replay
    from commlens.replay.runner import ReplayTimes
    from commlens.replay.settings import ReplaySettings

    calls = {
        0: (_timed("all_reduce", "w", 0.0, 1.0), _timed("all_reduce", "w", 1.1, 1.25)),
        1: (_timed("all_reduce", "w", 0.9, 1.0), _timed("all_reduce", "w", 1.1, 1.2)),
    }
    plan = ReplayPlan("monitor", 2, (PlanGroup("w", (0, 1)),), tuple(RankCalls(r, c, host) for r, c in calls.items()))
    replayed = {0: [[(0.0, 0.1), (0.2, 0.35)]], 1: [[(0.0, 0.1), (0.2, 0.3)]]}
    system = SystemInfo(world_size=2, backend="gloo", cpu_model="test-cpu", cpu_cores=2, torch_version="2.13.0")
    cmp = compare_replay(plan, ReplayTimes(ReplaySettings(gaps=False), system, "2026-12-04T00:00:00+00:00", replayed))
    assert [c.recorded_s for c in cmp.collectives] == [pytest.approx(0.1), pytest.approx(0.1)]
    assert cmp.total_ratio == pytest.approx(1.0) and cmp.median_ratio == pytest.approx(1.0)
    assert cmp.recorded_max_total_s == pytest.approx(1.15)  # the raw figure, waits included, kept beside
    assert cmp.replayed_max_total_s == pytest.approx(0.25)
    if host is None:
        assert cmp.last_arrival == () and cmp.as_dict()["last_arrival"]["collectives"] == 0
        return
    assert [c.recorded_last_s for c in cmp.collectives] == [pytest.approx(0.1), pytest.approx(0.15)]
    assert cmp.last_arrival_totals() == (pytest.approx(0.25), pytest.approx(0.25))
    assert cmp.as_dict()["last_arrival"]["total_ratio"] == pytest.approx(1.0)


def test_the_step_time_leaves_out_the_wait_for_late_peers_in_the_first_collective() -> None:
    """Rank 0 reached the job's first all-reduce 0.8 s before rank 1 (start-up): that wait is no step time. The
    replay starts from a barrier; its own first-call wait (rank 0: 0.05 s) is left out alike."""
    from commlens.bench.sysinfo import SystemInfo
    from commlens.replay.compare import compare_replay
    from commlens.replay.runner import ReplayTimes
    from commlens.replay.settings import ReplaySettings

    calls = {
        0: (_timed("all_reduce", "w", 0.0, 0.9), _timed("all_reduce", "w", 1.0, 1.1)),
        1: (_timed("all_reduce", "w", 0.8, 0.9), _timed("all_reduce", "w", 1.0, 1.1)),
    }
    plan = ReplayPlan("monitor", 2, (PlanGroup("w", (0, 1)),), tuple(RankCalls(r, c, "h") for r, c in calls.items()))
    replayed = {0: [[(0.0, 0.15), (0.25, 0.35)]], 1: [[(0.05, 0.15), (0.25, 0.35)]]}
    system = SystemInfo(world_size=2, backend="gloo", cpu_model="test-cpu", cpu_cores=2, torch_version="2.13.0")
    cmp = compare_replay(plan, ReplayTimes(ReplaySettings(), system, "2026-12-04T00:00:00+00:00", replayed))
    assert cmp.recorded_span_s == pytest.approx(0.3)  # not rank 0's 1.1 s
    assert cmp.replayed_span_s == pytest.approx(0.3)
    assert cmp.span_ratio == pytest.approx(1.0)


def _two_rank_plan() -> ReplayPlan:
    calls = (_timed("all_reduce", "w", 0.0, 0.1), _timed("all_reduce", "w", 0.2, 0.3))
    return ReplayPlan("monitor", 2, (PlanGroup("w", (0, 1)),), tuple(RankCalls(r, calls, "h") for r in range(2)))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("plan", "plan.json", "plan: must be a ReplayPlan, got str"),
        ("placement", 2, "placement: must be Local or OnCluster, got int"),
        ("placement", "local", "placement: must be Local or OnCluster, got str"),
        ("placement", Local(3), "placement: Local\\(3\\) places 3 ranks, the plan has 2"),
        ("settings", {"passes": 2}, "settings: must be ReplaySettings, got dict"),
        ("command_line", ["commlens", "replay"], "command_line: must be text, got list"),
        ("tag", 7, "tag: must be text or None, got int"),
    ],
)
def test_a_replay_request_is_checked_when_built_naming_the_field(field: str, value: object, message: str) -> None:
    from commlens.replay import ReplayRequest, ReplayRequestError

    args: dict[str, object] = {"plan": _two_rank_plan(), "placement": Local(2), field: value}
    with pytest.raises(ReplayRequestError, match=message):
        ReplayRequest(**args)  # type: ignore[arg-type]


def test_a_replay_request_refuses_a_plan_whose_replay_would_hang() -> None:
    from commlens.replay import ReplayRequest

    plan = _two_rank_plan()
    short = ReplayPlan(plan.source, 2, plan.groups, (plan.ranks[0], RankCalls(1, plan.ranks[1].calls[:1], "h")))
    with pytest.raises(ReplayPlanError, match="a replay would hang"):
        ReplayRequest(short, OnCluster("c1"))


def test_the_report_of_a_replay_holds_its_comparison_and_the_run_it_stores() -> None:
    """What ``replay report`` prints and stores for times an external launcher's ranks wrote: the run's id with the
    comparison (``--json``), the run of source replay keeping that comparison, tagged."""
    import dataclasses

    from commlens.bench.sysinfo import SystemInfo
    from commlens.replay import ReplaySettings, ReplayTimes, report_times
    from commlens.results.jsonfmt import run_from_dict, run_to_dict
    from commlens.results.runconfig import ReplayRun

    plan = _two_rank_plan()
    replayed = {r: [[(0.0, 0.2), (0.3, 0.5)]] for r in range(2)}  # each call twice its recorded 0.1 s
    system = SystemInfo(world_size=2, backend="gloo", cpu_model="test-cpu", cpu_cores=2, torch_version="2.13.0")
    times = ReplayTimes(ReplaySettings(gaps=False), system, "2026-12-04T00:00:00+00:00", replayed)
    report = report_times(plan, times, tag="nightly")
    assert report.times is times and report.comparison.total_ratio == pytest.approx(2.0)
    out = json.loads(json.dumps(report.as_dict()))
    assert out["run_id"] == report.run.run_id and out["total_ratio"] == pytest.approx(2.0)
    assert {k: v for k, v in out.items() if k != "run_id"} == json.loads(json.dumps(report.comparison.as_dict()))
    run = run_from_dict(json.loads(json.dumps(run_to_dict(report.run))))  # as the store reads it back
    assert run.source == "replay" and run.tag == "nightly" and isinstance(run.config, ReplayRun)
    assert run.config.comparison["total_ratio"] == pytest.approx(2.0)
    assert [(m.op, m.group, m.samples_s) for m in run.measurements] == [("all_reduce", "w", (0.2, 0.2))]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.run = run  # type: ignore[misc]


def test_replay_settings_read_back_are_checked_field_by_field() -> None:
    from commlens.replay.settings import ReplaySettings, ReplaySettingsError

    s = ReplaySettings(gaps=True, compute="sleep", passes=3, size_scale=2.0)
    assert ReplaySettings.from_dict(json.loads(json.dumps(s.as_dict()))) == s
    assert ReplaySettings.from_dict({"size_scale": 2}).size_scale == 2.0  # JSON writes 2.0 as 2 in some tools
    for bad, message in (
        ({"passes": "3"}, "passes: expected int"),
        ({"gaps": 1}, "gaps: expected bool"),
        ({"passes": True}, "passes: expected int"),
        ({"speed": 1}, "unknown replay settings: speed"),
    ):
        with pytest.raises(ReplaySettingsError, match=message):
            ReplaySettings.from_dict(bad)


def _host_trace(path: Path, calls: list[tuple[str, int]]) -> None:
    """A Chakra host execution trace in its JSON layout: record_param_comms nodes with their attributes."""
    nodes: list[dict[str, object]] = [{"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "attrs": []}]
    for i, (name, count) in enumerate(calls, 2):
        attrs = [
            {"name": "collective_name", "type": "string", "value": name},
            {"name": "dtype", "type": "string", "value": "Float"},
            {"name": "in_msg_nelems", "type": "uint64", "value": count},
            {"name": "pg_name", "type": "string", "value": "0"},
            {"name": "pg_size", "type": "uint64", "value": 2},
        ]
        nodes.append({"id": i, "name": "record_param_comms", "attrs": attrs, "inputs": {"values": []}})
    path.write_text(json.dumps({"schema": "1.0.2-chakra.0.0.4", "pid": 1, "nodes": nodes}))


def test_a_chakra_host_trace_gives_each_rank_its_calls_in_order(tmp_path: Path) -> None:
    for rank in (0, 1):
        _host_trace(tmp_path / f"rank-{rank}.json", [("allreduce", 1024), ("wait", 0), ("allgather", 256)])
    plan = extract_plan([tmp_path])
    assert plan.source == "chakra" and plan.world_size == 2
    assert [(c.op, c.count, c.dtype, c.group) for c in plan.ranks[1].calls] == [
        ("all_reduce", 1024, "float32", "0"),
        ("all_gather", 256, "float32", "0"),
    ]
    (tmp_path / "rank-0.json").write_text(json.dumps({"schema": "1.0.2-chakra.0.0.4", "nodes": {}}))
    with pytest.raises(ReplayPlanError, match="no nodes list"):
        extract_plan([tmp_path / "rank-0.json"], source="chakra")


def test_the_communication_only_job_records_its_loop_call_for_call(tmp_path: Path) -> None:
    """examples/train_monitored.py --parallel comms on 2 gloo ranks under the monitor: per step, the whole
    gradient all-reduced, a quarter of it all-reduced, the quarter all-gathered, in that order, and a plan
    of it holds exactly those calls with the recorded sizes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [str(ROOT / "examples" / "train_monitored.py"), "--parallel", "comms", "--steps", "2", "--comm-calls", "3"]
    cmd += ["--jsonl-dir", str(tmp_path / "mon"), "--topology", "none"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]  # the rank's own lines come before the launcher's traceback
    plan = extract_plan([tmp_path / "mon"])
    n = 2 * (64 * 64 * 3 + 64 * 3 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64 + 4 * 64)  # 2 layers' parameters
    for rank in plan.ranks:
        assert [(c.op, c.count, c.step) for c in rank.calls] == [
            (op, count, step)
            for step in (0, 1)
            for op, count in (("all_reduce", n), ("all_reduce", n // 4), ("all_gather", n // 4))
        ]
