"""Noise floors in the result store: each series' run-to-run variation, learned from A/A-like history.

The learning lives in ``commlens.regress.noise``; this module keeps its results
(table ``noise_floors``) and reads them back for compare and detect.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from commlens.store.db import StoreError, driver_reason
from commlens.store.models import NoiseFloorModel
from commlens.store.repo import Store

__all__ = ["NoiseFloor", "load_floors", "list_floors", "save_floors"]

# (fingerprint, op, algo, dtype, redop, root, size_bytes, in_place)
FloorKey = tuple[str, str, str, str, str, int, int, bool]


@dataclass(frozen=True)
class NoiseFloor:
    """One series' run-to-run variation: ``sd_log`` is the sd of ln(typical time) between runs of the same
    code (0.05: runs scatter by about 5 %), learned from ``runs`` runs in ``groups`` groups of two or more."""

    fingerprint: str
    op: str
    algo: str
    dtype: str
    redop: str
    root: int
    size_bytes: int
    in_place: bool
    sd_log: float
    runs: int
    groups: int
    learned_at: str

    @property
    def key(self) -> FloorKey:
        return (self.fingerprint, self.op, self.algo, self.dtype, self.redop, self.root, self.size_bytes, self.in_place)


_KEY_COLUMNS = ("fingerprint", "op", "algo", "dtype", "redop", "root", "size_bytes", "in_place")


def save_floors(store: Store, floors: Sequence[NoiseFloor]) -> int:
    """Store ``floors``, replacing the floors of the same series, in one transaction; returns how many."""
    m = NoiseFloorModel
    try:
        with store.engine.begin() as conn:
            for f in floors:
                conn.execute(delete(m).where(*(getattr(m, c) == getattr(f, c) for c in _KEY_COLUMNS)))
            if floors:
                conn.execute(
                    insert(m),
                    [
                        {c: getattr(f, c) for c in (*_KEY_COLUMNS, "sd_log", "runs", "groups", "learned_at")}
                        for f in floors
                    ],
                )
    except SQLAlchemyError as e:
        raise StoreError(f"cannot save noise floors in {store.url}: {driver_reason(e)}") from None
    return len(floors)


def list_floors(store: Store, fingerprints: Iterable[str] | None = None) -> list[NoiseFloor]:
    """The stored floors (of these systems only, when given), by system, op and size."""
    m = NoiseFloorModel
    query = select(m)
    if fingerprints is not None:
        query = query.where(m.fingerprint.in_(list(fingerprints)))
    query = query.order_by(m.fingerprint, m.op, m.algo, m.dtype, m.redop, m.root, m.in_place, m.size_bytes)
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read noise floors from {store.url}: {driver_reason(e)}") from None
    return [
        NoiseFloor(**{k: row[k] for k in (*_KEY_COLUMNS, "sd_log", "runs", "groups", "learned_at")}) for row in rows
    ]


def load_floors(store: Store, fingerprints: Iterable[str] | None = None) -> dict[FloorKey, float]:
    """``{series: sd_log}`` for compare and detect."""
    return {f.key: f.sd_log for f in list_floors(store, fingerprints)}
