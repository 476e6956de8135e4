"""The DGX B200's (1000 W) FP8 GEMM plateau at its sustained rate, as the GB200's: under tensor-core work run back to
back a B200 drops from 1965 to ~1580 MHz and from 1450 to 1237 TFLOP/s (flashinfer-ai/flashinfer PR #2899), where a
Hopper keeps 0.917 of its MAMF (Azure's sustained cuBLASLt run on H200 at CUDA 12.8, the toolkit of that MAMF and of
the GB200 run; 0.946 from the CUDA 12.6 runs before [27 s15 bwfp8ratio]). Without it the model put a B200 ahead of a GB200
(1200 W, higher clocks) in FP8, which Megatron-Bridge 25.11 measured the other way round."""

from __future__ import annotations

import dataclasses

import pytest

from commlens.project.hardware import device_for
from commlens.project.validate import load_set, validate_set


def test_b200_fp8_gemms_run_at_the_sustained_rate():
    """FP8 plateau = MAMF 3432.5 of 4500 x 0.893 x (1237 / 1450) / (1333.2 / 1453.4); BF16 stays at its MAMF x 0.893,
    as the GB200's does (no sustained BF16 GEMM run of either is published). [27 s15 bwfp8ratio] the Hopper divisor is
    Azure's H200 run at CUDA 12.8 (0.917; was 0.9455 from the CUDA 12.6 H100/H200 runs, plateau 0.615 -> 0.633)."""
    b200 = device_for("B200")
    hopper_kept = 1333.2 / 1453.4  # Azure's H200 re-run at CUDA 12.8 (AI-benchmarking-guide fork b408bf8) / MAMF
    assert b200.fp8_gemm_efficiency == pytest.approx(3432.5 / 4500 * 0.893 * (1237 / 1450) / hopper_kept, abs=1e-3)
    assert b200.gemm_efficiency == pytest.approx(1745.0 / 2250 * 0.893, abs=1e-3)
    # the sustained FP8 rate of a 1000 W B200 is no longer above a 1200 W GB200's (it was 3065 against 2745 TFLOP/s)
    gb200 = device_for("B200 (GB200)")
    assert b200.peak("fp8") * b200.fp8_gemm_efficiency <= 1.01 * gb200.peak("fp8") * gb200.fp8_gemm_efficiency


def test_gb200_outruns_b200_on_the_same_fp8_layout():
    """Megatron-Bridge 25.11 ran Llama 3 8B FP8 (current scaling) at TP 1, DP 8 with the same recipe on a DGX-B200 and a
    DGX-GB200: 30624 against 31508 tokens/s/GPU, the GB200 1.029x the B200. The presets gave 0.947 (the B200 ahead)."""
    table = load_set("megatron-bridge-perf-25.11")
    rows = tuple(r for r in table.rows if r.workload == "llama3-8b" and r.topology in ("b200", "gb200-nvl72"))
    assert sorted(r.topology for r in rows) == ["b200", "gb200-nvl72"]
    results = {r.topology: r for r in validate_set(dataclasses.replace(table, rows=rows))}
    ratio = results["gb200-nvl72"].predicted / results["b200"].predicted
    published = results["gb200-nvl72"].published / results["b200"].published
    assert published == pytest.approx(31508 / 30624)
    assert 1.0 < ratio < published + 0.05
