"""Unit helpers: sizes with K/M/G suffixes in, nccl-tests display units out."""

from __future__ import annotations

import math
import re

from commlens.errors import CommlensError

__all__ = ["SizeError", "finite_float", "parse_size", "format_size", "format_gbps", "format_us", "format_percent"]

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)


class SizeError(CommlensError, ValueError):
    """A size that is not a whole number of bytes (``"64X"``, ``"1.5"``, ``-1``); the message quotes it."""


def parse_size(text: str | int) -> int:
    """Bytes from ``"64M"``, ``"1K"``, ``"8"``, ``"1.5G"`` (powers of 1024, as nccl-tests)."""
    if isinstance(text, int):
        if text < 0:
            raise SizeError(f"size must be >= 0, got {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise SizeError(f"invalid size {text!r}: expected a number with an optional K, M or G suffix")
    number, suffix = float(match.group(1)), match.group(2).upper()
    value = number * _SUFFIX[suffix]
    if value != int(value):
        raise SizeError(f"invalid size {text!r}: not a whole number of bytes")
    return int(value)


def format_size(size_bytes: int) -> str:
    """``65536`` -> ``"64K"``; exact powers only, else plain bytes."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if size_bytes >= unit and size_bytes % unit == 0:
            return f"{size_bytes // unit}{suffix}"
    return str(size_bytes)


def format_us(time_s: float | None, decimals: int | None = None) -> str:
    """A time in µs for a table: nccl-tests' precision steps (2 decimals below 100 µs, 1 below 10 ms, none
    above, so it fits the column), or a fixed number of ``decimals``; ``-`` for None."""
    if time_s is None:
        return "-"
    us = time_s * 1e6
    if decimals is not None:
        return f"{us:.{decimals}f}"
    return f"{us:.2f}" if us < 100 else f"{us:.1f}" if us < 1e4 else f"{us:.0f}"


def format_gbps(bytes_per_s: float, decimals: int = 2) -> str:
    """A bandwidth in GB/s (1e9 bytes), with 2 decimals as nccl-tests prints busBW unless told."""
    return f"{bytes_per_s / 1e9:.{decimals}f}"


def format_percent(fraction: float | None, decimals: int = 1, *, sign: bool = False) -> str:
    """A fraction as a percentage for a table (``0.123`` -> ``12.3%``; ``+12.3%`` with ``sign``); ``-`` for None."""
    if fraction is None:
        return "-"
    return f"{fraction * 100:{'+' if sign else ''}.{decimals}f}%"


def finite_float(value: object) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a bool), else None; an integer too large for a
    float (a file may hold one of hundreds of digits) is None, not an OverflowError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
