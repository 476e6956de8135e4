"""The server-rendered pages: the same documents as the API (``queries``), as HTML; charts fetch the API."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from commlens.serve import queries as q
from commlens.serve.api import compare_page_url, series_selector, store_of
from commlens.serve.security import Gate

__all__ = ["error_page", "render", "router", "templates"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")

NAV = (
    ("runs", "/runs", "Runs"),
    ("compare", "/compare", "Compare"),
    ("history", "/history", "History"),
    ("regressions", "/regressions", "Regressions"),
    ("diagnose", "/diagnose", "Diagnose"),
    ("projection", "/projection", "Projection"),
    ("live", "/live", "Live jobs"),
)


def us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.2f}"


def gbps(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else f"{bytes_per_s / 1e9:.2f}"


def pct(fraction: float | None, signed: bool = True) -> str:
    if fraction is None:
        return "-"
    return f"{fraction * 100:+.1f}%" if signed else f"{fraction * 100:.1f}%"


def size(n: int | None) -> str:
    from commlens.results.units import format_size

    return "-" if n is None else format_size(n)


def series_query(**fields: Any) -> str:
    """The query string naming one series (history page and /api/series)."""
    keep = {k: ("true" if v is True else "false" if v is False else v) for k, v in fields.items() if v is not None}
    return urlencode(keep)


def ci_bar(low: float | None, ratio: float, high: float | None, span: float) -> dict[str, float]:
    """Positions (0..200 px) of a confidence interval of a ratio on a log axis ``1/span .. span``."""

    def x(v: float) -> float:
        v = min(max(v, 1.0 / span), span)
        return 100.0 + 100.0 * math.log(v) / math.log(span)

    return {
        "lo": x(low if low is not None else ratio),
        "mid": x(ratio),
        "hi": x(high if high is not None else ratio),
        "one": 100.0,
    }


templates.env.globals.update(us=us, gbps=gbps, pct=pct, size=size, series_query=series_query, nav=NAV)


def render(request: Request, name: str, page: str, status: int = 200, **context: Any) -> HTMLResponse:
    gate: Gate = request.app.state.gate
    context.update(
        request=request,
        page=page,
        can_write=getattr(request.state, "access", "none") == "write",
        writes_enabled=gate.writes_enabled,
    )
    return templates.TemplateResponse(request, name, context, status_code=status)


def error_page(request: Request, status: int, message: str) -> Response:
    if not hasattr(request.state, "access"):
        request.state.access = "none"
    return render(request, "error.html", "error", status=status, status_code=status, message=message)


def _number(text: str | None, name: str, low: float, high: float, *, low_open: bool = False) -> float | None:
    """A form field's number, None when left empty; BadRequest naming the field when it is not one in range."""
    if text is None or not text.strip():
        return None
    try:
        value = float(text.strip().rstrip("%")) / (100.0 if text.strip().endswith("%") else 1.0)
    except ValueError:
        raise q.BadRequest(f"{name}: {text[:40]!r} is not a number") from None
    if not (low < value if low_open else low <= value) or not value < high or math.isnan(value):
        raise q.BadRequest(f"{name}: expected {'more than' if low_open else 'at least'} {low:g} and less than {high:g}")
    return value


@router.get("/", response_class=HTMLResponse)
def home() -> Response:
    return RedirectResponse("/runs", status_code=303)


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    filters: Annotated[q.RunFilters, Query()],
    page: int = Query(1, ge=1, le=1_000_000),
    per_page: int = Query(50, ge=1, le=q.MAX_PER_PAGE),
) -> Response:
    doc = q.runs_doc(store_of(request), filters, page, per_page)
    shown = {k: v for k, v in doc.filters.model_dump().items() if v is not None}

    def page_link(n: int) -> str:
        return "/runs?" + urlencode({**shown, "page": n, "per_page": per_page})

    return render(request, "runs.html", "runs", doc=doc, page_link=page_link)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str) -> Response:
    doc = q.run_doc(store_of(request), run_id)
    return render(request, "run.html", "run", doc=doc)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    base: str | None = None,
    candidate: str | None = None,
    min_change_text: str | None = Query(None, alias="min_change", max_length=40),
    alpha_text: str | None = Query(None, alias="alpha", max_length=40),
) -> Response:
    # A form sends its empty fields as empty strings: those are "not given".
    min_change = _number(min_change_text, "min_change", 0.0, 1.0, low_open=False)
    alpha = _number(alpha_text, "alpha", 0.0, 1.0, low_open=True)
    doc = None
    if base and candidate:
        url = compare_page_url(request, base, candidate, {"min_change": min_change, "alpha": alpha})
        doc = q.compare_doc(store_of(request), base, candidate, page_url=url, min_change=min_change, alpha=alpha)
    span = 1.0
    rows = doc.report.get("rows") if doc is not None else None
    for r in rows if isinstance(rows, list) else ():
        for v in (r["ci_low"], r["ci_high"], r["ratio"]):
            if v:
                span = max(span, v, 1.0 / v)
    span = min(max(span * 1.1, 1.05), 10.0)
    return render(
        request,
        "compare.html",
        "compare",
        doc=doc,
        base=base or "",
        candidate=candidate or "",
        min_change=min_change,
        alpha=alpha,
        span=span,
        ci_bar=lambda r: ci_bar(r["ci_low"], r["ratio"], r["ci_high"], span),
    )


@router.get("/history", response_class=HTMLResponse)
def history_page(
    request: Request,
    fingerprint: str | None = None,
    op: str | None = None,
    dtype: str | None = None,
    size_bytes: int | None = Query(None, ge=0, le=2**62),
    tag: str | None = None,
    in_place: bool = False,
    algo: str = "builtin",
    redop: str | None = None,
    root_text: str | None = Query(None, alias="root", max_length=20),
    group: str | None = None,
    order: Literal["time", "revision"] = "time",
) -> Response:
    root_value = _number(root_text, "root", 0, 2**31)
    if root_value is not None and not root_value.is_integer():
        raise q.BadRequest(f"root: {root_text!r} is not a rank")
    root = None if root_value is None else int(root_value)
    redop = redop or None
    group = group or None
    doc = None
    api = None
    if fingerprint and op and dtype and size_bytes is not None:
        sel = series_selector(fingerprint, op, dtype, size_bytes, tag, in_place, algo, redop, root, group)
        doc = q.series_doc(store_of(request), sel, order)
        api = "/api/series?" + series_query(**doc.series.model_dump(), order=order)
    return render(
        request,
        "history.html",
        "history",
        doc=doc,
        api=api,
        form={
            "fingerprint": fingerprint or "",
            "op": op or "",
            "dtype": dtype or "",
            "size_bytes": "" if size_bytes is None else size_bytes,
            "tag": tag or "",
            "in_place": in_place,
            "algo": algo,
            "redop": redop or "",
            "root": "" if root is None else root,
            "group": group or "",
            "order": order,
        },
    )


@router.get("/regressions", response_class=HTMLResponse)
def regressions_page(
    request: Request,
    since: str | None = None,
    lookback_days: int = Query(180, ge=1, le=3650),
) -> Response:
    doc = q.regressions_doc(store_of(request), since, lookback_days)
    return render(request, "regressions.html", "regressions", doc=doc, since=since or "")


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> Response:
    return render(request, "login.html", "login", failed=False)


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, token: str = Form(..., max_length=512)) -> Response:
    gate: Gate = request.app.state.gate
    cookie = gate.session_cookie(token)
    if cookie is None:
        return render(request, "login.html", "login", status=401, failed=True)
    response = RedirectResponse("/runs", status_code=303)
    secure = (request.app.state.config.public_url or "").startswith("https://")
    name, value = cookie
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=secure, path="/")
    return response
