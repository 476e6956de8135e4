"""The harness itself: results in group order, sub-groups, errors and deadlocks surface as failures."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from harness import HarnessError, HarnessTimeout, Member, Pools


def _sum_of_ranks(m: Member, scale: int) -> tuple[int, int, int]:
    t = torch.tensor([m.global_rank * scale])
    dist.all_reduce(t, group=m.group)
    return m.rank, m.global_rank, int(t)


def _fail_on_rank_one(m: Member) -> None:
    if m.rank == 1:
        raise RuntimeError("boom on purpose")
    dist.barrier(group=m.group)  # the others wait for a rank that never comes


def _recv_forever(m: Member) -> None:
    t = torch.zeros(1)
    dist.recv(t, src=(m.rank + 1) % m.size)  # everyone receives, nobody sends


@pytest.mark.parametrize("world", [1, 2, 5])
def test_results_come_back_in_group_order(pools: Pools, world: int) -> None:
    assert pools.run(world, _sum_of_ranks, scale=2) == [(r, r, world * (world - 1)) for r in range(world)]


def test_sub_groups(pools: Pools) -> None:
    assert pools.run(5, _sum_of_ranks, group="odd", scale=1) == [(0, 1, 4), (1, 3, 4)]
    assert pools.run(4, _sum_of_ranks, group="tail", scale=1) == [(0, 1, 6), (1, 2, 6), (2, 3, 6)]


def test_worker_exception_fails_with_its_traceback_and_pool_recovers(pools: Pools) -> None:
    with pytest.raises(HarnessError, match="(?s)rank 1:.*RuntimeError: boom on purpose"):
        pools.run(3, _fail_on_rank_one)
    assert pools.run(3, _sum_of_ranks, scale=1)[0] == (0, 0, 3)


def test_deadlock_times_out(pools: Pools) -> None:
    with pytest.raises(HarnessTimeout, match="did not finish within 2 s"):
        pools.run(2, _recv_forever, timeout_s=2)
    assert pools.run(2, _sum_of_ranks, scale=1) == [(0, 0, 1), (1, 1, 1)]
