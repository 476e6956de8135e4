"""The experts' GEMMs as Megatron-Core runs them (issue 27, [27 s10 gemmshape]): Transformer Engine's GroupedLinear
launches one cuBLASLt GEMM per expert, and a GEMM of a few GFLOP runs slower than the shape curve gives (a short
reduction pays its prologue, epilogue and tail wave in full). Each such GEMM is priced no faster than the GEMMs of
its FLOP count measured on its GPU generation (efficiency.yaml's ``gemm`` rows and ``per_expert`` loop rows, or the
user's own in ``COMMLENS_EFFICIENCY``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.project import ParallelLayout
from commlens.project.compute import gemm_time_s
from commlens.project.efficiency import EFFICIENCY_ENV, gemm_rate_cap
from commlens.project.frameworks import framework as resolve_framework
from commlens.project.hardware import device_for
from commlens.project.kernels import LayerShape, layer_kernels
from commlens.workload import load_workload

# Qwen3-235B-A22B on B200, PP 8, EP 8, MBS 1 at 4k: 16 local experts, 4096 x 8 / 16 = 2048 rows each; fc2 (2048 x
# 4096 x 1536) is 25.8 GFLOP, fc1 (one GEMM of both halves, 2048 x 3072 x 4096 [27 s10 gateup]) twice that
EXPERT_GEMM_FLOPS = 2.0 * 2048 * 1536 * 4096


def _experts_s(framework: str = "megatron-core", precision: str = "bf16") -> float:
    """Forward + backward seconds of one MoE layer's routed-expert GEMMs of Qwen3-235B on a B200 (EP 8, 4096 tokens;
    fp8: MXFP8, TE's fused grouped MLP for Megatron-Core)."""
    w = load_workload("qwen3-235b-a22b", {"seq_len": 4096, "micro_batch": 1, "precision": precision})
    fp8 = precision == "fp8"
    lay = ParallelLayout(ep=8, framework=framework, fp8_recipe="mxfp8" if fp8 else None, moe_fused_mlp=fp8)
    dev = device_for("B200")
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=8, sp=False, tp_chunks=1)
    peak = dev.peak("fp8") * (dev.fp8_gemm_efficiency or 1.0) / dev.gemm_efficiency if fp8 else dev.peak("bf16")
    kernels = layer_kernels(dev, resolve_framework(framework), w, lay, shape, peak, dev.peak("bf16"), True)
    return sum(k.fwd_s + k.bwd_s for k in kernels if k.name in ("experts_in", "experts_out"))


def _measured(tmp_path: Path, tflops: float) -> str:
    """An efficiency file with a measured per-expert loop of the experts' shape on B200, bf16 and fp8."""
    path = tmp_path / f"experts-{tflops:g}.yaml"
    path.write_text(
        "format: commlens.efficiency/1\ngpus:\n  B200:\n    grouped_gemm:\n"
        f"      - {{dtype: bf16, layout: per_expert, groups: 16, tokens_per_expert: 2048, n: 1536, k: 4096,"
        f" tflops: {tflops}, origin: test}}\n"
        f"      - {{dtype: fp8, layout: per_expert, groups: 16, tokens_per_expert: 2048, n: 1536, k: 4096,"
        f" tflops: {tflops}, origin: test}}\n"
        f"      - {{dtype: bf16, layout: per_expert, groups: 16, tokens_per_expert: 2048, n: 3072, k: 4096,"
        f" tflops: {tflops}, origin: test}}\n",
        encoding="utf-8",
    )
    return str(path)


def test_the_per_expert_cublas_loop_row_prices_a_gemm_of_its_size_on_hopper():
    """Knarf04/grouped_gemm's uniform run (128 experts x 512 rows of Qwen3-30B's up projection, one cuBLAS GEMM per
    expert) took 3.184 ms forward + backward, 388.49 TFLOP/s: the rate of a GEMM of that size on H100, and on H200
    (the same SMs and clocks); the shape curve alone would give more in every pass."""
    flops = 2.0 * 512 * 1536 * 2048
    assert gemm_rate_cap("H100 SXM", "bf16", flops) == pytest.approx(388.49e12)
    assert gemm_rate_cap("H200 SXM", "bf16", flops) == pytest.approx(388.49e12)
    dev = device_for("H100 SXM")
    curve = [
        gemm_time_s(dev, dev.peak("bf16"), *shape)
        for shape in ((512, 1536, 2048), (512, 2048, 1536), (2048, 1536, 512))
    ]
    assert all(flops / t > 388.49e12 for t in curve)
    # 128 experts' forward, data and weight gradients at that rate: the run's 3.184 ms
    rate = gemm_rate_cap("H100 SXM", "bf16", flops)
    assert rate is not None and 128 * 3 * flops / rate == pytest.approx(3.184e-3, rel=1e-3)


def test_an_fp8_gemm_of_a_2048_cube_is_capped_at_the_measured_cublaslt_rate():
    """Azure's cuBLASLt fp8 runs measured 1011.3 (H100) and 1013.4 (H200) TFLOP/s at 2048^3, where the shape curve
    gives ~1220; 1024 x 2145 x 1024 ran at 410.7 / 407.9; a fp8 GEMM with a 192-wide side (another shape class) is
    not read."""
    cube = 2.0 * 2048**3
    assert gemm_rate_cap("H100 SXM", "fp8", cube) == pytest.approx(1013.4e12)
    assert gemm_rate_cap("H100 SXM", "fp8", 2.0 * 1024 * 2145 * 1024) == pytest.approx(410.7e12)
    # between the two, interpolated in log2 of the FLOPs
    mid = gemm_rate_cap("H100 SXM", "fp8", 2.0 * 1024 * 2145 * 1024 * 2)
    assert mid is not None and 410.7e12 < mid < 1013.4e12
    assert gemm_rate_cap("A100 SXM 80GB", "fp8", cube) is None  # nothing tabled


def test_a_measured_per_expert_rate_prices_megatron_s_experts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A user's measured per-expert loop at the experts' shapes sets their GEMM seconds: 16 local experts x (fc1, one
    GEMM of both halves, and fc2: 3 x fc2's FLOPs) x 3 passes at the measured rate; the shipped tables price them
    faster."""
    shipped = _experts_s()
    for tflops in (500, 250):
        monkeypatch.setenv(EFFICIENCY_ENV, _measured(tmp_path, tflops))
        assert gemm_rate_cap("B200", "bf16", EXPERT_GEMM_FLOPS) == pytest.approx(tflops * 1e12)
        assert _experts_s() == pytest.approx(16 * 3 * 3 * EXPERT_GEMM_FLOPS / (tflops * 1e12), rel=1e-9)
        assert shipped < _experts_s()


def test_one_kernel_grouped_gemms_are_not_priced_as_lone_gemms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """TE's fused grouped MLP (MXFP8) and torchtitan's torch._grouped_mm run all experts in one kernel, whose tiles
    share the waves: a measured per-expert loop does not price them."""
    before = {(fw, p): _experts_s(fw, p) for fw in ("megatron-core", "torchtitan") for p in ("bf16", "fp8")}
    monkeypatch.setenv(EFFICIENCY_ENV, _measured(tmp_path, 250))
    assert _experts_s("megatron-core", "fp8") == before["megatron-core", "fp8"]
    assert _experts_s("torchtitan", "bf16") == before["torchtitan", "bf16"]
    assert _experts_s("megatron-core", "bf16") > before["megatron-core", "bf16"]


def test_torchao_b200_one_kernel_grouped_gemm_rows_are_tabled_but_do_not_price_te_experts():
    """torchao's B200 microbenchmarks of torch._grouped_mm (bf16) and torch._scaled_grouped_mm (MXFP8) are tabled as
    contiguous one-kernel rows [27 s17 bwgroup]: DeepSeek-V3's expert shape (N 2048, K 7168) over 8 groups of 16,000
    rows ran forward + backward at 753 TFLOP/s in bf16, 2,115 in MXFP8 (the GEMM kernels alone). Another kernel than
    TE's per-expert cuBLASLt loop, so they do not cap Megatron-Core's experts: the B200 bf16 rate at that size stays the
    dense cuBLAS measurement (1,745 TFLOP/s)."""
    from commlens.project.efficiency import _shipped_data

    rows = _shipped_data()["gpus"]["B200"]["grouped_gemm"]
    got = {(r["dtype"], r["groups"], r["n"], r["k"]): r for r in rows if r["layout"] == "contiguous"}
    assert got["bf16", 8, 2048, 7168]["tflops"] == pytest.approx(
        3 * 2 * 128000 * 2048 * 7168 / 14966.80e-6 / 1e12, 1e-3
    )
    assert got["mxfp8", 8, 2048, 7168]["tflops"] == pytest.approx(
        3 * 2 * 131072 * 2048 * 7168 / ((1671.2 + 1683.4 + 2103.3) * 1e-6) / 1e12, 1e-3
    )
    assert all("pytorch/ao@ccd503511e8d4e793ee87bc015eaedeb32f68319" in r["origin"] for r in got.values())
    assert gemm_rate_cap("B200", "bf16", 2.0 * 16000 * 2048 * 7168) == pytest.approx(1745.0e12, rel=1e-3)
