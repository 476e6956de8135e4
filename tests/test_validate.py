"""The validation inputs keep their promise: reducing them *in the dtype itself* gives the expected values exactly.

Each rank's values are cast to the torch dtype and reduced there, one rank at a time, in rank
order and in reverse order (a backend may reduce in any order), and compared with
``reduce_values``; avg on floating types is checked within the documented tolerance.
"""

from __future__ import annotations

import pytest
import torch

from commlens.bench.validate import TORCH_DTYPES, count_wrong, exact_int_limit, rank_values, reduce_values
from commlens.ops import REDOPS

LENGTH = 97  # prime, so element indices cover every residue of every world size used
WORLDS = list(range(1, 9))


def _reduce_in_dtype(world: int, start: int, dtype: str, redop: str, order: list[int]) -> torch.Tensor:
    tdt = TORCH_DTYPES[dtype]
    acc = None
    for r in order:
        x = rank_values(r, world, start, LENGTH, dtype, redop).to(tdt)
        if acc is None:
            acc = x.clone()
        elif redop in ("sum", "avg"):
            acc = acc + x
        elif redop == "prod":
            acc = acc * x
        elif redop == "max":
            acc = torch.maximum(acc, x)
        else:
            acc = torch.minimum(acc, x)
    assert acc is not None and acc.dtype == tdt
    return acc


def _cases() -> list[tuple[str, str, int]]:
    cases = [(d, r, w) for d in TORCH_DTYPES for r in REDOPS for w in WORLDS]
    cases += [(d, r, w) for d in ("bfloat16", "float16", "int8", "uint8") for r in REDOPS for w in (100, 300)]
    return cases


@pytest.mark.parametrize("dtype, redop, world", _cases())
def test_reduction_in_the_dtype_is_exact(dtype: str, redop: str, world: int) -> None:
    start = 5 * world  # an offset, as reduce_scatter's per-rank check uses
    expected = reduce_values(world, start, LENGTH, dtype, redop)
    for order in (list(range(world)), list(reversed(range(world)))):
        got = _reduce_in_dtype(world, start, dtype, redop, order)
        if redop == "avg":
            # the sum itself must be exact: world x the expected average
            assert torch.equal(got.to(torch.int64), expected * world), "avg: the sum of inputs is not exact"
            got = (
                (got / world).to(got.dtype)
                if got.dtype.is_floating_point
                else torch.div(got, world, rounding_mode="floor")
            )
        assert count_wrong(got, expected, dtype, redop, world) == 0
        if redop != "avg" or not got.dtype.is_floating_point:
            assert torch.equal(got.to(torch.int64), expected)


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_inputs_fit_the_dtype_and_differ_between_ranks(dtype: str) -> None:
    limit = exact_int_limit(dtype)
    lo = 0 if dtype == "uint8" else -limit
    for redop in (*REDOPS, None):
        per_rank = [rank_values(r, 4, 0, LENGTH, dtype, redop) for r in range(4)]
        for values in per_rank:
            assert int(values.min()) >= lo and int(values.max()) <= limit
            assert torch.equal(values.to(TORCH_DTYPES[dtype]).to(torch.int64), values)
        # a mixed-up rank or a misplaced chunk must be visible
        assert not torch.equal(per_rank[0], per_rank[1]), redop
        assert len(set(per_rank[0].tolist())) > 1, redop


def test_values_depend_on_the_global_index() -> None:
    whole = rank_values(2, 4, 0, 40, "float32", None)
    assert torch.equal(rank_values(2, 4, 10, 10, "float32", None), whole[10:20])
    whole = reduce_values(4, 0, 40, "int32", "sum")
    assert torch.equal(reduce_values(4, 30, 10, "int32", "sum"), whole[30:])


def test_count_wrong_counts_each_bad_element() -> None:
    expected = reduce_values(3, 0, 16, "bfloat16", "sum")
    got = expected.to(torch.bfloat16)
    assert count_wrong(got, expected, "bfloat16", "sum", 3) == 0
    got[3] += 1
    got[7] = -got[7] - 1
    assert count_wrong(got, expected, "bfloat16", "sum", 3) == 2


def test_avg_tolerance_is_n_ulps_and_no_more() -> None:
    world = 4
    expected = reduce_values(world, 0, 8, "float32", "avg")
    got = expected.to(torch.float32)
    ulp = torch.finfo(torch.float32).eps * expected.to(torch.float32)
    assert count_wrong(got + world * ulp * 0.9, expected, "float32", "avg", world) == 0
    assert count_wrong(got + world * ulp * 1.5, expected, "float32", "avg", world) == 8
    # integers are exact, whatever the op
    assert count_wrong(expected.to(torch.int32) + 1, expected, "int32", "avg", world) == 8
