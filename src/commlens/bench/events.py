"""What a benchmark run reports while it runs: typed events, in the order rank 0 emits them.

A run gives one :class:`Started`, then :class:`Progress` before each row it times, a :class:`RowDone` per
finished row (or a :class:`Note` for a row it skipped), and one :class:`Finished` at the end (missing when the
run was cut short before rank 0 could say so). ``commlens.bench.run(..., on_event=f)`` calls ``f`` with each.

Rank 0 writes them to the launcher as JSON lines (the *wire* form, ``as_wire``/``event_from_wire``); the wire
form is internal to a run and not a file format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from commlens.results.jsonvalue import JsonObject
from commlens.results.records import SystemInfo
from commlens.results.runconfig import BenchSettings
from commlens.results.table import BenchRow

__all__ = ["Event", "Finished", "Note", "Progress", "RowDone", "Started", "event_from_wire"]


@dataclass(frozen=True)
class Started:
    """The ranks joined: the run's id, where it runs and its settings (``BenchConfig.as_dict()`` and timing, as the
    run keeps them)."""

    run_id: str
    started_at: str
    system: SystemInfo
    config: BenchSettings
    command_line: str = ""

    def as_wire(self) -> JsonObject:
        from dataclasses import asdict

        return {
            "event": "start",
            "run_id": self.run_id,
            "started_at": self.started_at,
            "command_line": self.command_line,
            "config": self.config.values,
            "system": asdict(self.system),
        }


@dataclass(frozen=True)
class Progress:
    """Rank 0 is about to time row ``index`` of ``total`` (in round ``round`` of ``rounds``, when rounds > 1)."""

    index: int
    total: int
    op: str
    algo: str  # the row's implementations, comma separated
    dtype: str
    redop: str | None
    root: int | None
    size_bytes: int
    elapsed_s: float
    round: int | None = None
    rounds: int | None = None

    def as_wire(self) -> JsonObject:
        out = {"event": "progress", **{k: getattr(self, k) for k in _PROGRESS_FIELDS}}
        if self.round is not None:
            out.update(round=self.round, rounds=self.rounds)
        return out


_PROGRESS_FIELDS = ("index", "total", "op", "algo", "dtype", "redop", "root", "size_bytes", "elapsed_s")


@dataclass(frozen=True)
class RowDone(BenchRow):
    """A row of the table is done (:class:`~commlens.results.table.BenchRow`, which the table prints as it is).

    ``measurements`` holds one entry per placement run (out of place, then in place); None where torch offers
    no such placement for the op.
    """

    def as_dict(self) -> JsonObject:
        """The row's wire line: ``{"event": "row"}`` then the row's object."""
        return {"event": "row", **super().as_dict()}

    def as_wire(self) -> JsonObject:
        return self.as_dict()


@dataclass(frozen=True)
class Note:
    """A line the table carries for the reader, e.g. a row skipped because the backend refuses it."""

    text: str

    def as_wire(self) -> JsonObject:
        return {"event": "note", "text": self.text}


@dataclass(frozen=True)
class Finished:
    """The sweep ended: ``complete``, or ``incomplete`` when interrupted; ``wrong`` names rows with wrong results."""

    status: str
    wrong: tuple[str, ...] = field(default=())
    finished_at: str | None = None

    def as_wire(self) -> JsonObject:
        return {"event": "end", "status": self.status, "wrong": list(self.wrong), "finished_at": self.finished_at}


Event = Started | Progress | RowDone | Note | Finished


def event_from_wire(d: Mapping[str, Any]) -> Event:
    """The typed event of one wire line (written by this version's rank 0)."""
    kind = d["event"]
    if kind == "start":
        return Started(
            run_id=d["run_id"],
            started_at=d["started_at"],
            system=SystemInfo(**d["system"]),
            config=BenchSettings(d["config"]),
            command_line=d.get("command_line", ""),
        )
    if kind == "progress":
        return Progress(**{k: d[k] for k in _PROGRESS_FIELDS}, round=d.get("round"), rounds=d.get("rounds"))
    if kind == "row":
        return RowDone.from_dict(d)
    if kind == "note":
        return Note(d["text"])
    if kind == "end":
        return Finished(status=d["status"], wrong=tuple(d.get("wrong", ())), finished_at=d.get("finished_at"))
    raise ValueError(f"unknown event {kind!r}")
