"""Checks the table parsers (nccl-tests text and ``-J``, PARAM) make of what a results table prints.

Each table states a size, a count, an op and times with the bandwidths computed from them; these
helpers test one against the other (printed busBW against size / time x the op's factor, size
against count, times of 0) and read the tokens such tables print (plain decimal integers, op names).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from commlens.ops import OPS, OpSpec, UnknownOpError, get_op

__all__ = [
    "BUSBW_ABS_TOL_GBPS",
    "BUSBW_REL_TOL",
    "BusbwCheck",
    "check_size",
    "is_decimal",
    "resolve_op",
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
