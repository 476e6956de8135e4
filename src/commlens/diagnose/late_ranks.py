"""Late ranks from per-rank durations of the same collective instances: one method for every source.

A synchronizing collective (all-reduce, all-gather, reduce-scatter, all-to-all) cannot finish on any rank
before the last rank has arrived, so every rank that arrived earlier spends the wait inside it: the rank
that arrives last runs shortest, and the others' durations exceed its by about how late it was. This holds
for any timer that starts when the rank enters the collective, so the same function judges:

- NCCL Inspector records (``coll_exec_time_us``, joined by communicator, collective and ``coll_sn``),
- the commlens monitor's records (joined by process group and sequence number),
- nccl-tests ``-J -I 1`` per-process rows (``per_process_max_times_us``: one instance per iteration),
- a commlens run's per-rank samples.

Timestamps, where a source has them, are a second clue (:attr:`LateRank.start_clue`). An instance is a
:class:`Instance`; :func:`find_late_ranks` returns a :class:`LateRankReport`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from commlens.errors import CommlensError
from commlens.results.units import format_size

if TYPE_CHECKING:
    from commlens.results.records import Run

__all__ = [
    "Instance",
    "LateRank",
    "LateRankError",
    "LateRankParams",
    "LateRankReport",
    "find_late_ranks",
    "instances_from_run",
]

# Collectives no rank leaves before every rank has arrived (the others' roots need not wait).
SYNCHRONIZING = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})


class LateRankError(CommlensError, ValueError):
    """Input that cannot be judged: no instance joined on two ranks or more, bad parameters."""


@dataclass(frozen=True)
class LateRankParams:
    """Thresholds of :func:`find_late_ranks`, each checked when built."""

    late_threshold_s: float = 1e-3  # the gap between the late ranks' and the waiting ranks' durations
    gap_factor: float = 2.0  # that gap must also exceed this many times the waiting ranks' own spread
    window: int = 5  # the onset: the first late instance where the rank is late in most of the next `window`
    min_fraction: float = 0.5  # named when late in at least this fraction of the instances since the onset
    min_occurrences: int = 3  # ... and in at least this many

    def __post_init__(self) -> None:
        if not (math.isfinite(self.late_threshold_s) and self.late_threshold_s > 0):
            raise LateRankError(f"late_threshold_s must be a finite number > 0, got {self.late_threshold_s}")
        if not (math.isfinite(self.gap_factor) and self.gap_factor >= 1):
            raise LateRankError(f"gap_factor must be a finite number >= 1, got {self.gap_factor}")
        if not 1 <= self.window <= 1000:
            raise LateRankError(f"window must be in 1..1000, got {self.window}")
        if not (0 < self.min_fraction <= 1):
            raise LateRankError(f"min_fraction must be in (0, 1], got {self.min_fraction}")
        if self.min_occurrences < 1:
            raise LateRankError(f"min_occurrences must be >= 1, got {self.min_occurrences}")


@dataclass(frozen=True, slots=True)
class Instance:
    """One collective instance: every rank's duration (and end, on its own clock, where known)."""

    group: str  # communicator id, process group, or "<op> <size> <placement>" for a benchmark
    op: str
    seq: int  # the source's own sequence number (or iteration)
    ranks: tuple[int, ...]
    durations_s: tuple[float, ...]
    ends_s: tuple[float, ...] | None = None  # epoch seconds on each rank's clock
    starts_independent: bool = False  # True where start = end - duration is a timestamp of its own (verbose)
    label: str = ""  # how to name it to a user, when the key alone does not ("1 MiB in-place, iteration 4")


@dataclass(frozen=True)
class LateRank:
    """A rank that arrived late at a group's collectives from ``onset_seq`` on."""

    rank: int
    host: str | None
    group: str
    group_size: int
    onset_op: str
    onset_seq: int
    onset_label: str
    onset_time_s: float | None  # the onset instance's end on this rank's clock (epoch s), where known
    lateness_s: float  # median, over the instances it was late in since the onset, of the wait it caused
    late_instances: int
    judged_instances: int  # instances since the onset
    start_clue: str  # what timestamps say: "agrees (k of n)", "disagrees (k of n)" or why none

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "group": self.group,
            "group_size": self.group_size,
            "onset": {"op": self.onset_op, "seq": self.onset_seq, "label": self.onset_label},
            "onset_time_s": self.onset_time_s,
            "lateness_s": self.lateness_s,
            "late_instances": self.late_instances,
            "judged_instances": self.judged_instances,
            "start_clue": self.start_clue,
        }


@dataclass(frozen=True)
class LateRankReport:
    source: str
    groups: dict[str, int]  # group -> ranks judged
    judged: int  # instances with every rank's duration
    partial: int  # instances some rank has no record of (left out)
    not_synchronizing: int  # instances of broadcast/reduce (left out: the root need not wait)
    late: tuple[LateRank, ...]
    params: LateRankParams
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "method": "durations: the last rank to arrive runs shortest while the others wait for it",
            "groups": self.groups,
            "judged_instances": self.judged,
            "partial_instances": self.partial,
            "not_synchronizing_instances": self.not_synchronizing,
            "late_threshold_s": self.params.late_threshold_s,
            "late_ranks": [r.to_json() for r in self.late],
            "notes": list(self.notes),
        }


def _late_set(durations: Sequence[float], params: LateRankParams) -> tuple[list[int], float] | None:
    """Step 2 of :func:`find_late_ranks`: the indices of the late ranks of one instance and the gap, or None."""
    n = len(durations)
    order = sorted(range(n), key=durations.__getitem__)
    d = [durations[i] for i in order]
    best_k, best_gap = 0, -1.0
    for k in range(1, n // 2 + 1):  # a late set is a minority: at most half the ranks
        gap = d[k] - d[k - 1]
        if gap > best_gap:
            best_k, best_gap = k, gap
    spread = d[-1] - d[best_k]  # how far apart the waiting ranks are among themselves
    if best_gap > params.late_threshold_s and best_gap > params.gap_factor * spread:
        return order[:best_k], best_gap
    return None


def _ordered(instances: list[Instance]) -> list[Instance]:
    """Instances in the order they ran: by their median end where ends are known, else by sequence number."""
    if all(i.ends_s is not None for i in instances):
        ends = _table([i.ends_s or (0.0,) for i in instances])
        if ends is not None:  # every instance has as many ranks: the medians at once
            medians = _medians(ends).tolist()
            keyed = sorted(range(len(instances)), key=lambda k: (medians[k], instances[k].seq))
            return [instances[k] for k in keyed]
        return sorted(instances, key=lambda i: (statistics.median(i.ends_s or (0.0,)), i.seq))
    return sorted(instances, key=lambda i: i.seq)


def _table(rows: list[tuple[float, ...]]) -> np.ndarray | None:
    """Rows of equal length and finite values as a 2-D array; None otherwise (then judged one at a time)."""
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    table = np.array(rows, dtype=np.float64)
    return table if np.isfinite(table).all() else None


def _medians(table: np.ndarray, axis: int = 1) -> np.ndarray:
    """statistics.median of each row (or column): the middle value, or the mean of the middle two, as it computes."""
    ordered = np.sort(table, axis=axis)
    n = ordered.shape[axis]
    middle = np.take(ordered, n // 2, axis=axis)
    if n % 2:
        return middle
    return (np.take(ordered, n // 2 - 1, axis=axis) + middle) / 2


def _late_sets(durations: np.ndarray, params: LateRankParams) -> list[tuple[int, list[int], float] | None]:
    """Step 2 for every instance at once (rows of ``durations``): per row, None or (k, the late ranks' indices,
    the waiting ranks' median duration), as :func:`_late_set` and statistics.median give them."""
    m, n = durations.shape
    order = np.argsort(durations, axis=1, kind="stable")  # sorted() is stable: ties keep the ranks' order
    d = np.take_along_axis(durations, order, axis=1)
    gaps = d[:, 1 : n // 2 + 1] - d[:, : n // 2]
    best = np.argmax(gaps, axis=1)  # the first largest gap, as the loop's strict > keeps it
    rows = np.arange(m)
    best_gap = gaps[rows, best]
    k = best + 1
    spread = d[:, -1] - d[rows, k]
    late = (best_gap > params.late_threshold_s) & (best_gap > params.gap_factor * spread)
    out: list[tuple[int, list[int], float] | None] = [None] * m
    for row in np.flatnonzero(late).tolist():
        kk = int(k[row])
        waiting = d[row, kk:]
        w = len(waiting)
        typical = float(waiting[w // 2]) if w % 2 else float((waiting[w // 2 - 1] + waiting[w // 2]) / 2)
        out[row] = (kk, order[row, :kk].tolist(), typical)
    return out


def _onset(flags: list[bool], params: LateRankParams) -> int | None:
    """Step 3: the first late instance after which the rank is late in most of the next ``window``."""
    need = params.window // 2 + 1 if params.window > 1 else 1
    for i, flagged in enumerate(flags):
        if flagged and sum(flags[i : i + params.window]) >= min(need, len(flags) - i):
            return i
    return None


def _start_clue(ordered: list[Instance], j: int, late_at: list[int]) -> str:
    """Step 5: where starts are timestamps of their own, is the rank's start the latest (clock offsets removed)?"""
    timed = [i for i in ordered if i.ends_s is not None]
    if not timed:
        return "none: this source has durations only"
    if not ordered[0].starts_independent:
        return "none: its start is its end (NCCL Inspector compact: the dump time) minus its duration"
    n = len(ordered[0].ranks)
    # Each rank's clock offset to rank 0: the median difference of the ends (a synchronizing collective
    # ends at about the same moment everywhere), over the instances whose ends every rank recorded.
    table = _table([i.ends_s or () for i in timed])
    if table is not None and table.shape[1] == n:
        offsets = _medians(table - table[:, :1], axis=0).tolist()
    else:
        offsets = [statistics.median((i.ends_s or ())[q] - (i.ends_s or ())[0] for i in timed) for q in range(n)]
    agree = 0
    late_at = [idx for idx in late_at if ordered[idx].ends_s is not None]
    if not late_at:
        return "none: no late instance has every rank's end time"
    for idx in late_at:
        inst = ordered[idx]
        ends = inst.ends_s or ()
        starts = [ends[q] - offsets[q] - inst.durations_s[q] for q in range(n)]
        if max(range(n), key=starts.__getitem__) == j:
            agree += 1
    verdict = "agrees" if agree * 2 > len(late_at) else "disagrees"
    return f"{verdict}: its start is the latest in {agree} of {len(late_at)} late instances"


def find_late_ranks(
    instances: list[Instance],
    *,
    source: str,
    hosts: dict[tuple[str, int], str | None] | None = None,
    partial: int = 0,
    params: LateRankParams = LateRankParams(),
    notes: Sequence[str] = (),
) -> LateRankReport:
    """Name the ranks that arrive late at a group's synchronizing collectives, with onset and lateness.

    1. Only synchronizing collectives with a duration from every rank of their group are judged (a
       broadcast's root does not wait for its receivers; a rank missing from an instance leaves it out).
    2. Per instance, the durations are sorted; the late set is the k shortest (k at most half the ranks)
       before the largest gap in the sorted durations. The instance is late-led when that gap exceeds
       ``late_threshold_s`` and ``gap_factor`` times the spread of the remaining (waiting) ranks: they
       all waited about as long, for the same late ranks.
    3. Per group and rank, over the instances in the order they ran: the onset is the first instance in
       which the rank is late and after which it is late in most (more than half) of the next ``window``.
    4. A rank is named when, from its onset on, it is late in at least ``min_fraction`` of the instances
       and in at least ``min_occurrences``. Its lateness is the median over those instances of the
       waiting ranks' median duration minus its own: how long the others waited for it.
    5. Timestamps are a second clue where they are independent of the duration (NCCL Inspector's verbose
       kernel start times; the monitor's start times): the rank's start, clock offsets removed, should
       be the latest of the instance. The clue is reported; the verdict rests on durations.
    """
    hosts = hosts or {}
    by_group: dict[str, list[Instance]] = defaultdict(list)
    skipped_ops = 0
    for inst in instances:
        if len(inst.ranks) < 2:
            continue
        if inst.op not in SYNCHRONIZING:
            skipped_ops += 1
            continue
        by_group[inst.group].append(inst)
    if not by_group:
        raise LateRankError(
            f"{source}: no synchronizing collective with a duration from every rank of its group "
            f"({partial} instances lacked a rank, {skipped_ops} were broadcasts or reduces): nothing to judge"
        )
    late: list[LateRank] = []
    groups: dict[str, int] = {}
    judged = 0
    for group, group_instances in sorted(by_group.items(), key=lambda kv: (-len(kv[1][0].ranks), kv[0])):
        # the ranks must be the same set in every instance of a group (the joiner guarantees it)
        ranks = group_instances[0].ranks
        ordered = [i for i in _ordered(group_instances) if i.ranks == ranks]
        groups[group] = len(ranks)
        judged += len(ordered)
        flags = [[False] * len(ordered) for _ in ranks]
        waits: list[dict[int, float]] = [{} for _ in ranks]
        table = _table([inst.durations_s for inst in ordered])
        if table is not None and table.shape[1] >= 2:  # every instance at once
            for idx, got in enumerate(_late_sets(table, params)):
                if got is None:
                    continue
                _k, late_idx, typical = got
                inst = ordered[idx]
                for j in late_idx:
                    flags[j][idx] = True
                    waits[j][idx] = typical - inst.durations_s[j]
        else:
            for idx, inst in enumerate(ordered):
                found = _late_set(inst.durations_s, params)
                if found is None:
                    continue
                late_idx, _gap = found
                waiting = [d for q, d in enumerate(inst.durations_s) if q not in late_idx]
                typical = statistics.median(waiting)
                for j in late_idx:
                    flags[j][idx] = True
                    waits[j][idx] = typical - inst.durations_s[j]
        for j, rank in enumerate(ranks):
            onset = _onset(flags[j], params)
            if onset is None:
                continue
            since = flags[j][onset:]
            count = sum(since)
            if count < params.min_occurrences or count < params.min_fraction * len(since):
                continue
            at = [i for i in range(onset, len(ordered)) if flags[j][i]]
            first = ordered[onset]
            late.append(
                LateRank(
                    rank=rank,
                    host=hosts.get((group, rank)),
                    group=group,
                    group_size=len(ranks),
                    onset_op=first.op,
                    onset_seq=first.seq,
                    onset_label=first.label or f"{first.op} seq {first.seq}",
                    onset_time_s=first.ends_s[j] if first.ends_s is not None else None,
                    lateness_s=statistics.median(waits[j][i] for i in at),
                    late_instances=count,
                    judged_instances=len(since),
                    start_clue=_start_clue(ordered, j, at),
                )
            )
    all_notes = list(notes)
    if partial:
        all_notes.append(f"{partial} instances left out: some rank of the group has no record of them")
    if skipped_ops:
        all_notes.append(f"{skipped_ops} broadcast/reduce instances left out: their root need not wait")
    return LateRankReport(
        source=source,
        groups=groups,
        judged=judged,
        partial=partial,
        not_synchronizing=skipped_ops,
        late=tuple(late),
        params=params,
        notes=tuple(all_notes),
    )


def instances_from_run(run: Run) -> tuple[list[Instance], dict[tuple[str, int], str | None]]:
    """A benchmark run's per-rank samples (nccl-tests ``per_process_max_times_us``, commlens' per-rank samples)
    as instances: one per (op, size, placement, iteration), ranks in process order.

    Hosts are taken from the run's system (its hosts in order, each with its ranks per host), which holds
    when processes are numbered host by host, as ``mpirun`` and ``srun`` place them.
    """
    hosts: dict[tuple[str, int], str | None] = {}
    by_rank: list[str] = []
    for host in run.system.hosts:
        by_rank.extend([host] * run.system.ranks_per_host.get(host, 0))
    out: list[Instance] = []
    for m in run.measurements:
        if m.rank_samples_s is None:
            continue
        group = f"{m.op} {format_size(m.size_bytes)} {'in-place' if m.in_place else 'out-of-place'}"
        ranks = tuple(range(len(m.rank_samples_s)))
        for r in ranks:
            hosts[(group, r)] = by_rank[r] if len(by_rank) == len(ranks) else None
        for i, durations in enumerate(zip(*m.rank_samples_s)):
            out.append(
                Instance(
                    group=group,
                    op=m.op,
                    seq=i,
                    ranks=ranks,
                    durations_s=tuple(durations),
                    label=f"{group}, iteration {i}",
                )
            )
    return out, hosts
