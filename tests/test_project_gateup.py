"""A gated FFN's first projection as each stack runs it (issue 27, [27 s10 gateup]): Megatron-Core's linear_fc1 is
one linear of twice the FFN width (one GEMM of N = 2 x ffn per pass, dense, shared experts and each routed expert);
torchtitan runs w1 and w3, two GEMMs of N = ffn; NeMo AutoModel runs gate_proj and up_proj apart in its dense MLP
and one gate_and_up_projs GEMM per expert. The FLOPs are the same; the shape, and so the rate, is not."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.compute import gemm_time_s
from commlens.project.frameworks import framework as resolve_framework
from commlens.project.hardware import device_for
from commlens.project.kernels import Kernel, LayerShape, layer_kernels
from commlens.workload import load_workload

DEV = device_for("H100 SXM")
PEAK = DEV.peak("bf16")
TOKENS = 4096


def _kernels(workload: str, framework: str, tp: int = 1, ep: int = 1) -> dict[str, Kernel]:
    """One bf16 layer's kernels at 4096 tokens on an H100 (an MoE layer where the workload has experts)."""
    w = load_workload(workload, {"seq_len": TOKENS, "micro_batch": 1, "precision": "bf16"})
    lay = ParallelLayout(tp=tp, ep=ep, framework=framework)
    shape = LayerShape(tokens=TOKENS, keys=TOKENS, tp=tp, ep=ep, sp=tp > 1, tp_chunks=1)
    ks = layer_kernels(DEV, resolve_framework(framework), w, lay, shape, PEAK, PEAK, w.moe is not None)
    return {k.name: k for k in ks}


def _curve(m: float, n: float, k: float) -> tuple[float, float]:
    """(forward, backward) seconds of one (m x k) @ (k x n) GEMM on the shape curve: the forward, then the data
    gradient (m, k, n) and the weight gradient (k, n, m)."""
    return gemm_time_s(DEV, PEAK, m, n, k, elem_bytes=2.0), gemm_time_s(DEV, PEAK, m, k, n, elem_bytes=2.0) + (
        gemm_time_s(DEV, PEAK, k, n, m, elem_bytes=2.0)
    )


def test_megatron_core_runs_a_dense_gated_layers_gate_and_up_as_one_gemm_of_twice_the_width():
    """Llama-3 8B at TP 8: Megatron-Core's linear_fc1 is 4096 x 3584 x 4096 (2 x 14336 / 8), one GEMM per pass;
    torchtitan's w1 and w3 are two of 4096 x 1792 x 4096. At this shape the one wide GEMM is faster per FLOP."""
    f_t = 14336 / 8
    mcore = _kernels("llama3-8b", "megatron-core", tp=8)["ffn_in"]
    titan = _kernels("llama3-8b", "torchtitan", tp=8)["ffn_in"]
    wide, half = _curve(TOKENS, 2 * f_t, 4096), _curve(TOKENS, f_t, 4096)
    assert (mcore.fwd_s, mcore.bwd_s) == pytest.approx(wide)
    assert (titan.fwd_s, titan.bwd_s) == pytest.approx((2 * half[0], 2 * half[1]))
    assert mcore.flops == titan.flops == 2 * 2.0 * TOKENS * f_t * 4096
    assert mcore.fwd_s < 0.95 * titan.fwd_s  # the shapes differ enough for a user to see it


def test_megatron_core_releases_share_its_fused_fc1_and_torchtitan_derived_stacks_state_theirs():
    """Every Megatron-Core profile (releases, NeMo) runs one fc1 GEMM; torchtitan two, experts included; NeMo
    AutoModel two in the dense MLP and one per routed expert."""
    for name in ("megatron-core", "megatron-core-25.11", "megatron-core-fsdp2", "nemo", "nemo-24.03"):
        fw = resolve_framework(name)
        assert fw.gate_up_fused and fw.experts_fused_fc1(), name
    titan, auto = resolve_framework("torchtitan"), resolve_framework("automodel")
    assert not titan.gate_up_fused and not titan.experts_fused_fc1()
    assert not auto.gate_up_fused and auto.experts_fused_fc1()


def test_automodels_routed_experts_run_one_gate_and_up_gemm_per_expert_and_torchtitans_two():
    """Qwen3-30B-A3B at EP 8: 16 local experts of 4096 x 8 / 16 = 2048 rows; AutoModel's gate_and_up_projs is one
    2048 x 1536 x 2048 GEMM per expert, torchtitan's w1 and w3 two of 2048 x 768 x 2048 (torch._grouped_mm each)."""
    local, rows = 16, TOKENS * 8 / 16
    auto = _kernels("qwen3-30b-a3b", "automodel", ep=8)["experts_in"]
    titan = _kernels("qwen3-30b-a3b", "torchtitan", ep=8)["experts_in"]
    wide, half = _curve(rows, 2 * 768, 2048), _curve(rows, 768, 2048)
    assert (auto.fwd_s, auto.bwd_s) == pytest.approx((local * wide[0], local * wide[1]))
    assert (titan.fwd_s, titan.bwd_s) == pytest.approx((2 * local * half[0], 2 * local * half[1]))
    assert auto.flops == titan.flops
    assert auto.bwd_s < 0.95 * titan.bwd_s


def test_megatron_cores_shared_expert_is_one_mlp_gemm_of_twice_its_width():
    """DeepSeek-V3's one shared expert (2048 wide) at TP 1: Megatron-Core's SharedExpertMLP runs one 4096 x 4096 x
    7168 fc1 GEMM; torchtitan's FeedForward two of 4096 x 2048 x 7168."""
    mcore = _kernels("deepseek-v3-like", "megatron-core", ep=64)["shared_in"]
    titan = _kernels("deepseek-v3-like", "torchtitan", ep=64)["shared_in"]
    wide, half = _curve(TOKENS, 2 * 2048, 7168), _curve(TOKENS, 2048, 7168)
    assert (mcore.fwd_s, mcore.bwd_s) == pytest.approx(wide)
    assert (titan.fwd_s, titan.bwd_s) == pytest.approx((2 * half[0], 2 * half[1]))
    assert mcore.flops == titan.flops
    assert mcore.bwd_s < 0.98 * titan.bwd_s
