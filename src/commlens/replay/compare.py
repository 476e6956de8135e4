"""Recorded against replayed: per collective, per process group, the totals; and the replay as a stored run.

The steps:

1. A collective is matched across the ranks of its group by order: the k-th call a member rank issued on
   group ``g`` is the same collective on every member (that is what ``torch.distributed`` requires of a
   job). Point-to-point calls stay per rank.
2. A collective's own time, recorded or replayed, is that of the rank that waited least: the last to
   arrive, whose span holds no wait for a late peer (the others' spans do: their time is the skew
   between ranks plus the collective). It needs no common clock across ranks, which recorded traces of
   different hosts do not share. The longest rank's time (the collective as the earliest rank saw it,
   wait included) is kept too. With several measured passes, the replayed time is the median of the
   passes.
2b. Where the group's ranks timed their calls on one clock (recorded: Kineto or monitor records of one
   host name; replayed: ranks on one host), the collective's time from the last rank's entry to the last
   rank's exit is kept beside it: no wait for a late peer in it either, but the tail of ranks that leave
   late is (on a ring, ranks leave one after another; on shared cores, a rank that left early and
   computes slows the others' tail). It is never shorter than the own time of step 2, which is the
   least-waiting rank's and so picks, among the ranks, the one that left earliest for its entry. NCCL
   Inspector's compact records carry no start time and Chakra host traces no time: none there.
3. Ratio = replayed / recorded, per collective; per group and in total, the ratio of the summed times and
   the median of the per-collective ratios; the worst calls are those whose ratio is farthest from 1.
4. The communication on the critical path: on each rank, the time inside any call (overlapping calls
   counted once); the busiest rank's. The span: the first call's start to the last call's end on a rank,
   less the rank's wait for late peers in its first collective (its time in it beyond the collective's own
   time): the ranks of a job reach their first recorded collective apart (start-up, the profiler's start;
   up to 0.8 s seen here under load), a replay starts each pass from a barrier; the longest rank's. With
   gaps replayed, the span is the step time the replay reproduces.
5. The run stored: one measurement per (group, op, dtype, size), whose samples are the replayed times of
   that key's collectives; source ``replay``, the comparison in its config.
6. What a recorded time is comparable with. In the job, a collective may have run while the job computed:
   other ranks of the same host past it (their next step), or the rank's own compute beside an async call.
   On a host whose cores the ranks share (CPU ranks of gloo) that compute slows the collective; a back-to-back replay, communication alone, is rightly faster. Each
   recorded collective's overlap is the share of its own-time rank's call during which another rank of that
   host (same host name, same clock) was between calls; at most ``ISOLATED_BELOW`` makes it *isolated*,
   the set a back-to-back replay is compared with (a replay with gaps reproduces the rest). The plan
   cannot see a rank's own compute beside its async calls (FSDP's prefetch, backward beside a
   reduce-scatter): an isolated call may still have had it. On NCCL the collective runs on the rank's GPU,
   where another rank's compute is not: the overlap is left unknown.
"""

from __future__ import annotations

import bisect
import math
import statistics
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass

from commlens.ops import OPS
from commlens.replay.plan import P2P_OPS, ReplayPlan, first_waits, size_bytes
from commlens.replay.runner import ReplayTimes
from commlens.replay.settings import GAP_STAND_INS
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import DTYPE_SIZES, Measurement, Run
from commlens.results.runconfig import ReplayRun

__all__ = [
    "CollectiveComparison",
    "GroupComparison",
    "ReplayComparison",
    "ReplayReport",
    "compare_replay",
    "replay_run",
    "report_times",
]

WORST_SHOWN = 5
ISOLATED_BELOW = 0.05  # a recorded collective with compute alongside for at most this share of it is isolated


@dataclass(frozen=True)
class CollectiveComparison:
    group: str
    index: int  # k-th collective on the group (p2p: k-th call of the rank)
    op: str
    dtype: str
    size_bytes: int
    group_size: int
    recorded_s: float
    replayed_s: float
    step: int | None = None
    rank: int | None = None  # the rank of a point-to-point call
    recorded_max_s: float = 0.0  # the longest rank's time, waiting for late peers included
    replayed_max_s: float = 0.0
    # share of the recorded call during which another rank of its host was outside communication (computing):
    # None where no other rank of the host was recorded (or the host is unknown); see step 6
    recorded_overlap: float | None = None
    # from the last rank's entry to the last rank's exit, where the group's ranks share a clock (step 2b):
    # None where they do not
    recorded_last_s: float | None = None
    replayed_last_s: float | None = None

    @property
    def isolated(self) -> bool:
        """Recorded without compute on its host alongside: comparable to a back-to-back replay."""
        return self.recorded_overlap is not None and self.recorded_overlap <= ISOLATED_BELOW

    @property
    def ratio(self) -> float:
        return self.replayed_s / self.recorded_s if self.recorded_s > 0 else math.inf


@dataclass(frozen=True)
class GroupComparison:
    group: str
    size: int
    calls: int
    recorded_s: float
    replayed_s: float
    median_ratio: float

    @property
    def ratio(self) -> float:
        return self.replayed_s / self.recorded_s if self.recorded_s > 0 else math.inf


@dataclass(frozen=True)
class ReplayComparison:
    collectives: tuple[CollectiveComparison, ...]
    groups: tuple[GroupComparison, ...]
    recorded_total_s: float
    replayed_total_s: float
    median_ratio: float
    recorded_max_total_s: float  # the collectives' longest-rank times summed (waits for late peers included)
    replayed_max_total_s: float
    recorded_critical_comm_s: float
    replayed_critical_comm_s: float
    recorded_span_s: float
    replayed_span_s: float
    gaps: bool
    notes: tuple[str, ...] = ()

    @property
    def last_arrival(self) -> tuple[CollectiveComparison, ...]:
        """The collectives timed on a shared clock on both sides (step 2b)."""
        return tuple(c for c in self.collectives if c.recorded_last_s is not None and c.replayed_last_s is not None)

    def last_arrival_totals(self) -> tuple[float, float]:
        """Recorded and replayed, summed over :attr:`last_arrival`: last entry to last exit."""
        both = self.last_arrival
        return sum(c.recorded_last_s or 0.0 for c in both), sum(c.replayed_last_s or 0.0 for c in both)

    @property
    def last_arrival_median_ratio(self) -> float:
        return _median([(c.replayed_last_s or 0.0) / c.recorded_last_s for c in self.last_arrival if c.recorded_last_s])

    @property
    def total_ratio(self) -> float:
        return self.replayed_total_s / self.recorded_total_s if self.recorded_total_s > 0 else math.inf

    @property
    def span_ratio(self) -> float:
        return self.replayed_span_s / self.recorded_span_s if self.recorded_span_s > 0 else math.inf

    @property
    def isolated(self) -> tuple[CollectiveComparison, ...]:
        """The collectives recorded without compute alongside on their host (step 6): those a back-to-back
        replay, communication alone, is comparable with."""
        return tuple(c for c in self.collectives if c.isolated)

    @property
    def isolated_ratio(self) -> float:
        rec = sum(c.recorded_s for c in self.isolated)
        return sum(c.replayed_s for c in self.isolated) / rec if rec > 0 else math.nan

    @property
    def isolated_median_ratio(self) -> float:
        return _median([c.ratio for c in self.isolated if c.recorded_s > 0])

    @property
    def overlap_known(self) -> int:
        """How many collectives' recorded compute overlap is known (another rank of the host was recorded)."""
        return sum(c.recorded_overlap is not None for c in self.collectives)

    def worst(self, n: int = WORST_SHOWN) -> list[CollectiveComparison]:
        """The ``n`` collectives whose ratio is farthest from 1 (either way)."""
        scored = [c for c in self.collectives if c.recorded_s > 0 and c.replayed_s > 0]
        return sorted(scored, key=lambda c: -abs(math.log(c.ratio)))[:n]

    def as_dict(self) -> JsonObject:
        """The comparison as JSON (what ``replay run --json`` prints, less the run's id; kept in the run's config)."""
        return {
            "collectives": len(self.collectives),
            "recorded_total_s": self.recorded_total_s,
            "replayed_total_s": self.replayed_total_s,
            "total_ratio": self.total_ratio,
            "median_ratio": self.median_ratio,
            "recorded_max_total_s": self.recorded_max_total_s,
            "replayed_max_total_s": self.replayed_max_total_s,
            "recorded_critical_comm_s": self.recorded_critical_comm_s,
            "replayed_critical_comm_s": self.replayed_critical_comm_s,
            "recorded_span_s": self.recorded_span_s,
            "replayed_span_s": self.replayed_span_s,
            "span_ratio": self.span_ratio,
            "isolated": {
                "collectives": len(self.isolated),
                "overlap_known": self.overlap_known,
                "recorded_total_s": sum(c.recorded_s for c in self.isolated),
                "replayed_total_s": sum(c.replayed_s for c in self.isolated),
                "total_ratio": _finite(self.isolated_ratio),
                "median_ratio": _finite(self.isolated_median_ratio),
            },
            "last_arrival": self._last_arrival_json(),
            "gaps": self.gaps,
            "groups": [{**asdict(g), "ratio": g.ratio} for g in self.groups],
            "worst": [{**asdict(c), "ratio": c.ratio} for c in self.worst()],
            "notes": list(self.notes),
        }

    def _last_arrival_json(self) -> JsonObject:
        rec, rep = self.last_arrival_totals()
        return {
            "collectives": len(self.last_arrival),
            "recorded_total_s": rec,
            "replayed_total_s": rep,
            "total_ratio": _finite(rep / rec if rec > 0 else math.nan),
            "median_ratio": _finite(self.last_arrival_median_ratio),
        }


def _union_s(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


class _Computing:
    """Per rank, when it was outside communication between its first and last recorded call (its gaps: the
    job's compute, or Python between calls); per host, which ranks ran there (step 6)."""

    def __init__(self, plan: ReplayPlan):
        self.gaps: dict[int, tuple[list[float], list[tuple[float, float]]]] = {}
        self.on_host: dict[str, list[int]] = defaultdict(list)
        self.host: dict[int, str | None] = {}
        if plan.backend == "nccl":  # on the GPUs: another rank's compute is on another GPU (step 6)
            return
        for rc in plan.ranks:
            busy = _merged([(c.start_s, c.start_s + c.duration_s) for c in rc.calls])
            gaps = [(a[1], b[0]) for a, b in zip(busy, busy[1:])]
            self.gaps[rc.rank] = ([e for _, e in gaps], gaps)
            if rc.host:
                self.on_host[rc.host].append(rc.rank)
        self.host = {rc.rank: rc.host for rc in plan.ranks}

    def overlap(self, rank: int, start: float, end: float) -> float | None:
        """The share of [start, end] (a call of ``rank``) during which another rank of its host computed."""
        others = [q for q in self.on_host.get(self.host.get(rank) or "", []) if q != rank]
        if not others or end <= start:
            return None
        found: list[tuple[float, float]] = []
        for q in others:
            ends, gaps = self.gaps[q]
            for gs, ge in gaps[bisect.bisect_right(ends, start) :]:
                if gs >= end:
                    break
                found.append((max(gs, start), min(ge, end)))
        return _union_s(found) / (end - start)


class _SharedClock:
    """Whether a group's ranks timed their calls on one clock, recorded and replayed, and on it each collective's
    time from the last rank's entry to the last rank's exit (step 2b)."""

    def __init__(self, plan: ReplayPlan, times: ReplayTimes):
        # Inspector's compact records carry no start (placed to end at the dump), Chakra's no time at all
        self.host = {rc.rank: rc.host for rc in plan.ranks} if plan.source in ("kineto", "monitor") else {}
        self.replayed = len(times.system.hosts) <= 1  # one host: one monotonic clock

    def last_arrival(
        self,
        members: tuple[int, ...],
        recorded: dict[int, tuple[float, list[float], float]],
        replayed: dict[int, list[tuple[float, float]]],
        n_passes: int,
    ) -> tuple[float | None, float | None]:
        if len(recorded) != len(members):
            return None, None
        hosts = {self.host.get(r) for r in members}
        rec = None
        if len(hosts) == 1 and None not in hosts:
            rec = max(s + d for d, _, s in recorded.values()) - max(s for _, _, s in recorded.values())
        rep = None
        if self.replayed and len(replayed) == len(members):
            rep = _median(
                [
                    max(v[p][1] for v in replayed.values()) - max(v[p][0] for v in replayed.values())
                    for p in range(n_passes)
                ]
            )
        return rec, rep


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _first_waits(
    plan: ReplayPlan, joined: dict[tuple[str, int], dict[int, tuple[float, list[float], float]]], n_passes: int
) -> dict[int, tuple[float, list[float]]]:
    """Per rank whose first call is a collective: its wait for late peers in it, recorded (plan.first_waits) and
    per replayed pass (its time in the call less the collective's replayed own time; step 4)."""
    out: dict[int, tuple[float, list[float]]] = {}
    for rank, recorded in first_waits(plan).items():
        first = next(rc.calls[0] for rc in plan.ranks if rc.rank == rank)
        by_rank = joined.get((first.group, 0), {})
        if rank not in by_rank:
            continue
        replayed = by_rank[rank][1]
        own = [min(r[p] for _, r, _ in by_rank.values()) for p in range(n_passes)]
        out[rank] = (recorded, [replayed[p] - own[p] for p in range(n_passes)])
    return out


def compare_replay(plan: ReplayPlan, times: ReplayTimes) -> ReplayComparison:
    """Each collective's replayed time against its recorded one (see the module docstring)."""
    n_passes = min((len(p) for p in times.ranks.values()), default=0)
    if n_passes == 0:
        raise ValueError("the replay timed no pass")
    # per (group, k): rank -> (recorded duration, [replayed duration per pass], recorded start)
    joined: dict[tuple[str, int], dict[int, tuple[float, list[float], float]]] = defaultdict(dict)
    spans: dict[tuple[str, int], dict[int, list[tuple[float, float]]]] = defaultdict(dict)  # replayed, per pass
    shared = _SharedClock(plan, times)
    computing = _Computing(plan)
    meta: dict[tuple[str, int], tuple[str, str, int, int | None]] = {}
    p2p: list[CollectiveComparison] = []
    notes: list[str] = []
    for rc in plan.ranks:
        per_group: dict[str, int] = defaultdict(int)
        passes = times.ranks.get(rc.rank, [])
        for j, c in enumerate(rc.calls):
            replayed = [passes[p][j][1] - passes[p][j][0] for p in range(n_passes)]
            n = len(plan.group(c.group).ranks)
            if c.op in P2P_OPS:
                p2p.append(
                    CollectiveComparison(
                        c.group,
                        j,
                        c.op,
                        c.dtype,
                        size_bytes(c, n),
                        n,
                        c.duration_s,
                        _median(replayed),
                        c.step,
                        rc.rank,
                        c.duration_s,
                        _median(replayed),
                        computing.overlap(rc.rank, c.start_s, c.start_s + c.duration_s),
                    )
                )
                continue
            k = per_group[c.group]
            per_group[c.group] += 1
            joined[(c.group, k)][rc.rank] = (c.duration_s, replayed, c.start_s)
            spans[(c.group, k)][rc.rank] = [passes[p][j] for p in range(n_passes)]
            meta.setdefault((c.group, k), (c.op, c.dtype, size_bytes(c, n), c.step))
    collectives: list[CollectiveComparison] = []
    partial = 0
    for (group, k), by_rank in sorted(joined.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        members = plan.group(group).ranks
        if len(by_rank) != len(members):
            partial += 1
        own, (recorded_s, _, own_start) = min(by_rank.items(), key=lambda kv: kv[1][0])
        replayed_s = _median([min(r[p] for _, r, _ in by_rank.values()) for p in range(n_passes)])
        recorded_max = max(d for d, _, _ in by_rank.values())
        replayed_max = _median([max(r[p] for _, r, _ in by_rank.values()) for p in range(n_passes)])
        op, dtype, size, step = meta[(group, k)]
        overlap = computing.overlap(own, own_start, own_start + recorded_s)
        rec_last, rep_last = shared.last_arrival(members, by_rank, spans[(group, k)], n_passes)
        collectives.append(
            CollectiveComparison(
                group,
                k,
                op,
                dtype,
                size,
                len(members),
                recorded_s,
                replayed_s,
                step,
                None,
                recorded_max,
                replayed_max,
                overlap,
                rec_last,
                rep_last,
            )
        )
    if partial:
        notes.append(f"{partial} collectives were recorded on only some ranks of their group (traces missing)")
    everything = collectives + p2p
    groups = []
    for name in sorted({c.group for c in everything}):
        mine = [c for c in everything if c.group == name]
        groups.append(
            GroupComparison(
                name,
                len(plan.group(name).ranks),
                len(mine),
                sum(c.recorded_s for c in mine),
                sum(c.replayed_s for c in mine),
                _median([c.ratio for c in mine if c.recorded_s > 0]),
            )
        )
    rec_comm, rep_comm, rec_span, rep_span = [], [], [], []
    first_wait = _first_waits(plan, joined, n_passes)
    for rc in plan.ranks:
        if not rc.calls:
            continue
        rec = [(c.start_s, c.start_s + c.duration_s) for c in rc.calls]
        rec_comm.append(_union_s(rec))
        rec_wait, rep_wait = first_wait.get(rc.rank, (0.0, [0.0] * n_passes))
        rec_span.append(max(e for _, e in rec) - rec[0][0] - rec_wait)
        passes = times.ranks.get(rc.rank, [])
        rep_comm.append(_median([_union_s(passes[p]) for p in range(n_passes)]))
        rep_span.append(_median([passes[p][-1][1] - passes[p][0][0] - rep_wait[p] for p in range(n_passes)]))
    return ReplayComparison(
        collectives=tuple(everything),
        groups=tuple(groups),
        recorded_total_s=sum(c.recorded_s for c in everything),
        replayed_total_s=sum(c.replayed_s for c in everything),
        median_ratio=_median([c.ratio for c in everything if c.recorded_s > 0]),
        recorded_max_total_s=sum(c.recorded_max_s for c in everything),
        replayed_max_total_s=sum(c.replayed_max_s for c in everything),
        recorded_critical_comm_s=max(rec_comm, default=0.0),
        replayed_critical_comm_s=max(rep_comm, default=0.0),
        recorded_span_s=max(rec_span, default=0.0),
        replayed_span_s=max(rep_span, default=0.0),
        gaps=times.settings.gaps,
        notes=tuple(notes),
    )


def replay_run(plan: ReplayPlan, times: ReplayTimes, comparison: ReplayComparison, tag: str | None = None) -> Run:
    """The replay as a run of source ``replay``: a measurement per (group, op, dtype, size) (step 5)."""
    samples: dict[tuple[str, str, str, int, int], list[float]] = defaultdict(list)
    for c in comparison.collectives:
        if c.op in P2P_OPS:
            continue
        samples[(c.group, c.op, c.dtype, c.size_bytes, c.group_size)].append(c.replayed_s)
    settings = times.settings
    measurements = []
    for (group, op, dtype, size, n), values in sorted(samples.items()):
        spec = OPS[op]
        count = size // DTYPE_SIZES[dtype] // (n if spec.per_rank_split else 1)
        measurements.append(
            Measurement(
                op=op,
                dtype=dtype,
                size_bytes=size,
                count=count,
                in_place=op in ("all_reduce", "broadcast", "reduce"),
                world_size=n,
                samples_s=tuple(values),
                redop="sum" if spec.reduces else None,
                root=plan.group(group).ranks[0] if spec.has_root else None,
                algo=settings.algo,
                group=group,
            )
        )
    notes = [*plan.notes, *comparison.notes]
    if settings.timeline:
        notes.append("calls issued at their recorded offsets, asynchronously (--timeline)")
    if settings.gaps:
        notes.append(f"gaps replayed with {settings.compute}: {GAP_STAND_INS[settings.compute]}")
    if any(c.op in P2P_OPS for c in comparison.collectives):
        notes.append("point-to-point calls are compared but not stored as measurements")
    return Run(
        run_id=uuid.uuid4().hex,
        started_at=times.started_at,
        system=times.system,
        measurements=tuple(measurements),
        tag=tag,
        command_line=times.command_line,
        source="replay",
        config=ReplayRun(
            plan_source=plan.source,
            plan_backend=plan.backend,
            plan_world_size=plan.world_size,
            plan_calls=plan.n_calls,
            plan_files=plan.files[:64],
            settings=settings.as_dict(),
            comparison=comparison.as_dict(),
        ),
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class ReplayReport:
    """What a replay gives: the times the ranks took, the comparison with the recording, and the run to store."""

    times: ReplayTimes
    comparison: ReplayComparison
    run: Run

    def as_dict(self) -> JsonObject:
        """What ``commlens replay run --json`` prints: the stored run's id and the comparison."""
        return {"run_id": self.run.run_id, **self.comparison.as_dict()}


def report_times(plan: ReplayPlan, times: ReplayTimes, *, tag: str | None = None) -> ReplayReport:
    """The report of ``times`` replayed from ``plan`` (by :func:`commlens.replay.run`, or by ranks an external
    launcher started: ``commlens replay report``); its run tagged ``tag``."""
    comparison = compare_replay(plan, times)
    return ReplayReport(times, comparison, replay_run(plan, times, comparison, tag=tag))
