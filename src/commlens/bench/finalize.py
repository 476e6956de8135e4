"""From rank 0's event stream to a stored run: table, JSON files, result store.

Used by the launcher (reading the rows file the workers wrote) and by rank 0
itself when the worker runs under an external launcher.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from commlens.bench.outputs import SaveError, save_outputs
from commlens.results.jsonfmt import _measurement_from_dict
from commlens.results.records import Run, SystemInfo
from commlens.results.table import column_header_lines, footer_lines, op_header_line, row_line, system_header_lines

__all__ = ["TablePrinter", "StandalonePrinter", "run_from_events", "save_outputs", "finalize_standalone"]


class TablePrinter:
    """Turns events into nccl-tests table lines, handed to ``write`` one at a time."""

    def __init__(self, write: Callable[[str], None]):
        self.write = write
        self.total_wrong: int | None = None
        self.busbw: list[float] = []
        self._op: tuple[str, str] | None = None

    def handle(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "start":
            for line in system_header_lines(event) + column_header_lines():
                self.write(line)
        elif kind == "row":
            key = (event["op"], event.get("algo", "builtin"))
            if key != self._op:
                self._op = key
                self.write(op_header_line(*key))
            for note in event.get("notes", ()):
                self.write(f"# note: {note}")
            self.write(row_line(event))
            for m in event["measurements"]:
                if m is None:
                    continue
                if m["op"] != "barrier":
                    self.busbw.append(m["busbw_bytes_per_s"])
                if m["nwrong"] is not None:
                    self.total_wrong = (self.total_wrong or 0) + m["nwrong"]
        elif kind == "note":
            self.write(f"# {event['text']}")
        elif kind == "end":
            avg = sum(self.busbw) / len(self.busbw) if self.busbw else 0.0
            for line in footer_lines(self.total_wrong, avg):
                self.write(line)
            if event["status"] != "complete":
                self.write(f"# run {event['status']}: interrupted before the sweep finished")


class StandalonePrinter(TablePrinter):
    """Rank 0 under an external launcher: table on stdout, progress on stderr."""

    def __init__(self, quiet: bool):
        super().__init__(lambda line: print(line, flush=True))
        self.quiet = quiet or not sys.stderr.isatty()
        self._last = 0.0

    def handle(self, event: dict[str, Any]) -> None:
        if event["event"] == "progress":
            now = time.monotonic()
            if not self.quiet and now - self._last > 0.5:
                self._last = now
                print(
                    f"\r[{event['index'] + 1}/{event['total']}] {event['op']} {event['size_bytes']} B "
                    f"{event['elapsed_s']:.1f} s",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            return
        super().handle(event)


def run_from_events(events: list[dict[str, Any]], command_line: str | None = None, status: str | None = None) -> Run:
    """Assemble the run from a start event, its rows and (if it came) the end event."""
    start = next(e for e in events if e["event"] == "start")
    end = next((e for e in events if e["event"] == "end"), None)
    measurements = []
    notes: list[str] = []
    for e in events:
        if e["event"] == "row":
            notes.extend(e.get("notes", ()))
            measurements.extend(_measurement_from_dict(m) for m in e["measurements"] if m is not None)
        elif e["event"] == "note":
            notes.append(e["text"])
    sysd = dict(start["system"])
    cfg = start["config"]
    return Run(
        run_id=start["run_id"],
        started_at=start["started_at"],
        finished_at=end["finished_at"] if end else None,
        status=status or (end["status"] if end else "incomplete"),
        system=SystemInfo(**sysd),
        measurements=tuple(measurements),
        tag=cfg.get("extra", {}).get("tag"),
        revision=cfg.get("extra", {}).get("revision"),
        command_line=command_line or start.get("command_line", ""),
        config=cfg,
        notes=tuple(notes),
    )


def exit_code(run: Run, wrong: list[str], say: Callable[[str], None]) -> int:
    """1 when any element was wrong, 130 for an interrupted run, else 0."""
    for msg in wrong:
        say(f"error: wrong results: {msg}")
    if wrong:
        return 1
    return 130 if run.status == "incomplete" else 0


def finalize_standalone(events: list[dict[str, Any]], ns: argparse.Namespace) -> int:
    run = run_from_events(events)
    end = next((e for e in events if e["event"] == "end"), {"wrong": []})
    try:
        save_outputs(run, ns, lambda s: print(s, file=sys.stderr))
    except SaveError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return exit_code(run, end.get("wrong", []), lambda s: print(s, file=sys.stderr))
