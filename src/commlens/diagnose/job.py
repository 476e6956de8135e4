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

import bisect
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.diagnose.job_sources import (
    BENCH_KINDS,
    KINDS,
    JobSourceError,
    Observation,
    SourceData,
    detect_kind,
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
    sources = [load_source(kind, by_kind[kind]) for kind in KINDS if kind in by_kind]
    _check_one_job(sources)
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
        ends = [o.end_s for o in s.observations if o.end_s is not None]
        if ends:
            spans[s.kind] = (min(ends), max(ends))
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


def _ordinals(source: SourceData) -> dict[tuple[str, str], dict[int, int]]:
    """Step 2: per (group, op), each sequence number's ordinal."""
    seqs: dict[tuple[str, str], set[int]] = defaultdict(set)
    for o in source.observations:
        seqs[(o.group, o.op)].add(o.seq)
    if source.kind in _PER_OP_COUNTER:
        return {k: {s: s for s in v} for k, v in seqs.items()}
    return {k: {s: i for i, s in enumerate(sorted(v))} for k, v in seqs.items()}


def _ends_by_rank(
    source: SourceData, ordinals: dict[tuple[str, str], dict[int, int]]
) -> dict[tuple[str, str, int], tuple[list[float], list[int]]]:
    """Per (group, op, rank): end times sorted, and the ordinal at each."""
    rows: dict[tuple[str, str, int], list[tuple[float, int]]] = defaultdict(list)
    for o in source.observations:
        if o.end_s is not None:
            rows[(o.group, o.op, o.rank)].append((o.end_s, ordinals[(o.group, o.op)][o.seq]))
    out = {}
    for k, v in rows.items():
        v.sort()
        out[k] = ([e for e, _ in v], [i for _, i in v])
    return out


def _offset_by_time(
    src_ends: dict[tuple[str, str, int], tuple[list[float], list[int]]],
    ref_ends: dict[tuple[str, str, int], tuple[list[float], list[int]]],
    group: str,
    ref_group: str,
    op: str,
    ranks: int,
) -> tuple[int | None, int, int]:
    """Step 3: the most common ordinal offset of nearest-end anchors, with the anchor and agreeing counts."""
    votes: Counter[int] = Counter()
    for rank in range(ranks):
        mine = src_ends.get((group, op, rank))
        theirs = ref_ends.get((ref_group, op, rank))
        if not mine or not theirs or len(theirs[0]) < 2:
            continue
        ref_times, ref_ords = theirs
        gaps = [b - a for a, b in zip(ref_times, ref_times[1:])]
        tolerance = statistics.median(gaps) / 4
        times, ords = mine
        step = max(1, len(times) // _MAX_ANCHORS_PER_RANK)
        for k in range(0, len(times), step):
            t = times[k]
            j = bisect.bisect_left(ref_times, t)
            best = min((i for i in (j - 1, j) if 0 <= i < len(ref_times)), key=lambda i: abs(ref_times[i] - t))
            if abs(ref_times[best] - t) <= tolerance:
                votes[ref_ords[best] - ords[k]] += 1
    anchors = sum(votes.values())
    if not anchors:
        return None, 0, 0
    offset, agreeing = votes.most_common(1)[0]
    return offset, anchors, agreeing


def _align(
    source: SourceData,
    reference: SourceData,
    ref_ordinals: dict[tuple[str, str], dict[int, int]],
    ref_ends: dict[tuple[str, str, int], tuple[list[float], list[int]]],
) -> tuple[list[Alignment], dict[tuple[str, str], tuple[str, int]]]:
    """Steps 3-4 for one source: its alignments, and per (group, op) the reference group and offset."""
    ordinals = _ordinals(source)
    src_ends = _ends_by_rank(source, ordinals)
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


def _instances(source: SourceData, key_of: Any) -> tuple[list[Instance], int, dict[tuple[str, int], str | None]]:
    """A source's completed observations with a duration, joined across ranks on the job's key."""
    joined: dict[tuple[str, str, int], dict[int, Observation]] = defaultdict(dict)
    hosts: dict[tuple[str, int], str | None] = {}
    counter = "coll_sn" if source.kind in _PER_OP_COUNTER else "seq"
    for o in source.observations:
        if o.duration_s is None or o.state != "completed":
            continue
        key = key_of(o)
        if key is None:
            continue
        joined[key][o.rank] = o
        hosts.setdefault((key[0], o.rank), o.host)
    out = []
    partial = 0
    for (group, op, seq), by_rank in joined.items():
        size = source.group_sizes.get(group) or source.group_sizes.get(next(iter(by_rank.values())).group, 0)
        if len(by_rank) != size:
            partial += 1
            continue
        ranks = tuple(sorted(by_rank))
        obs = [by_rank[r] for r in ranks]
        ends = tuple(o.end_s for o in obs)
        own = obs[0]
        out.append(
            Instance(
                group=group,
                op=op,
                seq=seq,
                ranks=ranks,
                durations_s=tuple(o.duration_s or 0.0 for o in obs),
                ends_s=ends if all(e is not None for e in ends) else None,  # type: ignore[arg-type]
                starts_independent=source.starts_independent,
                label=f"{own.op} {counter} {own.seq}",
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
        by_key: dict[tuple[str, int], dict[int, Observation]] = defaultdict(dict)
        for o in s.observations:
            key = (o.group, o.seq) if s.kind not in _PER_OP_COUNTER else (f"{o.group} {o.op}", o.seq)
            by_key[key][o.rank] = o
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


def _progress(sources: list[SourceData], key_of: dict[str, Any]) -> tuple[list[RankProgress], bool]:
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
    world = max(source.group_sizes.values(), default=0)
    last: dict[int, Observation] = {}
    flight: dict[int, Observation] = {}
    hosts: dict[int, str | None] = {}
    for s in sources:  # hosts from any source that names them (the Flight Recorder does not)
        for o in s.observations:
            if o.host and o.global_rank is not None:
                hosts.setdefault(o.global_rank, o.host)
    for o in source.observations:
        if source.group_sizes.get(o.group) != world:
            continue
        if o.state == "completed":
            if o.rank not in last or o.seq > last[o.rank].seq:
                last[o.rank] = o
        elif o.rank not in flight or o.seq < flight[o.rank].seq:
            flight[o.rank] = o
    if not last and not flight:
        return [], False
    top = max((o.seq for o in last.values()), default=-1)

    def shown(o: Observation | None) -> dict[str, Any] | None:
        if o is None:
            return None
        key = key_of[source.kind](o)
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
        behind = mine is None or mine.seq < top
        hang = hang or behind
        g = (mine or flight[rank]).global_rank
        progress.append(
            RankProgress(rank, hosts.get(g if g is not None else rank), shown(mine), shown(flight.get(rank)), behind)
        )
    return progress, hang


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
    ref_ends = _ends_by_rank(reference, ref_ordinals)
    # per source, its own keys (group, op, seq) -> the job's key (None: not joined); computed once per key
    mappings: dict[str, dict[tuple[str, str, int], tuple[str, str, int] | None]] = {}
    for s in sources:
        own = {(o.group, o.op, o.seq) for o in s.observations}
        if s is reference:
            mappings[s.kind] = {k: k for k in own}
            continue
        found, chosen = _align(s, reference, ref_ordinals, ref_ends)
        alignments.extend(found)
        ords = _ordinals(s)
        mapping: dict[tuple[str, str, int], tuple[str, str, int] | None] = {}
        for group, op, seq in own:
            target = chosen.get((group, op))
            job_seq = None
            if target is not None:
                job_seq = ref_seq_at.get((target[0], op), {}).get(ords[(group, op)][seq] + target[1])
            mapping[(group, op, seq)] = None if target is None or job_seq is None else (target[0], op, job_seq)
        mappings[s.kind] = mapping
    key_of: dict[str, Any] = {kind: (lambda o, m=m: m.get((o.group, o.op, o.seq))) for kind, m in mappings.items()}
    membership: Counter[str] = Counter()
    seen_by: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    for kind, m in mappings.items():
        for k in m.values():
            if k is not None:
                seen_by[k].add(kind)
    for kinds in seen_by.values():
        membership["+".join(sorted(kinds))] += 1
    late: list[dict[str, Any]] = []
    notes: list[str] = []
    first_verdict: tuple[SourceData, LateRank] | None = None
    for s in sources:
        instances, partial, hosts = _instances(s, key_of[s.kind])
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
    progress, hang = _progress(sources, key_of)
    return JobReport(
        sources=[
            {
                "kind": s.kind,
                "paths": [str(p) for p in s.paths],
                "observations": len(s.observations),
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
    from commlens.ingest import IngestError, load_runs

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
                instances, partial, hosts = _instances(source, lambda o: (o.group, o.op, o.seq))
                reports.append(find_late_ranks(instances, source=kind, hosts=hosts, partial=partial, params=params))
        for kind in BENCH_KINDS:
            for path in by_kind.get(kind, []):
                for run in load_runs(path):
                    instances, hosts = instances_from_run(run)
                    if not instances:
                        raise JobError(f"{path}: no per-rank samples (nccl-tests needs -I 1 and more than one process)")
                    reports.append(find_late_ranks(instances, source=f"{kind} {path.name}", hosts=hosts, params=params))
    except (JobSourceError, LateRankError, IngestError) as e:
        raise JobError(str(e)) from None
    return reports
