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
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "CHUNK_ELEMENTS",
    "TORCH_DTYPES",
    "all_to_all_values",
    "count_wrong",
    "count_wrong_chunked",
    "exact_int_limit",
    "gathered_values",
    "rank_values",
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


def write_chunked(out: torch.Tensor, values: Values, chunk: int = CHUNK_ELEMENTS) -> None:
    """Write ``values(start, length)`` into ``out``, ``chunk`` elements at a time (cast to ``out``'s dtype)."""
    n = out.numel()
    for start in range(0, n, chunk):
        length = min(chunk, n - start)
        out[start : start + length].copy_(values(start, length))


def count_wrong_chunked(
    got: torch.Tensor, expected: Values, dtype: str, redop: str | None, world: int, chunk: int = CHUNK_ELEMENTS
) -> int:
    """:func:`count_wrong` over ``got`` against ``expected(start, length)``, ``chunk`` elements at a time."""
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
