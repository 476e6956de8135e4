"""Change points kept in the store (table ``change_points``): what ``commlens detect --save`` found.

Grafana annotates them and the dashboard's regressions page lists them. A save replaces every stored
change of each series the detection examined, so a series that has no change any more (its history grew,
a threshold changed) loses its stale ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from commlens.results.jsonvalue import JsonObject
from commlens.results.records import Series
from commlens.store.convert import KEY_COLUMNS, NO_VALUE, key_columns, key_from_columns, to_utc
from commlens.store.db import StoreError, driver_reason, write_engine
from commlens.store.models import ChangePointModel
from commlens.store.repo import Store

__all__ = ["DEFAULT_LIMIT", "ChangeToSave", "Direction", "SavedChange", "load_change_points", "save_change_points"]

Direction = Literal["regression", "improvement"]
DEFAULT_LIMIT = 1000
_SERIES_COLUMNS = ("fingerprint", "tag", *KEY_COLUMNS)
# A change's fields stored as they are, each in the column of its name (the start is stored as UTC, the
# direction checked when read back).
_AS_STORED = tuple(
    "run_id revision previous_run_id previous_revision mean_before_s mean_after_s change p_value".split()
)


class ChangeToSave(Protocol):
    """What the store keeps of a detected change (``commlens.regress.DetectedChange``): its series and its change
    of level as every output names it (``level_change()``: the runs either side of it, the means, the change, its
    p-value and direction, ``started_at`` in ISO 8601)."""

    @property
    def series(self) -> Series: ...

    def level_change(self) -> JsonObject: ...


@dataclass(frozen=True)
class SavedChange:
    """A stored change point: the series, the first run at the new level, the means either side, when saved."""

    series: Series
    run_id: str  # the first run at the new level
    started_at: datetime  # that run's start, UTC
    revision: str | None
    previous_run_id: str  # the last run at the old level
    previous_revision: str | None
    mean_before_s: float
    mean_after_s: float
    change: float  # relative change of the mean time: +0.08 is 8 % slower
    p_value: float
    direction: Direction
    detected_at: str  # ISO 8601, UTC: when ``detect --save`` stored it

    def as_dict(self) -> JsonObject:
        """The series' fields, then the change's, as a change of ``commlens detect --json`` reads."""
        d = self.series.as_dict()
        d.update((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "series")
        d["started_at"] = self.started_at.isoformat()
        return d


def _series_columns(series: Series) -> dict[str, object]:
    """The series' columns and their values (a row to insert, a filter to match)."""
    tag = NO_VALUE if series.tag is None else series.tag
    return {"fingerprint": series.fingerprint, "tag": tag, **key_columns(series.key)}


def _is_series(series: Series) -> list[Any]:
    columns = _series_columns(series)
    return [getattr(ChangePointModel, c) == columns[c] for c in _SERIES_COLUMNS]


def save_change_points(store: Store, changes: Iterable[ChangeToSave], examined: Iterable[Series] = ()) -> int:
    """Store ``changes`` (a detection's), replacing every stored change of each ``examined`` series and of each
    change's series, in one transaction; returns how many changes were stored."""
    changes = list(changes)
    series = list(dict.fromkeys(examined))
    detected_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = []
    for c in changes:
        level = c.level_change()
        row = _series_columns(c.series)
        row.update((name, level[name]) for name in _AS_STORED)
        started = to_utc(str(level["started_at"]), what="started_at")
        row.update(started_at_utc=started, direction=level["direction"], detected_at=detected_at)
        rows.append(row)
    try:
        with write_engine(store.engine).begin() as conn:
            for s in dict.fromkeys([*series, *(c.series for c in changes)]):
                conn.execute(delete(ChangePointModel).where(*_is_series(s)))
            if rows:
                conn.execute(insert(ChangePointModel), rows)
    except SQLAlchemyError as e:
        raise StoreError(f"cannot save change points in {store.url}: {driver_reason(e)}") from None
    return len(rows)


def load_change_points(
    store: Store,
    *,
    since: datetime | str | None = None,
    direction: Direction | None = None,
    series: Series | None = None,
    fingerprint: str | None = None,
    limit: int | None = DEFAULT_LIMIT,
) -> list[SavedChange]:
    """Stored change points, newest first (by the start of their first run at the new level).

    ``since`` keeps those from then on (inclusive; naive times are UTC); ``direction`` only regressions or
    only improvements; ``series`` one series' changes; ``fingerprint`` one system's; ``limit`` at most so many.
    """
    if direction is not None and direction not in ("regression", "improvement"):
        raise StoreError(f"direction must be regression or improvement, got {direction!r}")
    if limit is not None and limit < 1:
        raise StoreError(f"limit must be >= 1, got {limit}")
    m = ChangePointModel
    query = select(m).order_by(m.started_at_utc.desc(), m.id.desc())
    if since is not None:
        query = query.where(m.started_at_utc >= to_utc(since, what="since"))
    if direction is not None:
        query = query.where(m.direction == direction)
    if series is not None:
        query = query.where(*_is_series(series))
    if fingerprint is not None:
        query = query.where(m.fingerprint == fingerprint)
    if limit is not None:
        query = query.limit(limit)
    try:
        with store.engine.connect() as conn:
            found = conn.execute(query).all()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read change points from {store.url}: {driver_reason(e)}") from None
    out = []
    for r in found:
        out.append(
            SavedChange(
                series=Series(key_from_columns(r), r.fingerprint, None if r.tag == NO_VALUE else r.tag),
                started_at=r.started_at_utc.replace(tzinfo=timezone.utc),
                direction="regression" if r.direction == "regression" else "improvement",
                detected_at=r.detected_at,
                **{name: getattr(r, name) for name in _AS_STORED},
            )
        )
    return out
