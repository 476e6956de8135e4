"""NCCL Inspector's JSON output (NCCL >= 2.28, ``plugins/profiler/inspector``): per-collective records.

The plugin writes one file per process, ``<hostname>-pid<PID>.log``, in its dump directory
(``NCCL_INSPECTOR_DUMP_DIR``, else ``nccl-inspector-<slurm job id>``), one compact JSON object per line:

- ``header``: the communicator: ``id`` (its hash, ``"0x..."``), ``comm_name`` (NCCL >= 2.29), ``rank``
  (the rank *in that communicator*), ``n_ranks``, ``nnodes``;
- ``metadata``: ``inspector_output_format_version`` (``"v4.0"``), ``dump_timestamp_us`` (when the record
  was written, µs since the epoch), ``hostname``, ``pid``;
- ``coll_perf``: ``coll`` (NCCL's name: ``AllReduce``), ``coll_sn`` (the communicator's collective
  sequence number, the same on every rank), ``coll_msg_size_bytes`` (element size x the ``count`` passed
  to NCCL: per rank for AllGather and ReduceScatter), ``coll_exec_time_us`` (an integer: the longest
  kernel channel, GPU-timed when ``coll_timing_source`` is ``kernel_gpu``), ``coll_algobw_gbs`` and
  ``coll_busbw_gbs`` (GB/s, 6 decimals). Verbose mode (``NCCL_INSPECTOR_DUMP_VERBOSE=1``) adds
  ``event_trace_sn`` and ``event_trace_ts``: host-clock µs of the collective's start and stop and of
  each kernel channel's start, stop and record.
- ``p2p_perf`` instead of ``coll_perf`` for a Send or Recv (not a collective: counted and left out).

How a record becomes a :class:`~commlens.results.collectives.CollectiveRecord`:

1. ``group`` is the communicator's ``id``, ``group_size`` its ``n_ranks``, ``rank`` the rank in it,
   ``seq`` the ``coll_sn``, ``host`` the ``hostname``; the dtype is not written (``"other"``).
2. ``op`` is the catalog name of ``coll`` (:data:`NCCL_OPS`); ``AllGatherV`` (the kernel behind
   grouped broadcasts, variable sizes) and names NCCL prints for none (``Invalid``) are left out, counted.
3. ``size_bytes`` gets nccl-tests' meaning: ``coll_msg_size_bytes`` x ``n_ranks`` for AllGather,
   ReduceScatter and All2All (whose count is per rank, or per peer), as written for the others.
4. Times: the duration is ``coll_exec_time_us``. A verbose record starts when its first kernel
   channel started (host clock), else at ``coll_start_ts``; a compact record carries no start, so it
   is placed to end at its ``dump_timestamp_us`` (an upper bound on when it ended).
5. busBW is recomputed from size, time and the op's factor and compared with ``coll_busbw_gbs``
   (the inspector computes none for All2All: 0 there is not a disagreement).

Damaged input does not lose the rest: a truncated last line (a job killed mid-write), a corrupt line,
a record with a wrong type, a negative time or an unknown op is left out with a located
:class:`IngestWarning`; a rank of a communicator with no records (a missing file) is noted. A
directory holds at most :data:`MAX_FILES` files, a line :data:`MAX_LINE_CHARS` characters, a dump
:data:`MAX_RECORDS` records; each file is read with ``read_source``'s byte cap.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import contains
from pathlib import Path
from typing import Any

import numpy as np

from commlens.ingest.base import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_JSON_DEPTH,
    MAX_RANKS,
    MAX_SIZE_BYTES,
    IngestError,
    IngestWarning,
    InputFormat,
    ParsedRun,
    Source,
    content_run_id,
    load_json,
    quote,
    read_source,
)
from commlens.ingest.json_columns import (
    CollectiveColumns,
    all_of,
    codes,
    fields,
    float_column,
    int_column,
    scan_json_lines,
    strings,
)
from commlens.ingest.table_checks import BUSBW_ABS_TOL_GBPS, BUSBW_REL_TOL, BusbwCheck
from commlens.ops import get_op
from commlens.results.collectives import (
    MAX_GROUP_NAME,
    CollectiveRecord,
    CollectiveRecordError,
    aggregate,
    measurements_from_windows,
)
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import Run, SystemInfo
from commlens.results.units import finite_float

__all__ = [
    "FORMAT",
    "MAX_FILES",
    "MAX_LINE_CHARS",
    "MAX_RECORDS",
    "NAME",
    "NCCL_OPS",
    "Communicator",
    "DumpFile",
    "InspectorColumns",
    "InspectorDump",
    "load_dump_runs",
    "parse_inspector",
    "read_inspector",
    "read_inspector_columns",
    "records_from_inspector",
]

NAME = "nccl-inspector"
# NCCL's collective names (ncclFuncToString) -> the catalog's.
NCCL_OPS: dict[str, str] = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "All2All": "all_to_all",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
}
# Ops whose coll_msg_size_bytes is one rank's (or one peer's) share: nccl-tests' size is n_ranks times it.
_PER_RANK_MSG = frozenset({"all_gather", "reduce_scatter", "all_to_all"})
# Ops the inspector computes no bandwidth for (algBW and busBW written as 0).
_NO_INSPECTOR_BW = frozenset({"all_to_all"})

MAX_FILES = 16384  # files read from one dump directory (one per process: a 16k-GPU job)
MAX_DIR_DEPTH = 4  # folders below the dump directory searched for files
MAX_LINE_CHARS = 2**20  # a verbose record with every channel is ~20 KB
MAX_RECORDS = 2_000_000  # collective records in one dump (about 0.8 GB of memory)
MAX_CHANNELS = 1024  # kernel channels read from one verbose record
_MAX_US = 2**63  # a timestamp or duration in µs beyond this is not one (NCCL writes uint64)
_LAST_EPOCH_NS = 253402300799 * 10**9  # 9999-12-31T23:59:59Z: a record's times must be dates Python can print
_MAX_SEQ = 2**62
_MAX_HOST_CHARS = 255
_WARNED_PER_FILE = 5  # skipped lines warned about one by one in a file; the rest in one summary
_MAX_NAMES_COUNTED = 20  # distinct unread op names (and format versions) counted one by one; the rest together
_TIMING_SOURCES = ("kernel_gpu", "kernel_cpu", "collective_cpu")  # inspectorTimingSourceToString
_FILE_SUFFIXES = (".log", ".jsonl")  # what the plugin writes, and what NVIDIA's exporter also reads
_SNIFF_CHARS = 65536
_SNIFF_RE = re.compile(r'"(?:coll_perf|p2p_perf|dump_stats)"\s*:')
_SNIFF_HEADER_RE = re.compile(r'"(?:n_ranks|inspector_output_format_version)"\s*:')


@dataclass(frozen=True)
class Communicator:
    """One NCCL communicator as its records' headers describe it."""

    id: str  # the communicator's hash, "0x7f8c496ae9f661"
    name: str | None  # comm_name, when NCCL was given one (NCCL >= 2.29 writes "unknown" otherwise)
    n_ranks: int
    nnodes: int
    ranks: tuple[int, ...]  # ranks (in the communicator) that have records here
    hosts: tuple[str, ...]

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        seen = set(self.ranks)
        return tuple(r for r in range(self.n_ranks) if r not in seen)


@dataclass(frozen=True)
class DumpFile:
    """One process's file: where it came from and what it held."""

    path: Path
    hostname: str | None
    pid: int | None
    records: int  # collective records read from it
    skipped: int  # lines left out (damaged, or not a collective we read)


@dataclass
class InspectorDump:
    """What :func:`read_inspector` read: the records, and what the headers said about the job."""

    records: list[CollectiveRecord]
    communicators: dict[str, Communicator]
    files: list[DumpFile]
    notes: list[str] = field(default_factory=list)
    verbose: bool = False  # some record carried event times (NCCL_INSPECTOR_DUMP_VERBOSE=1)
    format_versions: tuple[str, ...] = ()
    incomplete: bool = False  # a rank without records, or a line left out as damaged
    content_digest: str = ""  # a hash of every file read, for a content-derived run id
    origin_s: int = 0  # the records' times are seconds from this epoch second
    dropped: tuple[int, int] = (0, 0)  # collective and point-to-point records NCCL Inspector dropped

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({f.hostname for f in self.files if f.hostname}))

    @property
    def world_size(self) -> int:
        """The largest communicator's rank count (the job's world, when it has a world communicator)."""
        return max(c.n_ranks for c in self.communicators.values())


class _Skip(Exception):
    """A line left out: the message says why (the caller locates it)."""


class _TooMany(IngestError):
    """More records than a dump may hold: the whole read stops."""


@dataclass
class _FileState:
    """What reading one file carries from line to line."""

    source: Source
    header: Mapping[str, object] | None = None  # the last dump_stats marker's header and metadata (v4.3)
    metadata: Mapping[str, object] | None = None
    hostname: str | None = None
    pid: int | None = None
    records: int = 0
    skipped: int = 0
    warned: int = 0


@dataclass
class _Comm:
    """What a dump's records said of one communicator so far."""

    n_ranks: int
    nnodes: int = 0
    name: str | None = None
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)


class _Reader:
    """Reads files one at a time into one dump: records, communicators, counts for the notes."""

    def __init__(self) -> None:
        self.records: list[CollectiveRecord] = []
        # coll_sn counts per communicator and per collective (NCCL's comm->seqNumber[func]): AllReduce 5 and
        # AllGather 5 are two records, so the op is part of what makes a record a repeat
        self.seen: set[tuple[str, int, str, int]] = set()
        self.comms: dict[str, _Comm] = {}
        self.files: list[DumpFile] = []
        self.versions: set[str] = set()
        self.verbose = False
        self.busbw = BusbwCheck()
        self.busbw_where: tuple[Source, int] | None = None  # the first record whose busBW disagreed
        self.p2p = 0
        self.left_out_ops: dict[str, int] = {}
        self.duplicates = 0
        self.damaged = 0
        self.compact = 0
        self.timing: dict[str, int] = {}
        self.digest = hashlib.sha256()
        self.names: dict[str, str] = {}  # communicator ids and host names, one string each for every record
        # Record times are kept in seconds from this whole second (epoch), computed in integer ns: float epoch
        # seconds (1.7e9) have a step of 0.24 us, which would cut a 110 us collective to 109.91 us.
        self.origin_s: int | None = None
        self.dropped: dict[str, tuple[int, int, int]] = {}  # file -> (coll, p2p dropped in all, line)

    def read(self, source: Source, shown: str) -> None:
        self.digest.update(f"{shown}\0{len(source.text)}\0".encode())
        self.digest.update(source.text.encode())
        state = _FileState(source)
        last_skipped = 0
        for line_no, obj in _objects(source):
            try:
                if isinstance(obj, _Skip):
                    self.damaged += 1
                    raise obj
                self._line(state, line_no, obj)
            except _Skip as e:
                state.skipped += 1
                last_skipped = line_no
                if state.warned < _WARNED_PER_FILE:
                    state.warned += 1
                    source.warn(line_no, f"left out: {e}")
        if state.skipped > state.warned:
            source.warn(last_skipped, f"left out {state.skipped - state.warned} more lines, the last here")
        self.files.append(DumpFile(source.path, state.hostname, state.pid, state.records, state.skipped))

    def _line(self, state: _FileState, line_no: int, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise _Skip(f"a JSON {type(obj).__name__}, not a record object")
        if "dump_stats" in obj:  # v4.3: the marker's header and metadata hold for the records after it
            state.header = _obj(obj, "header")
            state.metadata = _obj(obj, "metadata")
            stats = _obj(obj, "dump_stats")
            coll = _int(stats, "coll_dropped_total", 0, _MAX_US) if "coll_dropped_total" in stats else 0
            p2p = _int(stats, "p2p_dropped_total", 0, _MAX_US) if "p2p_dropped_total" in stats else 0
            where = f"{state.source.path.name}:{_text(state.header, 'id', MAX_GROUP_NAME)}"
            if coll or p2p or where in self.dropped:  # totals since the process started: the last one counts
                self.dropped[where] = (coll, p2p, line_no)
                if coll or p2p:
                    state.source.warn(
                        line_no,
                        f"NCCL Inspector reports {coll} collective and {p2p} point-to-point records dropped "
                        f"(dump_stats): the dump is missing them",
                    )
        if "coll_perf" in obj:
            if "header" in obj or "metadata" in obj:
                header, metadata = _obj(obj, "header"), _obj(obj, "metadata")
            elif state.header is not None and state.metadata is not None:
                header, metadata = state.header, state.metadata
            else:
                raise _Skip("a coll_perf record with no header, and no dump_stats marker before it")
            bad_before = self.busbw.bad
            record = self._collective(state, header, metadata, _obj(obj, "coll_perf"))
            if self.busbw_where is None and self.busbw.bad > bad_before:
                self.busbw_where = (state.source, line_no)
            if record is not None:
                key = (record.group, record.rank, record.op, record.seq)
                if key in self.seen:
                    self.duplicates += 1
                    return
                if len(self.records) >= MAX_RECORDS:
                    raise _TooMany(
                        state.source.path,
                        line_no,
                        f"more than {MAX_RECORDS} collective records in the dump: ingest fewer files at once",
                    )
                self.seen.add(key)
                self.records.append(record)
                state.records += 1
        elif "p2p_perf" in obj:
            self.p2p += 1
        elif "dump_stats" not in obj:
            raise _Skip("neither coll_perf, p2p_perf nor dump_stats: not an NCCL Inspector record")

    def _collective(
        self,
        state: _FileState,
        header: Mapping[str, object],
        metadata: Mapping[str, object],
        perf: Mapping[str, object],
    ) -> CollectiveRecord | None:
        comm_id = _text(header, "id", MAX_GROUP_NAME)
        comm_id = self.names.setdefault(comm_id, comm_id)  # one string for all its records
        n_ranks = _int(header, "n_ranks", 1, MAX_RANKS + 1)
        rank = _int(header, "rank", 0, n_ranks)
        nnodes = _int(header, "nnodes", 0, MAX_RANKS + 1)
        name = header.get("comm_name")
        if name is not None and not (isinstance(name, str) and len(name) <= MAX_GROUP_NAME):
            raise _Skip(f"header.comm_name must be a string of at most {MAX_GROUP_NAME} characters")
        hostname = metadata.get("hostname")
        if hostname is not None and not (isinstance(hostname, str) and len(hostname) <= _MAX_HOST_CHARS):
            raise _Skip(f"metadata.hostname must be a string of at most {_MAX_HOST_CHARS} characters")
        if hostname is not None:
            hostname = self.names.setdefault(hostname, hostname)
        pid = metadata.get("pid")
        if pid is not None:
            pid = _int(metadata, "pid", 0, 2**32)
        dump_us = _int(metadata, "dump_timestamp_us", 0, _MAX_US)
        version = metadata.get("inspector_output_format_version")
        if isinstance(version, str) and len(version) <= 20 and len(self.versions) < _MAX_NAMES_COUNTED:
            self.versions.add(version)

        coll = _text(perf, "coll", 40)
        op = NCCL_OPS.get(coll)
        seq = _int(perf, "coll_sn", 0, _MAX_SEQ)
        msg_bytes = _int(perf, "coll_msg_size_bytes", 0, MAX_SIZE_BYTES)
        exec_us = _number(perf, "coll_exec_time_us", _MAX_US)
        timing = perf.get("coll_timing_source", "unknown")
        if not isinstance(timing, str) or len(timing) > 40:
            raise _Skip("coll_perf.coll_timing_source must be a short string")
        printed_busbw = _bandwidth(perf, "coll_busbw_gbs")
        if op is None:
            counted = coll if coll in self.left_out_ops or len(self.left_out_ops) < _MAX_NAMES_COUNTED else "others"
            self.left_out_ops[counted] = self.left_out_ops.get(counted, 0) + 1
            return None
        size_bytes = msg_bytes * n_ranks if op in _PER_RANK_MSG else msg_bytes
        if size_bytes >= MAX_SIZE_BYTES:
            raise _Skip(f"{coll} of {msg_bytes} B x {n_ranks} ranks is beyond what commlens accepts")
        exec_ns = round(exec_us * 1000)
        start_us = _verbose_start_us(perf)
        if start_us is not None:
            self.verbose = True
            start_ns = start_us * 1000
            end_ns = start_ns + exec_ns
        else:
            self.compact += 1
            end_ns = dump_us * 1000
            start_ns = end_ns - exec_ns
        if start_ns < 0 or end_ns > _LAST_EPOCH_NS:
            raise _Skip(
                f"times {start_ns // 1000}..{end_ns // 1000} us are not epoch microseconds of 1970..9999 "
                f"(dump_timestamp_us, kernel_start_ts or coll_exec_time_us out of range)"
            )
        if self.origin_s is None:
            self.origin_s = start_ns // 10**9
        start_s = (start_ns - self.origin_s * 10**9) / 1e9
        end_s = (end_ns - self.origin_s * 10**9) / 1e9
        try:
            record = CollectiveRecord(
                rank=rank,
                group=comm_id,
                group_size=n_ranks,
                seq=seq,
                op=op,
                size_bytes=size_bytes,
                dtype="other",
                start_s=start_s,
                end_s=end_s,
                host=hostname,
                timing="inspector",
            )
        except CollectiveRecordError as e:
            raise _Skip(str(e)) from None

        comm = self.comms.get(comm_id)
        if comm is None:
            comm = self.comms[comm_id] = _Comm(n_ranks)
        if comm.n_ranks != n_ranks:
            raise _Skip(f"communicator {comm_id} has {n_ranks} ranks here, {comm.n_ranks} in an earlier record")
        comm.ranks.add(rank)
        comm.nnodes = max(comm.nnodes, nnodes)
        if hostname:
            comm.hosts.add(hostname)
        if name and name != "unknown":
            comm.name = name
        state.hostname = state.hostname or hostname
        state.pid = state.pid if state.pid is not None else pid
        timing = timing if timing in _TIMING_SOURCES else "unknown"
        self.timing[timing] = self.timing.get(timing, 0) + 1
        if printed_busbw is not None and not (op in _NO_INSPECTOR_BW and printed_busbw == 0):
            spec = get_op(op)
            self.busbw.add(seq, printed_busbw, size_bytes, exec_ns / 1e9, spec.busbw_factor(n_ranks))
        return record

    def finish(self, root: Path, file_notes: list[str] | None = None) -> InspectorDump:
        """The dump read so far; IngestError at ``root`` if it holds no collective record."""
        if not self.records:
            raise IngestError(root, 0, "no collective records (coll_perf) that commlens reads")
        communicators = {
            cid: Communicator(
                id=cid,
                name=c.name,
                n_ranks=c.n_ranks,
                nnodes=c.nnodes,
                ranks=tuple(sorted(c.ranks)),
                hosts=tuple(sorted(c.hosts)),
            )
            for cid, c in sorted(self.comms.items())
        }
        notes = list(file_notes or [])
        incomplete = self.damaged > 0 or bool(file_notes)
        if self.damaged:
            notes.append(f"{self.damaged} damaged lines left out (a truncated or corrupt file)")
        for comm in communicators.values():
            missing = comm.missing_ranks
            if missing:
                incomplete = True
                shown = ", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else "")
                notes.append(
                    f"communicator {comm.id} ({comm.n_ranks} ranks): no records from rank {shown} "
                    "(a missing file, or ranks that recorded nothing)"
                )
        if self.p2p:
            notes.append(f"{self.p2p} point-to-point records (Send/Recv) left out: not collectives")
        for coll, n in sorted(self.left_out_ops.items()):
            notes.append(f"{n} {quote(coll, 40)} records left out: no collective of the catalog")
        if self.duplicates:
            notes.append(
                f"{self.duplicates} records repeated (same communicator, rank, collective and coll_sn) kept once"
            )
        if self.compact:
            notes.append(
                f"{self.compact} compact records carry no start time: each is placed to end at its "
                "dump_timestamp_us (durations are the inspector's; NCCL_INSPECTOR_DUMP_VERBOSE=1 gives start times)"
            )
        coll_dropped = sum(c for c, _, _ in self.dropped.values())
        p2p_dropped = sum(p for _, p, _ in self.dropped.values())
        if coll_dropped or p2p_dropped:
            incomplete = True
            notes.append(
                f"NCCL Inspector dropped {coll_dropped} collective and {p2p_dropped} point-to-point records "
                f"(dump_stats coll_dropped_total / p2p_dropped_total, the last of each process and communicator): "
                f"the measurements are of the records kept"
            )
        if self.timing:
            notes.append("inspector timing: " + ", ".join(f"{n} {t}" for t, n in sorted(self.timing.items())))
        notes.append("rank is each record's rank in its communicator; group is the communicator's id")
        if self.busbw_where is not None:
            source, line = self.busbw_where
            note = self.busbw.report("coll_busbw_gbs", source.warn, lambda _seq: line)
            if note:
                notes.append(note)
        return InspectorDump(
            records=self.records,
            communicators=communicators,
            files=self.files,
            notes=notes,
            verbose=self.verbose,
            format_versions=tuple(sorted(self.versions)),
            incomplete=incomplete,
            content_digest=self.digest.hexdigest(),
            origin_s=self.origin_s or 0,
            dropped=(sum(c for c, _, _ in self.dropped.values()), sum(p for _, p, _ in self.dropped.values())),
        )


def _obj(d: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = d.get(key)
    if not isinstance(value, dict):
        raise _Skip(f"{key} must be a JSON object, got {type(value).__name__ if key in d else 'nothing'}")
    return value


def _int(d: Mapping[str, object], key: str, low: int, limit: int) -> int:
    value = d.get(key)
    if value is None:
        raise _Skip(f"{key} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Skip(f"{key} must be an integer, got {quote(value, 40)}")
    if not low <= value < limit:
        raise _Skip(f"{key} {quote(value, 40)} is out of range (expected {low} <= {key} < {limit})")
    return value


def _number(d: Mapping[str, object], key: str, limit: float) -> float:
    """A finite number in [0, limit): NCCL writes an integer, some builds a float."""
    value = finite_float(d.get(key))
    if value is None:
        raise _Skip(f"{key} must be a finite number, got {quote(d.get(key), 40)}")
    if not 0 <= value < limit:
        raise _Skip(f"{key} {value:g} is out of range (expected >= 0)")
    return value


def _text(d: Mapping[str, object], key: str, limit: int) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise _Skip(f"{key} must be a string of 1..{limit} characters, got {quote(value, 60)}")
    return value


def _bandwidth(d: Mapping[str, object], key: str) -> float | None:
    """A printed GB/s figure; None when absent or ``"nan"`` (what the plugin writes for NaN)."""
    value = d.get(key)
    if value is None or value == "nan":
        return None
    number = finite_float(value)
    if number is None or number < 0:
        raise _Skip(f"{key} must be a number >= 0, got {quote(value, 40)}")
    return number


def _verbose_start_us(perf: Mapping[str, object]) -> int | None:
    """When a verbose record's collective started (host µs): its first kernel channel, else coll_start_ts."""
    trace = perf.get("event_trace_ts")
    if trace is None:
        return None
    if not isinstance(trace, dict):
        raise _Skip("event_trace_ts must be a JSON object")
    channels = trace.get("kernel_events", [])
    # A fork's layout (v4.1) nests channels as coll_perf.events[] of event_type KernelCh.
    events = perf.get("events", [])
    if not isinstance(channels, list) or not isinstance(events, list):
        raise _Skip("event_trace_ts.kernel_events and events must be lists")
    if len(channels) > MAX_CHANNELS or len(events) > MAX_CHANNELS:
        raise _Skip(f"more than {MAX_CHANNELS} kernel channels")
    starts = []
    for ch in channels:
        if isinstance(ch, dict) and ch.get("kernel_start_ts"):
            starts.append(_int(ch, "kernel_start_ts", 1, _MAX_US))
    for ev in events:
        if isinstance(ev, dict) and ev.get("event_type") == "KernelCh":
            ts = ev.get("event_trace_ts")
            if isinstance(ts, dict) and ts.get("kernel_start_ts"):
                starts.append(_int(ts, "kernel_start_ts", 1, _MAX_US))
    if starts:
        return min(starts)
    if trace.get("coll_start_ts"):
        return _int(trace, "coll_start_ts", 1, _MAX_US)
    return None


def _objects(source: Source) -> Iterator[tuple[int, Any]]:
    """(line, JSON value or _Skip) for each record: one per line as the plugin writes, or a stream of
    pretty-printed objects (as its README shows them). A damaged line yields a _Skip, and reading goes on."""
    text = source.text
    first = text.lstrip().split("\n", 1)[0].strip()
    if first == "{":
        yield from _pretty_objects(source)
        return
    lines = list(source.iter_lines())
    for index, line in enumerate(lines):
        line_no = index + 1
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:
            yield line_no, _Skip(f"a line of {len(line)} characters (at most {MAX_LINE_CHARS}): not a record")
            continue
        try:
            value = _parse_line(source, line)
        except _Skip as e:
            last = index == len(lines) - 1 and not text.endswith("\n")
            value = _Skip("a truncated last line (the job stopped while writing?)") if last else e
        yield line_no, value


def _parse_line(source: Source, line: str) -> Any:
    """One line's JSON value, or _Skip saying why not (load_json's words: invalid, too deep, too long a number)."""
    if line.count("{") + line.count("[") > MAX_JSON_DEPTH:  # it may nest too deep: load_json walks it
        try:
            return load_json(Source(source.path, line))
        except IngestError as e:
            raise _Skip(e.message) from None
    try:  # it cannot nest deeper than the bound: the depth walk is skipped (a third of the time per record)
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise _Skip(f"invalid JSON (column {e.colno}): {e.msg}") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise _Skip(f"invalid JSON: {quote(str(e), 120)}") from None


def _pretty_objects(source: Source) -> Iterator[tuple[int, Any]]:
    text = source.text
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            return
        line_no = text.count("\n", 0, pos) + 1
        try:
            obj, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as e:
            yield line_no, _Skip(f"invalid JSON from here on ({quote(str(e), 80)}): a truncated file?")
            return
        if end - pos > MAX_LINE_CHARS:
            yield line_no, _Skip(f"a record of {end - pos} characters (at most {MAX_LINE_CHARS})")
        else:
            yield line_no, obj
        pos = end


def _dump_files(root: Path) -> tuple[list[Path], list[str]]:
    """The record files under a dump directory (sorted), and notes on what was not read."""
    found: list[Path] = []
    other = 0
    compressed = 0
    base_depth = len(root.parts)
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        if len(here.parts) - base_depth >= MAX_DIR_DEPTH:
            dirs.clear()
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            if name.endswith(_FILE_SUFFIXES):
                found.append(here / name)
                if len(found) > MAX_FILES:
                    raise IngestError(root, 0, f"more than {MAX_FILES} record files: ingest a part of the dump")
            elif name.endswith((".log.gz", ".jsonl.gz")):
                compressed += 1
            else:
                other += 1
    notes = []
    if compressed:
        notes.append(f"{compressed} compressed files (.gz) not read: decompress them first")
    if other:
        notes.append(f"{other} files not named *.log or *.jsonl not read (Prometheus .prom files hold no records)")
    return found, notes


def read_inspector(path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> InspectorDump:
    """The records of an NCCL Inspector file or dump directory, times on the epoch (as live records have them);
    see :func:`_read_relative` for the reading."""
    dump = _read_relative(path, max_bytes=max_bytes)
    origin = dump.origin_s
    records = [dataclasses.replace(r, start_s=r.start_s + origin, end_s=r.end_s + origin) for r in dump.records]
    return dataclasses.replace(dump, records=records, origin_s=0)


def _read_relative(path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> InspectorDump:
    """NCCL Inspector's records from one file or a dump directory (its ``*.log`` / ``*.jsonl`` files).

    In a directory, a file that cannot be read or is not the inspector's is warned about and left out.
    IngestError when nothing can be read: no record file, or no collective record at all.
    ``max_bytes`` caps each file.
    """
    root = Path(path)
    reader = _Reader()
    if not root.is_dir():
        reader.read(read_source(root, max_bytes=max_bytes), root.name)
        return reader.finish(root)
    files, notes = _dump_files(root)
    if not files:
        raise IngestError(root, 0, "no *.log or *.jsonl files: not an NCCL Inspector dump directory")
    first_error: IngestError | None = None
    for file in files:
        shown = str(file.relative_to(root))
        try:
            source = read_source(file, max_bytes=max_bytes)
            if not _sniff(source):
                raise source.error(1, "not NCCL Inspector output (no coll_perf records)")
            reader.read(source, shown)
            del source
        except _TooMany:
            raise
        except IngestError as e:
            first_error = first_error or e
            warnings.warn(IngestWarning(f"{e}; the other files are read"), stacklevel=2)
            notes.append(f"{shown} not read: {e.message}")
    if not reader.records and first_error is not None:
        raise first_error
    return reader.finish(root, notes)


def records_from_inspector(path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> list[CollectiveRecord]:
    """The collective records of an NCCL Inspector file or dump directory, every rank's, for joining ranks."""
    return read_inspector(path, max_bytes=max_bytes).records


def parse_inspector(source: Source, *, op: str | None = None) -> ParsedRun:
    """The run of one inspector file (``op`` is not needed: every record names its collective)."""
    reader = _Reader()
    reader.read(source, source.path.name)
    return _parsed_run(reader.finish(source.path), run_id=None)


def load_dump_runs(
    path: str | Path,
    *,
    tag: str | None = None,
    revision: str | None = None,
    started_at: str | None = None,
    max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> list[Run]:
    """The run of a dump directory (every process's file): what ``commlens ingest DIR`` stores.

    The run id derives from every file's content, so ingesting the same dump again finds it stored.
    """
    from commlens.ingest import _to_run  # the package's own run builder (tag, revision, started_at)

    dump = _read_relative(path, max_bytes=max_bytes)  # durations exact: seconds from the dump's first second
    parsed = _parsed_run(dump, run_id=content_run_id(NAME, dump.content_digest))
    stand_in = Source(Path(path), dump.content_digest)  # names the directory in ingested_from and errors
    return [_to_run(stand_in, NAME, parsed, tag=tag, revision=revision, started_at=started_at)]


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="seconds")


def _parsed_run(dump: InspectorDump, *, run_id: str | None) -> ParsedRun:
    """The run of a dump: one measurement per (communicator, op, size bucket), durations as samples."""
    start_s = min(r.start_s for r in dump.records)
    end_s = max(r.end_s for r in dump.records)
    rows = aggregate(dump.records, window=0, start_s=start_s, end_s=end_s, keep=2048)
    measurements = measurements_from_windows(rows)
    largest = max(dump.communicators.values(), key=lambda c: (c.n_ranks, c.id))
    per_host: dict[str, set[int]] = {}
    for r in dump.records:
        if r.group == largest.id and r.host:
            per_host.setdefault(r.host, set()).add(r.rank)
    system = SystemInfo(
        world_size=dump.world_size,
        hosts=dump.hosts,
        ranks_per_host={h: len(ranks) for h, ranks in sorted(per_host.items())},
        backend="nccl",
        device="cuda",
        extra={"nnodes": max(c.nnodes for c in dump.communicators.values())},
    )
    config: JsonObject = {
        "format": NAME,
        "collectives": list(dict.fromkeys(m.op for m in measurements)),
        "inspector_output_format_version": list(dump.format_versions),
        "verbose": dump.verbose,
        "files": len(dump.files),
        "records": len(dump.records),
        "dropped_records": {"coll": dump.dropped[0], "p2p": dump.dropped[1]},
        "communicators": {
            c.id: {"name": c.name, "n_ranks": c.n_ranks, "nnodes": c.nnodes, "ranks_with_records": len(c.ranks)}
            for c in dump.communicators.values()
        },
    }
    return ParsedRun(
        source=NAME,
        system=system,
        measurements=measurements,
        config=config,
        notes=list(dump.notes),
        started_at=_iso(start_s + dump.origin_s),
        started_at_note=None if dump.verbose else "started_at is placed from the inspector's dump times",
        finished_at=_iso(end_s + dump.origin_s),
        status="incomplete" if dump.incomplete else "complete",
        run_id=run_id,
    )


def _sniff(source: Source) -> bool:
    head = source.text[:_SNIFF_CHARS]
    return _SNIFF_RE.search(head) is not None and _SNIFF_HEADER_RE.search(head) is not None


FORMAT = InputFormat(
    name=NAME,
    description="NCCL Inspector JSON (a process's .log, or its dump directory)",
    document="json",
    sniff=_sniff,
    marker="NCCL Inspector records (header, coll_perf)",
    parse=parse_inspector,
    sniff_first=True,
)


@dataclass(frozen=True)
class InspectorColumns(CollectiveColumns):
    """A compact dump's records as columns (what :func:`read_inspector` reads, without an object a record); times
    as :func:`read_inspector` gives them. ``rank`` is each record's rank in its communicator."""

    group_size: np.ndarray
    rank: np.ndarray
    communicators: dict[str, Communicator]
    notes: list[str]
    world_size: int
    verbose: bool = False


_FAST_MAX_US = 9 * 10**15  # dump times in the fast path stay below 2255, where ns still fit 64 bits
_FAST_MAX_EXEC_US = 2**40  # 12 days: exact as a float, and x 1000 still exact


def read_inspector_columns(path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> InspectorColumns | None:
    """The records of a compact NCCL Inspector file or dump directory as columns, checked by column.

    Taken only when every file is the plugin's compact layout, every line a record that :func:`read_inspector`
    keeps with no warning (no damaged line, repeat, dropped record, point-to-point record, op outside the
    catalog, or busBW disagreement); the values, communicators and notes are then :func:`read_inspector`'s.
    None otherwise: read it with :func:`read_inspector`, which says what is wrong where.
    """
    root = Path(path)
    if root.is_dir():
        try:
            files, notes = _dump_files(root)
        except IngestError:
            return None
    else:
        files, notes = [root], []
    if not files:
        return None
    shared = _Shared()
    parts: list[dict[str, np.ndarray]] = []
    count = 0
    try:
        for file in files:
            source = read_source(file, max_bytes=max_bytes)
            if root.is_dir() and not _sniff(source):
                return None
            text = source.text
            lines = scan_json_lines(text, MAX_LINE_CHARS, beyond_64_bits=False)  # see _compact_part
            if lines is None or not lines:
                return None
            if text.count("{") + text.count("[") > 4 * len(lines) and any(
                line.count("{") + line.count("[") > MAX_JSON_DEPTH for line in text.split("\n")
            ):
                return None  # the record-by-record path parses such a line with its depth-bounded parser
            count += len(lines)
            part = _compact_part(lines, shared) if count <= MAX_RECORDS else None
            if part is None:
                return None
            parts.append(part)
            del lines, text, source
    except IngestError:
        return None
    return _compact_finish(parts, shared, notes)


class _Shared:
    """Names met across a dump's files, numbered as first met."""

    def __init__(self) -> None:
        self.groups: dict[str, int] = {}
        self.hosts: dict[str | None, int] = {None: -1}
        self.colls: dict[str, int] = {}
        self.timings: dict[str, int] = {}
        self.comm_names: dict[int, str] = {}  # the last name each communicator was given (not "unknown")


def _compact_part(objects: list[Any], shared: _Shared) -> dict[str, np.ndarray] | None:
    """One file's records checked by column, as arrays (names as ``shared``'s codes); None if any fails.

    An integer beyond 64 bits (which orjson reads as a float) is refused: integer fields take only ints, and
    the number fields (execution time, busBW) refuse magnitudes of 2**63 or more."""
    if not all_of(objects, dict) or set(map(len, objects)) != {3}:
        return None
    parts = fields(objects, ("header", "metadata", "coll_perf"))  # None where an object lacks one
    headers, metas, perfs = parts["header"], parts["metadata"], parts["coll_perf"]
    if not (all_of(headers, dict) and all_of(metas, dict) and all_of(perfs, dict)):
        return None  # with three keys each, every object has exactly these three
    if any(map(contains, perfs, repeat("event_trace_ts"))) or any(map(contains, perfs, repeat("events"))):
        return None  # verbose records: the record-by-record path reads their kernel times
    # a line nesting deeper than MAX_JSON_DEPTH brackets was left to that path too (read_inspector_columns)

    header = fields(headers, ("id", "n_ranks", "rank", "nnodes", "comm_name"))
    meta = fields(metas, ("hostname", "pid", "dump_timestamp_us"))
    perf = fields(
        perfs,
        ("coll", "coll_sn", "coll_msg_size_bytes", "coll_exec_time_us", "coll_timing_source", "coll_busbw_gbs"),
    )
    ids = header["id"]
    n_ranks = int_column(header["n_ranks"], 1, MAX_RANKS + 1)
    rank = int_column(header["rank"], 0, MAX_RANKS + 1)
    nnodes = int_column(header["nnodes"], 0, MAX_RANKS + 1)
    if not strings(ids, 1, MAX_GROUP_NAME) or n_ranks is None or rank is None or nnodes is None:
        return None
    if (rank >= n_ranks).any():
        return None
    names = header["comm_name"]
    if not all_of(names, str, type(None)) or any(len(n) > MAX_GROUP_NAME for n in set(names) - {None}):
        return None
    hostnames = meta["hostname"]
    if not all_of(hostnames, str, type(None)) or any(len(h) > _MAX_HOST_CHARS for h in set(hostnames) - {None}):
        return None
    pids = meta["pid"]
    if not all_of(pids, int, type(None)) or any(not 0 <= p < 2**32 for p in set(pids) - {None}):
        return None
    dump_us = int_column(meta["dump_timestamp_us"], 0, _FAST_MAX_US)
    colls = perf["coll"]
    seq = int_column(perf["coll_sn"], 0, _MAX_SEQ)
    msg = int_column(perf["coll_msg_size_bytes"], 0, MAX_SIZE_BYTES)
    if dump_us is None or seq is None or msg is None or not strings(colls, 1, 40):
        return None
    if not set(colls) <= NCCL_OPS.keys():
        return None
    exec_us = float_column(perf["coll_exec_time_us"])
    if exec_us is None:
        return None
    if not (np.isfinite(exec_us).all() and (exec_us >= 0).all() and (exec_us < _FAST_MAX_EXEC_US).all()):
        return None
    timings = perf["coll_timing_source"]
    if None in timings:  # absent: "unknown"; null stays None (and is refused below)
        timings = [p.get("coll_timing_source", "unknown") for p in perfs]
    if not all_of(timings, str) or any(len(t) > 40 for t in set(timings)):
        return None
    busbw_raw = perf["coll_busbw_gbs"]
    every_bw = all_of(busbw_raw, int, float)  # the usual file: a figure in every record
    printed = busbw_raw if every_bw else [b for b in busbw_raw if b is not None and b != "nan"]
    if not all_of(printed, int, float):
        return None
    op_code = shared.colls
    op = codes(op_code, colls)
    catalog = [NCCL_OPS[c] for c in op_code]
    per_rank = np.array([c in _PER_RANK_MSG for c in catalog], dtype=bool)[op]
    if per_rank.any() and int(msg.max()) * int(n_ranks.max()) >= 2**62:
        return None
    size = np.where(per_rank, msg * n_ranks, msg)
    if (size >= MAX_SIZE_BYTES).any():
        return None
    exec_ns = np.rint(exec_us * 1000).astype(np.int64)  # round() of a float: half to even, as np.rint
    end_ns = dump_us * 1000
    start_ns = end_ns - exec_ns
    if (start_ns < 0).any():
        return None
    # busBW printed against size / time x factor, as BusbwCheck compares them (any disagreement: the slow path)
    if every_bw:
        has_bw = np.ones(len(busbw_raw), dtype=bool)
    else:
        has_bw = np.array([b is not None and b != "nan" for b in busbw_raw], dtype=bool)
    if has_bw.any() and not _busbw_agrees(printed, np.flatnonzero(has_bw), op, catalog, n_ranks, exec_ns, size):
        return None
    group_code = shared.groups
    group = codes(group_code, ids)
    host = codes(shared.hosts, hostnames, -1)
    for g, name in zip(group.tolist(), names):
        if name and name != "unknown":
            shared.comm_names[g] = name
    for t in timings:
        t = t if t in _TIMING_SOURCES else "unknown"
        shared.timings[t] = shared.timings.get(t, 0) + 1
    return {
        "group": group,
        "n_ranks": n_ranks,
        "rank": rank,
        "nnodes": nnodes,
        "host": host,
        "seq": seq,
        "op": op,
        "size": size,
        "start_ns": start_ns,
        "end_ns": end_ns,
    }


def _busbw_agrees(
    printed: Sequence[Any],
    at: np.ndarray,
    op: np.ndarray,
    catalog: list[str],
    n_ranks: np.ndarray,
    exec_ns: np.ndarray,
    size: np.ndarray,
) -> bool:
    """Whether every printed busBW (of the records ``at``) is a finite number that agrees with size / time x
    the op's factor, as BusbwCheck compares them (a magnitude of 2**63 or more is refused: orjson's float for
    an integer beyond 64 bits)."""
    try:
        printed_bw = np.array(printed, dtype=np.float64)
    except OverflowError:
        return False
    if not (np.isfinite(printed_bw).all() and (printed_bw >= 0).all() and (printed_bw < 2.0**63).all()):
        return False
    bw_op = op[at]
    keep = np.array([o not in _NO_INSPECTOR_BW for o in catalog], dtype=bool)[bw_op] | (printed_bw != 0)
    span = MAX_RANKS + 1  # n_ranks < span (checked by the caller)
    pairs, pair_of = np.unique(bw_op.astype(np.int64) * span + n_ranks[at], return_inverse=True)
    factors = [get_op(catalog[p // span]).busbw_factor(p % span) for p in pairs.tolist()]
    factor = np.array(factors, dtype=np.float64)[pair_of.reshape(-1)]
    time_s = exec_ns[at] / 1e9
    keep &= time_s > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        computed = size[at] / time_s * factor / 1e9
    diff = np.abs(computed - printed_bw)
    bad = (diff > BUSBW_ABS_TOL_GBPS) & (diff > BUSBW_REL_TOL * np.maximum(computed, printed_bw))
    return not (bad & keep).any()


def _compact_finish(
    parts: list[dict[str, np.ndarray]], shared: _Shared, file_notes: list[str]
) -> InspectorColumns | None:
    """The files' columns joined, with the checks across files: one size a communicator, no repeated record."""
    col = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    group, n_ranks, rank, seq, op = col["group"], col["n_ranks"], col["rank"], col["seq"], col["op"]
    start_ns, end_ns, host, nnodes = col["start_ns"], col["end_ns"], col["host"], col["nnodes"]
    # one size a communicator, and no record twice (communicator, rank, collective, coll_sn)
    sizes: dict[int, int] = {}
    for g, n in set(zip(group.tolist(), n_ranks.tolist())):
        if sizes.setdefault(g, n) != n:
            return None
    order = np.lexsort((seq, op, rank, group))
    same = np.ones(len(order) - 1, dtype=bool)
    for values in (group, rank, op, seq):
        ordered = values[order]
        same &= ordered[1:] == ordered[:-1]
    if same.any():
        return None
    origin_s = int(start_ns[0]) // 10**9
    origin_ns = origin_s * 10**9
    start_s = (start_ns - origin_ns) / 1e9 + origin_s
    end_s = (end_ns - origin_ns) / 1e9 + origin_s
    groups = list(shared.groups)
    hosts = [h for h in shared.hosts if h is not None]
    communicators = {}
    for g in sorted(range(len(groups)), key=groups.__getitem__):
        rows = np.flatnonzero(group == g)
        codes = np.unique(host[rows]).tolist()
        communicators[groups[g]] = Communicator(
            id=groups[g],
            name=shared.comm_names.get(g),
            n_ranks=sizes[g],
            nnodes=max(int(nnodes[rows].max()), 0),
            ranks=tuple(np.unique(rank[rows]).tolist()),
            hosts=tuple(sorted({hosts[c] for c in codes if c >= 0 and hosts[c]})),
        )
    notes = list(file_notes)
    for comm in communicators.values():
        missing = comm.missing_ranks
        if missing:
            shown = ", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else "")
            notes.append(
                f"communicator {comm.id} ({comm.n_ranks} ranks): no records from rank {shown} "
                "(a missing file, or ranks that recorded nothing)"
            )
    notes.append(
        f"{len(seq)} compact records carry no start time: each is placed to end at its "
        "dump_timestamp_us (durations are the inspector's; NCCL_INSPECTOR_DUMP_VERBOSE=1 gives start times)"
    )
    notes.append("inspector timing: " + ", ".join(f"{n} {t}" for t, n in sorted(shared.timings.items())))
    notes.append("rank is each record's rank in its communicator; group is the communicator's id")
    return InspectorColumns(
        group=group,
        groups=groups,
        group_size=n_ranks,
        rank=rank,
        seq=seq,
        op=op,
        ops=[NCCL_OPS[c] for c in shared.colls],
        size_bytes=col["size"],
        start_s=start_s,
        end_s=end_s,
        host=host,
        hosts=hosts,
        communicators=communicators,
        notes=notes,
        world_size=max(c.n_ranks for c in communicators.values()),
    )
