"""[27 s17 nemobucket] NeMo 2's DP bucket on every published NeMo 2 row, and the Model Zoo long-context rows' stack.

Every NeMo 2 run these tables cite builds its recipe in performance mode or adds MegatronCommOverlapCallback in its
script; the callback's setup, under the distributed optimizer, writes bucket_size = 128 x 1024 x 1024 elements into the
DDP config for DP > 1 (nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py line 186 at NeMo v2.3.0rc2, v2.3.0,
v2.4.0 and the dgxc recipes' commits d2b21556, 7a8f1cc7, 6f2c6fda, b4148d21). Megatron FSDP rows (zero 3) and DP 1 rows
do not take it."""

from __future__ import annotations

import pytest

from commlens.project.validate import load_set, validate_set

NEMO2_BUCKET = 128 * 1024 * 1024
NEMO2_PROFILES = {"nemo-25.02", "nemo-25.04", "nemo-25.07"}
TABLES = {
    "nemo-perf-25.04": 7,
    "nemo-perf-25.07": 2,
    "dgxc-llama3.1": 40,
    "dgxc-nemotron-gpt3": 40,
    "dgxc-moe": 23,
    "nemo-long-context-b200": 8,
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_nemo2_rows_with_dp_and_the_distributed_optimizer_carry_the_callbacks_bucket(name):
    carried = 0
    for r in load_set(name).rows:
        lay = r.layout
        nemo2 = lay.get("framework") in NEMO2_PROFILES
        if nemo2 and lay["dp"] > 1 and lay["zero"] in (1, 2):
            assert lay.get("dp_bucket_elements") == NEMO2_BUCKET, (r.workload, r.gpus)
            carried += 1
        else:
            assert "dp_bucket_elements" not in lay, (r.workload, r.gpus)
    assert carried == TABLES[name]


def test_model_zoo_long_context_rows_run_the_25_09_stack():
    """Model Zoo b0b92ff's image (NGC PyTorch 25.06, cuDNN 9.11.0.92): megatron-core-25.09, Hopper attention
    cudnn_9.4, not megatron-core's 2026 cuDNN 9.19 curve."""
    table = load_set("megatron-moe-qwen3-235b-h100-longctx")
    assert {r.layout["framework"] for r in table.rows} == {"megatron-core-25.09"}
    got = validate_set(table)
    # 5.6% before the 2-GPU ring's rate [27 s22 smallring]
    assert sum(abs(s.error) for s in got) / len(got) == pytest.approx(0.060, abs=0.003)


def test_nemo_perf_25_04_nemotron4_15b_row_with_the_callbacks_bucket():
    """GB200, 64 GPUs, TP 1, DP 64: 18,393 tokens/s per GPU (+3.3% over the page's 17,809) with the callback's bucket
    filled from the stage's tensors; +1.1% with Megatron-Core's default even split. The correction makes it worse.
    18,280 (+2.6%) with the step's zeroing of the gradient buffer [27 s18 zerograd]; 18,023 (+1.2%) with the
    Blackwell GEMM curve fitted to XLA's B200 table [27 s22 bwshape]."""
    table = load_set("nemo-perf-25.04")
    i = next(k for k, r in enumerate(table.rows) if r.workload == "nemotron4-15b")
    got = validate_set(table)[i]
    # 17,812 (+0.0%) [27 s22 bwshape, relative fit]
    assert got.predicted == pytest.approx(17812, rel=0.003)
    assert got.error == pytest.approx(0.000, abs=0.003)
