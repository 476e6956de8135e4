"""One transformer layer's pass as the list of kernels it runs, each timed from its own FLOPs, bytes and efficiency.

:func:`layer_kernels` builds the kernels of one layer for one micro-batch on one GPU (its TP/CP/EP share):

- GEMMs (QKV, output projection, FFN, the router, shared experts) by shape at the shape's efficiency
  (:func:`commlens.project.compute.gemm_time_s`); backward = the data- and weight-gradient GEMMs;
- the attention core by kernel family (:mod:`commlens.project.efficiency`: FlashAttention 2/3, cuDNN, CK, or
  unfused batched GEMMs with softmax and dropout through HBM), forward and backward apart, causal, by head size and
  the sequence length one kernel sees (CP splits it);
- routed experts as grouped GEMMs by tokens per expert, slowed by the stated load imbalance (the EP group waits
  for its most loaded GPU);
- memory-bound kernels at HBM rate: norms, rotary embedding, the activation and gating, residual adds with
  dropout, MoE permutation, fp8 casts with their amax; eager stacks run several kernels where a fused one runs
  one (:class:`commlens.project.frameworks.Fused`), and compile fuses them;
- each kernel's host launches, so a layer whose kernels are issued slower than the GPU runs them waits for the
  host.

Backward of a memory-bound kernel moves twice its forward bytes; of the attention core, its backward kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from commlens.project.compute import FLASH_ATTENTION_FRACTION, gemm_time_s, stream_time_s
from commlens.project.efficiency import attention_entries, attention_tflops, gemm_rate_cap, mxfp8_quantize_fit
from commlens.project.errors import InfeasibleLayoutError
from commlens.project.frameworks import Framework, fp8_attention_recipe, generation
from commlens.project.hardware import Device
from commlens.project.layout import ParallelLayout
from commlens.project.memory import NVFP4_BYTES
from commlens.workload import Workload
from commlens.workload.spec import Hybrid

__all__ = [
    "COMPUTE_KINDS",
    "KINDS",
    "Kernel",
    "LayerShape",
    "MODULES",
    "FP8_RECIPES",
    "Fp8Recipe",
    "async_tp_layout_copies",
    "async_tp_unfused_reduce_scatters",
    "fp8_cast_bytes",
    "fp8_recipe",
    "FP8_AUTOCAST_AMAX_ENTRIES",
    "fp8_autocast_amax_reductions",
    "fp8_tp_amax_reductions",
    "graph_share",
    "graph_shares",
    "recompute_share",
    "layer_kernels",
    "unfused_factor",
    "window_entries",
]

# Kernel classes of the breakdown (docs/project.md): compute-bound first, then memory-bound.
KINDS = (
    "gemm",
    "attention",
    "grouped_gemm",
    "norm",
    "rotary",
    "activation",
    "ssm",
    "residual",
    "tp_reduce",
    "tp_copy",
    "cp_ring",
    "moe_routing",
    "launch_gap",
    "fp8_cast",
    "embedding",
    "loss",
    "grad_accum",
    "optimizer",
)
COMPUTE_KINDS = frozenset({"gemm", "attention", "grouped_gemm"})


@dataclass(frozen=True)
class Fp8Recipe:
    """What an fp8 scaling recipe costs beyond its GEMMs' FLOPs. Per element of a GEMM input (forward) or output
    gradient (backward): the bytes its cast moves where the GEMM needs a transposed fp8 copy (Hopper: fp8 GEMMs take
    only the TN layout) and where it takes fp8 in any layout (Blackwell), and the kernels it launches; and its GEMMs'
    throughput relative to per-tensor-scaled fp8 GEMMs (the device's fp8_gemm_efficiency)."""

    bytes_tn_only: float
    bytes_any_layout: float
    launches: int
    gemm_rate: float = 1.0
    # bytes an output gradient's cast moves beyond an input's, per element (NVFP4's stochastic rounding)
    bwd_extra_bytes: float = 0.0
    # MXFP8's 1x32 / 32x1 block scales: its casts are priced per kernel from Transformer Engine's measured quantize
    # times where the device's generation has them (efficiency.mxfp8_quantize_fit) [27 s10 mxcast]
    block_scaled: bool = False


# Casts: Transformer Engine v2.16 (4220403e, the release Megatron-Bridge 21d102f / 26.04 pins), the quantizers of
# transformer_engine/pytorch/csrc/quantizer.cpp and the cast kernels of transformer_engine/common/cast/.
# - delayed: Float8Quantizer::quantize, one nvte_quantize_v2 with the scale from the amax history: the 16-bit tensor
#   read once (2 B), fp8 written (1 B) and, where the GEMM needs it (with_transpose = columnwise_usage &&
#   !nvte_is_non_tn_fp8_gemm_supported()), its transpose (1 B); the amax is taken inside the same kernel.
# - current: Float8CurrentScalingQuantizer::quantize_impl, nvte_compute_amax_with_config (a read, 2 B), then
#   nvte_compute_scale_from_amax (one scalar kernel), then nvte_quantize_v2 (2 B read, 1 B + the transpose's 1 B
#   where needed): two passes over the tensor, three launches (under TP/SP an amax all-reduce besides, not counted).
# - mxfp8: MXFP8Quantizer::quantize, one nvte_quantize_v2 (common/cast/mxfp8/quantize_mxfp8.cuh: ROWWISE_SCALING and
#   COLWISE_SCALING in one kernel) reading 2 B and writing the 1x32 row-wise and 32x1 column-wise copies (1 + 1 B) and
#   their E8M0 scales (1 B per 32 elements each); the weight gradient needs the column-wise copy on every GPU
#   generation (its blocks run along the other dimension), and the scales are written already swizzled for the GEMM
#   (optimize_for_gemm, module/linear.py _get_quantizers) except for a tensor all-gathered under SP (a swizzle of the
#   scales alone at GEMM time, csrc/extensions/swizzle.cpp: not counted).
# The launches are per GEMM input, expert GEMMs included: TE's GroupedLinear casts its inputs with tex.split_quantize
# (csrc/extensions/cast.cpp multi_tensor_quantize_impl), one quantize per expert except for delayed scaling, which it
# fuses into one nvte_multi_cast_transpose (not counted apart).
# GEMMs: Transformer Engine's GEMM benchmark (docs/features/low_precision_training/speedups.rst at d0067d0da6cb, the
# 'pre-quantized' figure gemm_profiling/img/b300_model_config_speedup_prequant.png: a 5B model's layer GEMMs on a
# B300, hidden 4096, FFN 16384) prints 1.94x over BF16 for per-tensor fp8 and 1.74x for MXFP8 with the inputs already
# quantized. (Its 'autocast' figure, casts included: current 1.41x, delayed 1.61x, MXFP8 1.44x, i.e. casts of 0.19,
# 0.11 and 0.12 of the BF16 GEMM time; the bytes below give 5 : 3 : 4.06 on Blackwell.) [27 s23 mxrate] The same PR
# (#2863, 1609c890e) published a second pre-quantized run of the same layer on the same B300:
# docs/examples/gemm_profiling/gemm_profiling.rst's per-layer table, FP8 current 6.812 ms and MXFP8 7.161 ms (1.92x and
# 1.83x over BF16's 13.102 ms; its figure img/b300_model_config_speedup_prequant.png). MXFP8's block-scaled GEMMs run at
# the mean of the two runs' ratios to per-tensor fp8's: (1.74 / 1.94 + 6.812 / 7.161) / 2 = 0.924 (was 1.74 / 1.94 =
# 0.897, the first run alone).
MXFP8_GEMM_RATE = (1.74 / 1.94 + 6.812 / 7.161) / 2
FP8_RECIPES: dict[str, Fp8Recipe] = {
    "delayed": Fp8Recipe(bytes_tn_only=2.0 + 1.0 + 1.0, bytes_any_layout=2.0 + 1.0, launches=1),
    "current": Fp8Recipe(bytes_tn_only=2.0 + 2.0 + 1.0 + 1.0, bytes_any_layout=2.0 + 2.0 + 1.0, launches=3),
    "mxfp8": Fp8Recipe(
        bytes_tn_only=2.0 + 2.0 + 2.0 / 32,
        bytes_any_layout=2.0 + 2.0 + 2.0 / 32,
        launches=1,
        gemm_rate=MXFP8_GEMM_RATE,
        block_scaled=True,
    ),
}
# [27 s25 nvfp4] NVFP4 (Transformer Engine's NVFP4BlockScaling, the defaults of v2.8 to v2.18: recipe/__init__.py):
# every GEMM of a TE linear in NVFP4, 4-bit data with an E4M3 scale per 16 elements and a per-tensor FP32 scale (so an
# amax pass), both copies cast from the 16-bit tensor; the column-wise copies of the weight gradient's inputs (the
# input and the output gradient) Hadamard-transformed (16 x 16), the output gradient stochastically rounded, the
# weights in 16 x 16 blocks (cast once a step, as the fp8 weights). Per input or output-gradient element
# (NVFP4Quantizer::quantize_impl, transformer_engine/pytorch/csrc/quantizer.cpp): one read for both amaxes
# (nvte_hadamard_transform_amax, plus a one-thread kernel zeroing them), then up to v2.13 a row-wise cast (one read,
# 0.5625 B written) and a fused Hadamard-cast-transpose (one read, 0.5625 B); from v2.14 (PR #2555) one kernel for
# both (one read, 1.125 B written): 7.125 or 5.125 B, 4 or 3 launches, plus the scale swizzles
# (Framework.nvfp4_scale_swizzles). Stochastic rounding slows the quantize: TE's tuned NVFP4 cast streams 6.4 TB/s
# round-to-nearest and 4.5 TB/s with stochastic rounding on a B300 (TransformerEngine PR #2412), so an output
# gradient's quantize bytes count 6.4 / 4.5 times. The layer's producers (norm, activation) cannot emit the amax
# under the Hadamard transform (the fused-amax paths are off: csrc/extensions/normalization.cpp, activation.cpp), so
# they write their 16-bit output as the model already prices. The GEMMs run at the device's nvfp4_gemm_rate of its
# per-tensor fp8 GEMMs (accelerators.yaml); TE's GEMM profiling guide lists these same costs (gemm_profiling.rst).
NVFP4_SR_SLOWDOWN = 6.4 / 4.5
NVFP4_UNFUSED_QUANTIZE = 2.0 + NVFP4_BYTES + 2.0 + NVFP4_BYTES  # row-wise, then the Hadamard column-wise cast
NVFP4_FUSED_QUANTIZE = 2.0 + 2.0 * NVFP4_BYTES  # both in one kernel (TE PR #2555)


def nvfp4_recipe(fw: Framework, layout: ParallelLayout | None = None) -> Fp8Recipe:
    """NVFP4's casts as the framework's Transformer Engine runs them (:data:`NVFP4_BYTES` and the note above), with
    the layout's Hadamard transform and stochastic rounding. Without the transform TE casts both copies in one kernel
    after a plain amax pass (quantizer.cpp: nvte_compute_amax_with_config, then nvte_quantize_v2 into both usages,
    common/cast/nvfp4/quantize_transpose_nvfp4.cuh), whatever the release: 5.125 B, 2 launches, and no swizzle
    kernels (those follow the Hadamard cast, TransformerEngine PR #3011)."""
    rht = layout is None or layout.nvfp4_rht
    if rht:
        quantize = NVFP4_FUSED_QUANTIZE if fw.nvfp4_rht_cast_fused else NVFP4_UNFUSED_QUANTIZE
        kernels = (3 if fw.nvfp4_rht_cast_fused else 4) + fw.nvfp4_scale_swizzles
    else:
        quantize, kernels = NVFP4_FUSED_QUANTIZE, 2
    rounding = layout is None or layout.nvfp4_stochastic_rounding
    return Fp8Recipe(
        bytes_tn_only=2.0 + quantize,
        bytes_any_layout=2.0 + quantize,
        launches=kernels,
        bwd_extra_bytes=quantize * (NVFP4_SR_SLOWDOWN - 1.0) if rounding else 0.0,
    )


# GPU generations whose fp8 GEMMs take either layout (TE v2.16 common/transformer_engine.cpp
# nvte_is_non_tn_fp8_gemm_supported: compute capability 10.0 to 11.x and 13.0 on; B200, GB200, B300, GB300)
FP8_ANY_LAYOUT = frozenset({"blackwell"})
# Transformer Engine runs MXFP8 only from sm100 (pytorch check_mxfp8_support: "Device compute capability 10.0 or
# higher required for MXFP8 execution."); its ROCm build from gfx950 (MI355X), whose name reads as cdna3 here, so
# CDNA is left to the user
MXFP8_UNSUPPORTED = frozenset({"volta", "ampere", "hopper"})


def fp8_recipe(fw: Framework, layout: ParallelLayout) -> Fp8Recipe:
    """The layout's fp8 recipe (FP8_RECIPES; nvfp4 as the framework's TE runs it), or the framework's default where
    the layout names none."""
    name = layout.fp8_recipe or fw.fp8_recipe
    return nvfp4_recipe(fw, layout) if name == "nvfp4" else FP8_RECIPES[name]


def recipe_gemm_rate(dev: Device, fw: Framework, layout: ParallelLayout) -> float:
    """The recipe's GEMM throughput against per-tensor fp8 GEMMs on ``dev``: MXFP8's constant, NVFP4's measured on the
    device (``nvfp4_gemm_rate``; a device without one has no NVFP4 tensor cores and is refused)."""
    name = layout.fp8_recipe or fw.fp8_recipe
    if name != "nvfp4":
        return FP8_RECIPES[name].gemm_rate
    if not fw.nvfp4:
        raise InfeasibleLayoutError(
            f"fp8_recipe nvfp4: {fw.name} runs a Transformer Engine (or float8 library) older than NVFP4 (TE 2.7, "
            f"which Megatron-Core's get_fp4_recipe requires): use a 2025-09 or later release profile"
        )
    if dev.nvfp4_gemm_rate is None:
        raise InfeasibleLayoutError(
            f"fp8_recipe nvfp4 needs NVFP4 tensor cores (Blackwell, compute capability 10.0 or higher, as Transformer "
            f"Engine checks: check_nvfp4_support); {dev.name} ({generation(dev.name)}) has none in the accelerator "
            f"table: use the delayed or current recipe"
        )
    return dev.nvfp4_gemm_rate


def fp8_cast_bytes(dev: Device, recipe: Fp8Recipe) -> float:
    """Bytes the recipe's cast moves per element on ``dev``."""
    return recipe.bytes_any_layout if generation(dev.name) in FP8_ANY_LAYOUT else recipe.bytes_tn_only


# Eager (unfused) memory-bound ops, in bytes moved and kernels launched relative to the fused kernel. RMSNorm in
# eager PyTorch: upcast, square, mean, rsqrt, multiply, downcast, weight: ~6 kernels, ~6x the fused bytes;
# rotary in complex arithmetic (upcast to fp32, view as complex, multiply, back): ~5x, 4 kernels per tensor;
# SwiGLU as silu then multiply: 1.7x, 2 kernels; cross-entropy on an fp32 copy of the logits: 1.5x.
UNFUSED = {
    "norm": (6.0, 6),
    "rotary": (5.0, 8),
    # Megatron-Core's unfused rotary (megatron/core/models/common/embeddings/rope_utils.py _apply_rotary_pos_emb_bshd at
    # 44151194): t * cos, _rotate_half's neg of one half and cat, * sin, the add and the final cat with the empty
    # pass-through: 4 + 2 + 4 + 4 + 6 + 4 = 24 B an element against the fused kernel's 4, six kernels per tensor
    "rotary_yarn": (6.0, 12),
    "activation": (1.7, 2),
    "expert_activation": (1.7, 2),
    "bias_dropout_add": (1.0, 1),
    "cross_entropy": (1.5, 4),
}
# Eager ATen kernels (one op a kernel: fp32 upcasts, transcendental math, reductions) stream slower than a copy:
# measured on an H200 (tests/data/calibration/h200-calibration.json, `commlens project calibrate`, 2026-11-29) the
# median of eager add, gelu, softmax, layer_norm and dropout is 0.633 of HBM, where the step model's streaming rate
# (memory_efficiency, a copy-like kernel's) is 0.8: eager ops run at 0.633 / 0.8 of a fused kernel's rate.
EAGER_STREAM_FRACTION = 0.633 / 0.8
LAYER_NORM_KERNELS = 2  # a norm and the residual add beside it (fused kernels)
ATTENTION_KERNELS = 2  # the attention core with its rotary embedding (fused)
FFN_ELEMENTWISE = 1
MOE_ROUTER_KERNELS = 8  # softmax/sigmoid, top-k, the load-balancing loss
MOE_DISPATCH_KERNELS = 10  # token counts, permutation, the all-to-alls of the splits and tokens, unpermute
# Megatron-Core's MoE layer, counted (benchmarks/moe_host_overhead.py with megatron-core 0.16.1: EP 2, alltoall
# dispatcher, softmax top-8 with the aux loss, no router or permute fusion; docs/benchmarks.md "MoE layer host cost"):
# the ATen ops that launch a kernel, (forward, backward) per layer and micro-batch. Router less its gating GEMM
# (a GEMM here): scores, top-k, routing map, aux loss 22 and 10; dispatch: preprocess (token counts gathered over EP,
# splits, device-to-host copies, permutation 1) 18 + 4, the two all-to-alls 4 + 2 and 4 + 2 at EP > 1 (none at
# EP 1, where preprocess is 9 + 4), unpermutation 1 2 + 1; permutation 2 and unpermutation 2 2 + 2 and 2 + 1. The
# backward launches fewer than the forward: most of the routing (top-k, counts, splits) has no gradient.
MCORE_ROUTER_LAUNCHES = (22.0, 10.0)
MCORE_DISPATCH_LAUNCHES = {True: (26.0, 11.0), False: (11.0, 5.0)}  # EP > 1, EP 1
MCORE_SORT_LAUNCHES = (4.0, 3.0)
# launches of a backward per forward launch where a kernel does not count its own (step.BACKWARD_KERNEL_RATIO)
BACKWARD_LAUNCH_RATIO = 2.0
# Megatron-Core's experts under fp8 (NVIDIA/Megatron-LM 44151194 and 92c8482e, megatron/core/transformer/moe/
# experts.py TEGroupedMLP.forward): unless the router or the HybridEP dispatch already padded them
# (moe_utils.skip_routed_expert_padding; 92c8482e's HybridEP pads in the dispatch, so TE finds nothing to pad), the
# routed tokens are padded per expert to the fp8 GEMM's alignment (16, MXFP8 32) with Transformer Engine's
# Fp8Padding before fc1 and the output unpadded with Fp8Unpadding after fc2 (TransformerEngine 4220403e
# transformer_engine/pytorch/module/fp8_padding.py: one fused_multi_row_padding / _unpadding kernel each, a 16-bit
# read and write of every routed token; the probs padded the same way); each one's backward is the other kernel
# over the gradient. Launches (forward, backward): hidden, probs and output, each way.
MCORE_FP8_PAD_LAUNCHES = (3.0, 3.0)
# torch's async TP (pytorch/pytorch torch/distributed/_symmetric_memory/__init__.py, torch 2.5-2.6:
# _fused_matmul_reduce_scatter_impl): each rank computes the matmul's partial output for every rank's shard, the
# owners pull them through symmetric memory (_pipelined_produce_and_all2all), and a separate reduction kernel
# (reduce_fn: torch.sum over the stacked partials) runs after the pipeline, where NCCL's reduce-scatter reduces inside
# the collective: a 16-bit read of the whole unreduced output and a write of this rank's shard per reduce-scatter.
ASYNC_TP_REDUCE_ELEM_BYTES = 2.0
# reduce-scatters per layer pass under sequence parallelism: forward after the attention output projection and after
# the FFN's down projection; backward of the column-parallel QKV and FFN-in (their input gradients)
ASYNC_TP_REDUCE_SCATTERS = 2
# Which of them torch micro-pipelines: its Inductor pass (pytorch/pytorch torch/_inductor/fx_passes/micro_pipeline_tp.py,
# torch 2.5-2.6: fuse_matmul_reduce_scatter, _find_producer_matmul) fuses a reduce-scatter only when its input is one
# matmul's output (aten.mm or aten._scaled_mm, or a reshape of one) used by nothing else. The forward's two are (the
# output projection's and the down projection's). The backward's two reduce the input gradient of a block whose
# linears share one gathered input (torchtitan's wq, wk, wv and w1, w3: separate nn.Linear modules), the sum of their
# data-gradient matmuls: an add, so the pass leaves them as NCCL reduce-scatters, outside the pipeline (exposed, and
# reduced inside the collective: no tp_reduce kernel). The backward's all-gathers (of the output gradient before the
# row-parallel projections' data-gradient matmul) are consumed by one matmul and fused. Each fused all-gather matmul
# first copies this rank's shard into its symmetric-memory buffer and waits at a barrier before the first chunk's
# matmul, unoverlapped (torch/distributed/_symmetric_memory/__init__.py, _pipelined_multi_all_gather_and_consume:
# "giving up the chance to overlap 'mv' and 'b' with the first shard_consumer"): a read and a write of the shard.
ASYNC_TP_SHARD_COPY_BYTES = 2.0  # per byte of the shard
# The data-gradient GEMM of a column-parallel block (QKV, FFN-in) runs whole under either stack's TP overlap:
# Transformer Engine's userbuffers run it beside a bulk all-gather and its reduce-scatter in bulk beside the
# weight-gradient GEMM (NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py initialize_ub: method
# "bulk" for qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad), and torch's async TP leaves its reduce-scatter unfused
# (above). The row-parallel projections' data gradients follow a chunked all-gather (TE "ring_exchange" for
# proj_dgrad and fc2_dgrad; torch's fused all-gather matmul), in TP chunks as their forward.
# The recompute modules (Megatron-Core's --recompute-modules) each kernel belongs to: selective recomputation of a
# module runs its kernels' forward again in the backward.
# [27 s17 dsv3gb200] Transformer Engine bee4649c (the NeMo 25.04 container's, 2.2.0.dev0) dot_product_attention/
# utils.py get_full_mask for a causal mask without padding, called by UnfusedDotProductAttention.forward every forward:
# arange(sq)[:, None] - arange(sk) (int32, 4 B written), swa_left = mask - window and swa_right = mask + 0 (int32, 4 + 4
# each), swa_left <= 0 and swa_right < 0 (4 read, 1 written each), torch.where(cond, 1, 0) twice (python ints: int64,
# 1 read, 8 written each), their difference (16 read, 8 written) and logical_not (8 read, 1 written): 81 B an entry;
# 11 launches (the two aranges, sub, sub, add, le, where, lt, where, sub, logical_not)
UNFUSED_MASK_LAUNCHES = 11.0
MODULES: dict[str, frozenset[str]] = {
    "attention": frozenset({"core_attn"}),
    "softmax": frozenset({"core_attn"}),
    "causal_mask": frozenset({"core_attn"}),
    "q_up": frozenset({"mla_up_proj"}),
    "kv_up": frozenset({"mla_up_proj"}),
    "input_norm": frozenset({"layernorm"}),
    "ffn_norm": frozenset({"layernorm"}),
    "ffn_in": frozenset({"mlp"}),
    "ffn_activation": frozenset({"mlp"}),
    "ffn_out": frozenset({"mlp"}),
    "router": frozenset({"moe"}),
    "router_topk": frozenset({"moe"}),
    "permute": frozenset({"moe"}),
    "experts_in": frozenset({"moe"}),
    "experts_activation": frozenset({"moe", "moe_act"}),
    "experts_out": frozenset({"moe"}),
    "experts_clamp": frozenset({"moe", "moe_act"}),
    "experts_bias": frozenset({"moe"}),
    "shared_in": frozenset({"shared_experts"}),
    "shared_activation": frozenset({"shared_experts"}),
    "shared_out": frozenset({"shared_experts"}),
}
# torchtitan's op-level policy ("op"; torchtitan/parallelisms/parallelize_llama.py _apply_ac_to_transformer_block at
# 9dec370, the same rule at 1ea476e, 3faaa1a and e7c0cae): an op's output is kept when the op is in _save_list (aten.mm,
# the SDPA kernels, reduce-scatter; amax's abs/max) except every second aten.mm, counted from 1 in call order each
# forward; everything else is recomputed. A block's matmuls run wq, wk, wv, wo, w1, w3, w2, so K, the output projection
# and up (w3) are recomputed and Q, V, gate (w1) and down (w2) kept. Float8 linears count the same: torchao's
# Float8Linear (eab345c) calls torch.mm on Float8Tensor arguments, so the policy's dispatch mode sees aten.mm.
OP_POLICY = {
    "input_norm": 1.0,
    "ffn_norm": 1.0,
    "rotary": 1.0,
    "ffn_activation": 1.0,
    "experts_activation": 1.0,
    "shared_activation": 1.0,
    "attention_residual": 1.0,
    "ffn_residual": 1.0,
    "attention_out": 1.0,
    "ffn_in": 0.5,
    "experts_in": 0.5,
    "experts_out": 1.0,
}


# The op policy and TP's collectives [27 s14 tt8btp]: the policy returns PREFER_RECOMPUTE for every op outside
# _save_list, collectives included. _save_list (torchtitan 820504e models/llama3/parallelize_llama.py) holds
# _c10d_functional.reduce_scatter_tensor, so the row-parallel outputs are kept, but not all_gather_into_tensor, so the
# sequence-parallel all-gathers of the attention's and the FFN's inputs are run again in the backward: the recomputed
# K and up (w3) projections and the column-parallel linears' weight gradients read the gathered input. Eager, torch's
# _CachedTorchDispatchMode re-runs what the policy does not save; compiled, torch/utils/checkpoint.py
# _CachingTorchDispatchMode writes the policy into each traced node's meta["recompute"], and
# torch/_functorch/partitioners.py honours it (must_recompute: MUST_RECOMPUTE or PREFER_RECOMPUTE; solve_min_cut's
# inf-capacity edge "marked by checkpoint policy"; force_save_collectives pins only the collectives outside a user
# AC region, pytorch/pytorch#147561). One all-gather again per column-parallel block and micro-batch.
OP_SAC_TP_REGATHERED = ("qkv", "ffn_in")


def op_sac_tp_regathers(redo: frozenset[str], tp: int, sp: bool, names: Sequence[str]) -> int:
    """TP all-gathers per layer and micro-batch that torchtitan's op-level policy (``op`` in ``redo``) runs again
    in the backward under sequence parallelism: one per column-parallel block the layer has (attention, dense FFN)."""
    if "op" not in redo or tp <= 1 or not sp:
        return 0
    return sum(1 for n in OP_SAC_TP_REGATHERED if n in names)


def recompute_share(name: str, redo: frozenset[str], w: Workload) -> float:
    """The share of kernel ``name``'s forward that selective recomputation of ``redo`` runs again."""
    if not redo:  # (nothing recomputed: the common case, asked for every kernel of every layer)
        return 0.0
    if "op" in redo:
        if name == "qkv":  # K recomputed (the second matmul), Q and V kept
            return w.kv_heads_n / (w.heads + 2 * w.kv_heads_n)
        return OP_POLICY.get(name, 0.0)
    return 1.0 if MODULES.get(name.removesuffix(GAP_SUFFIX), frozenset()) & redo else 0.0


@dataclass(slots=True)  # not frozen: a projection builds ~20-110 of these, and a frozen __init__ costs ~4x
class Kernel:
    """One kernel (or a fused group) of a layer, one micro-batch, one GPU: forward and backward seconds. Treated
    as a value: code builds a new one (``dataclasses.replace``) and never assigns to a field."""

    name: str
    kind: str  # one of KINDS
    fwd_s: float
    bwd_s: float
    launches: float = 1.0  # host launches of the forward
    eager: bool = False  # stays eager under CUDA graphs (dynamic shapes: MoE dispatch and experts)
    flops: float = 0.0  # forward FLOPs
    nbytes: float = 0.0  # forward bytes through HBM
    modules: float = (
        0.0  # linear modules (te.Linear, GroupedLinear) issuing these kernels: Framework.module_host_s each
    )
    bwd_launches: float | None = None  # host launches of the backward (None: BACKWARD_KERNEL_RATIO x the forward's)


@dataclass(frozen=True)
class LayerShape:
    """What a layer's kernels depend on besides the workload: this GPU's share and how the stack runs."""

    tokens: float  # this GPU's tokens of one micro-batch (micro_batch x seq / CP)
    keys: float  # keys each query attends over (the whole sequence)
    tp: int
    ep: int
    sp: bool
    tp_chunks: int  # GEMMs run as this many row chunks (TP communication overlapped chunk by chunk)
    efficiency_files: tuple[str, ...] = ()  # accelerators files whose attention entries come first
    etp: int = 0  # expert tensor-parallel size (0: as TP)
    dispatch_share: float = 1.0  # a flex dispatcher's received tokens over the routed copies (step.deepep_share)
    gemm_peak16: float = 0.0  # what 16-bit GEMMs reach (modules kept in bf16 under an fp8 recipe); 0: the bf16 peak


def unfused_factor(fw: Framework, compiled: bool, op: str) -> tuple[float, float]:
    """(bytes, kernels) of ``op`` relative to its fused kernel under framework ``fw``: compile fuses every op but
    those the stack writes in complex arithmetic (``Framework.compile_eager``), which stay as eager."""
    if fw.fused.of(op) or (compiled and op not in fw.compile_eager):
        return 1.0, 1.0
    factor, kernels = UNFUSED[op]
    return factor, float(kernels)


def fused_attention(dev: Device, fw: Framework, layout: ParallelLayout) -> bool:
    """Whether the attention core runs as one fused (flash-style) kernel: the layout allows it and the stack has
    one for this GPU generation (FlashAttention needs sm80+: Volta runs the unfused path)."""
    kernel = layout.attention_kernel or fw.attention_kernel(generation(dev.name))
    return layout.flash_attention and kernel != "unfused"


def _attention(dev: Device, fw: Framework, w: Workload, layout: ParallelLayout, s: LayerShape, peak16: float) -> Kernel:
    """The attention core of one layer: flash-style kernels from their family's efficiency, or unfused. With a
    sliding window on some layers (``Workload.sliding_window``) the layer of each kind is their mean: the windowed
    layers' share at the windowed kernel's FLOPs and rate, the rest at the full causal one's."""
    full = _attention_core(dev, fw, w, layout, s, peak16, 0)
    window = w.sliding_window.tokens if w.sliding_window is not None else 0
    if not w.window_layers or window >= s.keys:
        return full
    part = w.window_layers / w.layers
    win = _attention_core(dev, fw, w, layout, s, peak16, window)
    return Kernel(
        "attention",
        "attention",
        part * win.fwd_s + (1 - part) * full.fwd_s,
        part * win.bwd_s + (1 - part) * full.bwd_s,
        ATTENTION_KERNELS,
        flops=part * win.flops + (1 - part) * full.flops,
    )


def bwd_flop_ratio(d_qk: int, d_v: int) -> float:
    """The attention backward's FLOPs over the forward's: (3 d_qk + 2 d_v) / (d_qk + d_v), 2.5 at equal head sizes,
    2.6 for MLA's 192 / 128 (cudnn-frontend benchmark/attention_training/flops.py at 02c83689) [27 s11 mla]."""
    return (3 * d_qk + 2 * d_v) / (d_qk + d_v)


def window_entries(seq: float, window: int) -> float:
    """Score entries of one head's causal attention over ``seq`` tokens when each query sees at most ``window`` keys,
    itself included: w (w + 1) / 2 + (s - w) w (cudnn-frontend's benchmark counts the same); s^2 / 2 without a window
    (0), as the FlashAttention benchmarks count the causal mask."""
    if not window or window >= seq:
        return seq * seq / 2
    return window * (window + 1) / 2 + (seq - window) * window


def _attention_core(
    dev: Device, fw: Framework, w: Workload, layout: ParallelLayout, s: LayerShape, peak16: float, window: int
) -> Kernel:
    """One layer's attention core, full causal (``window`` 0) or over a sliding window of ``window`` keys."""
    a_t = w.heads / s.tp
    d = w.qk_head_dim
    # scores (QK^T over the query/key size) and context (PV over the value size); causal: flash skips masked blocks
    flops = 2 * s.tokens * s.keys * a_t * (w.qk_head_dim + w.v_head_dim) * 0.5
    if window:  # and a window all blocks outside its band: the band's entries a query on average
        flops = 2 * s.tokens * (window_entries(s.keys, window) / s.keys) * a_t * (w.qk_head_dim + w.v_head_dim)
    kernel = layout.attention_kernel or fw.attention_kernel(generation(dev.name))
    if layout.flash_attention and kernel != "unfused":
        seq = s.tokens / w.micro_batch  # the queries one kernel sees (CP: one chunk of the sequence)
        dv = w.v_head_dim
        fwd = attention_tflops(dev.name, kernel, "fwd", d, seq, s.efficiency_files, window, dv)
        bwd = attention_tflops(dev.name, kernel, "bwd", d, seq, s.efficiency_files, window, dv)
        if layout.fp8_attention is not None and w.precision == "fp8":
            fwd8, bwd8 = fp8_attention_rates(dev, fw, layout, (d, dv), seq, s.efficiency_files, window)
            fwd, bwd = fwd8 or fwd, bwd8 or bwd
        default = peak16 * dev.gemm_efficiency * FLASH_ATTENTION_FRACTION
        t_fwd = flops / (fwd if fwd else default)
        # the backward's five GEMMs (the scores recomputed, dV, dP, dQ, dK): 2 (3 d_qk + 2 d_v) FLOPs a score entry
        # against the forward's 2 (d_qk + d_v), cudnn-frontend's count (benchmark/attention_training/flops.py at
        # 02c83689); 2.5 x the forward's at equal sizes, the FlashAttention benchmarks' count that the tabled backward
        # rates and the default (a fwd+bwd rate over 3.5 x the forward's FLOPs) are read against [27 s11 mla]
        t_bwd = bwd_flop_ratio(d, dv) * flops / (bwd if bwd else default)
        return Kernel("attention", "attention", t_fwd, t_bwd, ATTENTION_KERNELS, flops=flops)
    # unfused: scores and context as batched GEMMs over the full s x s (a masked window included), softmax + dropout
    # through HBM
    b_heads = w.micro_batch * a_t
    q = s.tokens / w.micro_batch
    t_core = gemm_time_s(dev, peak16, q, s.keys, d, b_heads) + gemm_time_s(
        dev, peak16, q, w.v_head_dim, s.keys, b_heads
    )
    return Kernel("attention", "attention", t_core, 2 * t_core, ATTENTION_KERNELS, flops=flops)


# FP8 attention (layout.fp8_attention: Megatron-Core fp8_dot_product_attention, Transformer Engine's fp8_dpa). TE
# 4329ff84 runs it in training on cuDNN's fused attention only (dot_product_attention/utils.py get_attention_backend:
# FlashAttention 2/3/4 and the unfused path are disabled for it), in the autocast recipe unless NVTE_DPA_FP8_RECIPE
# says otherwise (dot_product_attention.py's recipe table: MXFP8 linears run MXFP8 attention). Per-tensor recipes
# (delayed, current) and MXFP8 read their own cuDNN curves (efficiency.yaml families cudnn_fp8 and cudnn_mxfp8,
# cudnn-frontend's published SDPA benchmark). mxfp8 needs sm100 and cuDNN 9.21 (not 9.23.0/1); current scaling sm100
# and cuDNN 9.14; a sliding window or attention sinks in fp8 sm100 and cuDNN 9.21. Backward in fp8 unless
# NVTE_FP8_DPA_BWD=0 (backends.py FusedAttnFunc: is_bwd_fp8), then the 16-bit kernel (fp8_attention "fwd").
FP8_ATTENTION_FAMILY = {"delayed": "cudnn_fp8", "current": "cudnn_fp8", "mxfp8": "cudnn_mxfp8"}
FP8_ATTENTION_SM100 = frozenset({"current", "mxfp8"})


def fp8_attention_rates(
    dev: Device,
    fw: Framework,
    layout: ParallelLayout,
    dims: tuple[int, int],
    seq: float,
    files: tuple[str, ...],
    window: int,
) -> tuple[float | None, float | None]:
    """(forward, backward) FLOP/s of the attention core in fp8 on ``dev``; None for a pass that runs in 16 bits or
    has no fp8 curve tabled (the 16-bit rate then stands). Refuses what TE cannot run on this GPU."""
    recipe = fp8_attention_recipe(fw, layout)
    blackwell = generation(dev.name) in FP8_ANY_LAYOUT
    if recipe in FP8_ATTENTION_SM100 and not blackwell:
        raise InfeasibleLayoutError(
            f"fp8_attention with the {recipe} recipe needs Blackwell (sm100): TE disables it below"
        )
    if window and not blackwell:
        raise InfeasibleLayoutError("fp8_attention with a sliding window needs Blackwell (sm100) and cuDNN 9.21")
    family = FP8_ATTENTION_FAMILY[recipe]
    if window and not any(e[0] == family and e[6] for e in attention_entries(dev.name, files)[0]):
        return None, None  # no windowed fp8 curve for this GPU: the windowed layers keep the 16-bit kernel's rate
    d, dv = dims  # query/key and value head sizes
    fwd = attention_tflops(dev.name, family, "fwd", d, seq, files, window, dv)
    bwd = (
        attention_tflops(dev.name, family, "bwd", d, seq, files, window, dv)
        if layout.fp8_attention == "fwd_bwd"
        else None
    )
    return fwd, bwd


def _fp8_attention_cast(b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape) -> list[Kernel]:
    """The casts fp8 attention adds (TE 4329ff84 backends.py FusedAttnFunc): Q, K and V quantized before the forward
    (utils.py combine_and_quantize, for MXFP8 along both the head and the sequence dimension: the recipe's
    both-layout bytes), dO before an fp8 backward. MXFP8 and current scaling give O and dQ/dK/dV in 16 bits; delayed
    scaling writes them in fp8 and dequantizes them to 16 bits for the next op (1 + 2 B an element)."""
    if layout.fp8_attention is None or w.precision != "fp8":
        return []
    a_t = w.heads / s.tp
    kv_t = a_t if w.mla is not None else max(w.kv_heads_n / s.tp, 1.0)  # MLA's up-projection gives every head K, V
    qkv = s.tokens * (a_t * w.qk_head_dim + kv_t * (w.qk_head_dim + w.v_head_dim))
    out = s.tokens * a_t * w.v_head_dim
    recipe = fp8_attention_recipe(b.fw, layout)
    per_elem = fp8_cast_bytes(b.dev, FP8_RECIPES[recipe])
    fp8_bwd = layout.fp8_attention == "fwd_bwd"
    fwd_bytes = per_elem * qkv + (3.0 * out if recipe == "delayed" else 0.0)
    bwd_bytes = (per_elem * out + (3.0 * qkv if recipe == "delayed" else 0.0)) if fp8_bwd else 0.0
    return [
        Kernel(
            "attention_fp8_cast",
            "fp8_cast",
            stream_time_s(b.dev, fwd_bytes),
            stream_time_s(b.dev, bwd_bytes),
            3 + (recipe == "delayed"),
            nbytes=fwd_bytes,
            bwd_launches=(1 + (recipe == "delayed")) if fp8_bwd else 0,
        )
    ]


@dataclass(frozen=True)
class _Builder:
    """Makes one layer's kernels on one GPU: memory-bound ones at HBM rate (eager where the stack runs them
    unfused), GEMMs by shape."""

    dev: Device
    fw: Framework
    compiled: bool
    gemm_peak: float
    elem: float  # bytes per GEMM input element
    gemm_launch: int  # launches per GEMM (with its fp8 casts)
    gemm_rate: float = 1.0  # the fp8 recipe's GEMM rate against per-tensor fp8 (MXFP8's block scales)
    files: tuple[str, ...] = ()  # accelerators files: the GEMMs they measured cap an expert's GEMM too
    gemm_peak16: float = 0.0  # what 16-bit GEMMs reach (a module kept in bf16: _module_builder)

    def stream(
        self,
        name: str,
        kind: str,
        nbytes: float,
        launches: float,
        op: str | None = None,
        fused: bool | None = None,
        **kw: bool,
    ) -> Kernel:
        """A memory-bound kernel; ``op`` names its UNFUSED factors, applied unless the stack (or ``fused``, when
        given) runs it as one kernel."""
        factor, kernels = unfused_factor(self.fw, self.compiled, op) if op else (1.0, 1.0)
        if op and fused is not None:
            factor, kernels = (1.0, 1.0) if fused or self.compiled else (UNFUSED[op][0], float(UNFUSED[op][1]))
        t_fwd = stream_time_s(self.dev, nbytes * factor) / (EAGER_STREAM_FRACTION if factor > 1 else 1.0)
        return Kernel(name, kind, t_fwd, 2 * t_fwd, launches * kernels, nbytes=nbytes * factor, **kw)

    def gemm(
        self,
        name: str,
        kind: str,
        m_: float,
        n_: float,
        k_: float,
        chunks: int = 1,
        times: float = 1.0,
        launches: float | None = None,
        eager: bool = False,
        modules: float = 1.0,
        bwd_chunks: int | None = None,
        per_expert: bool = False,
    ) -> Kernel:
        """``times`` x forward (m x k) @ (k x n) and backward (data gradient (m, k, n) + weight gradient (k, n, m)),
        the forward in ``chunks`` row chunks and the data gradient in ``bwd_chunks`` (as the forward unless given).
        ``per_expert``: one GEMM launch per expert (TE GroupedLinear's cuBLASLt loop), each no faster than the
        measured GEMMs of its size (:meth:`_gemm_s`)."""
        bc = chunks if bwd_chunks is None else bwd_chunks
        at = self._gemm_s if per_expert else self._curve_s
        fwd = chunks * at(m_ / chunks, n_, k_)
        bwd = bc * at(m_ / bc, k_, n_) + at(k_, n_, m_)
        n_launch = self.gemm_launch * times if launches is None else launches
        # a TE linear's fp8 backward: two GEMMs and the output gradient's casts per forward GEMM launch and casts
        # (Framework.fp8_bwd_casts_grad_only) [27 s11 hostbwd]
        bwd_launch = None
        if self.fw.fp8_bwd_casts_grad_only and self.gemm_launch > 1:
            bwd_launch = n_launch / self.gemm_launch * (self.gemm_launch + 1)
        return Kernel(
            name,
            kind,
            fwd * times,
            bwd * times,
            n_launch,
            eager,
            flops=2 * m_ * n_ * k_ * times,
            modules=modules,
            bwd_launches=bwd_launch,
        )

    def _curve_s(self, m: float, n: float, k: float) -> float:
        """One (m x k) @ (k x n) GEMM on the shape curve (compute.py)."""
        return gemm_time_s(self.dev, self.gemm_peak, m, n, k, elem_bytes=self.elem)

    def _gemm_s(self, m: float, n: float, k: float) -> float:
        """One GEMM of an expert, launched alone: the shape curve, but no faster than the GEMMs of its FLOP count
        measured on the device (efficiency.gemm_rate_cap: cuBLAS/cuBLASLt GEMMs and per-expert cuBLAS loops; an
        MXFP8 GEMM at the recipe's rate against per-tensor fp8). The curve counts the tiles of one GEMM against
        the SMs; a small GEMM also pays its prologue, epilogue and tail wave in full, which the measured rates of
        1024-2048 cubes carry (Azure cuBLASLt fp8 on H100: 274 and 1011 TFLOP/s, where the curve gives ~1000 and
        ~1220). [27 s10 gemmshape]"""
        t = self._curve_s(m, n, k)
        cap = gemm_rate_cap(self.dev.name, "fp8" if self.elem < 2.0 else "bf16", 2.0 * m * n * k, self.files)
        return t if cap is None else max(t, 2.0 * m * n * k / (cap * self.gemm_rate))


def layer_kernels(
    dev: Device,
    fw: Framework,
    w: Workload,
    layout: ParallelLayout,
    s: LayerShape,
    gemm_peak: float,
    peak16: float,
    moe: bool,
    only: str | None = None,
    blocks: dict[tuple[object, ...], list[Kernel]] | None = None,
) -> list[Kernel]:
    """The kernels of one layer (dense or MoE) for one micro-batch on one GPU; a hybrid's of one kind
    (:func:`_hybrid_layer`), or with ``only`` its one block of that symbol (``*``, ``-``; with ``moe`` the E block).
    ``blocks``: a hybrid's blocks already built for these inputs, and where to keep those built here."""
    fp8 = w.precision == "fp8"
    recipe = fp8_recipe(fw, layout) if fp8 else None
    if fp8 and (layout.fp8_recipe or fw.fp8_recipe) == "mxfp8" and generation(dev.name) in MXFP8_UNSUPPORTED:
        raise InfeasibleLayoutError(
            f"fp8_recipe mxfp8 needs compute capability 10.0 (Blackwell) or higher, as Transformer Engine checks "
            f"(check_mxfp8_support); {dev.name} is {generation(dev.name)}: use the delayed or current recipe"
        )
    rate = recipe_gemm_rate(dev, fw, layout) if fp8 else 1.0
    nvfp4 = fp8 and (layout.fp8_recipe or fw.fp8_recipe) == "nvfp4"
    b = _Builder(
        dev=dev,
        fw=fw,
        compiled=fw.compile if layout.compile is None else layout.compile,
        gemm_peak=gemm_peak * rate,
        elem=NVFP4_BYTES if nvfp4 else 1.0 if fp8 else 2.0,
        gemm_launch=1 + (recipe.launches if recipe else 0),
        gemm_rate=rate,
        files=s.efficiency_files,
        gemm_peak16=s.gemm_peak16 or peak16,
    )
    if w.hybrid is not None:
        return _hybrid_layer(b, w, layout, s, peak16, moe, only, blocks)
    t, h, tokens = s.tp, w.hidden, s.tokens
    out = _attention_block(b, w, layout, s, peak16)
    resid = tokens * h * (1.0 if s.sp else t) / t  # elements of the residual stream on this GPU
    linears = w.attention_linears(t)
    attn_in = 2 * resid + tokens * linears[-1][1] + sum(tokens * k for name, k, _ in linears[1:-1])
    attn_grads = sum(tokens * n for _, _, n in linears[:-1]) + 2 * resid
    if not moe:
        mats = 3 if w.gated_ffn else 2
        f_t = w.ffn_hidden / t
        out += _ffn_block(b, w, s, resid)
        if fp8:  # every GEMM input cast forward, every output gradient backward
            cast = (attn_in + resid + tokens * f_t, attn_grads + tokens * (mats - 1) * f_t)
            quantizes = float(len(linears) + 2)  # one per linear's input and one per output gradient [27 s10 mxcast]
            out.append(_cast(b, layout, cast, (quantizes, quantizes)))
            if b.fw.fp8_weight_cast_per_forward:
                out.append(
                    _weight_cast(b, layout, sum(k * n for _, k, n in linears) + mats * h * f_t, len(linears) + 2)
                )
            if b.fw.fp8_weight_bwd_copy and layout.fsdp_fp8_all_gather:
                n_in = fc1_gemms(b.fw.gate_up_fused, mats)[1]
                copies = len(linears) + (2 if b.fw.qkv_separate else 0) + n_in + 1  # one per weight tensor
                out.append(_weight_bwd_copy(b, sum(k * n for _, k, n in linears) + mats * h * f_t, copies))
            out += fp8_gather_transposes(b, w, layout, s, False)
        out += seq_dim_copies(b, w, layout, s, False)
        return _with_gaps(out + _async_tp_reduce(b, w, layout, s, tokens * h, ASYNC_TP_REDUCE_SCATTERS), layout)
    # an MoE layer's FFN half is not a TP matmul pair: the attention half's reduce-scatters only
    out += _async_tp_reduce(b, w, layout, s, tokens * h, ASYNC_TP_REDUCE_SCATTERS // 2)
    out += seq_dim_copies(b, w, layout, s, True)
    if fp8:
        out += fp8_gather_transposes(b, w, layout, s, True)
    return _with_gaps(out, layout, True) + _moe_block(b, w, layout, s, resid, (attn_in, attn_grads))


# A hybrid model's Mamba-2 layer as Megatron-Core trains it (NVIDIA/Megatron-LM d98e8a64 megatron/core/ssm/
# mamba_layer.py and mamba_mixer.py, use_mamba_mem_eff_path True, the default): the pre-norm fused into in_proj
# (TELayerNormColumnParallelLinear: a norm kernel and the GEMM), in_proj's output transposed batch-first (a copy,
# mamba_mixer.py:691), state-spaces/mamba's mamba_split_conv1d_scan_combined (e9594ce1 ssd_combined.py:820-980: the
# causal convolution with SiLU, then the SSD scan's Triton kernels: chunk cumsum, chunk states, state passing, the
# chunks' C B^T, the chunk scan, which also applies the z gate), y transposed back (a copy, :727), the grouped RMSNorm
# (layernorm_gated.py, z None), out_proj (row-parallel) and bias-dropout-add. The backward runs the convolution and
# the scan's forward kernels again (ssd_combined.py:440-448, 918-923) before its own; the layer keeps in_proj's
# output and the scan's pre-gate output, nothing of the scan's states. Launches: forward the convolution, the five
# scan kernels and two small casts of A and dt_bias; backward the recomputed convolution and four scan kernels, the
# twelve backward scan kernels with their partial-sum reductions and clones, and the convolution's backward with
# its zeroed weight gradients: 30.
MAMBA_FWD_KERNELS = 8
MAMBA_BWD_KERNELS = 30
MAMBA_LAYOUT_COPIES = 2  # in_proj's output to batch-first, the scan's output back to sequence-first


# The SSD scan's Triton kernels run below the stream rate their bytes would take: vLLM PR #27299 (2025-10-25, cyang49's
# microbenchmark on one H100, the original five-kernel forward of _mamba_chunk_scan_combined_fwd, fp16, z None, chunk
# 128, 128 heads of 64, one group, state 128) measured 1.262e7 tokens/s at 8,192 tokens and 1.292e7 at 16,384
# (1.07-1.21e7 from 4K to 256K); the forward's bytes (ssd_bytes_per_token without the gate's z and out_x) at the H100
# stream rate take 0.720 and 0.737 of that time. The fraction at 8,192 tokens, the sequence the published hybrid runs
# train at, is taken for the scan's forward and backward on every GPU (no backward or other-GPU timing is published).
SSD_STREAM_FRACTION = 0.72


def ssd_bytes_per_token(heads: float, groups: float, p: int, n: int, q: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of the SSD scan's kernels on one GPU (``heads`` and ``groups`` its
    share), each kernel's reads and writes as state-spaces/mamba e9594ce1 launches them (ssd_combined.py,
    ssd_chunk_state.py, ssd_state_passing.py, ssd_bmm.py, ssd_chunk_scan.py): 16-bit x, z, B, C and outputs, fp32 dt,
    cumsums and C B^T, the chunk states (p x n a head and chunk: p n / q a token) fp32 before the state passing and
    16-bit after it in the forward, fp32 in the backward. Forward: x read twice, B twice, C twice, z once, out and
    the pre-gate out_x written. Backward: four forward kernels again, then the gradients of z, the states, x, B, C,
    dt and C B^T (each reading x, dout_x and the cumsums again)."""
    hp, gn, gq, states = heads * p, groups * n, groups * q, heads * p * n / q
    fwd = 10.0 * hp + 8.0 * gn + 26.0 * heads + 12.0 * states + 8.0 * gq
    bwd = 34.0 * hp + 38.0 * gn + 114.0 * heads + 34.0 * states + 24.0 * gq
    return fwd, bwd


def ssd_flops_per_token(heads: float, groups: float, p: int, n: int, q: int) -> float:
    """Forward FLOPs per token of the SSD scan on one GPU: C B^T within each chunk (2 q n a group, the whole q x q
    block), the intra-chunk output (causal tiles only: about q p a head), the chunk states (2 p n a head) and the
    states' contribution to the output (2 p n a head) (ssd_bmm.py, ssd_chunk_scan.py, ssd_chunk_state.py)."""
    return 2.0 * q * n * groups + q * p * heads + 4.0 * p * n * heads


def _mamba_layer(b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape) -> list[Kernel]:
    """A hybrid's Mamba-2 layer (one micro-batch, one GPU): heads, inner width and groups split over TP
    (Megatron-Core asserts mamba_num_groups % TP == 0), the norm and residual on the residual stream."""
    hy = w.hybrid
    assert hy is not None
    t, h, tokens = s.tp, w.hidden, s.tokens
    resid = tokens * h * (1.0 if s.sp else t) / t
    width, d_i = hy.in_proj_width(t), hy.d_inner / t
    p, n, q = hy.mamba_head_dim, hy.mamba_state, hy.chunk
    # under CP the convolution and the scan run over the whole sequence with this CP rank's heads, and its groups,
    # each group repeated on several ranks where there are fewer than CP (mamba_cp_shape) [27 s29 mambacp]
    cp, heads_cp, groups_cp, _ = mamba_cp_shape(hy, t, layout.cp)
    seq_tokens = tokens * cp
    own = _module_builder(b, w, layout, "mamba_out")  # out_proj at its own precision [27 s29 quantrecipe]
    b_out = b if own is None else own[0]
    conv = hy.conv_channels(t) if cp == 1 else heads_cp * p + 2 * groups_cp * n
    scan_fwd, scan_bwd = ssd_bytes_per_token(heads_cp, groups_cp, p, n, q)
    # the causal convolution (CUDA): forward reads and writes x, B and C; the backward runs it again, then reads
    # them and their gradient and writes the input's gradient (causal-conv1d 0d2252d1)
    conv_fwd, conv_bwd = 4.0 * conv, 10.0 * conv
    scan = Kernel(
        "ssd_scan",
        "ssm",
        stream_time_s(b.dev, seq_tokens * conv_fwd) + stream_time_s(b.dev, seq_tokens * scan_fwd) / SSD_STREAM_FRACTION,
        stream_time_s(b.dev, seq_tokens * conv_bwd) + stream_time_s(b.dev, seq_tokens * scan_bwd) / SSD_STREAM_FRACTION,
        MAMBA_FWD_KERNELS,
        flops=seq_tokens * ssd_flops_per_token(heads_cp, groups_cp, p, n, q),
        nbytes=seq_tokens * (conv_fwd + scan_fwd),
        bwd_launches=MAMBA_BWD_KERNELS,
    )
    out = [
        b.stream("mamba_norm_in", "norm", 4 * resid, LAYER_NORM_KERNELS, "norm"),
        b.gemm("mamba_in", "gemm", tokens, width, h, s.tp_chunks, bwd_chunks=1),
        b.stream("mamba_layout", "ssm", 2 * 2 * tokens * (width + d_i), MAMBA_LAYOUT_COPIES),
        scan,
        b.stream("mamba_norm", "norm", 2 * 2 * tokens * d_i, 1),  # the grouped RMSNorm: read y, write its output
        b_out.gemm("mamba_out", "gemm", tokens, h, d_i, s.tp_chunks),
        b.stream("mamba_residual", "residual", 7 * resid, 0, "bias_dropout_add"),
    ]
    if cp > 1:
        out.append(_mamba_cp_copies(b, hy, t, cp, tokens))
    if w.precision == "fp8":  # in_proj's and out_proj's inputs forward, their output gradients backward
        if own is None:
            cast = _cast(b, layout, (resid + tokens * d_i, tokens * width + resid), (2.0, 2.0))
            out.append(replace(cast, name="mamba_cast"))
        else:  # out_proj at its own precision: in_proj's casts at the layer's, out_proj's at its own
            out.append(replace(_cast(b, layout, (resid, tokens * width), (1.0, 1.0)), name="mamba_cast"))
            _, w_out, layout_out = own
            if w_out.precision == "fp8":
                cast = _cast(b_out, layout_out, (tokens * d_i, resid), (1.0, 1.0))
                out.append(replace(cast, name="mamba_out_cast"))
        out += [replace(k, name="mamba_fp8_gather_transpose") for k in _block_fp8_gather_transposes(b, w, layout, s)]
    if t > 1:
        out.append(Kernel("mamba_tp_collectives", "gemm", 0.0, 0.0, 2 if s.sp else 1))
    return out


def _module_builder(
    b: _Builder, w: Workload, layout: ParallelLayout, module: Literal["attention", "latent", "mamba_out"]
) -> tuple[_Builder, Workload, ParallelLayout] | None:
    """The builder, workload and layout a hybrid's ``module`` (attention, latent, mamba_out) runs at where
    ``layout.module_precision`` gives it its own precision under an fp8 recipe (Megatron-Core's quant_recipe: a
    Transformer Engine quantization config matched by module name; Megatron-Bridge's Nemotron 3 Super NVFP4 perf
    recipes load te_quant.cfg) [27 s29 quantrecipe]: bf16, the 16-bit GEMM plateau, no casts; mxfp8, its GEMM rate,
    one-byte inputs and its casts. None: the layer's own precision."""
    precision = (layout.module_precision or {}).get(module)
    if precision is None or w.precision != "fp8":
        return None
    plain = layout.model_copy(update={"module_precision": None})
    if precision == "bf16":
        b16 = replace(b, gemm_peak=b.gemm_peak16, elem=2.0, gemm_launch=1, gemm_rate=1.0)
        return b16, w.model_copy(update={"precision": "bf16"}), plain
    mx = FP8_RECIPES["mxfp8"]
    fp8_peak = b.gemm_peak / b.gemm_rate  # the per-tensor fp8 plateau the recipes' rates scale
    bmx = replace(b, gemm_peak=fp8_peak * mx.gemm_rate, elem=1.0, gemm_launch=1 + mx.launches, gemm_rate=mx.gemm_rate)
    return bmx, w, plain.model_copy(update={"fp8_recipe": "mxfp8"})


def mamba_cp_shape(hy: Hybrid, tp: int, cp: int) -> tuple[int, float, float, float]:
    """(CP, heads, groups, group repeats) of a Mamba mixer on one GPU as Megatron-Core's all-to-all context
    parallelism splits it (megatron/core/ssm/mamba_context_parallel.py ``MambaContextParallel`` at d98e8a64): the
    TP rank's heads over CP; its groups over CP too, or, where it holds fewer groups than CP, each group's B and C
    repeated ``cp / groups`` times so that one group's state lands on every rank that holds its heads."""
    heads, groups = hy.mamba_heads / tp, hy.mamba_groups / tp
    if cp <= 1:
        return 1, heads, groups, 1.0
    if groups < cp:
        return cp, heads / cp, 1.0, cp / groups
    return cp, heads / cp, groups / cp, 1.0


def mamba_cp_a2a_bytes(hy: Hybrid, tp: int, cp: int, tokens: float) -> tuple[float, ...]:
    """The all-to-alls of one Mamba layer's forward under CP, each one's bytes on one GPU (``tokens``: its sequence
    shard), as ``MambaContextParallel`` issues them: before the convolution z, x, B, C (repeated) and dt, from
    sequence shards to head shards (``pre_conv_ssm``: one ``all_to_all_sp2hp`` each), after the scan its output back
    (``post_conv_ssm``); 16-bit. Autograd runs each one's inverse in the backward, the same bytes."""
    if cp <= 1:
        return ()
    _, _, _, repeat = mamba_cp_shape(hy, tp, cp)
    d_i, bc = hy.d_inner / tp, hy.mamba_groups / tp * repeat * hy.mamba_state
    widths = (d_i, d_i, bc, bc, hy.mamba_heads / tp, d_i)
    return tuple(2.0 * tokens * width for width in widths)


MAMBA_CP_COPIES = 5.0  # B and C repeated, the concatenation, the load-balancing permutations either side


def _mamba_cp_copies(b: _Builder, hy: Hybrid, tp: int, cp: int, tokens: float) -> Kernel:
    """What Megatron-Core's Mamba CP copies beside its all-to-alls, one layer (``pre_conv_ssm`` / ``post_conv_ssm``):
    B and C repeated per group (where groups < CP), z, x, B, C and dt concatenated after the all-to-alls, the
    sequence put back in order before the convolution (``_undo_attention_load_balancing``: CP's load-balanced
    chunks of attention) and into CP's order after the scan (``_redo_attention_load_balancing``); each reads and
    writes its tensor, 16-bit. The backward moves the gradients through the same copies."""
    _, _, _, repeat = mamba_cp_shape(hy, tp, cp)
    d_i = hy.d_inner / tp
    bc = 2 * hy.mamba_groups / tp * hy.mamba_state
    width = 2 * d_i + bc * repeat + hy.mamba_heads / tp  # after the all-to-alls, per token of the shard
    moved = 2 * 2 * tokens * ((bc * repeat if repeat > 1 else 0.0) + 2 * width + d_i)
    t = stream_time_s(b.dev, moved)
    return Kernel("mamba_cp_copies", "cp_ring", t, t, MAMBA_CP_COPIES, nbytes=moved)


def _hybrid_attention_layer(
    b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape, peak16: float
) -> list[Kernel]:
    """A hybrid's attention layer: the attention half of a transformer layer with its own pre-norm and residual and
    no FFN after it (no second norm); at its own precision where ``layout.module_precision`` names it."""
    own = _module_builder(b, w, layout, "attention")
    if own is not None:
        return _hybrid_attention_layer(*own[:2], own[2], s, peak16)
    t, tokens = s.tp, s.tokens
    resid = tokens * w.hidden * (1.0 if s.sp else t) / t
    out = [k for k in _attention_block(b, w, layout, s, peak16) if k.name not in ("ffn_norm", "tp_collectives")]
    if t > 1:
        out.append(Kernel("tp_collectives", "gemm", 0.0, 0.0, 2 if s.sp else 1))
    if w.precision == "fp8":
        linears = w.attention_linears(t)
        cast_in = resid + tokens * linears[-1][1] + sum(tokens * k for _, k, _n in linears[1:-1])
        cast_grads = sum(tokens * n for _, _k, n in linears[:-1]) + resid
        out.append(_cast(b, layout, (cast_in, cast_grads), (float(len(linears)), float(len(linears)))))
        out += _block_fp8_gather_transposes(b, w, layout, s)
    return out


def _ffn_block(b: _Builder, w: Workload, s: LayerShape, resid: float) -> list[Kernel]:
    """A dense MLP's kernels after its norm: the gate and up projections (one launch; one GEMM of both halves or one
    per half, as the stack runs them), the activation, the down projection and the residual add."""
    mats = 3 if w.gated_ffn else 2
    f_t = w.ffn_hidden / s.tp
    wide, n_in = fc1_gemms(b.fw.gate_up_fused, mats)
    return [
        b.gemm(
            "ffn_in",
            "gemm",
            s.tokens,
            wide * f_t,
            w.hidden,
            s.tp_chunks,
            times=n_in,
            launches=b.gemm_launch,
            bwd_chunks=1,
        ),
        b.stream("ffn_activation", "activation", 2 * 2 * s.tokens * f_t * (mats - 1), FFN_ELEMENTWISE, "activation"),
        b.gemm("ffn_out", "gemm", s.tokens, w.hidden, f_t, s.tp_chunks),
        b.stream("ffn_residual", "residual", 7 * resid, 0, "bias_dropout_add"),
    ]


def _hybrid_mlp_layer(b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape) -> list[Kernel]:
    """A hybrid's MLP layer: pre-norm, the FFN and the residual add (Nemotron-H: squared ReLU, ungated)."""
    t, h, tokens = s.tp, w.hidden, s.tokens
    resid = tokens * h * (1.0 if s.sp else t) / t
    mats = 3 if w.gated_ffn else 2
    f_t = w.ffn_hidden / t
    out = [b.stream("ffn_norm", "norm", 4 * resid, LAYER_NORM_KERNELS, "norm"), *_ffn_block(b, w, s, resid)]
    if t > 1:
        out.append(Kernel("ffn_tp_collectives", "gemm", 0.0, 0.0, 2 if s.sp else 1))
    if w.precision == "fp8":
        cast = _cast(b, layout, (resid + tokens * f_t, tokens * (mats - 1) * f_t + resid), (2.0, 2.0))
        out.append(replace(cast, name="ffn_cast"))
        out += [replace(k, name="ffn_fp8_gather_transpose") for k in _block_fp8_gather_transposes(b, w, layout, s)]
    return out


def _block_fp8_gather_transposes(b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape) -> list[Kernel]:
    """:func:`fp8_gather_transposes` of one hybrid block: one column-parallel input gathered forward and one
    row-parallel output gradient backward, the count of an MoE layer's attention half."""
    return fp8_gather_transposes(b, w, layout, s, True)


def _scaled(k: Kernel, share: float) -> Kernel:
    """``share`` of ``k``: its time, launches, modules, FLOPs and bytes."""
    bwd = None if k.bwd_launches is None else k.bwd_launches * share
    # every field named (a dataclasses.replace costs several times this, and hybrids scale many kernels)
    return Kernel(
        k.name,
        k.kind,
        k.fwd_s * share,
        k.bwd_s * share,
        k.launches * share,
        k.eager,
        k.flops * share,
        k.nbytes * share,
        k.modules * share,
        bwd,
    )


def _hybrid_layer(
    b: _Builder,
    w: Workload,
    layout: ParallelLayout,
    s: LayerShape,
    peak16: float,
    moe: bool,
    only: str | None = None,
    blocks: dict[tuple[object, ...], list[Kernel]] | None = None,
) -> list[Kernel]:
    """A hybrid model's layer of each kind, one micro-batch on one GPU. MoE: an E layer (pre-norm and the MoE
    block, no attention). Dense: the mean of its M, * and - layers, each one's kernels at its share of them, so
    that n layers of this kind cost what the model's non-MoE layers cost together; with ``Hybrid.for_blocks``, the
    mean of one pipeline stage's blocks, so that a stage's layers cost what they cost together [27 s29 hybridpp]."""
    hy = w.hybrid
    assert hy is not None
    t, h, tokens = s.tp, w.hidden, s.tokens
    # the blocks depend on the precision and rates, not on which blocks a stage mixes: built once for these
    key = (w.precision, b.gemm_peak, peak16, b.elem, s, id(layout))
    if moe:  # the MoE layer's pre-MLP norm (Megatron-Core's TransformerLayer with the MoE block alone), then the block
        e_key = ("E", *key)
        if blocks is not None and e_key in blocks:
            return list(blocks[e_key])
        resid = tokens * h * (1.0 if s.sp else t) / t
        head = [b.stream("ffn_norm", "norm", 4 * resid, LAYER_NORM_KERNELS, "norm")]
        e_block = _with_gaps(head, layout, True) + _moe_block(b, w, layout, s, resid, (0.0, 0.0), attention=False)
        if blocks is not None:
            blocks[e_key] = list(e_block)
        return e_block
    if only == "*":
        return _with_gaps(_hybrid_attention_layer(b, w, layout, s, peak16), layout)
    if only == "-":
        return _with_gaps(_hybrid_mlp_layer(b, w, layout, s), layout)
    build = {
        "M": lambda: _mamba_layer(b, w, layout, s),
        "*": lambda: _hybrid_attention_layer(b, w, layout, s, peak16),
        "-": lambda: _hybrid_mlp_layer(b, w, layout, s),
    }
    mix = hy.dense_mix()  # the model's blocks, or a pipeline stage's [27 s29 hybridpp]
    total = sum(n for _, n in mix)
    built: dict[str, list[Kernel]] = {}
    for sym, n in mix:
        sym_key = (sym, *key)
        if n and blocks is not None and sym_key in blocks:
            built[sym] = blocks[sym_key]
        elif n:
            built[sym] = build[sym]()
            if blocks is not None:
                blocks[sym_key] = built[sym]
    out = [_scaled(k, n / total) for sym, n in mix if n for k in built[sym]]
    return _with_gaps(out, layout)


def shared_activation(b: _Builder, elements: float, mats: int) -> Kernel:
    """The shared experts' activation over ``elements`` outputs (tokens x their width), priced as the dense FFN's
    (``ffn_activation`` in :func:`layer_kernels`): Megatron-Core's SharedExpertMLP is its dense MLP (moe/
    shared_experts.py at d98e8a64 and 44151194: MLP.forward, the same bias_swiglu_impl under bias_activation_fusion),
    torchtitan's shared expert its FeedForward. The model priced the shared experts' GEMMs only [27 s12 actbytes]."""
    return b.stream("shared_activation", "activation", 2 * 2 * elements * (mats - 1), FFN_ELEMENTWISE, "activation")


def _with_gaps(kernels: list[Kernel], layout: ParallelLayout, moe_layer: bool = False) -> list[Kernel]:
    """``kernels`` (all on the main stream) and the launch gaps they hold the GPU for (:func:`_launch_gap`)."""
    gaps = [_scoped_gap(k, (0.0, 0.0), layout, moe_layer) for k in kernels]
    return kernels + [g for g in gaps if g is not None]


def _cp_ring(b: _Builder, w: Workload, s: LayerShape) -> list[Kernel]:
    """The CP ring's own memory-bound ops beside the attention (``Framework.cp_step_bytes``: torch's merges and
    fp32 accumulation, Transformer Engine's output correction and gradient adds), CP - 1 ring steps a pass each way,
    and, where the block runs eager, the once-a-call bookkeeping (``Framework.cp_call_bytes``); none without CP or
    for a stack that does not state them."""
    cp = round(s.keys * w.micro_batch / s.tokens) if s.tokens else 1
    fwd_q, fwd_kv, bwd_q, bwd_kv = b.fw.cp_step_bytes
    if cp <= 1 or not (fwd_q or fwd_kv or bwd_q or bwd_kv):
        return []
    heads_kv = w.heads if b.fw.cp_kv_expanded else max(w.kv_heads_n, 1)
    q_elems = s.tokens * w.heads / s.tp * w.v_head_dim
    kv_elems = s.tokens * max(heads_kv / s.tp, 1.0) * (w.qk_head_dim + w.v_head_dim)
    steps = cp - 1
    fwd = steps * (fwd_q * q_elems + fwd_kv * kv_elems)
    bwd = steps * (bwd_q * q_elems + bwd_kv * kv_elems)
    if not b.compiled:  # compile fuses the once-a-call conversions and zero fills into the ring's other updates
        call_fq, call_fkv, call_bq, call_bkv = b.fw.cp_call_bytes
        fwd += call_fq * q_elems + call_fkv * kv_elems
        bwd += call_bq * q_elems + call_bkv * kv_elems
    return [Kernel("cp_ring", "cp_ring", stream_time_s(b.dev, fwd), stream_time_s(b.dev, bwd), steps * 2, nbytes=fwd)]


PER_TENSOR_FP8 = frozenset({"delayed", "current"})  # fp8 recipes with one scale a tensor
# recipes whose casts TP gathers under sequence parallelism: the per-tensor fp8 ones, and NVFP4, whose per-tensor
# scale TE takes from an amax all-reduced over TP first ("For tensors that are gathered (e.g., input and gradient in
# sequence parallelism), amax reduction is performed before quantization"; "NVFP4 all-gather is supported":
# TransformerEngine docs/features/low_precision_training/nvfp4/nvfp4.rst, v2.13 on) [27 s25 nvfp4]
TP_GATHERED_RECIPES = PER_TENSOR_FP8 | {"nvfp4"}


def tp_fp8_all_gather(fw: Framework, w: Workload, layout: ParallelLayout) -> bool:
    """Whether TP's all-gathers move fp8 (``Framework.tp_fp8_all_gather``): fp8 training with per-tensor scales
    (delayed or current scaling) on a stack that casts before gathering. Transformer Engine casts the shard before
    the gather under delayed scaling too: v1.4 (da30634a) and v1.8 layernorm_linear.py / linear.py cast the norm
    output or input to fp8 and gather the fp8 tensor under sequence parallelism, as v2.9 / v2.16 do with their
    Float8Quantizer [27 s12 tpovl]; NVFP4 gathers its 4-bit copy (TP_GATHERED_RECIPES); MXFP8's block scales are not
    read here."""
    return fw.tp_fp8_all_gather and w.precision == "fp8" and (layout.fp8_recipe or fw.fp8_recipe) in TP_GATHERED_RECIPES


# Current scaling's amax reduction over TP (Transformer Engine v2.9 and v2.16: module/linear.py and
# layernorm_linear.py _customize_quantizers_float8_current_scaling set with_amax_reduction on the input quantizer of a
# column-parallel linear under sequence parallelism (forward) and on the output-gradient quantizer of a row-parallel
# one (backward), so that the shards cast before the fp8 all-gather share one scale; csrc/quantizer.cpp
# Float8CurrentScalingQuantizer::quantize_impl then runs amax_reduction_group->allreduce({amax}, MAX)->wait() between
# the amax kernel and the scale kernel: one 4-byte all-reduce over the TP group the quantize waits for). Per layer:
# the attention's column-parallel input (QKV) forward and its output projection's gradient backward, and for a dense
# layer the FFN's pair as well; an MoE layer's experts are not TP-split (GroupedLinear refuses TP > 1 under current
# scaling, grouped_linear.py). Only where the stack states it (Framework.te_tp_fp8_gather: Transformer Engine's
# stacks); torchao's float8 TP reduces more amaxes (torchao_tp_amax_reductions) [27 s14 tt70b].
FP8_TP_AMAX_REDUCTIONS = {False: (2, 2), True: (1, 1)}  # (forward, backward) per layer; key: an MoE layer


def fp8_tp_gathers(fw: Framework, w: Workload, layout: ParallelLayout, tp: int, moe: bool) -> tuple[int, int]:
    """(forward, backward) tensors per layer and micro-batch pass that Transformer Engine (or torchao's float8 TP,
    ``Framework.torchao_float8_tp``) casts before gathering them in fp8 over TP (:data:`FP8_TP_AMAX_REDUCTIONS`'s
    count); none without TP, sequence parallelism or a stack that casts before gathering (:func:`tp_fp8_all_gather`).
    torchao eab345c: the attention's and FFN's inputs (PrepareFloat8ModuleInput) forward, wo's and w2's output
    gradients (Float8RowwiseParallel._prepare_output_fn) backward; each is gathered once and shared by the linears
    that read it."""
    te_or_ao = fw.te_tp_fp8_gather or fw.torchao_float8_tp
    if tp <= 1 or not layout.sp or not te_or_ao or not tp_fp8_all_gather(fw, w, layout):
        return 0, 0
    return FP8_TP_AMAX_REDUCTIONS[moe]


# [27 s16 fp8twins] Delayed scaling's amax reduction per autocast (Framework.te_autocast_amax_reduction):
# TransformerEngine v1.10 transformer_engine/pytorch/fp8.py fp8_autocast_exit calls reduce_and_update_fp8_tensors
# (forward=True) when the outermost autocast exits with grad enabled: torch.cat of the forward amaxes of every fp8 module
# registered on the GPU (3 a GEMM: input, weight, output), one torch.distributed.all_reduce(MAX, async_op=False) over the
# autocast's fp8_group, then one fused amax / scale update of their histories; module/linear.py backward (the autocast's
# first fp8 module: ctx.reduce_and_update_bwd_fp8_tensors) does the same for the backward amaxes (2 a GEMM).
# Megatron-LM core_r0.9.0 transformer_block.py opens one autocast per model chunk, over get_amax_reduction_group(
# with_context_parallel=True) = TP x DP x CP: two collectives per chunk and micro-batch that every rank of the group
# waits for. CUDA-graphed stacks reduce from TE's graph.py instead (not counted here).
FP8_AUTOCAST_AMAX_ENTRIES = (3, 2)  # (forward, backward) fp32 amaxes per fp8 GEMM in the reduced buffer (TE 1.x)


def fp8_autocast_amax_reductions(fw: Framework, w: Workload, layout: ParallelLayout) -> int:
    """All-reduces of delayed scaling's amaxes per model chunk and micro-batch (forward exit and backward of the
    autocast's first module): 2 where the stack reduces per autocast, eager, under delayed scaling; 0 otherwise."""
    if not fw.te_autocast_amax_reduction or w.precision != "fp8" or layout.cuda_graphs:
        return 0
    return 2 if (layout.fp8_recipe or fw.fp8_recipe) == "delayed" else 0


def fp8_tp_amax_reductions(fw: Framework, w: Workload, layout: ParallelLayout, tp: int, moe: bool) -> tuple[int, int]:
    """(forward, backward) 4-byte amax all-reduces over TP per layer and micro-batch pass that fp8 current scaling
    runs before its fp8 all-gathers (:func:`fp8_tp_gathers`), or that torchao's float8 TP runs on every TP-sharded
    tensor it casts (:func:`torchao_tp_amax_reductions`); delayed scaling reads the scale of the amax history
    and reduces no amax before the gather."""
    if (layout.fp8_recipe or fw.fp8_recipe) not in ("current", "nvfp4"):
        return 0, 0
    if fw.torchao_float8_tp:
        return torchao_tp_amax_reductions(fw, w, layout, tp, moe)
    return fp8_tp_gathers(fw, w, layout, tp, moe)


# torchao's float8 TP at eab345c (the torchao of torchtitan's end-2024 runs): tensorwise dynamic scaling takes
# amax = torch.max(torch.abs(x)) (float8_utils.py tensor_to_amax) of whatever tensor it casts. Under TP those are
# DTensors, and a full reduction of a sharded DTensor is a Partial(max) that DTensor all-reduces over the TP group
# before amax_to_scale's clamp, one 4-byte all-reduce the cast waits for (traced into a compiled block, each
# functional collective is waited for where it is issued, as for the CP ring [27 s11 ttcp]). Per Llama layer: forward,
# PrepareFloat8ModuleInput's casts of the attention and FFN inputs (Shard(1)), Float8RowwiseParallel's casts of wo's
# and w2's inputs (Shard(-1)), and Float8Linear.get_weight_scale of each of the 7 weights (Shard(0) / Shard(1);
# FSDP2's unsharded parameter is a DTensor on the TP mesh) unless FSDP gathers them in fp8 with precomputed scales
# (precompute_float8_dynamic_scale_for_fsdp: one foreach amax a step); the column-parallel linears' inputs arrive
# already in fp8 (tensor_already_casted_to_fp8). Backward, NoopFwToFloat8BwDynamic's cast of each linear's output
# gradient: Shard(-1) for the 5 column-parallel ones, Shard(1) for the 2 row-parallel ones (cast in
# Float8RowwiseParallel._prepare_output_fn before the all-gather; the Float8Linear's own cast then finds fp8).
# The weights' casts for the backward are the forward's (save_for_backward(input_fp8, weight_fp8_t)).
TORCHAO_TP_INPUT_CASTS = 4  # the attention and FFN module inputs, wo's and w2's inputs
TORCHAO_TP_LINEARS = 7  # wq, wk, wv, wo, w1, w2, w3


def torchao_tp_amax_reductions(
    fw: Framework, w: Workload, layout: ParallelLayout, tp: int, moe: bool
) -> tuple[int, int]:
    """(forward, backward) amax all-reduces over TP per layer and micro-batch pass of torchao's float8 TP
    (``Framework.torchao_float8_tp``); an MoE layer counts its attention's only (half the casts, 4 linears)."""
    if tp <= 1 or not layout.sp or not tp_fp8_all_gather(fw, w, layout):
        return 0, 0
    inputs, linears = (TORCHAO_TP_INPUT_CASTS // 2, 4) if moe else (TORCHAO_TP_INPUT_CASTS, TORCHAO_TP_LINEARS)
    weights = 0 if layout.fsdp_fp8_all_gather else linears
    return inputs + weights, linears


def fp8_gather_transposes(b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape, moe: bool) -> list[Kernel]:
    """The transposes of Transformer Engine's fp8 TP all-gathers on a GPU whose fp8 GEMMs take only the TN layout
    (TE v2.9 / v2.16 distributed.py _all_gather_fp8: the shard is cast row-wise only, 'we cannot directly gather the
    transposed fp8 tensor'; linear.py / layernorm_linear.py backward: update_usage(columnwise_usage=True) on the
    gathered input and output gradient before the weight-gradient GEMM -> Float8Tensor._create_transpose, 1 B read
    and 1 B written per gathered element). torchao's float8 TP the same (eab345c float8_ops.py preprocess_addmm, for
    the weight gradient grad_output.t() @ input: ``a_data.contiguous()`` of the gathered output gradient and
    ``b_data.t().contiguous().t()`` of the gathered input, fp8 copies into the layout torch._scaled_mm takes; the
    column-parallel linears sharing one input run the same copy, which AOT autograd's CSE merges under compile)
    [27 s14 tt70b]; its local casts write no transpose either. One per gathered tensor of :data:`FP8_TP_AMAX_REDUCTIONS` (the column-
    parallel inputs and the row-parallel output gradients), in the backward; the local cast then writes no transpose
    of its own, so its 1 B per local element (in :func:`fp8_cast_bytes`) comes off: TP x 2 - 1 B per local element."""
    if generation(b.dev.name) in FP8_ANY_LAYOUT or not s.sp:
        return []
    fwd_n, bwd_n = fp8_tp_gathers(b.fw, w, layout, s.tp, moe)
    if not fwd_n + bwd_n:
        return []
    local = s.tokens * w.hidden / s.tp  # one gathered tensor's shard on this GPU
    nbytes = (fwd_n + bwd_n) * local * (2.0 * s.tp - 1.0)
    return [
        Kernel("fp8_gather_transpose", "fp8_cast", 0.0, stream_time_s(b.dev, nbytes), 0, bwd_launches=fwd_n + bwd_n)
    ]


def async_tp_unfused_reduce_scatters(fw: Framework, layout: ParallelLayout, tp: int, moe: bool) -> int:
    """Reduce-scatters of one layer's backward that torch's async TP leaves to NCCL, outside the micro-pipeline (the
    input gradients of the column-parallel blocks: see ASYNC_TP_REDUCE_SCATTERS); 0 for other stacks or without TP
    overlap. An MoE layer's FFN half is not a TP matmul pair: the attention half's one."""
    if not (layout.tp_comm_overlap and tp > 1 and fw.overlap.tp == "async_tp"):
        return 0
    return ASYNC_TP_REDUCE_SCATTERS // 2 if moe else ASYNC_TP_REDUCE_SCATTERS


# DTensor's sequence parallelism gathers and scatters the sequence dimension, dim 1 of torchtitan's [batch, seq, hidden]
# activations (SequenceParallel / PrepareModuleInput Shard(1) <-> Replicate, RowwiseParallel output_layouts Shard(1)),
# and torch's functional collectives move dim 0 only: torch/distributed/_functional_collectives.py
# all_gather_tensor runs all_gather_into_tensor and then torch.cat(torch.chunk(res, group_size, dim=0),
# dim=gather_dim), reduce_scatter_tensor runs torch.cat(torch.chunk(self, group_size, dim=scatter_dim)) before
# reduce_scatter_tensor: one copy of the whole gathered (or unreduced) tensor per collective, a read and a write of
# each element (pytorch/torchtitan#437: "an extra aten.cat after each collective", the two cats of one FFN 0.18 ms of
# its 3 ms on H100 at 8k tokens). Compiled, the copy stays: Inductor's micro-pipeline TP pass matches exactly this
# cat(split(wait(all_gather_into_tensor))) / reduce_scatter_tensor(cat(split)) pattern
# (torch/_inductor/fx_passes/micro_pipeline_tp.py find_all_gather_patterns, find_reduce_scatter_patterns) and, under
# async TP, replaces it with the fused op, which works on the shards in the moved layout (movedim, no whole-tensor
# copy; torch/distributed/_symmetric_memory _fused_all_gather_matmul_impl); the backward's reduce-scatters it leaves
# to NCCL (async_tp_unfused_reduce_scatters) keep theirs. [27 s14 tt8btp]


def seq_dim_copies(b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape, moe: bool) -> list[Kernel]:
    """The copies of DTensor's dim-1 sequence-parallel collectives of one layer and micro-batch
    (``Framework.tp_seq_dim_copies``): forward, each column-parallel block's all-gather (fp8 where the stack gathers
    fp8) and each row-parallel output's reduce-scatter (16-bit); backward, the output-gradient all-gathers and the
    input-gradient reduce-scatters, and the all-gathers torchtitan's op policy runs again (op_sac_tp_regathers).
    Under async TP only the backward's unfused reduce-scatters keep theirs. None without TP or sequence parallelism."""
    if not (b.fw.tp_seq_dim_copies and s.tp > 1 and s.sp):
        return []
    blocks = 1 if moe else 2  # an MoE layer's FFN half is not a TP pair
    elements = s.tokens * w.hidden
    ag_bytes = 1.0 if tp_fp8_all_gather(b.fw, w, layout) else 2.0
    ag, rs = stream_time_s(b.dev, 2 * elements * ag_bytes), stream_time_s(b.dev, 2 * elements * 2.0)
    unfused = async_tp_unfused_reduce_scatters(b.fw, layout, s.tp, moe)
    if unfused:
        kept = Kernel("tp_seq_copy", "tp_copy", 0.0, unfused * rs, 0.0, bwd_launches=unfused)
        return [kept] + async_tp_layout_copies(b, w, s, moe)
    from commlens.project.memory import recomputed_modules

    names = ("qkv",) if moe else ("qkv", "ffn_in")
    again = op_sac_tp_regathers(recomputed_modules(layout), s.tp, s.sp, names)
    return [
        Kernel(
            "tp_seq_copy",
            "tp_copy",
            blocks * (ag + rs),
            blocks * (ag + rs) + again * ag,
            2 * blocks,
            bwd_launches=2 * blocks + again,
            nbytes=2 * elements * blocks * (ag_bytes + 2.0),
        )
    ]


# torch's async TP keeps the sequence-major layout it gathers in (torch/distributed/_symmetric_memory/__init__.py,
# torch 2.6-2.8: _fused_all_gather_matmul_impl moves gather_dim to the front, consumes the shards and returns A and the
# outputs as unflatten(...).movedim(0, gather_dim); the Meta kernel _fused_all_gather_matmul_fallback gives A the same
# strides, view(TP, *shard).movedim(gather_dim + 1, 1).flatten(0, 1).movedim(0, gather_dim)). With DTensor's dim-1
# gathers of [batch, seq, hidden] that is a [batch, seq, hidden] tensor stored seq-major, contiguous only at batch 1.
# Inductor's pass hands it to the all-gather's other users (torch/_inductor/fx_passes/micro_pipeline_tp.py
# fuse_all_gather_matmul: all_gather.replace_with(new_ag_node); return_A is dropped only when nothing else reads it):
# the weight gradient of the linears it feeds reads it as a [batch * seq, hidden] matrix, a reshape that is no view
# of that layout, so Inductor copies it before the mm (one read and write of the whole gathered tensor): the
# column-parallel blocks' gathered inputs and the row-parallel projections' gathered output gradients. The
# fused_matmul_reduce_scatter's input is forced to the same order (restride_A_for_fused_matmul_reduce_scatter,
# force_stride_order), so the row-parallel projections' local inputs are copied for their weight gradient too. Under
# fp8 linears every GEMM input is cast (and torchao's preprocess_addmm copies the weight gradient's operands) in any
# layout: no copy of its own. Vanilla TP's gathers come out batch-major (the chunk + cat of seq_dim_copies).
# [27 s14 asyncbf16]
ASYNC_TP_LAYOUT_COPY_BYTES = 4.0  # per element: a 16-bit read and write


def async_tp_layout_copies(b: _Builder, w: Workload, s: LayerShape, moe: bool) -> list[Kernel]:
    """The weight gradients' copies of the seq-major tensors torch's async TP leaves (see ASYNC_TP_LAYOUT_COPY_BYTES),
    one layer and micro-batch, in the backward: the gathered inputs of the column-parallel blocks and the gathered
    output gradients of the row-parallel projections (each the whole gathered tensor), and the row-parallel
    projections' local inputs. None at one sequence a micro-batch (the layout is then contiguous) or under fp8."""
    if w.micro_batch <= 1 or w.precision == "fp8":
        return []
    blocks = 1 if moe else 2  # an MoE layer's FFN half is not a TP pair
    row_inputs = w.attention_linears(s.tp)[-1][1] + (0.0 if moe else w.ffn_hidden / s.tp)
    elements = s.tokens * (2 * blocks * w.hidden + row_inputs)
    nbytes = ASYNC_TP_LAYOUT_COPY_BYTES * elements
    copies = 3 * blocks
    return [Kernel("tp_layout_copy", "tp_copy", 0.0, stream_time_s(b.dev, nbytes), 0, bwd_launches=copies)]


def _async_tp_reduce(
    b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape, elements: float, count: int
) -> list[Kernel]:
    """torch's async TP: the reduction kernel after each micro-pipelined matmul + reduce-scatter (``count`` per
    forward pass) over ``elements`` unreduced outputs; none for other stacks or without TP overlap. The backward's
    reduce-scatters stay NCCL's (``async_tp_unfused_reduce_scatters``): no reduction kernel of their own."""
    if not (layout.tp_comm_overlap and s.tp > 1 and b.fw.overlap.tp == "async_tp"):
        return []
    nbytes = ASYNC_TP_REDUCE_ELEM_BYTES * elements * (1 + 1 / s.tp)
    one = stream_time_s(b.dev, nbytes)
    # as many fused all-gathers each way as reduce-scatters forward: the forward's before the column-parallel
    # blocks, the backward's of the output gradient before the row-parallel projections; the forward gathers the
    # GEMM's input (fp8 under fp8 linears), the backward the gradient, in fp8 where the stack casts it before the
    # gather (tp_fp8_all_gather), else in 16 bits
    shard = ASYNC_TP_SHARD_COPY_BYTES * elements / s.tp
    grad_elem = b.elem if tp_fp8_all_gather(b.fw, w, layout) else 2.0
    copy_fwd, copy_bwd = stream_time_s(b.dev, shard * b.elem), stream_time_s(b.dev, shard * grad_elem)
    return [
        Kernel("tp_reduce", "tp_reduce", count * one, 0.0, count, nbytes=count * nbytes),
        Kernel("tp_shard_copy", "tp_reduce", count * copy_fwd, count * copy_bwd, count, nbytes=count * shard * b.elem),
    ]


def _separate_qkv(b: _Builder, tokens: float, k_in: float, widths: tuple[float, ...], chunks: int) -> Kernel:
    """Q, K and V as three GEMMs of their own widths (``Framework.qkv_separate``), one kernel entry; the data
    gradient whole, as a column-parallel block's."""
    parts = [b.gemm("qkv", "gemm", tokens, n, k_in, chunks, bwd_chunks=1) for n in widths]
    return Kernel(
        "qkv",
        "gemm",
        sum(k.fwd_s for k in parts),
        sum(k.bwd_s for k in parts),
        sum(k.launches for k in parts),
        flops=sum(k.flops for k in parts),
        modules=float(len(parts)),
    )


def _rotary_op(fw: Framework, w: Workload) -> str:
    """The UNFUSED entry of the workload's rotary embedding: YaRN's (gpt-oss) where the stack states how it runs it
    (``Fused.rotary_yarn``), the plain rotary's otherwise."""
    return "rotary_yarn" if w.position_embedding == "yarn" and fw.fused.rotary_yarn is not None else "rotary"


def _attention_block(b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape, peak16: float) -> list[Kernel]:
    """The attention half of a layer: input norm, QKV (or MLA's projections), rotary, the attention core (with
    softmax through HBM where it is not fused), the output projection, residual and the FFN's norm."""
    t, h, d, tokens = s.tp, w.hidden, w.head_size, s.tokens
    a_t, g_t = w.heads / t, max(w.kv_heads_n / t, 1.0)  # query and key/value heads on this GPU
    resid = tokens * h * (1.0 if s.sp else t) / t  # elements of the residual stream on this GPU
    linears = w.attention_linears(t)
    out: list[Kernel] = [b.stream("input_norm", "norm", 4 * resid, LAYER_NORM_KERNELS, "norm")]
    for name, k_in, n_out in linears[:-1]:  # QKV, or MLA's down- and up-projections (latent norms beside them)
        if name == "qkv" and b.fw.qkv_separate:
            out.append(_separate_qkv(b, tokens, k_in, (a_t * d, g_t * d, g_t * d), s.tp_chunks))
            continue
        out.append(b.gemm(name, "gemm", tokens, n_out, k_in, s.tp_chunks if name != "kv_down" else 1, bwd_chunks=1))
        if name in ("q_down", "kv_down"):
            out.append(b.stream(f"{name}_norm", "norm", 4 * tokens * n_out, 1, "norm"))
    if w.position_embedding not in ("learned", "none"):  # Q and K read and written once (fused), more eager
        rope = (a_t + g_t) * d if w.mla is None else (a_t + 1) * w.mla.qk_rope_head_dim
        out.append(b.stream("rotary", "rotary", 2 * 2 * tokens * rope, 0, _rotary_op(b.fw, w)))
    out.append(_attention(b.dev, b.fw, w, layout, s, peak16))
    out += _fp8_attention_cast(b, w, layout, s)
    out += _cp_ring(b, w, s)
    if not fused_attention(b.dev, b.fw, layout):  # scale-mask-softmax 4 B + dropout 5 B per score; context back 4 B
        # [27 s16 dsv3dgxc] the dropout's 5 B only where the model drops out: at p = 0 torch's dropout returns its
        # input (ATen Dropout.cpp: the fused kernel wants 0 < p < 1, and _dropout returns the input at p == 0), and
        # Megatron-Core / TE's unfused attention call it with the config's attention_dropout (0.0 for Llama-style
        # and DeepSeek models; GPT-3-style presets, `dropout`, set 0.1 for both)
        per_score = 9.0 if w.dropout else 4.0
        b_heads = w.micro_batch * a_t
        out.append(
            b.stream(
                "softmax",
                "activation",
                per_score * b_heads * (tokens / w.micro_batch) * s.keys + 4 * tokens * a_t * d,
                0,
            )
        )
        if b.fw.unfused_mask_bytes:  # [27 s17 dsv3gb200] TE's causal mask, built anew each forward (no gradient)
            mask_bytes = b.fw.unfused_mask_bytes * (tokens / w.micro_batch) * s.keys
            out.append(
                Kernel(
                    "causal_mask",
                    "activation",
                    stream_time_s(b.dev, mask_bytes),
                    0.0,
                    UNFUSED_MASK_LAUNCHES,
                    nbytes=mask_bytes,
                    bwd_launches=0.0,
                )
            )
    out += [
        b.gemm("attention_out", "gemm", tokens, h, linears[-1][1], s.tp_chunks),
        b.stream("attention_residual", "residual", 7 * resid, 0, "bias_dropout_add"),
        b.stream("ffn_norm", "norm", 4 * resid, LAYER_NORM_KERNELS, "norm"),
    ]
    if t > 1:  # the TP collectives' launches (their time is communication, counted apart)
        out.append(Kernel("tp_collectives", "gemm", 0.0, 0.0, 4 if s.sp else 2))
    return out


def fc1_gemms(fused: bool, mats: int) -> tuple[int, int]:
    """(N as a multiple of the FFN width, GEMMs) of a FFN's first projection per pass: a gated FFN's gate and up
    projections as ONE GEMM of both halves (``fused``: Megatron-Core's linear_fc1, 2 x ffn wide under
    gated_linear_unit) or one GEMM per half (torchtitan's w1 and w3); the same FLOPs, another shape
    (Framework.gate_up_fused, frameworks.yaml) [27 s10 gateup]."""
    return (mats - 1, 1) if fused else (1, mats - 1)


def _shared_in(b: _Builder, tokens: float, fe: float, h: float, mats: int, shared: int, eager: bool = False) -> Kernel:
    """The shared experts' gate and up projections: one MLP of ``shared`` x ``fe`` (Megatron-Core's SharedExpertMLP
    at moe_shared_expert_intermediate_size: one GEMM of both halves, N = 2 x shared x fe), or, where the stack runs
    the halves apart, one GEMM per half and shared expert (as before) [27 s10 gateup]."""
    if b.fw.gate_up_fused:
        wide, _ = fc1_gemms(True, mats)
        return b.gemm("shared_in", "gemm", tokens, wide * shared * fe, h, launches=b.gemm_launch, eager=eager)
    return b.gemm(
        "shared_in", "gemm", tokens, fe, h, times=(mats - 1) * shared, launches=b.gemm_launch * shared, eager=eager
    )


# [27 s30 nvfp4call] Host seconds of one expert's NVFP4 GEMM in Transformer Engine's per-expert cuBLASLt loop
# (general_grouped_gemm -> nvte_multi_tensor_gemm): NVIDIA/TransformerEngine PR #3134 (2026-06-17, 'Single-launch CUTLASS
# grouped GEMM for per-tensor NVFP4'), benchmarks/linear/benchmark_grouped_linear.py --compare-nvfp4-grouped-gemm on
# SM100, TN (fprop), 8 experts x 128 tokens, N = K = 2048: the multi-stream path 0.272 ms with the per-call scale
# swizzle and per-expert alpha ('dispatch') and 0.267 ms without them ('pure'), against 0.069 ms for one grouped
# CUTLASS kernel of the same FLOPs: 34 us an expert GEMM whatever its 1 GFLOP, the host issuing the loop (cuBLASLt's
# block-scaled descriptors and heuristic per call; a plain launch is Framework.host_s_per_kernel). The PR names no host
# CPU, and the call is compiled library code, not the Python and dispatch that host_op_factor scales (TE issue #2053's
# 2.75x of Grace against a Xeon is a module's CPU time): the figure is taken as it is on any host, and never below
# the host's plain launch. Scaled by host_op_factor instead, it makes the GB200 rows of 16 local experts at MBS 1
# (Qwen3-30B-A3B, Nemotron 3 Nano) 8-23% pessimistic where they were 10-18% optimistic. MXFP8's expert GEMMs go
# through the same loop and the same block-scaled cuBLASLt path (a scale mode and scale pointers per operand, its
# heuristic per call); no timing of their own is published, so they are charged the same.
NVFP4_EXPERT_GEMM_HOST_S = 0.272e-3 / 8


def grouped_linear_launches(
    gemm_launch: int, local: float, grouped_casts: bool = False, gemm_calls: float = 1.0
) -> tuple[float, float]:
    """Kernel launches per expert of one Transformer Engine GroupedLinear pass pair (forward, backward), from
    ``gemm_launch`` (one GEMM and the casts of its input). As TE runs it (transformer_engine/pytorch/module/
    grouped_linear.py at release v2.9 and v2.16, the 25.11 and 26.04.01 containers): forward, the input split and
    cast expert by expert (``tex.split_quantize``: one quantize per expert, fused over experts only for delayed
    scaling) and one cuBLASLt GEMM per expert (``general_grouped_gemm`` -> ``nvte_multi_tensor_gemm``, round-robin
    over the compute streams); the weights' casts run on the first micro-batch only (Megatron-Core passes
    ``is_first_microbatch``, cached after it). Backward: the output gradient split and cast expert by expert, then a
    data-gradient and a weight-gradient GEMM per expert: 2 GEMMs and ONE input's casts, not twice the forward.
    Summed over the ``local`` experts. ``grouped_casts``: NVFP4, whose split_quantize casts all the experts' slices
    in grouped kernels (TE v2.12 on, csrc/extensions/cast.cpp split_quantize_nvfp4_impl_with_rht_helper:
    nvte_group_hadamard_transform_amax, then nvte_group_hadamard_transform_cast_fusion, or its row-wise and column-wise
    halves where a slice is not a multiple of 128 rows): one set of cast launches a call [27 s25 nvfp4].
    ``gemm_calls``: one expert GEMM's host time in launches (NVFP4's cuBLASLt call, :data:`NVFP4_EXPERT_GEMM_HOST_S`)."""
    casts = gemm_launch - 1
    if grouped_casts:
        return gemm_calls * local + casts, 2 * gemm_calls * local + casts
    return local * (gemm_calls + casts), local * (2 * gemm_calls + casts)


def expert_gemm_calls(b: _Builder, w: Workload, layout: ParallelLayout) -> float:
    """One expert GEMM's host time in launches of this stack and host: an NVFP4 GEMM's measured time
    (:data:`NVFP4_EXPERT_GEMM_HOST_S`, as measured on any host, never below a plain launch); MXFP8's, the same
    block-scaled cuBLASLt loop, taken as NVFP4's (no measurement of its own found); else one launch
    [27 s30 nvfp4call]."""
    block_scaled = w.precision == "fp8" and (layout.fp8_recipe or b.fw.fp8_recipe) in ("nvfp4", "mxfp8")
    if not block_scaled:
        return 1.0
    return max(1.0, NVFP4_EXPERT_GEMM_HOST_S / (b.fw.host_s_per_kernel * b.dev.host_op_factor))


def expert_load(layout: ParallelLayout) -> float:
    """Rows of the most loaded GPU's experts over the mean (tokens x top-k / experts) [27 s10 tokdrop]: the stated
    load imbalance when dropless; under Megatron-Core's token drop (``moe_capacity_factor``: core_v0.14.0
    moe_utils.py get_capacity, ceil(tokens x top-k / experts x factor) rows per expert and source rank) at most
    the capacity, the tokens past it dropped and not computed; padded to capacity (``moe_pad_to_capacity``:
    apply_router_token_dropping's capacity mask is the routing map, so every expert takes exactly its capacity,
    padding rows included) exactly the factor, whatever the routing."""
    cf = layout.moe_capacity_factor
    if cf is None:
        return layout.moe_load_imbalance
    return cf if layout.moe_pad_to_capacity else min(layout.moe_load_imbalance, cf)


# The router's capacity mask under token drop (Megatron-LM core_v0.14.0 moe/router.py TopKRouter.routing ->
# moe_utils.py apply_router_token_dropping, drop_policy 'probs'): torch.topk over each expert's column of the
# [tokens, experts] probabilities (k = the capacity, unsorted), zeros_like, scatter of the kept indices, .bool(), and
# probs x mask; its backward is the product's (one kernel). torch.topk picks its CUDA path by shape (PyTorch
# aten/src/ATen/native/cuda/TensorTopK.cu should_use_multiblock, the CUB scan-by-key build): with few slices and
# long ones (experts slices of tokens: 80-200 slices of >= 5000, 200-800 of >= 3000, ...) mbtopk::launch runs two
# memsets, a fill, radixFindKthValues and computeBlockwiseWithinKCounts for each 8-bit digit of a 32-bit key (4),
# computeBlockwiseKthCounts, two CUB inclusive_sum_by_key scans (2 kernels each) and gatherTopK: 17 launches, the
# probabilities read once a digit and once more to gather; otherwise sbtopk's single gatherTopK kernel, one read.
CAPACITY_MASK_OPS = 4  # zeros_like, scatter, bool, mul (forward, after the top-k)
TOPK_MULTIBLOCK_LAUNCHES = 17
TOPK_RADIX_PASSES = 4  # 32-bit keys, RADIX_BITS 8
PROBS_BYTES = 4.0  # the routing probabilities priced as fp32 (a 16-bit router halves a term of microseconds)


def topk_multiblock(slices: float, size: float) -> bool:
    """PyTorch's should_use_multiblock (CUB scan-by-key build) for ``slices`` top-k problems of ``size`` each."""
    return (
        (slices <= 20 and size >= 20000)
        or (20 < slices <= 40 and size >= 10000)
        or (40 < slices <= 80 and size >= 8000)
        or (80 < slices < 200 and size >= 5000)
        or (200 <= slices < 800 and size >= 3000)
        or (800 <= slices <= 4000 and size >= 800)
        or (slices > 4000 and size >= 400)
    )


def capacity_mask_kernel(dev: Device, tokens: float, experts: int, kept: float) -> Kernel:
    """The token drop's capacity mask in the router (CAPACITY_MASK_OPS after a top-k over each expert's column of
    ``tokens`` probabilities; ``kept``: the capacity rows over all experts, whose indices are scattered): static
    shapes, so graphed like the router [27 s10 tokdrop]."""
    n = tokens * experts
    multi = topk_multiblock(experts, tokens)
    topk_reads = (TOPK_RADIX_PASSES + 1) if multi else 1
    # top-k reads; zeros_like writes; scatter writes the kept (reads their int64 index); bool reads and writes 1 B;
    # the product reads the probabilities and the mask and writes the result
    fwd_bytes = PROBS_BYTES * n * topk_reads + PROBS_BYTES * n + (PROBS_BYTES + 8.0) * kept
    fwd_bytes += (PROBS_BYTES + 1.0) * n + (2 * PROBS_BYTES + 1.0) * n
    bwd_bytes = (2 * PROBS_BYTES + 1.0) * n  # the gradient times the mask
    launches = (TOPK_MULTIBLOCK_LAUNCHES if multi else 1.0) + CAPACITY_MASK_OPS
    return Kernel(
        "capacity_mask",
        "moe_routing",
        stream_time_s(dev, fwd_bytes),
        stream_time_s(dev, bwd_bytes),
        launches,
        nbytes=fwd_bytes,
        bwd_launches=1.0,
    )


def _latent_and_shared(b: _Builder, w: Workload, layout: ParallelLayout, tokens: float, fe: float) -> list[Kernel]:
    """An MoE block's dense parts beside its routed experts: a latent MoE's fc1_latent_proj before the dispatch and
    fc2_latent_proj after the combine (with their fp8 casts) [27 s28 latent], and the shared experts."""
    m = w.moe
    assert m is not None
    h, mats = w.hidden, 3 if w.gated_ffn else 2
    out: list[Kernel] = []
    if m.latent_size is not None:
        hm = m.latent_size
        own = _module_builder(b, w, layout, "latent")  # at their own precision [27 s29 quantrecipe]
        bl, wl, ll = (b, w, layout) if own is None else own
        out += [bl.gemm("latent_down", "gemm", tokens, hm, h), bl.gemm("latent_up", "gemm", tokens, h, hm)]
        if wl.precision == "fp8":  # their inputs forward, their output gradients backward
            cast = _cast(bl, ll, (tokens * (h + hm), tokens * (hm + h)), (2.0, 2.0))
            out.append(replace(cast, name="latent_cast"))
    if m.shared_experts:
        out += [
            _shared_in(b, tokens, fe, h, mats, m.shared_experts, eager=True),
            replace(shared_activation(b, tokens * m.shared_experts * fe, mats), eager=True),
            b.gemm("shared_out", "gemm", tokens, h, fe, times=m.shared_experts, eager=True),
        ]
    return out


def _moe_block(
    b: _Builder,
    w: Workload,
    layout: ParallelLayout,
    s: LayerShape,
    resid: float,
    attn_cast: tuple[float, float],
    attention: bool = True,
) -> list[Kernel]:
    """An MoE layer's FFN half: router, permutation, routed experts as grouped GEMMs (the most loaded GPU's
    share), shared experts, residual; fp8 casts of the whole layer (``attn_cast``: the attention half's inputs
    and output gradients; ``attention``: the layer has an attention half, which a hybrid's E layer has not)."""
    m = w.moe
    assert m is not None
    if layout.moe_dispatcher == "distmoe":
        if not attention:
            raise InfeasibleLayoutError("moe_dispatcher distmoe is not modelled in hybrid models", "moe_dispatcher")
        return _distmoe_block(b, w, layout, s, resid, attn_cast)
    t, h, tokens = s.tp, w.hidden, s.tokens
    hm = m.routed_width(h)  # a routed token's width: a latent MoE's latent size [27 s28 latent]
    mats = 3 if w.gated_ffn else 2
    cf = m.capacity_factor or 1.0
    etp = s.etp or t
    # token copies this GPU's experts take, routing balanced: with expert TP below TP, the EP group gathers the
    # sequence shards of TP / ETP TP ranks
    routed = tokens * m.top_k * cf * etp / t
    local = m.experts / s.ep
    per_expert = routed / local
    fe = m.expert_ffn_hidden / etp
    imbalance = expert_load(layout)  # the most loaded GPU of the EP group sets the pace (token drop: capped)
    # one GroupedLinear module per direction over the local experts, one GEMM per expert and pass (fc1 gated: one
    # GEMM of both halves); its launches per expert (grouped_linear_launches): forward the GEMM and the input's casts,
    # backward the data- and weight-gradient GEMMs and the output gradient's casts
    nvfp4 = w.precision == "fp8" and (layout.fp8_recipe or b.fw.fp8_recipe) == "nvfp4"
    calls = expert_gemm_calls(b, w, layout)
    fwd_launch, bwd_launch = grouped_linear_launches(b.gemm_launch, local, nvfp4, calls)
    # Megatron-Core's unfused experts: one cuBLASLt GEMM per expert, each priced as launched alone [27 s10 gemmshape]
    alone = b.fw.moe_local_sort and not layout.moe_fused_mlp
    rows = per_expert * imbalance
    wide, n_in = fc1_gemms(b.fw.experts_fused_fc1(), mats)
    up = b.gemm("experts_in", "grouped_gemm", rows, wide * fe, hm, times=local * n_in, eager=True, per_expert=alone)
    down = b.gemm("experts_out", "grouped_gemm", rows, hm, fe, times=local, eager=True, per_expert=alone)
    down = replace(down, launches=fwd_launch, bwd_launches=bwd_launch)
    # Megatron-Core's router, and its all-to-all dispatcher: their measured launches; other stacks and dispatchers:
    # the estimate (moe_local_sort marks Megatron-Core's MoE layer: no other stack sorts by local expert)
    mcore = b.fw.moe_local_sort
    router: tuple[float, float | None] = MCORE_ROUTER_LAUNCHES if mcore else (MOE_ROUTER_KERNELS, None)
    dispatch: tuple[float, float | None] = (MOE_DISPATCH_KERNELS, None)
    if mcore and layout.moe_dispatcher == "alltoall":
        dispatch = MCORE_DISPATCH_LAUNCHES[s.ep > 1]
    if mcore:
        permute = mcore_permute(b, layout, s, (routed, imbalance), hm, dispatch[0])
    else:
        permute = b.stream("permute", "moe_routing", 8 * routed * hm * imbalance, dispatch[0], eager=True)
    if layout.moe_fused_mlp:
        experts = _fused_experts(b, w, up, down, routed * imbalance)
    else:
        up = replace(up, launches=fwd_launch, modules=1.0, bwd_launches=bwd_launch)
        experts = [up, _experts_activation(b, w, layout, routed * imbalance, fe), down]
    out = [
        b.gemm("router", "gemm", tokens, m.experts, h, modules=0.0),  # a plain matmul, not a linear module
        Kernel("router_topk", "moe_routing", 0.0, 0.0, router[0], bwd_launches=router[1]),
        replace(permute, bwd_launches=dispatch[1]),
        *experts,
        b.stream("ffn_residual", "residual", 7 * resid, 0, "bias_dropout_add"),
    ]
    if b.fw.moe_local_sort and layout.moe_dispatcher == "alltoall" and s.ep > 1 and local > 1:
        # Megatron-Core's second permutation: the received tokens sorted by local expert after the all-to-all and
        # unsorted before the return, each a 16-bit read and write of every routed token (fused: one kernel each);
        # a permutation's gradient is the inverse permutation, so the backward moves the same bytes
        sort_s = stream_time_s(b.dev, 2 * 4 * routed * hm * imbalance)
        n_sort, bwd_sort = MCORE_SORT_LAUNCHES
        out.append(
            Kernel(
                "sort_by_expert",
                "moe_routing",
                sort_s,
                sort_s,
                n_sort,
                True,
                nbytes=2 * 4 * routed * hm * imbalance,
                bwd_launches=bwd_sort,
            )
        )
    if mcore and w.precision == "fp8" and layout.moe_dispatcher != "hybridep":
        pad_bytes = 2 * 4 * routed * hm * imbalance  # the input padded, the output unpadded: read and write, 16 bits
        pad_s = stream_time_s(b.dev, pad_bytes)
        n_pad, bwd_pad = MCORE_FP8_PAD_LAUNCHES
        out.append(
            Kernel("fp8_padding", "moe_routing", pad_s, pad_s, n_pad, True, nbytes=pad_bytes, bwd_launches=bwd_pad)
        )
    if not layout.moe_fused_mlp:  # the fused kernels clamp and add the biases in their epilogues
        out += _clamped_glu_and_bias(b, w, routed * imbalance, fe, local)
    if layout.moe_capacity_factor is not None:
        out.append(capacity_mask_kernel(b.dev, tokens, m.experts, tokens * m.top_k * layout.moe_capacity_factor))
    out += _latent_and_shared(b, w, layout, tokens, fe)
    if w.precision == "fp8":
        attn_in, attn_grads = attn_cast
        cast_in = routed * (hm + fe) + tokens * m.shared_experts * (h + fe)
        cast_grads = routed * ((mats - 1) * fe + hm) + tokens * m.shared_experts * ((mats - 1) * fe + h)
        if layout.moe_fused_mlp:  # the fused kernels quantize fc2's input and fc1's output gradient themselves
            cast_in -= routed * fe
            cast_grads -= routed * (mats - 1) * fe
        # the quantize kernels [27 s10 mxcast]: the attention linears' inputs (forward) and output gradients
        # (backward); the experts' split_quantize, one per expert and GroupedLinear (fc1's and fc2's input forward,
        # their output gradients backward), or the fused MLP's one group quantize each way; Megatron's shared-expert
        # MLP's two (one module whatever its count)
        quantizes = (
            (len(w.attention_linears(t)) if attention else 0)
            + (1.0 if layout.moe_fused_mlp else 2.0 * local)
            + (2.0 if m.shared_experts else 0.0)
        )
        out.append(_cast(b, layout, (attn_in + cast_in, attn_grads + cast_grads), (quantizes, quantizes)))
    # the experts' GEMMs run on Transformer Engine's side streams (forward one per expert, backward two), their
    # casts on the main stream; the fused grouped MLP's kernels all run on the main stream
    # (an NVFP4 expert GEMM's host time counts as ``calls`` launches: the GPU runs one kernel for it)
    per = (calls * local, 2 * calls * local)
    side = {} if layout.moe_fused_mlp else {"experts_in": per, "experts_out": per}
    gaps = [_scoped_gap(k, side.get(k.name, (0.0, 0.0)), layout, True) for k in out]
    return out + [g for g in gaps if g is not None]


# Megatron-Core's token permutation with moe_permute_fusion (Transformer Engine's Triton kernels, transformer_engine/
# pytorch/triton/permutation.py at v2.9 70f53666 and common/triton/permutation.py at d0067d0d: _permute_kernel loads
# each source row once and stores it to each of its n_routed destinations; _unpermute_kernel loads the n_routed rows
# of a token, sums them in fp32 and stores the row once; sort_chunks_by_map one load and one store a row). Permutation
# 1 and unpermutation 1 (token_dispatcher.py at Megatron-LM 57a02672, MoEAlltoAllTokenDispatcher dispatch_preprocess /
# combine_postprocess; the flex dispatcher's local permute of the received tokens, _DeepepManager
# get_permuted_hidden_states_by_experts, and HybridEP's permute blocks) move, 16 bits each way, the source rows once
# and the routed copies once: 2 x 2 x (sources + copies) x hidden bytes a pass. A permutation's gradient is the other
# kernel over the gradient, so the backward moves the forward's bytes (not twice) [27 s12 moegpu].
MCORE_PERMUTE_ELEM_BYTES = 2.0


def mcore_permute(
    b: _Builder, layout: ParallelLayout, s: LayerShape, copies: tuple[float, float], h: float, launches: float
) -> Kernel:
    """Megatron-Core's fused permutation and unpermutation of one MoE layer (MCORE_PERMUTE_ELEM_BYTES). ``copies``:
    (this GPU's routed copies, the most loaded GPU's over the mean). The all-to-all dispatcher permutes its own
    sequence shard (s.tokens / TP rows) into its copies before the transfer (the expert-TP gather comes after it);
    the flex dispatchers permute what they received (``s.dispatch_share`` of the most loaded GPU's copies)."""
    routed, imbalance = copies
    if layout.moe_dispatcher == "alltoall":
        sources, routed = s.tokens / s.tp, routed / (s.etp or s.tp)
    else:
        routed *= imbalance
        sources = routed * s.dispatch_share
    nbytes = 2 * MCORE_PERMUTE_ELEM_BYTES * (sources + routed) * h
    t = stream_time_s(b.dev, nbytes)
    return Kernel("permute", "moe_routing", t, t, launches, True, nbytes=nbytes)


# Megatron-Core's expert activation without its fusion (TEGroupedMLP.forward's bias_act_func, last branch, moe/
# experts.py at Megatron-LM 57a02672: what runs without bias_activation_fusion, e.g. the plain GELU experts of
# Megatron's moe_perf test, whose TransformerConfig keeps gated_linear_unit False, activation_func F.gelu and
# bias_activation_fusion False), bytes per element of its output (routed rows x expert width) [27 s12 moegpu].
# Forward: the activation (silu or gelu: 2 B read, 2 B written), for a gated unit the product with the linear half
# (4 + 2), the routing weights' multiply (a 16-bit tensor times fp32 probs promotes: 2 read + 4 written) and
# .to(bf16) (4 + 2). Backward: the cast's (2 + 4); the multiply's input gradient (4 + 4) and autograd's cast of it back
# to 16 bits (4 + 2); the weights' gradient, the product (4 + 2 read, 4 written) and its row sum (4); for a gated unit
# both halves' products (2 x (2 + 2 + 2)) and chunk's backward, a cat into the fc1 width (2 + 2 + 4); the
# activation's backward (2 + 2 + 2). The activation kernels stream at the eager rate (EAGER_STREAM_FRACTION: the H200
# sweep's gelu reached 0.66 of HBM), the multiplies, casts, sum and cat at the model's stream rate (the sweep's add
# reached 0.91). The fused path (weighted_bias_swiglu_impl, a torch.compile'd kernel) keeps the generic pricing here:
# its own bytes (6 B forward, 10 B backward an element) were not applied (docs/project-evidence.md [27 s12 moegpu]).
MCORE_ACT_EAGER_ACTIVATION = (4.0, 6.0)  # the activation's own bytes: forward, backward
# the other ops' bytes and kernels (forward, backward, forward kernels, backward kernels); key: gated
MCORE_ACT_EAGER_REST = {True: (18.0, 54.0, 3.0, 8.0), False: (12.0, 34.0, 2.0, 5.0)}


def _experts_activation(b: _Builder, w: Workload, layout: ParallelLayout, rows: float, fe: float) -> Kernel:
    """The routed experts' activation over ``rows`` token copies of width ``fe``: Megatron-Core's eager ops where it
    runs unfused (:func:`mcore_eager_expert_activation`), else one kernel of 4 B an output element per weight matrix
    (a gated unit's three), eager stacks' several (UNFUSED)."""
    if b.fw.moe_local_sort and not expert_activation_fused(b, layout):
        return mcore_eager_expert_activation(b, w, rows * fe)
    act_bytes = 2 * 2 * rows * fe * (3 if w.gated_ffn else 2)
    act = b.stream(
        "experts_activation", "activation", act_bytes, 1, "expert_activation", fused=layout.expert_activation_fused
    )
    return replace(act, eager=True)


def expert_activation_fused(b: _Builder, layout: ParallelLayout) -> bool:
    """Whether the experts' activation runs as one kernel: as the layout says, else as the stack fuses it; compile
    fuses it either way."""
    fused = layout.expert_activation_fused
    return (b.fw.fused.of("expert_activation") if fused is None else fused) or b.compiled


def mcore_eager_expert_activation(b: _Builder, w: Workload, elements: float) -> Kernel:
    """Megatron-Core's unfused expert activation over ``elements`` outputs (MCORE_ACT_EAGER_*)."""
    act_f, act_b = MCORE_ACT_EAGER_ACTIVATION
    rest_f, rest_b, n_fwd, n_bwd = MCORE_ACT_EAGER_REST[w.gated_ffn]
    eager_s = stream_time_s(b.dev, elements) / EAGER_STREAM_FRACTION  # seconds per byte of every element, eager
    return Kernel(
        "experts_activation",
        "activation",
        act_f * eager_s + stream_time_s(b.dev, rest_f * elements),
        act_b * eager_s + stream_time_s(b.dev, rest_b * elements),
        1.0 + n_fwd,
        True,
        nbytes=(act_f + rest_f) * elements,
        bwd_launches=1.0 + n_bwd,
    )


# Transformer Engine's fused grouped MLP (ParallelLayout.moe_fused_mlp), as the 26.08 Megatron-Bridge recipes run it
# (perf_recipes at v0.6.0 51885cf1: use_transformer_engine_op_fuser, moe_mlp_glu_interleave_size 32,
# NVTE_CUTEDSL_FUSED_GROUPED_MLP=1): Megatron-Core (Megatron-LM cd4afffa moe/experts.py TEGroupedMLP._make_fused_ops /
# _fused_forward) builds te.pytorch.ops GroupedLinear -> ScaledSwiGLU or ScaledClampedQGeGLU(limit) -> GroupedLinear
# (fc2 bias scaled by the routing weight), and TE (4329ff84 pytorch/ops/fused/grouped_mlp.py, fused when the recipe is
# MXFP8 or NVFP4 and cuDNN's sm100 CuTe DSL wrappers load) runs them as, forward: the input's MXFP8 group quantize
# (tex.group_quantize: one kernel over all experts), grouped_gemm_activation (fc1 over all local experts, bias,
# clamped GLU, routing-weight scale and fc2's input quantized in the epilogue), grouped_gemm_quant (fc2 with its bias
# times the weight): 3 kernels per layer and micro-batch, whatever the experts. Backward: fc2's output gradient group
# quantized (1), grouped_gemm_dactivation (fc2's data gradient, the GLU's backward, fc1's bias gradient and fc1's
# output gradient quantized: 1), the grouped wgrad kernels of fc2 and fc1 and fc1's data gradient (3), and with
# biases compute_grouped_dbias_dscales (a Triton kernel reading fc2's output gradient: 1). The per-expert token counts
# stay a device tensor (the splits' offsets; group_quantize's is_job_valid and the GEMMs' dynamic scheduler walk only
# the rows they cover), and with HybridEP the dispatch already padded each expert for the quantization
# (moe_utils.py skip_routed_expert_padding), so nothing is read on the host.
FUSED_MLP_LAUNCHES = {"experts_in": (2.0, 2.0), "experts_out": (1.0, 3.0)}  # (forward, backward) kernels per layer


def _fused_experts(b: _Builder, w: Workload, up: Kernel, down: Kernel, routed: float) -> list[Kernel]:
    """The routed experts as TE's fused grouped MLP (FUSED_MLP_LAUNCHES): the GEMMs' time as ``up`` and ``down``
    (the same FLOPs and shapes per expert), their launches per layer, no activation kernel, no clamp or bias ops;
    with expert biases, the backward's grouped bias-gradient kernel over the ``routed`` rows (the most loaded
    GPU's)."""
    m = w.moe
    assert m is not None
    slow = b.fw.fused_mlp_dglu_dbias_slowdown
    if m.expert_bias and slow > 1.0:
        # fc2's data gradient (a GEMM of fc2's forward FLOPs) runs in the dGLU kernel that also reduces fc1's bias
        # gradient: a release whose cudnn-frontend slowed that kernel pays the excess in the backward [27 s26 dglu]
        down = replace(down, bwd_s=down.bwd_s + (slow - 1.0) * down.fwd_s)
    out = [
        replace(k, launches=FUSED_MLP_LAUNCHES[k.name][0], bwd_launches=FUSED_MLP_LAUNCHES[k.name][1], modules=mods)
        for k, mods in ((up, 1.0), (down, 0.0))
    ]
    if m.expert_bias:
        dy_bytes = 2.0 * routed * w.hidden  # fc2's output gradient, 16 bits, read once
        out.append(
            Kernel("experts_dbias", "residual", 0.0, stream_time_s(b.dev, dy_bytes), 0.0, True, bwd_launches=1.0)
        )
    return out


# Meta's Dist-MoE (meta-pytorch/dist_moe, BSD-3; docs/mxfp8_execution.md and docs/mxfp8_kernel_design.md at
# 191b73f / ab56bce), which torchtitan's DistMoE recipes run as the routed experts (torchtitan docs/dist_moe.md;
# torchtitan_recipes/models/deepseek_v3.py deepseek_v3_671b_dist_moe_mxfp8): one ordered custom op per MoE layer over
# symmetric (peer-addressable) HBM. Forward, "staged": the router's rows are published to symmetric HBM (a 16-bit read
# and write of the layer input); dist_blockscaled_grouped_gemm_fprop_dispatch gathers each route's row from its peer
# inside the W13 grouped GEMM (gather/quant producer warps: the MXFP8 row and column operands made there, no cast
# kernel of their own); ..._fprop_swiglu_fwd_combine evaluates SwiGLU in registers, quantizes h2, runs W2 and stores
# each route's output to its token's peer (the combine inside the GEMM's epilogue); scale_and_sum reduces the top-k
# rows locally. Backward: W2 DGRAD with the dispatch of the output gradient, W2 WGRAD, SwiGLU backward + W13 DGRAD
# with the combine, W13 WGRAD, reduce_from_topk: 5 kernels. No permutation pass, no host read of the token counts
# (routing metadata and the activation planner stay on the GPU), fixed shapes: the op is captured in CUDA graphs.
DISTMOE_LAUNCHES = (3.0, 5.0)  # (forward, backward) kernels besides the router: publish/dispatch, W13, W2; 5 back


def _distmoe_block(
    b: _Builder, w: Workload, layout: ParallelLayout, s: LayerShape, resid: float, attn_cast: tuple[float, float]
) -> list[Kernel]:
    """An MoE layer's FFN half under Dist-MoE (DISTMOE_LAUNCHES): the router, the expert grouped GEMMs with the
    dispatch and combine inside them (their transfer time: step._layer_time), the local publish and top-k sum,
    shared experts, residual; fp8 casts of the layer's other GEMM inputs (the routed rows are quantized inside the
    expert GEMMs)."""
    m = w.moe
    assert m is not None
    t, h, tokens = s.tp, w.hidden, s.tokens
    mats = 3 if w.gated_ffn else 2
    etp = s.etp or t
    routed = tokens * m.top_k * (m.capacity_factor or 1.0) * etp / t
    local = m.experts / s.ep
    per_expert = routed / local * layout.moe_load_imbalance
    fe = m.expert_ffn_hidden / etp
    # the W13 grouped GEMM: w1 and w3 as one weight, gate and up in one GEMM per expert, whose output the W2 kernel's
    # SwiGLU reads row by row (the Dist-MoE docs cited above) [27 s10 gateup]
    wide, n_in = fc1_gemms(True, mats)
    up = b.gemm("experts_in", "grouped_gemm", per_expert, wide * fe, h, times=local * n_in, launches=1.0, modules=0.0)
    down = b.gemm("experts_out", "grouped_gemm", per_expert, h, fe, times=local, launches=1.0, modules=0.0)
    # publish the input rows (read + write, 16 bits) and sum the top-k combine rows into the output (the backward:
    # the output gradient's rows published, reduce_from_topk over the route gradients): the same bytes each way
    sum_bytes = 2 * (2 * tokens * h) + 2 * (routed * layout.moe_load_imbalance + tokens) * h
    out = [
        b.gemm("router", "gemm", tokens, m.experts, h, modules=0.0),
        Kernel("router_topk", "moe_routing", 0.0, 0.0, MOE_ROUTER_KERNELS),
        Kernel(
            "distmoe_publish_sum",
            "moe_routing",
            stream_time_s(b.dev, sum_bytes),
            stream_time_s(b.dev, sum_bytes),
            DISTMOE_LAUNCHES[0] - 2,
            nbytes=sum_bytes,
            bwd_launches=DISTMOE_LAUNCHES[1] - 4,
        ),
        replace(up, bwd_launches=2.0),
        replace(down, bwd_launches=2.0),
        b.stream("ffn_residual", "residual", 7 * resid, 0, "bias_dropout_add"),
    ]
    if m.shared_experts:
        out += [
            _shared_in(b, tokens, fe, h, mats, m.shared_experts),
            shared_activation(b, tokens * m.shared_experts * fe, mats),
            b.gemm("shared_out", "gemm", tokens, h, fe, times=m.shared_experts),
        ]
    if w.precision == "fp8":
        attn_in, attn_grads = attn_cast
        shared = tokens * m.shared_experts
        out.append(_cast(b, layout, (attn_in + shared * (h + fe), attn_grads + shared * ((mats - 1) * fe + h))))
    gaps = [_scoped_gap(k, (0.0, 0.0), layout, True) for k in out]
    return out + [g for g in gaps if g is not None]


# What a kernel holds the GPU for beyond its bytes and FLOPs, from DeepSeek's published training trace
# (deepseek-ai/profile-data ae7fc0780d06 train.json: PyTorch profiler, DeepSeek-V3 training on H800, EP 64, TP 1,
# 4K sequence; 907 kernels on its compute stream; benchmarks/moe_kernel_trace.py reads it): where the host had issued
# a kernel at least 5 us before the kernel ahead of it ended (the stream was not waiting for the host), the next
# kernel started a median 2 us after the previous one ended (p10 1 us, p90 3 us; 855 such pairs; the profiler's
# timestamps are whole microseconds), and its small ATen kernels (grids of at most one wave, 132 blocks: 156 of
# them) ran a median 2.5 us (min 1 us) whatever their bytes. Every layer kernel on the main stream pays them
# (_with_gaps, and the MoE block's own); an MoE layer launches 100-300 such kernels per micro-batch (routing,
# dispatch, per-expert casts) that their bytes alone price at near zero. Not charged: the gap of kernels replayed in
# a CUDA graph (the graph submits them together; their minimum run time is the GPU's and stays, [27 s23 graphmin]),
# and Transformer Engine's per-expert GEMMs, issued round-robin over its compute streams
# (transformer_engine/common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm at d0067d0da6cb), where one stream's gap
# runs beside another stream's kernel.
KERNEL_GAP_S = 2.0e-6
KERNEL_MIN_S = 2.5e-6
GAP_SUFFIX = "_gap"


# Megatron-Core's CUDA graph scopes (ParallelLayout.cuda_graph_scope; NVIDIA/Megatron-LM 0d8e0714, the 25.11
# container's, and 44151194, 26.04.01's: transformer_layer.py _get_submodules_under_cudagraphs / _te_cuda_graph_replay,
# moe/moe_layer.py route and preprocess under maybe_skip_or_early_return_by_cudagraph): attn captures the input norm,
# the attention and its projection with the residual add after it; mlp a dense layer's pre-MLP norm, MLP and residual
# add; moe_router an MoE layer's pre-MLP norm and router, and the layer then resumes eagerly from the dispatch (its
# residual add after the combine, _forward_post_mlp, included); moe_preprocess adds the dispatcher's
# dispatch_preprocess: for the all-to-all dispatcher the token counts and permutation 1 (the half of the permute
# kernel's launches before the sync point, as step._sync_cycle_s splits them), for the flex dispatcher only routing
# metadata the model counts inside the dispatch. The shared experts stay eager (captured only where the stack turns
# moe_shared_expert_overlap off, which the layout does not state).
GRAPH_MLP_HALF = frozenset(
    {
        "ffn_norm",
        "ffn_in",
        "ffn_activation",
        "ffn_out",
        "ffn_residual",
        "ffn_tp_collectives",
        "ffn_cast",
        "ffn_fp8_gather_transpose",
    }
)
# a hybrid's Mamba layer (Megatron-Core --cuda-graph-scope mamba: the MambaLayer whole, transformer_config.py
# CudaGraphScope at d98e8a64)
GRAPH_MAMBA = frozenset(
    {
        "mamba_norm_in",
        "mamba_in",
        "mamba_layout",
        "ssd_scan",
        "mamba_norm",
        "mamba_out",
        "mamba_residual",
        "mamba_cast",
        "mamba_fp8_gather_transpose",
        "mamba_tp_collectives",
    }
)
GRAPH_MOE_ROUTER = frozenset({"ffn_norm", "router", "router_topk"})
# non-eager kernels of an MoE layer that run after a router graph
GRAPH_MOE_EAGER = frozenset({"ffn_residual", "latent_up"})


def graph_share(k: Kernel, layout: ParallelLayout, moe_layer: bool) -> float:
    """The share of ``k``'s launches a CUDA graph replays (no host launch cost, no launch gap): without a scope,
    every kernel but the eager ones (MoE dispatch and experts) where ``layout.cuda_graphs``; with
    ``layout.cuda_graph_scope``, the kernels of the captured parts (GRAPH_MLP_HALF, GRAPH_MOE_ROUTER, permutation 1
    under moe_preprocess with the all-to-all dispatcher, the rest of the layer under attn)."""
    scope = layout.cuda_graph_scope
    if not layout.cuda_graphs:
        return 0.0
    if scope is None or "full_iteration" in scope:
        # a whole-step graph around HybridEP's static rank budget captures the MoE layer too (layout
        # _check_graph_scope: nothing in it reads the token counts on the host)
        whole_moe = scope is not None and layout.moe_expert_capacity is not None
        # drop-and-pad's static shapes: Megatron-Core 0.14's per-layer graph (enable_cuda_graph, scope 'full':
        # CudaGraphManager around the whole TransformerLayer, core_v0.14.0 transformer_layer.py) captures the MoE
        # layer, dispatch and experts included [27 s10 tokdrop]
        whole_moe = whole_moe or layout.moe_pad_to_capacity
        return 0.0 if k.eager and not whole_moe else 1.0
    name = k.name.removesuffix(GAP_SUFFIX)
    if name in GRAPH_MAMBA:
        return 1.0 if "mamba" in scope else 0.0
    if not moe_layer and name in GRAPH_MLP_HALF:
        return 1.0 if "mlp" in scope else 0.0
    if moe_layer and "moe" in scope and layout.moe_pad_to_capacity and (k.eager or name in GRAPH_MOE_ROUTER):
        return 1.0  # the whole MoE layer, static under drop-and-pad (layout._check_graph_scope) [27 s10 tokdrop]
    if moe_layer and name in GRAPH_MOE_ROUTER:
        return 1.0 if "moe_router" in scope else 0.0
    if moe_layer and name == "permute":
        return 0.5 if "moe_preprocess" in scope and layout.moe_dispatcher == "alltoall" else 0.0
    if moe_layer and name == "latent_down":  # MoELayer.preprocess, which the moe_preprocess graph captures
        return 1.0 if "moe_preprocess" in scope else 0.0
    if k.eager or (moe_layer and name in GRAPH_MOE_EAGER):
        return 0.0
    return 1.0 if "attn" in scope else 0.0


def graph_shares(kernels: list[Kernel], layout: ParallelLayout) -> list[float]:
    """:func:`graph_share` of each of one layer's ``kernels`` (an MoE layer: one with a router)."""
    moe_layer = any(k.name == "router" for k in kernels)
    return [graph_share(k, layout, moe_layer) for k in kernels]


def _scoped_gap(k: Kernel, side: tuple[float, float], layout: ParallelLayout, moe_layer: bool) -> Kernel | None:
    """:func:`_launch_gap` of the part of ``k`` no CUDA graph replays (:func:`graph_share`), and what the replayed
    part holds the GPU for: a graph removes the launch gap, not a kernel's own minimum run time [27 s23 graphmin]."""
    share = graph_share(k, layout, moe_layer)
    if share <= 0.0:
        return _launch_gap(k, side)
    # the side-stream launches split as the kernel's do
    rest = 1.0 - share
    eager = _launch_gap(_share_of(k, rest), (side[0] * rest, side[1] * rest)) if share < 1.0 else None
    graphed = _launch_gap(_share_of(k, share), (side[0] * share, side[1] * share), gap_s=0.0)
    if eager is None or graphed is None:
        return eager or graphed
    return replace(eager, fwd_s=eager.fwd_s + graphed.fwd_s, bwd_s=eager.bwd_s + graphed.bwd_s)


def _share_of(k: Kernel, share: float) -> Kernel:
    """``share`` of ``k``'s launches and time (``k`` itself for all of it)."""
    if share >= 1.0:
        return k
    bwd = None if k.bwd_launches is None else k.bwd_launches * share
    return replace(k, fwd_s=k.fwd_s * share, bwd_s=k.bwd_s * share, launches=k.launches * share, bwd_launches=bwd)


def _launch_gap(k: Kernel, side: tuple[float, float], gap_s: float = KERNEL_GAP_S) -> Kernel | None:
    """The GPU time ``k``'s kernels hold beyond their own (kind ``launch_gap``): each launched on the main stream
    (all but ``side``: (forward, backward) launches on side streams) runs at least KERNEL_MIN_S and leaves ``gap_s``
    (KERNEL_GAP_S when launched one by one, 0 when a CUDA graph replays it) before the next; None where nothing is
    left to charge."""
    bwd_launches = BACKWARD_LAUNCH_RATIO * k.launches if k.bwd_launches is None else k.bwd_launches
    n_fwd = max(0.0, k.launches - side[0])
    n_bwd = max(0.0, bwd_launches - side[1])
    if n_fwd + n_bwd == 0:
        return None
    fwd = max(0.0, n_fwd * KERNEL_MIN_S - k.fwd_s) + n_fwd * gap_s
    bwd = max(0.0, n_bwd * KERNEL_MIN_S - k.bwd_s) + n_bwd * gap_s
    if fwd + bwd <= 0.0:
        return None
    return Kernel(k.name + GAP_SUFFIX, "launch_gap", fwd, bwd, 0.0, k.eager, bwd_launches=0.0)


# gpt-oss's experts (workload moe.glu_clamp and moe.expert_bias) as each stack runs them (Framework.clamped_glu,
# Framework.expert_bias_loop); bytes per element of the activation's output (routed tokens x expert FFN width).
# Megatron-Core (NVIDIA/Megatron-LM 44151194, the Megatron-Bridge 26.04.01 submodule: megatron/core/fusions/
# fused_bias_geglu.py weighted_bias_quick_geglu_impl): before the torch.compile'd activation, x_glu.clamp and
# x_linear.clamp (a 16-bit read and write of each half of the fc1 output) and torch.cat of the two (a read and a write
# of both halves): 16 B forward; backward, two clamp_backward kernels (gradient and input read, gradient written: 6 B a
# half) and the chunk's backward cat (8 B): 20 B; three kernels each way.
GLU_CLAMP_CAT = (16.0, 20.0, 3)
# AutoModel's eager quick_geglu_deepep (NVIDIA-NeMo/Automodel 01926a5c nemo_automodel/components/moe/layers.py):
# the two clamps on the strided halves (x[..., ::2], x[..., 1::2]), no cat: 8 B forward, 12 B backward, two kernels.
GLU_CLAMP_EAGER = (8.0, 12.0, 2)
# Megatron-Core then builds torch.tensor(linear_offset, device=cuda) every call: a pageable host-to-device copy,
# which PyTorch runs as cudaMemcpyAsync plus a stream synchronisation (aten/src/ATen/native/cuda/Copy.cu,
# non_blocking=False: memcpy_and_sync): the host waits for the GPU to drain and the GPU for the next launch, the
# round trip step.MOE_SYNC_S prices for the dispatcher's sync.
GLU_OFFSET_SYNC_S = 20e-6
# A bias added per local expert in Python (Megatron-Core TEGroupedMLP._apply_bias for fc2, whose TE GroupedLinear
# runs with skip_bias_add; AutoModel GroupedExpertsDeepEP._apply_bias for fc1 and fc2): per expert t + b * p (fc2,
# with the routing weights: a multiply writing 2 B and an add reading 4 B and writing 2 B an element) or t + b (fc1:
# 4 B), then torch.cat of the pieces (4 B); backward, per expert the weights' gradient and the bias's (a multiply and
# a sum each, 6 B) or the bias's sum alone (2 B), and the split's backward cat (4 B). (forward B, backward B,
# kernels per expert forward, kernels per expert backward) for (fc1, fc2); one cat each way besides.
EXPERT_BIAS_LOOP = {"fc1": (8.0, 6.0, 1, 1), "fc2": (12.0, 16.0, 2, 4)}


def _clamped_glu_and_bias(b: _Builder, w: Workload, routed: float, fe: float, local: float) -> list[Kernel]:
    """gpt-oss's clamped GLU and expert biases where the stack runs them outside its fused kernels (none for other
    workloads): ``routed`` token copies on this GPU (the most loaded), expert FFN width ``fe``, ``local`` experts."""
    m = w.moe
    assert m is not None
    out: list[Kernel] = []
    eager_rate = stream_time_s(b.dev, 1.0) / EAGER_STREAM_FRACTION  # seconds per byte of an eager ATen kernel
    elements = routed * fe  # the activation's output
    mode = b.fw.clamped_glu
    if m.glu_clamp is not None and mode != "fused" and not (mode == "eager" and b.compiled):
        fwd_b, bwd_b, kernels = GLU_CLAMP_CAT if mode == "eager_sync" else GLU_CLAMP_EAGER
        sync = GLU_OFFSET_SYNC_S if mode == "eager_sync" else 0.0
        t_fwd = fwd_b * elements * eager_rate + sync
        out.append(
            Kernel(
                "experts_clamp",
                "activation",
                t_fwd,
                bwd_b * elements * eager_rate,
                kernels + (1 if sync else 0),
                True,
                nbytes=fwd_b * elements,
            )
        )
    if m.expert_bias and b.fw.expert_bias_loop:
        widths = {"fc1": (1 if not w.gated_ffn else 2) * fe, "fc2": float(w.hidden)}
        fwd = sum(EXPERT_BIAS_LOOP[lin][0] * routed * widths[lin] for lin in b.fw.expert_bias_loop)
        bwd = sum(EXPERT_BIAS_LOOP[lin][1] * routed * widths[lin] for lin in b.fw.expert_bias_loop)
        launches = sum(EXPERT_BIAS_LOOP[lin][2] * local + 1 for lin in b.fw.expert_bias_loop)
        out.append(Kernel("experts_bias", "residual", fwd * eager_rate, bwd * eager_rate, launches, True, nbytes=fwd))
    return out


def _cast(
    b: _Builder, layout: ParallelLayout, elements: tuple[float, float], kernels: tuple[float, float] | None = None
) -> Kernel:
    """fp8 casts of a layer: (forward, backward) elements cast, each at its recipe's bytes (:func:`fp8_cast_bytes`;
    launches counted per GEMM). ``kernels``: the (forward, backward) quantize kernels Transformer Engine runs for them
    (one per GEMM input and output gradient; per expert where GroupedLinear's split_quantize casts expert by expert):
    MXFP8 casts of Megatron-Core (TE's quantizers) on a generation with measured quantize times are priced per kernel,
    a fixed time each plus their bytes at the measured rate (:func:`_mxfp8_quantize_s`), else at the HBM stream rate."""
    recipe = fp8_recipe(b.fw, layout)
    per_elem = fp8_cast_bytes(b.dev, recipe)
    per_grad = per_elem + recipe.bwd_extra_bytes  # an output gradient's cast (NVFP4's stochastic rounding)
    fit = mxfp8_quantize_fit(b.dev.name) if recipe.block_scaled and b.fw.moe_local_sort and kernels else None
    fwd_s, bwd_s = (
        (
            _mxfp8_quantize_s(fit, per_elem * elements[0], kernels[0]),
            _mxfp8_quantize_s(fit, per_grad * elements[1], kernels[1]),
        )
        if fit is not None and kernels is not None
        else (stream_time_s(b.dev, per_elem * elements[0]), stream_time_s(b.dev, per_grad * elements[1]))
    )
    return Kernel("fp8_cast", "fp8_cast", fwd_s, bwd_s, 0, nbytes=per_elem * elements[0])


def _weight_cast(b: _Builder, layout: ParallelLayout, weights: float, launches: int) -> Kernel:
    """A dense layer's fp8 weight casts in one forward (Framework.fp8_weight_cast_per_forward): ``weights`` elements
    (the layer's linears on this GPU, as FSDP gathered them) at the recipe's bytes, ``launches`` kernels, none in
    the backward (it reads the forward's transposed copy). Transformer Engine's te.Linear called without
    ``is_first_microbatch`` (the v0.10-era and 1.x linear.py: ``update_fp8_weights = is_first_microbatch is None or
    is_first_microbatch``, then ``fp8_cast_transpose_fused`` of the weight into ``weight_fp8`` and ``weight_t_fp8``)
    casts on every call: each micro-batch and, under activation checkpointing, the recompute [27 s14 fp8foundry]."""
    nbytes = fp8_cast_bytes(b.dev, fp8_recipe(b.fw, layout)) * weights
    return Kernel(
        "fp8_weight_cast", "fp8_cast", stream_time_s(b.dev, nbytes), 0.0, launches, nbytes=nbytes, bwd_launches=0.0
    )


def _weight_bwd_copy(b: _Builder, weights: float, linears: int) -> Kernel:
    """torchao Float8Linear's column-major copy of a dense layer's gathered fp8 weights for the data-gradient GEMMs,
    once per backward (Framework.fp8_weight_bwd_copy): ``weights`` elements on this GPU, ``linears`` copies. torchao
    v0.5.0 float8_linear.py manual_float8_matmul.backward runs ``torch.mm(grad_output, weight_fp8_t.t())``, whose
    second operand is the row-major fp8 weight, and float8_ops.py preprocess_addmm makes it column-major for
    torch._scaled_mm (``if is_row_major(b_data.stride()): b_data = b_data.t().contiguous().t()``; the same at
    eab345c and 29de3e0a): 1 B read and 1 B written per element. The forward's ``weight_fp8.t()`` is already
    column-major: no copy there [27 s15 olmo13b]."""
    nbytes = 2.0 * weights
    return Kernel("fp8_weight_transpose", "fp8_cast", 0.0, stream_time_s(b.dev, nbytes), 0, bwd_launches=linears)


# [27 s10 mxcast] Transformer Engine's MXFP8 quantize kernel measured on Blackwell (efficiency.yaml mxfp8_quantize:
# GB200 nsys kernel times of TE's cast-only kernel at 6 shapes, kainzhong/TransformerEngine@7a9dd267 proof/RESULTS.md,
# the measurements of TE PR #3291; 3 B200 rows of TE PR #3137, 2026-07-08): 16.0 us at 4096 x 4096 to 149.3 us at
# 8192 x 28672, i.e. 5.9 us per kernel plus its bytes at 6.64 TB/s (the least-squares line; every row within 6% of
# it). The fixed part is the kernel's ramp and tail: at the per-expert tensors of GroupedLinear's split_quantize
# (512 to 4096 rows of 2048 to 7168) it is most of the kernel (a 2048 x 2048 cast: 8.4 us, where the HBM rate alone
# gives 2.7 us). Below the smallest measured tensor (4096 x 4096) the line is extrapolated; TE PR #2634 (B200,
# 2026-05-14) times whole quantize calls of 512 x 4096 and 512 x 8192 (row- and column-wise) at 9.06 and 9.01 us,
# host included ('launch-bound'), which bounds their kernels from above: the line gives 7.2 and 8.4 us. The rows are
# L2-flushed runs; a cast whose input is still in L2 runs faster. Megatron-Bridge issue #2842 (2026-05-12, Qwen3
# FP8-MX slower than BF16 on B200/GB200/GB300 in 26.02): "still mostly mxfp8 cast bound".
def _mxfp8_quantize_s(fit: tuple[float, float], nbytes: float, kernels: float) -> float:
    """GPU time of ``kernels`` MXFP8 quantize kernels moving ``nbytes`` in all, at ``fit`` (seconds per kernel,
    bytes per second: efficiency.mxfp8_quantize_fit)."""
    if nbytes <= 0 or kernels <= 0:
        return 0.0
    return kernels * fit[0] + nbytes / fit[1]
