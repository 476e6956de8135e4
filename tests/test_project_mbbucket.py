"""[27 s17 mbbucket] Megatron-Bridge's DP bucket on every published Megatron-Bridge row whose run reaches it.

Megatron-Bridge's CommOverlapConfig._get_optimizer_overlap_cfgs sets bucket_size = 128 x 1024 x 1024 elements when
its data_parallel_size (world / (TP x PP x CP), the expert factor included) is above 1, and setup applies it to the DDP
config only under the distributed optimizer (src/megatron/bridge/training/comm_overlap.py line 543 at v0.1.0rc4,
540 at v0.2.1 / 1f0cfc3b, 564 at 21d102f5, 577 at v0.6.0 / 7ded17da). It runs only when the recipe's
cfg.comm_overlap is not None: GPT-OSS recipes built on recipes/common.py _pretrain_common leave it None unless the
performance config sets one (26.02.01: none; 26.04.01: GB200 only; 26.08: the MXFP8 configs), and the GPT-OSS-20B
CUDA-graph rows (gpt_oss_20b_pretrain_config at 2f3ecca4) never set it. Megatron FSDP rows (zero 3) do not take it."""

from __future__ import annotations

import pytest

from commlens.project.validate import load_set, validate_set

MB_BUCKET = 128 * 1024 * 1024
# table -> (rows that carry the bucket, (workload, topology) of the zero-1/2 DP > 1 rows whose comm_overlap is None)
TABLES = {
    "megatron-bridge-perf-25.09": (23, set()),
    "megatron-bridge-perf-25.11": (17, set()),
    "megatron-bridge-perf-26.02.01-dense": (12, set()),
    "megatron-bridge-perf-26.02.01-moe": (
        14,
        {("gpt-oss-120b", t) for t in ("dgx-h100", "b200", "gb200-nvl72", "gb300-nvl72", "dgx-b300")},
    ),
    "megatron-bridge-perf-26.04.01-dense": (12, set()),
    "megatron-bridge-perf-26.04.01-moe": (
        15,
        {("gpt-oss-120b", t) for t in ("dgx-h100", "b200", "gb300-nvl72", "dgx-b300")},
    ),
    "megatron-bridge-perf-26.06-dense": (7, set()),
    "megatron-bridge-perf-26.06-moe": (12, {("gpt-oss-120b", "dgx-b300")}),
    "megatron-bridge-perf-26.06.01-moe": (8, set()),
    "megatron-bridge-perf-26.08-moe": (8, set()),
    "megatron-bridge-skills-qwen3-30b-h100": (2, set()),
    "megatron-bridge-cuda-graphs-2960": (0, {("gpt-oss-20b", "dgx-h100")}),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_megatron_bridge_rows_through_comm_overlap_setup_carry_its_bucket(name):
    want, no_comm_overlap = TABLES[name]
    carried = 0
    for r in load_set(name).rows:
        lay = r.layout
        reaches = lay["dp"] > 1 and lay["zero"] in (1, 2) and (r.workload, r.topology) not in no_comm_overlap
        if reaches:
            assert lay.get("dp_bucket_elements") == MB_BUCKET, (r.workload, r.topology, r.gpus)
            carried += 1
        else:
            assert "dp_bucket_elements" not in lay, (r.workload, r.topology, r.gpus)
    assert carried == want


def test_25_11_llama31_405b_h100_row_with_the_bridges_bucket():
    """DGX-H100, 1024 GPUs, TP 8, CP 2, PP 8 x VP 8, DP 8: 316.4 tokens/s per GPU (+8.4% over the page's 292) with
    Megatron-Bridge's 128M bucket filled from the stage's tensors; 315.2 (+8.0%) with Megatron-Core's default split.
    The correction makes this row worse."""
    table = load_set("megatron-bridge-perf-25.11")
    i = next(k for k, r in enumerate(table.rows) if r.workload == "llama3-405b" and r.gpus == 1024)
    got = validate_set(table)[i]
    assert got.predicted == pytest.approx(316.4, rel=0.001)
    assert got.error == pytest.approx(0.084, abs=0.001)
