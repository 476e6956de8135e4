"""One collective instance, every source: a job's files joined by (job, group, sequence number), and the
questions a user asks of them (which rank is late and since when, where ranks diverge, where a hung job stopped).

The sources count differently (see docs/diagnose-job.md), so each is aligned onto a reference source before
joining:

1. Reference: the first source present of Flight Recorder, Kineto, monitor, NCCL Inspector (a per-group
   counter over every collective is preferred: it orders all ops of a group in one sequence). Its key is the
   job's key: ``(job, group, op, seq)``.
2. Per source, group and op, each observation's *ordinal*: for NCCL Inspector the ``coll_sn`` itself (NCCL
   counts per communicator and per collective type), for the others its index among the sorted sequence
   numbers of that op in that group (over all ranks' records).
3. A source's group is matched to a reference group of the same size, and per op the ordinal offset is the
   most common difference ``ref ordinal - source ordinal`` between an observation and the reference
   observation of the same rank and op whose end time is nearest (within a quarter of that op's typical
   spacing). The offset holds when most anchors agree; the agreement is reported.
4. Where no end times overlap, Flight Recorder and Kineto (the same PyTorch counter) are joined on equal
   sequence numbers; any other pair is left unjoined, and said so.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commlens.diagnose.job_sources import (
    BENCH_KINDS,
    KINDS,
    Columns,
    FlightrecColumns,
    JobSourceError,
    Observation,
    SourceData,
    detect_kind,
    flightrec_share,
    join_flightrec_shares,
    load_source,
)
from commlens.diagnose.late_ranks import (
    Instance,
    LateRank,
    LateRankError,
    LateRankParams,
    LateRankReport,
    find_late_ranks,
    instances_from_run,
)
from commlens.errors import CommlensError

__all__ = ["Alignment", "JobError", "JobReport", "RankProgress", "diagnose_job", "late_ranks_from_paths", "load_job"]

_REFERENCE_ORDER = ("flightrec", "kineto", "monitor", "nccl-inspector")
_PER_OP_COUNTER = frozenset({"nccl-inspector"})
_SAME_PYTORCH_COUNTER = frozenset({"flightrec", "kineto"})
_MAX_ANCHORS_PER_RANK = 64
_MIN_AGREEMENT = 0.6


class JobError(CommlensError, ValueError):
    """Files that are not one job, or that hold nothing to join."""


@dataclass(frozen=True)
class Alignment:
    """How one source's (group, op) was put on the reference's key."""

    source: str
    group: str
    ref_group: str | None
    op: str
    offset: int | None  # reference ordinal - source ordinal; None: not joined
    anchors: int  # observations matched by end time on the same rank
    agreeing: int  # of those, how many give this offset
    method: str

    def describe(self) -> str:
        if self.offset is None:
            return f"{self.source} {self.group} {self.op}: not joined ({self.method})"
        return (
            f"{self.source} {self.group} {self.op} -> {self.ref_group}: ordinal {self.offset:+d} "
            f"({self.method}; {self.agreeing} of {self.anchors} anchors agree)"
        )


@dataclass(frozen=True)
class RankProgress:
    """Where one rank stands: its last completed collective (with its timing) and what it had in flight."""

    rank: int
    host: str | None
    last_completed: dict[str, Any] | None  # key, source key, end, duration
    in_flight: dict[str, Any] | None  # the first collective started (or issued) and not completed
    behind: bool  # its last completed collective is earlier than most ranks'


@dataclass
class JobReport:
    sources: list[dict[str, Any]]
    reference: str
    alignments: list[Alignment]
    joined_instances: int
    instances_with_sources: dict[str, int]  # "monitor+nccl-inspector" -> count
    late: list[dict[str, Any]]  # per source: its LateRankReport's verdicts, onset on the job's key
    verdict: str  # one line: the late rank and since when, or none
    divergence: dict[str, Any] | None
    progress: list[RankProgress]
    hang: bool
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "sources": self.sources,
            "reference": self.reference,
            "alignments": [a.__dict__ | {"description": a.describe()} for a in self.alignments],
            "joined_instances": self.joined_instances,
            "instances_with_sources": self.instances_with_sources,
            "late": self.late,
            "verdict": self.verdict,
            "divergence": self.divergence,
            "hang": self.hang,
            "progress": [p.__dict__ for p in self.progress],
            "notes": self.notes,
        }


def load_job(paths: list[Path]) -> list[SourceData]:
    """Each path's source, paths of one kind read together (several traces, several dump directories)."""
    by_kind: dict[str, list[Path]] = defaultdict(list)
    for path in paths:
        kind = detect_kind(path)
        if kind not in KINDS:
            raise JobError(
                f"{path}: a {kind} benchmark file is a job of its own, not a record of a training job's "
                f"collectives: give it to `commlens diagnose stragglers` alone"
            )
        by_kind[kind].append(path)
    todo = [(kind, by_kind[kind]) for kind in KINDS if kind in by_kind]
    if len(todo) > 1 and (os.cpu_count() or 1) > 1 and _input_bytes(paths) >= PARALLEL_BYTES:
        sources = _load_in_parallel(todo)
    else:
        sources = [_load_quietly(kind, kind_paths) for kind, kind_paths in todo]
    _check_one_job(sources)
    return sources


PARALLEL_BYTES = 64 << 20  # inputs this large are read one source per process
FLIGHTREC_SHARES = 2  # ... and the Flight Recorder dumps, the most work a byte, in this many


def _input_bytes(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        files = (p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            total += f.stat().st_size
            if total >= PARALLEL_BYTES:
                return total
    return total


def _load_quietly(kind: str, paths: list[Path], columns: FlightrecColumns | None = None) -> SourceData:
    """One source read with the cyclic GC paused: readers make millions of containers and none in a cycle, so
    a collection pass (each rescanning all of them) finds nothing."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return load_source(kind, paths, columns)
    finally:
        if collecting:
            gc.enable()


_Raised = list[tuple[type[Warning], str]]  # warnings caught in a worker process: category, message


def _load_in_child(
    kind: str, paths: list[Path], columns: FlightrecColumns | None = None
) -> tuple[SourceData | None, str | None, _Raised]:
    """In a worker process: the source, or the message of the error reading it, and the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            source, error = _load_quietly(kind, paths, columns), None
        except CommlensError as e:
            source, error = None, str(e)
        if source is not None:
            try:  # the join's per-source work, done here in parallel (kept in source.cache)
                _ends_by_rank(source)
            except Exception:  # left to the caller, which then fails where it would have
                source.cache.clear()
    return source, error, [(w.category, str(w.message)) for w in caught]


def _share_in_child(paths: list[Path], share: tuple[int, int]) -> tuple[FlightrecColumns, _Raised]:
    """In a worker process: a share of the Flight Recorder dumps by column, and the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        columns = flightrec_share(paths, share)
    return columns, [(w.category, str(w.message)) for w in caught]


def _load_in_parallel(todo: list[tuple[str, list[Path]]]) -> list[SourceData]:
    """Each source read in a process of its own (the sources' readers are independent), the Flight Recorder
    dumps in FLIGHTREC_SHARES processes, their columns then joined here; the warnings raised here in source
    order, and the first error (in source order) as a JobSourceError with its message."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    workers = len(todo) + (FLIGHTREC_SHARES - 1 if any(kind == "flightrec" for kind, _ in todo) else 0)
    got: dict[str, tuple[SourceData | None, str | None, _Raised]] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        shares = {
            kind: [pool.submit(_share_in_child, paths, (i, FLIGHTREC_SHARES)) for i in range(FLIGHTREC_SHARES)]
            for kind, paths in todo
            if kind == "flightrec"
        }
        whole = {kind: pool.submit(_load_in_child, kind, paths) for kind, paths in todo if kind != "flightrec"}
        for kind, paths in todo:  # the dumps' shares joined here while the other sources are still read
            if kind in shares:
                read = [f.result() for f in shares[kind]]
                source, error, raised = _load_in_child(kind, paths, join_flightrec_shares([c for c, _ in read]))
                got[kind] = source, error, [w for _, caught in read for w in caught] + raised
        got.update((kind, f.result()) for kind, f in whole.items())
    results = [got[kind] for kind, _ in todo]
    sources = []
    for source, error, raised in results:
        for category, message in raised:
            warnings.warn(message, category, stacklevel=2)
        if error is not None:
            raise JobSourceError(error)
        assert source is not None
        sources.append(source)
    return sources


def _check_one_job(sources: list[SourceData]) -> None:
    """Refuse sources that cannot be one job: no group size in common, or times hours apart."""
    if len(sources) < 2:
        return
    worlds = {s.kind: max(s.group_sizes.values(), default=0) for s in sources}
    if len(set(worlds.values())) > 1:
        shown = ", ".join(f"{k} {w} ranks" for k, w in worlds.items())
        raise JobError(f"the files are not of one job: their largest groups differ ({shown})")
    spans = {}
    for s in sources:
        ends = s.columns.end_s[~np.isnan(s.columns.end_s)]
        if len(ends):
            spans[s.kind] = (float(ends.min()), float(ends.max()))
    kinds = list(spans)
    for i, a in enumerate(kinds):
        for b in kinds[i + 1 :]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            gap = max(a0, b0) - min(a1, b1)
            if gap > 3600:
                raise JobError(
                    f"the files are not of one job: the {a} records and the {b} records are {gap / 3600:.1f} hours "
                    f"apart"
                )


class _Keys:
    """A source's distinct (group, op, seq), sorted by group code, op code and seq, and each row's key index."""

    def __init__(self, c: Columns) -> None:
        go = c.group.astype(np.int64) * max(len(c.ops), 1) + c.op
        order = np.lexsort((c.seq, go))
        new = np.ones(len(order), dtype=bool)
        if len(order):
            g, q = go[order], c.seq[order]
            new[1:] = (g[1:] != g[:-1]) | (q[1:] != q[:-1])
        self.row_key = np.empty(len(order), dtype=np.int64)
        self.row_key[order] = np.cumsum(new) - 1
        first = order[new]
        self.keys: list[tuple[str, str, int]] = [
            (c.groups[g], c.ops[o], q)
            for g, o, q in zip(c.group[first].tolist(), c.op[first].tolist(), c.seq[first].tolist())
        ]


def _keys(source: SourceData) -> _Keys:
    found: _Keys | None = source.cache.get("keys")
    if found is None:
        found = source.cache["keys"] = _Keys(source.columns)
    return found


def _ordinals(source: SourceData) -> dict[tuple[str, str], dict[int, int]]:
    """Step 2: per (group, op), each sequence number's ordinal (computed once per source)."""
    found: dict[tuple[str, str], dict[int, int]] | None = source.cache.get("ordinals")
    if found is None:
        found = source.cache["ordinals"] = _count_ordinals(source)
    return found


def _count_ordinals(source: SourceData) -> dict[tuple[str, str], dict[int, int]]:
    out: dict[tuple[str, str], dict[int, int]] = {}
    per_op = source.kind in _PER_OP_COUNTER
    for group, op, seq in _keys(source).keys:  # sorted by seq within each (group, op)
        table = out.setdefault((group, op), {})
        table[seq] = seq if per_op else len(table)
    return out


_Ends = dict[tuple[str, str, int], tuple[np.ndarray, np.ndarray]]


def _ends_by_rank(source: SourceData) -> _Ends:
    """Per (group, op, rank): end times sorted, and the ordinal at each (computed once per source)."""
    found: _Ends | None = source.cache.get("ends")
    if found is None:
        found = source.cache["ends"] = _sorted_ends(source, _ordinals(source))
    return found


def _sorted_ends(source: SourceData, ordinals: dict[tuple[str, str], dict[int, int]]) -> _Ends:
    c = source.columns
    keys = _keys(source)
    key_ord = np.array([ordinals[(g, o)][q] for g, o, q in keys.keys], dtype=np.int64)
    rows = np.flatnonzero(~np.isnan(c.end_s))
    if not len(rows):
        return {}
    ords = key_ord[keys.row_key[rows]]
    ends = c.end_s[rows]
    go = c.group[rows].astype(np.int64) * max(len(c.ops), 1) + c.op[rows]
    rank = c.rank[rows]
    order = np.lexsort((ords, ends, rank, go))
    go, rank, ends, ords, first = go[order], rank[order], ends[order], ords[order], rows[order]
    cut = np.flatnonzero((go[1:] != go[:-1]) | (rank[1:] != rank[:-1])) + 1
    out: _Ends = {}
    for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, len(go)].tolist()):
        i = int(first[lo])
        out[(c.groups[int(c.group[i])], c.ops[int(c.op[i])], int(rank[lo]))] = (ends[lo:hi], ords[lo:hi])
    return out


def _offset_by_time(
    src_ends: _Ends, ref_ends: _Ends, group: str, ref_group: str, op: str, ranks: int
) -> tuple[int | None, int, int]:
    """Step 3: the most common ordinal offset of nearest-end anchors, with the anchor and agreeing counts."""
    votes: Counter[int] = Counter()
    for rank in range(ranks):
        mine = src_ends.get((group, op, rank))
        theirs = ref_ends.get((ref_group, op, rank))
        if mine is None or theirs is None or len(theirs[0]) < 2:
            continue
        ref_times, ref_ords = theirs
        tolerance = float(np.median(np.diff(ref_times))) / 4
        times, ords = mine
        step = max(1, len(times) // _MAX_ANCHORS_PER_RANK)
        at = np.arange(0, len(times), step)
        t = times[at]
        n = len(ref_times)
        j = np.searchsorted(ref_times, t, side="left")
        before = np.where(j >= 1, np.abs(ref_times[np.clip(j - 1, 0, n - 1)] - t), np.inf)
        after = np.where(j < n, np.abs(ref_times[np.clip(j, 0, n - 1)] - t), np.inf)
        best = np.where(after < before, j, j - 1)  # the nearer end; on a tie the earlier, as min() picks
        near = np.minimum(before, after) <= tolerance
        votes.update((ref_ords[best[near]] - ords[at[near]]).tolist())
    anchors = sum(votes.values())
    if not anchors:
        return None, 0, 0
    offset, agreeing = votes.most_common(1)[0]
    return offset, anchors, agreeing


def _align(
    source: SourceData,
    reference: SourceData,
    ref_ordinals: dict[tuple[str, str], dict[int, int]],
    ref_ends: _Ends,
) -> tuple[list[Alignment], dict[tuple[str, str], tuple[str, int]]]:
    """Steps 3-4 for one source: its alignments, and per (group, op) the reference group and offset."""
    ordinals = _ordinals(source)
    src_ends = _ends_by_rank(source)
    out: list[Alignment] = []
    chosen: dict[tuple[str, str], tuple[str, int]] = {}
    for group, op in sorted(ordinals):
        size = source.group_sizes.get(group, 0)
        candidates = [g for g, n in reference.group_sizes.items() if n == size and (g, op) in ref_ordinals]
        best: Alignment | None = None
        for ref_group in sorted(candidates):
            offset, anchors, agreeing = _offset_by_time(src_ends, ref_ends, group, ref_group, op, size)
            if offset is not None and agreeing >= _MIN_AGREEMENT * anchors and agreeing >= 3:
                found = Alignment(source.kind, group, ref_group, op, offset, anchors, agreeing, "end times")
                if best is None or found.agreeing > best.agreeing:
                    best = found
        if best is None and {source.kind, reference.kind} <= _SAME_PYTORCH_COUNTER and group in reference.group_sizes:
            # the same counter: equal sequence numbers; the offset is that of the ordinals of equal seqs
            mine, theirs = ordinals[(group, op)], ref_ordinals.get((group, op), {})
            common = [s for s in mine if s in theirs]
            if common:
                best = Alignment(
                    source.kind,
                    group,
                    group,
                    op,
                    theirs[common[0]] - mine[common[0]],
                    0,
                    0,
                    "equal sequence numbers (the same PyTorch counter)",
                )
        if best is None:
            best = Alignment(
                source.kind,
                group,
                None,
                op,
                None,
                0,
                0,
                "no reference group of the same size with end times near its own"
                if candidates
                else f"no reference group of {size} ranks running {op}",
            )
        elif best.ref_group is not None and best.offset is not None:
            chosen[(group, op)] = (best.ref_group, best.offset)
        out.append(best)
    return out, chosen


@dataclass
class _JobKeys:
    """The job's keys (group, op, seq), and per source each of its own keys' job key index (-1: not joined)."""

    keys: list[tuple[str, str, int]] = field(default_factory=list)
    index: dict[tuple[str, str, int], int] = field(default_factory=dict)
    of_source: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, kind: str, mapped: list[tuple[str, str, int] | None]) -> None:
        ids = []
        for k in mapped:
            if k is None:
                ids.append(-1)
                continue
            i = self.index.get(k)
            if i is None:
                i = self.index[k] = len(self.keys)
                self.keys.append(k)
            ids.append(i)
        self.of_source[kind] = np.array(ids, dtype=np.int64)

    def rows(self, source: SourceData) -> np.ndarray:
        """Each row's job key index (-1: not joined)."""
        return self.of_source[source.kind][_keys(source).row_key]

    def of_row(self, source: SourceData, i: int) -> tuple[str, str, int] | None:
        k = int(self.of_source[source.kind][_keys(source).row_key[i]])
        return self.keys[k] if k >= 0 else None


def _first_rows(*columns: np.ndarray) -> np.ndarray:
    """Positions of the first row of each distinct combination of the columns (rows in their given order)."""
    if not len(columns[0]):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(len(columns[0])), *reversed(columns)))
    new = np.ones(len(order), dtype=bool)
    new[1:] = np.any([c[order][1:] != c[order][:-1] for c in columns], axis=0)
    return np.sort(order[new])


def _instances(
    source: SourceData, job: _JobKeys | None = None
) -> tuple[list[Instance], int, dict[tuple[str, int], str | None]]:
    """A source's completed observations with a duration, joined across ranks on the job's key (its own key
    where ``job`` is None); for a rank seen twice in an instance, its last observation counts."""
    c = source.columns
    keys = _keys(source)
    if job is None:
        job_keys, row_jk = keys.keys, keys.row_key
    else:
        job_keys, row_jk = job.keys, job.rows(source)
    counter = "coll_sn" if source.kind in _PER_OP_COUNTER else "seq"
    completed = source.columns.states.index("completed") if "completed" in c.states else -2
    rows = np.flatnonzero(~np.isnan(c.duration_s) & (c.state == completed) & (row_jk >= 0))
    jk, rank = row_jk[rows], c.rank[rows]
    # hosts: the first observation's of each (job group, rank)
    group_names = sorted({g for g, _, _ in job_keys})
    group_code = {g: i for i, g in enumerate(group_names)}
    jg = np.array([group_code[g] for g, _, _ in job_keys] or [0], dtype=np.int64)[jk]
    hosts: dict[tuple[str, int], str | None] = {}
    for i in _first_rows(jg, rank).tolist():
        h = int(c.host[rows[i]])
        hosts[(group_names[int(jg[i])], int(rank[i]))] = c.hosts[h] if h >= 0 else None
    # the last observation of each (key, rank), ranks sorted within a key
    order = np.lexsort((np.arange(len(rows)), rank, jk))
    jk_s, rank_s, rows_s = jk[order], rank[order], rows[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (jk_s[1:] != jk_s[:-1]) | (rank_s[1:] != rank_s[:-1])
    jk_s, rank_s, rows_s = jk_s[last], rank_s[last], rows_s[last]
    cut = np.flatnonzero(jk_s[1:] != jk_s[:-1]) + 1
    starts, stops = np.r_[0, cut], np.r_[cut, len(jk_s)]
    block = {int(jk_s[lo]): (int(lo), int(hi)) for lo, hi in zip(starts.tolist(), stops.tolist())} if len(jk_s) else {}
    # the picked rows' values as lists, sliced per instance below (one conversion, not one an instance)
    ranks_at, durations_at = rank_s.tolist(), np.where(c.duration_s == 0, 0.0, c.duration_s)[rows_s].tolist()
    ends = c.end_s[rows_s]
    ends_at, nans_before = ends.tolist(), np.r_[0, np.cumsum(np.isnan(ends))].tolist()
    ops_at, seqs_at = c.op[rows_s].tolist(), c.seq[rows_s].tolist()
    out = []
    partial = 0
    first_of_key = _first_rows(jk)  # keys in the order they were first seen
    for i, k in zip(first_of_key.tolist(), jk[first_of_key].tolist()):
        group, op, seq = job_keys[k]
        lo, hi = block[k]
        size = source.group_sizes.get(group)
        if not size:
            first_rank = int(rank[i])
            own = rows_s[lo + int(np.searchsorted(rank_s[lo:hi], first_rank))]
            size = source.group_sizes.get(c.groups[int(c.group[own])], 0)
        if hi - lo != size:
            partial += 1
            continue
        out.append(
            Instance(
                group=group,
                op=op,
                seq=seq,
                ranks=tuple(ranks_at[lo:hi]),
                durations_s=tuple(durations_at[lo:hi]),  # -0.0 read as 0.0
                ends_s=None if nans_before[hi] != nans_before[lo] else tuple(ends_at[lo:hi]),
                starts_independent=source.starts_independent,
                label=f"{c.ops[ops_at[lo]]} {counter} {seqs_at[lo]}",
            )
        )
    return out, partial, hosts


def _divergence(sources: list[SourceData]) -> dict[str, Any] | None:
    """The first collective (by end time, else sequence) whose op or size differs across a group's ranks."""
    found: list[tuple[float, dict[str, Any]]] = []
    for s in sources:
        if s.kind == "flightrec":  # diagnose hang's analysis, run when the dumps were read
            if s.divergence is not None:
                found.append((float("-inf"), s.divergence))
            continue
        c = s.columns
        per_op = s.kind in _PER_OP_COUNTER
        key_cols = (c.group, c.op, c.seq) if per_op else (c.group, c.seq)
        # the last observation of each (key, rank); a key diverges when their (op, size) differ
        n = len(c)
        if not n:
            continue
        order = np.lexsort((np.arange(n), c.rank, *reversed(key_cols)))
        sorted_keys = [k[order] for k in key_cols]
        new_key = np.ones(n, dtype=bool)
        new_key[1:] = np.any([k[1:] != k[:-1] for k in sorted_keys], axis=0)
        key_id = np.cumsum(new_key) - 1
        rank = c.rank[order]
        last = np.ones(n, dtype=bool)
        last[:-1] = new_key[1:] | (rank[1:] != rank[:-1])
        kept = order[last]
        kept_key = key_id[last]
        first_kept = np.ones(len(kept), dtype=bool)
        first_kept[1:] = kept_key[1:] != kept_key[:-1]
        head = kept[np.maximum.accumulate(np.where(first_kept, np.arange(len(kept)), 0))]
        differs = (c.op[kept] != c.op[head]) | (c.size_bytes[kept] != c.size_bytes[head])
        if not differs.any():
            continue
        row_key = np.empty(n, dtype=np.int64)
        row_key[order] = key_id
        rows = np.flatnonzero(np.isin(row_key, kept_key[differs]))  # the rows of diverging keys, in their order
        by_key: dict[tuple[str, int], dict[int, Observation]] = {}
        for i in rows.tolist():
            o = c.observation(i)
            key = (o.group, o.seq) if not per_op else (f"{o.group} {o.op}", o.seq)
            by_key.setdefault(key, {})[o.rank] = o
        for (group, seq), by_rank in by_key.items():
            sig = Counter((o.op, o.size_bytes) for o in by_rank.values())
            if len(sig) < 2:
                continue
            (op, size), _n = sig.most_common(1)[0]
            culprits = sorted(r for r, o in by_rank.items() if (o.op, o.size_bytes) != (op, size))
            when = min((o.end_s for o in by_rank.values() if o.end_s is not None), default=float(seq))
            found.append(
                (
                    when,
                    {
                        "source": s.kind,
                        "group": group,
                        "seq": seq,
                        "kind": "op_mismatch" if any(by_rank[r].op != op for r in culprits) else "size_mismatch",
                        "culprit_ranks": culprits,
                        "expected": {"op": op, "size_bytes": size},
                    },
                )
            )
    if not found:
        return None
    return min(found, key=lambda f: f[0])[1]


def _progress(sources: list[SourceData], job: _JobKeys) -> tuple[list[RankProgress], bool]:
    """Each rank's last completed collective of the job's largest group, and its first one not completed.

    Ranks are compared in one source's counting (clocks differ across hosts, so end times cannot order
    them): the first of Flight Recorder, monitor, Kineto present (a per-group counter over every op); a
    rank is behind when its last completed sequence number is below the largest any rank completed. NCCL
    Inspector alone cannot tell (it writes samples, not every collective), and is then not judged.
    """
    counted = [s for kind in ("flightrec", "monitor", "kineto") for s in sources if s.kind == kind]
    if not counted:
        return [], False
    source = counted[0]
    c = source.columns
    world = max(source.group_sizes.values(), default=0)
    hosts: dict[int, str | None] = {}
    for s in sources:  # hosts from any source that names them (the Flight Recorder does not)
        sc = s.columns
        named = np.array([bool(h) for h in sc.hosts] + [False], dtype=bool)[sc.host]
        rows = np.flatnonzero(named & (sc.global_rank >= 0))
        for i in _first_rows(sc.global_rank[rows]).tolist():
            hosts.setdefault(int(sc.global_rank[rows[i]]), sc.hosts[int(sc.host[rows[i]])])
    in_world = np.array([source.group_sizes.get(g) == world for g in c.groups] or [False], dtype=bool)[c.group]
    completed = c.states.index("completed") if "completed" in c.states else -2
    done = in_world & (c.state == completed)
    last = _extreme_rows(c, np.flatnonzero(done), largest=True)
    flight = _extreme_rows(c, np.flatnonzero(in_world & ~done), largest=False)
    if not last and not flight:
        return [], False
    top = max((int(c.seq[i]) for i in last.values()), default=-1)

    def shown(i: int | None) -> dict[str, Any] | None:
        if i is None:
            return None
        o = c.observation(i)
        key = job.of_row(source, i)
        return {
            "source": source.kind,
            "source_key": {"group": o.group, "op": o.op, "seq": o.seq},
            "job_key": {"group": key[0], "op": key[1], "seq": key[2]} if key is not None else None,
            "end_s": o.end_s,
            "duration_s": o.duration_s,
            "state": o.state,
        }

    progress = []
    hang = bool(flight)
    for rank in sorted(set(last) | set(flight)):
        mine = last.get(rank)
        behind = mine is None or int(c.seq[mine]) < top
        hang = hang or behind
        gr = int(c.global_rank[mine if mine is not None else flight[rank]])
        progress.append(
            RankProgress(rank, hosts.get(gr if gr >= 0 else rank), shown(mine), shown(flight.get(rank)), behind)
        )
    return progress, hang


def _extreme_rows(c: Columns, rows: np.ndarray, *, largest: bool) -> dict[int, int]:
    """Per rank, the first of its rows with the largest (or smallest) sequence number."""
    if not len(rows):
        return {}
    seq = c.seq[rows]
    order = np.lexsort((np.arange(len(rows)), -seq if largest else seq, c.rank[rows]))
    rank = c.rank[rows][order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = rank[1:] != rank[:-1]
    return {int(r): int(rows[i]) for r, i in zip(rank[new].tolist(), order[new].tolist())}


def diagnose_job(paths: list[Path], params: LateRankParams = LateRankParams()) -> JobReport:
    """Read, align and join a job's files, and answer: who is late since when, where ranks diverge, where it hung."""
    if not paths:
        raise JobError("no files given")
    try:
        sources = load_job(paths)
    except JobSourceError as e:
        raise JobError(str(e)) from None
    reference = next(s for kind in _REFERENCE_ORDER for s in sources if s.kind == kind)
    ref_ordinals = _ordinals(reference)
    # reference ordinal -> reference seq, per (group, op)
    ref_seq_at = {k: {i: s for s, i in v.items()} for k, v in ref_ordinals.items()}
    alignments: list[Alignment] = []
    ref_ends = _ends_by_rank(reference)
    # per source, its own keys (group, op, seq) -> the job's key (None: not joined); computed once per key
    job = _JobKeys()
    for s in sources:
        own = _keys(s).keys
        if s is reference:
            job.add(s.kind, list(own))
            continue
        found, chosen = _align(s, reference, ref_ordinals, ref_ends)
        alignments.extend(found)
        ords = _ordinals(s)
        mapped: list[tuple[str, str, int] | None] = []
        for group, op, seq in own:
            target = chosen.get((group, op))
            job_seq = None
            if target is not None:
                job_seq = ref_seq_at.get((target[0], op), {}).get(ords[(group, op)][seq] + target[1])
            mapped.append(None if target is None or job_seq is None else (target[0], op, job_seq))
        job.add(s.kind, mapped)
    membership: Counter[str] = Counter()
    seen_by: dict[int, set[str]] = defaultdict(set)
    for kind, ids in job.of_source.items():
        for k in np.unique(ids[ids >= 0]).tolist():
            seen_by[k].add(kind)
    for kinds in seen_by.values():
        membership["+".join(sorted(kinds))] += 1
    late: list[dict[str, Any]] = []
    notes: list[str] = []
    first_verdict: tuple[SourceData, LateRank] | None = None
    for s in sources:
        instances, partial, hosts = _instances(s, job)
        try:
            report: LateRankReport = find_late_ranks(
                instances, source=s.kind, hosts=hosts, partial=partial, params=params
            )
        except LateRankError as e:
            notes.append(str(e))
            continue
        late.append(report.to_json())
        if report.late and first_verdict is None:
            first_verdict = (s, report.late[0])
    if first_verdict is not None:
        s, r = first_verdict
        others = [
            f"{rep['source']} {'agrees' if any(x['rank'] == r.rank for x in rep['late_ranks']) else 'does not name it'}"
            for rep in late
            if rep["source"] != s.kind
        ]
        when = f" at {_iso(r.onset_time_s)}" if r.onset_time_s is not None else ""
        verdict = (
            f"rank {r.rank}{f' ({r.host})' if r.host else ''} is late by {r.lateness_s * 1e3:.2f} ms in "
            f"{r.late_instances} of {r.judged_instances} collectives of group {r.group} since {r.onset_op} "
            f"seq {r.onset_seq}{when} ({s.kind}{'; ' + ', '.join(others) if others else ''})"
        )
    else:
        verdict = "no late rank" + (" (no source had every rank's duration)" if not late else "")
    progress, hang = _progress(sources, job)
    return JobReport(
        sources=[
            {
                "kind": s.kind,
                "paths": [str(p) for p in s.paths],
                "observations": len(s.columns),
                "groups": s.group_sizes,
                "counter": s.counter,
                "notes": s.notes,
            }
            for s in sources
        ],
        reference=reference.kind,
        alignments=alignments,
        joined_instances=len(seen_by),
        instances_with_sources=dict(membership),
        late=late,
        verdict=verdict,
        divergence=_divergence(sources),
        progress=progress,
        hang=hang,
        notes=notes,
    )


def _iso(seconds: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="milliseconds")


def late_ranks_from_paths(paths: list[Path], params: LateRankParams = LateRankParams()) -> list[LateRankReport]:
    """Late ranks from each source among ``paths`` (NCCL Inspector, monitor, Flight Recorder durations,
    nccl-tests per-process rows, commlens per-rank samples), each judged on its own keys; one report per source.

    JobError when a path is no such source, or no source has an instance with every rank's duration.
    """
    from commlens import ingest
    from commlens.ingest import IngestError

    reports: list[LateRankReport] = []
    by_kind: dict[str, list[Path]] = defaultdict(list)
    try:
        for path in paths:
            by_kind[detect_kind(path)].append(path)
        if "kineto" in by_kind:
            raise JobError(
                "Kineto traces are judged by their arrival times: give them to `diagnose stragglers` without other files"
            )
        for kind in KINDS:
            if kind in by_kind:
                source = load_source(kind, by_kind[kind])
                instances, partial, hosts = _instances(source)
                reports.append(find_late_ranks(instances, source=kind, hosts=hosts, partial=partial, params=params))
        for kind in BENCH_KINDS:
            for path in by_kind.get(kind, []):
                for run in ingest.run(ingest.IngestRequest(path)):
                    instances, hosts = instances_from_run(run)
                    if not instances:
                        raise JobError(f"{path}: no per-rank samples (nccl-tests needs -I 1 and more than one process)")
                    reports.append(find_late_ranks(instances, source=f"{kind} {path.name}", hosts=hosts, params=params))
    except (JobSourceError, LateRankError, IngestError) as e:
        raise JobError(str(e)) from None
    return reports
