"""A stored run's summary (one line of ``commlens runs``): its own module, so that a listing read without
SQLAlchemy (``commlens.store.plain``) builds the same objects as ``Store.list_runs``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from commlens.results.jsonvalue import JsonObject

__all__ = ["RunSummary"]


@dataclass(frozen=True)
class RunSummary:
    """One line of a run listing: what the run was, without its samples."""

    run_id: str
    started_at: str  # as the run has it
    started_at_utc: datetime  # the same instant, UTC, timezone-aware
    status: str
    tag: str | None
    revision: str | None
    source: str
    world_size: int
    backend: str
    nmeasurements: int
    ops: tuple[str, ...]
    avg_busbw_bytes_per_s: float
    fingerprint: str

    def as_dict(self) -> JsonObject:
        """Every field, JSON-ready (``commlens runs --json``): the UTC instant in ISO 8601, ops as a list."""
        d = asdict(self)
        d["started_at_utc"] = self.started_at_utc.isoformat()
        d["ops"] = list(self.ops)
        return d
