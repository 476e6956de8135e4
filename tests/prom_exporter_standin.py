"""A stand-in for the monitor's exporters: serves the metric names the monitor exports, with known values.

Run as a script; it serves ``/metrics`` on a loopback port of its own choosing (``--port 0``), prints
``port N`` once serving, then reads commands from stdin, one a line, and answers each with ``ok`` (or
``error: ...``)::

    set METRIC VALUE [label=value ...]     set a gauge's series (the fixed labels are added)

It exits when stdin closes. ``--role rank`` serves one rank's series (labels job_id, rank, host),
``--role collector`` the collector's. The values are functions of the rank, so a test can assert them:
see :func:`rank_values`.
"""

from __future__ import annotations

import argparse
import sys

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, start_http_server

RANK_LABELS = ("job_id", "rank", "host")
COLL_LABELS = (*RANK_LABELS, "group", "op", "size_bucket")
COLLECTOR_LABELS = ("job_id",)
SERIES = {"group": "dp", "op": "all_reduce", "size_bucket": "64M"}


def rank_values(rank: int) -> dict[str, float]:
    """The value each of a rank's metrics has on the series :data:`SERIES` (quantile 0.5, model ``preset``)."""
    return {
        "commlens_collectives_total": 100.0 * (rank + 1),
        "commlens_collective_time_seconds_total": 2.5 * (rank + 1),
        "commlens_collective_bytes_total": 100.0 * (rank + 1) * 64 * 2**20,
        "commlens_collective_duration_seconds": 0.025 + 0.001 * rank,
        "commlens_collective_bus_bandwidth_bytes_per_second": 40e9 - 1e9 * rank,
        "commlens_collective_expected_ratio": 0.9 - 0.1 * rank,
        "commlens_collective_inflight_seconds": 0.0,
        "commlens_monitor_records_dropped_total": float(rank),
        "commlens_monitor_window": 7.0,
    }


def build_rank(registry: CollectorRegistry, job_id: str, rank: int, host: str) -> dict[str, Gauge]:
    """Register one rank's metrics with their values; the gauges by exported name, for ``set``."""
    v = rank_values(rank)
    fixed = {"job_id": job_id, "rank": str(rank), "host": host}
    count = Counter("commlens_collectives", "Collectives completed", COLL_LABELS, registry=registry)
    time_s = Counter("commlens_collective_time_seconds", "Time in collectives", COLL_LABELS, registry=registry)
    size = Counter("commlens_collective_bytes", "Bytes moved by collectives", COLL_LABELS, registry=registry)
    for counter, name in (
        (count, "commlens_collectives_total"),
        (time_s, "commlens_collective_time_seconds_total"),
        (size, "commlens_collective_bytes_total"),
    ):
        counter.labels(**fixed, **SERIES).inc(v[name])
    duration = Gauge(
        "commlens_collective_duration_seconds", "Duration, last window", (*COLL_LABELS, "quantile"), registry=registry
    )
    busbw = Gauge(
        "commlens_collective_bus_bandwidth_bytes_per_second",
        "busBW, last window",
        (*COLL_LABELS, "quantile"),
        registry=registry,
    )
    for gauge, name in (
        (duration, "commlens_collective_duration_seconds"),
        (busbw, "commlens_collective_bus_bandwidth_bytes_per_second"),
    ):
        gauge.labels(**fixed, **SERIES, quantile="0.5").set(v[name])
        gauge.labels(**fixed, **SERIES, quantile="0.99").set(v[name] * 1.5)
    ratio = Gauge("commlens_collective_expected_ratio", "busBW / expected", (*COLL_LABELS, "model"), registry=registry)
    ratio.labels(**fixed, **SERIES, model="preset").set(v["commlens_collective_expected_ratio"])
    inflight = Gauge(
        "commlens_collective_inflight_seconds",
        "Oldest collective in flight",
        (*RANK_LABELS, "group"),
        registry=registry,
    )
    inflight.labels(**fixed, group=SERIES["group"]).set(v["commlens_collective_inflight_seconds"])
    dropped = Counter("commlens_monitor_records_dropped", "Records dropped", RANK_LABELS, registry=registry)
    dropped.labels(**fixed).inc(v["commlens_monitor_records_dropped_total"])
    window = Gauge("commlens_monitor_window", "Last closed window", RANK_LABELS, registry=registry)
    window.labels(**fixed).set(v["commlens_monitor_window"])
    return {
        "commlens_collective_duration_seconds": duration,
        "commlens_collective_bus_bandwidth_bytes_per_second": busbw,
        "commlens_collective_expected_ratio": ratio,
        "commlens_collective_inflight_seconds": inflight,
        "commlens_monitor_window": window,
    }


def build_collector(registry: CollectorRegistry, job_id: str) -> dict[str, Gauge]:
    """Register the collector's metrics: no alert active, rank 3 of group dp 2 ms late."""
    fixed = {"job_id": job_id}
    alert = Gauge(
        "commlens_monitor_alert",
        "1 while an alert is active",
        (*COLLECTOR_LABELS, "kind", "group", "op", "rank"),
        registry=registry,
    )
    alerts = Counter("commlens_monitor_alerts", "Alerts raised", (*COLLECTOR_LABELS, "kind"), registry=registry)
    for kind in ("straggler", "slow_group", "slowdown", "below_expected", "hang"):
        alerts.labels(**fixed, kind=kind)
    lateness = Gauge(
        "commlens_monitor_rank_lateness_seconds",
        "Median lateness over the rolling window",
        (*COLLECTOR_LABELS, "group", "rank"),
        registry=registry,
    )
    for rank in range(4):
        lateness.labels(**fixed, group="dp", rank=str(rank)).set(0.002 if rank == 3 else 0.0001)
    joined = Counter(
        "commlens_monitor_joined_collectives", "Collectives joined", (*COLLECTOR_LABELS, "group"), registry=registry
    )
    joined.labels(**fixed, group="dp").inc(400)
    alert.labels(**fixed, kind="straggler", group="dp", op="all_reduce", rank="3").set(0)
    return {"commlens_monitor_alert": alert, "commlens_monitor_rank_lateness_seconds": lateness}


def serve_commands(gauges: dict[str, Gauge], fixed: dict[str, str]) -> None:
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] != "set" or len(words) < 3:
                raise ValueError(f"unknown command {line.strip()!r}")
            gauge = gauges.get(words[1])
            if gauge is None:
                raise ValueError(f"no settable gauge {words[1]!r}")
            labels = dict(w.split("=", 1) for w in words[3:])
            gauge.labels(**fixed, **labels).set(float(words[2]))
            print("ok", flush=True)
        except ValueError as e:
            print(f"error: {e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--role", choices=("rank", "collector"), required=True)
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--host", default="node-a")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    disable_created_metrics()
    registry = CollectorRegistry()
    if args.role == "rank":
        gauges = build_rank(registry, args.job_id, args.rank, args.host)
        fixed = {"job_id": args.job_id, "rank": str(args.rank), "host": args.host}
    else:
        gauges = build_collector(registry, args.job_id)
        fixed = {"job_id": args.job_id}
    server, _thread = start_http_server(args.port, addr="127.0.0.1", registry=registry)
    print(f"port {server.server_port}", flush=True)
    serve_commands(gauges, fixed)
    server.shutdown()


if __name__ == "__main__":
    main()
