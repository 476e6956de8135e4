"""A DGX / HGX B300 [27 s25 b300]: the `dgx-b300` topology (8 Blackwell Ultra GPUs on NVLink5, 8 x 800 Gb/s
ConnectX-8) and its GPU, "B300": MAMF-derived plateaus that Transformer Engine's own B300 GEMM profile confirms,
NVFP4 at that profile's rate, the GB300's measured attention scaled to it."""

from __future__ import annotations

import pytest

from commlens.monitor.core import _default_topology
from commlens.project import ParallelLayout, project
from commlens.project.compute import gemm_time_s
from commlens.project.efficiency import attention_entries
from commlens.project.hardware import device_for
from commlens.topology import load_topology
from commlens.workload import load_workload

M = 15872  # TE's profile: hidden 4096, FFN 16384, micro-batch 31 x 512 tokens
FPROP = ((M, 4096, 12288), (M, 4096, 4096), (M, 4096, 16384), (M, 16384, 4096))  # M x K x N


def _layer_s(precision: str) -> float:
    dev = device_for("B300")
    peak, elem = dev.peak("bf16"), 2.0
    if precision == "fp8":
        peak, elem = dev.peak("fp8") * (dev.fp8_gemm_efficiency or 1.0) / dev.gemm_efficiency, 1.0
    return sum(
        gemm_time_s(dev, peak, m, n, k, elem_bytes=elem)  # forward
        + gemm_time_s(dev, peak, m, k, n, elem_bytes=elem)  # data gradient
        + gemm_time_s(dev, peak, k, n, m, elem_bytes=elem)  # weight gradient
        for m, k, n in FPROP
    )


def test_the_gemm_curve_meets_te_s_own_b300_profile():
    """TransformerEngine docs/examples/gemm_profiling (1609c890e), 'NVIDIA B300 SXM6 AC', pre-quantized per layer:
    BF16 13.102 ms, FP8 current scaling 6.812 ms. The curve (MAMF x 0.893) is within 3%."""
    assert _layer_s("bf16") == pytest.approx(13.102e-3, rel=0.03)
    assert _layer_s("fp8") == pytest.approx(6.812e-3, rel=0.03)


def test_a_dgx_b300_projects_nvfp4_and_reads_the_gb300_attention_scaled():
    topo = load_topology("dgx-b300")
    assert topo.accelerator.name == "B300" and topo.accelerators_per_node == 8
    assert topo.scale_out is not None and topo.scale_out.nic_bandwidth_bytes_per_s == 100e9  # 800 Gb/s
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 16, "micro_batch": 2, "precision": "fp8"})

    def step(recipe: str) -> float:
        lay = ParallelLayout(recompute="none", fp8_recipe=recipe)  # type: ignore[arg-type]
        return project(w, topo, lay, 8).step_time_s

    assert step("nvfp4") < step("current") < step("mxfp8") * 1.01
    # the GB300's cuDNN tables, scaled by the two GPUs' bf16 plateaus (2250 x 0.702 against 2500 x 0.653)
    entries, factor = attention_entries("B300", ())
    own, one = attention_entries("B300 (GB300)", ())
    b300, gb300 = device_for("B300"), device_for("B300 (GB300)")
    ratio = b300.peak("bf16") * b300.gemm_efficiency / (gb300.peak("bf16") * gb300.gemm_efficiency)
    assert one == 1.0 and factor == pytest.approx(ratio) and 0.95 < factor < 0.98
    # and held at the B300's sustained share (its 1000 W, as the DGX B200's), the GB300's (1400 W) at 1
    assert b300.attention_sustained == 0.853 and gb300.attention_sustained == 1.0
    assert [e[5] for e in entries] == pytest.approx([e[5] * 0.853 for e in own])


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIA GB300", "gb300-nvl72"),
        ("NVIDIA GB200", "gb200-nvl72"),
        ("NVIDIA B300 SXM6 AC", "dgx-b300"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA H100 80GB HBM3", "dgx-h100"),
    ],
)
def test_the_monitor_picks_the_system_of_the_gpu_it_runs_on(device: str, preset: str):
    assert _default_topology(device) == preset


def test_the_published_b300_rows_project():
    """Held out (session 25): MLPerf v5.1's four B300 HGX results (Llama 3.1 8B, FP8 and NVFP4) +4.3, +0.7, -0.9,
    +3.9%; Megatron-Bridge's DGX-B300 MoE rows DeepSeek-V3 +1.3 / +4.0%, Qwen3-30B +10.2 / +5.7%, Qwen3-235B -4.2%,
    GPT-OSS +23.3 / +27.6% (their B200 twins +17% / +19%) and at EP 64 over 8 nodes +56.1% (at 400 Gb/s a GPU +9.4%)."""
    from commlens.project.validate import load_set, validate_set

    errors: dict[str, list[float]] = {}
    for name in ("mlperf-training-llm", "megatron-bridge-perf-26.02.01-moe", "megatron-bridge-perf-26.04.01-moe"):
        table = load_set(name)
        for row, r in zip(table.rows, validate_set(table)):
            if row.topology == "dgx-b300":
                assert r.error is not None, r.refused
                errors.setdefault(name, []).append(r.error)
    assert len(errors["mlperf-training-llm"]) == 4 and all(abs(e) < 0.05 for e in errors["mlperf-training-llm"])
    moe = errors["megatron-bridge-perf-26.02.01-moe"] + errors["megatron-bridge-perf-26.04.01-moe"]
    assert len(moe) == 8 and all(-0.05 < e < 0.6 for e in moe)
