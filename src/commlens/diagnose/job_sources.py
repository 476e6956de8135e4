"""Read any mix of a job's files into one list of observations: one per (source, rank, collective instance).

Each path is recognised by what it holds, not by its name alone:

========================  =========================================================================
source                    recognised by
========================  =========================================================================
``nccl-inspector``        a directory or file whose lines hold ``coll_perf`` records
``flightrec``             a Flight Recorder dump (``nccl_trace_rank_<R>``, ``fr_trace_rank_<R>``...), or
                          a directory of them (the whole directory is read: the ranks are a set)
``kineto``                a PyTorch profiler trace (``traceEvents``), ``.json`` or ``.json.gz``
``monitor``               ``monitor-rank<R>.jsonl`` files of the commlens monitor, or their directory
``nccl-tests``            nccl-tests ``-J`` JSON with per-process rows (``-I 1``); a commlens run JSON
                          with per-rank samples (``commlens``)
========================  =========================================================================

An :class:`Observation` keeps the source's own key (group, op, sequence number) and its own rank
numbering; :mod:`commlens.diagnose.job` aligns the keys across sources.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from commlens.errors import CommlensError
from commlens.ingest.base import IngestError
from commlens.ingest.files import open_input
from commlens.ingest.flightrec import (
    DumpColumns,
    DumpError,
    RankColumns,
    join_dump_columns,
    read_dump_dir,
    read_dump_dir_columns,
)
from commlens.ingest.json_columns import CollectiveColumns
from commlens.ingest.kineto import KinetoTraceError, read_kineto_trace
from commlens.ingest.monitor_jsonl import is_monitor_jsonl, read_monitor_columns, read_monitor_records
from commlens.ingest.nccl_inspector import read_inspector, read_inspector_columns
from commlens.ops import UnknownOpError, get_op
from commlens.results.collectives import CollectiveRecord

__all__ = [
    "BENCH_KINDS",
    "KINDS",
    "ColumnBuilder",
    "Columns",
    "JobSourceError",
    "Observation",
    "SourceData",
    "detect_kind",
    "flightrec_share",
    "join_flightrec_shares",
    "load_source",
]

# The sources, in the order a joined record prefers their timing (the first has every rank's duration).
KINDS = ("nccl-inspector", "monitor", "flightrec", "kineto")
BENCH_KINDS = ("nccl-tests", "commlens")  # a benchmark is a job of its own
_SNIFF_BYTES = 65536


class JobSourceError(CommlensError, ValueError):
    """A path that is no source commlens reads, or a source that cannot be read (the message says which)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One rank's view of one collective instance, as one source recorded it (built only for what is reported)."""

    group: str  # the source's group: communicator id, process group name, monitor label
    op: str  # catalog name
    seq: int  # the source's sequence number (see docs/diagnose-job.md for how each counts)
    rank: int  # rank in the group
    global_rank: int | None
    host: str | None
    size_bytes: int | None
    start_s: float | None  # epoch seconds on the rank's clock
    end_s: float | None
    duration_s: float | None
    state: str  # "completed", "started", "scheduled"


_INT64 = (-(2**63) + 1, 2**63)  # open at the bottom: a negated value stays in range


@dataclass(slots=True)
class Columns:
    """A source's observations as columns, one row each (a million rows cost arrays, not a million objects).

    Strings are codes into name lists (``groups``, ``ops``, ``hosts``, ``states``); an absent integer is -1
    (``global_rank``, ``host``, ``size_bytes``), an absent time NaN.
    """

    group: np.ndarray  # int32 codes into groups
    op: np.ndarray  # int32 codes into ops
    seq: np.ndarray  # int64
    rank: np.ndarray  # int64, the rank in the group
    global_rank: np.ndarray  # int64
    host: np.ndarray  # int32 codes into hosts
    size_bytes: np.ndarray  # int64
    start_s: np.ndarray  # float64, epoch seconds
    end_s: np.ndarray
    duration_s: np.ndarray
    state: np.ndarray  # int32 codes into states
    groups: list[str]
    ops: list[str]
    hosts: list[str]
    states: list[str]

    def __len__(self) -> int:
        return len(self.seq)

    def observation(self, i: int) -> Observation:
        """Row ``i`` as an :class:`Observation` (for what a report shows)."""
        host = int(self.host[i])
        size = int(self.size_bytes[i])
        gr = int(self.global_rank[i])
        return Observation(
            self.groups[int(self.group[i])],
            self.ops[int(self.op[i])],
            int(self.seq[i]),
            int(self.rank[i]),
            gr if gr >= 0 else None,
            self.hosts[host] if host >= 0 else None,
            size if size >= 0 else None,
            _opt(self.start_s[i]),
            _opt(self.end_s[i]),
            _opt(self.duration_s[i]),
            self.states[int(self.state[i])],
        )

    @classmethod
    def concat(cls, parts: list[Columns]) -> Columns:
        """One table of several, their name codes merged."""
        if len(parts) == 1:
            return parts[0]
        out: dict[str, Any] = {}
        for field_name, names_name in (("group", "groups"), ("op", "ops"), ("host", "hosts"), ("state", "states")):
            merged: dict[str, int] = {}
            codes = []
            for p in parts:
                names = getattr(p, names_name)
                remap = np.array([merged.setdefault(n, len(merged)) for n in names] + [-1], dtype=np.int32)
                codes.append(remap[getattr(p, field_name)])  # -1 indexes the appended -1
            out[field_name] = np.concatenate(codes) if codes else np.zeros(0, np.int32)
            out[names_name] = list(merged)
        for name in ("seq", "rank", "global_rank", "size_bytes", "start_s", "end_s", "duration_s"):
            out[name] = np.concatenate([getattr(p, name) for p in parts])
        return cls(**out)


def _opt(value: Any) -> float | None:
    v = float(value)
    return None if math.isnan(v) else v


class ColumnBuilder:
    """Rows appended one at a time (for the sources read record by record), built into :class:`Columns`."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {n: [] for n in _ROW_FIELDS}
        self.names: dict[str, dict[str, int]] = {n: {} for n in ("groups", "ops", "hosts", "states")}

    def code(self, kind: str, name: str | None) -> int:
        if name is None:
            return -1
        table = self.names[kind]
        return table.setdefault(name, len(table))

    def add(self, o: Observation) -> None:
        r = self.rows
        r["group"].append(self.code("groups", o.group))
        r["op"].append(self.code("ops", o.op))
        r["seq"].append(o.seq)
        r["rank"].append(o.rank)
        r["global_rank"].append(-1 if o.global_rank is None else o.global_rank)
        r["host"].append(self.code("hosts", o.host))
        r["size_bytes"].append(-1 if o.size_bytes is None else o.size_bytes)
        r["start_s"].append(math.nan if o.start_s is None else o.start_s)
        r["end_s"].append(math.nan if o.end_s is None else o.end_s)
        r["duration_s"].append(math.nan if o.duration_s is None else o.duration_s)
        r["state"].append(self.code("states", o.state))

    def build(self, where: str) -> Columns:
        arrays: dict[str, Any] = {}
        for name, values in self.rows.items():
            dtype = _ROW_FIELDS[name]
            if dtype is np.int64 and any(not _INT64[0] <= v < _INT64[1] for v in values):
                raise JobSourceError(f"{where}: a {name.replace('_', ' ')} beyond 64 bits: not a collective record")
            arrays[name] = np.array(values, dtype=dtype)
        for kind, table in self.names.items():
            arrays[kind] = list(table)
        return Columns(**arrays)


_ROW_FIELDS: dict[str, Any] = {
    "group": np.int32,
    "op": np.int32,
    "seq": np.int64,
    "rank": np.int64,
    "global_rank": np.int64,
    "host": np.int32,
    "size_bytes": np.int64,
    "start_s": np.float64,
    "end_s": np.float64,
    "duration_s": np.float64,
    "state": np.int32,
}


@dataclass
class SourceData:
    """One source's observations (as columns) and what the reading noticed."""

    kind: str
    paths: tuple[Path, ...]
    columns: Columns
    group_sizes: dict[str, int]
    counter: str  # how its sequence numbers count
    starts_independent: bool = False  # its starts are timestamps of their own (not end - duration)
    notes: list[str] = field(default_factory=list)
    divergence: dict[str, Any] | None = None  # Flight Recorder: diagnose hang's first divergence, where found
    cache: dict[str, Any] = field(default_factory=dict, repr=False)  # what the join computes once per source


def _head(path: Path) -> str:
    """The file's first bytes as text, decompressed where it is gzip; JobSourceError where it cannot be read
    (broken gzip data included)."""
    try:
        with open_input(path) as (fp, _):
            raw = fp.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as e:
        raise JobSourceError(f"{path}: cannot be read ({e})") from None
    return raw.decode("utf-8", "replace")


def detect_kind(path: Path) -> str:
    """Which source a path is (a key of :data:`KINDS` or :data:`BENCH_KINDS`); JobSourceError if none."""
    if not path.exists():
        raise JobSourceError(f"{path}: no such file or directory")
    if is_monitor_jsonl(path):
        return "monitor"
    if path.is_dir():
        names = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if any("_trace_rank_" in p.name or p.name.startswith("rank_") for p in names):
            return "flightrec"
        for p in names[:50]:
            if p.name.endswith((".log", ".jsonl")) and '"coll_perf"' in _head(p):
                return "nccl-inspector"
        raise JobSourceError(
            f"{path}: a directory of no source commlens reads (NCCL Inspector *.log, Flight Recorder dumps, "
            f"monitor-rank<R>.jsonl)"
        )
    if "_trace_rank_" in path.name:
        return "flightrec"
    head = _head(path)
    if '"coll_perf"' in head:
        return "nccl-inspector"
    if '"traceEvents"' in head or '"distributedInfo"' in head:
        return "kineto"
    if '"per_process_max_times_us"' in head or ('"results"' in head and '"nccl_version"' in head):
        return "nccl-tests"
    if '"commlens.run/' in head:
        return "commlens"
    raise JobSourceError(
        f"{path}: not a file commlens reads for a job (NCCL Inspector log, Flight Recorder dump, Kineto trace, "
        f"monitor JSONL, nccl-tests -J JSON, commlens run JSON)"
    )


def _catalog(op: str) -> str | None:
    try:
        return get_op(op).name
    except UnknownOpError:
        return None


def load_source(kind: str, paths: list[Path], columns: FlightrecColumns | None = None) -> SourceData:
    """Read one kind's paths (several Kineto traces, one dump directory...) into observations. ``columns``:
    Flight Recorder dump directories already read by column (see :func:`flightrec_share`)."""
    try:
        if kind == "nccl-inspector":
            return _inspector(paths)
        if kind == "flightrec":
            return _flightrec(paths, columns)
        if kind == "kineto":
            return _kineto(paths)
        if kind == "monitor":
            return _monitor(paths)
    except (IngestError, DumpError, KinetoTraceError) as e:
        raise JobSourceError(str(e)) from None
    raise JobSourceError(f"{kind}: not a source of a training job")


def _completed(r: CollectiveRecord, rank: int, global_rank: int | None) -> Observation:
    """A completed collective record (NCCL Inspector's, the monitor's) as one rank's observation."""
    return Observation(
        r.group, r.op, r.seq, rank, global_rank, r.host, r.size_bytes, r.start_s, r.end_s, r.duration_s, "completed"
    )


def _completed_columns(fast: CollectiveColumns, rank: np.ndarray, global_rank: np.ndarray) -> Columns:
    """A table of completed collectives read by column (NCCL Inspector's, the monitor's) as a source's columns:
    its names, codes, sizes and times as they are."""
    kept = {f.name: getattr(fast, f.name) for f in fields(CollectiveColumns)}
    duration = fast.end_s - fast.start_s
    state = np.zeros(len(duration), dtype=np.int32)
    return Columns(**kept, rank=rank, global_rank=global_rank, duration_s=duration, state=state, states=["completed"])


def _reader_note(note: str) -> bool:
    """The reader's notes a job report leaves out (they hold for every Inspector dump)."""
    return "compact records" in note or "rank is each" in note


@dataclass
class _FilePart:
    """What one file of a completed-collectives source (NCCL Inspector's, the monitor's) gave: its columns, its
    communicators' sizes, its notes, and whether its starts are timestamps of their own."""

    columns: Columns
    sizes: dict[str, int]
    notes: list[str]
    starts_independent: bool


def _completed_source(kind: str, paths: list[Path], counter: str, read: Callable[[Path], _FilePart]) -> SourceData:
    """A source of completed collectives read file by file: the files' columns joined, in order."""
    parts = [read(path) for path in paths]
    sizes: dict[str, int] = {}
    for part in parts:
        sizes.update(part.sizes)
    return SourceData(
        kind=kind,
        paths=tuple(paths),
        columns=Columns.concat([part.columns for part in parts]),
        group_sizes=sizes,
        counter=counter,
        starts_independent=any(part.starts_independent for part in parts),
        notes=[note for part in parts for note in part.notes],
    )


def _inspector_file(path: Path) -> _FilePart:
    fast = read_inspector_columns(path)
    if fast is not None:  # the compact layout, every record checked by column
        return _FilePart(
            _completed_columns(fast, fast.rank, np.where(fast.group_size == fast.world_size, fast.rank, -1)),
            {c.id: c.n_ranks for c in fast.communicators.values()},
            [f"{path.name}: {n}" for n in fast.notes if not _reader_note(n)],
            False,
        )
    obs = ColumnBuilder()
    dump = read_inspector(path)
    for r in dump.records:
        obs.add(_completed(r, r.rank, r.rank if r.group_size == dump.world_size else None))
    return _FilePart(
        obs.build(str(path)),
        {c.id: c.n_ranks for c in dump.communicators.values()},
        [f"{path.name}: {n}" for n in dump.notes if not _reader_note(n)],
        dump.verbose,
    )


def _inspector(paths: list[Path]) -> SourceData:
    counter = "coll_sn: per communicator and per collective type (NCCL's comm->seqNumber[func]), from 0"
    return _completed_source("nccl-inspector", paths, counter, _inspector_file)


# each Flight Recorder dump directory read by column (None: not by column; read it record by record)
FlightrecColumns = dict[Path, DumpColumns | None]


def _dump_directories(paths: list[Path]) -> list[Path]:
    return sorted({p if p.is_dir() else p.parent for p in paths})


def flightrec_share(paths: list[Path], share: tuple[int, int]) -> FlightrecColumns:
    """Share ``(i, n)`` of the ranks of each dump directory among ``paths``, read by column (for reading a
    large set in n processes; :func:`join_flightrec_shares` joins the shares)."""
    return {d: read_dump_dir_columns(d, share=share) for d in _dump_directories(paths)}


def join_flightrec_shares(shares: list[FlightrecColumns]) -> FlightrecColumns:
    """The shares 0..n-1 of :func:`flightrec_share`, in that order, as each directory read at once."""
    out: FlightrecColumns = {}
    for directory in shares[0]:
        parts = [p for s in shares if (p := s[directory]) is not None]
        out[directory] = join_dump_columns(parts) if len(parts) == len(shares) else None
    return out


def _flightrec(paths: list[Path], columns: FlightrecColumns | None = None) -> SourceData:
    directories = _dump_directories(paths)
    parts: list[Columns] = []
    sizes: dict[str, int] = {}
    notes: list[str] = []
    divergence: dict[str, Any] | None = None
    for directory in directories:
        fast = columns[directory] if columns is not None else read_dump_dir_columns(directory)
        if fast is not None and _no_divergence(fast.ranks, fast.names):  # JSON dumps checked by column, ranks in step
            notes.extend(fast.notes)
            for dump in fast.ranks:
                for g in dump.groups.values():
                    if g.ranks:
                        sizes[g.name] = len(g.ranks)
                parts.append(_rank_columns(dump, fast.names))
            continue
        obs = ColumnBuilder()
        dump_set = read_dump_dir(directory)
        notes.extend(dump_set.notes)
        divergence = divergence or _first_divergence(dump_set.dumps)
        for rank_dump in dump_set.dumps:
            for g in rank_dump.groups.values():
                if g.ranks:
                    sizes[g.name] = len(g.ranks)
            for e in rank_dump.entries:
                op = _catalog(e.op)
                if e.is_p2p or op is None:
                    continue
                group = rank_dump.groups.get(e.process_group)
                members = group.ranks if group is not None and group.ranks else ()
                rank = members.index(rank_dump.rank) if rank_dump.rank in members else rank_dump.rank
                start = e.time_started_ns or e.time_created_ns
                end = e.time_completed_ns
                state = e.state or "scheduled"
                # duration_ms only: the discovered times are the watchdog's polls, milliseconds coarse
                duration = e.duration_s
                obs.add(
                    Observation(
                        e.process_group,
                        op,
                        e.collective_seq_id,
                        rank,
                        rank_dump.rank,
                        None,
                        None,
                        start / 1e9 if start else None,
                        end / 1e9 if end else None,
                        duration,
                        state,
                    )
                )
        parts.append(obs.build(str(directory)))
    if len(directories) > 1:
        notes.append(f"{len(directories)} dump directories read as one job")
    return SourceData(
        kind="flightrec",
        paths=tuple(paths),
        columns=Columns.concat(parts),
        group_sizes=sizes,
        counter="collective_seq_id: per process group over every collective, from 1 (PyTorch's seqCollective_)",
        starts_independent=True,
        notes=notes,
        divergence=divergence,
    )


def _rank_columns(dump: RankColumns, names: list[str]) -> Columns:
    """One rank's collective entries (point-to-point and ops outside the catalog left out) as observations."""
    catalog = [_catalog(n) for n in names]  # the ops' catalog names (other names give None, unused)
    known = np.array([c is not None for c in catalog], dtype=bool)
    keep = known[dump.op] & ~dump.is_p2p
    used_groups, group = np.unique(dump.process_group[keep], return_inverse=True)
    used_ops, op = np.unique(dump.op[keep], return_inverse=True)
    states = dump.state[keep]
    used_states, state = np.unique(np.where(states >= 0, states, len(names)), return_inverse=True)
    rank_in = []
    for code in used_groups.tolist():
        config = dump.groups.get(names[code])
        members = config.ranks if config is not None and config.ranks else ()
        rank_in.append(members.index(dump.rank) if dump.rank in members else dump.rank)
    started = dump.time_started_ns[keep]
    start_ns = np.where(started != 0, started, dump.time_created_ns[keep])
    end_ns = dump.time_completed_ns[keep]
    n = int(keep.sum())
    return Columns(
        group=group.astype(np.int32),
        op=op.astype(np.int32),
        seq=dump.seq[keep],
        rank=np.array(rank_in, dtype=np.int64)[group] if n else np.zeros(0, dtype=np.int64),
        global_rank=np.full(n, dump.rank, dtype=np.int64),
        host=np.full(n, -1, dtype=np.int32),
        size_bytes=np.full(n, -1, dtype=np.int64),
        start_s=np.where(start_ns != 0, start_ns / 1e9, np.nan),
        end_s=np.where(end_ns != 0, end_ns / 1e9, np.nan),
        duration_s=dump.duration_s[keep],
        state=state.astype(np.int32),
        groups=[names[c] for c in used_groups.tolist()],
        ops=[catalog[c] or "" for c in used_ops.tolist()],
        hosts=[],
        states=[names[c] if c < len(names) else "scheduled" for c in used_states.tolist()],
    )


def _no_divergence(ranks: tuple[RankColumns, ...], names: list[str]) -> bool:
    """True when diagnose hang's :func:`~commlens.diagnose.hang.find_divergence` would find none: in every
    group, every rank holds the same collective sequence numbers from the highest first one any rank holds
    (each once), with the same op, input sizes and dtypes. False when that is not shown (the dumps are then
    read whole and the analysis run)."""
    if not all(r.has_dtypes for r in ranks):
        return False  # diagnose hang then compares without dtypes: left to it
    present = {r.rank for r in ranks}
    members: dict[int, set[int]] = {}
    rows: dict[tuple[int, int], np.ndarray] = {}
    for r in ranks:
        keep = ~r.is_p2p
        for code in np.unique(r.process_group[keep]).tolist():
            members.setdefault(code, set()).add(r.rank)
            rows[(code, r.rank)] = np.flatnonzero(keep & (r.process_group == code))
    by_name: dict[str, set[int]] = {}
    for r in ranks:
        for name, config in r.groups.items():
            by_name.setdefault(name, set()).update(set(config.ranks) & present)
    by_rank = {r.rank: r for r in ranks}
    for code, ranks_in in members.items():
        windows = []
        for rank in sorted(ranks_in | by_name.get(names[code], set())):
            at = rows.get((code, rank))
            if at is None:
                return False  # a member with no collective of the group: missing from all of them
            seq = by_rank[rank].seq[at]
            if len(seq) > 1 and not (np.diff(seq) > 0).all():
                return False  # out of order or repeated: left to the full analysis
            windows.append((by_rank[rank], at, seq))
        start = max(int(seq[0]) for _, _, seq in windows)
        reference: tuple[np.ndarray, np.ndarray] | None = None
        for dump, at, seq in windows:
            shown = (seq[seq >= start], dump.signature[at[seq >= start]])
            if reference is None:
                reference = shown
            elif not (np.array_equal(shown[0], reference[0]) and np.array_equal(shown[1], reference[1])):
                return False
    return True


def _first_divergence(dumps: Any) -> dict[str, Any] | None:
    """diagnose hang's first divergence among the dumps, as plain data (the dumps themselves are not kept)."""
    from commlens.diagnose.hang import find_divergence

    div, _notes = find_divergence(dumps)
    if div is None:
        return None
    return {
        "source": "flightrec",
        "group": div.process_group,
        "seq": div.collective_seq_id,
        "kind": div.kind,
        "culprit_ranks": [c.get("rank") for c in div.culprits],
        "expected": {k: v for k, v in div.expected.items() if k != "frames"},
    }


def _kineto(paths: list[Path]) -> SourceData:
    from commlens.diagnose.trace_match import MatchError, match_collectives

    files: list[Path] = []
    for p in paths:
        files.extend(sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz"))) if p.is_dir() else [p])
    traces = [read_kineto_trace(f) for f in files]
    counter = "Seq of record_param_comms: PyTorch's per-group collective count, as the Flight Recorder's"
    notes: list[str] = []
    # (trace, collective, seq): the trace's own Seq, else the position in the order-matched sequence
    rows = [(t, c, c.seq) for t in traces for c in t.collectives]
    if any(seq is None for _, _, seq in rows):
        try:
            matching = match_collectives(traces)
        except MatchError as e:
            raise JobSourceError(str(e)) from None
        by_rank = {t.rank: t for t in traces}
        rows = [
            (by_rank[r], c, k + 1)
            for k, m in enumerate(matching.collectives)
            for r, c in zip(matching.ranks, m.records)
        ]
        counter = (
            "order: no Seq in these traces, collectives matched across ranks " + matching.describe().split(" by ", 1)[1]
        )
        notes.append(matching.describe())
    obs = ColumnBuilder()
    sizes: dict[str, int] = {}
    for trace, c, seq in rows:
        op = _catalog(c.op)
        if op is None or seq is None:
            continue
        group = c.group or "0"
        members = c.group_ranks or ()
        if members:
            sizes[group] = len(members)
        elif trace.world_size:
            sizes.setdefault(group, trace.world_size)
        rank = members.index(trace.rank) if trace.rank in members else trace.rank
        obs.add(
            Observation(
                group, op, seq, rank, trace.rank, trace.host, None, c.start_s, c.end_s, c.duration_s, "completed"
            )
        )
    return SourceData(
        kind="kineto",
        paths=tuple(files),
        columns=obs.build(str(paths[0])),
        group_sizes=sizes,
        counter=counter,
        starts_independent=True,
        notes=notes,
    )


def _monitor_file(path: Path) -> _FilePart:
    fast = read_monitor_columns(path)
    if fast is not None:  # every line well formed, every record checked by column
        return _FilePart(_completed_columns(fast, fast.group_rank, fast.rank), dict(fast.group_sizes), [], True)
    obs = ColumnBuilder()
    got = read_monitor_records(path)
    sizes: dict[str, int] = {}
    for r in got.records:
        sizes[r.group] = r.group_size
        rank = r.group_ranks.index(r.rank) if r.group_ranks is not None else r.rank
        obs.add(_completed(r, rank, r.rank))
    notes = [f"{path.name}: {got.bad_lines} damaged lines left out"] if got.bad_lines else []
    return _FilePart(obs.build(str(path)), sizes, notes, True)


def _monitor(paths: list[Path]) -> SourceData:
    counter = "seq: the monitor's per-group count of the collectives it saw, from 0 when it was installed"
    return _completed_source("monitor", paths, counter, _monitor_file)
