"""Inputs written and results checked from one repeating block (``validate.Pattern``) equal the direct values.

The sweep writes and checks a buffer by computing one block of its pattern and copying or comparing it along
(issue 34: the check was a fifth of the default sweep). These tests hold the periods that makes exact: for
every dtype, reduction and world size, the block-wise write equals ``rank_values`` element by element over
several periods and chunk boundaries, and a wrong element anywhere is counted.
"""

from __future__ import annotations

import pytest
import torch

from commlens.bench.validate import (
    TORCH_DTYPES,
    Pattern,
    all_to_all_pattern,
    all_to_all_values,
    count_wrong_chunked,
    gathered_pattern,
    gathered_values,
    rank_pattern,
    rank_values,
    reduce_pattern,
    reduce_values,
    write_chunked,
)
from commlens.ops import REDOPS

N = 3001  # not a multiple of any period or chunk used
CHUNK = 250  # small, so a buffer spans many blocks and a partial last one
WORLDS = (1, 2, 3, 4, 5, 7, 8, 300)  # 300: more ranks than bfloat16/int8 integers (one-hot inputs)


def _direct(pattern: Pattern, n: int) -> torch.Tensor:
    return pattern.values(0, n)


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
@pytest.mark.parametrize("world", WORLDS)
def test_patterns_equal_the_direct_values(dtype: str, world: int) -> None:
    tdt = TORCH_DTYPES[dtype]
    for redop in (None, *REDOPS):
        for rank, offset in ((0, 0), (world - 1, 17 * world)):
            p = rank_pattern(rank, world, offset, dtype, redop)
            out = torch.empty(N, dtype=tdt)
            write_chunked(out, p, chunk=CHUNK)
            want = rank_values(rank, world, offset, N, dtype, redop)
            assert torch.equal(out, want.to(tdt)), (redop, rank, offset)
            assert count_wrong_chunked(out, p, dtype, None, world, chunk=CHUNK) == 0
        if redop is None:
            continue
        q = reduce_pattern(world, 5, dtype, redop)
        assert torch.equal(_direct(q, N), reduce_values(world, 5, N, dtype, redop))
        got = reduce_values(world, 5, N, dtype, redop).to(tdt)
        assert count_wrong_chunked(got, q, dtype, redop, world, chunk=CHUNK) == 0
        if world <= 8 and redop != "avg":  # avg on floats allows a few ulps; elsewhere one off is wrong
            got[[0, CHUNK - 1, CHUNK, N - 1]] += 1
            assert count_wrong_chunked(got, q, dtype, redop, world, chunk=CHUNK) == 4


@pytest.mark.parametrize("world, count", [(1, 5), (3, 7), (4, 1), (4, 1000), (5, 333)])
def test_segmented_patterns_restart_per_rank(world: int, count: int) -> None:
    n = world * count
    out = torch.empty(n, dtype=torch.float32)
    write_chunked(out, gathered_pattern(count), chunk=CHUNK)
    assert torch.equal(out, gathered_values(count, 0, n).to(torch.float32))
    for rank in range(world):
        write_chunked(out, all_to_all_pattern(rank, count), chunk=CHUNK)
        assert torch.equal(out, all_to_all_values(rank, count, 0, n).to(torch.float32))
        out[n - 1] += 1
        assert count_wrong_chunked(out, all_to_all_pattern(rank, count), "float32", None, world, chunk=CHUNK) == 1
