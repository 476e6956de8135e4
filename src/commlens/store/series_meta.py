"""What a team says about its series, kept in the store: baselines and thresholds.

A *series* is one system (its fingerprint) under one tag (a branch, say; None for untagged runs).

- A **baseline** (table ``baselines``) names what the series' runs are judged against: one stored run,
  or every run of a tag on that system, pooled. ``commlens compare baseline CANDIDATE`` uses it.
- A **threshold** (table ``thresholds``) says how big a change must be (``min_change``), and how sure
  compare (``alpha``) and detect (``detect_alpha``) must be, for the rows it matches. Its selector
  (fingerprint, tag, op, dtype, size, process group) holds a value or ``ANY`` in each field.
  :func:`resolve_threshold` picks, setting by setting, what applies to one row of one series.

The table encodings (``''`` for no tag or no group, ``-1`` for any size) stay in this module: the records
here say None for "none" and ``ANY`` (``'*'``) for "any".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from typing import Any, Literal

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from commlens.results.jsonvalue import JsonObject
from commlens.results.records import ANY, ANY_SIZE, DTYPE_SIZES, Series, SeriesPattern
from commlens.store.db import StoreError, driver_reason, write_engine
from commlens.store.models import BaselineModel, RunModel, ThresholdModel
from commlens.store.repo import Store

__all__ = [
    "ANY",
    "ANY_SIZE",
    "Baseline",
    "BaselineError",
    "RefKind",
    "ResolvedThreshold",
    "Threshold",
    "ThresholdError",
    "baseline_run_ids",
    "get_baseline",
    "list_baselines",
    "list_thresholds",
    "resolve_fingerprint",
    "resolve_threshold",
    "series_text",
    "tag_fingerprints",
    "set_baseline",
    "set_threshold",
    "unset_baseline",
    "unset_threshold",
]

RefKind = Literal["run", "tag"]
_NONE = ""  # the tag or group_name column of a series without a tag or a process group
_FINGERPRINT_LEN = 16  # SystemInfo.fingerprint(): 16 hex digits
_MAX_LISTED = 5


class BaselineError(StoreError):
    """A baseline that cannot be set or used: an unknown run or tag, a run of another system, none set."""


class ThresholdError(StoreError):
    """A threshold out of range, with an empty selector field, or that sets nothing."""


def series_text(fingerprint: str, tag: str | None) -> str:
    """``fingerprint 0123abcd... tag 'main'`` (or ``untagged``): a series as messages name it."""
    return f"fingerprint {fingerprint} " + ("untagged" if tag is None else f"tag {tag!r}")


def _now() -> str:
    """The time a baseline or threshold is set: ISO 8601 UTC, microseconds, so that "newest" orders as text."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _encode(value: str | None) -> str:
    return _NONE if value is None else value


def _decode(value: str) -> str | None:
    return None if value == _NONE else value


# -- baselines ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """The baseline of the series (``fingerprint``, ``tag``): the run ``ref`` (a full run id), or with
    ``ref_kind`` ``tag`` every run of tag ``ref`` on that system."""

    fingerprint: str
    tag: str | None  # the series' tag; None: its runs have no tag
    ref_kind: RefKind
    ref: str
    note: str = ""
    set_at: str = ""  # ISO 8601, UTC

    @property
    def ref_text(self) -> str:
        """``run:ID`` or ``tag:NAME``, as ``commlens compare`` reads a reference."""
        return f"{self.ref_kind}:{self.ref}"

    def as_dict(self) -> JsonObject:
        return asdict(self)


def _check_tag(tag: str | None, what: str) -> None:
    if tag is not None and not tag.strip():
        raise BaselineError(f"{what} must not be empty (None is the series of untagged runs)")


def set_baseline(
    store: Store, fingerprint: str, tag: str | None, ref_kind: RefKind, ref: str, note: str = ""
) -> Baseline:
    """Make ``ref`` the baseline of the series (``fingerprint``, ``tag``), replacing the one it had.

    A ``run`` ref is a run id or unique prefix of a stored run of that system (kept as its full id); a
    ``tag`` ref is a tag with stored runs of that system. Raises BaselineError naming what is wrong.
    """
    if ref_kind not in ("run", "tag"):
        raise BaselineError(f"a baseline is a run or a tag, not {ref_kind!r}")
    _check_tag(tag, "the series' tag")
    if not fingerprint:
        raise BaselineError("a baseline needs the series' fingerprint")
    if ref_kind == "run":
        try:
            ref = store.resolve(ref)
        except StoreError as e:
            raise BaselineError(f"baseline run: {e}") from None
        run_fingerprint = _scalar(store, select(RunModel.fingerprint).where(RunModel.run_id == ref))
        if run_fingerprint != fingerprint:
            raise BaselineError(
                f"run {ref} ran on system {run_fingerprint}, not on the series' {fingerprint}: "
                "a baseline is a run of the same system"
            )
    else:
        _check_tag(ref, "the baseline tag")
        if not _tag_run_ids(store, fingerprint, ref, limit=1):
            others = tag_fingerprints(store, ref)
            where = f"its runs ran on {', '.join(others[:_MAX_LISTED])}" if others else f"no stored run has tag {ref!r}"
            raise BaselineError(f"tag {ref!r} has no run of system {fingerprint} in {store.url} ({where})")
    baseline = Baseline(fingerprint, tag, ref_kind, ref, note, _now())
    row = asdict(baseline)
    row["tag"] = _encode(tag)
    m = BaselineModel
    try:
        with write_engine(store.engine).begin() as conn:
            conn.execute(delete(m).where(m.fingerprint == fingerprint, m.tag == row["tag"]))
            conn.execute(insert(m), [row])
    except SQLAlchemyError as e:
        raise StoreError(f"cannot save the baseline in {store.url}: {driver_reason(e)}") from None
    return baseline


def get_baseline(store: Store, fingerprint: str, tag: str | None) -> Baseline | None:
    """The baseline of the series (``fingerprint``, ``tag``), None when none is set."""
    m = BaselineModel
    found = _baselines(store, select(m).where(m.fingerprint == fingerprint, m.tag == _encode(tag)))
    return found[0] if found else None


def list_baselines(store: Store) -> list[Baseline]:
    """Every stored baseline, by fingerprint then tag (untagged first)."""
    m = BaselineModel
    return _baselines(store, select(m).order_by(m.fingerprint, m.tag))


def unset_baseline(store: Store, fingerprint: str, tag: str | None) -> bool:
    """Forget the series' baseline; False when it had none."""
    m = BaselineModel
    return _delete(store, delete(m).where(m.fingerprint == fingerprint, m.tag == _encode(tag)), "baseline")


def baseline_run_ids(store: Store, baseline: Baseline) -> list[str]:
    """The stored runs the baseline stands for, oldest first: its run, or every run of its tag on its system.

    BaselineError when they are gone (the run deleted, or the tag's runs retagged) since it was set."""
    if baseline.ref_kind == "run":
        if _scalar(store, select(RunModel.run_id).where(RunModel.run_id == baseline.ref)) is None:
            raise BaselineError(
                f"the baseline of {series_text(baseline.fingerprint, baseline.tag)} is run {baseline.ref}, "
                "which is no longer stored: set another with `commlens baseline set`"
            )
        return [baseline.ref]
    ids = _tag_run_ids(store, baseline.fingerprint, baseline.ref)
    if not ids:
        raise BaselineError(
            f"the baseline of {series_text(baseline.fingerprint, baseline.tag)} is tag {baseline.ref!r}, "
            "which has no stored run of that system any more: set another with `commlens baseline set`"
        )
    return ids


def resolve_fingerprint(store: Store, text: str) -> str:
    """The full fingerprint ``text`` names: one of the stored runs' (exactly or as a unique prefix), or, with
    no stored run of it, ``text`` itself when it has a fingerprint's shape (16 hex digits)."""
    value = text.strip().lower()
    if not value:
        raise BaselineError("a fingerprint must not be empty")
    query = select(RunModel.fingerprint).distinct().where(RunModel.fingerprint.startswith(value, autoescape=True))
    try:
        with store.engine.connect() as conn:
            found = sorted(fp for fp in conn.scalars(query) if fp.startswith(value))
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read {store.url}: {driver_reason(e)}") from None
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        shown = ", ".join(found[:_MAX_LISTED]) + (", ..." if len(found) > _MAX_LISTED else "")
        raise BaselineError(f"fingerprint {text!r} matches {len(found)} systems: {shown}")
    if len(value) == _FINGERPRINT_LEN and all(c in "0123456789abcdef" for c in value):
        return value
    raise BaselineError(
        f"no stored run has a fingerprint starting {text!r} in {store.url} "
        f"(a system not stored yet needs its full {_FINGERPRINT_LEN}-digit fingerprint)"
    )


def _tag_run_ids(store: Store, fingerprint: str, tag: str, limit: int | None = None) -> list[str]:
    r = RunModel
    query = select(r.run_id).where(r.fingerprint == fingerprint, r.tag == tag).order_by(r.started_at_utc, r.run_id)
    if limit is not None:
        query = query.limit(limit)
    try:
        with store.engine.connect() as conn:
            return list(conn.scalars(query))
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read {store.url}: {driver_reason(e)}") from None


def tag_fingerprints(store: Store, tag: str) -> list[str]:
    """The fingerprints of the systems the runs of ``tag`` ran on, sorted."""
    query = select(RunModel.fingerprint).distinct().where(RunModel.tag == tag).order_by(RunModel.fingerprint)
    try:
        with store.engine.connect() as conn:
            return list(conn.scalars(query))
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read {store.url}: {driver_reason(e)}") from None


def _scalar(store: Store, query: Any) -> Any:
    try:
        with store.engine.connect() as conn:
            return conn.scalar(query)
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read {store.url}: {driver_reason(e)}") from None


def _baselines(store: Store, query: Any) -> list[Baseline]:
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read baselines from {store.url}: {driver_reason(e)}") from None
    kinds: dict[str, RefKind] = {"run": "run", "tag": "tag"}
    return [
        Baseline(b["fingerprint"], _decode(b["tag"]), kinds[b["ref_kind"]], b["ref"], b["note"], b["set_at"])
        for b in rows
    ]


def _delete(store: Store, statement: Any, what: str) -> bool:
    try:
        with write_engine(store.engine).begin() as conn:
            return bool(conn.execute(statement).rowcount)
    except SQLAlchemyError as e:
        raise StoreError(f"cannot remove the {what} from {store.url}: {driver_reason(e)}") from None


# -- thresholds ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold(SeriesPattern):
    """A stored threshold: its selector (a :class:`SeriesPattern`: fingerprint, tag, op, dtype, size_bytes,
    group), then what it sets (None: not set here)."""

    min_change: float | None = None  # smallest relative change that counts (0.05 = 5 %), compare and detect
    alpha: float | None = None  # compare's significance level (Welch's t, adjusted over the rows)
    detect_alpha: float | None = None  # detect's significance level (Mann-Whitney U before vs after)
    set_at: str = ""  # ISO 8601, UTC

    def selector_text(self) -> str:
        """``fingerprint=... op=all_reduce size=1048576`` (the fields given), or ``everything``."""
        return self.text()

    def as_dict(self) -> JsonObject:
        return asdict(self)


_SETTINGS = ("min_change", "alpha", "detect_alpha")


def _check_threshold(t: Threshold) -> None:
    """The ranges CompareSettings and DetectSettings check, and a selector without empty fields."""
    for name in ("fingerprint", "op", "dtype"):
        if not getattr(t, name):
            raise ThresholdError(f"{name} must not be empty (use {ANY!r} for any)")
    for name in ("tag", "group"):
        if getattr(t, name) == "":
            raise ThresholdError(f"{name} must not be empty (None for none, {ANY!r} for any)")
    if t.dtype != ANY and t.dtype not in DTYPE_SIZES:
        raise ThresholdError(f"dtype {t.dtype!r}: expected one of {', '.join(DTYPE_SIZES)}")
    if t.size_bytes < ANY_SIZE:
        raise ThresholdError(f"size_bytes must be >= 0 ({ANY_SIZE} for any), got {t.size_bytes}")
    if all(getattr(t, name) is None for name in _SETTINGS):
        raise ThresholdError("a threshold must set min_change, alpha or detect_alpha")
    for name in _SETTINGS:
        value = getattr(t, name)
        if value is not None and not math.isfinite(value):
            raise ThresholdError(f"{name} must be a number, got {value}")
    if t.min_change is not None and not 0.0 <= t.min_change < 1.0:
        raise ThresholdError(f"min_change must be in [0, 1), got {t.min_change}")
    for name in ("alpha", "detect_alpha"):
        value = getattr(t, name)
        if value is not None and not 0.0 < value < 1.0:
            raise ThresholdError(f"{name} must be in (0, 1), got {value}")


def _threshold_row(t: Threshold) -> dict[str, object]:
    """The threshold's columns and their values (a row to insert; its selector's columns match it)."""
    row = {f.name: getattr(t, f.name) for f in fields(t) if f.name != "group"}
    row["tag"] = row["tag"] if row["tag"] == ANY else _encode(t.tag)
    row["group_name"] = t.group if t.group == ANY else _encode(t.group)
    return row


def _selector_where(t: Threshold) -> list[Any]:
    row = _threshold_row(t)
    m = ThresholdModel
    return [getattr(m, c) == row[c] for c in ("fingerprint", "tag", "op", "dtype", "size_bytes", "group_name")]


def set_threshold(store: Store, threshold: Threshold) -> Threshold:
    """Store ``threshold``, replacing the one with the same selector; returns it with its ``set_at``."""
    _check_threshold(threshold)
    threshold = replace(threshold, set_at=_now())
    try:
        with write_engine(store.engine).begin() as conn:
            conn.execute(delete(ThresholdModel).where(*_selector_where(threshold)))
            conn.execute(insert(ThresholdModel), [_threshold_row(threshold)])
    except SQLAlchemyError as e:
        raise StoreError(f"cannot save the threshold in {store.url}: {driver_reason(e)}") from None
    return threshold


def list_thresholds(store: Store) -> list[Threshold]:
    """Every stored threshold, by selector."""
    m = ThresholdModel
    query = select(m).order_by(m.fingerprint, m.tag, m.op, m.dtype, m.size_bytes, m.group_name)
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read thresholds from {store.url}: {driver_reason(e)}") from None
    return [
        Threshold(
            fingerprint=r["fingerprint"],
            tag=r["tag"] if r["tag"] == ANY else _decode(r["tag"]),
            op=r["op"],
            dtype=r["dtype"],
            size_bytes=r["size_bytes"],
            group=r["group_name"] if r["group_name"] == ANY else _decode(r["group_name"]),
            min_change=r["min_change"],
            alpha=r["alpha"],
            detect_alpha=r["detect_alpha"],
            set_at=r["set_at"],
        )
        for r in rows
    ]


def unset_threshold(store: Store, selector: Threshold) -> bool:
    """Forget the threshold with ``selector``'s selector (its settings are ignored); False when none had it."""
    return _delete(store, delete(ThresholdModel).where(*_selector_where(selector)), "threshold")


@dataclass(frozen=True)
class ResolvedThreshold:
    """What the stored thresholds set for one row of one series; None: no stored threshold sets it (the
    command's default applies). ``matched``: the thresholds that decided a setting, most specific first."""

    min_change: float | None = None
    alpha: float | None = None
    detect_alpha: float | None = None
    matched: tuple[Threshold, ...] = ()

    def source_text(self) -> str:
        """The selectors of the thresholds that decided, ``; ``-separated."""
        return "; ".join(t.selector_text() for t in self.matched)


def resolve_threshold(thresholds: Sequence[Threshold], series: Series) -> ResolvedThreshold:
    """The settings for ``series`` (its rows of key ``series.key``), one setting at a time.

    1. Keep the thresholds that match the row (each selector field ANY or equal).
    2. For each setting (min_change, alpha, detect_alpha), of the matches that set it, the most specific
       wins (most selector fields given); among equally specific ones, the newest (``set_at``).
    3. A setting no match sets stays None: the command's default (or its explicit option) decides.
    """
    matching = sorted(
        (t for t in thresholds if t.matches(series)),
        key=lambda t: (t.specificity, t.set_at),
        reverse=True,
    )
    chosen: dict[str, float | None] = {}
    deciding: list[Threshold] = []
    for name in _SETTINGS:
        winner = next((t for t in matching if getattr(t, name) is not None), None)
        chosen[name] = None if winner is None else getattr(winner, name)
        if winner is not None and winner not in deciding:
            deciding.append(winner)
    deciding.sort(key=lambda t: (t.specificity, t.set_at), reverse=True)
    return ResolvedThreshold(chosen["min_change"], chosen["alpha"], chosen["detect_alpha"], tuple(deciding))
