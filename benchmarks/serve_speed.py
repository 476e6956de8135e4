#!/usr/bin/env python
"""Issue 16's dashboard targets on a store of 10,000 runs and 1,000,000 measurements.

Run from the repository root (PostgreSQL: ``eval "$(bash scripts/test-postgres.sh)"`` first)::

    .venv/bin/python benchmarks/serve_speed.py                  # SQLite and PostgreSQL
    .venv/bin/python benchmarks/serve_speed.py --backend sqlite --requests 50 --loads 10

For each backend it

1. makes (once, then reuses) the generated store of ``benchmarks/serve_store.py``;
2. starts a real ``commlens serve --db URL --port P`` process on loopback and waits for ``/healthz``;
3. requests each page and its JSON document (``--warmup`` times, then ``--requests`` times, one at a
   time): the runs page, one run's page, the history page of a 500-point series, and
   ``/api/runs``, ``/api/runs/{id}``, ``/api/series``; the server time of each is the
   ``Server-Timing: app;dur=`` the server sends (its middleware's clock, from the request reaching the
   app to the response leaving it), the client's loopback latency is shown next to it;
4. loads each page in headless Chromium (Selenium, Debian's chromium and chromedriver) ``--loads``
   times after one warm-up load: full render is from navigation start until the load event has
   fired and every ``.chart`` carries ``data-rendered="1"``, timed in the page
   (``performance.now()`` when a MutationObserver, added before the page's scripts, sees the last
   chart marked); console errors are counted;
5. reads the server's memory from ``/proc/PID/status`` (VmRSS now and VmHWM, the peak);
6. fetches the same API documents (runs pages 1 and 2 with filters, the run, the series, the
   regressions) and, with both backends, compares them key by key.

The section ``## Serve speed (issue 16)`` of ``docs/benchmarks.md`` is replaced (or appended).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import argparse
import datetime as dt
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import serve_store  # noqa: E402
from docsection import write_section  # noqa: E402
from sqlalchemy.engine import make_url

from commlens.results.stats import percentile

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Serve speed (issue 16)"
TARGET_SERVER_P95_S = 0.200
TARGET_RENDER_S = 1.0
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 600.0  # the regressions document reads every series of half a year
# The 500-point series: all_reduce of 16 MiB out of place on the first system's main.
SERIES_OP = "all_reduce"
SERIES_SIZE_BYTES = 16 * 1024 * 1024
VOLATILE_KEYS = {"computed_at", "compute_s"}  # the regressions document's own clock
# What the first runs of this benchmark found (EXPLAIN and cProfile of the requests in-process through
# create_app), what was changed, and what is left; printed in the section.
FINDINGS = [
    "What the first runs found (2026-12-01; EXPLAIN ANALYZE on PostgreSQL, EXPLAIN QUERY PLAN on SQLite, "
    "cProfile of the requests in-process through `create_app`), and what changed since:",
    "",
    "1. The 500-point history page took 1.1 s at p50 and 2.3 s at p95 on SQLite (0.76 s and 1.3 s on "
    "PostgreSQL), its full render 2.2 s. `series_doc` read every row of the op, dtype and size on the "
    "system (fingerprint as a prefix, any tag, both placements: 8,342 rows) and kept the series' 500 in "
    "Python (0.4 s to build the rows, 0.1-0.5 s of query: SQLite walked the 20,000 entries of "
    "`ix_measurements_series`, PostgreSQL 475 ms in EXPLAIN ANALYZE); the baseline's mean ran the same wide "
    "query again; and the page computed the whole document, then its chart fetched `/api/series`, which "
    "computed it again. Fixed in 383b54b (documents cached per store generation, the baseline read by run "
    "id) and 57a3c74 (schema 0007: `ix_measurements_run_key (run_id, op, dtype, size_bytes, in_place)`, so "
    "the query starts from the series' runs in `ix_runs_fingerprint_tag_started_at_utc`; SQLite's planner "
    "statistics refreshed when the server starts, without which it starts from the measurements index). "
    "The query measured alone: PostgreSQL 475 -> 53 ms, SQLite 440-980 -> 21-38 ms.",
    "2. The run page's three charts each fetched the same `/api/runs/{id}` (98 KB): one fetch per URL now (57a3c74).",
    "3. Left: the regressions document (not one of the three pages timed here) reads every measurement of "
    "210 days (about 660,000 points of 156,000 series: each `pr-NNN` tag is its own series) and runs "
    "detection on each on its first request after any change to the store: tens of seconds (the "
    "first-request figures above). Its memory is bounded since 383b54b (one (op, dtype, size) slice at a "
    "time: peak 1.25 GB -> about 0.2 GB). Listing saved change points (`detect --save`), or detecting "
    "only the series of long-lived tags, would make it a query.",
]
# Added to every document before its scripts run (CDP): the time the last chart was marked drawn.
RENDER_PROBE = """
(() => {
  const check = () => {
    const charts = document.querySelectorAll('.chart');
    let done = 0;
    charts.forEach((c) => { if (c.getAttribute('data-rendered') === '1') done += 1; });
    if (done === charts.length && window.__commlensChartsAt === undefined) {
      window.__commlensChartsAt = performance.now();
      window.__commlensCharts = charts.length;
    }
  };
  const start = () => {
    check();
    new MutationObserver(check).observe(document.documentElement,
      {subtree: true, attributes: true, childList: true, attributeFilter: ['data-rendered']});
  };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
"""


@dataclass
class Timings:
    """One URL's request timings, seconds."""

    path: str
    server_s: list[float] = field(default_factory=list)
    client_s: list[float] = field(default_factory=list)
    bytes: int = 0

    def p(self, q: float, which: str = "server") -> float:
        values = self.server_s if which == "server" and self.server_s else self.client_s
        return percentile(sorted(values), q)


@dataclass
class Render:
    page: str
    path: str
    times_s: list[float]
    cold_s: float
    charts: int
    points: list[int]
    console_errors: list[str]
    phases_s: dict[str, float]  # median time of each step of the load, from navigation start


@dataclass
class BackendResult:
    backend: str
    url_shown: str
    store: dict[str, Any]
    requests: dict[str, Timings]
    renders: list[Render]
    memory_kib: dict[str, int]
    documents: dict[str, Any]
    cold_s: dict[str, float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_command(db_url: str, port: int) -> list[str]:
    return [str(Path(sys.executable).parent / "commlens"), "serve", "--db", db_url, "--port", str(port)]


@contextmanager
def running_server(db_url: str, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``commlens serve`` on loopback; stopped (SIGTERM, then SIGKILL) when the block ends."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMLENS_SERVE_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(serve_command(db_url, port), stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"commlens serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"commlens serve did not answer /healthz within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` (and of its children, if it forked workers), KiB."""
    found: dict[str, int] = {}
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for one in pids:
        for line in Path(f"/proc/{one}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = found.get(name, 0) + int(value.split()[0])
    return found


def _server_time_s(response: httpx.Response) -> float | None:
    for part in response.headers.get("server-timing", "").split(","):
        fields = [f.strip() for f in part.split(";")]
        if fields and fields[0] == "app":
            for f in fields[1:]:
                if f.startswith("dur="):
                    return float(f[4:]) / 1e3
    return None


def time_requests(client: httpx.Client, path: str, warmup: int, n: int) -> tuple[Timings, float]:
    """``n`` sequential GETs of ``path`` after ``warmup``; returns the timings and the first (cold) request's."""
    t = Timings(path)
    cold = 0.0
    for i in range(warmup + n):
        start = time.perf_counter()
        response = client.get(path)
        elapsed = time.perf_counter() - start
        if response.status_code != 200:
            raise SystemExit(f"GET {path}: HTTP {response.status_code}: {response.text[:500]}")
        if i == 0:
            cold = _server_time_s(response) or elapsed
        if i >= warmup:
            server = _server_time_s(response)
            if server is not None:
                t.server_s.append(server)
            t.client_s.append(elapsed)
            t.bytes = len(response.content)
    return t, cold


def _driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RENDER_PROBE})
    driver.set_page_load_timeout(60)
    return driver


@dataclass
class Load:
    """One page load, seconds from navigation start."""

    full_s: float  # load event fired and every chart drawn
    response_end_s: float  # the HTML received
    dom_ready_s: float  # DOMContentLoaded handlers done
    load_end_s: float  # the load event done (stylesheets, scripts)
    api_end_s: float  # the last chart document received (0: none)
    charts: int
    points: int


def _one_load(driver: Any, url: str) -> Load:
    """Load ``url`` and wait until every chart is drawn."""
    driver.get(url)  # returns after the load event
    deadline = time.monotonic() + 30.0
    while True:
        state = driver.execute_script(
            "const nav = performance.getEntriesByType('navigation')[0];"
            "const pts = [...document.querySelectorAll('.chart')].map(c => +(c.getAttribute('data-points') || 0));"
            "const api = performance.getEntriesByType('resource').filter(e => e.name.includes('/api/'))"
            ".map(e => e.responseEnd);"
            "return [nav.responseEnd, nav.domContentLoadedEventEnd, nav.loadEventEnd, window.__commlensChartsAt,"
            " window.__commlensCharts, pts.reduce((a, b) => a + b, 0), api.length ? Math.max(...api) : 0];"
        )
        response_end, dom_ready, load_end, charts_at, charts, points, api_end = state
        if charts_at is not None and load_end:
            return Load(
                max(load_end, charts_at) / 1e3,
                response_end / 1e3,
                dom_ready / 1e3,
                load_end / 1e3,
                api_end / 1e3,
                int(charts),
                int(points),
            )
        if time.monotonic() > deadline:
            raise SystemExit(f"{url}: the charts were not all drawn within 30 s")
        time.sleep(0.01)


def time_renders(base: str, pages: dict[str, str], loads: int) -> list[Render]:
    driver = _driver()
    out = []
    try:
        for page, path in pages.items():
            driver.get_log("browser")  # drop what came before
            cold = _one_load(driver, base + path)
            timed = [_one_load(driver, base + path) for _ in range(loads)]
            errors = [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            out.append(
                Render(
                    page,
                    path,
                    [x.full_s for x in timed],
                    cold.full_s,
                    timed[-1].charts,
                    sorted({x.points for x in [cold, *timed]}),
                    errors,
                    {
                        "HTML received": _median([x.response_end_s for x in timed]),
                        "DOMContentLoaded": _median([x.dom_ready_s for x in timed]),
                        "load event": _median([x.load_end_s for x in timed]),
                        "chart data received": _median([x.api_end_s for x in timed]),
                    },
                )
            )
    finally:
        driver.quit()
    return out


def _median(values: list[float]) -> float:
    return percentile(sorted(values), 50)


def _series_params(fingerprint: str) -> dict[str, Any]:
    return {
        "fingerprint": fingerprint,
        "tag": "main",
        "op": SERIES_OP,
        "dtype": "float32",
        "size_bytes": SERIES_SIZE_BYTES,
        "in_place": "false",
        "redop": "sum",
    }


def time_uncached_history(client: httpx.Client, fingerprint: str, n: int) -> dict[str, Timings]:
    """The history page and ``/api/series`` of ``n`` distinct 500-point series each, one request each.

    The server caches a series' document per store generation, so a repeated URL measures the cache;
    here every request names a series (op, size, placement; the page by time, the API by revision,
    each its own document) not asked for before. The series measured warm is left out.
    """
    combos = [
        (op, size, in_place)
        for op in serve_store.OPS
        for size in serve_store.SIZES_BYTES
        for in_place in (False, True)
        if (op, size, in_place) != (SERIES_OP, SERIES_SIZE_BYTES, False)
    ]
    out = {"page": Timings("/history?..."), "api": Timings("/api/series?...&order=revision")}
    for kind, prefix, order in (("page", "/history?", "time"), ("api", "/api/series?", "revision")):
        for op, size, in_place in combos[:n]:
            params = {
                **_series_params(fingerprint),
                "op": op,
                "size_bytes": size,
                "in_place": "true" if in_place else "false",
                "order": order,
            }
            if op not in ("all_reduce", "reduce_scatter"):
                del params["redop"]
            if op == "broadcast":
                params["root"] = 0
            path = prefix + urlencode(params)
            start = time.perf_counter()
            response = client.get(path)
            elapsed = time.perf_counter() - start
            if response.status_code != 200:
                raise SystemExit(f"GET {path}: HTTP {response.status_code}: {response.text[:500]}")
            server = _server_time_s(response)
            if server is not None:
                out[kind].server_s.append(server)
            out[kind].client_s.append(elapsed)
            out[kind].bytes = len(response.content)
    return out


def documents(client: httpx.Client, run_id: str, fingerprint: str) -> dict[str, Any]:
    """The API documents whose equality across backends is checked; volatile keys dropped."""
    paths = {
        "runs page 1, tag main": "/api/runs?" + urlencode({"tag": "main", "page": 1, "per_page": 50}),
        "runs page 2, fingerprint and op": "/api/runs?"
        + urlencode({"fingerprint": fingerprint[:8], "op": "all_gather", "page": 2, "per_page": 50}),
        "runs page 2, since/until": "/api/runs?"
        + urlencode({"since": "2026-06-01", "until": "2026-06-30", "page": 2, "per_page": 25}),
        "runs page 3, no filter": "/api/runs?page=3&per_page=100",
        "run": f"/api/runs/{run_id}",
        "series": "/api/series?" + urlencode(_series_params(fingerprint)),
        "series by revision": "/api/series?" + urlencode({**_series_params(fingerprint), "order": "revision"}),
        "regressions": "/api/regressions?" + urlencode({"since": "2026-09-01"}),
    }
    out = {}
    for name, path in paths.items():
        response = client.get(path)
        if response.status_code != 200:
            raise SystemExit(f"GET {path}: HTTP {response.status_code}: {response.text[:500]}")
        out[name] = _drop_volatile(response.json())
    return out


def _drop_volatile(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _drop_volatile(v) for k, v in doc.items() if k not in VOLATILE_KEYS}
    if isinstance(doc, list):
        return [_drop_volatile(v) for v in doc]
    return doc


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ (a JSON path and both values), or None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: only on {'PostgreSQL' if k not in a else 'SQLite'}"
            found = first_difference(a[k], b[k], f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items on SQLite, {len(b)} on PostgreSQL"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    if a != b or type(a) is not type(b):
        return f"{where}: {a!r} on SQLite, {b!r} on PostgreSQL"
    return None


def measure(backend: str, args: argparse.Namespace, workdir: Path) -> BackendResult:
    url = serve_store.ensure_store(backend, regenerate=args.regenerate)
    shown = make_url(url).render_as_string(hide_password=True)
    held = serve_store.describe(url)
    print(f"{backend}: {shown} {held}", flush=True)
    port = _free_port()
    fingerprint = serve_store.SYSTEMS[0].info.fingerprint()
    with running_server(url, port, workdir / f"serve-{backend}.log") as proc:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT_S) as client:
            newest = client.get("/api/runs", params={"tag": "main", "fingerprint": fingerprint, "per_page": 1})
            run_id = newest.json()["runs"][0]["run_id"]
            series = urlencode(_series_params(fingerprint))
            pages = {"runs": "/runs", "run": f"/runs/{run_id}", "history": f"/history?{series}"}
            apis = {"runs": "/api/runs", "run": f"/api/runs/{run_id}", "history": f"/api/series?{series}"}
            requests: dict[str, Timings] = {}
            cold: dict[str, float] = {}
            for name in pages:
                for kind, path in (("page", pages[name]), ("api", apis[name])):
                    t, first = time_requests(client, path, args.warmup, args.requests)
                    requests[f"{name} {kind}"] = t
                    cold[f"{name} {kind}"] = first
                    print(
                        f"  {name} {kind}: server p50 {t.p(50) * 1e3:.1f} ms p95 {t.p(95) * 1e3:.1f} ms "
                        f"(client p50 {t.p(50, 'client') * 1e3:.1f} ms), {t.bytes} B",
                        flush=True,
                    )
            for kind, t in time_uncached_history(client, fingerprint, args.requests).items():
                requests[f"history {kind}, uncached"] = t
                cold[f"history {kind}, uncached"] = t.server_s[0] if t.server_s else t.client_s[0]
                print(
                    f"  history {kind}, uncached: server p50 {t.p(50) * 1e3:.1f} ms p95 {t.p(95) * 1e3:.1f} ms "
                    f"over {len(t.client_s)} distinct 500-point series",
                    flush=True,
                )
            renders = [] if args.no_browser else time_renders(base, pages, args.loads)
            for r in renders:
                print(
                    f"  render {r.page}: p50 {percentile(sorted(r.times_s), 50) * 1e3:.0f} ms "
                    f"p95 {percentile(sorted(r.times_s), 95) * 1e3:.0f} ms, {r.charts} charts, points {r.points}, "
                    f"{len(r.console_errors)} console errors; medians: "
                    + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in r.phases_s.items()),
                    flush=True,
                )
            memory_pages = memory_kib(proc.pid)
            docs = documents(client, run_id, fingerprint)
            regressions_cold = _server_time_s(client.get("/api/regressions", params={"since": "2026-11-15"}))
            cold["regressions api (first request, uncached)"] = regressions_cold or 0.0
        memory = {f"{k} after the pages": v for k, v in memory_pages.items()}
        memory.update({f"{k} after the regressions": v for k, v in memory_kib(proc.pid).items()})
    print(f"  memory: {memory}", flush=True)
    return BackendResult(backend, shown, held, requests, renders, memory, docs, cold)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def report(results: list[BackendResult], identical: str | None, args: argparse.Namespace, load: float) -> list[str]:
    """The section's lines."""
    today = dt.date.today().isoformat()
    cores = os.cpu_count()
    held = results[0].store
    lines = [
        f"Produced by `{shlex.join(['.venv/bin/python', 'benchmarks/serve_speed.py', *args.argv])}` on {today} "
        f"({platform.machine()}, {cores} CPUs, Python {platform.python_version()}; 1-minute load average "
        f"{load:.1f} when it started; the machine is shared with other work).",
        "",
        f"Store: generated by `benchmarks/serve_store.py` (seed {serve_store.SEED}): {held['runs']:,} runs, "
        f"{held['measurements']:,} measurements of {serve_store.SAMPLES} samples each, {held['fingerprints']} systems, "
        f"{held['tags']:,} tags (`main` nightlies and `pr-NNN`), one year; the history page's series "
        f"({SERIES_OP}, {SERIES_SIZE_BYTES >> 20} MiB, out of place, tag main, first system) has "
        f"{held['longest_series']} points. SQLite: a file in /tmp; PostgreSQL: the test server of "
        "`scripts/test-postgres.sh` (Unix socket, fsync off; ANALYZE run after the load, as autovacuum would).",
        "",
        f"Server: one `commlens serve --db URL --port P` process on loopback. Server time is its "
        f"`Server-Timing: app;dur=` header, p50 and p95 of {args.requests} sequential requests after "
        f"{args.warmup} warm-up requests; the client's loopback latency (httpx) is shown next to it.",
        "Target: p95 under 200 ms per page.",
        "",
        "| backend | request | server p50 (ms) | server p95 (ms) | client p50 (ms) | client p95 (ms) | first request (ms) | size (KiB) | p95 < 200 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        for name, t in r.requests.items():
            lines.append(
                f"| {r.backend} | `{name}` (`{_short(t.path)}`) | {_ms(t.p(50))} | {_ms(t.p(95))} | "
                f"{_ms(t.p(50, 'client'))} | {_ms(t.p(95, 'client'))} | {_ms(r.cold_s[name])} | {t.bytes / 1024:.0f} | "
                f"{_yes(t.p(95) < TARGET_SERVER_P95_S) if 'page' in name else '(API)'} |"
            )
    if any(r.renders for r in results):
        lines += [
            "",
            f"Full render in headless Chromium (Selenium, `--headless=new`): navigation start until the load event "
            f'and every `.chart` marked `data-rendered="1"`, timed in the page; p50 and p95 of {args.loads} loads '
            "after one warm-up load (whose time is the first-load column; the browser's cache is warm after it). "
            "Target: under 1 s.",
            "",
            "The median load's steps, from navigation start: HTML received, DOMContentLoaded, load event, the "
            "last chart document received from the API (0: the page has no chart); the rest, to full render, "
            "is drawing.",
            "",
            "| backend | page | charts | points plotted | first load (ms) | HTML (ms) | DOM ready (ms) | load (ms) | chart data (ms) | p50 (ms) | p95 (ms) | console errors | p95 < 1 s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in results:
            for x in r.renders:
                p95 = percentile(sorted(x.times_s), 95)
                points = ", ".join(str(p) for p in x.points)
                lines.append(
                    f"| {r.backend} | {x.page} | {x.charts} | {points} | {_ms(x.cold_s)} | "
                    + " | ".join(_ms(v) for v in x.phases_s.values())
                    + " | "
                    f"{_ms(percentile(sorted(x.times_s), 50))} | {_ms(p95)} | {len(x.console_errors)} | "
                    f"{_yes(p95 < TARGET_RENDER_S)} |"
                )
    lines += [
        "",
        "Server memory (`/proc/PID/status`: VmRSS, and VmHWM, the peak so far), after the timed requests and "
        "renders of the three pages, then after the documents compared below (the regressions document reads "
        "every series' points of half a year):",
        "",
        "| backend | after the pages: VmRSS (MiB) | VmHWM (MiB) | after the regressions: VmRSS (MiB) | VmHWM (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        m = r.memory_kib
        cells = [
            m.get(f"{k} after {when}", 0) / 1024
            for when in ("the pages", "the regressions")
            for k in ("VmRSS", "VmHWM")
        ]
        lines.append(f"| {r.backend} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    lines += ["", "Other first requests (uncached on the server):", ""]
    for r in results:
        for name, seconds in r.cold_s.items():
            if name.startswith("regressions"):
                lines.append(f"- {r.backend}: `{name}`: {_ms(seconds)} ms")
    lines.append("")
    lines.append(f"1-minute load average when it ended: {os.getloadavg()[0]:.1f}.")
    if len(results) == 2:
        names = "; ".join(results[0].documents)
        verdict = "identical" if identical is None else f"**differ**: first difference at `{identical}`"
        lines += [
            "",
            f"Results on SQLite and PostgreSQL: {verdict} (the API documents {names}; the regressions "
            "document without its own `computed_at` and `compute_s`). Target: identical; "
            f"met: {_yes(identical is None)}.",
        ]
    if args.findings:
        lines += ["", *FINDINGS]
    return lines


def _short(path: str) -> str:
    return path if len(path) <= 48 else path[:45] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--requests", type=int, default=60, help="timed requests per URL (default 60)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed requests per URL first (default 5)")
    parser.add_argument("--loads", type=int, default=12, help="timed browser loads per page (default 12)")
    parser.add_argument("--regenerate", action="store_true", help="generate the stores again")
    parser.add_argument("--no-browser", action="store_true", help="skip the headless-browser renders")
    parser.add_argument(
        "--no-findings", dest="findings", action="store_false", help="leave out the analysis of the misses"
    )
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    load = os.getloadavg()[0]
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    results = []
    with tempfile.TemporaryDirectory(prefix="commlens-serve-speed-") as tmp:
        for backend in backends:
            results.append(measure(backend, args, Path(tmp)))
    identical = None
    if len(results) == 2:
        a, b = results[0].documents, results[1].documents
        a_sorted = json.loads(json.dumps(a, sort_keys=True))
        b_sorted = json.loads(json.dumps(b, sort_keys=True))
        identical = first_difference(a_sorted, b_sorted)
        print("results on SQLite and PostgreSQL:", "identical" if identical is None else f"differ at {identical}")
    lines = report(results, identical, args, load)
    print("\n".join(lines))
    if not args.no_doc:
        write_section(SECTION, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
