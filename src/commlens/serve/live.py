"""The live page's data: the monitor's windows, from stored monitor runs and from live rank endpoints.

- A stored job is a run of source ``monitor`` (``commlens.monitor``'s ``Monitor.stop`` saves it): its config is
  a ``MonitorJob`` whose windows are ``WindowRow`` s, checked when the run is read from the store.
- A live job is a rank endpoint the operator named at start (``commlens serve --monitor URL``; never a client):
  its ``/job`` and ``/records`` are read with a connect timeout, a total deadline per poll and a bounded
  response, the records kept (the newest ``MAX_KEPT_RECORDS``) and grouped into windows as the monitor groups
  them (``aggregate``). An endpoint that cannot be read is shown with its error; it never fails the page.
- Polls run apart, on a pool of their own (one poll at most per endpoint at a time): a request waits for
  them without holding a worker (``LiveSources.refresh`` gives futures to await), at most ``WAIT_S``, then
  shows what was read so far. A slow endpoint cannot hold the routes other requests need.
"""

from __future__ import annotations

import json
import math
import ssl
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, Literal
from urllib.parse import urlsplit

from typing_extensions import TypedDict  # pydantic reads it (LiveOut) only in this form before Python 3.12

from commlens.monitor.fetch import FetchError, http_get
from commlens.results.collectives import CollectiveRecord, CollectiveRecordError, aggregate, record_from_wire
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.runconfig import MonitorJob
from commlens.store import RunFilter, Store, StoreError

__all__ = ["LiveDoc", "LiveEndpoint", "LiveJob", "LiveSources", "live_doc"]

TIMEOUT_S = 2.0  # to connect to a rank endpoint
POLL_DEADLINE_S = 5.0  # one poll of an endpoint in all (its /job and every /records request)
WAIT_S = 1.5  # a request waits this long at most for the polls it started, then shows what was read
MAX_POLL_THREADS = 16  # endpoints polled at once
MAX_RESPONSE_BYTES = 16 << 20  # a /records or /job answer larger than this is refused
MAX_KEPT_RECORDS = 50_000  # per endpoint, the newest
RECORDS_PER_REQUEST = 5_000
MAX_REQUESTS_PER_POLL = 4  # an endpoint far ahead is caught up over a few page loads
MAX_WINDOWS = 300  # the newest windows a job shows
MAX_STORED_JOBS = 20


class LiveJob(TypedDict):
    """One job the live page lists: a rank endpoint (``source`` endpoint) or a stored monitor run (store)."""

    key: str  # endpoint:N or run:ID
    source: Literal["endpoint", "store"]
    label: str
    job_id: str | None
    rank: int | None
    world_size: int | None
    host: str | None
    model: str | None
    started_at: str | None
    status: str
    records: int | None
    lost: int | None
    error: str | None
    url: str


class LiveDoc(TypedDict):
    """What ``/api/live`` answers: every job, the chosen one's key and its windows (``WindowRow.as_wire()``)."""

    jobs: list[LiveJob]
    job: str | None
    windows: list[JsonObject]
    store_error: str | None


class LiveEndpoint:
    """One rank endpoint ``url`` (``http://host:port``): its job, and its records read so far by cursor."""

    def __init__(self, index: int, url: str, token: str | None = None) -> None:
        self.index = index
        self.url = url.rstrip("/")
        self.token = token
        self.cursor = 0
        self.lost = 0
        self.info: JsonObject | None = None
        self.error: str | None = None
        self.records: deque[CollectiveRecord] = deque(maxlen=MAX_KEPT_RECORDS)
        self.skipped = 0  # records the endpoint sent that were not valid
        self.bad = False  # the last poll's answer was not a monitor endpoint's
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    @property
    def key(self) -> str:
        return f"endpoint:{self.index}"

    def _get(self, path: str, deadline: float) -> Any:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https"):
            raise FetchError("unreachable", f"{parts.scheme}:// endpoints are not read (http or https)")
        if parts.scheme == "https" and self._tls is None:
            self._tls = ssl.create_default_context()  # the system's CAs; a proxy in front of the rank's endpoint
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        status, body = http_get(
            parts.hostname or "",
            parts.port or (443 if parts.scheme == "https" else 80),
            path,
            timeout_s=POLL_DEADLINE_S,
            connect_timeout_s=TIMEOUT_S,
            deadline=deadline,
            max_bytes=MAX_RESPONSE_BYTES,
            headers=headers,
            tls=self._tls if parts.scheme == "https" else None,
        )
        if status != 200:
            hint = " (the endpoint needs its job's monitor token)" if status == 401 else ""
            raise FetchError("unreachable", f"HTTP {status}{hint}")
        try:
            return json.loads(body)
        except RecursionError:
            raise ValueError(f"its answer to {path.split('?')[0]} is JSON nested too deeply") from None

    def poll(self) -> None:
        """Read what the endpoint has recorded since the last poll, all before one deadline; on failure keep
        what was read and say why (``error``; ``bad`` when it answered, but not as a monitor endpoint)."""
        # one poll of an endpoint at a time (LiveSources); the lock is held only while records are taken, never
        # across the network: a page reading the windows does not wait for a slow endpoint
        deadline = time.monotonic() + POLL_DEADLINE_S
        try:
            if self.info is None:
                info = self._get("/job", deadline)
                if not isinstance(info, dict):
                    raise ValueError("/job did not answer a JSON object")
                self.info = info
            for _ in range(MAX_REQUESTS_PER_POLL):
                data = self._get(f"/records?after={self.cursor}&limit={RECORDS_PER_REQUEST}", deadline)
                with self._lock:
                    got = self._take(data)
                if got < RECORDS_PER_REQUEST:
                    break
            self.error, self.bad = None, False
        except FetchError as e:
            self.error, self.bad = str(e), e.kind == "bad"
        except (ValueError, TypeError) as e:  # a JSON error is a ValueError
            self.error, self.bad = f"not a commlens monitor endpoint: {e}", True

    def _take(self, data: Any) -> int:
        if not isinstance(data, dict) or not isinstance(data.get("records"), list):
            raise ValueError("/records did not answer an object with a records list")
        nxt, lost = data.get("next"), data.get("lost", 0)
        if not isinstance(nxt, int) or isinstance(nxt, bool) or not self.cursor <= nxt < 1 << 63:
            raise ValueError("/records' next cursor is not an integer at or after the one asked for")
        if not isinstance(lost, int) or isinstance(lost, bool) or not 0 <= lost < 1 << 63:
            raise ValueError("/records' lost count is not an integer >= 0")
        self.cursor = nxt
        self.lost += lost
        for d in data["records"]:
            try:
                self.records.append(record_from_wire(d))
            except CollectiveRecordError:
                self.skipped += 1
        return len(data["records"])

    def windows(self) -> list[JsonObject]:
        """The records read so far, grouped into the job's windows (its ``window_steps``, else ``window_s``)."""
        info = self.info or {}
        given = info.get("window_steps")
        steps = given if isinstance(given, int) and not isinstance(given, bool) and given >= 1 else None
        width = info.get("window_s")
        width_s = float(width) if isinstance(width, (int, float)) and math.isfinite(width) and width >= 0.1 else 10.0
        with self._lock:
            records = list(self.records)
        buckets: dict[int, list[CollectiveRecord]] = {}
        for r in records:
            if steps is not None and r.step is not None:
                key = r.step // steps
            else:
                key = math.floor(r.end_s / width_s)
            buckets.setdefault(key, []).append(r)
        rows: list[JsonObject] = []
        for key in sorted(buckets)[-MAX_WINDOWS:]:
            rs = buckets[key]
            start_s, end_s = min(r.start_s for r in rs), max(r.end_s for r in rs)
            if steps is None:
                start_s, end_s = key * width_s, (key + 1) * width_s
            rows.extend(row.as_wire() for row in aggregate(rs, window=key, start_s=start_s, end_s=end_s))
        return rows

    def summary(self) -> LiveJob:
        info = self.info or {}
        rank, world_size = info.get("rank"), info.get("world_size")
        return {
            "key": self.key,
            "source": "endpoint",
            "label": self.url,
            "job_id": _text(info.get("job_id")),
            "rank": rank if isinstance(rank, int) else None,
            "world_size": world_size if isinstance(world_size, int) else None,
            "host": _text(info.get("host")),
            "model": _text(info.get("model")),
            "started_at": None,
            "status": _status(self.error, self.bad, self.info),
            "records": len(self.records),
            "lost": self.lost + self.skipped,
            "error": self.error,
            "url": self.url,
        }


def _status(error: str | None, bad: bool, info: JsonObject | None) -> str:
    if error:
        return "bad answer" if bad else "unreachable"
    return "connecting" if info is None else "live"


def _text(value: JsonValue, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) else None


class LiveSources:
    """The endpoints ``commlens serve --monitor`` named, one :class:`LiveEndpoint` each, kept across requests.

    Their polls run on a pool of their own, one at a time per endpoint: however many requests ask, an
    endpoint is read by one thread, and a slow one holds only its own.
    """

    def __init__(self, urls: tuple[str, ...], token: str | None = None) -> None:
        self.endpoints = [LiveEndpoint(i, url, token) for i, url in enumerate(urls)]
        self._pool: ThreadPoolExecutor | None = None
        self._running: dict[int, Future[None]] = {}
        self._lock = threading.Lock()

    def refresh(self) -> list[Future[None]]:
        """Start a poll of every endpoint not being polled now; the futures of every poll in flight."""
        if not self.endpoints:
            return []
        with self._lock:
            if self._pool is None:
                workers = min(MAX_POLL_THREADS, len(self.endpoints))
                self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="commlens-live")
            for e in self.endpoints:
                running = self._running.get(e.index)
                if running is None or running.done():
                    self._running[e.index] = self._pool.submit(e.poll)
            return list(self._running.values())

    def poll(self, wait_s: float = WAIT_S) -> None:
        """Refresh and wait (this thread) up to ``wait_s`` for the polls."""
        wait_futures(self.refresh(), timeout=wait_s)

    def polling(self, index: int) -> bool:
        running = self._running.get(index)
        return running is not None and not running.done()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _stored_jobs(store: Store) -> list[LiveJob]:
    runs = store.list_runs(RunFilter(source="monitor"), limit=MAX_STORED_JOBS, on_corrupt=lambda _e: None)
    return [
        {
            "key": f"run:{r.run_id}",
            "source": "store",
            "label": f"run {r.run_id[:12]}",
            "job_id": None,
            "rank": None,
            "world_size": r.world_size,
            "host": None,
            "model": None,
            "started_at": r.started_at,
            "status": r.status,
            "records": None,
            "lost": None,
            "error": None,
            "url": f"/runs/{r.run_id}",
        }
        for r in runs
    ]


def _stored_windows(store: Store, job: LiveJob) -> list[JsonObject]:
    """The windows of a stored monitor run (its config, checked when the run was read); fills in the job's
    details. A run whose config is not a monitor job's shows no windows."""
    run = store.get_run(job["key"].removeprefix("run:"))
    job["host"] = (run.system.hosts or (None,))[0]
    config = run.config
    if not isinstance(config, MonitorJob):
        job["job_id"] = job["model"] = None
        return []
    job["job_id"], job["model"], job["rank"] = config.job_id[:200], config.model[:200], config.rank
    job["lost"] = config.dropped_windows
    return [w.as_wire() for w in config.windows]


def live_doc(store: Store, sources: LiveSources, job: str | None) -> LiveDoc:
    """Every job (live endpoints first, then stored monitor runs, newest first) and the windows of ``job``
    (a key from that list; default the first that can be read). An unknown key is a LookupError.

    The endpoints are shown as last read: refresh them first (``sources.refresh()``, awaited or not)."""
    live = [e.summary() for e in sources.endpoints]
    for j, e in zip(live, sources.endpoints):
        if sources.polling(e.index) and j["status"] != "live":
            j["status"] = "slow"  # a poll is still reading it
            j["error"] = j["error"] or f"no answer yet (each poll may take {POLL_DEADLINE_S:g} s)"
    try:
        stored = _stored_jobs(store)
        store_error = None
    except StoreError as e:
        stored, store_error = [], str(e)
    jobs = live + stored
    if job:
        chosen = next((j for j in jobs if j["key"] == job), None)
    else:  # the first job that can be read: a reachable endpoint, else the newest stored one
        chosen = next((j for j in jobs if not j["error"]), jobs[0] if jobs else None)
    if job and chosen is None:
        raise LookupError(f"no live job {job[:80]!r} (the list: /api/live)")
    windows: list[JsonObject] = []
    if chosen is not None:
        if chosen["source"] == "endpoint":
            windows = sources.endpoints[int(chosen["key"].split(":")[1])].windows()
        else:
            windows = _stored_windows(store, chosen)
    return {"jobs": jobs, "job": chosen["key"] if chosen else None, "windows": windows, "store_error": store_error}
