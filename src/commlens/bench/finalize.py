"""From rank 0's events to the nccl-tests table and to the finished :class:`Run`.

Used by ``commlens.bench.run`` (on the events the launcher read from the ranks) and by rank 0 itself when
the worker runs under an external launcher. Nothing here prints on its own or stores: the table goes to the
``write`` function it is given.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable

from commlens.bench.events import Event, Finished, Note, Progress, RowDone, Started
from commlens.results.records import Measurement, Run, RunStatus
from commlens.results.table import (
    SweepHeader,
    column_header_lines,
    footer_lines,
    op_header_line,
    row_line,
    system_header_lines,
)

__all__ = ["StandalonePrinter", "TablePrinter", "run_from_events"]


class TablePrinter:
    """Turns events into nccl-tests table lines, handed to ``write`` one at a time."""

    def __init__(self, write: Callable[[str], None]):
        self.write = write
        self.total_wrong: int | None = None
        self.busbw: list[float] = []
        self._op: tuple[str, str] | None = None

    def handle(self, event: Event) -> None:
        if isinstance(event, Started):
            sweep = SweepHeader.of(event.config.values)
            header = system_header_lines(event.run_id, sweep, event.system) if sweep else []
            for line in header + column_header_lines():
                self.write(line)
        elif isinstance(event, RowDone):
            key = (event.op, event.algo)
            if key != self._op:
                self._op = key
                self.write(op_header_line(*key))
            for note in event.notes:
                self.write(f"# note: {note}")
            self.write(row_line(event))
            for m in event.measurements:
                if m is None:
                    continue
                if m.op != "barrier":
                    self.busbw.append(m.busbw_bytes_per_s)
                if m.nwrong is not None:
                    self.total_wrong = (self.total_wrong or 0) + m.nwrong
        elif isinstance(event, Note):
            self.write(f"# {event.text}")
        elif isinstance(event, Finished):
            avg = sum(self.busbw) / len(self.busbw) if self.busbw else 0.0
            for line in footer_lines(self.total_wrong, avg):
                self.write(line)
            if event.status != "complete":
                self.write(f"# run {event.status}: interrupted before the sweep finished")


class StandalonePrinter(TablePrinter):
    """Rank 0 under an external launcher: table on stdout, progress on stderr."""

    def __init__(self, quiet: bool):
        super().__init__(lambda line: print(line, flush=True))
        self.quiet = quiet or not sys.stderr.isatty()
        self._last = 0.0

    def handle(self, event: Event) -> None:
        if isinstance(event, Progress):
            now = time.monotonic()
            if not self.quiet and now - self._last > 0.5:
                self._last = now
                print(
                    f"\r[{event.index + 1}/{event.total}] {event.op} {event.size_bytes} B {event.elapsed_s:.1f} s",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            return
        super().handle(event)


def run_from_events(events: Iterable[Event], command_line: str | None = None, status: RunStatus | None = None) -> Run:
    """Assemble the run from its start event, its rows and (if it came) the end event."""
    events = list(events)
    start = next(e for e in events if isinstance(e, Started))
    end = next((e for e in events if isinstance(e, Finished)), None)
    measurements: list[Measurement] = []
    notes: list[str] = []
    for e in events:
        if isinstance(e, RowDone):
            notes.extend(e.notes)
            measurements.extend(m for m in e.measurements if m is not None)
        elif isinstance(e, Note):
            notes.append(e.text)
    cfg = start.config
    return Run(
        run_id=start.run_id,
        started_at=start.started_at,
        finished_at=end.finished_at if end else None,
        status=status or (_status(end.status) if end else "incomplete"),
        system=start.system,
        measurements=tuple(measurements),
        tag=cfg.extra_text("tag"),
        revision=cfg.extra_text("revision"),
        command_line=command_line or start.command_line,
        config=cfg,
        notes=tuple(notes),
    )


def _status(text: str) -> RunStatus:
    """The run status rank 0 reported: complete or incomplete."""
    return "complete" if text == "complete" else "incomplete"
