"""Stragglers: ranks that arrive late at collectives, and ranks slow within them.

Input is one table, one row per (collective, occurrence, rank) with the rank's
start and end of that collective on the rank's own clock
(:class:`CollectiveTable`), built from PyTorch profiler (Kineto) traces, one
per rank (read by :mod:`commlens.ingest.kineto`, matched across ranks by
:mod:`commlens.diagnose.trace_match`), or from a commlens run's per-rank
samples (durations only). :func:`detect_stragglers` is a plain function over
that table.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from commlens.diagnose.trace_match import MatchError, match_collectives
from commlens.errors import CommlensError
from commlens.ingest.kineto import MAX_TRACE_BYTES, SYNCHRONIZING_OPS, KinetoTraceError, read_kineto_trace
from commlens.ops import UnknownOpError, get_op
from commlens.results.jsonvalue import JsonObject

if TYPE_CHECKING:
    from commlens.results.records import Run

__all__ = [
    "CLOCK_METHODS",
    "CollectiveTable",
    "Straggler",
    "StragglerError",
    "StragglerParams",
    "StragglerReport",
    "detect_stragglers",
    "is_synchronizing",
    "load_kineto_traces",
    "table_from_durations",
    "table_from_run",
]

# Timestamps are printed in µs (with ns decimals): a value below zero by more than this is not rounding.
_READING_TOLERANCE_S = 1e-6

CLOCK_METHODS: dict[str, str] = {
    "shared_clock": "one host, one clock: lateness from start times",
    "estimated_offsets": "clock offsets estimated from the ends of synchronizing collectives, removed from starts",
    "durations": "no shared clock: from durations, as HTA judges NCCL kernels (a synchronizing collective runs "
    "until every rank has arrived, so the rank that arrives last runs shortest)",
}


class StragglerError(CommlensError, ValueError):
    """Input that cannot be analysed (unreadable trace, unmatched ranks, impossible values)."""


@dataclass(frozen=True)
class StragglerParams:
    """Thresholds of the detector."""

    late_threshold_s: float = 1e-3  # a rank's median lateness above the ranks' typical lateness by more than this
    slow_factor: float = 1.5  # own time (after the last arrival) above this factor times the ranks' median
    end_spread_s: float = 10e-3  # ends of one synchronizing collective further apart than this: not one collective
    min_occurrences: int = 2  # a collective seen fewer times is shown as not judged: one late arrival is no pattern

    def __post_init__(self) -> None:
        # `not x > bound`: a NaN compares false with everything and would turn the check off
        if not (math.isfinite(self.late_threshold_s) and self.late_threshold_s > 0):
            raise StragglerError(f"late_threshold_s must be a finite number > 0, got {self.late_threshold_s}")
        if not (math.isfinite(self.slow_factor) and self.slow_factor > 1):
            raise StragglerError(f"slow_factor must be a finite number > 1, got {self.slow_factor}")
        if self.min_occurrences < 1:
            raise StragglerError(f"min_occurrences must be >= 1, got {self.min_occurrences}")
        if not (math.isfinite(self.end_spread_s) and self.end_spread_s > 0):
            raise StragglerError(f"end_spread_s must be > 0, got {self.end_spread_s}")


@dataclass(frozen=True)
class CollectiveTable:
    """Per-rank timestamps of the same collectives: ``starts_s[label][i][j]``, ``ends_s[label][i][j]``.

    ``hosts[j]`` names rank ``ranks[j]``'s clock domain (ranks on one host share
    a clock; None where the trace does not say). ``arrival_known`` is False when
    only durations were recorded (starts are then ``-duration``, every end 0).
    ``synchronizing`` holds the labels whose op makes every rank wait for all.
    """

    source: str
    ranks: tuple[int, ...]
    hosts: tuple[str | None, ...]
    starts_s: dict[str, list[list[float]]]
    ends_s: dict[str, list[list[float]]]
    arrival_known: bool = True
    synchronizing: frozenset[str] = frozenset()
    span: str = "durations"  # what a start/end is: "gpu_kernel", "gpu_user_annotation", "cpu", "durations"
    matching: JsonObject | None = None  # how the traces' collectives were matched (trace_match)


@dataclass(frozen=True)
class Straggler:
    rank: int
    kind: str  # "late_arrival" or "slow_within"
    op: str
    excess_s: float  # median lateness (or own time) above the ranks' median


class StragglerRow(TypedDict):
    """One collective (label) and rank of the report's table; the figures are None where it was not judged."""

    op: str
    rank: int
    host: str | None
    clock_offset_s: float
    n: int  # occurrences judged
    lateness_p50_s: float | None
    lateness_p90_s: float | None
    last_arrival_fraction: float | None
    shortest_fraction: float | None  # synchronizing collectives: HTA's cross-check, the last to arrive runs shortest
    own_time_p50_s: float | None
    verdicts: list[str]  # "late_arrival", "slow_within", or ["not judged"]


@dataclass(frozen=True)
class StragglerReport:
    source: str
    ranks: tuple[int, ...]
    n_collectives: int
    arrival_known: bool
    shared_clock: bool
    ranks_table: list[StragglerRow]  # one row per (label, rank)
    stragglers: tuple[Straggler, ...] = field(default=())
    clock_method: str = "shared_clock"  # a key of CLOCK_METHODS
    clock_note: str = ""
    span: str = "durations"
    matching: JsonObject | None = None
    excluded: tuple[str, ...] = ()  # occurrences left out, with the reason

    def to_json(self) -> JsonObject:
        return {
            "source": self.source,
            "ranks": list(self.ranks),
            "n_collectives": self.n_collectives,
            "arrival_known": self.arrival_known,
            "shared_clock": self.shared_clock,
            "clock_method": self.clock_method,
            "clock_method_means": CLOCK_METHODS[self.clock_method],
            "clock_note": self.clock_note,
            "span": self.span,
            "matching": self.matching,
            "excluded": list(self.excluded),
            "rows": [cast(JsonObject, row) for row in self.ranks_table],  # TypedDicts of JSON values
            "stragglers": [
                {"rank": s.rank, "kind": s.kind, "op": s.op, "excess_s": s.excess_s} for s in self.stragglers
            ],
        }


def is_synchronizing(op: str) -> bool:
    """True for an op no rank leaves before every rank arrived (all_reduce, all_gather, ...)."""
    return _is_synchronizing(op)


def _is_synchronizing(op: str) -> bool:
    try:
        return get_op(op).name in SYNCHRONIZING_OPS
    except UnknownOpError:
        return False


def load_kineto_traces(paths: list[Path] | list[str], max_bytes: int = MAX_TRACE_BYTES) -> CollectiveTable:
    """Read one Kineto trace per rank (``.json`` or ``.json.gz``, at most ``max_bytes`` of JSON each)
    and match their collectives."""
    try:
        traces = [read_kineto_trace(p, max_bytes) for p in paths]
        matching = match_collectives(traces)
    except (KinetoTraceError, MatchError) as e:
        raise StragglerError(str(e)) from None
    if not matching.collectives:
        raise StragglerError(f"no collective could be matched across the traces: {matching.describe()}")
    by_rank = {t.rank: t for t in traces}
    starts: dict[str, list[list[float]]] = {}
    ends: dict[str, list[list[float]]] = {}
    sync: set[str] = set()
    for m in matching.collectives:
        starts.setdefault(m.label, []).append([c.start_s for c in m.records])
        ends.setdefault(m.label, []).append([c.end_s for c in m.records])
        if m.op in SYNCHRONIZING_OPS:
            sync.add(m.label)
    spans = sorted({c.span for m in matching.collectives for c in m.records})
    return CollectiveTable(
        source="kineto",
        ranks=matching.ranks,
        hosts=tuple(by_rank[r].host for r in matching.ranks),
        starts_s=starts,
        ends_s=ends,
        synchronizing=frozenset(sync),
        span="+".join(spans),
        matching=matching.to_json(),
    )


def table_from_durations(
    op: str, rank_samples_s: list[list[float]] | tuple[tuple[float, ...], ...], source: str = "commlens"
) -> CollectiveTable:
    """A table from per-rank durations ``[rank][iteration]``: ends put at 0, starts at ``-duration``."""
    ranks = tuple(range(len(rank_samples_s)))
    iterations = list(zip(*rank_samples_s))
    return CollectiveTable(
        source=source,
        ranks=ranks,
        hosts=tuple(f"rank{r}" for r in ranks),
        starts_s={op: [[-d for d in it] for it in iterations]},
        ends_s={op: [[0.0] * len(ranks) for _ in iterations]},
        arrival_known=False,
        synchronizing=frozenset({op}) if _is_synchronizing(op.split("/")[0]) else frozenset(),
    )


def table_from_run(run: Run) -> CollectiveTable:
    """A table from a run's per-rank samples: each measurement that has them, one label per (op, size)."""
    run_id = run.run_id
    starts: dict[str, list[list[float]]] = {}
    ends: dict[str, list[list[float]]] = {}
    sync: set[str] = set()
    ranks: tuple[int, ...] = ()
    for m in run.measurements:
        if m.rank_samples_s is None:
            continue
        t = table_from_durations(f"{m.op}/{m.size_bytes}B", m.rank_samples_s)
        ranks = t.ranks
        starts.update(t.starts_s)
        ends.update(t.ends_s)
        sync |= t.synchronizing
    if not starts:
        raise StragglerError(f"run {run_id} has no per-rank samples")
    return CollectiveTable(
        source=f"run {run_id}",
        ranks=ranks,
        hosts=tuple(f"rank{r}" for r in ranks),
        starts_s=starts,
        ends_s=ends,
        arrival_known=False,
        synchronizing=frozenset(sync),
    )


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1), linearly interpolated: :func:`commlens.results.stats.percentile`."""
    from commlens.results.stats import percentile

    return percentile(sorted(values), 100.0 * q)


def _clock(table: CollectiveTable, params: StragglerParams) -> tuple[str, list[float], str]:
    """Step 1 of :func:`detect_stragglers`: the clock method, per-rank offsets and a note saying why."""
    n = len(table.ranks)
    if not table.arrival_known:
        return "durations", [0.0] * n, "per-rank durations only (ends assumed simultaneous)"
    hosts = table.hosts
    if hosts[0] is not None and len(set(hosts)) == 1:
        return "shared_clock", [0.0] * n, f"all ranks on host {hosts[0]!r}"
    domains = [h if h is not None else f"rank {r}" for h, r in zip(hosts, table.ranks)]
    why = "hosts unknown (the traces have no host_name)" if None in hosts else f"{len(set(hosts))} hosts"
    offsets = [0.0] * n
    notes = []
    for domain in dict.fromkeys(domains):
        idx = [j for j, d in enumerate(domains) if d == domain]
        if domain == domains[0]:
            continue
        diffs = [occ[j] - occ[0] for label in table.synchronizing for occ in table.ends_s[label] for j in idx]
        if len(diffs) < 3:
            return "durations", [0.0] * n, f"{why}; too few synchronizing collectives to estimate clock offsets"
        offset = statistics.median(diffs)
        spread = statistics.median(abs(d - offset) for d in diffs)
        if spread > params.late_threshold_s:
            return (
                "durations",
                [0.0] * n,
                (
                    f"{why}; collective ends of {domain} scatter by {spread * 1e6:.0f} µs "
                    f"around any one offset: clock offsets cannot be estimated"
                ),
            )
        for j in idx:
            offsets[j] = offset
        notes.append(f"{domain} {offset:+.6f} s (spread {spread * 1e6:.0f} µs, {len(diffs)} ends)")
    return "estimated_offsets", offsets, f"{why}; offsets against {domains[0]}: " + "; ".join(notes)


def detect_stragglers(table: CollectiveTable, params: StragglerParams = StragglerParams()) -> StragglerReport:
    """Find ranks that arrive late persistently, and ranks slow within collectives.

    1. Clocks. All ranks on one named host: one clock (``shared_clock``).
       Otherwise (several hosts, or hosts the traces do not name) each host's
       offset to the first rank's is the median, over the synchronizing
       collectives (all_reduce, all_gather, reduce_scatter, all_to_all,
       barrier: no rank leaves before all arrived, so their ends coincide) of
       ``end_r - end_ref``; it is used only when those differences scatter by
       at most ``late_threshold_s`` (median absolute deviation) around it, and
       then removed from the host's starts (``estimated_offsets``). Where it
       cannot be estimated the judgement uses durations only (``durations``),
       as HTA judges NCCL kernels: a kernel spins until every rank has
       arrived, so the rank whose kernel starts last runs shortest. Stored
       runs' per-rank samples are durations too.
    2. No verdict on impossible values. On a shared clock, a negative own
       time (a rank left a synchronizing collective before the last rank
       arrived) is a reading error and refuses the whole table. With a clock
       (shared or estimated), a synchronizing collective whose ends lie
       further apart than ``end_spread_s`` (not one collective: mismatched
       across ranks) is left out and listed. Negative durations never get
       here: the reader refuses them.
    3. Per occurrence ``i`` of a collective, arrival lateness of rank ``r`` is
       ``start[i][r] - min_q start[i][q]`` (offsets removed). With durations
       it is ``max_q dur[i][q] - dur[i][r]``, judged only for synchronizing
       collectives (a broadcast's root does not wait for its receivers).
    4. Own time (shared clock, synchronizing collectives only):
       ``end[i][r] - max_q start[i][q]``, the time rank ``r`` spent in the
       collective once every rank had arrived.
    5. Per collective and rank: median and 90th percentile of lateness, the
       fraction of occurrences in which the rank arrived last and (for
       synchronizing collectives) in which its span was the shortest, the
       median own time.
    6. A rank is a *late arriver* for a collective when its median lateness
       exceeds the median over ranks of those medians by more than
       ``late_threshold_s``: late in at least half of the occurrences, so
       persistently, not once. A collective seen fewer than
       ``min_occurrences`` times is not judged.
    7. A rank is *slow within* a collective when its median own time exceeds
       ``slow_factor`` times the median over ranks of median own times and
       the excess is above ``late_threshold_s``.
    """
    ranks = table.ranks
    method, offsets, clock_note = _clock(table, params)
    rows: list[StragglerRow] = []
    found: list[Straggler] = []
    excluded: list[str] = []
    n_collectives = 0
    for label in sorted(table.starts_s):
        occurrences = _occurrences(table, label, method, offsets, params, excluded)
        n_collectives += len(occurrences)
        label_rows, label_found = _judge(table, label, occurrences, method, offsets, params)
        rows.extend(label_rows)
        found.extend(label_found)
    return StragglerReport(
        source=table.source,
        ranks=ranks,
        n_collectives=n_collectives,
        arrival_known=table.arrival_known,
        shared_clock=method == "shared_clock",
        ranks_table=rows,
        stragglers=tuple(found),
        clock_method=method,
        clock_note=clock_note,
        span=table.span,
        matching=table.matching,
        excluded=tuple(excluded),
    )


_Occurrence = tuple[list[float], list[float]]  # per rank: start and end, offsets removed


def _occurrences(
    table: CollectiveTable,
    label: str,
    method: str,
    offsets: list[float],
    params: StragglerParams,
    excluded: list[str],
) -> list[_Occurrence]:
    """Step 2 for one collective: its occurrences with offsets removed; those whose ends lie too far apart are
    appended to ``excluded`` instead. StragglerError on an impossible own time on a shared clock."""
    ranks = table.ranks
    sync = label in table.synchronizing
    occurrences = []
    for i, (s_occ, e_occ) in enumerate(zip(table.starts_s[label], table.ends_s[label])):
        starts = [s - offsets[j] for j, s in enumerate(s_occ)]
        ends = [e - offsets[j] for j, e in enumerate(e_occ)]
        if method == "shared_clock" and sync:
            for j, e in enumerate(ends):
                if e - max(starts) < -_READING_TOLERANCE_S:
                    raise StragglerError(
                        f"{label} #{i + 1}: rank {ranks[j]} ends {(max(starts) - e) * 1e6:.1f} µs before the "
                        f"last rank arrived, impossible for a synchronizing collective: a reading error "
                        f"(clocks or spans wrong); no verdict is built on it"
                    )
        if method != "durations" and sync and max(ends) - min(ends) > params.end_spread_s:
            excluded.append(
                f"{label} #{i + 1}: ends {(max(ends) - min(ends)) * 1e3:.3f} ms apart "
                f"(more than {params.end_spread_s * 1e3:g} ms): not one collective"
            )
            continue
        occurrences.append((starts, ends))
    return occurrences


def _judge(
    table: CollectiveTable,
    label: str,
    occurrences: list[_Occurrence],
    method: str,
    offsets: list[float],
    params: StragglerParams,
) -> tuple[list[StragglerRow], list[Straggler]]:
    """Steps 3 to 7 for one collective: a row per rank, and the stragglers found."""
    ranks = table.ranks
    sync = label in table.synchronizing
    rows: list[StragglerRow] = []
    found: list[Straggler] = []
    enough = len(occurrences) >= params.min_occurrences
    judged_late = enough and (method != "durations" or sync)
    judge_own = enough and method == "shared_clock" and sync
    if method == "durations":
        lateness = [
            [max(e - s for s, e in zip(st, en)) - (e_r - s_r) for s_r, e_r in zip(st, en)] for st, en in occurrences
        ]
    else:
        lateness = [[s - min(st) for s in st] for st, _ in occurrences]
    own = [[e - max(st) for e in en] for st, en in occurrences]
    n_ranks = len(ranks)
    late_p50 = [statistics.median(occ[j] for occ in lateness) for j in range(n_ranks)] if judged_late else []
    own_p50 = [statistics.median(occ[j] for occ in own) for j in range(n_ranks)] if judge_own else []
    last = [max(range(n_ranks), key=occ.__getitem__) for occ in lateness]
    durations = [[e - s for s, e in zip(st, en)] for st, en in occurrences]
    shortest = [min(range(n_ranks), key=d.__getitem__) for d in durations]
    typical_late = statistics.median(late_p50) if late_p50 else 0.0
    typical_own = statistics.median(own_p50) if own_p50 else 0.0
    for j, rank in enumerate(ranks):
        verdicts = []
        if late_p50 and late_p50[j] - typical_late > params.late_threshold_s:
            verdicts.append("late_arrival")
            found.append(Straggler(rank, "late_arrival", label, late_p50[j] - typical_late))
        if (
            own_p50
            and own_p50[j] > params.slow_factor * typical_own
            and own_p50[j] - typical_own > params.late_threshold_s
        ):
            verdicts.append("slow_within")
            found.append(Straggler(rank, "slow_within", label, own_p50[j] - typical_own))
        rows.append(
            {
                "op": label,
                "rank": rank,
                "host": table.hosts[j],
                "clock_offset_s": offsets[j],
                "n": len(occurrences),
                "lateness_p50_s": late_p50[j] if late_p50 else None,
                "lateness_p90_s": _quantile([occ[j] for occ in lateness], 0.9) if judged_late else None,
                "last_arrival_fraction": sum(1 for x in last if x == j) / len(last) if judged_late else None,
                # HTA's cross-check for synchronizing collectives: the last to arrive runs shortest
                "shortest_fraction": sum(1 for x in shortest if x == j) / len(shortest)
                if judged_late and sync
                else None,
                "own_time_p50_s": own_p50[j] if own_p50 else None,
                "verdicts": verdicts if judged_late else ["not judged"],
            }
        )
    return rows, found
