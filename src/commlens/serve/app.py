"""The ASGI app: the store opened once, the security gate in front of every route, API and pages."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from commlens.serve.config import ServeConfig
from commlens.serve.queries import BadRequest, NotFound
from commlens.serve.security import CSRF_COOKIE, SECURITY_HEADERS, Gate, new_csrf_token
from commlens.store import Store, StoreError

__all__ = ["create_app"]

STATIC = Path(__file__).parent / "static"


def create_app(config: ServeConfig, store: Store | None = None) -> FastAPI:
    """The dashboard over ``config.db_url`` (or an open ``store``), guarded as ``security`` describes."""
    from commlens import __version__

    app = FastAPI(
        title="commlens",
        version=__version__,
        description="The JSON API of commlens serve: runs, comparisons, history, regressions, reports, live jobs.",
        docs_url=None,  # Swagger UI loads from a CDN: the schema alone is served
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.config = config
    app.state.store = store if store is not None else Store.open(config.db_url, create=False)
    app.state.gate = Gate(config)
    _refresh_sqlite_statistics(app.state.store)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        gate: Gate = request.app.state.gate
        h = request.headers
        decision = gate.check(
            method=request.method,
            path=request.url.path,
            host=h.get("host"),
            origin=h.get("origin"),
            fetch_site=h.get("sec-fetch-site"),
            authorization=h.get("authorization"),
            cookies=dict(request.cookies),
            csrf_header=h.get("x-csrf-token"),
        )
        if decision.allowed and request.method not in ("GET", "HEAD", "OPTIONS"):
            decision = _body_limit(decision, h.get("content-length"), h.get("transfer-encoding"))
        if not decision.allowed:
            response: Response
            wants_page = not request.url.path.startswith("/api") and request.method == "GET"
            if decision.status == 401 and wants_page:
                response = Response(status_code=303, headers={"location": "/login"})
            elif request.url.path.startswith("/api"):
                response = JSONResponse({"error": decision.reason}, status_code=decision.status)
            else:
                response = PlainTextResponse(f"error: {decision.reason}\n", status_code=decision.status)
        else:
            request.state.access = decision.access
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers[name] = value
        if request.url.path.startswith("/api") or request.url.path == "/healthz":
            response.headers.setdefault("cache-control", "no-store")
        if CSRF_COOKIE not in request.cookies and "text/html" in response.headers.get("content-type", ""):
            response.set_cookie(CSRF_COOKIE, new_csrf_token(), httponly=False, samesite="strict", path="/")
        response.headers["server-timing"] = f"app;dur={(time.perf_counter() - started) * 1e3:.2f}"
        return response

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, exc: BadRequest) -> Response:
        return _error(request, 400, str(exc))

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return _error(request, 404, str(exc))

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> Response:
        return _error(request, 503, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = []
        for e in exc.errors()[:5]:
            where = ".".join(str(p) for p in e.get("loc", ())[1:]) or "request"
            problems.append(f"{where}: {e.get('msg', 'invalid')}")
        return _error(request, 400, "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(request, exc.status_code, str(exc.detail))

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, bool]:  # on the event loop: no worker thread, however busy they are
        return {"ok": True}

    from commlens.serve import api, pages

    app.include_router(api.router)
    app.include_router(pages.router)
    for extra in _extra_routers():
        app.include_router(extra)
    return app


def _refresh_sqlite_statistics(store: Store) -> None:
    """The store's planner statistics refreshed (``Store.refresh_statistics``); a store that cannot be written
    keeps the old plans."""
    try:
        store.refresh_statistics()
    except Exception as e:  # noqa: BLE001 - statistics are an optimisation: serving goes on without them
        import logging

        logging.getLogger(__name__).warning("SQLite statistics not refreshed: %s", e)


MAX_BODY_BYTES = 64 * 1024  # a write's JSON (a tag, a baseline, a threshold) or the sign-in form


def _body_limit(decision: Any, length: str | None, encoding: str | None) -> Any:
    """Refuse a body that could be large before anything reads it: one without a length, or over the limit."""
    from commlens.serve.security import Decision

    if encoding is not None and length is None:
        return Decision(False, 411, "a request body needs a Content-Length")
    try:
        n = int(length) if length is not None else 0
    except ValueError:
        return Decision(False, 400, "Content-Length is not a number")
    if n > MAX_BODY_BYTES:
        return Decision(False, 413, f"request body of {n} bytes: at most {MAX_BODY_BYTES} are accepted")
    return decision


def _extra_routers() -> list[Any]:
    """Routers of the report pages (diagnoses, projections, live jobs), when their module is present."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("commlens.serve.reports_routes") is None:
        return []
    module = importlib.import_module("commlens.serve.reports_routes")
    return [module.api_router, module.page_router]


def _error(request: Request, status: int, message: str) -> Response:
    if request.url.path.startswith("/api") or request.url.path == "/healthz":
        return JSONResponse({"error": message}, status_code=status)
    from commlens.serve.pages import error_page

    return error_page(request, status, message)
