"""Stragglers: ranks that arrive late at collectives, and ranks slow within them.

Input is one table, one row per (op, occurrence, rank) with the rank's start
and end of that collective on the rank's own clock (:class:`CollectiveTable`),
built from PyTorch profiler (Kineto) Chrome traces, one per rank, or from a
commlens run's per-rank samples (durations only). :func:`detect_stragglers`
is a plain function over that table.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CollectiveTable",
    "Straggler",
    "StragglerError",
    "StragglerParams",
    "StragglerReport",
    "detect_stragglers",
    "load_kineto_traces",
    "load_run_samples",
    "table_from_durations",
]

_COLLECTIVE_PREFIXES = ("gloo:", "nccl:")


class StragglerError(ValueError):
    """Input that cannot be analysed (unreadable trace, ranks that disagree on the collectives run)."""


@dataclass(frozen=True)
class StragglerParams:
    """Thresholds of the detector."""

    late_threshold_s: float = 1e-3  # a rank's median lateness above the ranks' typical lateness by more than this
    slow_factor: float = 1.5  # own time (after the last arrival) above this factor times the ranks' median

    def __post_init__(self) -> None:
        if self.late_threshold_s <= 0:
            raise ValueError(f"late_threshold_s must be > 0, got {self.late_threshold_s}")
        if self.slow_factor <= 1:
            raise ValueError(f"slow_factor must be > 1, got {self.slow_factor}")


@dataclass(frozen=True)
class CollectiveTable:
    """Per-rank timestamps of the same collectives: ``starts_s[op][i][rank]``, ``ends_s[op][i][rank]``.

    ``hosts[rank]`` names each rank's clock domain: ranks on one host share a
    clock. ``arrival_known`` is False when only durations were recorded (the
    starts are then ``-duration`` with every end at 0).
    """

    source: str
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    starts_s: dict[str, list[list[float]]]
    ends_s: dict[str, list[list[float]]]
    arrival_known: bool = True


@dataclass(frozen=True)
class Straggler:
    rank: int
    kind: str  # "late_arrival" or "slow_within"
    op: str
    excess_s: float  # median lateness (or own time) above the ranks' median


@dataclass(frozen=True)
class StragglerReport:
    source: str
    ranks: tuple[int, ...]
    n_collectives: int
    arrival_known: bool
    shared_clock: bool
    ranks_table: list[dict[str, Any]]  # one row per (op, rank)
    stragglers: tuple[Straggler, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "ranks": list(self.ranks), "n_collectives": self.n_collectives,
            "arrival_known": self.arrival_known, "shared_clock": self.shared_clock,
            "rows": self.ranks_table,
            "stragglers": [{"rank": s.rank, "kind": s.kind, "op": s.op, "excess_s": s.excess_s}
                           for s in self.stragglers],
        }


def _collective_events(path: Path) -> tuple[int, str, dict[str, list[tuple[float, float]]]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise StragglerError(f"{path}: not a readable Chrome trace ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise StragglerError(f"{path}: not a Chrome trace (no traceEvents)")
    info = data.get("distributedInfo") or {}
    if "rank" not in info:
        raise StragglerError(f"{path}: no distributedInfo.rank; was the trace recorded under torch.distributed?")
    events: dict[str, list[tuple[float, float]]] = {}
    for e in data["traceEvents"]:
        name = e.get("name", "")
        if e.get("ph") == "X" and isinstance(name, str) and name.startswith(_COLLECTIVE_PREFIXES):
            ts_s = float(e["ts"]) * 1e-6  # Chrome traces are in µs
            events.setdefault(name, []).append((ts_s, ts_s + float(e.get("dur", 0.0)) * 1e-6))
    if not events:
        raise StragglerError(f"{path}: no collective events (names starting with gloo: or nccl:)")
    return int(info["rank"]), str(data.get("host_name", "")), {k: sorted(v) for k, v in events.items()}


def load_kineto_traces(paths: list[Path]) -> CollectiveTable:
    """Read one Chrome trace per rank; pair each op's k-th occurrence across ranks.

    The collective is the ``gloo:<op>`` / ``nccl:<op>`` span the process group
    records when it runs the collective (on gloo, on its worker thread): it
    starts when this rank's part starts and ends when it completes.
    """
    per_rank: dict[int, tuple[str, dict[str, list[tuple[float, float]]]]] = {}
    for path in paths:
        rank, host, events = _collective_events(Path(path))
        if rank in per_rank:
            raise StragglerError(f"{path}: a second trace of rank {rank}")
        per_rank[rank] = (host, events)
    if len(per_rank) < 2:
        raise StragglerError("need traces of at least 2 ranks")
    ranks = tuple(sorted(per_rank))
    ops = sorted(set.intersection(*(set(ev) for _, ev in per_rank.values())))
    starts: dict[str, list[list[float]]] = {}
    ends: dict[str, list[list[float]]] = {}
    for op in ops:
        counts = {r: len(per_rank[r][1][op]) for r in ranks}
        if len(set(counts.values())) != 1:
            raise StragglerError(f"ranks recorded different numbers of {op}: {counts}")
        n = counts[ranks[0]]
        starts[op] = [[per_rank[r][1][op][i][0] for r in ranks] for i in range(n)]
        ends[op] = [[per_rank[r][1][op][i][1] for r in ranks] for i in range(n)]
    return CollectiveTable(source="kineto", ranks=ranks, hosts=tuple(per_rank[r][0] for r in ranks),
                           starts_s=starts, ends_s=ends)


def table_from_durations(op: str, rank_samples_s: list[list[float]] | tuple[tuple[float, ...], ...],
                         source: str = "commlens") -> CollectiveTable:
    """A table from per-rank durations ``[rank][iteration]``: ends put at 0, starts at ``-duration``."""
    ranks = tuple(range(len(rank_samples_s)))
    iterations = list(zip(*rank_samples_s))
    return CollectiveTable(source=source, ranks=ranks, hosts=tuple(f"rank{r}" for r in ranks),
                           starts_s={op: [[-d for d in it] for it in iterations]},
                           ends_s={op: [[0.0] * len(ranks) for _ in iterations]}, arrival_known=False)


def load_run_samples(run_id: str, db: str | None) -> CollectiveTable:
    """A table from a stored run: each measurement with per-rank samples, one op per (op, size)."""
    from commlens.store import Store

    store = Store.open(db)
    run = store.get_run(run_id)
    starts: dict[str, list[list[float]]] = {}
    ends: dict[str, list[list[float]]] = {}
    ranks: tuple[int, ...] = ()
    for m in run.measurements:
        if m.rank_samples_s is None:
            continue
        t = table_from_durations(f"{m.op}/{m.size_bytes}B", m.rank_samples_s)
        ranks = t.ranks
        starts.update(t.starts_s)
        ends.update(t.ends_s)
    if not starts:
        raise StragglerError(f"run {run_id} has no per-rank samples")
    return CollectiveTable(source=f"run {run_id}", ranks=ranks, hosts=tuple(f"rank{r}" for r in ranks),
                           starts_s=starts, ends_s=ends, arrival_known=False)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def detect_stragglers(table: CollectiveTable, params: StragglerParams = StragglerParams()) -> StragglerReport:
    """Find ranks that arrive late persistently, and ranks slow within collectives.

    1. Clocks: ranks on one host share a clock. When all ranks are on one
       host, offsets are 0. Otherwise, assuming a collective ends at nearly
       the same instant on every rank, each host's offset is the median, over
       all collectives and that host's ranks, of ``end_r - end_ref`` (the
       reference is the first rank's host); it is subtracted from that host's
       timestamps. With durations only, every end is already put at 0.
    2. Per collective occurrence ``i`` of op ``o`` (the k-th ``o`` on every
       rank is the same collective), arrival lateness of rank ``r`` is
       ``start[i][r] - min_q start[i][q]``. With durations only this is
       ``max_q dur[i][q] - dur[i][r]``: peers of a late rank wait for it, so
       its own duration is the shortest.
    3. Own time (shared clock only): ``end[i][r] - max_q start[i][q]``, the
       time rank ``r`` spent in the collective once every rank had arrived.
       Under step 1's assumption (separate hosts) or with durations only it
       is the same on every rank by construction, so it is not judged.
    4. Per op and rank: median and 90th percentile of lateness, the fraction
       of occurrences in which the rank arrived last, the median own time.
    5. A rank is a *late arriver* for an op when its median lateness exceeds
       the median over ranks of those medians by more than
       ``late_threshold_s``: late in at least half of the occurrences, so
       persistently, not once.
    6. A rank is *slow within* an op when its median own time exceeds
       ``slow_factor`` times the median over ranks of median own times and
       the excess is above ``late_threshold_s``.
    """
    ranks = table.ranks
    hosts = table.hosts
    shared_clock = len(set(hosts)) == 1 or not table.arrival_known
    offsets = [0.0] * len(ranks)
    if not shared_clock:
        ref = hosts[0]
        for host in sorted(set(hosts)):
            idx = [j for j, h in enumerate(hosts) if h == host]
            diffs = [ends[j] - ends[0] for op in table.ends_s for ends in table.ends_s[op] for j in idx]
            offset = 0.0 if host == ref else statistics.median(diffs)
            for j in idx:
                offsets[j] = offset
    judge_own = table.arrival_known and len(set(hosts)) == 1
    rows: list[dict[str, Any]] = []
    found: list[Straggler] = []
    n_collectives = 0
    for op in sorted(table.starts_s):
        starts = [[s - offsets[j] for j, s in enumerate(occ)] for occ in table.starts_s[op]]
        ends = [[e - offsets[j] for j, e in enumerate(occ)] for occ in table.ends_s[op]]
        n_collectives += len(starts)
        lateness = [[s - min(occ) for s in occ] for occ in starts]
        own = [[e - max(s_occ) for e in e_occ] for s_occ, e_occ in zip(starts, ends)]
        last = [max(range(len(ranks)), key=lambda j, occ=occ: occ[j]) for occ in starts]
        late_p50 = [statistics.median(occ[j] for occ in lateness) for j in range(len(ranks))]
        own_p50 = [statistics.median(occ[j] for occ in own) for j in range(len(ranks))]
        typical_late = statistics.median(late_p50)
        typical_own = statistics.median(own_p50)
        for j, rank in enumerate(ranks):
            verdicts = []
            excess_late = late_p50[j] - typical_late
            if excess_late > params.late_threshold_s:
                verdicts.append("late_arrival")
                found.append(Straggler(rank, "late_arrival", op, excess_late))
            excess_own = own_p50[j] - typical_own
            if judge_own and own_p50[j] > params.slow_factor * typical_own and excess_own > params.late_threshold_s:
                verdicts.append("slow_within")
                found.append(Straggler(rank, "slow_within", op, excess_own))
            rows.append({
                "op": op, "rank": rank, "host": hosts[j], "clock_offset_s": offsets[j],
                "lateness_p50_s": late_p50[j],
                "lateness_p90_s": _quantile([occ[j] for occ in lateness], 0.9),
                "last_arrival_fraction": (sum(1 for x in last if x == j) / len(last)) if table.arrival_known
                else None,
                "own_time_p50_s": own_p50[j] if judge_own else None,
                "verdicts": verdicts,
            })
    return StragglerReport(source=table.source, ranks=ranks, n_collectives=n_collectives,
                           arrival_known=table.arrival_known, shared_clock=shared_clock, ranks_table=rows,
                           stragglers=tuple(found))
