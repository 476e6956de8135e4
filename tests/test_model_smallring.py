"""NCCL's all-gather and reduce-scatter on small rings inside one NVLink domain [27 s22 smallring].

The measured times are OpenXLA's collective table (collective_interpolator_data.h, entry sm_90: 8 x H100, groups of
2, 4 and 8 contiguous GPUs run side by side, median of 20 runs), 1 GiB each: what a TP 2 or TP 4 group's all-gather
costs against an 8-GPU one. The model is sized on nccl-tests' 8-GPU rings; a user projecting TP 2 notices whether the
2-GPU ring runs at that rate (it does not: ~1.5x slower a byte).
"""

from __future__ import annotations

import pytest

from commlens.model.backends import NCCL_SMALL_RING_NVLINK, nccl_predict, small_ring_share
from commlens.topology import load_topology

# (op, GPUs) -> measured microseconds for 1 GiB (all-gather: the gathered output; reduce-scatter: the input)
XLA_H100_1GIB_US = {
    ("all_gather", 2): 1996.6,
    ("all_gather", 4): 2473.0,
    ("all_gather", 8): 2730.3,
    ("reduce_scatter", 2): 2756.3,
    ("reduce_scatter", 4): 2892.4,
    ("reduce_scatter", 8): 2920.9,
}


def _ratio(op: str, gpus: int) -> float:
    """Model time over measured time for 1 GiB on ``gpus`` GPUs of one DGX H100."""
    model = nccl_predict(load_topology("dgx-h100"), op, 1 << 30, nodes=1, ranks_per_host=gpus).time_s
    return model / (XLA_H100_1GIB_US[op, gpus] * 1e-6)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_small_rings_run_as_the_measured_ratio_to_eight(op: str) -> None:
    """The harness's own offset cancels in the ratio to its 8-GPU figure: 2 and 4 GPUs within 25% of it."""
    eight = _ratio(op, 8)
    for gpus in (2, 4):
        assert _ratio(op, gpus) / eight == pytest.approx(1.0, abs=0.25), (op, gpus)


def test_two_gpus_no_longer_twice_as_fast_as_measured() -> None:
    """Before the share, the model ran the 2-GPU reduce-scatter at 0.53 of its measured time."""
    assert _ratio("reduce_scatter", 2) > 0.7


def test_share_by_ring_size() -> None:
    assert small_ring_share(2) == pytest.approx(1 / 1.5)
    assert small_ring_share(4) == pytest.approx(1 / 1.11)
    assert small_ring_share(8) == 1.0 and small_ring_share(72) == 1.0
    assert small_ring_share(2) < small_ring_share(3) < small_ring_share(4)
    assert NCCL_SMALL_RING_NVLINK[-1] == (8, 1.0)


def test_all_reduce_and_cross_domain_rings_unchanged() -> None:
    """The share is for all-gather and reduce-scatter within one NVLink domain only."""
    topo = load_topology("dgx-h100")
    ar = nccl_predict(topo, "all_reduce", 1 << 30, nodes=1, ranks_per_host=2).time_s
    ag = nccl_predict(topo, "all_gather", 1 << 30, nodes=1, ranks_per_host=2).time_s
    across = nccl_predict(topo, "all_gather", 1 << 30, nodes=2, ranks_per_host=1).time_s
    ag8 = nccl_predict(topo, "all_gather", 1 << 30, nodes=1, ranks_per_host=8).time_s
    # a 2-GPU all-reduce keeps NCCL's rate: less than twice the slowed all-gather's time (it moves twice the bytes)
    assert ar < 2 * ag
    # 2 ranks on 2 nodes cross the NICs: the NVLink share does not apply, the NIC sets the time
    assert across > ag8
