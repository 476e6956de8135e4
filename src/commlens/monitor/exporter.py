"""One rank's endpoint: Prometheus metrics (``/metrics``) and its recent records (``/records``) for the collector.

Metric and label names follow Prometheus' conventions (base units, ``_total``
counters, ``_seconds``, ``_bytes_per_second``). NCCL Inspector's
``nccl_bus_bandwidth_gbs`` and ``nccl_collective_exec_time_microseconds`` are
``commlens_collective_bus_bandwidth_bytes_per_second`` and
``commlens_collective_duration_seconds`` here, labelled by job, rank, host,
group, op and size bucket. Gauges hold the last closed window; counters
accumulate over the job. The metrics are updated when a window closes, never
on the hot path.

The server binds loopback unless told otherwise; any other address needs a
token, checked on every request (``Authorization: Bearer TOKEN``, compared
in constant time). It serves nothing else: no path from the client is read.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from commlens.errors import CommlensError

__all__ = ["CollectorMetrics", "EndpointError", "MonitorMetrics", "RankServer", "is_loopback", "serve"]

MAX_RECORDS_PER_REQUEST = 20000


class EndpointError(CommlensError, ValueError):
    """An endpoint that cannot be served as asked (a non-loopback address without a token, a busy port)."""


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MonitorMetrics:
    """The rank's metrics, in a registry of their own (nothing of the process' default registry leaks)."""

    def __init__(self, job_id: str, rank: int, host: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry(auto_describe=True)
        self.base = {"job_id": job_id, "rank": str(rank), "host": host}
        coll = ["job_id", "rank", "host", "group", "op", "size_bucket"]
        r = self.registry
        self.count = Counter("commlens_collectives", "Collectives completed", coll, registry=r)
        self.time = Counter("commlens_collective_time_seconds", "Time spent in collectives", coll, registry=r)
        self.bytes = Counter("commlens_collective_bytes", "Bytes moved by collectives (message size)", coll, registry=r)
        self.duration = Gauge(
            "commlens_collective_duration_seconds",
            "Duration of one collective in the last window, by quantile",
            [*coll, "quantile"],
            registry=r,
        )
        self.busbw = Gauge(
            "commlens_collective_bus_bandwidth_bytes_per_second",
            "busBW (nccl-tests' definition) in the last window, by quantile",
            [*coll, "quantile"],
            registry=r,
        )
        self.expected = Gauge(
            "commlens_collective_expected_ratio",
            "Measured busBW p50 of the last window over the cost model's expected busBW",
            [*coll, "model"],
            registry=r,
        )
        self.inflight = Gauge(
            "commlens_collective_inflight_seconds",
            "Age of the oldest collective issued and not completed (0 when none)",
            ["job_id", "rank", "host", "group"],
            registry=r,
        )
        self.dropped = Counter(
            "commlens_monitor_records_dropped",
            "Records lost to the ring's wrap",
            ["job_id", "rank", "host"],
            registry=r,
        )
        self.window = Gauge(
            "commlens_monitor_window", "Index of the last closed window", ["job_id", "rank", "host"], registry=r
        )
        self._inflight_groups: set[str] = set()

    def update(self, rows: list[Any], ratios: dict[tuple[str, str, int], float], model: str, window: int) -> None:
        from commlens.results.collectives import size_bucket_label

        b = self.base
        for row in rows:
            labels = dict(b, group=row.group, op=row.op, size_bucket=size_bucket_label(row.size_bucket))
            self.count.labels(**labels).inc(row.count)
            self.time.labels(**labels).inc(row.time_s)
            self.bytes.labels(**labels).inc(row.bytes)
            self.duration.labels(**labels, quantile="0.5").set(row.duration_p50_s)
            self.duration.labels(**labels, quantile="0.99").set(row.duration_p99_s)
            self.busbw.labels(**labels, quantile="0.5").set(row.busbw_p50_bytes_per_s)
            self.busbw.labels(**labels, quantile="0.99").set(row.busbw_p99_bytes_per_s)
            ratio = ratios.get(row.key)
            if ratio is not None:
                self.expected.labels(**labels, model=model).set(ratio)
        self.window.labels(**b).set(window)

    def set_inflight(self, ages: dict[str, float]) -> None:
        for group in self._inflight_groups | set(ages):
            self.inflight.labels(**self.base, group=group).set(ages.get(group, 0.0))
        self._inflight_groups |= set(ages)

    def add_dropped(self, n: int) -> None:
        if n:
            self.dropped.labels(**self.base).inc(n)


class RankServer:
    """The HTTP server of one rank (or of the collector): a thread, stopped by :meth:`close`."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(
    host: str,
    port: int,
    registry: Any,
    *,
    records: Callable[[int, int], dict[str, Any]] | None = None,
    info: Callable[[], dict[str, Any]] | None = None,
    token: str | None = None,
) -> RankServer:
    """Serve ``/metrics`` from ``registry``, and ``/records?after=N`` and ``/job`` when given."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    if not is_loopback(host) and not token:
        raise EndpointError(
            f"binding {host} exposes the job's metrics beyond this machine: give a token "
            "(token=... or COMMLENS_MONITOR_TOKEN), or bind 127.0.0.1"
        )
    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class' name
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if expected is not None:
                given = self.headers.get("Authorization", "").encode()
                if not hmac.compare_digest(given, expected):
                    self._send(401, b"token required\n", "text/plain")
                    return
            url = urlsplit(self.path)
            try:
                if url.path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif url.path == "/records" and records is not None:
                    q = parse_qs(url.query)
                    after = int(q.get("after", ["0"])[0])
                    limit = min(int(q.get("limit", [str(MAX_RECORDS_PER_REQUEST)])[0]), MAX_RECORDS_PER_REQUEST)
                    if after < 0 or limit < 1:
                        raise ValueError("after must be >= 0 and limit >= 1")
                    self._send(200, json.dumps(records(after, limit)).encode(), "application/json")
                elif url.path == "/job" and info is not None:
                    self._send(200, json.dumps(info()).encode(), "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")
            except ValueError as e:
                self._send(400, f"bad request: {e}\n".encode(), "text/plain")

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        raise EndpointError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="commlens-monitor-http", daemon=True)
    thread.start()
    return RankServer(server, thread)


class CollectorMetrics:
    """The collector's metrics: active alerts, alert counts, rank lateness, joined collectives."""

    def __init__(self, job_id: str = "") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.job_id = job_id
        self.alert = Gauge(
            "commlens_monitor_alert",
            "1 while an alert is active, 0 once it cleared",
            ["job_id", "kind", "group", "op", "rank"],
            registry=r,
        )
        self.alerts = Counter("commlens_monitor_alerts", "Alerts raised", ["job_id", "kind"], registry=r)
        self.late = Gauge(
            "commlens_monitor_rank_lateness_seconds",
            "A rank's median lateness over the group's rolling window",
            ["job_id", "group", "rank"],
            registry=r,
        )
        self.joined = Counter(
            "commlens_monitor_joined_collectives",
            "Collectives joined across their group's ranks",
            ["job_id", "group"],
            registry=r,
        )
        self.source_up = Gauge(
            "commlens_monitor_source_up",
            "1 while a source (a rank's endpoint, a JSONL directory) answers with valid data, 0 while it fails",
            ["job_id", "source"],
            registry=r,
        )
        self.source_failures = Counter(
            "commlens_monitor_source_failures",
            "Polls of a source that failed, by state (unreachable: no answer in time; bad: an invalid answer)",
            ["job_id", "source", "state"],
            registry=r,
        )

    def _labels(self, alert: Any) -> dict[str, str]:
        rank = "" if alert.rank is None else str(alert.rank)
        return {"job_id": self.job_id, "kind": alert.kind, "group": alert.group, "op": alert.op, "rank": rank}

    def raised(self, alert: Any) -> None:
        self.alert.labels(**self._labels(alert)).set(1)
        self.alerts.labels(job_id=self.job_id, kind=alert.kind).inc()

    def cleared(self, alert: Any) -> None:
        self.alert.labels(**self._labels(alert)).set(0)

    def lateness(self, values: dict[tuple[str, int], float]) -> None:
        for (group, rank), v in values.items():
            self.late.labels(job_id=self.job_id, group=group, rank=str(rank)).set(v)

    def source_state(self, source: str, state: str) -> None:
        """One poll's outcome for ``source``: ``ok``, ``waiting``, ``unreachable`` or ``bad``."""
        self.source_up.labels(job_id=self.job_id, source=source).set(1 if state == "ok" else 0)
        if state in ("unreachable", "bad"):
            self.source_failures.labels(job_id=self.job_id, source=source, state=state).inc()

    def add_joined(self, group: str, n: int) -> None:
        if n:
            self.joined.labels(job_id=self.job_id, group=group).inc(n)
