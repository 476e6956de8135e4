"""Numeric command-line options checked at the edge: a NaN, an infinity or an out-of-range value that would
turn a check off (``--max-mape nan``: no MAPE exceeds it) is ``error: --option: ...`` with exit 2.

Typer reads ``nan`` and ``inf`` as floats and has no notion of "finite"; every float option that bounds a check,
a rate or a time goes through :func:`checked` before it is used.
"""

from __future__ import annotations

import math

from commlens.cli.app import fail

__all__ = ["checked", "describe_bounds", "number_problem"]


def describe_bounds(above: float | None, at_least: float | None, at_most: float | None) -> str:
    """``a finite number > 0``, ``a finite number in [0, 100]``..."""
    low = f"> {above:g}" if above is not None else f">= {at_least:g}" if at_least is not None else ""
    if at_most is None:
        return f"a finite number {low}".rstrip()
    if low:
        opening = "(" if above is not None else "["
        return f"a finite number in {opening}{above if above is not None else at_least:g}, {at_most:g}]"
    return f"a finite number <= {at_most:g}"


def number_problem(
    value: float, *, above: float | None = None, at_least: float | None = None, at_most: float | None = None
) -> str | None:
    """Why ``value`` is not a finite number within the bounds, or None when it is."""
    wanted = describe_bounds(above, at_least, at_most)
    if isinstance(value, bool) or not math.isfinite(value):
        return f"must be {wanted}, got {value}"
    if (
        (above is not None and not value > above)
        or (at_least is not None and not value >= at_least)
        or (at_most is not None and not value <= at_most)
    ):
        return f"must be {wanted}, got {value:g}"
    return None


def checked(
    value: float,
    option: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
) -> float:
    """``value`` when finite and within the bounds; else ``error: OPTION: must be ...`` and exit 2."""
    problem = number_problem(value, above=above, at_least=at_least, at_most=at_most)
    if problem is not None:
        fail(f"{option}: {problem}", 2)
    return value
