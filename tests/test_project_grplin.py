"""Transformer Engine's GroupedLinear GEMM pass as measured (issue 27, [27 s11 grplin]): Megatron-Core's unfused
experts run one cuBLASLt GEMM per expert over TE's compute streams (``general_grouped_gemm`` ->
``nvte_multi_tensor_gemm`` -> ``multi_stream_cublas_gemm``). TransformerEngine PR #2045 timed that path on Hopper at
Qwen3-30B-A3B's expert shapes (16-bit, 1,000 back-to-back calls, wall clock): TE 2.2 and TE 2.7 (CUDA 12.9). An
H100 BF16 projection of those experts prices each expert's GEMM within what the two releases measured: no faster
than TE 2.7 ran it, no slower than TE 2.2 did. A per-expert cost added on top of the GEMM's FLOPs (a floor, a
stream-sync share) would break this: the measured pass leaves no room for one at these sizes."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.frameworks import framework as resolve_framework
from commlens.project.hardware import device_for
from commlens.project.kernels import LayerShape, layer_kernels
from commlens.workload import load_workload

HIDDEN, EXPERT_FFN = 2048, 768  # Qwen3-30B-A3B


def _fc2_forward_per_expert_s(ep: int) -> float:
    """Seconds of one expert's fc2 forward GEMM (rows x 2048 x 768) in a Qwen3-30B MoE layer on an H100, BF16,
    Megatron-Core's unfused experts at EP ``ep``, 4,096 tokens (4,096 x top-8 / (128 / ep) rows per expert)."""
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "micro_batch": 1, "precision": "bf16"})
    lay = ParallelLayout(ep=ep, framework="megatron-core")
    assert not lay.moe_fused_mlp
    dev = device_for("H100 SXM")
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=ep, sp=False, tp_chunks=1)
    fw = resolve_framework("megatron-core")
    kernels = layer_kernels(dev, fw, w, lay, shape, dev.peak("bf16"), dev.peak("bf16"), True)
    (down,) = [k for k in kernels if k.name == "experts_out"]
    return down.fwd_s / (128 // ep)


@pytest.mark.parametrize(
    ("ep", "rows", "te27_tflops", "te22_tflops"),
    [
        # PR #2045: (g, m, n, k) = (8, 4096, 768, 2048) ran at 627.903 TFLOP/s (TE 2.7) and 508.77 (TE 2.2)
        (16, 4096, 627.903, 508.77),
        # (16, 2048, 768, 2048): 553.945 (TE 2.7) and 398.81 (TE 2.2)
        (8, 2048, 553.945, 398.81),
    ],
)
def test_an_unfused_expert_gemm_on_h100_costs_what_te_s_multi_stream_pass_measured(
    ep: int, rows: int, te27_tflops: float, te22_tflops: float
) -> None:
    flops = 2.0 * rows * EXPERT_FFN * HIDDEN
    te27_s, te22_s = flops / (te27_tflops * 1e12), flops / (te22_tflops * 1e12)  # 20.5 / 25.3 us, 11.6 / 16.2 us
    model_s = _fc2_forward_per_expert_s(ep)
    assert te27_s <= model_s <= te22_s
