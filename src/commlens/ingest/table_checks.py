"""Checks the table parsers (nccl-tests text and ``-J``, PARAM) make of what a results table prints.

Each table states a size, a count, an op and times with the bandwidths computed from them; these
helpers test one against the other (printed busBW against size / time x the op's factor, size
against count, times of 0) and read the tokens such tables print (plain decimal integers, op names).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from commlens.ops import OPS, OpSpec, UnknownOpError, get_op
from commlens.results.records import Measurement, RecordError
from commlens.results.stats import TimeStats

__all__ = [
    "BUSBW_ABS_TOL_GBPS",
    "BUSBW_REL_TOL",
    "BusbwCheck",
    "check_size",
    "consistent_time",
    "is_decimal",
    "resolve_op",
    "row_measurement",
    "zero_time_note",
]

# A printed busBW further than this from size / time x factor (relative, and absolute in GB/s) is doubtful.
BUSBW_REL_TOL = 0.05
BUSBW_ABS_TOL_GBPS = 0.05


def resolve_op(name: str) -> OpSpec:
    """The catalog op for an nccl-tests or PARAM op name; UnknownOpError names what commlens knows."""
    try:
        return get_op(name)
    except UnknownOpError:
        raise UnknownOpError(f"op {name!r} is not in the commlens catalog ({', '.join(n for n in OPS)})") from None


def check_size(spec: OpSpec, size_bytes: int, count: int, elem_size: int, world_size: int) -> str | None:
    """Why ``size`` and ``count`` cannot be this op at this world size, or None if they agree."""
    if spec.name == "barrier":
        return None
    expected = count * elem_size * (world_size if spec.per_rank_split else 1)
    if size_bytes == expected:
        return None
    ranks = f" x {world_size} ranks" if spec.per_rank_split else ""
    return (
        f"size {size_bytes} B does not match count {count} x {elem_size} B{ranks} = {expected} B "
        f"for {spec.name}: wrong op or world size"
    )


def _printed_interval(value: float, decimals: int) -> tuple[float, float]:
    """The values that print as ``value`` with ``decimals`` decimals."""
    half = 0.5 * 10.0**-decimals
    return max(0.0, value - half), value + half


def consistent_time(
    size_bytes: int, time_token: str, algbw_gbps: float, busbw_gbps: float, factor: float, *, bw_decimals: int = 2
) -> float | None:
    """A time in µs that prints as ``time_token`` and gives the printed algBW and busBW; None if the printed time
    already does, or if no time does.

    nccl-tests prints the time with two decimals (fewer above 100 µs) and the bandwidths with two: below about
    1 µs a bandwidth computed from the printed time can be several percent off the printed one, which
    nccl-tests computed from the unrounded time. The time returned is the middle of the times every printed
    figure allows, so that time, algBW and busBW all read back as printed.
    """
    decimals = len(time_token.split(".", 1)[1]) if "." in time_token else 0
    t = float(time_token)
    lo, hi = _printed_interval(t, decimals)
    if size_bytes <= 0 or t <= 0:
        return None
    bounds = [(algbw_gbps, 1.0)]
    if factor > 0:
        bounds.append((busbw_gbps, factor))
    agrees = True
    for bw, f in bounds:
        bw_lo, bw_hi = _printed_interval(bw, bw_decimals)
        # time = size x f / bw: the printed bandwidth's interval bounds the time the other way round
        t_lo = size_bytes * f / (bw_hi * 1e3)
        t_hi = size_bytes * f / (bw_lo * 1e3) if bw_lo > 0 else float("inf")
        agrees = agrees and t_lo <= t <= t_hi
        lo, hi = max(lo, t_lo), min(hi, t_hi)
    if agrees or not lo < hi:
        return None
    return (lo + hi) / 2


def is_decimal(token: str) -> bool:
    """Plain ASCII digits, as nccl-tests and PARAM print sizes and counts (not ``-8``, ``0x10``, ``65_536``)."""
    return token.isascii() and token.isdigit()


def zero_time_note(warn: Callable[[Any, str], str], where_first: Any, what: str, left_out: list[str]) -> str:
    """Warn once about measurements printed with time 0 (left out); returns the note for the run.

    nccl-tests prints times as ``%7.2f`` µs, so ``0.00`` is under 5 ns: no collective is that fast, and a
    bandwidth of size / 0 is not a number. ``left_out`` names each one (``line 52 in-place``).
    """
    shown = ", ".join(left_out[:4]) + (f" ... ({len(left_out)} in all)" if len(left_out) > 4 else "")
    return warn(
        where_first,
        (
            f"{what}: {len(left_out)} measurement(s) printed with time 0 ({shown}): no bandwidth can be "
            f"computed from a time of 0, so they are left out and the run is stored as incomplete"
        ),
    )


class BusbwCheck:
    """Compares printed busBW with size / time x the op's factor; one summary per run segment."""

    def __init__(self) -> None:
        self.rows = 0
        self.bad = 0
        self.first: tuple[Any, float, float] | None = None  # where, printed GB/s, computed GB/s

    def add(self, where: Any, printed_gbps: float, size_bytes: int, time_s: float, factor: float) -> None:
        """``where`` locates the row (a line number, a JSON path) for the warning."""
        if time_s <= 0:
            return
        computed = size_bytes / time_s * factor / 1e9
        self.rows += 1
        diff = abs(computed - printed_gbps)
        if diff > BUSBW_ABS_TOL_GBPS and diff > BUSBW_REL_TOL * max(computed, printed_gbps):
            self.bad += 1
            if self.first is None:
                self.first = (where, printed_gbps, computed)

    def report(
        self, what: str, warn: Callable[[int, str], str], line_of: Callable[[Any], int] = lambda where: where
    ) -> str | None:
        """Warn once if any row disagreed; returns the note for the run, or None."""
        if not self.bad or self.first is None:
            return None
        where, printed, computed = self.first
        return warn(
            line_of(where),
            (
                f"{what}: printed busBW disagrees with size / time x busBW factor by more than "
                f"{BUSBW_REL_TOL:.0%} in {self.bad} of {self.rows} measurements (first: printed {printed:g} GB/s, "
                f"computed {computed:.4g} GB/s); check the op and the world size"
            ),
        )


def row_measurement(
    spec: OpSpec,
    world: int,
    refused: Callable[[str], Exception],
    *,
    dtype: str,
    size: int,
    count: int,
    in_place: bool,
    redop: str | None,
    root: int | None,
    reported: TimeStats | None,
    samples: tuple[float, ...] = (),
    nwrong: int | None = None,
    rank_samples: tuple[tuple[float, ...], ...] | None = None,
) -> Measurement:
    """One result of a table (a half-row of nccl-tests' text or ``-J``, a PARAM row) as a measurement of ``spec``
    over ``world`` ranks; a value the record refuses is raised as ``refused(message)``, the reader's error at the
    row."""
    try:
        return Measurement(
            op=spec.name,
            dtype=dtype,
            size_bytes=size,
            count=count,
            in_place=in_place,
            world_size=world,
            samples_s=samples,
            redop=redop,
            root=root,
            nwrong=nwrong,
            rank_samples_s=rank_samples,
            reported=reported,
        )
    except RecordError as e:
        raise refused(str(e)) from None
