"""Fault injection for testing what users see when a rank misbehaves.

``COMMLENS_INJECT_FAULT="KIND:rank=R[,op=OP][,size=BYTES]"`` makes rank R
misbehave at the first matching row: ``raise`` raises an error, ``hang``
sleeps forever, ``corrupt`` flips one output element before validation.
Used by the test suite, and by anyone checking that their alerting fires.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

__all__ = ["Fault", "InjectedFault", "fault_from_env"]

ENV = "COMMLENS_INJECT_FAULT"


class InjectedFault(RuntimeError):
    """The error a ``raise`` fault raises."""


@dataclass(frozen=True)
class Fault:
    kind: str  # raise | hang | corrupt
    rank: int
    op: str | None = None
    size_bytes: int | None = None

    def matches(self, rank: int, op: str, size_bytes: int) -> bool:
        return (
            rank == self.rank
            and (self.op is None or self.op == op)
            and (self.size_bytes is None or self.size_bytes == size_bytes)
        )

    def trigger(self, where: str) -> None:
        """Misbehave now (for raise and hang)."""
        if self.kind == "raise":
            raise InjectedFault(f"injected failure at {where}")
        if self.kind == "hang":
            while True:
                time.sleep(3600)


def fault_from_env() -> Fault | None:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    kind, _, rest = text.partition(":")
    if kind not in ("raise", "hang", "corrupt"):
        raise ValueError(f"{ENV}: unknown fault kind {kind!r} (raise, hang or corrupt)")
    fields = dict(part.split("=", 1) for part in rest.split(",") if "=" in part)
    if "rank" not in fields:
        raise ValueError(f"{ENV}: rank=R is required")
    return Fault(
        kind=kind,
        rank=int(fields["rank"]),
        op=fields.get("op"),
        size_bytes=int(fields["size"]) if "size" in fields else None,
    )
