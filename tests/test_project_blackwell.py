"""The Blackwell presets (GB200's B200, GB300's Blackwell Ultra B300) against their sources: the dense-MMA peaks and
cuDNN attention rates NVIDIA's cudnn-frontend training benchmark measured on both (cuDNN 9.27), the GEMM plateaus taken
from them, and the GB300 / GB200 throughput ratio they give on the layout the 26.04.01 table ran on both."""

from __future__ import annotations

import dataclasses

import pytest

from commlens.project.efficiency import attention_tflops
from commlens.project.hardware import device_for
from commlens.project.validate import load_set, validate_set

GB200, GB300 = "B200 (GB200)", "B300 (GB300)"


def test_gb300_computes_at_the_gb200s_dense_rate_with_its_own_attention():
    """Blackwell Ultra keeps the B200's dense BF16/FP8 tensor rates (the cudnn-frontend runs sample 2578 and 2568 TFLOP/s
    bf16 dense-MMA peaks under load) and doubles the SFU exponential rate that bounds attention's softmax: cuDNN's
    causal forward at 8K runs 1886 TFLOP/s on a GB300 against 1559 on a GB200, the backward 1420 against 1297."""
    gb200, gb300 = device_for(GB200), device_for(GB300)
    assert gb300.peak("bf16") == gb200.peak("bf16") == 2500e12
    assert gb300.peak("fp8") == gb200.peak("fp8") == 5000e12
    # the GB300's plateau: the GB200's MAMF at the ratio of the two sampled peaks, not an HGX B300's (1100 W) rate
    assert gb300.gemm_efficiency == pytest.approx(1822.0 * 2578 / 2568 / 2500 * 0.893, abs=6e-4)
    assert gb300.gemm_efficiency > gb200.gemm_efficiency
    fwd = {d: attention_tflops(d, "cudnn", "fwd", 128, 8192) for d in (GB200, GB300)}
    bwd = {d: attention_tflops(d, "cudnn", "bwd", 128, 8192) for d in (GB200, GB300)}
    assert fwd[GB300] == pytest.approx(1886e12) and fwd[GB200] == pytest.approx(1559e12)
    assert bwd[GB300] == pytest.approx(1420e12) and bwd[GB200] == pytest.approx(1297e12)
    # Transformer Engine's FlashAttention-3 path on Blackwell stands in with cuDNN's rates, not the step model's default
    assert attention_tflops(GB300, "fa3", "fwd", 128, 8192) == fwd[GB300]


def test_gb200_fp8_gemms_run_at_the_sustained_rate():
    """Azure's sustained cuBLASLt FP8 run on ND GB200 v6 (CUDA 12.8) reaches 0.804 of the GB200 MAMF where its H200 run
    at the same CUDA 12.8 and driver reaches 0.917 (best 1333.2) of the Hopper MAMF (1453.4, torch+cu128): the GB200's
    FP8 plateau is its MAMF's (0.646) x 0.877. [27 s15 bwfp8ratio] The divisor was 0.9455, the H100/H200 runs at CUDA
    12.6 (1382.2, 1366.3), which set a 12.6 cuBLASLt against the 12.8 MAMF and GB200 run: 0.549 then, 0.566 now."""
    gb200 = device_for(GB200)
    hopper_kept = 1333.2 / 1453.4  # Azure's H200 re-run at CUDA 12.8 (AI-benchmarking-guide fork b408bf8) / MAMF
    assert gb200.fp8_gemm_efficiency == pytest.approx(3615.6 / 5000 * 0.893 * (2906.9 / 3615.6) / hopper_kept, abs=1e-3)
    assert gb200.fp8_gemm_efficiency > 0.56  # not the CUDA 12.6 divisor's 0.549
    assert gb200.fp8_gemm_efficiency < device_for(GB300).fp8_gemm_efficiency


def test_gb300_outruns_gb200_on_the_same_layout():
    """The 26.04.01 table ran Llama 3 70B FP8 at TP 1, FSDP over 64 GPUs on both racks (the GB200 offloading 40 layers'
    activations, the GB300 20): 5248 against 4224 tokens/s/GPU, 1.24. The presets give the GB300 the faster step (they
    gave 0.95 before the GB300's attention and sustained GEMM rates were sourced)."""
    table = load_set("megatron-bridge-perf-26.04.01-dense")
    rows = tuple(r for r in table.rows if r.workload == "llama3-70b" and r.layout["tp"] == 1 and r.layout["pp"] == 1)
    assert sorted(r.topology for r in rows) == ["gb200-nvl72", "gb300-nvl72"]
    results = {r.topology: r for r in validate_set(dataclasses.replace(table, rows=rows))}
    ratio = results["gb300-nvl72"].predicted / results["gb200-nvl72"].predicted
    published = results["gb300-nvl72"].published / results["gb200-nvl72"].published
    assert published == pytest.approx(5248 / 4224)
    assert 1.1 < ratio < published + 0.05
