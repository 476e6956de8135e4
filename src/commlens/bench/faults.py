"""Fault injection for testing what users see when a rank misbehaves.

``COMMLENS_INJECT_FAULT="KIND:rank=R[,op=OP][,size=BYTES][,round=N][,seconds=S]"`` makes
rank R misbehave at the first matching row (``round=N``: only in the N-th round of a ``--rounds`` run,
counted from 1 as the progress lines count them): ``raise`` raises an error, ``hang``
sleeps forever, ``pause`` sleeps S seconds (default 5) before each placement of
the row, ``corrupt`` flips one output element before validation. ``op=init``
(raise, hang, pause) misbehaves before the rank joins the process group.
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
    kind: str  # raise | hang | pause | corrupt
    rank: int
    op: str | None = None
    size_bytes: int | None = None
    seconds: float = 5.0  # how long a pause lasts
    round: int | None = None  # the round it strikes in, from 1 (None: every round)

    def matches(self, rank: int, op: str, size_bytes: int, round_index: int = 0) -> bool:
        """Whether this rank misbehaves at this row; ``round_index`` counts from 0."""
        return (
            rank == self.rank
            and (self.op is None or self.op == op)
            and (self.size_bytes is None or self.size_bytes == size_bytes)
            and (self.round is None or self.round == round_index + 1)
        )

    def trigger(self, where: str) -> None:
        """Misbehave now (for raise, hang and pause)."""
        if self.kind == "raise":
            raise InjectedFault(f"injected failure at {where}")
        if self.kind == "pause":
            time.sleep(self.seconds)
        if self.kind == "hang":
            while True:
                time.sleep(3600)


def fault_from_env() -> Fault | None:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    kind, _, rest = text.partition(":")
    if kind not in ("raise", "hang", "pause", "corrupt"):
        raise ValueError(f"{ENV}: unknown fault kind {kind!r} (raise, hang, pause or corrupt)")
    fields = dict(part.split("=", 1) for part in rest.split(",") if "=" in part)
    if "rank" not in fields:
        raise ValueError(f"{ENV}: rank=R is required")
    return Fault(
        kind=kind,
        rank=int(fields["rank"]),
        op=fields.get("op"),
        size_bytes=int(fields["size"]) if "size" in fields else None,
        seconds=float(fields.get("seconds", 5.0)),
        round=_round(fields.get("round")),
    )


def _round(text: str | None) -> int | None:
    """``round=N``: a round number from 1."""
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{ENV}: round must be a round number from 1, got {text!r}")
    return int(text)
