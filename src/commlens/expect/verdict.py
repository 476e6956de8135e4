"""The verdict on a run: per row, per size range, for the run, with the likely causes.

Steps of :func:`judge`:

1. Infer the system (:func:`commlens.expect.system.infer_system`).
2. Per (op, size), the measured busBW is the better of in-place and out-of-place (nccl-tests prints both; a
   user reads the better one), against the band of :func:`commlens.expect.band.expectation`.
3. A row is ``normal`` inside the band, ``below`` under its lower edge (by how much, in % of that edge),
   ``above`` over its upper edge (a measurement to check).
4. Per op, rows are grouped into the latency-bound range (the model's time is mostly launch and latency),
   mid sizes and the bandwidth-bound range. A latency-bound or mid-size range's verdict is its median row's; a
   bandwidth-bound
   range's is the median of its peak sizes (the largest eighth of its size span: at least the largest size),
   where the busBW a user reads off a table is.
5. The run's verdict is the worst op's: its bandwidth-bound range where the run reached one, else its
   largest-size range.
6. Where the log lists no NICs and the GPU class has documented builds with less network per node than the
   reference system (``InferredSystem.nic_options``), a run below expectation on the reference is judged again on
   the fewest of those builds whose band can reach its peak busBW (a ring's busBW cannot exceed what the NICs
   carry, so fewer cannot explain it), and the verdict says both: "normal on 4 x 100 Gb/s; on 8 x 200 Gb/s, below
   by 50%" (:class:`NetworkRange`).
7. For a run below (or above) expectation, the causes of ``causes.yaml`` whose signature matches, ranked.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commlens.expect.band import BANDWIDTH_BOUND, LATENCY_BOUND, MID_SIZE, Expectation, expectation, system_layout
from commlens.expect.causes import Cause, match_causes, signals
from commlens.expect.evidence import Fact
from commlens.expect.system import ExpectError, InferredSystem, NicOption, infer_system
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import Run

if TYPE_CHECKING:
    from commlens.topology import Topology

__all__ = ["NetworkRange", "RangeVerdict", "RowVerdict", "RunVerdict", "judge"]

NORMAL, BELOW, ABOVE = "normal", "below", "above"
_RANK = {NORMAL: 0, ABOVE: 1, BELOW: 2}
PEAK_SPAN = 8  # a bandwidth-bound range is judged on its sizes within a factor 8 of its largest
STILL_RISING = 0.10  # busBW gaining more than this over the last doubling: the curve has not reached its plateau


@dataclass(frozen=True)
class RowVerdict:
    op: str
    size_bytes: int
    busbw_bytes_per_s: float
    expected: Expectation
    status: str
    pct: float  # below: % under the band's lower edge; above: % over its upper edge; 0 inside

    def as_dict(self) -> JsonObject:
        return {
            "op": self.op,
            "size_bytes": self.size_bytes,
            "busbw_bytes_per_s": self.busbw_bytes_per_s,
            "status": self.status,
            "pct": round(self.pct, 2),
            **self.expected.as_dict(),
        }


@dataclass(frozen=True)
class RangeVerdict:
    op: str
    kind: str  # "latency-bound" | "mid-size" | "bandwidth-bound"
    min_size_bytes: int
    max_size_bytes: int
    rows: int
    status: str
    pct: float
    ratio: float  # median measured / model busBW
    limit: str

    def as_dict(self) -> JsonObject:
        return {
            "op": self.op,
            "range": self.kind,
            "min_size_bytes": self.min_size_bytes,
            "max_size_bytes": self.max_size_bytes,
            "rows": self.rows,
            "status": self.status,
            "pct": round(self.pct, 2),
            "ratio_to_model": round(self.ratio, 4),
            "limit": self.limit,
        }


@dataclass(frozen=True)
class NetworkRange:
    """A run judged on a documented build with fewer NICs than the reference (the log lists none), and what the
    verdict would be on the reference build."""

    judged_on: str  # "4 x 100 Gb/s"
    origin: str
    reference: str  # "8 x 200 Gb/s"
    reference_status: str
    reference_pct: float

    def as_dict(self) -> JsonObject:
        return {
            "judged_on": self.judged_on,
            "origin": self.origin,
            "reference": self.reference,
            "reference_status": self.reference_status,
            "reference_pct": round(self.reference_pct, 2),
        }


@dataclass(frozen=True)
class RunVerdict:
    run_id: str
    system: InferredSystem
    rows: tuple[RowVerdict, ...]
    ranges: tuple[RangeVerdict, ...]
    judged: RangeVerdict  # the range the run's verdict comes from
    causes: tuple[Cause, ...]
    network: NetworkRange | None = None

    @property
    def status(self) -> str:
        return self.judged.status

    @property
    def pct(self) -> float:
        return self.judged.pct

    @property
    def still_rising(self) -> float | None:
        """The curve's shape at its end: where the judged op's busBW at its largest size is more than 10% over the
        size before (a doubling or more apart), that gain (0.2: 20%); else None. busBW should reach the platform's
        peak "for large enough sizes" (NCCL's maintainer, NVIDIA/nccl-tests#40): a curve still rising at the end
        has not shown its plateau."""
        mine = sorted((r for r in self.rows if r.op == self.judged.op), key=lambda r: r.size_bytes)
        if len(mine) < 2 or mine[-1].size_bytes < 2 * mine[-2].size_bytes or mine[-2].busbw_bytes_per_s <= 0:
            return None
        gain = mine[-1].busbw_bytes_per_s / mine[-2].busbw_bytes_per_s - 1.0
        return gain if gain > STILL_RISING else None

    def headline(self) -> str:
        """``below expectation by 42% (all_reduce, bandwidth-bound 64 MiB-8 GiB, limited by ...)``."""
        j = self.judged
        what = {
            NORMAL: "normal",
            BELOW: f"below expectation by {j.pct:.0f}%",
            ABOVE: f"above expectation by {j.pct:.0f}%",
        }
        kind = "mid" if j.kind == MID_SIZE else j.kind
        head = f"{what[j.status]} ({j.op}, {kind} sizes, {j.ratio:.0%} of the model; limit: {j.limit})"
        rising = self.still_rising
        if rising is not None:
            head += f"; busBW still rising at the largest size (+{rising:.0%}): larger sizes may reach more"
        n = self.network
        if n is None:
            return head
        return (
            f"{head}; judged on {n.judged_on} NICs per node, the fewest of the documented builds that reach this "
            f"busBW (the log lists none); on {n.reference}: {n.reference_status} by {n.reference_pct:.0f}%"
        )

    def as_dict(self) -> JsonObject:
        return {
            "format": "commlens.expect/1",
            "run_id": self.run_id,
            "status": self.status,
            "pct": round(self.pct, 2),
            "headline": self.headline(),
            "system": self.system.as_dict(),
            "ranges": [r.as_dict() for r in self.ranges],
            "causes": [c.as_dict() for c in self.causes],
            "network": self.network.as_dict() if self.network is not None else None,
            "still_rising": None if self.still_rising is None else round(self.still_rising, 4),
            "rows": [r.as_dict() for r in self.rows],
        }


def _row_status(busbw: float, e: Expectation) -> tuple[str, float]:
    if busbw < e.lower_bytes_per_s:
        return BELOW, 100.0 * (1.0 - busbw / e.lower_bytes_per_s)
    if busbw > e.upper_bytes_per_s:
        return ABOVE, 100.0 * (busbw / e.upper_bytes_per_s - 1.0)
    return NORMAL, 0.0


def _range(op: str, kind: str, rows: list[RowVerdict]) -> RangeVerdict:
    top = max(r.size_bytes for r in rows)
    judged = [r for r in rows if kind != BANDWIDTH_BOUND or r.size_bytes * PEAK_SPAN >= top]
    scores = sorted((-r.pct if r.status == BELOW else r.pct) for r in judged)
    median = statistics.median(scores)
    status = BELOW if median < 0 else ABOVE if median > 0 else NORMAL
    ratio = statistics.median(r.busbw_bytes_per_s / r.expected.model_bytes_per_s for r in judged)
    limits = [r.expected.limit for r in rows]
    return RangeVerdict(
        op,
        kind,
        min(r.size_bytes for r in rows),
        max(r.size_bytes for r in rows),
        len(rows),
        status,
        abs(median),
        ratio,
        max(
            dict.fromkeys(limits), key=limits.count
        ),  # a tie goes to the first seen (a set's order changes per process)
    )


def _best_rows(run: Run) -> dict[tuple[str, int], float]:
    """The better of in-place and out-of-place busBW per (op, size), the rows a verdict can read."""
    best: dict[tuple[str, int], float] = {}
    for m in run.measurements:
        if m.op == "barrier" or m.size_bytes <= 0 or not m.busbw_bytes_per_s > 0:
            continue
        key = (m.op, m.size_bytes)
        best[key] = max(best.get(key, 0.0), m.busbw_bytes_per_s)
    return best


def _rows(system: InferredSystem, best: dict[tuple[str, int], float], backend: str) -> list[RowVerdict]:
    layout = system_layout(system)
    rows: list[RowVerdict] = []
    for (op, size), busbw in sorted(best.items()):
        e = expectation(system, layout, backend, op, size)
        if e is None:
            continue
        status, pct = _row_status(busbw, e)
        rows.append(RowVerdict(op, size, busbw, e, status, pct))
    return rows


def _ranges(rows: list[RowVerdict]) -> tuple[list[RangeVerdict], RangeVerdict]:
    """Every op's size ranges, and the range the run's verdict comes from (step 5)."""
    ranges: list[RangeVerdict] = []
    judged_per_op: list[RangeVerdict] = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        groups = [
            (k, [r for r in mine if r.expected.size_range == k]) for k in (LATENCY_BOUND, MID_SIZE, BANDWIDTH_BOUND)
        ]
        op_ranges = [_range(op, kind, rs) for kind, rs in groups if rs]
        ranges += op_ranges
        judged_per_op.append(op_ranges[-1])
    return ranges, max(judged_per_op, key=lambda r: (_RANK[r.status], r.pct))


def _fewest_reaching(
    system: InferredSystem, best: dict[tuple[str, int], float], backend: str, judged: RangeVerdict
) -> NicOption | None:
    """Step 6: the fewest documented build whose band's upper edge reaches the judged range's peak busBW (median
    of its peak sizes), or None where none does (the reference judges the run)."""
    peak = {
        size: busbw
        for (op, size), busbw in best.items()
        if op == judged.op and judged.min_size_bytes <= size and size * PEAK_SPAN >= judged.max_size_bytes
    }
    for option in system.nic_options:
        candidate = dataclasses.replace(system, topology=option.topology)
        layout = system_layout(candidate)
        over = []
        for size, busbw in peak.items():
            e = expectation(candidate, layout, backend, judged.op, size)
            if e is not None:
                over.append(busbw / e.upper_bytes_per_s)
        if over and statistics.median(over) <= 1.0:
            return option
    return None


def judge(run: Run, facts: list[Fact], topology: Topology | None = None) -> RunVerdict:
    """The verdict on ``run`` (see the module's steps); :class:`ExpectError` when it cannot be judged."""
    system = infer_system(run, facts, topology)
    best = _best_rows(run)
    backend = run.system.backend
    rows = _rows(system, best, backend)
    if not rows:
        raise ExpectError(f"run {run.run_id[:12]}: no row the model can judge (ops without a model, or no sizes)")
    ranges, judged = _ranges(rows)
    network = None
    if system.nic_options and judged.status == BELOW:
        option = _fewest_reaching(system, best, backend, judged)
        if option is not None:
            network = NetworkRange(option.label, option.origin, system.nic_label, judged.status, judged.pct)
            system = dataclasses.replace(system, topology=option.topology)
            rows = _rows(system, best, backend)
            ranges, judged = _ranges(rows)
    causes: list[Cause] = []
    if judged.status != NORMAL:
        large_ratio = _median_ratio(rows, latency_bound=False)
        small_ratio = _median_ratio(rows, latency_bound=True)
        sigs = signals(
            system,
            op_names={r.op for r in rows},
            peak_busbw=max(r.busbw_bytes_per_s for r in rows),
            large_ratio=large_ratio,
            small_ratio=small_ratio,
        )
        causes = match_causes(judged.status, sigs)
    return RunVerdict(run.run_id, system, tuple(rows), tuple(ranges), judged, tuple(causes), network)


def _median_ratio(rows: list[RowVerdict], *, latency_bound: bool) -> float | None:
    picked = [
        r.busbw_bytes_per_s / r.expected.model_bytes_per_s for r in rows if r.expected.latency_bound == latency_bound
    ]
    return statistics.median(picked) if picked else None
