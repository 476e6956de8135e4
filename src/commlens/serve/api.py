"""The JSON API under ``/api``: everything the pages show, and the writes a write token allows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from commlens.errors import CommlensError
from commlens.serve import queries as q
from commlens.store import Store

if TYPE_CHECKING:
    from commlens.store import Threshold

__all__ = ["router", "series_selector"]

router = APIRouter(prefix="/api", tags=["api"])


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def base_url(request: Request) -> str:
    return str(request.app.state.config.base_url)


@router.get("/runs", response_model=q.RunsPage, summary="Stored runs, newest first, filtered and paged")
def runs(
    request: Request,
    filters: Annotated[q.RunFilters, Query()],
    page: int = Query(1, ge=1, le=1_000_000),
    per_page: int = Query(50, ge=1, le=q.MAX_PER_PAGE),
) -> q.RunsPage:
    return q.runs_doc(store_of(request), filters, page, per_page)


@router.get("/runs/{run_id}", response_model=q.RunOut, summary="One run: system, config, notes, every row")
def run(request: Request, run_id: str) -> q.RunOut:
    return q.run_doc(store_of(request), run_id)


def compare_page_url(
    request: Request, base: str, candidate: str, extra: Mapping[str, float | None] | None = None
) -> str:
    params = {"base": base, "candidate": candidate, **{k: v for k, v in (extra or {}).items() if v is not None}}
    return f"{base_url(request)}/compare?{urlencode(params)}"


@router.get("/compare", response_model=q.CompareOut, summary="Two runs or tags, or a run against its baseline")
def compare(
    request: Request,
    base: str = Query(..., description="run:ID, tag:NAME, a bare run id or tag, or `baseline`"),
    candidate: str = Query(..., description="run:ID, tag:NAME, or a bare run id or tag"),
    min_change: float | None = Query(None, ge=0.0, lt=1.0),
    alpha: float | None = Query(None, gt=0.0, lt=1.0),
) -> q.CompareOut:
    url = compare_page_url(request, base, candidate, {"min_change": min_change, "alpha": alpha})
    return q.compare_doc(store_of(request), base, candidate, page_url=url, min_change=min_change, alpha=alpha)


def series_selector(
    fingerprint: str,
    op: str,
    dtype: str,
    size_bytes: int,
    tag: str | None = None,
    in_place: bool = False,
    algo: str = "builtin",
    redop: str | None = None,
    root: int | None = None,
    group: str | None = None,
) -> q.SeriesSelector:
    return q.SeriesSelector(
        fingerprint=fingerprint,
        tag=tag or None,
        op=op,
        dtype=dtype,
        size_bytes=size_bytes,
        in_place=in_place,
        algo=algo,
        redop=redop or None,
        root=root,
        group=group or None,
    )


@router.get("/series", response_model=q.SeriesOut, summary="The history of one series, its change points, baseline")
def series(
    request: Request,
    fingerprint: str,
    op: str,
    dtype: str,
    size_bytes: int = Query(..., ge=0, le=2**62),
    tag: str | None = Query(None, description="the series' tag; empty or absent: runs without one"),
    in_place: bool = False,
    algo: str = "builtin",
    redop: str | None = None,
    root: int | None = Query(None, ge=0, le=2**31),
    group: str | None = None,
    order: Literal["time", "revision"] = "time",
) -> q.SeriesOut:
    sel = series_selector(fingerprint, op, dtype, size_bytes, tag, in_place, algo, redop, root, group)
    return q.series_doc(store_of(request), sel, order)


@router.get("/regressions", response_model=q.RegressionsOut, summary="Recent regressions over every series")
def regressions(
    request: Request,
    since: str | None = Query(None, description="changes at or after this date (default: 30 days ago)"),
    lookback_days: int = Query(180, ge=1, le=3650),
) -> q.RegressionsOut:
    return q.regressions_doc(store_of(request), since, lookback_days)


# -- writes (need the write token; see commlens.serve.security) ----------------------------------------


class BaselineIn(BaseModel):
    fingerprint: str = Field(max_length=32)
    tag: str | None = Field(None, max_length=q.MAX_REF_CHARS, description="the series' tag; null: no tag")
    ref_kind: Literal["run", "tag"]
    ref: str = Field(max_length=q.MAX_REF_CHARS)
    note: str = Field("", max_length=500)


class SeriesIn(BaseModel):
    fingerprint: str = Field(max_length=32)
    tag: str | None = Field(None, max_length=q.MAX_REF_CHARS)


# A store.Threshold on the wire: the same fields, checked at the boundary (made one by ``_threshold``).
class ThresholdIn(BaseModel):
    fingerprint: str = Field("*", max_length=32)
    tag: str | None = Field("*", max_length=q.MAX_REF_CHARS, description="'*': any; null: runs without a tag")
    op: str = Field("*", max_length=64)
    dtype: str = Field("*", max_length=64)
    size_bytes: int = Field(-1, ge=-1, le=2**62)
    group: str | None = Field("*", max_length=200)
    min_change: float | None = Field(None, ge=0.0, lt=1.0)
    alpha: float | None = Field(None, gt=0.0, lt=1.0)
    detect_alpha: float | None = Field(None, gt=0.0, lt=1.0)


class TagIn(BaseModel):
    tag: str | None = Field(None, max_length=q.MAX_REF_CHARS, description="null removes the tag")


@contextmanager
def _as_bad_request() -> Iterator[None]:
    """A value the store refuses (a library error) as the client's mistake: HTTP 400 with its message."""
    try:
        yield
    except CommlensError as e:
        raise q.BadRequest(str(e)) from None


@router.get("/baselines", summary="Every stored baseline")
def list_baselines(request: Request) -> list[Mapping[str, object]]:
    return [b.as_dict() for b in store_of(request).baselines.list()]


@router.put("/baselines", summary="Set the baseline of a series (write token)")
def put_baseline(request: Request, body: BaselineIn) -> Mapping[str, object]:
    with _as_bad_request():
        b = store_of(request).baselines.set(body.fingerprint, body.tag, body.ref_kind, body.ref, note=body.note)
    return b.as_dict()


@router.delete("/baselines", summary="Remove the baseline of a series (write token)")
def delete_baseline(request: Request, body: SeriesIn) -> dict[str, bool]:
    return {"removed": store_of(request).baselines.unset(body.fingerprint, body.tag)}


@router.get("/thresholds", summary="Every stored threshold")
def list_thresholds(request: Request) -> list[Mapping[str, object]]:
    return [t.as_dict() for t in store_of(request).thresholds.list()]


def _threshold(body: ThresholdIn) -> Threshold:
    """The stored threshold a request's body names: its fields are the record's."""
    from commlens.store import Threshold  # the thresholds' module: read only by the requests that need it

    return Threshold(**body.model_dump())


@router.put("/thresholds", summary="Set a threshold for the series a selector matches (write token)")
def put_threshold(request: Request, body: ThresholdIn) -> Mapping[str, object]:
    with _as_bad_request():
        t = store_of(request).thresholds.set(_threshold(body))
    return t.as_dict()


@router.delete("/thresholds", summary="Remove the threshold of a selector (write token)")
def delete_threshold(request: Request, body: ThresholdIn) -> dict[str, bool]:
    with _as_bad_request():
        removed = store_of(request).thresholds.unset(_threshold(body))
    return {"removed": removed}


@router.put("/runs/{run_id}/tag", summary="Tag a run, or remove its tag (write token)")
def put_tag(request: Request, run_id: str, body: TagIn) -> dict[str, str | None]:
    from commlens.store import StoreError

    tag = body.tag.strip() if body.tag is not None and body.tag.strip() else None
    if tag is not None and not tag.isprintable():
        raise q.BadRequest("tag: printable characters only")
    try:
        full, previous = store_of(request).set_tag(run_id, tag)
    except StoreError as e:
        raise q.NotFound(str(e)) from None
    return {"run_id": full, "tag": tag, "previous_tag": previous}
