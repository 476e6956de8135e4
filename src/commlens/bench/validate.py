"""Deterministic per-rank inputs whose exact collective results are known.

Every input element is a small integer chosen so that every partial result
of the reduction stays exactly representable in the dtype (bfloat16 holds
integers exactly up to 256, float16 up to 2048), so a correct collective
matches the expected output bit for bit. The one exception is ``avg`` on
floating types, where a backend may pre-multiply by 1/n (NCCL does): there the
check allows n units in the last place.

Element values depend on the rank and on the element's *global* index ``g``
(its position in the concatenation of all ranks' chunks), so misplaced chunks
are caught as well as wrong arithmetic.

Inputs are written and results checked :data:`CHUNK_ELEMENTS` elements at a
time (:func:`write_chunked`, :func:`count_wrong_chunked`): the int64 values
and the expected results never exist for a whole buffer, so the check adds a
bounded amount of memory whatever the message size.

Every pattern repeats: the values at ``g`` and ``g + period`` are equal (a
:class:`Pattern`, from :func:`rank_pattern` and its siblings). Writing and
checking then compute one block of about a chunk, a whole number of periods
long, once per buffer (or per rank's segment, where the values depend on which
rank's chunk an element is in), convert it to the dtype once, and copy or
compare it along the buffer: a 64 MiB check is one pass of comparisons instead
of a dozen int64 passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "CHUNK_ELEMENTS",
    "TORCH_DTYPES",
    "Pattern",
    "all_to_all_pattern",
    "all_to_all_values",
    "count_wrong",
    "count_wrong_chunked",
    "exact_int_limit",
    "gathered_pattern",
    "gathered_values",
    "rank_pattern",
    "rank_values",
    "reduce_pattern",
    "reduce_values",
    "write_chunked",
]

# Elements written or checked at a time: 2 MiB of int64 per temporary.
CHUNK_ELEMENTS = 1 << 18

# ``values(start, length)``: the int64 values of a buffer's elements ``start .. start+length-1``.
Values = Callable[[int, int], torch.Tensor]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
}

_EXACT_LIMIT = {
    "float32": 1 << 24,
    "float16": 1 << 11,
    "bfloat16": 1 << 8,
    "float64": 1 << 53,
    "int32": (1 << 31) - 1,
    "int64": (1 << 63) - 1,
    "int8": 127,
    "uint8": 255,
}

# Values for ops that move data without reducing: a prime modulus below every limit.
_COPY_MODULUS = 101


def exact_int_limit(dtype: str) -> int:
    """Largest integer magnitude up to which every integer is exact in ``dtype``."""
    return _EXACT_LIMIT[dtype]


def rank_values(
    rank: int,
    world: int,
    start: int,
    length: int,
    dtype: str,
    redop: str | None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Input of ``rank`` for global element indices ``start .. start+length-1`` (int64, on ``device``).

    ``redop`` is None for ops that do not reduce.
    """
    g = torch.arange(start, start + length, dtype=torch.int64, device=device)
    if redop is None:
        return (7 * rank + g) % _COPY_MODULUS
    if redop == "prod":
        # One rank per element contributes a 2 on every other stripe: products stay 1 or 2.
        return torch.where((g % world == rank) & ((g // world) % 2 == 0), 2, 1)
    bound = exact_int_limit(dtype) // world
    if redop in ("sum",):
        if bound < 1:  # more ranks than exact integers: one-hot contributions
            return (g % world == rank).to(torch.int64)
        return (3 * g + 5 * rank + 1) % (min(7, bound) + 1)
    if redop in ("max", "min"):
        return (3 * g + 5 * rank + 1) % 8
    if redop == "avg":
        # A per-element base plus +1 on one rank and -1 on another: the sum is exactly world * base.
        base = _avg_base(g, world, dtype)
        plus = (g % world == rank).to(torch.int64)
        minus = ((g + 1) % world == rank).to(torch.int64)
        return base + plus - minus
    raise ValueError(f"unknown reduction {redop!r}")


def _avg_base(g: torch.Tensor, world: int, dtype: str) -> torch.Tensor:
    """The exact average of the avg inputs; 0 when world x 1 would not be exact (more ranks than exact integers)."""
    bound = exact_int_limit(dtype) // world
    if bound < 1:
        return torch.zeros_like(g)
    return 1 + (3 * g) % max(1, min(6, bound - 1))


def reduce_values(
    world: int, start: int, length: int, dtype: str, redop: str, device: torch.device | None = None
) -> torch.Tensor:
    """The exact reduction over all ranks of :func:`rank_values` (int64, on ``device``)."""
    if redop == "avg":
        return _avg_base(torch.arange(start, start + length, dtype=torch.int64, device=device), world, dtype)
    acc = rank_values(0, world, start, length, dtype, redop, device)
    for r in range(1, world):
        x = rank_values(r, world, start, length, dtype, redop, device)
        if redop == "sum":
            acc = acc + x
        elif redop == "prod":
            acc = acc * x
        elif redop == "max":
            acc = torch.maximum(acc, x)
        elif redop == "min":
            acc = torch.minimum(acc, x)
    return acc


def gathered_values(count: int, start: int, length: int, device: torch.device | None = None) -> torch.Tensor:
    """What a gather of every rank's :func:`rank_values` (no reduction, ``count`` elements from each rank,
    rank k's at global indices ``k*count ..``) holds at elements ``start .. start+length-1``."""
    g = torch.arange(start, start + length, dtype=torch.int64, device=device)
    return (7 * torch.div(g, max(count, 1), rounding_mode="floor") + g) % _COPY_MODULUS


def all_to_all_values(
    rank: int, count: int, start: int, length: int, device: torch.device | None = None
) -> torch.Tensor:
    """What ``rank`` receives in an all-to-all of every rank's :func:`rank_values` (no reduction, ``count``
    elements per pair) at elements ``start .. start+length-1``: sender ``i // count``'s elements of global
    index ``rank*count + i % count``."""
    i = torch.arange(start, start + length, dtype=torch.int64, device=device)
    c = max(count, 1)
    sender = torch.div(i, c, rounding_mode="floor")
    return (7 * sender + rank * count + i % c) % _COPY_MODULUS


@dataclass(frozen=True)
class Pattern:
    """A buffer's values that repeat: ``values(s + period, k) == values(s, k)`` within each segment.

    ``segment`` (None: the whole buffer is one): the values restart every ``segment`` elements, at 0,
    ``segment``, ...; periodicity holds within one segment only (a gather's output: one rank's chunk each).
    """

    values: Values
    period: int
    segment: int | None = None


def _pattern_period(world: int, dtype: str, redop: str | None, reduced: bool = False) -> int:
    """The period in the global index of :func:`rank_values` (or of :func:`reduce_values`, ``reduced``)."""
    if redop is None:
        return _COPY_MODULUS
    if redop == "prod":
        return 2 * world
    bound = exact_int_limit(dtype) // world
    if redop == "sum":
        return world if bound < 1 else min(7, bound) + 1
    if redop in ("max", "min"):
        return 8
    if redop == "avg":
        base = 1 if bound < 1 else max(1, min(6, bound - 1))
        return base if reduced else base * world // math.gcd(base, world)
    raise ValueError(f"unknown reduction {redop!r}")


def rank_pattern(
    rank: int, world: int, offset: int, dtype: str, redop: str | None, device: torch.device | None = None
) -> Pattern:
    """:func:`rank_values` of ``rank`` for buffer element ``s`` at global index ``offset + s``."""
    return Pattern(
        lambda s, k: rank_values(rank, world, offset + s, k, dtype, redop, device),
        _pattern_period(world, dtype, redop),
    )


def reduce_pattern(world: int, offset: int, dtype: str, redop: str, device: torch.device | None = None) -> Pattern:
    """:func:`reduce_values` for buffer element ``s`` at global index ``offset + s``."""
    return Pattern(
        lambda s, k: reduce_values(world, offset + s, k, dtype, redop, device),
        _pattern_period(world, dtype, redop, reduced=True),
    )


def gathered_pattern(count: int, device: torch.device | None = None) -> Pattern:
    """:func:`gathered_values`: one segment per rank's ``count`` elements."""
    return Pattern(lambda s, k: gathered_values(count, s, k, device), _COPY_MODULUS, max(count, 1))


def all_to_all_pattern(rank: int, count: int, device: torch.device | None = None) -> Pattern:
    """:func:`all_to_all_values` of ``rank``: one segment per sender's ``count`` elements."""
    return Pattern(lambda s, k: all_to_all_values(rank, count, s, k, device), _COPY_MODULUS, max(count, 1))


def _blocks(n: int, pattern: Pattern, chunk: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """``(start, length, spans)`` per segment: the block of values to compute at ``start`` (``length``
    elements, a whole number of periods unless the segment is shorter) and the ``(offset, length)`` spans of
    the buffer that hold it (each span holds the block's first ``length`` values)."""
    seg = n if not pattern.segment else pattern.segment
    block = max(pattern.period, chunk // pattern.period * pattern.period)
    out = []
    for seg_start in range(0, n, max(seg, 1)):
        seg_len = min(seg, n - seg_start)
        blen = min(block, seg_len)
        spans = [(seg_start + a, min(blen, seg_len - a)) for a in range(0, seg_len, blen)]
        out.append((seg_start, blen, spans))
    return out


def _write_pattern(out: torch.Tensor, pattern: Pattern, chunk: int) -> None:
    for start, length, spans in _blocks(out.numel(), pattern, chunk):
        block = pattern.values(start, length).to(out.dtype)
        for at, k in spans:
            out[at : at + k].copy_(block[:k])


def _count_wrong_pattern(
    got: torch.Tensor, pattern: Pattern, dtype: str, redop: str | None, world: int, chunk: int
) -> int:
    wrong = 0
    for start, length, spans in _blocks(got.numel(), pattern, chunk):
        expected = pattern.values(start, length).to(device=got.device, dtype=got.dtype)
        tol = None
        if redop == "avg" and got.dtype.is_floating_point:
            eps = torch.finfo(got.dtype).eps
            tol = world * eps * expected.abs().clamp(min=1).to(torch.float64)
        for at, k in spans:
            part = got[at : at + k]
            if tol is None:
                bad = part != expected[:k]
            else:
                bad = (part.to(torch.float64) - expected[:k].to(torch.float64)).abs() > tol[:k]
            wrong += int(bad.sum().item())
    return wrong


def write_chunked(out: torch.Tensor, values: Values | Pattern, chunk: int = CHUNK_ELEMENTS) -> None:
    """Write ``values(start, length)`` into ``out``, ``chunk`` elements at a time (cast to ``out``'s dtype);
    a :class:`Pattern`'s block is computed once and copied along."""
    if isinstance(values, Pattern):
        _write_pattern(out, values, chunk)
        return
    n = out.numel()
    for start in range(0, n, chunk):
        length = min(chunk, n - start)
        out[start : start + length].copy_(values(start, length))


def count_wrong_chunked(
    got: torch.Tensor,
    expected: Values | Pattern,
    dtype: str,
    redop: str | None,
    world: int,
    chunk: int = CHUNK_ELEMENTS,
) -> int:
    """:func:`count_wrong` over ``got`` against ``expected(start, length)``, ``chunk`` elements at a time
    (a :class:`Pattern`'s block computed and converted once, then compared along the buffer)."""
    if isinstance(expected, Pattern):
        return _count_wrong_pattern(got, expected, dtype, redop, world, chunk)
    n = got.numel()
    wrong = 0
    for start in range(0, n, chunk):
        length = min(chunk, n - start)
        wrong += count_wrong(got[start : start + length], expected(start, length), dtype, redop, world)
    return wrong


def count_wrong(got: torch.Tensor, expected_int: torch.Tensor, dtype: str, redop: str | None, world: int) -> int:
    """Elements of ``got`` that differ from the exact expected values."""
    expected = expected_int.to(device=got.device, dtype=got.dtype)
    if redop == "avg" and got.dtype.is_floating_point:
        eps = torch.finfo(got.dtype).eps
        tol = world * eps * expected.abs().clamp(min=1).to(torch.float64)
        bad = (got.to(torch.float64) - expected.to(torch.float64)).abs() > tol
    else:
        bad = got != expected
    return int(bad.sum().item())
