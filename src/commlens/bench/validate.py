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
"""

from __future__ import annotations

import torch

__all__ = ["TORCH_DTYPES", "exact_int_limit", "rank_values", "reduce_values", "count_wrong"]

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


def rank_values(rank: int, world: int, start: int, length: int, dtype: str, redop: str | None) -> torch.Tensor:
    """Input of ``rank`` for global element indices ``start .. start+length-1`` (int64, on CPU).

    ``redop`` is None for ops that do not reduce.
    """
    g = torch.arange(start, start + length, dtype=torch.int64)
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


def reduce_values(world: int, start: int, length: int, dtype: str, redop: str) -> torch.Tensor:
    """The exact reduction over all ranks of :func:`rank_values` (int64, on CPU)."""
    if redop == "avg":
        return _avg_base(torch.arange(start, start + length, dtype=torch.int64), world, dtype)
    acc = rank_values(0, world, start, length, dtype, redop)
    for r in range(1, world):
        x = rank_values(r, world, start, length, dtype, redop)
        if redop == "sum":
            acc = acc + x
        elif redop == "prod":
            acc = acc * x
        elif redop == "max":
            acc = torch.maximum(acc, x)
        elif redop == "min":
            acc = torch.minimum(acc, x)
    return acc


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
