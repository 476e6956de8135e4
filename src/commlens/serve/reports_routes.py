"""Diagnoses, projections and live jobs: their JSON API and their pages.

- ``GET /api/reports?kind=&page=&per_page=``: stored reports, newest first (no documents);
  ``GET /api/reports/{report_id}``: one report with its document (what its command's ``--json`` printed).
- ``GET /api/live?job=``: the monitor's jobs (live endpoints ``commlens serve --monitor`` named, stored monitor
  runs) and the windows of one (``commlens.serve.live``).
- Pages: ``/diagnose`` (links, stragglers, hang reports), ``/projection`` (projections, sweeps), one report at
  ``/diagnose/{id}`` or ``/projection/{id}``, ``/live``. Charts fetch the API; the links heatmap is an SVG drawn
  here (its colours as SVG fill attributes: the CSP allows no inline style).

Reports were checked against their kind's shape when stored (``commlens.store.reports``), so the views read
their fields directly.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel

from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.serve import queries as q
from commlens.serve.api import store_of
from commlens.serve.live import WAIT_S, LiveJob, LiveSources, live_doc
from commlens.serve.pages import render
from commlens.store import (
    DIAGNOSE_KINDS,
    PROJECTION_KINDS,
    REPORT_KINDS,
    Report,
    ReportNotFoundError,
    Store,
    doc_array,
    doc_int,
    doc_number,
    doc_objects,
    sweep_fields,
)

__all__ = ["api_router", "heatmap", "page_router"]

api_router = APIRouter(prefix="/api", tags=["reports"])
page_router = APIRouter(include_in_schema=False)

Kind = Literal["links", "stragglers", "hang", "projection", "sweep"]
FAMILIES: dict[str, tuple[str, ...]] = {"diagnose": DIAGNOSE_KINDS, "projection": PROJECTION_KINDS}
SWEEP_METRICS = (
    ("step_time_s", "step time (s)"),
    ("tokens_per_s", "tokens/s"),
    ("mfu", "MFU"),
    ("memory_gb", "memory per GPU (GB)"),
)


class ReportSummaryOut(BaseModel):
    report_id: str
    kind: str
    title: str
    created_at_utc: str
    fingerprint: str | None
    run_id: str | None


class ReportsPage(BaseModel):
    total: int
    page: int
    per_page: int
    pages: int
    kinds: list[str]
    reports: list[ReportSummaryOut]


class ReportOut(ReportSummaryOut):
    payload: Mapping[str, object]  # the command's --json document


class LiveOut(BaseModel):
    jobs: list[LiveJob]
    job: str | None
    windows: list[Mapping[str, object]]  # WindowRow.as_wire() objects
    store_error: str | None


def _reports_page(store: Store, kinds: tuple[str, ...], page: int, per_page: int) -> ReportsPage:
    total = store.reports.count(kinds)
    pages = max(1, math.ceil(total / per_page))
    rows = store.reports.list(kinds, limit=per_page, offset=(page - 1) * per_page)
    return ReportsPage(
        total=total,
        page=page,
        per_page=per_page,
        pages=pages,
        kinds=list(kinds),
        reports=[ReportSummaryOut.model_validate(r.as_dict()) for r in rows],
    )


def _report(store: Store, report_id: str) -> Report:
    try:
        return store.reports.get(report_id)
    except ReportNotFoundError as e:
        raise q.NotFound(str(e)) from None


_live_lock = threading.Lock()


def _live_sources(request: Request) -> LiveSources:
    """The endpoints of ``--monitor`` (the server's own configuration), kept for the server's life."""
    state = request.app.state
    with _live_lock:
        if not hasattr(state, "live_sources"):
            config = state.config
            state.live_sources = LiveSources(tuple(config.monitor_endpoints), config.monitor_token)
    sources: LiveSources = state.live_sources
    return sources


async def _live(request: Request, job: str | None) -> LiveOut:
    """The live document. The endpoints' polls run on their own pool and are awaited here, at most
    ``WAIT_S``, holding no worker thread; the store is read on one (``run_in_threadpool``)."""
    import asyncio

    from starlette.concurrency import run_in_threadpool

    sources = _live_sources(request)
    polls = [asyncio.wrap_future(f) for f in sources.refresh()]
    if polls:
        await asyncio.wait(polls, timeout=WAIT_S)
    try:
        doc = await run_in_threadpool(live_doc, store_of(request), sources, job)
    except LookupError as e:
        raise q.NotFound(str(e.args[0])) from None
    return LiveOut.model_validate(doc)


# -- API ---------------------------------------------------------------------------------------------------


@api_router.get("/reports", response_model=ReportsPage, summary="Stored diagnoses and projections, newest first")
def reports(
    request: Request,
    kind: Kind | None = Query(None, description="only this kind (default: every kind)"),
    page: int = Query(1, ge=1, le=1_000_000),
    per_page: int = Query(50, ge=1, le=q.MAX_PER_PAGE),
) -> ReportsPage:
    kinds = (kind,) if kind else REPORT_KINDS
    return _reports_page(store_of(request), kinds, page, per_page)


@api_router.get("/reports/{report_id}", response_model=ReportOut, summary="One report with its --json document")
def report(request: Request, report_id: str) -> ReportOut:
    return ReportOut.model_validate(_report(store_of(request), report_id).as_dict())


@api_router.get("/live", response_model=LiveOut, summary="Monitored jobs and the windows of one")
async def live(
    request: Request,
    job: str | None = Query(None, max_length=200, description="a job's key from `jobs` (default: the first)"),
) -> LiveOut:
    return await _live(request, job)


# -- views ------------------------------------------------------------------------------------------------

_LOW, _MID, _HIGH = (0xD9, 0x2D, 0x20), (0xFD, 0xB0, 0x22), (0x17, 0xB2, 0x6A)


def ratio_fill(ratio: float) -> str:
    """The heatmap colour of a pair at ``ratio`` of the expected rate: red at half or less, amber at 0.8, green
    at the expected rate and above."""
    r = min(max(ratio, 0.5), 1.0)
    if r <= 0.8:
        a, b, t = _LOW, _MID, (r - 0.5) / 0.3
    else:
        a, b, t = _MID, _HIGH, (r - 0.8) / 0.2
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


class HeatCell(TypedDict):
    """One measured pair of the links heatmap (row = sender)."""

    x: int
    y: int
    fill: str
    text: str
    title: str
    fault: bool
    sender: int
    receiver: int


@dataclass(frozen=True)
class Heatmap:
    """The links matrix as the page draws it: cell size and margin in pixels, the cells, the legend."""

    cell: int
    margin: int
    size: int
    hosts: list[int]
    slow_hosts: set[int]
    cells: list[HeatCell]
    legend: list[tuple[str, str]]


def _numbers(row: JsonValue) -> list[float | None]:
    """One row of a checked links matrix (numbers or null)."""
    values = row if isinstance(row, list) else []
    return [v if isinstance(v, (int, float)) and not isinstance(v, bool) else None for v in values]


def _hosts(fault: Mapping[str, JsonValue]) -> list[int]:
    hosts = fault.get("hosts")
    return [h for h in hosts if isinstance(h, int)] if isinstance(hosts, list) else []


def heatmap(doc: JsonObject) -> Heatmap:
    """The links matrix (a checked links document) as SVG cells (row = sender): each coloured by measured /
    expected bandwidth, the pairs of a slow link outlined, the slow hosts' labels marked."""
    n = doc_int(doc, "hosts")
    expected = doc_number(doc, "expected_bytes_per_s")
    cell = max(16, min(56, 720 // max(n, 1)))
    margin = 44
    faults = doc_objects(doc, "faults")
    slow_hosts = {h for f in faults if f.get("kind") == "slow_host" for h in _hosts(f)}
    slow_pairs = {(hs[0], hs[1]) for f in faults if f.get("kind") == "slow_link" and len(hs := _hosts(f)) >= 2}
    slow_pairs |= {(b, a) for a, b in slow_pairs}
    latencies = [_numbers(row) for row in doc_array(doc, "latency_s")]
    cells: list[HeatCell] = []
    for i, row in enumerate(doc_array(doc, "bandwidth_bytes_per_s")):
        for j, bw in enumerate(_numbers(row)):
            if bw is None or i == j:
                continue
            ratio = bw / expected if expected > 0 else 1.0
            latency = latencies[i][j]
            cells.append(
                {
                    "x": margin + j * cell,
                    "y": margin + i * cell,
                    "fill": ratio_fill(ratio),
                    "text": f"{bw / 1e9:.2f}" if cell >= 40 else "",
                    "title": f"host {i} -> host {j}: {bw / 1e9:.3f} GB/s, {ratio * 100:.0f}% of expected"
                    + ("" if latency is None else f", latency {latency * 1e6:.1f} us"),
                    "fault": (i, j) in slow_pairs,
                    "sender": i,
                    "receiver": j,
                }
            )
    return Heatmap(
        cell=cell,
        margin=margin,
        size=margin + n * cell + 8,
        hosts=list(range(n)),
        slow_hosts=slow_hosts,
        cells=cells,
        legend=[(f"{int(r * 100)}%", ratio_fill(r)) for r in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)],
    )


@dataclass(frozen=True)
class SweepView:
    """A sweep report's varied fields, how many points can run, and the metrics charted (none without both)."""

    fields: list[str]
    feasible: int
    metrics: tuple[tuple[str, str], ...]


def _sweep_view(doc: JsonObject) -> SweepView:
    rows = doc_objects(doc, "rows")
    fields = sweep_fields(rows)
    feasible = [r for r in rows if "error" not in r]
    return SweepView(fields, len(feasible), SWEEP_METRICS if fields and feasible else ())


# -- pages ------------------------------------------------------------------------------------------------


def _list_page(request: Request, family: str, kind: str | None, page: int, per_page: int) -> Response:
    kinds = FAMILIES[family]
    if kind is not None and kind not in kinds:
        raise q.BadRequest(f"kind {kind!r}: the {family} page lists {', '.join(kinds)}")
    doc = _reports_page(store_of(request), (kind,) if kind else kinds, page, per_page)

    def page_link(n: int) -> str:
        return f"/{family}?" + urlencode({**({"kind": kind} if kind else {}), "page": n, "per_page": per_page})

    return render(
        request, "reports_list.html", family, doc=doc, family=family, kind=kind or "", kinds=kinds, page_link=page_link
    )


def _report_page(request: Request, family: str, report_id: str) -> Response:
    r = _report(store_of(request), report_id)
    kind = r.summary.kind
    home = "diagnose" if kind in DIAGNOSE_KINDS else "projection"
    if home != family:
        return RedirectResponse(f"/{home}/{r.summary.report_id}", status_code=303)
    page = f"report_{kind}.html"
    if kind == "links":
        return render(request, page, "report", r=r.summary, doc=r.payload, family=family, map=heatmap(r.payload))
    if kind == "sweep":
        return render(request, page, "report", r=r.summary, doc=r.payload, family=family, sweep=_sweep_view(r.payload))
    return render(request, page, "report", r=r.summary, doc=r.payload, family=family)


_PAGE = Query(1, ge=1, le=1_000_000)
_PER_PAGE = Query(50, ge=1, le=q.MAX_PER_PAGE)


@page_router.get("/diagnose", response_class=HTMLResponse)
def diagnose_page(request: Request, kind: str | None = None, page: int = _PAGE, per_page: int = _PER_PAGE) -> Response:
    return _list_page(request, "diagnose", kind or None, page, per_page)


@page_router.get("/diagnose/{report_id}", response_class=HTMLResponse)
def diagnose_report_page(request: Request, report_id: str) -> Response:
    return _report_page(request, "diagnose", report_id)


@page_router.get("/projection", response_class=HTMLResponse)
def projection_page(
    request: Request, kind: str | None = None, page: int = _PAGE, per_page: int = _PER_PAGE
) -> Response:
    return _list_page(request, "projection", kind or None, page, per_page)


@page_router.get("/projection/{report_id}", response_class=HTMLResponse)
def projection_report_page(request: Request, report_id: str) -> Response:
    return _report_page(request, "projection", report_id)


@page_router.get("/live", response_class=HTMLResponse)
async def live_page(request: Request, job: str | None = Query(None, max_length=200)) -> Response:
    doc = await _live(request, job or None)
    chosen = next((j for j in doc.jobs if j["key"] == doc.job), None)
    numbers = [n for w in doc.windows if isinstance(n := w.get("window"), int)]
    last = max(numbers, default=None)
    latest = [w for w in doc.windows if last is not None and w.get("window") == last]
    api = "/api/live?" + urlencode({"job": doc.job}) if doc.job else None
    return render(request, "live.html", "live", doc=doc, chosen=chosen, latest=latest, api=api)
