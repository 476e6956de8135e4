"""What every parser shares: the error type, reading a file, the parsed-run shape and a format's entry.

A format is one module that defines its :class:`InputFormat` (name, description, sniffer, parser),
listed in ``commlens.ingest.registry``. A parser turns one :class:`Source` into one :class:`ParsedRun`; ``load_runs``
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
import os
import re
import stat
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from commlens.errors import CommlensError
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import MAX_RANKS, MAX_SIZE_BYTES, Measurement, Run, RunStatus, SystemInfo
from commlens.results.runconfig import RunConfig

__all__ = [
    "IngestError",
    "IngestOptionError",
    "IngestWarning",
    "Source",
    "ParsedRun",
    "read_source",
    "content_run_id",
    "json_line",
    "load_json",
    "quote",
    "check_limit",
    "DEFAULT_MAX_INPUT_BYTES",
    "MAX_RANKS",
    "MAX_SIZE_BYTES",
    "MAX_COUNT",
    "MAX_JSON_DEPTH",
    "STDIN",
    "InputFormat",
    "RunList",
    "PatternSniff",
]

# Share of undecodable characters above which a file is taken as binary, not as a log with a few bad bytes.
_MAX_BAD_CHAR_SHARE = 0.01
# What a file may hold before it is refused, unread further (``commlens ingest --max-input-mib``).
DEFAULT_MAX_INPUT_BYTES = 256 * 2**20
_READ_CHUNK_BYTES = 2**20
# Sane bounds on numbers that size what a parser allocates (a rank list, a sample list) or that a store keeps:
# no job has a million ranks, no message a petabyte. Beyond them a file is refused, not believed.
# (The records refuse the same bounds: commlens.results.records.)
MAX_COUNT = 2**50  # element counts, iterations, wrong-result counts
# JSON nested deeper than this is not a result file (commlens' own files nest 4 deep).
MAX_JSON_DEPTH = 64
# Input shown in an error message is cut to this many characters.
MAX_QUOTED_CHARS = 200
# The path that names standard input (``commlens ingest -``).
STDIN = "-"


def quote(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error message never repeats a whole hostile input."""
    text = repr(value) if not isinstance(value, str) else repr(value[: limit + 1])
    return text if len(text) <= limit else text[:limit] + "...(cut)"


def check_limit(what: str, value: int, limit: int) -> str | None:
    """Why ``value`` is beyond a sane bound for ``what`` (a rank, a size), or None if it is within."""
    if value >= limit:
        return f"{what} {quote(value, 40)} is beyond what commlens accepts (< {limit}): a corrupted or hostile file?"
    return None


class IngestOptionError(CommlensError, ValueError):
    """An ingest option that is not valid (a time that is not ISO 8601, an unknown op or format name)."""


class IngestError(CommlensError, ValueError):
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
    """One file's text, read once, split into lines (``\\r\\n`` and ``\\n`` both end a line).

    ``mtime_s`` is the file's modification time when it was read (None for a pipe or standard input).
    """

    path: Path
    text: str
    mtime_s: float | None = None

    @cached_property
    def lines(self) -> list[str]:
        return list(self.iter_lines())

    def iter_lines(self) -> Iterator[str]:
        """The lines one at a time, without a list of them all (a parser that reads once needs none)."""
        text = self.text
        end = len(text)
        if text.endswith("\n"):
            end -= 1  # the last line's end, not an empty line after it
        elif not end:
            return
        start = 0
        while True:
            stop = text.find("\n", start, end)
            line = text[start : stop if stop >= 0 else end]
            yield line[:-1] if line.endswith("\r") else line
            if stop < 0:
                return
            start = stop + 1

    def error(self, line: int, message: str) -> IngestError:
        return IngestError(self.path, line, message)

    def int_at(self, line: int, what: str, token: str, limit: int, *, low: int = 0) -> int:
        """``token`` as an integer in ``[low, limit)``; IngestError at ``line`` naming ``what`` otherwise."""
        try:
            value = int(token)
        except ValueError:  # also a number of more than 4,300 digits
            raise self.error(line, f"bad {what} {quote(token, 60)}: not an integer") from None
        if value < low:
            raise self.error(line, f"bad {what} {value}: expected >= {low}")
        problem = check_limit(what, value, limit)
        if problem:
            raise self.error(line, problem)
        return value

    def warn(self, line: int, message: str) -> str:
        """Issue an :class:`IngestWarning` located at ``line``; returns the message, for the run's notes."""
        warnings.warn(IngestWarning(f"{self.path}:{line}: {message}"), stacklevel=3)
        return message


@dataclass(frozen=True)
class GivenFacts:
    """What a user says of a log that does not say it (a fragment pasted without its header), stored as given."""

    ranks: int | None = None  # the world size
    hosts: tuple[str, ...] = ()  # host names, in rank order of their blocks
    nhosts: int | None = None  # how many hosts, when their names are not given
    gpu: str | None = None  # the GPU model, e.g. "NVIDIA H100 80GB HBM3"

    def __bool__(self) -> bool:
        return self.ranks is not None or bool(self.hosts) or self.nhosts is not None or self.gpu is not None

    def as_dict(self) -> JsonObject:
        out: JsonObject = {}
        if self.ranks is not None:
            out["ranks"] = self.ranks
        if self.hosts:
            out["hosts"] = list(self.hosts)
        elif self.nhosts is not None:
            out["hosts"] = self.nhosts
        if self.gpu is not None:
            out["gpu"] = self.gpu
        return out


@dataclass
class ParsedRun:
    """A run as a parser read it, before the caller's tag, revision and time are applied."""

    source: str  # the producing tool, e.g. "nccl-tests", "rccl-tests", "param"
    system: SystemInfo
    measurements: list[Measurement]
    # a reader's settings (becomes Run.config, as IngestedSettings), or a commlens JSON file's run config as written
    config: JsonObject | RunConfig = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    command_line: str = ""
    started_at: str | None = None  # ISO 8601 UTC if the file says when it ran
    started_at_note: str | None = None  # a caveat about that time, noted only if the run keeps it
    finished_at: str | None = None
    status: RunStatus = "complete"
    run_id: str | None = None  # kept from the file (commlens JSON); else derived from the content
    config_as_written: bool = False  # the file's own run config (commlens JSON): stored without ingested_from
    tag: str | None = None
    revision: str | None = None
    # A file holding several runs (one log, several nccl-tests invocations with different settings): every run,
    # this one first; empty for a file of one run.
    split: list[ParsedRun] = field(default_factory=list)


class Parser(Protocol):
    def __call__(self, source: Source, *, op: str | None = None) -> ParsedRun: ...


class RunListLoader(Protocol):
    def __call__(
        self, source: Source, *, tag: str | None = None, revision: str | None = None, started_at: str | None = None
    ) -> list[Run]: ...


@dataclass(frozen=True)
class RunList:
    """A file of several finished runs (``commlens export --format json``), read as they are, one run each."""

    sniff: Callable[[Source], bool]  # whether the text is such a list; looked at before any single-run sniffer
    load: RunListLoader  # the runs, with the caller's tag, revision and start time applied


@dataclass(frozen=True)
class InputFormat:
    """One input format, as its own module declares it; ``commlens.ingest.registry`` lists them all."""

    name: str  # what ``--format`` takes and the ingest summary prints: "nccl-tests"
    description: str  # what a user holds of it, as help texts list it: "nccl-tests logs"
    document: Literal["json", "text"]  # "json": sniffed only in a file that opens with "{"; "text": in any other
    sniff: Callable[[Source], bool]  # whether the content is this format, from the marker below
    marker: str  # what ``sniff`` looks for, as the error for a file no format fits names it
    parse: Parser  # the one run of the file
    sniff_first: bool = False  # the marker is one no other format's file holds: sniffed before the others
    run_list: RunList | None = None  # the format can also hold several finished runs in one file
    # ``parse`` also takes ``given`` (:class:`GivenFacts`): what the user says of a fragment of the format.
    takes_given: bool = False


@dataclass(frozen=True)
class PatternSniff:
    """An :class:`InputFormat`'s ``sniff`` for a format told by ``pattern`` (its module's) anywhere in the text."""

    pattern: re.Pattern[str]

    def __call__(self, source: Source) -> bool:
        return self.pattern.search(source.text) is not None


def read_source(path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Source:
    """The file's text, read once (``-`` is standard input); refused beyond ``max_bytes``, empty or binary.

    The read streams a chunk at a time and stops at the cap, so ``/dev/zero`` or an endless pipe costs
    ``max_bytes`` of memory at most (a NUL byte stops it at once).
    """
    is_stdin = str(path) == STDIN
    shown = Path("<stdin>") if is_stdin else Path(path)
    try:
        if is_stdin:
            data, mtime_s = _read_capped(sys.stdin.buffer, shown, max_bytes), None
        else:
            with open(path, "rb") as fp:
                st = os.fstat(fp.fileno())
                mtime_s = st.st_mtime if stat.S_ISREG(st.st_mode) else None
                data = _read_capped(fp, shown, max_bytes)
    except OSError as e:
        raise IngestError(shown, 0, f"cannot read: {e.strerror or e}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16, as a PowerShell redirect writes it
        try:
            data = data.decode("utf-16").encode()
        except UnicodeDecodeError:
            raise IngestError(shown, 1, "binary data (a UTF-16 mark, but not UTF-16 text)") from None
    if not data.strip():
        raise IngestError(shown, 1, "empty file: no results to ingest")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise IngestError(shown, data.count(b"\n", 0, nul) + 1, "binary data (NUL byte): not a text log or JSON file")
    text = data.decode("utf-8", errors="replace")
    del data
    bad = text.count("\ufffd")
    if bad and bad > _MAX_BAD_CHAR_SHARE * len(text):
        first = text.index("\ufffd")
        raise IngestError(shown, text.count("\n", 0, first) + 1, "binary data (not UTF-8 text)")
    if text.startswith("\ufeff"):
        text = text[1:]
    return Source(shown, text, mtime_s)


def _read_capped(fp: IO[bytes], shown: Path, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` of ``fp`` a chunk at a time; IngestError beyond the cap or at a NUL byte
    (in a file that is not UTF-16, whose text has NULs)."""
    chunks = bytearray()
    utf16: bool | None = None
    lines = 0
    while True:
        chunk = fp.read(min(_READ_CHUNK_BYTES, max_bytes + 1 - len(chunks)))
        if not chunk:
            return bytes(chunks)
        if utf16 is None:
            utf16 = chunk.startswith((b"\xff\xfe", b"\xfe\xff"))
        nul = -1 if utf16 else chunk.find(b"\x00")
        if nul >= 0:
            line = lines + chunk.count(b"\n", 0, nul) + 1
            raise IngestError(shown, line, "binary data (NUL byte): not a text log or JSON file")
        lines += chunk.count(b"\n")
        chunks += chunk
        if len(chunks) > max_bytes:
            raise IngestError(
                shown,
                0,
                f"larger than {max_bytes / 2**20:g} MiB, the most ingest reads (--max-input-mib): not read further",
            )


def load_json(source: Source) -> Any:
    """The file's JSON document; IngestError for invalid JSON, or JSON nested deeper than MAX_JSON_DEPTH."""
    try:
        data = json.loads(source.text)
    except json.JSONDecodeError as e:
        raise source.error(e.lineno, f"invalid JSON (column {e.colno}): {e.msg}; a truncated file?") from None
    except RecursionError:
        raise source.error(1, f"JSON nested deeper than {MAX_JSON_DEPTH} levels: not a result file") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise source.error(1, f"invalid JSON: {quote(str(e), 120)}") from None
    if _json_depth(data) > MAX_JSON_DEPTH:
        raise source.error(1, f"JSON nested deeper than {MAX_JSON_DEPTH} levels: not a result file")
    return data


def _json_depth(data: Any) -> int:
    """How deep lists and objects nest in ``data``, walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                return depth
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


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
    # The ignores below: typeshed leaves out json.decoder's undocumented JSONObject and JSONArray and the
    # decoder's parse_object and parse_array attributes, which the pure-Python scanner reads.

    def parse_object(s_and_end: Any, *args: Any, **kw: Any) -> Any:
        obj, end = json.decoder.JSONObject(s_and_end, *args, **kw)  # type: ignore[attr-defined]
        positions[id(obj)] = s_and_end[1] - 1
        return obj, end

    def parse_array(s_and_end: Any, *args: Any, **kw: Any) -> Any:
        arr, end = json.decoder.JSONArray(s_and_end, *args, **kw)  # type: ignore[attr-defined]
        positions[id(arr)] = s_and_end[1] - 1
        return arr, end

    decoder = json.JSONDecoder()
    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.parse_array = parse_array  # type: ignore[attr-defined]
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
