"""[27 s15 te114cp] The NeMo 25.04 container's Transformer Engine (3b2a7b00, 1.14.0) runs context parallelism through
AttnFuncWithCPAndKVP2P (Megatron-LM cbc89b32: cp_comm_type unset -> "p2p"), which copies half the K/V or half of Q
every forward ring step, and half the K/V or the halves of Q, the output and its gradient plus a torch.cat of dK and dV
every backward step; once a call it concatenates K and V into the ring buffer, zeroes the output, corrects the
diagonal step's output, copies K/V into the backward's ring buffer and adds the diagonal step's gradients. The
nemo-25.04 profile prices them (cp_step_bytes, cp_call_bytes); megatron-core's later TE does not copy."""

from __future__ import annotations

import pytest
from projectutil import long_sequence_run

from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def _llama3_8b(seq_len: int, gpus: int, **layout: object) -> tuple[dict[str, float], float]:
    return long_sequence_run("llama3-8b", "b200", seq_len, gpus, **layout)


def test_the_25_04_profile_prices_te_1_14s_ring_copies():
    fw, base = framework("nemo-25.04"), framework("megatron-core")
    assert fw.cp_step_bytes == (5.5, 1.0, 7.5, 8.5)  # as TE 1.4's (nemo-24.03): the same copies at 1.14
    assert fw.cp_step_bytes == framework("nemo-24.03").cp_step_bytes
    assert fw.cp_call_bytes == (8.0, 4.0, 4.0, 12.0)
    assert base.cp_step_bytes == (4.5, 0.0, 4.5, 4.5) and base.cp_call_bytes == (0.0, 0.0, 0.0, 0.0)


def test_a_cp_row_pays_them_and_a_row_without_cp_does_not():
    """The 32K row of the long-context page (CP 2) carries the extra ring bytes per layer and micro-batch; the 8K row
    (CP 1) projects exactly as before."""
    shape = {"tp": 1, "cp": 2, "dp": 4, "zero": 1, "fp8_recipe": "delayed"}
    new, new_step = _llama3_8b(32768, 8, **shape, framework="nemo-25.04")
    old, old_step = _llama3_8b(32768, 8, **shape, framework="nemo-25.02")  # megatron-core's ring, same attention
    w = load_workload("llama3-8b", {"seq_len": 32768})
    tokens = 32768 / 2
    q = tokens * w.heads * w.v_head_dim
    kv = tokens * w.kv_heads_n * (w.qk_head_dim + w.v_head_dim)
    dev = device_for(load_topology("b200").accelerator.name)
    per = stream_time_s(dev, (5.5 + 8.0) * q + (1.0 + 4.0) * kv) + stream_time_s(
        dev, (7.5 + 4.0) * q + (8.5 + 12.0) * kv
    )
    per -= stream_time_s(dev, 4.5 * q) + stream_time_s(dev, 4.5 * q + 4.5 * kv)
    passes = w.layers * 128 / 4  # 128 sequences over DP 4, micro-batch 1
    assert new["cp_ring"] - old["cp_ring"] == pytest.approx(per * passes, rel=1e-6)
    assert new_step > old_step
    short = {"tp": 1, "dp": 2, "zero": 1, "fp8_recipe": "delayed"}
    assert _llama3_8b(8192, 2, **short, framework="nemo-25.04")[1] == pytest.approx(
        _llama3_8b(8192, 2, **short, framework="nemo-25.02")[1], rel=1e-12
    )


def test_the_long_context_b200_cp_rows_move():
    """Before: +6.9, +8.5, +14.4, +15.9, +19.6, +15.3, +14.3, +15.5% (megatron-core's ring ops). With TE 1.14's ring:
    +6.9, +8.5, +13.0, +14.5, +18.7, +14.8, +13.9, +15.2%; then the B200's FP8 sustained factor against the H200's CUDA
    12.8 run (0.902 -> 0.930, [27 s15 bwfp8ratio]): +8.4, +9.8, +14.0, +15.1, +19.1, +15.1, +14.0, +15.2%; then the
    B200's sustained attention rate [27 s20 attsust]: +4.2, +3.5, +4.7, +3.2, +4.9, +0.1, -1.6, -1.0%; then the
    Blackwell GEMM curve fitted to XLA's B200 table [27 s22 bwshape] gives the figures below."""
    errors = [s.error for s in validate_set(load_set("nemo-long-context-b200"))]
    # [27 s22 smallring] the TP 2 and TP 4 rows' rings: +4.6, -0.2, -1.7% before on the fifth to seventh
    # [27 s22 bwshape, relative fit]: +2.4, +2.2, +3.7, +2.6, +4.0% before on the first five
    assert errors == pytest.approx([0.011, 0.013, 0.031, 0.022, 0.037, -0.006, -0.019, -0.012], abs=0.002)
