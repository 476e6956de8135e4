"""Change points over stored history: split measurements into series, order them, detect, filter.

A series is one experiment on one system under one tag: the measurement key
(op, algo, dtype, redop, root, size, in_place, process group) plus the run's
fingerprint and tag. Each run contributes one point, its mean time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal, NamedTuple

from commlens.errors import CommlensError
from commlens.regress.detect import DetectSettings, find_changes
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import FloorKey, KeyOrder, MeasurementKey, Series

if TYPE_CHECKING:  # annotations only: importing the store loads SQLAlchemy, which compare of two files never needs
    from commlens.store.repo import MeasurementRow

__all__ = [
    "DetectReport",
    "DetectRequest",
    "DetectedChange",
    "HistoryPoint",
    "HistoryRun",
    "MeanHistory",
    "Order",
    "Series",
    "SeriesSettings",
    "TimeFormatError",
    "detect_history",
    "parse_utc",
    "run_detect",
]

Order = Literal["time", "revision"]


@dataclass(frozen=True)
class SeriesSettings:
    """The settings one series is judged with when they are not the report's: a stored threshold's."""

    settings: DetectSettings
    threshold: str  # which stored threshold(s) set them, in words (``op=all_reduce size=1048576``)


@dataclass(frozen=True)
class DetectedChange:
    """A change of level in one series; ``run_id`` is the first run at the new level."""

    series: Series
    index: int  # position of that run in the series
    points: int  # length of the series
    run_id: str
    started_at: datetime  # UTC
    revision: str | None
    previous_run_id: str  # the last run at the old level
    previous_revision: str | None
    mean_before_s: float  # of the segment before (back to the previous change)
    mean_after_s: float  # of the segment after (up to the next change)
    p_value: float
    noise_floor: float | None = None  # the series' run-to-run sd the change had to exceed, when known
    settings: DetectSettings | None = None  # what the series was judged with, when not the report's settings
    threshold: str | None = None  # the stored threshold(s) that set them (``SeriesSettings.threshold``)

    @property
    def change(self) -> float:
        """Relative change of the mean time: +0.08 is 8 % slower."""
        return self.mean_after_s / self.mean_before_s - 1.0

    @property
    def direction(self) -> Literal["regression", "improvement"]:
        return "regression" if self.mean_after_s > self.mean_before_s else "improvement"

    def level_change(self) -> JsonObject:
        """The change of level as every output names it: the first run at the new level and the last at the
        old, the means either side, the change, its p-value and direction (``started_at`` in ISO 8601)."""
        return {
            "run_id": self.run_id,
            "started_at": self.started_at.isoformat(),
            "revision": self.revision,
            "previous_run_id": self.previous_run_id,
            "previous_revision": self.previous_revision,
            "mean_before_s": self.mean_before_s,
            "mean_after_s": self.mean_after_s,
            "change": self.change,
            "p_value": self.p_value,
            "direction": self.direction,
        }


@dataclass(frozen=True)
class DetectReport:
    settings: DetectSettings
    order: Order
    since: datetime | None
    series: int  # series examined
    too_short: int  # series with too few points to hold a change (2 x min_segment)
    points: int
    changes: tuple[DetectedChange, ...]  # in the window (at or after ``since``), by series then time
    excluded_runs: tuple[str, ...] = ()  # runs left out of history: their results check failed
    floored: int = 0  # series judged with a noise floor
    examined: tuple[Series, ...] = ()  # every series looked at, too short ones too (what a save replaces)
    thresholded: int = 0  # series judged with a stored threshold

    @property
    def regressions(self) -> tuple[DetectedChange, ...]:
        return tuple(c for c in self.changes if c.direction == "regression")

    def as_dict(self) -> JsonObject:
        """The report as ``commlens detect --json`` prints it."""
        changes = []
        for c in self.changes:
            d = c.series.as_dict()
            d.update(index=c.index, points=c.points)
            d.update(c.level_change())
            d.update(noise_floor=c.noise_floor, threshold=self._threshold_dict(c))
            changes.append(d)
        return {
            "settings": asdict(self.settings),
            "order": self.order,
            "since": None if self.since is None else self.since.isoformat(),
            "series": self.series,
            "too_short": self.too_short,
            "floored": self.floored,
            "thresholded": self.thresholded,
            "points": self.points,
            "excluded_runs": list(self.excluded_runs),
            "summary": {
                "changes": len(self.changes),
                "regressions": len(self.regressions),
                "improvements": len(self.changes) - len(self.regressions),
            },
            "changes": changes,
        }

    def _threshold_dict(self, c: DetectedChange) -> JsonObject:
        """The min change and alpha the change passed, and the stored threshold(s) that set them (None: the
        command's settings)."""
        used = c.settings or self.settings
        return {"min_change": used.min_change, "alpha": used.alpha, "stored": c.threshold}

    def summary_line(self) -> str:
        window = f" since {self.since.isoformat()}" if self.since else ""
        left_out = (
            f"; {len(self.excluded_runs)} run{'s' if len(self.excluded_runs) != 1 else ''} left out "
            f"(results check failed)"
            if self.excluded_runs
            else ""
        )
        return (
            f"{self.series} series, {self.points} points: {len(self.changes)} changes{window} "
            f"({len(self.regressions)} regressions, {len(self.changes) - len(self.regressions)} improvements)"
            f"{left_out}"
        )


class TimeFormatError(CommlensError, ValueError):
    """A date or date/time that is not ISO 8601."""


def parse_utc(text: str) -> datetime:
    """An ISO 8601 date or date/time as an aware UTC datetime; no zone means UTC (else TimeFormatError)."""
    value = text.strip()
    iso = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value  # Python 3.10 lacks "Z"
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        raise TimeFormatError(
            f"{text!r} is not an ISO 8601 date or date/time (e.g. 2025-05-01 or 2025-05-01T13:45:00Z)"
        ) from None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


class HistoryRun(NamedTuple):
    """One stored run of a :class:`MeanHistory` (``Store.mean_history`` gives it as a plain tuple in this order)."""

    run_id: str
    started_at: datetime  # UTC
    revision: str | None
    tag: str | None
    fingerprint: str
    status: str  # ``check_failed``: left out of every series


class HistoryPoint(NamedTuple):
    """One stored measurement's mean time of a :class:`MeanHistory`: its run, its measurement key, the mean
    (``Store.mean_history`` gives it as a plain tuple, the points of one series sharing one key)."""

    run_id: str
    key: MeasurementKey
    mean_s: float


@dataclass(frozen=True)
class MeanHistory:
    """What ``Store.mean_history`` (and the plain SQLite reader) return: the runs, oldest first, and the mean time
    of each of their measurements. Plain tuples are taken as they come, with :class:`HistoryRun`'s and
    :class:`HistoryPoint`'s fields in order (no object is built per stored row)."""

    runs: Sequence[HistoryRun | tuple[str, datetime, str | None, str | None, str, str]]
    points: Sequence[HistoryPoint | tuple[str, MeasurementKey, float]]


@dataclass(frozen=True)
class DetectRequest:
    """One change-point search: the history (``Store.measurement_rows``' rows, or a :class:`MeanHistory`), the
    settings, the order of each series (by run time or by revision), the window of changes reported (from
    ``since`` on; None: all), the noise floors (keyed by fingerprint and measurement key) and each series' own
    settings (a stored threshold's; None: ``settings``). Checked when built (:class:`DetectRequestError`)."""

    history: Sequence[MeasurementRow] | MeanHistory
    settings: DetectSettings = DetectSettings()
    order: Order = "time"
    since: datetime | None = None
    floors: Mapping[FloorKey, float] | None = None
    settings_for: Callable[[Series], SeriesSettings | None] | None = None

    def __post_init__(self) -> None:
        if self.order not in ("time", "revision"):
            raise DetectRequestError(f"order must be time or revision, got {self.order!r}")
        if not isinstance(self.settings, DetectSettings):
            raise DetectRequestError(f"settings must be DetectSettings, got {type(self.settings).__name__}")
        if self.since is not None and (not isinstance(self.since, datetime) or self.since.tzinfo is None):
            raise DetectRequestError(f"since must be an aware datetime (parse_utc), got {self.since!r}")


class DetectRequestError(CommlensError, ValueError):
    """A detect request that cannot be run; the message names the field."""


def run_detect(request: DetectRequest) -> DetectReport:
    """Change points in every series of ``request.history`` (stored rows or a :class:`MeanHistory`):
    :func:`detect_history` says how."""
    history = request.history
    if isinstance(history, MeanHistory):
        used, per_run = _mean_series(history)
    else:
        used, per_run = _row_series(history)
    return _detect(used, per_run, request.settings, request.order, request.since, request.floors, request.settings_for)


def detect_history(
    history: Sequence[MeasurementRow] | MeanHistory,
    settings: DetectSettings = DetectSettings(),
    *,
    order: Order = "time",
    since: datetime | None = None,
    floors: Mapping[FloorKey, float] | None = None,
    settings_for: Callable[[Series], SeriesSettings | None] | None = None,
) -> DetectReport:
    """Change points in every series of ``history``: stored rows (as ``Store.measurement_rows`` returns them),
    or the runs and mean times ``Store.mean_history`` returns as a :class:`MeanHistory` (the same report,
    without an object per stored row).

    1. Group rows into series (key, fingerprint, tag); a run measuring a key
       twice contributes the mean of its rows.
    2. Order each series by run start time, or with ``order="revision"`` by
       the first start time of the run's revision (then by start time), so the
       runs of one revision stay together; runs without a revision are placed
       by their own start time.
    3. Run :func:`commlens.regress.detect.find_changes` on the series of mean
       times. Detection always sees the whole history, so the level before a
       recent change is known.
    4. Keep the changes whose first run at the new level started at or after
       ``since`` (all of them when ``since`` is None).

    ``floors`` maps (fingerprint, measurement key) to the series' noise floor (``commlens noise learn``):
    a level shift smaller than it is no change point.

    ``settings_for`` gives a series settings of its own (a stored threshold's), or None for ``settings``.

    Runs whose results check failed (status ``check_failed``) are left out before step 1:
    a time measured on wrong results is no point of a history. The report lists them.

    Shorthand for :func:`run_detect` of the :class:`DetectRequest` these arguments make (its fields).
    """
    return run_detect(DetectRequest(history, settings, order, since, floors, settings_for))


def _row_series(
    rows: Sequence[MeasurementRow],
) -> tuple[dict[str, tuple[datetime, str | None, str]], dict[Series, dict[str, list[float]]]]:
    """Step 1 of :func:`detect_history` over stored rows: each run's (started_at, revision, status) in the order
    the rows came, and each series' mean times per run."""
    runs = {r.run_id: (r.started_at, r.revision, r.status) for r in rows}
    per_run: dict[Series, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.status != "check_failed":
            per_run[Series(r.key, r.fingerprint, r.tag)][r.run_id].append(r.mean_s)
    return runs, per_run


def _mean_series(
    history: MeanHistory,
) -> tuple[dict[str, tuple[datetime, str | None, str]], dict[Series, dict[str, list[float]]]]:
    """Step 1 of :func:`detect_history` over a :class:`MeanHistory`: as :func:`_row_series`."""
    runs, points = history.runs, history.points
    info = {run[0]: run for run in runs}
    grouped: dict[tuple[str, str | None, MeasurementKey], dict[str, list[float]]] = {}
    used: dict[str, tuple[datetime, str | None, str]] = {}
    for run_id, key, mean_s in points:
        _, started, revision, tag, fingerprint, status = info[run_id]
        if run_id not in used:
            used[run_id] = (started, revision, status)
        if status == "check_failed":
            continue
        series_key = (fingerprint, tag, key)
        series = grouped.get(series_key)
        if series is None:
            series = grouped[series_key] = {}
        series.setdefault(run_id, []).append(mean_s)
    per_run = {Series(key, fingerprint, tag): series for (fingerprint, tag, key), series in grouped.items()}
    return used, per_run


def _detect(
    runs: Mapping[str, tuple[datetime, str | None, str]],
    per_run: Mapping[Series, Mapping[str, list[float]]],
    settings: DetectSettings,
    order: Order,
    since: datetime | None,
    floors: Mapping[FloorKey, float] | None,
    settings_for: Callable[[Series], SeriesSettings | None] | None,
) -> DetectReport:
    """Steps 2-4 of :func:`detect_history`: ``runs`` maps run_id to (started_at, revision, status), in the
    order the rows came; ``per_run`` each series' mean times per run."""
    excluded = tuple(run_id for run_id, (_, _, status) in runs.items() if status == "check_failed")
    revision_first: dict[str, datetime] = {}
    for started, revision, status in runs.values():
        if status != "check_failed" and revision is not None:
            if revision not in revision_first or started < revision_first[revision]:
                revision_first[revision] = started

    def place(run_id: str) -> tuple[datetime, datetime, str]:
        started, revision, _ = runs[run_id]
        anchor = revision_first[revision] if order == "revision" and revision is not None else None
        return (anchor or started, started, run_id)

    rank = {run_id: i for i, run_id in enumerate(sorted(runs, key=place))}  # each run placed once

    changes: list[DetectedChange] = []
    too_short = points = floored = thresholded = 0
    examined = sorted(per_run, key=_series_order)
    for series in examined:
        order_ids = sorted(per_run[series], key=rank.__getitem__)
        points += len(order_ids)
        own = settings_for(series) if settings_for is not None else None
        thresholded += own is not None
        used = settings if own is None else own.settings
        if len(order_ids) < 2 * used.min_segment:
            too_short += 1
            continue
        of_run = per_run[series]
        means = [m[0] if len(m := of_run[run_id]) == 1 else sum(m) / len(m) for run_id in order_ids]
        floor = (floors or {}).get(FloorKey(series.fingerprint, series.key))
        floored += floor is not None
        for c in find_changes(means, used, floor):
            first, last_before = order_ids[c.index], order_ids[c.index - 1]
            started, revision, _ = runs[first]
            if since is not None and started < since:
                continue
            changes.append(
                DetectedChange(
                    series=series,
                    index=c.index,
                    points=len(order_ids),
                    run_id=first,
                    started_at=started,
                    revision=revision,
                    previous_run_id=last_before,
                    previous_revision=runs[last_before][1],
                    mean_before_s=c.mean_before_s,
                    mean_after_s=c.mean_after_s,
                    p_value=c.p_value,
                    noise_floor=floor,
                    settings=None if own is None else own.settings,
                    threshold=None if own is None else own.threshold,
                )
            )
    return DetectReport(
        settings=settings,
        order=order,
        since=since,
        series=len(per_run),
        too_short=too_short,
        points=points,
        changes=tuple(changes),
        excluded_runs=excluded,
        floored=floored,
        examined=tuple(examined),
        thresholded=thresholded,
    )


def _series_order(series: Series) -> tuple[str, str, KeyOrder]:
    """Tag, system, then the key's order (op, algo, dtype, redop, root, placement, group, size)."""
    return (series.tag or "", series.fingerprint, series.key.order())
