"""Noise floors in the result store: each series' run-to-run variation, learned from A/A-like history.

The learning lives in ``commlens.regress.noise``; this module keeps its results
(table ``noise_floors``) and reads them back for compare and detect.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from commlens.results.jsonvalue import JsonObject
from commlens.results.records import FloorKey, MeasurementKey, omit_no_group
from commlens.store.convert import decode_redop_root, encode_redop_root
from commlens.store.db import StoreError, driver_reason
from commlens.store.models import NoiseFloorModel
from commlens.store.repo import Store

__all__ = ["FloorKey", "NoiseFloor", "load_floors", "list_floors", "save_floors"]


@dataclass(frozen=True)
class NoiseFloor:
    """One series' run-to-run variation: ``sd_log`` is the sd of ln(typical time) between runs of the same
    code (0.05: runs scatter by about 5 %), learned from ``runs`` runs in ``groups`` groups of two or more.
    ``group`` is the series' process group (None for a benchmark series)."""

    fingerprint: str
    op: str
    algo: str
    dtype: str
    redop: str | None  # None: the op does not reduce
    root: int | None  # None: the op has no root
    size_bytes: int
    in_place: bool
    sd_log: float
    runs: int
    groups: int
    learned_at: str
    group: str | None = None

    def as_dict(self) -> JsonObject:
        """Every field, as ``commlens noise show --json`` prints a floor; ``group`` only for a process group's
        series, so a benchmark's floors read as they always did."""
        return omit_no_group(asdict(self))

    @property
    def key(self) -> FloorKey:
        return FloorKey(
            self.fingerprint,
            MeasurementKey(
                self.op, self.algo, self.dtype, self.redop, self.root, self.size_bytes, self.in_place, self.group
            ),
        )


# A FloorKey's fields and the columns that hold them: the same names, but for the group's.
_KEY_COLUMNS = {"fingerprint": "fingerprint", **{f: f for f in MeasurementKey._fields}, "group": "group_name"}
_VALUE_COLUMNS = ("sd_log", "runs", "groups", "learned_at")
_NO_GROUP = ""  # group_name of a series without a process group: NULLs are never equal in the unique key


def _columns(f: NoiseFloor) -> dict[str, object]:
    """The ``noise_floors`` row of ``f``: its series' columns (redop, root and group encoded), then its figures."""
    row = {column: getattr(f, name) for name, column in _KEY_COLUMNS.items()}
    row.update({c: getattr(f, c) for c in _VALUE_COLUMNS})
    row["redop"], row["root"] = encode_redop_root(f.redop, f.root)
    row["group_name"] = _NO_GROUP if f.group is None else f.group
    return row


def save_floors(store: Store, floors: Sequence[NoiseFloor]) -> int:
    """Store ``floors``, replacing the floors of the same series, in one transaction; returns how many."""
    m = NoiseFloorModel
    try:
        with store.engine.begin() as conn:
            rows = [_columns(f) for f in floors]
            for row in rows:
                conn.execute(delete(m).where(*(getattr(m, c) == row[c] for c in _KEY_COLUMNS.values())))
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
            rows = conn.execute(query).mappings().all()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read noise floors from {store.url}: {driver_reason(e)}") from None
    floors = []
    for row in rows:
        fields = {name: row[column] for name, column in _KEY_COLUMNS.items()}
        fields.update({c: row[c] for c in _VALUE_COLUMNS})
        fields["redop"], fields["root"] = decode_redop_root(row["redop"], row["root"])
        fields["group"] = None if row["group_name"] == _NO_GROUP else row["group_name"]
        floors.append(NoiseFloor(**fields))
    return floors


def load_floors(store: Store, fingerprints: Iterable[str] | None = None) -> dict[FloorKey, float]:
    """``{series: sd_log}`` for compare and detect."""
    return {f.key: f.sd_log for f in list_floors(store, fingerprints)}
