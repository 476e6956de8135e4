"""commlens.monitor: real jobs on 4 gloo ranks under the monitor, the collector joining them, the endpoint.

The jobs are real (torchrun, gloo, real DDP and FSDP2 training steps); each launch costs ~20-30 s here,
so one launch serves several checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from benchutil import BIN, clean_env, commlens
from prometheus_server import prometheus  # noqa: F401 - the fixture

from commlens.monitor.collect import (
    CollectError,
    Collector,
    CollectSettings,
    JsonlSource,
    parse_endpoints,
    replay,
)
from commlens.monitor.exporter import CollectorMetrics, EndpointError, is_loopback, serve
from commlens.results.collectives import (
    CollectiveRecord,
    CollectiveRecordError,
    aggregate,
    record_from_wire,
    size_bucket,
)

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "examples" / "train_monitored.py"
SUBJECT = REPO / "tests" / "monitor_subject.py"
PY = str(BIN / "python")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (where outgoing connections take their local ports)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _ports(n: int) -> int:
    """A base port with ``n`` free ports above it, below the ephemeral range: a range taken from it (as ``_port``
    does) can lose a port to the job's own outgoing connections (torchrun's store, gloo's mesh) between this check
    and a rank's bind, and a rank that cannot listen ends the job. Checked free now; nothing else here binds there."""
    rng = random.Random()
    low = min(_ephemeral_low(), 65536)
    for _ in range(200):
        base = rng.randrange(20000, max(20001, low - n))
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def torchrun(script: Path, *args: str, nproc: int = 4, env: dict[str, str] | None = None) -> list[str]:
    return [
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_port()),
        str(script),
        *args,
    ]


JOB = ("--steps", "60", "--dim", "128", "--seq", "64", "--batch", "8", "--window-s", "1")


def rec(
    rank: int, seq: int, start: float, dur: float, group: str = "world", n: int = 4, **kw: object
) -> CollectiveRecord:
    return CollectiveRecord(
        rank=rank,
        group=group,
        group_size=n,
        seq=seq,
        op=str(kw.pop("op", "all_reduce")),
        size_bytes=int(kw.pop("size", 1 << 20)),  # type: ignore[call-overload]
        dtype="float32",
        start_s=start,
        end_s=start + dur,
        group_ranks=tuple(int(r) for r in kw.pop("ranks", range(n))),  # type: ignore[call-overload]
        host="h",
        step=int(kw.pop("step", seq)),  # type: ignore[call-overload]
    )


def synthetic_job(
    steps: int,
    late_rank: int | None,
    late_from: int,
    late_s: float,
    seed: int = 1,
    late_to: int | None = None,
    step_s: float = 0.1,
) -> list[CollectiveRecord]:
    """4 ranks, one all-reduce per step ``step_s`` apart, a few ms of arrival jitter; ``late_rank`` late from a
    step (to one, when ``late_to`` says)."""
    import random

    rnd = random.Random(seed)
    out = []
    for step in range(steps):
        t = 1000.0 + step_s * step
        starts = [t + rnd.uniform(0, 0.003) for _ in range(4)]
        if late_rank is not None and late_from <= step < (steps if late_to is None else late_to):
            starts[late_rank] += late_s
        end = max(starts) + 0.004
        for r in range(4):
            out.append(rec(r, step, starts[r], end + rnd.uniform(0, 0.0005) - starts[r], step=step))
    return out


# ---- records and windows ---------------------------------------------------------------------------------


def test_a_record_round_trips_and_hostile_fields_are_refused_by_name():
    r = rec(1, 7, 10.0, 0.002)
    assert record_from_wire(r.as_wire()) == r
    assert r.busbw_bytes_per_s == pytest.approx((1 << 20) / 0.002 * 2 * 3 / 4)
    bad = {
        "rank": "1",
        "seq": -1,
        "start_s": float("nan"),
        "end_s": 10**400,
        "op": "frobnicate",
        "group": "x" * 201,
        "group_ranks": list(range(5000)),
        "size_bytes": 2**60,
    }
    for field, value in bad.items():
        wire = dict(r.as_wire(), **{field: value})
        with pytest.raises(CollectiveRecordError) as e:
            record_from_wire(wire)
        assert field.split("_")[0] in str(e.value) or "op" in str(e.value), (field, str(e.value))
    with pytest.raises(CollectiveRecordError, match="end >= start"):
        record_from_wire(dict(r.as_wire(), end_s=9.0))
    with pytest.raises(CollectiveRecordError, match="not in its group"):
        record_from_wire(dict(r.as_wire(), rank=9, group_ranks=[0, 1, 2, 3]))
    with pytest.raises(CollectiveRecordError, match="JSON object"):
        record_from_wire([1, 2])


def test_a_window_has_counts_percentiles_and_one_row_per_group_op_and_size_bucket():
    records = [rec(0, i, float(i), 0.001 * (i + 1)) for i in range(100)]
    records += [rec(0, i, float(i), 0.001, op="all_gather", size=3000) for i in range(3)]
    records += [rec(0, i, float(i), 0.001, group="tp", n=2, ranks=(0, 1)) for i in range(5)]
    rows = aggregate(records, window=3, start_s=0.0, end_s=100.0, keep=10)
    by = {(r.group, r.op, r.size_bucket): r for r in rows}
    assert set(by) == {("world", "all_reduce", 1 << 20), ("world", "all_gather", 2048), ("tp", "all_reduce", 1 << 20)}
    row = by[("world", "all_reduce", 1 << 20)]
    assert row.count == 100 and row.window == 3
    assert row.duration_p50_s == pytest.approx(0.0505) and row.duration_p99_s == pytest.approx(0.09901)
    assert row.time_s == pytest.approx(sum(0.001 * (i + 1) for i in range(100)))
    assert len(row.durations_s) == 10
    assert by[("tp", "all_reduce", 1 << 20)].group_size == 2
    assert size_bucket(3000) == 2048 and size_bucket(0) == 0


# ---- the collector on synthetic joins (its logic; the real jobs below are the real test) -----------------


def test_collector_names_a_persistently_late_rank_and_not_a_healthy_job():
    c = Collector(CollectSettings(persist=3))
    alerts = replay(synthetic_job(60, late_rank=2, late_from=20, late_s=0.05), c, interval_s=0.2)
    named = {(a.kind, a.rank) for a in alerts}
    assert named == {("straggler", 2)}, [a.text for a in alerts]
    first = min(a.step for a in alerts if a.step is not None)
    assert 20 < first <= 40
    healthy = Collector(CollectSettings(persist=3))
    assert replay(synthetic_job(60, None, 0, 0.0), healthy, interval_s=0.2) == []
    assert healthy.summary()["groups"]["world"]["joined"] == 60


def test_a_straggler_alert_clears_once_the_rank_is_on_time_again():
    # late from step 20 to 49, on time after: the alert is raised, then cleared after `persist` clean
    # evaluations (it stayed active to the job's end while the streak that counted them was dropped first)
    records = synthetic_job(120, late_rank=2, late_from=20, late_s=0.05, late_to=50)
    c = Collector(CollectSettings(persist=2))
    c.metrics = CollectorMetrics("j")
    replay(records, c, interval_s=0.2)
    assert [(a.kind, a.rank) for a in c.history] == [("straggler", 2)]
    alert = c.history[0]
    assert alert.cleared_at_s is not None and c.active == {}
    assert alert.raised_at_s < 1000.0 + 0.1 * 50 < alert.cleared_at_s < 1000.0 + 0.1 * 80
    assert c.summary()["alerts"][0]["cleared_at_s"] == alert.cleared_at_s
    # the alert gauge Prometheus' rules read is back to 0, so the shipped CommlensStraggler alert resolves
    labels = {"job_id": "j", "kind": "straggler", "group": "world", "op": alert.op, "rank": "2"}
    assert c.metrics.registry.get_sample_value("commlens_monitor_alert", labels) == 0.0
    assert (
        c.metrics.registry.get_sample_value("commlens_monitor_alerts_total", {"job_id": "j", "kind": "straggler"}) == 1
    )


def test_persistence_is_counted_in_the_jobs_steps_not_in_the_collectors_evaluations():
    # 25 ms steps evaluated every 0.25 s (the live default): 10 steps between evaluations. A rank late by half a
    # step from step S, S at every offset to the evaluations' grid. The window's median turns 4-5 steps after S;
    # counted in evaluations (flagged in 2 in a row, 5 steps apart at least) the alert came at S + 14 to S + 23,
    # past the 20 steps of issue 15 for 4 of these 10 offsets. Counted in steps (the window that ended 5 steps
    # earlier flags the rank too) it comes at the first evaluation after S + 9: by S + 18
    delays = []
    for late_from in range(30, 40):
        records = synthetic_job(120, late_rank=2, late_from=late_from, late_s=0.0125, step_s=0.025)
        alerts = replay(records, Collector(CollectSettings()), interval_s=0.25)
        assert [(a.kind, a.rank) for a in alerts] == [("straggler", 2)], [a.text for a in alerts]
        assert alerts[0].step is not None
        delays.append(alerts[0].step - late_from)
    assert 9 <= min(delays) and max(delays) <= 18, delays
    # whatever the cadence: evaluated at every step, it is named as soon
    every_step = replay(synthetic_job(120, 2, 37, 0.0125, step_s=0.025), Collector(CollectSettings()), 0.025)
    assert [(a.rank, a.step) for a in every_step] == [(2, 37 + 9)]


def test_a_rank_late_for_fewer_steps_than_persistence_asks_is_not_named():
    # 10 ms late (0.4 of a 25 ms step) over 6 steps: the 10-step window's median flags the rank in the windows
    # that hold all 6 (ending 5 to 9 steps after it turned late: 4 steps apart, under the 5 persistence asks),
    # evaluated at every step; none 5 steps before a flagged one flags it too, so it is not named. Over 8 steps
    # it is, at the window that ended 5 steps after one that flagged it.
    def run(late_steps: int) -> tuple[int, list[tuple[int | None, int | None]]]:
        records = synthetic_job(120, 2, 40, 0.010, late_to=40 + late_steps, step_s=0.025)
        c = Collector(CollectSettings())
        flagged = 0
        for step in range(120):
            c.add(r for r in records if r.seq == step)
            c.evaluate(1000.0 + 0.025 * step + 0.02)
            flagged += ("straggler", "world", "", 2) in c._streak
        return flagged, [(a.rank, a.step) for a in c.history]

    assert run(6) == (5, [])
    assert run(8) == (7, [(2, 50)])


def test_persistence_in_a_job_that_marks_no_steps_is_counted_in_collectives():
    # no steps: the window is the last 24 collectives and persistence 12 of them; 25 ms apart, evaluated every
    # 10. The earlier window flags the rank 12 collectives after S, so it is named by S + 24 + 10 collectives
    from dataclasses import replace as with_fields

    for late_from in (30, 37, 55):
        records = [with_fields(r, step=None) for r in synthetic_job(160, 1, late_from, 0.0125, step_s=0.025)]
        alerts = replay(records, Collector(CollectSettings()), interval_s=0.25)
        assert [(a.kind, a.rank, a.step) for a in alerts] == [("straggler", 1, None)]
        named_at = (alerts[0].raised_at_s - 1000.0) / 0.025
        assert late_from + 12 < named_at <= late_from + 34, (late_from, named_at)


def _jittery_job(steps: int, noise_s: float, late: tuple[int, int, int, float]) -> list[CollectiveRecord]:
    """4 ranks on an oversubscribed host: a 65 ms step, each rank arriving 0 to ``noise_s`` late at every
    collective; ``late`` = (rank, from step, to step, seconds): that rank later by that much over those steps."""
    import random

    rnd = random.Random(3)
    out = []
    for step in range(steps):
        t = 1000.0 + 0.065 * step
        starts = [t + rnd.uniform(0, noise_s) for _ in range(4)]
        rank, first, last, extra = late
        if first <= step < last:
            starts[rank] += extra
        end = max(starts) + 0.004
        out += [rec(r, step, starts[r], end - starts[r], step=step) for r in range(4)]
    return out


def test_lateness_within_the_ranks_arrival_jitter_is_no_straggler_and_a_real_one_still_is():
    # Ranks arriving 0-60 ms apart at random on a 65 ms step, one of them 22 ms later still for 40 steps: over a
    # quarter of a step, so judged on the step alone (jitter_k=0) it is called a straggler, but the ranks' own
    # jitter is that large; against 1.5 times the jitter (the default) it is not. A 120 ms straggler still is.
    noisy = _jittery_job(60, 0.06, (1, 10, 50, 0.022))
    judged_on_the_step = replay(noisy, Collector(CollectSettings(jitter_k=0.0)), 0.25)
    assert [(a.kind, a.rank) for a in judged_on_the_step] == [("straggler", 1)]
    assert replay(noisy, Collector(CollectSettings()), 0.25) == []
    slowed = replay(_jittery_job(60, 0.06, (1, 20, 60, 0.12)), Collector(CollectSettings()), 0.25)
    assert [(a.kind, a.rank) for a in slowed] == [("straggler", 1)] and 20 < slowed[0].step <= 40


def test_a_straggler_alert_clears_only_once_the_rank_was_clean_over_the_steps_persistence_asks():
    # The noisy job judged on the step alone: rank 1, 22 ms late over steps 10-49. No window reaching into the
    # 10-step warm-up carries a verdict (the first is steps 10-19), and noise hides the rank from the windows of
    # two evaluations 4 steps apart (ending at steps 26 and 30), so it is named at step 34; noise hides it again
    # from two evaluations 3 apart (42, 45). Cleared on those two, the alert would go while the rank was still
    # late; the clean evaluations must span 5 steps too, and it is cleared at the window ending at step 49
    c = Collector(CollectSettings(jitter_k=0.0))
    replay(_jittery_job(60, 0.06, (1, 10, 50, 0.022)), c, 0.25)
    assert [(a.kind, a.rank, a.step) for a in c.history] == [("straggler", 1, 34)]
    cleared = c.history[0].cleared_at_s
    assert cleared is not None and cleared > 1000.0 + 0.065 * 48


def test_the_arrival_jitter_is_the_typical_ranks_spread_of_its_lateness():
    # ranks 0-2 alternate 0 / 10 ms late (out of phase for rank 1); rank 3 is 50 ms late at every collective.
    # Against each collective's median arrival (5 ms, then 10 ms) the lateness series are r0 and r2 -5 / 0, r1
    # +5 / -10, r3 45 / 40 ms: spreads (MAD) 2.5, 7.5, 2.5 and 2.5 ms, median 2.5 ms, 3.7 ms as a standard
    # deviation: the steady straggler's own spread is the small one, not a measure of the noise.
    from commlens.monitor.collect import _arrival_jitter, _Joined

    def joined(offsets: list[float]) -> list:
        out = []
        for i in range(40):
            starts = [100.0 + (0.010 if (i + r) % 2 else 0.0) for r in range(3)] + [100.05]
            out.append(
                _Joined(
                    i,
                    "all_reduce",
                    1 << 20,
                    1 << 20,
                    [s + o for s, o in zip(starts, offsets)],
                    [101.0] * 4,
                    [None] * 4,
                    i,
                )
            )
        return out

    assert _arrival_jitter(joined([0.0] * 4)) == pytest.approx(1.4826 * 0.0025, rel=1e-6)
    # the same job 3 s later on every clock
    assert _arrival_jitter(joined([3.0] * 4)) == pytest.approx(1.4826 * 0.0025, rel=1e-6)
    assert _arrival_jitter([]) == 0.0


def test_a_rank_late_only_in_the_jobs_first_steps_is_no_straggler():
    # Ranks warm up unevenly (lazy initialisation, the first polls of their endpoints): a rank 40 ms late over
    # steps 0-12 only. Judged from the first step (warmup_steps=0) it is named at step 14 (the first whole window,
    # steps 0-9, and the one 5 steps later both name it); the default leaves the first 10 steps out and names nobody
    records = synthetic_job(60, late_rank=1, late_from=0, late_s=0.04, late_to=13)
    early = replay(records, Collector(CollectSettings(warmup_steps=0)), interval_s=0.2)
    assert [(a.kind, a.rank) for a in early] == [("straggler", 1)] and early[0].step is not None
    assert early[0].step <= 14
    assert replay(records, Collector(CollectSettings()), interval_s=0.2) == []


def test_collector_finds_a_slowdown_of_the_groups_own_time_against_its_history():
    records = []
    for step in range(80):
        own = 0.004 if step < 40 else 0.012
        t = 1000.0 + 0.1 * step
        for r in range(4):
            records.append(rec(r, step, t + 0.0002 * r, own + 0.0002 * (3 - r), step=step))
    c = Collector(CollectSettings(persist=2))
    alerts = replay(records, c, interval_s=0.5)
    kinds = [a.kind for a in alerts]
    assert kinds == ["slowdown"], [a.text for a in alerts]
    assert "own time up" in alerts[0].text and alerts[0].step >= 40


def test_a_slowdown_point_pools_collectives_that_arrive_one_at_a_time():
    # polled live, a collective can arrive alone in an evaluation; a point of one is as noisy as that collective,
    # so it waits for two more. From the 60th on, every third collective is a 12 ms outlier (the scheduler, on a
    # busy host) while the typical one stays at 4 ms: as one-collective points the detector called that a
    # slowdown of +50% to +100% (point_samples=1); as medians of three the points stay at 4 ms
    c = Collector(CollectSettings(persist=1))
    alerts = []
    for seq in range(150):
        own = 0.012 if seq >= 60 and seq % 3 == 0 else 0.004
        t = 1000.0 + 0.1 * seq
        c.add([rec(r, seq, t, own, step=seq) for r in range(4)])
        alerts += c.evaluate(t + 0.05)
    hist = c.groups["world"].history[("all_reduce", 1 << 20)]
    assert len(hist) == 50 and max(hist) == pytest.approx(0.004)
    assert alerts == []


def test_collector_finds_the_slow_group_among_peer_groups():
    records = []
    for seq in range(40):
        t = 1000.0 + 0.1 * seq
        for g in range(4):
            ranks = (2 * g, 2 * g + 1)
            own = 0.030 if g == 3 else 0.005
            for r in ranks:
                records.append(rec(r, seq, t, own, group=f"tp{g}", n=2, ranks=ranks))
    c = Collector(CollectSettings(persist=2))
    alerts = replay(records, c, interval_s=0.5)
    assert {(a.kind, a.group) for a in alerts} == {("slow_group", "tp3")}


def test_the_live_collector_loads_its_detectors_before_it_reads_the_job():
    # loaded at the first evaluation with enough history instead, their CPU landed a few seconds into the job,
    # on the cores its ranks share, and slowed the collectives being measured. What they load: ruptures'
    # compiled PELT alone (issue 34: no `import ruptures`, no scipy.stats on this path)
    script = """
import sys, tempfile
from commlens.monitor.collect import Collector, JsonlSource, collect
from commlens.regress import extension

class Source(JsonlSource):
    loaded = None
    def poll(self, deadline=None):
        if self.loaded is None:
            self.loaded = extension.compiled_function.cache_info().currsize >= 1  # PELT (and ndtr) loaded
        self.answered = True
        return []

source = Source(tempfile.mkdtemp())
collect([source], Collector(), interval_s=0.01, duration_s=0.05, idle_exit_s=None)
print(source.loaded)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_collector_settings_and_endpoints_are_checked():
    with pytest.raises(CollectError, match="window"):
        CollectSettings(window=2)
    with pytest.raises(CollectError, match="late_threshold_s"):
        CollectSettings(late_threshold_s=float("nan"))
    with pytest.raises(CollectError, match="jitter_k must be a finite number >= 0"):
        CollectSettings(jitter_k=float("nan"))
    with pytest.raises(CollectError, match="warmup_steps must be >= 0"):
        CollectSettings(warmup_steps=-1)
    assert parse_endpoints(["127.0.0.1:9750-9753"]) == [("127.0.0.1", p) for p in range(9750, 9754)]
    for bad in ("nohost", "h:x", "h:9-1", "h:0", "h:1-5000"):
        with pytest.raises(CollectError):
            parse_endpoints([bad])


def test_jsonl_source_waits_for_a_partial_line_and_skips_an_oversized_one(tmp_path):
    path = tmp_path / "monitor-rank0.jsonl"
    line = json.dumps({"type": "record", **rec(0, 0, 1.0, 0.001).as_wire()})
    path.write_text(line + "\n" + '{"type":"record","rank":0,' + "x" * (2 << 20) + "\n" + line[:20])
    src = JsonlSource(tmp_path)
    assert len(src.poll()) == 1 and src.bad_lines == 1
    with path.open("a") as fp:
        fp.write(line[20:] + "\n" + json.dumps({"type": "end"}) + "\n")
    assert [r.seq for r in src.poll()] == [0]
    assert src.done


def test_collect_cli_usage_errors_are_clear(tmp_path):
    for args, expect in (
        ((), "give the job's --endpoint"),
        (("--jsonl", str(tmp_path / "none")), "not a directory"),
        (("--endpoint", "localhost"), "expected HOST:PORT"),
        (("--endpoint", "127.0.0.1:1", "--replay"), "--replay reads files"),
        (("--jsonl", str(tmp_path), "--window", "1"), "window must be >= 4"),
        (("--jsonl", str(tmp_path), "--warmup-steps", "-1"), "warmup_steps must be >= 0"),
        (("--jsonl", str(tmp_path), "--warmup-steps", "x"), "invalid value for '--warmup-steps'"),
    ):
        proc = commlens("monitor", "collect", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and expect in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


# ---- the endpoint ----------------------------------------------------------------------------------------


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_endpoint_binds_loopback_and_needs_a_token_for_anything_else():
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")
    with pytest.raises(EndpointError, match="token"):
        serve("0.0.0.0", 0, reg)
    server = serve("0.0.0.0", 0, reg, records=lambda a, n: {"after": a, "limit": n}, token="s3cret")
    try:
        port = server.address[1]
        assert _get(f"http://127.0.0.1:{port}/metrics")[0] == 401
        assert _get(f"http://127.0.0.1:{port}/metrics", token="s3cre")[0] == 401
        assert _get(f"http://127.0.0.1:{port}/metrics", token="s3cret")[0] == 200
        code, body = _get(f"http://127.0.0.1:{port}/records?after=5&limit=999999", token="s3cret")
        assert code == 200 and json.loads(body) == {"after": 5, "limit": 20000}
        assert _get(f"http://127.0.0.1:{port}/records?after=-1", token="s3cret")[0] == 400
        assert _get(f"http://127.0.0.1:{port}/records?after=x", token="s3cret")[0] == 400
        assert _get(f"http://127.0.0.1:{port}/../../etc/passwd", token="s3cret")[0] == 404
    finally:
        server.close()


# ---- real jobs -------------------------------------------------------------------------------------------


def test_every_collective_is_recorded_with_nccl_tests_sizes_and_the_monitor_adds_none():
    proc = subprocess.run(torchrun(SUBJECT), capture_output=True, text=True, timeout=180, env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    got = sorted((r["group"], r["seq"], r["op"], r["size_bytes"], r["dtype"]) for r in out["records"])
    per_rank = {"world": 4, "pair": 2}
    want = []
    for group, n in per_rank.items():
        want += [
            (group, 0, "all_reduce", 1 << 20, "float32"),
            (group, 1, "all_reduce", 1 << 18, "float32"),
            (group, 2, "all_gather", n * (1 << 16), "float32"),  # the gathered output, as nccl-tests
            (group, 3, "reduce_scatter", 1 << 18, "float32"),  # the input
            (group, 4, "all_to_all", 1 << 16, "float32"),
            (group, 5, "broadcast", 4096, "int64"),
            (group, 6, "gather", n * 1024, "float32"),
            (group, 7, "scatter", n * 1024, "float32"),
            (group, 8, "barrier", 0, "uint8"),
        ]
    assert got == sorted(want)
    groups = {r["group"]: (r["group_size"], r["group_ranks"]) for r in out["records"]}
    assert groups == {"world": (4, [0, 1, 2, 3]), "pair": (2, [0, 1])}
    for r in out["records"]:
        assert r["end_s"] >= r["start_s"] and r["timing"] == "cpu" and r["step"] == 0
    # the async all-reduce was timed at its completion, after the calls issued behind it
    async_ar = next(r for r in out["records"] if r["group"] == "world" and r["seq"] == 1)
    gather = next(r for r in out["records"] if r["group"] == "world" and r["seq"] == 2)
    assert async_ar["end_s"] >= gather["start_s"]
    # the Flight Recorder saw exactly the job's collectives: the monitor issued none of its own
    assert len(out["fr_ops"]) == len(out["records"]) == 18
    assert out["lost"] == 0
    assert out["model"].startswith("model local-cpu, calibrated by commlens model fit")
    row = next(
        r for r in out["rows"] if r["group"] == "world" and r["op"] == "all_reduce" and r["size_bucket"] == 1 << 20
    )
    assert row["count"] == 1


def test_a_full_ring_counts_what_it_lost_and_keeps_the_newest():
    env = clean_env(SUBJECT_CAPACITY="16", SUBJECT_ROUNDS="3")
    proc = subprocess.run(torchrun(SUBJECT, nproc=2), capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["written"] == 27 and out["lost"] == 27 - 16 and len(out["records"]) == 16
    assert max(r["step"] for r in out["records"]) == 2


def test_a_healthy_ddp_job_scraped_by_prometheus_and_collected_live_raises_no_alarm(tmp_path, prometheus):
    base = _ports(4)
    db = tmp_path / "store.db"
    job = subprocess.Popen(
        torchrun(TRAIN, "--parallel", "ddp", *JOB, "--port", str(base), "--jsonl-dir", str(tmp_path / "mon"),
                 "--store", f"sqlite:///{db}", "--sleep-after-s", "4"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    server = prometheus([f"127.0.0.1:{base + i}" for i in range(4)])
    collector = subprocess.Popen(
        [str(BIN / "commlens"), "monitor", "collect", "--endpoint", f"127.0.0.1:{base}-{base + 3}",
         "--interval", "0.25", "--idle-exit", "3", "--output", str(tmp_path / "collect.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    try:
        samples = server.wait_for(
            'sum by (rank) (commlens_collectives_total{op="all_reduce"})',
            lambda s: len(s) == 4 and all(x.value >= 20 for x in s),
            timeout_s=120,
        )
        assert {s.labels["rank"] for s in samples} == {"0", "1", "2", "3"}
        ratio = server.query("commlens_collective_expected_ratio")
        assert ratio and all(s.labels["model"] == "local-cpu" and 0 < s.value < 10 for s in ratio)
        busbw = server.query('commlens_collective_bus_bandwidth_bytes_per_second{quantile="0.5"}')
        assert busbw and all(s.value > 0 and s.labels["group"] == "world" for s in busbw)
        _, err = job.communicate(timeout=180)
        assert job.returncode == 0, err[-3000:]
        out, cerr = collector.communicate(timeout=60)
    finally:
        for p in (job, collector):
            if p.poll() is None:
                p.kill()
    assert collector.returncode == 0, cerr
    assert "no alert" in out, out
    summary = json.loads((tmp_path / "collect.json").read_text())
    assert summary["alerts"] == []
    assert summary["groups"]["world"]["joined"] >= 60  # every step's all-reduces, joined across 4 ranks
    # the JSONL has windows with the expectation; the store has the job as a run of source monitor
    lines = [json.loads(x) for x in (tmp_path / "mon" / "monitor-rank0.jsonl").read_text().splitlines()]
    windows = [x for x in lines if x["type"] == "window"]
    assert windows and all("expected_ratio" in w for w in windows if w["op"] == "all_reduce")
    assert lines[0]["type"] == "job" and lines[-1]["type"] == "end"
    runs = json.loads(commlens("runs", "--db", str(db), "--json").stdout)
    assert [r["source"] for r in runs] == ["monitor"]


def test_fsdp2_all_gathers_and_reduce_scatters_are_recorded(tmp_path):
    proc = subprocess.run(
        torchrun(TRAIN, "--parallel", "fsdp2", "--steps", "4", "--jsonl-dir", str(tmp_path)),
        capture_output=True, text=True, timeout=180, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(x) for x in (tmp_path / "monitor-rank1.jsonl").read_text().splitlines()]
    ops = {(r["op"], r["size_bytes"]) for r in records if r["type"] == "record"}
    names = {op for op, _ in ops}
    assert {"all_gather", "reduce_scatter"} <= names, ops
    steps = {r["step"] for r in records if r["type"] == "record" and r["op"] == "reduce_scatter"}
    assert steps == set(range(4))  # every step's gradients were reduce-scattered, and seen


def test_a_slowed_rank_is_named_live_within_20_steps(tmp_path):
    base = _ports(4)
    job = subprocess.Popen(
        torchrun(TRAIN, "--parallel", "ddp", *JOB, "--port", str(base), "--slow-rank", "1", "--slow-from", "20",
                 "--slow-ms", "120", "--sleep-after-s", "3"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    try:
        proc = commlens(
            "monitor", "collect", "--endpoint", f"127.0.0.1:{base}-{base + 3}", "--interval", "0.5",
            "--idle-exit", "3", "--output", str(tmp_path / "c.json"), "--fail-on-alert", timeout=240,
        )  # fmt: skip
        job.communicate(timeout=120)
    except subprocess.TimeoutExpired as e:  # say why: the job's own account (a rank that could not start, ...)
        job.kill()
        _, job_err = job.communicate()
        pytest.fail(f"{e}\nthe job's stderr:\n{job_err[-4000:]}")
    finally:
        if job.poll() is None:
            job.kill()
    assert proc.returncode == 1, proc.stderr  # --fail-on-alert: an alert was raised
    summary = json.loads((tmp_path / "c.json").read_text())
    # rank 1 and no other is named; its burst of compute on a shared 2-core machine may also slow the
    # group's own all-reduce time (a slowdown of the world group, which names no rank), but not before step 20
    stragglers = [a for a in summary["alerts"] if a["kind"] == "straggler"]
    # the whole alerts on failure (pytest abbreviates dicts): which kind of verdict, at which step, by how much
    assert {a["rank"] for a in stragglers} == {1}, json.dumps(summary["alerts"], indent=1) + proc.stdout[-3000:]
    others = [a for a in summary["alerts"] if a["kind"] != "straggler"]
    assert all(a["kind"] == "slowdown" and a["rank"] is None and a["group"] == "world" for a in others), others
    assert 20 <= min(a["step"] for a in stragglers) <= 40, summary["alerts"]
    assert min(a["step"] for a in summary["alerts"]) >= 20, summary["alerts"]
    assert "rank 1" in proc.stdout and "arrives late" in proc.stdout


def test_a_hung_collective_dumps_the_flight_recorder_on_every_rank_and_diagnose_hang_names_the_rank(tmp_path):
    mon = tmp_path / "mon"
    base = _ports(4)
    job = subprocess.Popen(
        torchrun(TRAIN, "--parallel", "ddp", "--steps", "30", "--jsonl-dir", str(mon), "--hang-rank", "3",
                 "--hang-at", "5", "--hang-deadline-s", "3", "--port", str(base)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), start_new_session=True,
    )  # fmt: skip
    collector = subprocess.Popen(
        [str(BIN / "commlens"), "monitor", "collect", "--endpoint", f"127.0.0.1:{base}-{base + 3}",
         "--hang-after", "4", "--idle-exit", "2", "--output", str(tmp_path / "c.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    dumps = mon / "flightrec"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if len(list(dumps.glob("fr_trace_rank_*"))) == 4:
                break
            assert job.poll() is None, job.communicate()[1][-3000:]
            time.sleep(0.5)
        time.sleep(2)  # the collector's evaluations after the deadline
    finally:
        # torchrun starts each rank in a session of its own: kill the ranks by the pids they wrote, then it
        for line in mon.glob("monitor-rank*.jsonl") if mon.is_dir() else []:
            with contextlib.suppress(ValueError, OSError, IndexError, KeyError):
                os.kill(int(json.loads(line.read_text().splitlines()[0])["pid"]), signal.SIGKILL)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        out, err = collector.communicate(timeout=60)
    # the collector, from the ranks' endpoints alone: three ranks wait in the collective, rank 3 never joined
    hangs = [a for a in json.loads((tmp_path / "c.json").read_text())["alerts"] if a["kind"] == "hang"]
    assert hangs and hangs[0]["rank"] == 3 and "rank 3 never joined" in hangs[0]["text"], (hangs, err[-2000:])
    files = sorted(p.name for p in dumps.glob("fr_trace_rank_*"))
    assert files == [f"fr_trace_rank_{r}" for r in range(4)], files
    proc = commlens("diagnose", "hang", str(dumps), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    text = json.dumps(report)
    assert "3" in str(report.get("suspects", report)) and "rank" in text
    hang_lines = [json.loads(x) for x in (mon / "monitor-rank0.jsonl").read_text().splitlines() if '"hang"' in x]
    assert hang_lines and "deadline" in hang_lines[0]["reason"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
