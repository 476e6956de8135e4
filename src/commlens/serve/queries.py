"""What the pages and the JSON API show, read from the store: one function per document.

Each returns a pydantic model (the API's response schema); the pages render the same models.
Every parameter comes from a client: it is checked here, and a reference names a stored run or
tag only. Nothing here opens a file.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from commlens.errors import CommlensError
from commlens.regress.compare import CompareSettings, compare_runs
from commlens.regress.detect import DetectSettings
from commlens.regress.history import DetectedChange, detect_history, parse_utc
from commlens.regress.stats import robust_noise
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import Run, Series
from commlens.store import MeasurementFilter, MeasurementRow, RunFilter, Store, StoreError

if TYPE_CHECKING:  # (imported where used: the thresholds' module is read only by the pages that need it)
    pass

__all__ = [
    "MAX_PER_PAGE",
    "BadRequest",
    "NotFound",
    "compare_doc",
    "regressions_doc",
    "run_doc",
    "runs_doc",
    "series_doc",
]

MAX_PER_PAGE = 200
MAX_SAMPLES_SHOWN = 2000  # per-iteration times sent per row; the count says how many there were
MAX_SERIES_POINTS = 5000  # a history page's points (the newest)
MAX_REF_CHARS = 200


class BadRequest(CommlensError, ValueError):
    """A client's parameter that cannot be used; the message names it (HTTP 400)."""


class NotFound(CommlensError, LookupError):
    """A run, tag, series or report that is not in the store (HTTP 404)."""


# -- runs ------------------------------------------------------------------------------------------


class RunSummaryOut(BaseModel):
    run_id: str
    started_at: str
    started_at_utc: str
    status: str
    tag: str | None
    revision: str | None
    source: str
    world_size: int
    backend: str
    nmeasurements: int
    ops: list[str]
    avg_busbw_bytes_per_s: float
    fingerprint: str


# The run listing's filters: the query parameters of the runs page and of /api/runs, and what the page
# echoes (a store.RunFilter once checked).
class RunFilters(BaseModel):
    op: str | None = None
    tag: str | None = None
    source: str | None = None
    fingerprint: str | None = None
    revision: str | None = None
    since: str | None = Field(None, description="ISO 8601 date or time (UTC unless it says)")
    until: str | None = None


class RunsPage(BaseModel):
    total: int
    page: int
    per_page: int
    pages: int
    filters: RunFilters
    runs: list[RunSummaryOut]


def _text(value: str | None, name: str, limit: int = MAX_REF_CHARS) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > limit or not value.isprintable():
        raise BadRequest(f"{name}: at most {limit} printable characters")
    return value


def _when(value: str | None, name: str) -> str | None:
    value = _text(value, name, 40)
    if value is not None:
        try:
            parse_utc(value)
        except CommlensError as e:
            raise BadRequest(f"{name}: {e}") from None
    return value


def runs_doc(store: Store, filters: RunFilters, page: int = 1, per_page: int = 50) -> RunsPage:
    """One page of the run listing, newest first, and how many runs match."""
    if page < 1:
        raise BadRequest(f"page: expected 1 or more, got {page}")
    if not (1 <= per_page <= MAX_PER_PAGE):
        raise BadRequest(f"per_page: expected 1 to {MAX_PER_PAGE}, got {per_page}")
    f = RunFilters(
        op=_text(filters.op, "op"),
        tag=_text(filters.tag, "tag"),
        source=_text(filters.source, "source"),
        fingerprint=_text(filters.fingerprint, "fingerprint", 32),
        revision=_text(filters.revision, "revision"),
        since=_when(filters.since, "since"),
        until=_when(filters.until, "until"),
    )
    where = RunFilter(**f.model_dump())
    total = store.count_runs(where)
    pages = max(1, math.ceil(total / per_page))
    runs = store.list_runs(where, limit=per_page, offset=(page - 1) * per_page, on_corrupt=lambda _e: None)
    return RunsPage(
        total=total,
        page=page,
        per_page=per_page,
        pages=pages,
        filters=f,
        runs=[RunSummaryOut.model_validate(r.as_dict()) for r in runs],
    )


# -- one run ----------------------------------------------------------------------------------------


class MeasurementOut(BaseModel):
    position: int
    op: str
    algo: str
    dtype: str
    redop: str | None
    root: int | None
    size_bytes: int
    count: int
    in_place: bool
    world_size: int
    group: str | None
    nwrong: int | None
    iterations: int
    mean_s: float
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    min_s: float | None
    max_s: float | None
    cv: float | None
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    samples_s: list[float] = Field(description=f"per-iteration times, the first {MAX_SAMPLES_SHOWN}")


_STAT_FIELDS = ("mean_s", "p50_s", "p95_s", "p99_s", "min_s", "max_s", "cv")  # MeasurementOut's, from TimeStats


class RunOut(BaseModel):
    summary: RunSummaryOut
    finished_at: str | None
    command_line: str
    system: Mapping[str, object]
    fingerprint: str
    config: Mapping[str, object]  # with its kind (commlens.results.runconfig)
    notes: list[str]
    measurements: list[MeasurementOut]
    expect: Mapping[str, object] | None = None  # commlens expect's verdict (commlens.expect/1), None if not judged


def _verdict(run: Run) -> JsonObject | None:
    """The expected-performance verdict of a run, as ``commlens expect --json`` prints it; None where the run
    cannot be judged (no GPU known, no row modelled) or its results check failed."""
    from commlens import expect
    from commlens.expect import ExpectError

    if run.status == "check_failed":
        return None
    try:
        return expect.run(expect.ExpectRequest(run)).as_dict()
    except ExpectError:
        return None


def run_doc(store: Store, run_ref: str) -> RunOut:
    ref = _text(run_ref, "run")
    if ref is None:
        raise BadRequest("run: a run id is needed")
    try:
        run = store.get_run(ref)
    except StoreError as e:
        raise NotFound(str(e)) from None
    summary = store.list_runs(RunFilter(run_ids=[run.run_id]), limit=1)[0]
    rows = []
    for i, m in enumerate(run.measurements):
        st = m.stats
        rows.append(
            MeasurementOut(
                position=i,
                **m.key._asdict(),
                count=m.count,
                world_size=m.world_size,
                nwrong=m.nwrong,
                iterations=st.n,
                **{name: getattr(st, name) for name in _STAT_FIELDS},
                algbw_bytes_per_s=m.algbw_bytes_per_s,
                busbw_bytes_per_s=m.busbw_bytes_per_s,
                samples_s=list(m.samples_s[:MAX_SAMPLES_SHOWN]),
            )
        )
    from dataclasses import asdict

    return RunOut(
        summary=RunSummaryOut.model_validate(summary.as_dict()),
        finished_at=run.finished_at,
        command_line=run.command_line,
        system=asdict(run.system),
        fingerprint=run.system.fingerprint(),
        config=run.config.as_dict(),
        notes=list(run.notes),
        measurements=rows,
        expect=_verdict(run),
    )


# -- compare ----------------------------------------------------------------------------------------


class CompareOut(BaseModel):
    base: str
    candidate: str
    report: Mapping[str, object] = Field(description="as `commlens compare --format json` prints it")
    markdown: str = Field(description="a pull-request comment linking back to this comparison")
    url: str = Field(description="the shareable address of this comparison's page")


def resolve_stored(store: Store, ref: str, what: str) -> list[Run]:
    """The runs a client's reference names: ``run:ID`` (or a unique prefix), ``tag:NAME``, or bare
    (a tag with runs, else a run id). Never a file: the server reads no path a client gives."""
    text = _text(ref, what)
    if text is None:
        raise BadRequest(f"{what}: a run id or tag is needed")
    kind, sep, rest = text.partition(":")
    if sep and kind == "file":
        raise BadRequest(f"{what}: the server reads no files; give a stored run id or tag")
    if sep and kind in ("run", "tag"):
        text = rest
    else:
        kind = ""
    if kind in ("", "tag"):
        runs = store.runs_with_tag(text, on_corrupt=lambda _e: None)
        if runs:
            return runs
        if kind == "tag":
            raise NotFound(f"{what}: no stored run has tag {text!r}")
    try:
        return [store.get_run(text)]
    except StoreError as e:
        raise NotFound(f"{what}: no stored run or tag {text!r} ({e})") from None


def compare_doc(
    store: Store,
    base: str,
    candidate: str,
    *,
    page_url: str,
    min_change: float | None = None,
    alpha: float | None = None,
) -> CompareOut:
    """As ``commlens compare BASE CANDIDATE --db ...`` judges it: stored noise floors and thresholds
    (an explicit ``min_change`` or ``alpha`` wins over a stored threshold), ``baseline`` as the base."""
    from commlens.regress import series_settings
    from commlens.store import BaselineError

    cand_runs = resolve_stored(store, candidate, "candidate")
    base_label = base
    try:
        if series_settings.is_baseline_ref(base.strip()):
            baseline, base_runs = series_settings.baseline_runs(store, cand_runs)
            base_label = f"baseline {baseline.ref_text}"
        else:
            base_runs = resolve_stored(store, base, "base")
    except BaselineError as e:
        raise NotFound(f"base baseline: {e}") from None
    settings = CompareSettings()
    try:
        if min_change is not None:
            settings = dataclasses.replace(settings, min_change=min_change)
        if alpha is not None:
            settings = dataclasses.replace(settings, alpha=alpha)
    except CommlensError as e:
        raise BadRequest(str(e)) from None
    explicit = [name for name, value in (("min_change", min_change), ("alpha", alpha)) if value is not None]
    thresholds = None
    if len(explicit) < 2:
        try:
            fingerprint, tag = series_settings.candidate_series(cand_runs)
        except BaselineError:
            pass  # a candidate pooling several series: a threshold belongs to one
        else:
            stored = store.thresholds.list()
            if stored:
                thresholds = series_settings.compare_thresholds(stored, fingerprint, tag, settings, explicit=explicit)
    floors = store.floors.load(sorted({r.system.fingerprint() for r in (*base_runs, *cand_runs)}))
    try:
        report = compare_runs(
            base_runs,
            cand_runs,
            settings,
            base_label=base_label,
            candidate_label=candidate,
            floors=floors,
            thresholds=thresholds,
        )
    except CommlensError as e:
        raise BadRequest(str(e)) from None
    from commlens.regress.render import compare_markdown

    markdown = compare_markdown(report, url=page_url, max_rows=_MARKDOWN_ROWS)
    return CompareOut(base=base, candidate=candidate, report=report.as_dict(), markdown=markdown, url=page_url)


_MARKDOWN_ROWS = 50  # rows of the pull-request comment; the page has them all


# -- history of one series ---------------------------------------------------------------------------


# One series as a client names it (redop and root None: whichever the rows have): the API's form of a
# results.records.Series, built from one by ``of``. (A comment, not a docstring: that would change the API's schema.)
class SeriesSelector(BaseModel):
    fingerprint: str
    tag: str | None = None  # None: runs without a tag
    op: str
    dtype: str
    size_bytes: int
    in_place: bool = False
    algo: str = "builtin"
    redop: str | None = None
    root: int | None = None
    group: str | None = None

    @classmethod
    def of(cls, series: Series) -> SeriesSelector:
        return cls.model_validate(series.fields())


class SeriesPoint(BaseModel):
    run_id: str
    started_at: str
    revision: str | None
    mean_s: float
    busbw_bytes_per_s: float
    status: str


class ChangeOut(BaseModel):
    index: int
    run_id: str
    started_at: str
    revision: str | None
    previous_run_id: str
    previous_revision: str | None
    mean_before_s: float
    mean_after_s: float
    change: float
    p_value: float
    direction: str


class BaselineOut(BaseModel):
    ref_kind: str
    ref: str
    note: str
    set_at: str
    run_ids: list[str]
    mean_s: float | None = Field(description="the baseline runs' mean time of this series; None if they lack it")


class SeriesOut(BaseModel):
    series: SeriesSelector
    order: Literal["time", "revision"]
    points: list[SeriesPoint]
    truncated: int = Field(description="older points left out (a page shows the newest)")
    changes: list[ChangeOut]
    baseline: BaselineOut | None
    settings: Mapping[str, object]
    noise: float | None = Field(description="robust relative sd of the series' run means")


def _change_out(c: DetectedChange) -> ChangeOut:
    return ChangeOut.model_validate({"index": c.index, **c.level_change()})


def series_doc(store: Store, sel: SeriesSelector, order: Literal["time", "revision"] = "time") -> SeriesOut:
    """One series' history: its points, the change points ``commlens detect`` finds, its baseline."""
    key = (store.url, order, *sel.model_dump().items())
    generation = store.generation()
    cached = _series_cache.get(key, generation)
    if cached is not None:
        return cached
    doc = _series_doc(store, sel, order)
    _series_cache.put(key, generation, doc)
    return doc


def _series_doc(store: Store, sel: SeriesSelector, order: Literal["time", "revision"]) -> SeriesOut:
    for name in ("fingerprint", "op", "dtype", "algo"):
        if _text(getattr(sel, name), name) is None:
            raise BadRequest(f"{name}: needed to name a series")
    _text(sel.tag, "tag")
    _text(sel.group, "group")
    if sel.size_bytes < 0:
        raise BadRequest("size_bytes: expected 0 or more")
    rows = [
        r
        for r in store.measurement_rows(
            MeasurementFilter(
                op=sel.op, dtype=sel.dtype, size_bytes=sel.size_bytes, fingerprint=sel.fingerprint, tag=sel.tag
            ),
            with_samples=False,
        )
        if r.tag == sel.tag
        and r.fingerprint == sel.fingerprint
        and r.key.in_place == sel.in_place
        and r.key.algo == sel.algo
        and r.key.group == sel.group
        and (sel.redop is None or r.key.redop == sel.redop)
        and (sel.root is None or r.key.root == sel.root)
    ]
    if not rows:
        raise NotFound("no stored run measured this series (system, tag, op, dtype, size, placement, algorithm)")
    keys = {r.key for r in rows}
    if len(keys) > 1:
        shown = ", ".join(sorted(f"redop {k.redop} root {k.root}" for k in keys))
        raise BadRequest(f"several series match ({shown}): give redop and root")
    (key,) = keys
    one = Series(key, sel.fingerprint, sel.tag)
    sel = SeriesSelector.of(one)  # redop and root as the rows have them
    settings, thresholds = _detect_settings(store, one)
    report = detect_history(rows, settings, order=order, floors=store.floors.load([sel.fingerprint]))
    per_run: dict[str, list[MeasurementRow]] = defaultdict(list)
    for r in rows:
        per_run[r.run_id].append(r)
    runs = list(per_run.values())
    if order == "revision":
        first: dict[str, datetime] = {}
        for rs in runs:
            rev = rs[0].revision
            if rev is not None and (rev not in first or rs[0].started_at < first[rev]):
                first[rev] = rs[0].started_at
        runs.sort(key=lambda rs: (first.get(rs[0].revision or "", rs[0].started_at), rs[0].started_at, rs[0].run_id))
    else:
        runs.sort(key=lambda rs: (rs[0].started_at, rs[0].run_id))
    points = [
        SeriesPoint(
            run_id=rs[0].run_id,
            started_at=rs[0].started_at.isoformat(),
            revision=rs[0].revision,
            mean_s=sum(r.mean_s for r in rs) / len(rs),
            busbw_bytes_per_s=sum(r.busbw_bytes_per_s for r in rs) / len(rs),
            status=rs[0].status,
        )
        for rs in runs
    ]
    truncated = max(0, len(points) - MAX_SERIES_POINTS)
    means = [p.mean_s for p in points if p.status != "check_failed" and p.mean_s > 0]
    noise = float(robust_noise(_log(means))) if len(means) >= 4 else None
    return SeriesOut(
        series=sel,
        order=order,
        points=points[truncated:],
        truncated=truncated,
        changes=[_change_out(c) for c in report.changes if c.index - truncated >= 0],
        baseline=_baseline_out(store, one),
        settings={"min_change": settings.min_change, "alpha": settings.alpha, "thresholds": thresholds},
        noise=noise,
    )


def _log(values: list[float]) -> Any:
    import numpy as np

    return np.log(np.asarray(values, dtype=float))


def _detect_settings(store: Store, one: Series) -> tuple[DetectSettings, list[JsonObject]]:
    """Detect's settings for one series, as ``commlens detect`` judges it: its stored thresholds over the defaults."""
    resolved = store.thresholds.resolve(one)
    settings = DetectSettings()
    if resolved.min_change is not None:
        settings = dataclasses.replace(settings, min_change=resolved.min_change)
    if resolved.detect_alpha is not None:
        settings = dataclasses.replace(settings, alpha=resolved.detect_alpha)
    return settings, [t.as_dict() for t in resolved.matched]


def _baseline_out(store: Store, one: Series) -> BaselineOut | None:
    found = store.baselines.get(one.fingerprint, one.tag)
    if found is None:
        return None
    ids = store.baselines.run_ids(found)
    wanted = set(ids)
    # a tag's runs by their tag, a run by its id: never every run of the system
    by_tag = found.ref_kind == "tag"
    rows = [
        r
        for r in store.measurement_rows(
            MeasurementFilter(
                op=one.key.op,
                dtype=one.key.dtype,
                size_bytes=one.key.size_bytes,
                fingerprint=one.fingerprint,
                tag=found.ref if by_tag else None,
                run_ids=None if by_tag else ids,
            ),
            with_samples=False,
        )
        if r.run_id in wanted and r.key == one.key
    ]
    return BaselineOut(
        ref_kind=found.ref_kind,
        ref=found.ref,
        note=found.note,
        set_at=found.set_at,
        run_ids=ids,
        mean_s=sum(r.mean_s for r in rows) / len(rows) if rows else None,
    )


# -- regressions over every series -------------------------------------------------------------------


# A series of the regressions page: the selector that names it (its history page's), its points and their noise.
class SeriesRef(SeriesSelector):
    points: int
    noise: float | None


class RegressionOut(BaseModel):
    series: SeriesRef
    change: ChangeOut


class RegressionsOut(BaseModel):
    since: str
    lookback_days: int
    computed_at: str
    compute_s: float
    series: int
    points: int
    regressions: list[RegressionOut] = Field(description="regression-direction changes of stable series, newest first")
    unstable: list[SeriesRef] = Field(description="series too noisy to tell a change of min_change from noise")
    unstable_regressions: list[RegressionOut]


class _Cache:
    """The last regressions document per (since, lookback), valid while the store holds the same runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[tuple[str, str, int], tuple[tuple[Any, ...], RegressionsOut]] = {}


_cache = _Cache()


class _SeriesCache:
    """The last few history documents, each valid while the store's generation is the same: the history
    page and its chart ask for the same series within a second."""

    SIZE = 32

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[tuple[Any, ...], tuple[tuple[Any, ...], SeriesOut]] = {}

    def get(self, key: tuple[Any, ...], generation: tuple[Any, ...]) -> SeriesOut | None:
        with self.lock:
            hit = self.entries.get(key)
            return hit[1] if hit is not None and hit[0] == generation else None

    def put(self, key: tuple[Any, ...], generation: tuple[Any, ...], doc: SeriesOut) -> None:
        with self.lock:
            self.entries.pop(key, None)
            self.entries[key] = (generation, doc)
            while len(self.entries) > self.SIZE:
                self.entries.pop(next(iter(self.entries)))


_series_cache = _SeriesCache()


def regressions_doc(
    store: Store, since: str | None = None, lookback_days: int = 180, now: datetime | None = None
) -> RegressionsOut:
    """Every recent regression-direction change across all series, unstable series apart.

    History is read back ``lookback_days`` before ``since`` (default: 30 days ago), so the level before a
    recent change is known. A series (of at least the 2 x ``min_segment`` points detection needs) is
    unstable when its robust relative noise exceeds the detection's ``min_change``: a change that small
    cannot be told from one noisy run.
    """
    if not (1 <= lookback_days <= 3650):
        raise BadRequest("lookback_days: expected 1 to 3650")
    now = now or datetime.now(timezone.utc)
    since = _when(since, "since")
    since_at = parse_utc(since) if since is not None else now - timedelta(days=30)
    key = (store.url, since_at.isoformat(), lookback_days)
    gen = store.generation()
    with _cache.lock:
        hit = _cache.entries.get(key)
        if hit is not None and hit[0] == gen:
            return hit[1]
        started = time.perf_counter()
        doc = _regressions(store, since_at, lookback_days)
        doc.compute_s = time.perf_counter() - started
        _cache.entries = {k: v for k, v in _cache.entries.items() if v[0] == gen}
        _cache.entries[key] = (gen, doc)
        return doc


def _regressions(store: Store, since_at: datetime, lookback_days: int) -> RegressionsOut:
    """Detect over every series, one (op, dtype, size) at a time: memory holds one slice of the history,
    not the whole store's."""
    from commlens.regress.series_settings import detect_thresholds

    start = since_at - timedelta(days=lookback_days)
    settings = DetectSettings()
    stored = store.thresholds.list()
    settings_for = detect_thresholds(stored, settings) if stored else None
    floors = store.floors.load()
    series = points = 0
    unstable: list[SeriesRef] = []
    stable_out: list[RegressionOut] = []
    noisy_out: list[RegressionOut] = []
    for op, dtype, size_bytes in store.measured_slices(start):
        where = MeasurementFilter(op=op, dtype=dtype, size_bytes=size_bytes, since=start)
        rows = store.measurement_rows(where, with_samples=False)
        report = detect_history(rows, settings, since=since_at, floors=floors, settings_for=settings_for)
        series += report.series
        points += report.points
        per_series: dict[Series, list[float]] = defaultdict(list)
        for r in rows:
            if r.status != "check_failed" and r.mean_s > 0:
                per_series[Series(r.key, r.fingerprint, r.tag)].append(r.mean_s)
        del rows
        refs: dict[Series, SeriesRef] = {}
        noisy: set[Series] = set()
        for one, means in per_series.items():
            # judged only where detect can find a change at all (2 x min_segment points): a pull
            # request's few runs are not a series to call noisy
            noise = float(robust_noise(_log(means))) if len(means) >= 2 * settings.min_segment else None
            refs[one] = ref = SeriesRef.model_validate({**one.fields(), "points": len(means), "noise": noise})
            if noise is not None and noise > settings.min_change:
                unstable.append(ref)
                noisy.add(one)
        for c in report.regressions:
            item = RegressionOut(series=refs[c.series], change=_change_out(c))
            (noisy_out if c.series in noisy else stable_out).append(item)
    stable_out.sort(key=lambda x: x.change.started_at, reverse=True)
    noisy_out.sort(key=lambda x: x.change.started_at, reverse=True)
    unstable.sort(key=lambda u: (-(u.noise or 0.0), u.fingerprint, u.tag or "", u.op, u.size_bytes))
    return RegressionsOut(
        since=since_at.isoformat(),
        lookback_days=lookback_days,
        computed_at=datetime.now(timezone.utc).isoformat(),
        compute_s=0.0,
        series=series,
        points=points,
        regressions=stable_out,
        unstable=unstable,
        unstable_regressions=noisy_out,
    )
