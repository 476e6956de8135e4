"""monitor collect against broken and hostile sources: one bad rank is reported while the others are judged.

Every case here stopped the collector (a traceback), hung it, or let it end "no alert" with nothing read,
before the sources checked what they read (issue 28).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from benchutil import BIN, clean_env
from hostile_endpoint import Canned, Trickle

from commlens.monitor.collect import CollectError, Collector, EndpointSource, JsonlSource, collect, warm_up
from commlens.results.collectives import CollectiveRecord

PAIR = (0, 1)


def _record(rank: int, seq: int) -> dict[str, Any]:
    t = 1000.0 + 0.1 * seq
    return {
        "type": "record",
        **CollectiveRecord(
            rank=rank,
            group="pair",
            group_size=2,
            seq=seq,
            op="all_reduce",
            size_bytes=1 << 20,
            dtype="float32",
            start_s=t,
            end_s=t + 0.004,
            group_ranks=PAIR,
            host="h",
            step=seq,
        ).as_wire(),
    }


def _healthy(rank: int) -> Any:
    """A rank endpoint of the pair group: 5 more collectives each poll, 40 in all."""

    def answer(path: str) -> Any:
        if path.startswith("/job"):
            return {"job_id": "j", "rank": rank, "world_size": 3}
        after = int(path.split("after=")[1].split("&")[0])
        seqs = range(after, min(after + 5, 40))
        return {"rank": rank, "next": after + len(seqs), "lost": 0, "records": [_record(rank, s) for s in seqs]}

    return answer


def _garbage(body: bytes) -> Any:
    return lambda path: {"job_id": "j", "rank": 2} if path.startswith("/job") else body


GARBAGE = {
    "next a string": (b'{"rank": 2, "next": "abc", "records": []}', "next"),
    "next a list": (b'{"rank": 2, "next": [1], "records": []}', "next"),
    "next 1e999": (b'{"rank": 2, "next": 1e999, "records": []}', "next"),
    "lost a string": (b'{"rank": 2, "next": 0, "lost": "x", "records": []}', "lost"),
    "deep nesting": (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    "inflight garbage": (b'{"rank": 2, "next": 0, "records": [], "inflight": {"group": 1}}', "inflight.group"),
    "inflight age inf": (
        b'{"rank": 2, "next": 0, "records": [], "inflight": {"group": "g", "seq": 1, "age_s": 1e999}}',
        "inflight.age_s",
    ),
    "rank negative": (b'{"rank": -1, "next": 0, "records": []}', "rank"),
    "not json": (b"<html>hello</html>", "not JSON"),
}


def test_ranks_sending_garbage_are_reported_while_the_healthy_ranks_are_judged(caplog):
    with contextlib.ExitStack() as stack:
        r0, r1 = stack.enter_context(Canned(_healthy(0))), stack.enter_context(Canned(_healthy(1)))
        bad = {case: stack.enter_context(Canned(_garbage(body))) for case, (body, _) in GARBAGE.items()}
        servers = [r0, r1, *bad.values()]
        sources: list[Any] = [EndpointSource("127.0.0.1", s.port, timeout_s=1.0) for s in servers]
        collector = Collector()
        with caplog.at_level(logging.WARNING, logger="commlens.monitor"):
            collect(sources, collector, interval_s=0.05, duration_s=1.0, idle_exit_s=None)
    summary = collector.summary()
    assert summary["groups"]["pair"]["joined"] == 40  # the healthy pair: every collective joined
    states = {s["source"]: s for s in summary["sources"]}
    assert states[r0.address]["state"] == states[r1.address]["state"] == "ok"
    for case, server in bad.items():
        named = GARBAGE[case][1]
        assert states[server.address]["state"] == "bad", case
        assert named in states[server.address]["problem"], (case, states[server.address])
        warned = [r.getMessage() for r in caplog.records if server.address in r.getMessage()]
        assert warned and "bad" in warned[0] and "other sources are still judged" in warned[0], case


def test_a_rank_endpoint_sending_a_byte_a_second_cannot_hold_the_collector_past_its_duration():
    with Canned(_healthy(0)) as r0, Canned(_healthy(1)) as r1, Trickle(every_s=0.2) as slow:
        sources: list[Any] = [EndpointSource("127.0.0.1", s.port, timeout_s=0.5) for s in (r0, r1, slow)]
        collector = Collector()
        warm_up()  # the detectors' imports (seconds on a busy machine) before the clock starts
        started = time.monotonic()
        collect(sources, collector, interval_s=0.05, duration_s=1.5, idle_exit_s=None)
        took = time.monotonic() - started
    assert took < 8.0, took  # 1.5 s asked; a held collector would run as long as the endpoint trickles (forever)
    assert collector.summary()["groups"]["pair"]["joined"] == 40
    status = {s["source"]: s for s in collector.summary()["sources"]}[slow.address]
    assert status["state"] == "unreachable" and "no answer within" in status["problem"]


def _collect_cli(*args: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "commlens"), "monitor", "collect", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
    )
    return proc, time.monotonic() - started


def test_an_unreachable_endpoint_is_a_warning_within_seconds_and_no_answer_at_all_is_an_error():
    with Trickle() as closed:
        port = closed.port
    proc, took = _collect_cli("--endpoint", f"127.0.0.1:{port}", "--duration", "3", "--timeout", "0.5")
    assert proc.returncode == 2, proc.stderr
    assert f"127.0.0.1:{port}: unreachable" in proc.stderr and "refused" in proc.stderr
    assert "error: no source answered in 3 s" in proc.stderr and "no alert" not in proc.stdout
    assert took < 60, took  # the duration and the start-up of the command, on a busy machine


def test_a_directory_that_holds_the_job_one_level_down_is_an_error_at_once(tmp_path):
    mon = tmp_path / "run" / "mon"
    mon.mkdir(parents=True)
    (mon / "monitor-rank0.jsonl").write_text(json.dumps(_record(0, 0)) + "\n")
    started = time.monotonic()
    with pytest.raises(CollectError, match=f"did you mean --jsonl {mon}"):
        collect([JsonlSource(tmp_path / "run")], Collector(), interval_s=0.05)
    assert time.monotonic() - started < 5


def test_a_directory_where_no_rank_ever_writes_is_an_error_after_the_start_wait(tmp_path, caplog):
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="commlens.monitor"):
        with pytest.raises(CollectError, match="no source answered in 1 s"):
            collect([JsonlSource(tmp_path)], Collector(), interval_s=0.05, start_wait_s=1.0)
    assert time.monotonic() - started < 5
    assert "no monitor-rank<R>.jsonl file yet" in caplog.text


def test_only_regular_files_are_read_and_a_bad_hang_line_is_skipped(tmp_path, caplog):
    lines = [_record(0, s) for s in range(3)] + [{"type": "hang", "rank": "x"}, {"type": "hang", "rank": [1]}]
    lines += [{"type": "hang", "rank": 0, "reason": "stuck"}, {"type": "end"}]
    (tmp_path / "monitor-rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    os.mkfifo(tmp_path / "monitor-rank1.jsonl")
    (tmp_path / "monitor-rank2.jsonl").symlink_to("/dev/zero")
    source = JsonlSource(tmp_path)
    collector = Collector()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="commlens.monitor"):
        collect([source], collector, interval_s=0.05, duration_s=20)
    assert time.monotonic() - started < 5  # every regular file ended: done
    assert collector.records == 3 and source.bad_lines == 2
    assert [r["rank"] for r in collector.hang_reports] == [0]
    assert "monitor-rank1.jsonl: a FIFO, not read" in caplog.text
    assert "monitor-rank2.jsonl: a device, not read" in caplog.text
    status = collector.summary()["sources"][0]
    assert status["state"] == "bad" and "a FIFO, not read" in status["problem"] and status["bad_records"] == 2


def test_a_jsonl_source_reads_a_bounded_amount_of_one_file_a_poll(tmp_path, monkeypatch):
    import commlens.monitor.collect as c

    monkeypatch.setattr(c, "MAX_POLL_BYTES", 4096)
    line = json.dumps(_record(0, 0)) + "\n"
    (tmp_path / "monitor-rank0.jsonl").write_text(line * 100)
    src = JsonlSource(Path(tmp_path))
    first = len(src.poll())
    assert 0 < first < 100
    total = first
    while (got := len(src.poll())) > 0:
        total += got
    assert total == 100


# ---- the rank's endpoint ---------------------------------------------------------------------------------


def test_the_rank_endpoint_serves_slow_connections_on_a_bounded_pool_with_a_deadline():
    import socket
    import threading

    from prometheus_client import CollectorRegistry

    from commlens.monitor.exporter import serve

    before = threading.active_count()
    server = serve("127.0.0.1", 0, CollectorRegistry(), timeout_s=1.0, workers=4, queue=8)
    port = server.address[1]
    held = []
    try:
        for i in range(150):  # half send nothing, half a byte of their request
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 2:
                s.sendall(b"G")
            held.append(s)
        time.sleep(0.3)
        assert threading.active_count() <= before + 4 + 3  # its workers, its loop, its watchdog
        started = time.monotonic()
        for s in held:  # every one is answered 503 at once or closed at its deadline
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
        assert time.monotonic() - started < 3.0
        code, _ = _endpoint_get(port, "/metrics")
        assert code == 200
        assert _endpoint_get(port, "/metrics", host="evil.example:80")[0] == 421
    finally:
        for s in held:
            s.close()
        server.close()


def _endpoint_get(port: int, path: str, host: str | None = None) -> tuple[int, bytes]:
    from commlens.monitor.fetch import http_get

    if host is None:
        return http_get("127.0.0.1", port, path, timeout_s=5)
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return int(data.split(b" ")[1]), data
