"""Noise floors in the result store: each series' run-to-run variation, learned from A/A-like history.

The learning lives in ``commlens.regress.noise``; this module keeps its results
(table ``noise_floors``) and reads them back for compare and detect.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from commlens.results.jsonvalue import JsonObject
from commlens.results.records import FloorKey, MeasurementKey, omit_no_group
from commlens.store.convert import KEY_COLUMNS, key_columns, key_from_columns
from commlens.store.db import StoreError, driver_reason
from commlens.store.models import NoiseFloorModel
from commlens.store.repo import Store

__all__ = ["FloorKey", "NoiseFloor", "load_floors", "list_floors", "save_floors"]


@dataclass(frozen=True)
class NoiseFloor:
    """One series' run-to-run variation: ``sd_log`` is the sd of ln(typical time) between runs of the same
    code (0.05: runs scatter by about 5 %), learned from ``runs`` runs in ``groups`` groups of two or more.
    The series: a measurement key (``key``, its ``group`` None for a benchmark series) on one system."""

    fingerprint: str
    key: MeasurementKey
    sd_log: float
    runs: int
    groups: int
    learned_at: str

    @property
    def series(self) -> FloorKey:
        return FloorKey(self.fingerprint, self.key)

    def as_dict(self) -> JsonObject:
        """As ``commlens noise show --json`` prints a floor: the key's fields flat, ``group`` last and only for a
        process group's series, so a benchmark's floors read as they always did."""
        fields: JsonObject = {"fingerprint": self.fingerprint, **self.key._asdict()}
        group = fields.pop("group")
        figures: JsonObject = {
            "sd_log": self.sd_log,
            "runs": self.runs,
            "groups": self.groups,
            "learned_at": self.learned_at,
        }
        return omit_no_group({**fields, **figures, "group": group})


_SERIES_COLUMNS = ("fingerprint", *KEY_COLUMNS)  # the unique key: one floor per series
_VALUE_COLUMNS = ("sd_log", "runs", "groups", "learned_at")


def _columns(f: NoiseFloor) -> dict[str, object]:
    """The ``noise_floors`` row of ``f``: its series' columns (redop, root and group encoded), then its figures."""
    return {"fingerprint": f.fingerprint, **key_columns(f.key), **{c: getattr(f, c) for c in _VALUE_COLUMNS}}


def save_floors(store: Store, floors: Sequence[NoiseFloor]) -> int:
    """Store ``floors``, replacing the floors of the same series, in one transaction; returns how many."""
    m = NoiseFloorModel
    try:
        with store.engine.begin() as conn:
            rows = [_columns(f) for f in floors]
            for row in rows:
                conn.execute(delete(m).where(*(getattr(m, c) == row[c] for c in _SERIES_COLUMNS)))
            if rows:
                conn.execute(insert(m), rows)
    except SQLAlchemyError as e:
        raise StoreError(f"cannot save noise floors in {store.url}: {driver_reason(e)}") from None
    return len(floors)


def list_floors(store: Store, fingerprints: Iterable[str] | None = None) -> list[NoiseFloor]:
    """The stored floors (of these systems only, when given), by system, op and size."""
    m = NoiseFloorModel
    query = select(m)
    if fingerprints is not None:
        query = query.where(m.fingerprint.in_(list(fingerprints)))
    query = query.order_by(
        m.fingerprint, m.op, m.algo, m.dtype, m.redop, m.root, m.in_place, m.group_name, m.size_bytes
    )
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(query).all()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read noise floors from {store.url}: {driver_reason(e)}") from None
    return [
        NoiseFloor(row.fingerprint, key_from_columns(row), **{c: getattr(row, c) for c in _VALUE_COLUMNS})
        for row in rows
    ]


def load_floors(store: Store, fingerprints: Iterable[str] | None = None) -> dict[FloorKey, float]:
    """``{series: sd_log}`` for compare and detect."""
    return {f.series: f.sd_log for f in list_floors(store, fingerprints)}
