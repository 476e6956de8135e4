"""What every parser shares: the error type, reading a file, and the parsed-run shape.

A parser turns one :class:`Source` into one :class:`ParsedRun`; ``load_runs``
then adds what the caller decides (tag, revision, time) and builds the
:class:`~commlens.results.Run`. Parsers raise :class:`IngestError` for input
they cannot read and issue :class:`IngestWarning` (and a run note) for input
they can read but doubt.
"""

from __future__ import annotations

import hashlib
import json
import json.decoder
import json.scanner
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from commlens.results.records import Measurement, RunStatus, SystemInfo

__all__ = ["IngestError", "IngestWarning", "Source", "ParsedRun", "read_source", "content_run_id", "json_line"]

# Share of undecodable characters above which a file is taken as binary, not as a log with a few bad bytes.
_MAX_BAD_CHAR_SHARE = 0.01


class IngestError(ValueError):
    """A file that cannot be ingested; ``str()`` is ``FILE:LINE: what is wrong``.

    ``line`` counts from 1; 0 means the file as a whole (it could not be read), shown as ``FILE: ...``.
    """

    def __init__(self, path: str | Path, line: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        super().__init__(f"{self.path}:{line}: {message}" if line > 0 else f"{self.path}: {message}")


class IngestWarning(UserWarning):
    """Input that was read but looks doubtful (printed busBW that disagrees with size and time, say)."""


@dataclass(frozen=True)
class Source:
    """One file's text, split into lines (``\\r\\n`` and ``\\n`` both end a line)."""

    path: Path
    text: str

    @property
    def lines(self) -> list[str]:
        lines = self.text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]

    def error(self, line: int, message: str) -> IngestError:
        return IngestError(self.path, line, message)

    def warn(self, line: int, message: str) -> str:
        """Issue an :class:`IngestWarning` located at ``line``; returns the message, for the run's notes."""
        warnings.warn(IngestWarning(f"{self.path}:{line}: {message}"), stacklevel=3)
        return message


@dataclass
class ParsedRun:
    """A run as a parser read it, before the caller's tag, revision and time are applied."""

    source: str  # the producing tool: "nccl-tests", "param", "commlens"
    system: SystemInfo
    measurements: list[Measurement]
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    command_line: str = ""
    started_at: str | None = None  # ISO 8601 UTC if the file says when it ran
    started_at_note: str | None = None  # a caveat about that time, noted only if the run keeps it
    finished_at: str | None = None
    status: RunStatus = "complete"
    run_id: str | None = None  # kept from the file (commlens JSON); else derived from the content
    tag: str | None = None
    revision: str | None = None


def read_source(path: str | Path) -> Source:
    """The file's text; empty and binary files are refused with the line where it goes wrong."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise IngestError(path, 0, f"cannot read: {e.strerror or e}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16, as a PowerShell redirect writes it
        try:
            data = data.decode("utf-16").encode()
        except UnicodeDecodeError:
            raise IngestError(path, 1, "binary data (a UTF-16 mark, but not UTF-16 text)") from None
    if not data.strip():
        raise IngestError(path, 1, "empty file: no results to ingest")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise IngestError(path, data.count(b"\n", 0, nul) + 1, "binary data (NUL byte): not a text log or JSON file")
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if bad and bad > _MAX_BAD_CHAR_SHARE * len(text):
        first = text.index("\ufffd")
        raise IngestError(path, text.count("\n", 0, first) + 1, "binary data (not UTF-8 text)")
    if text.startswith("\ufeff"):
        text = text[1:]
    return Source(path, text)


def content_run_id(fmt: str, text: str) -> str:
    """A run id from the file's content: ingesting the same file twice names the same run."""
    digest = hashlib.sha256(f"commlens-ingest\0{fmt}\0".encode())
    digest.update(text.encode())
    return digest.hexdigest()[:32]


def json_line(text: str, path: Sequence[str | int]) -> int:
    """The line where the JSON value at ``path`` (keys and indexes) starts.

    Only called on the error path: it decodes the text again with the pure-Python
    scanner, recording where each object and array begins.
    """
    positions: dict[int, int] = {}

    def parse_object(s_and_end: Any, *args: Any, **kw: Any) -> Any:
        obj, end = json.decoder.JSONObject(s_and_end, *args, **kw)
        positions[id(obj)] = s_and_end[1] - 1
        return obj, end

    def parse_array(s_and_end: Any, *args: Any, **kw: Any) -> Any:
        arr, end = json.decoder.JSONArray(s_and_end, *args, **kw)
        positions[id(arr)] = s_and_end[1] - 1
        return arr, end

    decoder = json.JSONDecoder()
    decoder.parse_object = parse_object  # type: ignore[assignment]
    decoder.parse_array = parse_array  # type: ignore[assignment]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        node: Any = decoder.decode(text)
    except ValueError:
        return 1
    pos = positions.get(id(node), 0)
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            break
        pos = positions.get(id(node), pos)
    return text.count("\n", 0, pos) + 1
