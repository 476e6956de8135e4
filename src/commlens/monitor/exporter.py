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
in constant time). ``Host`` must name the address it is bound to, as in
``commlens serve`` (a loopback server answers no page that rebinds a domain
to 127.0.0.1). It serves nothing else: no path from the client is read.

It cannot be held by its clients: requests are served by a pool of
``workers`` threads with at most ``queue`` waiting (more are answered 503);
each connection has ``timeout_s`` in all, from accept to the last byte of its
answer (a watchdog thread shuts down the socket of one past it), and one
request (HTTP/1.0, no keep-alive).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from commlens.errors import CommlensError
from commlens.results.jsonvalue import JsonObject

__all__ = [
    "BoundedHTTPServer",
    "CollectorMetrics",
    "EndpointError",
    "MonitorMetrics",
    "RankServer",
    "allowed_hosts",
    "is_loopback",
    "serve",
]

MAX_RECORDS_PER_REQUEST = 20000
WORKERS = 8  # threads serving requests
QUEUE = 32  # accepted connections waiting for a worker, at most
TIMEOUT_S = 5.0  # one connection in all: its request read and its answer written


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


class BoundedHTTPServer(HTTPServer):
    """An HTTP server whose requests run on a fixed pool, each connection before a deadline."""

    request_queue_size = 128  # the listen backlog (http.server's 5 made a burst of connects wait seconds)

    def __init__(self, address: tuple[str, int], handler: Any, *, workers: int, queue: int, timeout_s: float) -> None:
        super().__init__(address, handler)
        self.timeout_s = timeout_s
        self.allowed_hosts: frozenset[str] | None = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="commlens-monitor-http")
        self._slots = threading.BoundedSemaphore(workers + queue)
        self._deadlines: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="commlens-monitor-watchdog", daemon=True)
        self._watchdog.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # every worker busy and the queue full: refuse, at once
            try:
                request.settimeout(0.5)
                request.sendall(
                    b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\nRetry-After: 1\r\n\r\nbusy\n"
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        request.settimeout(self.timeout_s)
        with self._lock:
            self._deadlines[request] = time.monotonic() + self.timeout_s
        try:
            self._pool.submit(self._work, request, client_address)
        except RuntimeError:  # shutting down
            self._done(request)

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - one connection's failure (a reset, a timeout) is that connection's
            pass
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        with self._lock:
            self._deadlines.pop(request, None)
        self.shutdown_request(request)
        self._slots.release()

    def _watch(self) -> None:
        """Shut down the sockets of connections past their deadline (one that sends a byte a second)."""
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                late = [s for s, t in self._deadlines.items() if t < now]
            for s in late:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def server_close(self) -> None:
        self._stop.set()
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host values a request may carry (as ``commlens serve`` checks them); None: any (every address)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {f"[{host}]" if ":" in host else host}
    if is_loopback(host):
        names |= {"localhost", "127.0.0.1", "[::1]"}
    else:  # bound to one address: Prometheus may scrape it by the machine's name
        names |= {socket.gethostname(), socket.getfqdn()}
    return frozenset(f"{n}:{port}".lower() for n in names)


class RankServer:
    """The HTTP server of one rank (or of the collector): a thread, stopped by :meth:`close`."""

    def __init__(self, server: HTTPServer, thread: threading.Thread) -> None:
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
    records: Callable[[int, int], JsonObject] | None = None,
    info: Callable[[], JsonObject] | None = None,
    token: str | None = None,
    workers: int = WORKERS,
    queue: int = QUEUE,
    timeout_s: float = TIMEOUT_S,
) -> RankServer:
    """Serve ``/metrics`` from ``registry``, and ``/records?after=N`` and ``/job`` when given; bounded as the
    module says (``workers``, ``queue``, ``timeout_s``)."""
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
            allowed = getattr(self.server, "allowed_hosts", None)
            if allowed is not None and (self.headers.get("Host") or "").lower() not in allowed:
                self._send(421, b"Host is not a name this endpoint is reached by\n", "text/plain")
                return
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
        server = BoundedHTTPServer((host, port), Handler, workers=workers, queue=queue, timeout_s=timeout_s)
    except OSError as e:
        raise EndpointError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    server.allowed_hosts = allowed_hosts(host, int(server.server_address[1]))
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
