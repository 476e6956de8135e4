"""Step time, throughput, FLOP/s and memory of one training step: :func:`run` of a :class:`Scenario`.

The model, per GPU of each pipeline stage, for one micro-batch, as the layout's framework runs it
(:mod:`commlens.project.frameworks`):

1. kernels: each layer pass is a list of kernels (:mod:`commlens.project.kernels`): GEMMs by shape, attention by
   kernel family from the efficiency tables (:mod:`commlens.project.efficiency`), grouped expert GEMMs,
   memory-bound ops at HBM rate (several kernels where the stack runs them eagerly); backward per kernel;
   recomputation redoes the kernels of the recomputed modules; their host launches, with the MoE dispatcher's
   host sync where the stack has one; the breakdown by kernel class is ``Projection.kernels``;
2. communication from the collective cost models, as NCCL runs each collective
   (:func:`commlens.model.backends.nccl_predict`), or the simulator, per parallel
   dimension, placed on its nodes (:mod:`commlens.project.layout`): TP per layer per pass (exposed, or chunked
   behind its GEMMs with ``tp_comm_overlap``); CP's K/V exchange beside attention where the stack overlaps it;
   EP all-to-all per MoE layer per pass (beside the paired chunk under DualPipe); PP send/recv per micro-batch
   per virtual stage;
3. the pipeline: ``m`` x the slowest stage + the fill and drain of the schedule (1F1B, interleaved, zero-bubble,
   DualPipe, GPipe);
4. DP: gradients reduced bucket by bucket as the framework buckets them, overlapping the last backward; ZeRO-1/2's
   parameter all-gather beside the next forward where the stack does that; ZeRO-3/FSDP's gathers and reduce-scatter
   layer by layer by the framework's prefetch depth; then the optimizer step;
5. an 80% band from the validation residuals of the projection's family (:mod:`commlens.project.bands`).

FLOPs are counted as Megatron-LM counts them (attention over the full s x s,
not halved for causality), so TFLOP/s figures compare with published ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from commlens.model import InfeasibleError
from commlens.model.backends import DEEPEP_ALL_TO_ALL, DEVICE_ALL_TO_ALL, HYBRIDEP_ALL_TO_ALL, nccl_time_s
from commlens.project.bands import band, family_of
from commlens.project.compute import gemm_time_s, stream_time_s
from commlens.project.errors import InfeasibleLayoutError
from commlens.project.frameworks import Framework, framework, generation, loss_fused
from commlens.project.hardware import Device, accelerator_files, device_for
from commlens.project.kernels import (
    COMPUTE_KINDS,
    EAGER_STREAM_FRACTION,
    FP8_AUTOCAST_AMAX_ENTRIES,
    GAP_SUFFIX,
    KINDS,
    MXFP8_UNSUPPORTED,
    Kernel,
    LayerShape,
    async_tp_unfused_reduce_scatters,
    expert_load,
    fp8_autocast_amax_reductions,
    fp8_tp_amax_reductions,
    graph_shares,
    layer_kernels,
    mamba_cp_a2a_bytes,
    op_sac_tp_regathers,
    recompute_share,
    ssd_flops_per_token,
    tp_fp8_all_gather,
    unfused_factor,
)
from commlens.project.layout import Group, ParallelLayout, Resolved, resolve
from commlens.project.memory import (
    MEMORY_TOLERANCE,
    NVFP4_BYTES,
    recomputed_modules,
    stage_bf16_layers,
    stage_fp8_gathered,
    stage_layer_kinds,
    stage_memory,
    stage_parameters,
    stage_recompute,
    stage_views,
)
from commlens.project.muon import stage_muon_s
from commlens.project.scenario import Scenario
from commlens.topology import Topology
from commlens.workload import Workload

if TYPE_CHECKING:
    from commlens.sim import SimOptions

__all__ = ["Projection", "Scenario", "model_flops_per_step", "project", "run"]

_COMM: dict[tuple, float] = {}
# The topologies _COMM's keys name by id(), kept alive with the entries: a freed topology's id could otherwise be
# handed to a new one (a sweep's overridden topology, an API caller's) and return the old one's times.
_COMM_TOPOLOGIES: dict[int, Topology] = {}

# Vocabulary-parallel cross-entropy as Megatron-LM runs it, in fp32 (cast from 16 bits, max, subtract, exp, sum,
# divide; backward: scale, cast back): bytes through HBM per logit element.
LOSS_BYTES_PER_LOGIT = 6 + 4 + 8 + 8 + 4 + 8 + 8 + 6
# Mixed-precision Adam per parameter: fused Adam reads param, grad, m, v and writes param, m, v in fp32 (28 B), the
# gradient norm reads the grads (4 B), the fp32 params are copied to the 16-bit model (6 B).
ADAM_BYTES_PER_PARAM = 28 + 4 + 6
# torch's foreach Adam(W) (torch/optim/adam.py _multi_tensor_adam, decoupled weight decay, not capturable), fp32
# bytes per parameter, pass by pass: decay param (r+w 8), lerp exp_avg with grad (12), scale exp_avg_sq (8), addcmul
# grad^2 into it (12), sqrt into a temporary (8), divide it by the bias correction (8), add eps (8), addcdiv into
# param (r param, exp_avg, temporary, w param: 16). The fused kernel does one pass (28 B).
FOREACH_ADAM_BYTES_PER_PARAM = 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16
FUSED_ADAM_BYTES = 28
# Clipping that scales every fp32 gradient by the clamped coefficient (torch clip_grads_with_norm_): r + w.
CLIP_SCALE_BYTES = 8
# 16-bit gradients first copied into fp32 main grads (6 B) and unscaled there (8 B).
MAIN_GRAD_COPY_BYTES = 6 + 8
# Kernels of one transformer layer's forward, eager, Megatron-LM with Transformer Engine (docs/project.md): each
# norm 1, the attention core with rotary embedding 2, each residual add 1 (with the norms: LAYER_NORM_KERNELS = 2
# per norm), the FFN activation 1; the backward launches about twice as many.
LAYER_NORM_KERNELS = 2
ATTENTION_KERNELS = 2
FFN_ELEMENTWISE = 1
BACKWARD_KERNEL_RATIO = 2.0
# An MoE layer's router (GEMM launched apart; softmax/sigmoid, top-k, the load-balancing loss: about 8 kernels) and
# dispatch (token counts, permutation, all-to-all of the splits and the tokens, unpermute: about 10 kernels).
# Spread of compute speed between GPUs of one SKU in one cluster (coefficient of variation). Sinha et al., "Not All
# GPUs Are Created Equal" (SC'22, arXiv 2208.11035): compute-bound kernels vary 8% on average (max - min over the
# median) across the thousands of GPUs of each cluster studied; over ~4,000 normally spread GPUs that range is
# 2 x 3.5 sigma, so sigma ~ 1.15%.
GPU_SPEED_CV = 0.0115
# Overlap interference (docs/project.md, "Overlap interference"): a collective hidden under compute is not free. Its
# kernels hold SMs for as long as it runs, slowing the compute-bound kernels beside it by that share of the SMs, and
# its traffic goes through HBM, slowing the memory-bound ones by the share of HBM bandwidth it takes. Lee et al.,
# "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning" (arXiv 2507.03114,
# A100/H100/MI250/MI210, GPT and LLaMA layers) measured compute 18.9% slower on average while a collective ran
# beside it (max 40%): the size these shares give on an H100 (tests/test_project_physics.py).
# SMs per mechanism: Transformer Engine's userbuffers overlap for TP's chunks (initialize_ub defaults: num_sm 16 for
# the pipeline reduce-scatter and bulk methods; the ring_exchange all-gathers use 1 SM and the copy engines, so this
# is the upper of the two);
OVERLAP_COMM_SMS = 16
# torch's async TP keeps the userbuffers' charge, which has no source for it: its chunks move with the copy engines
# (``copy_`` of contiguous same-dtype tensors: cudaMemcpyAsync, aten/src/ATen/native/cuda/Copy.cu
# copy_device_to_device), and what runs on an SM beside the matmuls is the symmetric-memory barrier waiting for the
# peers (CUDASymmetricMemory::barrier: barrier_kernel<<<1, C10_WARP_SIZE>>>, one block). One SM instead, tried
# (docs/project-evidence.md), moves torchtitan's end-2024 table the wrong way (14.9 -> 15.4%): left open.
ASYNC_TP_COMM_SMS = OVERLAP_COMM_SMS
# NCCL runs one CTA per channel on its own SM for the collective's whole duration: an nsys trace of an FSDP-style
# all-gather beside a GEMM on an H100 shows ncclAllGather at 24 blocks (NVIDIA developer forum, "Compute-Communication
# Overlap Causes Severe GEMM Performance Degradation because of Tail Effect", 2025): DP reduction, ZeRO-3/FSDP gathers,
# CP's ring and NCCL's all-to-all;
NCCL_OVERLAP_CTAS = 24
# DeepSeek-V3's dispatch/combine under DualPipe: 20 of the H800's 132 SMs (arXiv 2412.19437, Sec. 3.2.2).
DUALPIPE_COMM_SMS = 20
# The column-parallel linears whose input sequence parallelism gathers over TP (kernels.py names): the GEMMs beside
# which Megatron-Core runs their backward's all-gather and reduce-scatter (_sp_column_backward).
SP_COLUMN_LINEARS = frozenset({"qkv", "ffn_in"})
# HBM bytes per byte a collective moves over the link, per GPU: the sender reads it and the receiver writes it; a
# reduction also reads the local operand (the ring reduce-scatter's every byte; an all-reduce's reduce-scatter half).
HBM_PER_LINK_BYTE = {
    "all_gather": 2.0,
    "all_to_all": 2.0,
    DEVICE_ALL_TO_ALL: 2.0,
    DEEPEP_ALL_TO_ALL: 2.0,
    HYBRIDEP_ALL_TO_ALL: 2.0,
    "reduce_scatter": 3.0,
    "all_reduce": 2.5,
}
# The pipeline's fill and drain per schedule, as a fraction of one pass through every stage but the slowest:
# 1F1B and GPipe (p - 1) micro-batch times; interleaved with v chunks 1/v of it (Narayanan et al. SC'21);
# zero-bubble ZB-H1 a third (its bubble (p-1)(F + B - W) against 1F1B's (p-1)(F + B + W) with F = B = W; Qi et al.,
# arXiv 2401.10241, Sec. 3); DualPipe (p/2 - 1)(F&B + B - 3W) over 1F1B's, about half (DeepSeek-V3 report,
# arXiv 2412.19437, Table 2, with overlapped F&B taken as F + B).
PIPELINE_FILL: dict[str, Callable[[int, int], float]] = {
    "1f1b": lambda p, v: 1.0,
    "gpipe": lambda p, v: 1.0,
    "interleaved": lambda p, v: 1.0 / v,
    "zero-bubble": lambda p, v: 1.0 / 3.0,
    "dualpipe": lambda p, v: max(0.0, (p / 2 - 1) / max(1, p - 1)),
}
# Round trip of the MoE dispatcher's host sync: a small device-to-host copy and stream synchronisation (~10 us on
# PCIe/NVLink-C2C) and the first kernel launched after it reaching the GPU (~5-10 us).
MOE_SYNC_S = 20e-6
# DeepSpeed's pipeline engine sends a partitioned tensor's meta before its data: an int64 tensor of its rank count,
# shape, parts, rank and part offsets (PartitionedTensor.to_meta), ~15 x 8 B for a 3-d activation over 8 ranks.
PP_HEADER_BYTES = 128


def _comm_s(topology: Topology, op: str, size_bytes: float, group: Group, nvls: bool = True) -> float:
    """Time of one collective on ``group`` (cached: sweeps ask for the same ones often); ``nvls`` false: the job
    runs with NCCL_NVLS_ENABLE=0 (:func:`nccl_nvls`)."""
    if group.size == 1 or size_bytes <= 0:
        return 0.0
    key = (id(topology), op, int(size_bytes), group.nodes, group.ranks_per_host, group.span, nvls)
    hit = _COMM.get(key)
    if hit is None:
        if len(_COMM) > 100_000:
            _COMM.clear()
            _COMM_TOPOLOGIES.clear()
        _COMM_TOPOLOGIES[id(topology)] = topology
        try:
            hit = nccl_time_s(
                topology,
                op,
                int(size_bytes),
                nodes=group.nodes,
                ranks_per_host=group.ranks_per_host,
                span_nodes=group.span,
                nvls=nvls,
            )
        except InfeasibleError as e:
            raise InfeasibleLayoutError(f"{op} over {group.size} ranks: {e}", "topology") from None
        _COMM[key] = hit
    return hit


def nccl_nvls(layout: ParallelLayout) -> bool:
    """Whether the job's NCCL may run NVLink SHARP (NVLS): the layout's ``nccl_nvls`` where it sets one (a row whose
    launch set NCCL_NVLS_ENABLE itself), else its framework profile's (the release's launch scripts) [27 s16 nvls]."""
    if layout.nccl_nvls is not None:
        return layout.nccl_nvls
    return framework(layout.framework).nccl_nvls


def _comm_model(s: Scenario, r: Resolved) -> Callable[[str, float, Group], float]:
    """The time of one collective of a group, by the analytic model or by the simulator."""
    topology = s.topology
    nvls = nccl_nvls(s.layout)
    if s.sim is None:
        return lambda op, size, group: _comm_s(topology, op, size, group, nvls)
    from commlens.project.simnet import SimNetwork

    return SimNetwork(topology, r, s.gpus, s.sim, nvls).time_s


@dataclass(frozen=True)
class Projection:
    """One projected training step."""

    workload: str
    topology: str
    gpus: int
    layout: dict[str, object]
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hw_tflops_per_gpu: float
    mfu: float
    memory_bytes_per_gpu: float
    memory_capacity_bytes: float
    breakdown: dict[str, float]  # seconds of the step: compute, each exposed comm, bubble, other
    memory: dict[str, float] = field(default_factory=dict)  # bytes by kind
    overlapped_s: dict[str, float] = field(default_factory=dict)  # communication hidden under compute
    stages: list[dict[str, float]] = field(default_factory=list)  # per pipeline stage: layers, times, memory
    pace_stage: int = 0  # the stage that sets the pipeline's pace (slowest per micro-batch)
    kernels: dict[str, float] = field(default_factory=dict)  # seconds of the step by kernel class (pace stage)
    framework: str = "megatron-core"
    band: dict[str, object] | None = None  # 80% band of the step time and its family (commlens.project.bands)
    memory_fit: str = "fits"  # fits, or tight: over capacity by less than the memory model's error (may not fit)

    def as_dict(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "topology": self.topology,
            "gpus": self.gpus,
            "layout": self.layout,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hw_tflops_per_gpu": self.hw_tflops_per_gpu,
            "mfu": self.mfu,
            "memory_bytes_per_gpu": self.memory_bytes_per_gpu,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "breakdown": dict(self.breakdown),
            "overlapped_s": dict(self.overlapped_s),
            "memory": dict(self.memory),
            "stages": [dict(st) for st in self.stages],
            "pace_stage": self.pace_stage,
            "kernels": dict(self.kernels),
            "framework": self.framework,
            "band": self.band,
            "memory_fit": self.memory_fit,
        }


def _layer_flops(w: Workload, tokens: float, keys: float, moe: bool) -> tuple[float, float]:
    """(GEMM FLOPs, attention-core FLOPs) of one layer's forward for ``tokens`` queries over ``keys`` keys; a hybrid's
    layer of each kind as its kernels price it (:func:`kernels.layer_kernels`): an E layer, or the mean of its M, *
    and - layers (a Mamba layer's in_proj, out_proj and SSD scan among the GEMM FLOPs)."""
    if w.hybrid is not None:
        return _hybrid_layer_flops(w, tokens, keys, moe)
    dense, core = _attention_flops(w, tokens, keys)
    return dense + (_moe_block_flops(w, tokens) if moe and w.moe is not None else _mlp_flops(w, tokens)), core


def _attention_flops(w: Workload, tokens: float, keys: float) -> tuple[float, float]:
    """(GEMM FLOPs, core FLOPs) of one attention block's forward: its linears, and the core over ``keys`` keys (a
    sliding window's layers min(window, s) keys a query, as Megatron-Bridge counts them)."""
    if w.sliding_window is not None:
        keys += (min(w.sliding_window.tokens, keys) - keys) * w.window_layers / w.layers
    linears = 2 * tokens * w.attention_parameters
    return linears, 2 * tokens * keys * w.heads * (w.qk_head_dim + w.v_head_dim)


def _mlp_flops(w: Workload, tokens: float) -> float:
    """Forward FLOPs of one dense MLP block."""
    return 2 * tokens * (3 if w.gated_ffn else 2) * w.hidden * w.ffn_hidden


def _mtp_layer_flops(w: Workload, tokens: float, keys: float) -> tuple[float, float]:
    """(GEMM FLOPs, attention-core FLOPs) of one multi-token prediction module's layer: a layer like the model's last,
    or a hybrid's attention block and E block (an MLP block without experts)."""
    if w.hybrid is None:
        return _layer_flops(w, tokens, keys, w.mtp_moe)
    linears, core = _attention_flops(w, tokens, keys)
    return linears + (_moe_block_flops(w, tokens) if w.moe is not None else _mlp_flops(w, tokens)), core


def _moe_block_flops(w: Workload, tokens: float) -> float:
    """Forward FLOPs of one MoE block for ``tokens`` tokens: the router, the routed experts (at the latent width in a
    latent MoE, with its two projections) and the shared experts."""
    m = w.moe
    assert m is not None
    h, mats = w.hidden, 3 if w.gated_ffn else 2
    routed = 2 * tokens * mats * m.routed_width(h) * m.expert_ffn_hidden * m.top_k
    shared = 2 * tokens * mats * h * m.expert_ffn_hidden * m.shared_experts
    return 2 * tokens * h * m.experts + routed + shared + 2 * tokens * m.latent_parameters(h)


def _hybrid_layer_flops(w: Workload, tokens: float, keys: float, moe: bool) -> tuple[float, float]:
    """:func:`_layer_flops` of a hybrid: an E block, or the mean of its M, * and - blocks."""
    hy = w.hybrid
    assert hy is not None
    if moe:
        return _moe_block_flops(w, tokens), 0.0
    n_m, n_a, n_f = hy.count("M"), hy.count("*"), hy.count("-")
    mamba = 2 * tokens * w.hidden * (hy.in_proj_width() + hy.d_inner)
    mamba += tokens * ssd_flops_per_token(hy.mamba_heads, hy.mamba_groups, hy.mamba_head_dim, hy.mamba_state, hy.chunk)
    linears, core = _attention_flops(w, tokens, keys)
    n = n_m + n_a + n_f
    return (n_m * mamba + n_a * linears + n_f * _mlp_flops(w, tokens)) / n, n_a * core / n


def model_flops_per_step(w: Workload, recompute: str = "none", recomputed: tuple[int, int] | None = None) -> float:
    """FLOPs of one step, Megatron-LM's count (full s x s attention; a sliding window's layers min(window, s) keys a
    query, as Megatron-Bridge's flop_utils counts them); with recomputation's extra forward (full: of the
    ``recomputed`` (dense, MoE) layers where a layer count leaves some out, else of every layer)."""
    tokens = w.global_batch * w.seq_len
    dense_layers = w.layers - w.moe_layers
    fwd = 0.0
    for n, moe in ((dense_layers, False), (w.moe_layers, True)):
        if n:
            gemm, attn = _layer_flops(w, tokens, w.seq_len, moe)
            fwd += n * (gemm + attn)
            if recompute == "full":
                fwd += (n if recomputed is None else recomputed[moe]) * (gemm + attn) / 3.0
            elif recompute == "selective":
                fwd += n * attn / 3.0
    logits = 2 * tokens * w.hidden * w.vocab
    if w.mtp_layers:  # each module: a layer like the last, eh_proj (2h -> h) and the output layer again, as
        # Megatron-LM counts them (0d8e0714 training.py num_floating_point_operations; Megatron-Bridge flop_utils.py)
        gemm, attn = _mtp_layer_flops(w, tokens, w.seq_len)
        fwd += w.mtp_layers * (gemm + attn + 2 * tokens * 2 * w.hidden * w.hidden)
        if recompute == "full":  # the module is one checkpoint: its forward again
            fwd += w.mtp_layers * (gemm + attn) / 3.0
        elif recompute == "selective":
            fwd += w.mtp_layers * attn / 3.0
        logits *= 1 + w.mtp_layers
    return 3.0 * (fwd + logits)


@dataclass(frozen=True)
class _Setup:
    """What every part of one projection reads: the scenario, the GPU, the workload, the layout as resolved on the
    job, its framework, the collective model, and one micro-batch's share on this GPU."""

    scenario: Scenario
    dev: Device
    w: Workload
    layout: ParallelLayout
    r: Resolved
    fw: Framework
    comm: Callable[[str, float, Group], float]
    tokens: float  # this GPU's tokens of one micro-batch
    sp: bool
    fwd_passes: float  # forwards per micro-batch (2 under full recomputation)
    nodes_per_domain: int  # nodes one scale-up (NVLink) domain holds
    peak: float  # the GPU's peak FLOP/s in the workload's precision
    gemm_peak: float  # and what its GEMMs reach of it (fp8's own efficiency)
    # a hybrid's blocks' kernels, built once a projection for every stage mix that prices them (kernels.layer_kernels)
    hybrid_blocks: dict[tuple[object, ...], list[Kernel]] = field(default_factory=dict)
    # and a hybrid's E layer priced (_layer_time), the same for every stage mix: once a projection
    hybrid_e_times: dict[tuple[object, ...], tuple[tuple[float, ...], dict[str, float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class _LayerComm:
    """One layer's communication for one micro-batch, before any overlap."""

    tp_bytes: float  # one TP collective's activations (16 bits)
    tp_pass: float  # TP's collectives of one pass
    tp_rs: float  # one of them, a reduce-scatter (sequence parallel; 0 without)
    tp_ag: float  # and an all-gather (sequence parallel; 0 without)
    cp_fwd: float  # CP's K/V all-gather of the forward
    cp_bwd: float  # and of the backward, with the reduce-scatter of their gradients (ring); the all-gather alone
    # (allgather: the gradients go round the ring apart, cp_grad_hop a step)
    cp_grad_hop: float = 0.0  # one ring step of this GPU's K/V gradients (allgather stacks; 0 otherwise)
    mamba_cp: float = 0.0  # a hybrid's Mamba CP all-to-alls of one forward (the backward's the same), not hidden


def clear_caches() -> None:
    """Forget what projections keep between calls, as a new process has it: the collective costs (``_COMM``), the
    workloads' parameter counts, the hybrids' stage views and the stages' parameters, and what was worked out for a
    scenario's shapes: the collective model's job layouts (per topology and job shape) and their protocols' views,
    the ring tapers and pairwise rounds, the GEMM shape curve's points, the measured GEMM rate caps (per FLOP count)
    and attention rates (per head size and sequence). The data files read once per process and each accelerator's
    curves built from them stay, as a process that has projected once keeps them."""
    import importlib

    from commlens.model import backends as model_backends
    from commlens.model import layout as model_layout
    from commlens.model import patterns as model_patterns
    from commlens.project import compute, efficiency, memory
    from commlens.workload import spec

    _COMM.clear()
    _COMM_TOPOLOGIES.clear()
    memory._VIEWS.clear()
    memory._PARAMS.clear()
    spec._COUNTS.clear()
    importlib.import_module("commlens.model.predict")._LAYOUTS.clear()  # (the package names its function predict)
    model_backends._PROTOCOL_LAYOUTS.clear()
    model_layout._ring_taper.cache_clear()
    model_patterns._pairwise_rounds_cached.cache_clear()
    compute._cached_shape_factor.cache_clear()
    efficiency._cap.cache_clear()
    efficiency._lookup.cache_clear()
    consecutive_spread.cache_clear()
    slowest_gpu_factor.cache_clear()


def run(scenario: Scenario) -> Projection:
    """The projection stage: one :class:`Scenario` in, its :class:`Projection` out. :class:`InfeasibleLayoutError`
    when the layout cannot run (with the reason), :class:`ProjectionError` when the hardware lacks what it needs."""
    c, stage_mem, mem = _setup(scenario)  # 1. the GPU, the layout on the job, its memory, the collective model
    kind_times, kind_seconds, lc = _layer_times(c)  # 2. one layer of each kind, one micro-batch
    pp_p2p, ends = _pp_p2p_stages(c), _ends(c, c.gemm_peak, lc.tp_bytes)  # 3. the pipeline's sends, first/last layers
    stages, stage_classes = _all_stages(c, kind_times, kind_seconds, pp_p2p, ends, scenario.gpus)  # 4. each stage
    pipeline_s, pace, schedule = _pipeline(c, stages)  # 5. the schedule: m x the slowest stage + fill and drain
    runs = _fsdp_runs(c)  # 6. DP and the optimizer after the last backward (FSDP's per schedule run)
    tail = _slowest_tail(c, stages, c.r.micro_batches // runs, runs)
    return _projection(c, stages, stage_classes, stage_mem, mem, pipeline_s, pace, schedule, tail)  # 7. the record


def project(
    workload: Workload,
    topology: Topology,
    layout: ParallelLayout,
    gpus: int,
    *,
    check_memory: bool = True,
    accelerators: Sequence[str] | None = None,
    network: str = "analytic",
    sim_options: SimOptions | None = None,
) -> Projection:
    """:func:`run` of the :class:`Scenario` these arguments make, for a caller that holds them apart.

    ``accelerators``: accelerators files over the shipped figures (default: ``COMMLENS_ACCELERATORS``).
    ``network``: ``analytic`` (each collective alone on the fabric, as NCCL runs it:
    :func:`commlens.model.backends.nccl_predict`) or ``sim``
    (each communication term simulated with every group of its dimension at once on the fabric,
    :mod:`commlens.sim`; ``sim_options``: routing, seed, qps, channels, faults; default :class:`SimOptions`)."""
    if network not in ("analytic", "sim"):
        raise InfeasibleLayoutError(f"unknown network model {network!r}; known: analytic, sim", "network")
    sim = None
    if network == "sim":
        from commlens.sim import SimOptions

        sim = sim_options or SimOptions()
    files = None if accelerators is None else tuple(accelerators)
    return run(Scenario(workload, topology, layout, gpus, accelerators=files, sim=sim, check_memory=check_memory))


def _cuda_gemm_ratio(dev: Device, fw: Framework, fp8: bool) -> float:
    """A stack whose runs used an older CUDA toolkit than the device's measured plateau: its bf16 GEMMs at the
    plateau measured under that toolkit (accelerators.yaml gemm_efficiency_by_cuda), relative to the device's
    [27 s14 h100fsdp]; its fp8 GEMMs likewise where the device has an fp8 figure for that toolkit
    (fp8_gemm_efficiency_by_cuda, relative to fp8_gemm_efficiency) [27 s15 h100fp8cuda]."""
    if fw.cuda is None:
        return 1.0
    if fp8:
        if fw.cuda not in dev.fp8_gemm_efficiency_by_cuda or not dev.fp8_gemm_efficiency:
            return 1.0
        return dev.fp8_gemm_efficiency_by_cuda[fw.cuda] / dev.fp8_gemm_efficiency
    if fw.cuda not in dev.gemm_efficiency_by_cuda:
        return 1.0
    return dev.gemm_efficiency_by_cuda[fw.cuda] / dev.gemm_efficiency


_PARALLEL_NAMES = {
    "tp": "tensor parallelism",
    "cp": "context parallelism",
    "pp": "pipeline parallelism",
    "ep": "expert parallelism",
}


def _check_hybrid(w: Workload, layout: ParallelLayout, r: Resolved) -> None:
    """What a hybrid model's projection covers: Megatron-Core's MambaModel (the stack that trains Nemotron-H and
    Nemotron 3), TP splitting the Mamba groups (Megatron-Core asserts mamba_num_groups % TP == 0), CP splitting a TP
    rank's heads and, one way or the other, its groups, the Adam optimizers."""
    hy = w.hybrid
    assert hy is not None
    fw = framework(layout.framework)
    if layout.framework not in ("megatron-core", "nemo") and fw.release_of not in ("megatron-core", "nemo"):
        raise InfeasibleLayoutError(
            f"{layout.framework}: hybrid Mamba models are modelled as Megatron-Core's MambaModel trains them "
            "(framework megatron-core, nemo or their releases)",
            "framework",
        )
    if hy.mamba_groups % r.tp:
        raise InfeasibleLayoutError(
            f"tp {r.tp} does not divide the {hy.mamba_groups} Mamba groups (Megatron-Core's MambaMixer asserts it)",
            "divides",
        )
    # [27 s29 mambacp] Megatron-Core's Mamba CP (mamba_context_parallel.py at d98e8a64) asserts what it splits
    heads, groups = hy.mamba_heads // r.tp, hy.mamba_groups // r.tp
    if r.cp > 1 and heads % r.cp:
        raise InfeasibleLayoutError(
            f"cp {r.cp} does not divide the {heads} Mamba heads of a TP rank (Megatron-Core's Mamba context "
            "parallelism asserts it)",
            "divides",
        )
    if r.cp > 1 and (r.cp % groups if groups < r.cp else groups % r.cp):
        raise InfeasibleLayoutError(
            f"cp {r.cp} and the {groups} Mamba groups of a TP rank: one must divide the other (Megatron-Core's "
            "Mamba context parallelism asserts it)",
            "divides",
        )
    if layout.optimizer == "muon":
        raise InfeasibleLayoutError("optimizer muon is not modelled for hybrid Mamba models", "framework")


def _check_module_precision(w: Workload, layout: ParallelLayout, dev: Device) -> None:
    """What ``layout.module_precision`` covers: a hybrid model's attention blocks, latent projections and Mamba
    out_proj [27 s29 quantrecipe]; MXFP8 only where Transformer Engine has it (Blackwell on)."""
    over = layout.module_precision
    if not over:
        return
    if w.hybrid is None:
        raise InfeasibleLayoutError(
            "module_precision is modelled for hybrid models' blocks (attention, latent, mamba_out); set fp8_recipe "
            "or bf16_layers_start / bf16_layers_end for a transformer",
            "framework",
        )
    if "latent" in over and (w.moe is None or w.moe.latent_size is None):
        raise InfeasibleLayoutError(
            "module_precision latent: the workload's MoE has no latent projections", "framework"
        )
    if "mxfp8" in over.values() and generation(dev.name) in MXFP8_UNSUPPORTED:
        raise InfeasibleLayoutError(
            f"module_precision mxfp8 needs compute capability 10.0 (Blackwell) or higher, as Transformer Engine "
            f"checks; {dev.name} is {generation(dev.name)}",
            "framework",
        )


def _setup(s: Scenario) -> tuple[_Setup, list[dict[str, float]], dict[str, float]]:
    """What every part of the projection reads, then each stage's memory and the fullest stage's; in this order
    the reasons a scenario cannot run: the GPU's figures, the layout on the job, the precision, the memory, the
    pipeline schedule."""
    topology, layout, w = s.topology, s.layout, s.workload
    dev = device_for(topology.accelerator.name, s.accelerators)
    r = resolve(layout, w, s.gpus, topology.accelerators_per_node)
    if w.hybrid is not None:
        _check_hybrid(w, layout, r)
    _check_module_precision(w, layout, dev)
    comm = _comm_model(s, r)
    peak = dev.peak(w.precision)
    stage_mem, mem = _memory(dev, w, layout, r, s.check_memory)
    fw = framework(layout.framework)
    for dim, size in (("tp", r.tp), ("cp", r.cp), ("pp", r.pp), ("ep", r.ep)):
        if size > 1 and dim not in fw.parallel:
            has = ", ".join(_PARALLEL_NAMES[d] for d in fw.parallel) or "none"
            raise InfeasibleLayoutError(
                f"{layout.framework} has no {_PARALLEL_NAMES[dim]} ({dim} {size}); the model parallelism it has "
                f"beside data parallelism: {has}",
                "framework",
            )
    if layout.schedule is not None and r.pp > 1 and layout.schedule not in fw.schedules:
        raise InfeasibleLayoutError(
            f"{layout.framework} has no {layout.schedule} pipeline schedule (it has {', '.join(fw.schedules)})",
            "schedule",
        )
    if layout.moe_a2a_overlap and fw.overlap.ep != "combined_1f1b":
        raise InfeasibleLayoutError(f"{layout.framework} has no EP all-to-all overlap (moe_a2a_overlap)", "schedule")
    if layout.optimizer == "muon" and not fw.muon:
        raise InfeasibleLayoutError(f"{layout.framework} has no Muon optimizer (optimizer muon)", "framework")
    if layout.optimizer == "muon" and layout.zero >= 2:
        raise InfeasibleLayoutError(
            f"optimizer muon with zero {layout.zero}: Muon orthogonalizes whole matrices, under Megatron-Core's "
            "layer-wise distributed optimizer (zero 1) or plain data parallelism (zero 0)",
            "framework",
        )
    fp8 = w.precision == "fp8"
    c = _Setup(
        scenario=s,
        dev=dev,
        w=w,
        layout=layout,
        r=r,
        fw=fw,
        comm=comm,
        tokens=w.micro_batch * w.seq_len / r.cp,
        sp=layout.sp and r.tp > 1,
        fwd_passes=2.0 if layout.recompute == "full" else 1.0,
        nodes_per_domain=max(1, topology.scale_up.domain_size // topology.accelerators_per_node),
        peak=peak,
        gemm_peak=peak
        * (dev.fp8_gemm_efficiency / dev.gemm_efficiency if fp8 and dev.fp8_gemm_efficiency else 1.0)
        * _cuda_gemm_ratio(dev, fw, fp8),
    )
    return c, stage_mem, mem


def _layer_times(c: _Setup) -> tuple[list[tuple[float, ...]], list[dict[str, float]], _LayerComm]:
    """Per layer of each kind (dense, then MoE), one micro-batch: (compute, streaming, TP, CP exposed, CP hidden,
    EP, host, TP hidden), its seconds by kernel class; and the layers' TP and CP communication."""
    layer_kinds = _layer_kinds(c, c.scenario.accelerators, c.gemm_peak)
    lc = _layer_comm(c)
    if c.w.hybrid is not None:  # a hybrid's layer is one block: one TP pair a pass, not an attention and an FFN pair
        lc = replace(lc, tp_pass=lc.tp_pass / 2)
    kind_times: list[tuple[float, ...]] = []
    kind_seconds: list[dict[str, float]] = []
    # full recomputation of a layer count (_partial_recompute): each kind again, as the layers that are not
    # recomputed run it (one forward, nothing redone)
    variants = (c, replace(c, fwd_passes=1.0)) if _partial_recompute(c) else (c,)
    moe_kinds = [False] * (len(layer_kinds) - 1) + [c.w.moe is not None]  # the kinds: dense, then MoE
    for cv in variants:
        for (kernels, a2a_bytes), moe in zip(layer_kinds, moe_kinds, strict=True):
            kind_lc = lc if c.w.hybrid is None else _hybrid_kind_comm(c, lc, moe)
            e_key = (cv.fwd_passes, cv.w.precision, cv.gemm_peak)  # an E layer: whatever the stage's other blocks
            if moe and c.w.hybrid is not None and e_key in c.hybrid_e_times:
                times, by_kind = c.hybrid_e_times[e_key]
            else:
                times, by_kind = _layer_time(cv, kernels, a2a_bytes, kind_lc)
                if moe and c.w.hybrid is not None:
                    c.hybrid_e_times[e_key] = (times, by_kind)
            kind_times.append(times)
            kind_seconds.append(by_kind)
    return kind_times, kind_seconds, lc


def _bf16_layer_deltas(
    c: _Setup, kind_times: list[tuple[float, ...]], kind_seconds: list[dict[str, float]]
) -> tuple[list[tuple[float, ...]], list[dict[str, float]]]:
    """Per layer kind (dense, MoE; as :func:`_layer_times` orders them, first variant), what one layer changes when
    Megatron-Core keeps it out of the fp8 / NVFP4 autocast (``bf16_layers_start`` / ``_end``): its kernels, TP
    collectives and host work as under bf16 precision, at the 16-bit GEMM plateau [27 s25 bf16layers]."""
    c16 = _bf16_setup(c)
    times16, seconds16, _ = _layer_times(c16)
    kinds = len(times16) // (2 if _partial_recompute(c16) else 1)
    deltas = [tuple(a - b for a, b in zip(times16[k], kind_times[k])) for k in range(kinds)]
    classes = [
        {cls: seconds16[k].get(cls, 0.0) - kind_seconds[k].get(cls, 0.0) for cls in {*seconds16[k], *kind_seconds[k]}}
        for k in range(kinds)
    ]
    return deltas, classes


def _partial_recompute(c: _Setup) -> bool:
    """Full recomputation of a layer count per model chunk (``recompute_layers``) that leaves layers out: method
    block with fewer layers than some chunk holds (uniform recomputes every layer)."""
    layout = c.layout
    if layout.recompute != "full" or layout.recompute_layers is None or layout.recompute_method == "uniform":
        return False
    return any(
        dense_rc + moe_rc < n for (dense_rc, moe_rc, _, _), n in zip(_stage_rc(c), c.r.stage_layers, strict=True)
    )


def _stage_rc(c: _Setup) -> list[tuple[int, int, int, int]]:
    return stage_recompute(c.w, c.layout, c.r)


def _recomputed_layers(c: _Setup) -> tuple[int, int] | None:
    """(dense, MoE) layers of the model that full recomputation redoes under a layer count; None: all of them."""
    if c.layout.recompute != "full" or c.layout.recompute_layers is None:
        return None
    rc = _stage_rc(c)
    return sum(x[0] for x in rc), sum(x[1] for x in rc)


def _projection(
    c: _Setup,
    stages: list[dict[str, float]],
    stage_classes: list[dict[str, float]],
    stage_mem: list[dict[str, float]],
    mem: dict[str, float],
    pipeline_s: float,
    pace: int,
    schedule: str,
    tail: tuple[float, float, float, float, float, float],
) -> Projection:
    """The step: the pipeline, then the slowest stage's DP and optimizer tail; the breakdown is the pace-setting
    stage's; each stage's memory joins its times."""
    dev, w, layout, gpus, topology = c.dev, c.w, c.layout, c.scenario.gpus, c.scenario.topology
    dp_exposed, fsdp_exposed, optimizer_s, dp_hidden, fsdp_hidden, contention = tail
    step = pipeline_s + dp_exposed + fsdp_exposed + contention + optimizer_s
    m = c.r.micro_batches
    ps, pace_classes = _pace_parts(c, stages, stage_classes, pace)
    breakdown = {
        "compute": m * ps["compute"],
        "memory_bound": m * ps["memory_bound"],
        "tp_comm": m * ps["tp_comm"],
        "cp_comm": m * ps["cp_comm"],
        "ep_comm": m * ps["ep_comm"],
        "pp_comm": m * ps["pp_comm"],
        "host_overhead": m * ps["host"],
        "slowest_gpu": m * ps["slowest_gpu"],
        "bubble": pipeline_s - m * ps["per_micro_batch_s"],
        "dp_comm": dp_exposed + fsdp_exposed + contention,
        "optimizer": optimizer_s,
    }
    kernel_s = {cls: m * v for cls, v in pace_classes.items() if v > 0}
    if optimizer_s:
        kernel_s["optimizer"] = optimizer_s
    for st, sm in zip(stages, stage_mem, strict=True):
        st["memory_bytes"] = sm["total"]
        st["reserved_bytes"] = sm["reserved"]
        st["in_flight"] = sm["in_flight"]
    model_tflops = model_flops_per_step(w, "none") / step / gpus / 1e12
    return Projection(
        workload=w.name,
        topology=topology.name,
        gpus=gpus,
        layout=_layout_summary(c, schedule),
        step_time_s=step,
        tokens_per_s=w.global_batch * w.seq_len / step,
        model_tflops_per_gpu=model_tflops,
        hw_tflops_per_gpu=model_flops_per_step(w, layout.recompute, _recomputed_layers(c)) / step / gpus / 1e12,
        mfu=model_tflops * 1e12 / c.peak,
        memory_bytes_per_gpu=mem["reserved"],
        memory_capacity_bytes=dev.hbm_bytes,
        breakdown=breakdown,
        memory=mem,
        overlapped_s={
            "tp_comm": m * ps["tp_hidden"],
            "cp_comm": m * ps["cp_hidden"],
            "dp_comm": dp_hidden,
            "fsdp_gather": fsdp_hidden,
        },
        stages=stages,
        pace_stage=pace,
        kernels={cls: kernel_s[cls] for cls in KINDS if cls in kernel_s},
        framework=layout.framework,
        memory_fit="fits" if mem["reserved"] <= dev.hbm_bytes else "tight",
        band=_band(step, family_of(topology.accelerator.name, layout.framework, w.moe is not None, w.seq_len)),
    )


def _memory(
    dev: Device, w: Workload, layout: ParallelLayout, r: Resolved, check_memory: bool
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Each stage's memory and the fullest stage's; refused when it is over the GPU's by more than the model's
    error."""
    stage_mem = stage_memory(w, layout, r)
    worst = max(range(len(stage_mem)), key=lambda i: stage_mem[i]["reserved"])
    mem = {k: stage_mem[worst][k] for k in ("weights", "gradients", "optimizer", "activations", "total", "reserved")}
    if check_memory and mem["reserved"] > dev.hbm_bytes * (1 + MEMORY_TOLERANCE):
        where = f" on stage {worst + 1} of {r.pp}" if r.pp > 1 else ""
        raise InfeasibleLayoutError(
            f"needs {mem['reserved'] / 1e9:.0f} GB per GPU{where}, has {dev.hbm_bytes / 1e9:.1f} "
            f"({dev.hbm_bytes / 2**30:.1f} GiB), more than the memory model's {MEMORY_TOLERANCE:.0%} error over",
            "memory",
        )
    return stage_mem, mem


def _layer_shape(c: _Setup, accelerators: Sequence[str] | None) -> LayerShape:
    """What a layer's kernels depend on besides the workload: this GPU's share of one micro-batch and how the stack
    runs it."""
    w, layout, r, t = c.w, c.layout, c.r, c.r.tp
    eff_files = tuple(accelerators) if accelerators is not None else accelerator_files()
    return LayerShape(
        tokens=c.tokens,
        keys=float(w.seq_len),
        tp=t,
        ep=r.ep,
        sp=c.sp,
        tp_chunks=t if layout.tp_comm_overlap and t > 1 else 1,
        efficiency_files=eff_files,
        etp=r.etp,
        dispatch_share=_flex_received_share(c),
        gemm_peak16=c.dev.peak("bf16") * _cuda_gemm_ratio(c.dev, c.fw, False),
    )


def _a2a_bytes(c: _Setup) -> float:
    """One MoE layer's all-to-all bytes per pass on this GPU (the dispatch; the combine moves the same)."""
    w, layout, r, t = c.w, c.layout, c.r, c.r.tp
    assert w.moe is not None
    routed_tokens = c.tokens * w.moe.top_k * (w.moe.capacity_factor or 1.0) * r.expert_tp / t
    if layout.moe_dispatcher == "alltoall":
        # the all-to-all dispatcher sends this rank's own sequence shard (c.tokens / TP rows) over EP and
        # gathers the expert-TP group's copies after the transfer (_etp_gather_s) [27 s16 grokh100]
        routed_tokens /= r.expert_tp
    # tokens travel in 16 bits, a latent MoE's at its latent width [27 s28 latent]
    a2a_bytes = routed_tokens * w.moe.routed_width(w.hidden) * 2.0 * expert_load(layout)
    domains = -(-r.groups["ep"].nodes // c.nodes_per_domain)
    if layout.moe_dispatcher in ("deepep", "hybridep"):  # the flex dispatcher, either backend
        a2a_bytes *= deepep_share(
            w.moe.experts, w.moe.top_k, domains, r.ep, layout.moe_routing, w.moe.router_groups, w.moe.group_topk
        )
    if layout.moe_dispatcher == "hybridep":
        a2a_bytes *= hybridep_probs_factor(w.moe.experts, w.moe.routed_width(w.hidden), domains, r.ep)
    elif layout.moe_dispatcher == "distmoe" and domains > 1:  # peers' HBM is addressable over NVLink only
        raise InfeasibleLayoutError(
            f"moe_dispatcher distmoe needs the EP group ({r.ep} GPUs on {r.groups['ep'].nodes} nodes) within one "
            f"NVLink domain of {c.nodes_per_domain} nodes: Dist-MoE reads and writes its peers' symmetric memory",
            "moe_dispatcher",
        )
    return a2a_bytes


def _layer_kinds(c: _Setup, accelerators: Sequence[str] | None, gemm_peak: float) -> list[tuple[list[Kernel], float]]:
    """One layer of each kind (dense, then MoE), one micro-batch: its kernels and its all-to-all bytes per pass."""
    w, layout = c.w, c.layout
    peak16 = c.dev.peak("bf16")  # attention runs in 16 bits under fp8 training (Transformer Engine's default)
    shape = _layer_shape(c, accelerators)
    kinds: list[tuple[list[Kernel], float]] = []
    blocks = c.hybrid_blocks
    if w.layers - w.moe_layers:
        kinds.append((layer_kernels(c.dev, c.fw, w, layout, shape, gemm_peak, peak16, False, blocks=blocks), 0.0))
    if w.moe is not None:  # then w.moe_layers > 0 (the spec refuses an MoE block that starts past the last layer)
        moe_kernels = layer_kernels(c.dev, c.fw, w, layout, shape, gemm_peak, peak16, True, blocks=blocks)
        kinds.append((moe_kernels, _a2a_bytes(c)))
    return kinds


def _bf16_setup(c: _Setup) -> _Setup:
    """``c`` as a layer kept out of the fp8 / NVFP4 autocast runs: bf16 precision at the 16-bit GEMM plateau."""
    peak16 = c.dev.peak("bf16")
    w16 = c.w.model_copy(update={"precision": "bf16"})
    return replace(c, w=w16, peak=peak16, gemm_peak=peak16 * _cuda_gemm_ratio(c.dev, c.fw, False))


def _mtp_in_bf16(c: _Setup) -> bool:
    """The multi-token prediction modules run out of the fp8 autocast (``mtp_bf16`` under fp8 precision)."""
    return bool(c.w.mtp_layers) and c.layout.mtp_bf16 and c.w.precision == "fp8"


def _hybrid_mtp_layer(c: _Setup) -> tuple[tuple[float, ...], dict[str, float]]:
    """One micro-batch of a hybrid's multi-token prediction layer, as :func:`_layer_time` prices a layer, each block
    with one TP pair a pass: an attention block and an E block (an MLP block without experts), Megatron-Core's MTP
    pattern '*E' of Nemotron 3 (NVIDIA/Megatron-LM cd4afffa megatron/core/transformer/multi_token_prediction.py: a
    HybridStack of the pattern's layer types); its E block is the E layers' (``hybrid_blocks``)."""
    w = c.w
    shape = _layer_shape(c, c.scenario.accelerators)
    peak16 = c.dev.peak("bf16")
    attention = layer_kernels(c.dev, c.fw, w, c.layout, shape, c.gemm_peak, peak16, False, only="*")
    second = layer_kernels(
        c.dev, c.fw, w, c.layout, shape, c.gemm_peak, peak16, w.moe is not None, only="-", blocks=c.hybrid_blocks
    )
    lc = replace(_layer_comm(c), mamba_cp=0.0)  # no Mamba block: its attention block's CP exchange alone
    return _layer_time(c, attention + second, _a2a_bytes(c) if w.moe is not None else 0.0, lc)


def _flex_received_share(c: _Setup) -> float:
    """A flex dispatcher's (DeepEP, HybridEP) tokens received by one GPU over its routed copies: one copy per
    destination GPU (deepep_share within the EP group's GPUs), which its local permutation reads (kernels.mcore_permute)
    [27 s12 moegpu]; 1 for other dispatchers."""
    m, layout, ep = c.w.moe, c.layout, c.r.ep
    if m is None or layout.moe_dispatcher not in ("deepep", "hybridep") or ep <= 1:
        return 1.0
    return deepep_share(m.experts, m.top_k, 1, ep, layout.moe_routing, m.router_groups, m.group_topk)


def domain_dedup(
    experts: int, top_k: int, domains: int, groups: int | None = None, group_topk: int | None = None
) -> float:
    """The share of a token's routed copies that still cross the scale-out network when the dispatcher sends each
    token once per destination domain and forwards it over NVLink there (DeepEP's internode dispatch; the
    DeepSeek-V3 report, Sec. 3.2.2): with the experts spread evenly over ``domains``, the expected distinct remote
    domains over the expected remote copies (1 within one domain). A token's own domain is any of them alike, so
    each other domain is reached with the chance :func:`destination_reached` gives, group limit or not."""
    if domains <= 1:
        return 1.0
    distinct_remote = (domains - 1) * destination_reached(experts, top_k, domains, groups, group_topk)
    copies_remote = top_k * (domains - 1) / domains
    return min(1.0, distinct_remote / copies_remote)


# [27 s11 grouplim] Group-limited routing (DeepSeek-V3 report Sec. 2.1.2 'node-limited routing': a token's K_r = 8
# experts come from at most M = 4 of the nodes, picked by the sum of the K_r / M highest scores on each; Megatron-Core
# moe_utils.group_limited_topk at cd4afffa and core_v0.14.0: the experts form moe_router_num_groups groups of
# consecutive experts, group_scores = the sum of each group's top (topk // group_topk) scores, the group_topk best
# groups kept, then the top-k of their experts; TopKRouter.forward applies it to the random logits of
# moe_router_force_load_balancing, which only replaces the logits first). EP places experts consecutively too, E / EP
# per rank, so a destination (a domain, or a GPU within one) holds whole groups or a slice of one group.
# - Destinations of one or more whole groups: one is reached exactly when it holds a chosen group. The chosen groups
#   are group_topk of the groups, uniformly (the scores are exchangeable), and each chosen group takes at least one of
#   the token's experts: it was chosen for its top scores. A Monte Carlo of group_limited_topk on sigmoid(N(0, 1))
#   logits (256 experts, 8 groups, top-4 of 8; tests/test_project_grouplim.py) gives 3.96 groups reached of 4 and
#   1.97 / 3.12 / 3.96 destinations over 2 / 4 / 8 such destinations, this formula 1.97 / 3.14 / 4.00.
# - Destinations within a group: each chosen group is taken to give the token its quota, top_k / group_topk experts,
#   uniformly over its slices (the same Monte Carlo: 7.49 / 6.85 / 5.72 GPUs over 64 / 32 / 16 slices of 4 / 8 / 16
#   experts, this formula 7.61 / 7.10 / 6.06, uniform routing without the limit 7.68 / 7.28 / 6.53).
# Where neither divides the other, the limit is left out (routing as uniform).
def destination_reached(
    experts: int, top_k: int, dests: int, groups: int | None = None, group_topk: int | None = None
) -> float:
    """The chance that one token's ``top_k`` copies reach a given one of ``dests`` destinations, the ``experts``
    spread evenly and consecutively over them: the experts drawn uniformly, or under a group limit of ``group_topk``
    of ``groups`` groups of consecutive experts (see the comment above). Times ``dests``: the expected distinct
    destinations."""
    per = experts // dests
    if groups and group_topk and group_topk < groups:
        if dests <= groups and groups % dests == 0:  # each destination holds groups / dests whole groups
            held = groups // dests
            return 1.0 - math.comb(groups - held, group_topk) / math.comb(groups, group_topk)
        if dests % groups == 0:  # each group spans dests / groups destinations
            size, quota = experts // groups, max(1, top_k // group_topk)
            return group_topk / groups * (1.0 - math.comb(size - per, quota) / math.comb(size, quota))
    return 1.0 - math.comb(experts - per, top_k) / math.comb(experts, top_k)  # no chosen expert in it otherwise


@lru_cache(maxsize=256)
def consecutive_spread(experts: int, top_k: int, groups: int) -> float:
    """Groups (GPUs or domains, each holding experts / groups consecutive experts) a token's k consecutive experts
    fall in, averaged over the starts t*k mod E a consecutive gate gives (AutoModel's FakeBalancedGate)."""
    per = max(1, experts // groups)
    starts = range(0, experts * top_k // math.gcd(experts, top_k), top_k)
    return sum(len({((s + i) % experts) // per for i in range(top_k)}) for s in starts) / len(starts)


def deepep_share(
    experts: int,
    top_k: int,
    domains: int,
    ranks: int,
    routing: str,
    groups: int | None = None,
    group_topk: int | None = None,
) -> float:
    """The share of a token's routed copies a per-destination dispatcher (DeepEP) sends: across scale-up domains, one
    copy per destination domain (``domain_dedup``); inside one domain, one copy per destination GPU (DeepEP's
    get_dispatch_layout marks each token once per rank, is_token_in_rank). ``routing`` uniform draws the k experts
    evenly, within ``group_topk`` of ``groups`` expert groups where the workload limits them
    (:func:`destination_reached`); consecutive gives a token k neighbouring experts."""
    if routing == "consecutive":
        spread = domains if domains > 1 else ranks
        return min(1.0, consecutive_spread(experts, top_k, spread) / top_k) if spread > 1 else 1.0
    if domains > 1:
        return domain_dedup(experts, top_k, domains, groups, group_topk)
    return domain_dedup(experts, top_k, ranks, groups, group_topk) if ranks > 1 else 1.0


# HybridEP's work beyond the token copies (DeepEP hybrid-ep branch 94a9f8f6; Megatron-LM 44151194 and cd4afffa
# megatron/core/transformer/moe/fused_a2a.py HybridEPDispatch / HybridEPCombine, token_dispatcher.py _HybridEPManager):
# - the routing probabilities travel with the tokens: the forward dispatch sends each copy's probabilities in fp32, one
#   per expert the destination holds (csrc/hybrid_ep/executor/executor.cu dispatch_preprocess: prob_per_token =
#   experts per rank x ranks per node for a destination node), and the dispatch's backward (combine_with_unpermute
#   with grad_probs) returns their gradients; the forward combine and its backward dispatch carry none: 2 of the 4
#   transfers of a layer and micro-batch (hybridep_probs_factor);
# - every forward dispatch has no handle (HybridEPDispatch.forward calls dispatch_with_permute without one), so it
#   first gathers every EP rank's bool routing map with NCCL (hybrid_ep.cu metadata_preprocessing ->
#   Executor::allgather_routing_map: all_gather_into_tensor across nodes, and within one node too since 94a9f8f6
#   turned the custom all-gather off by default), then runs the metadata scan kernel over the gathered map
#   (run_preprocess_kernel, num_sms_preprocessing_api 108 by default in fused_a2a.py, which holds the GPU while it
#   runs: it sits on the dispatch's path) writing sparse_to_dense_map (int32, tokens x nodes x ranks per node),
#   local_expert_routing_map (bool) and dense_to_expert_map (int32, tokens x EP x local experts), then the pad kernel;
#   across NVLink domains each dispatch call also copies the tokens (16 bits) and, in the forward, the fp32 probabilities into
#   the RDMA send buffer (dispatch_preprocess: cudaMemcpyAsync device to device, a read and a write) -- the forward
#   dispatch and the combine's backward dispatch (hybridep_dispatch_prep_s).
def hybridep_probs_factor(experts: int, hidden: int, domains: int, ranks: int) -> float:
    """The four transfers' mean bytes over the tokens' bytes alone: two of them carry fp32 probabilities (or their
    gradients), one per expert of the destination (domain where the EP group spans domains, else GPU)."""
    held = experts / (domains if domains > 1 else max(1, ranks))
    return 1.0 + 0.5 * (4.0 * held) / (2.0 * hidden)


def hybridep_dispatch_prep_s(c: _Setup) -> float:
    """Seconds HybridEP spends per layer and micro-batch before its dispatch kernels, forward and backward together:
    the routing-map all-gather and metadata scan of the forward dispatch and, across nodes, the send-buffer copies of
    both dispatch calls (see the comment above)."""
    w, r = c.w, c.r
    if w.moe is None or r.ep <= 1:
        return 0.0
    group = r.groups["ep"]
    tokens = c.tokens * r.expert_tp / r.tp  # this rank's tokens into the dispatcher
    experts = w.moe.experts
    gathered = r.ep * tokens * experts  # one bool per token and expert, every EP rank's
    local = experts / r.ep
    scan_bytes = gathered + r.ep * tokens * (4.0 + local * (1.0 + 4.0))  # read the map; write the three maps
    fwd = c.comm("all_gather", gathered, group) + stream_time_s(c.dev, scan_bytes)
    bwd = 0.0
    # HybridEP's nodes are NVLink domains (fused_a2a.py _hybrid_ep_num_nodes; NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN):
    # only an EP group over several domains goes through the RDMA send buffer; a copy reads and writes its bytes
    if -(-group.nodes // c.nodes_per_domain) > 1:
        token_bytes = tokens * w.moe.routed_width(w.hidden) * 2.0
        fwd += stream_time_s(c.dev, 2 * (token_bytes + tokens * experts * 4.0))
        bwd = stream_time_s(c.dev, 2 * token_bytes)
    return fwd * c.fwd_passes + bwd


def _layer_comm(c: _Setup) -> _LayerComm:
    """TP's collectives of one layer pass and CP's K/V exchange (MLA: after the up-projection, every head's)."""
    w, r, t, comm = c.w, c.r, c.r.tp, c.comm
    tp_bytes = c.tokens * w.hidden * 2
    tp_rs = tp_ag = 0.0
    if t > 1:
        if c.sp:
            tp_rs = comm("reduce_scatter", tp_bytes, r.groups["tp"])
            # torchao's float8 TP casts before gathering (Framework.tp_fp8_all_gather): fp8 over the link
            ag_bytes = tp_bytes
            if tp_fp8_all_gather(c.fw, w, c.layout):  # 1 B an element, NVFP4's 0.5625 [27 s25 nvfp4]
                nvfp4 = (c.layout.fp8_recipe or c.fw.fp8_recipe) == "nvfp4"
                ag_bytes = tp_bytes * (NVFP4_BYTES if nvfp4 else 1.0) / 2
            tp_ag = comm("all_gather", ag_bytes, r.groups["tp"])
            tp_pass = 2 * (tp_ag + tp_rs)
        else:
            tp_pass = 2 * comm("all_reduce", tp_bytes, r.groups["tp"])
    else:
        tp_pass = 0.0
    # K/V as the attention gets them: repeated to every query head where the stack expands GQA first
    g_t = w.heads / t if c.fw.cp_kv_expanded else max(w.kv_heads_n / t, 1.0)
    kv_width = 2 * g_t * w.head_size if w.mla is None else w.heads / t * (w.qk_head_dim + w.v_head_dim)
    cp_kv_bytes = w.micro_batch * w.seq_len * kv_width * 2
    cp_fwd = comm("all_gather", cp_kv_bytes, r.groups["cp"]) if r.cp > 1 else 0.0
    cp_bwd = cp_fwd + (comm("reduce_scatter", cp_kv_bytes, r.groups["cp"]) if r.cp > 1 else 0.0)
    hop = 0.0
    if r.cp > 1 and c.fw.overlap.cp == "allgather":
        # the backward gathers K/V again and passes this GPU's K/V gradients one ring step at a time (torch's
        # _AllToAllRotater: a send to the next rank, over the network where the CP group spans nodes)
        cp_bwd = cp_fwd
        hop_group = Group(2, 2, 1) if r.groups["cp"].nodes > 1 else Group(2, 1, 2)
        hop = comm("sendrecv", cp_kv_bytes / r.cp * c.fw.cp_grad_bytes / 2, hop_group)
    mamba = 0.0
    if w.hybrid is not None and r.cp > 1:  # [27 s29 mambacp] one Mamba block's all-to-alls, each on its own
        mamba = sum(comm("all_to_all", n, r.groups["cp"]) for n in mamba_cp_a2a_bytes(w.hybrid, t, r.cp, c.tokens))
    return _LayerComm(
        tp_bytes=tp_bytes,
        tp_pass=tp_pass,
        tp_rs=tp_rs,
        tp_ag=tp_ag,
        cp_fwd=cp_fwd,
        cp_bwd=cp_bwd,
        cp_grad_hop=hop,
        mamba_cp=mamba,
    )


def _hybrid_kind_comm(c: _Setup, lc: _LayerComm, moe: bool) -> _LayerComm:
    """A hybrid's layer of one kind, its CP communication: the K/V exchange only in its attention blocks, the
    all-to-alls only in its Mamba blocks, each at its share of the kind's blocks (an E layer: neither)
    [27 s29 mambacp]."""
    hy = c.w.hybrid
    assert hy is not None
    mix = dict(hy.dense_mix())
    total = sum(mix.values())
    attn = 0.0 if moe or not total else mix["*"] / total
    mamba = 0.0 if moe or not total else mix["M"] / total
    tp_ag, tp_pass = lc.tp_ag, lc.tp_pass
    if attn and lc.tp_ag and (c.layout.module_precision or {}).get("attention") == "bf16":
        if tp_fp8_all_gather(c.fw, c.w, c.layout):
            # [27 s30 attnag] an attention block kept in BF16 gathers its 16-bit input: Transformer Engine quantizes
            # before the sequence-parallel all-gather only inside the recipe the module runs (te_quant.cfg's
            # linear_qkv runs none), so its gather moves 2 B an element where the layer recipe's move less
            ag16 = c.comm("all_gather", lc.tp_bytes, c.r.groups["tp"])
            tp_ag = lc.tp_ag + attn * (ag16 - lc.tp_ag)
            tp_pass = lc.tp_pass + attn * (ag16 - lc.tp_ag)  # one TP pair a pass in a hybrid (tp_pass halved)
    return replace(
        lc,
        tp_ag=tp_ag,
        tp_pass=tp_pass,
        cp_fwd=lc.cp_fwd * attn,
        cp_bwd=lc.cp_bwd * attn,
        cp_grad_hop=lc.cp_grad_hop * attn,
        mamba_cp=lc.mamba_cp * mamba,
    )


def _layer_time(
    c: _Setup, kernels: list[Kernel], a2a_bytes: float, lc: _LayerComm
) -> tuple[tuple[float, ...], dict[str, float]]:
    """One layer, one micro-batch: (compute, streaming, TP, CP exposed, CP hidden, EP, host, TP hidden) and its
    seconds by kernel class."""
    dev, w, layout, r, fw = c.dev, c.w, c.layout, c.r, c.fw
    fwd_passes = c.fwd_passes
    redo = recomputed_modules(layout)  # selective recomputation's modules
    # the host's time per op: the stack's figure (x86 hosts), scaled by this GPU's host CPU (Grace is slower per op)
    host_op_s = fw.host_s_per_kernel * dev.host_op_factor
    module_s = fw.module_host_s * dev.host_op_factor  # a linear module's own host time beyond its launches
    # what no CUDA graph replays is launched by the host (kernels.graph_share: the layout's graphs and their scope)
    ungraphed = [1.0 - g for g in graph_shares(kernels, layout)]
    by_kind: dict[str, float] = {}
    t_gemm_fwd = t_gemm_bwd = 0.0
    # the host's time to issue the layer's forward: graphable kernels (before an MoE dispatcher's sync) and eager ones,
    # and its backward (a captured part's backward is captured too, Transformer Engine's make_graphed_callables):
    # BACKWARD_KERNEL_RATIO x the forward's launches where a kernel does not count its own; a linear module's own
    # backward cost at the stack's measured ratio (Framework.module_bwd_ratio) [27 s11 hostbwd]
    pre_host = post_host = bwd_host = 0.0
    for k, u in zip(kernels, ungraphed):  # (one pass, each sum in the kernels' order)
        passes = fwd_passes + recompute_share(k.name, redo, w)
        by_kind[k.kind] = by_kind.get(k.kind, 0.0) + k.fwd_s * passes + k.bwd_s
        if k.kind in ("gemm", "grouped_gemm"):
            t_gemm_fwd += k.fwd_s
            t_gemm_bwd += k.bwd_s
        issue = (k.launches * host_op_s + k.modules * module_s) * u
        if k.eager:
            post_host += issue
        else:
            pre_host += issue
        bwd_launches = BACKWARD_KERNEL_RATIO * k.launches if k.bwd_launches is None else k.bwd_launches
        bwd_host += (bwd_launches * host_op_s + fw.module_bwd_ratio * k.modules * module_s) * u
    compute = sum(v for kind, v in by_kind.items() if kind in COMPUTE_KINDS)
    stream = sum(v for kind, v in by_kind.items() if kind not in COMPUTE_KINDS)
    host = (pre_host + post_host) * fwd_passes + bwd_host
    cp_exp, cp_hid = _cp_time(c, kernels, lc)
    ep_t = 0.0
    if a2a_bytes and r.ep > 1 and layout.moe_dispatcher == "distmoe":
        ep_t = _distmoe_exposed_s(kernels, c.comm(_ep_op(layout), a2a_bytes, r.groups["ep"]), fwd_passes)
    elif a2a_bytes and r.ep > 1:
        prep = hybridep_dispatch_prep_s(c) if layout.moe_dispatcher == "hybridep" else 0.0
        prep += _etp_gather_s(c, a2a_bytes) * (fwd_passes + 1.0)
        ep_t = c.comm(_ep_op(layout), a2a_bytes, r.groups["ep"]) * 2 * (fwd_passes + 1.0) + prep
        if layout.moe_a2a_overlap and layout.schedule != "dualpipe":
            mem_share = stream / (compute + stream) if compute + stream else 0.0
            ep_t = _ep_overlap_s(c, kernels, a2a_bytes, redo, mem_share, prep)
        elif layout.schedule == "dualpipe":
            # DualPipe pairs one micro-batch's forward with another's backward and runs each chunk's all-to-all
            # beside the other chunk's compute (DeepSeek-V3 report, Sec. 3.2.1): only what exceeds it waits, and
            # the hidden part holds its SMs (DUALPIPE_COMM_SMS) and its share of HBM from the layer beside it
            ep_hid = min(ep_t, compute + stream)
            hbm = _hbm_rate(c.comm, _ep_op(layout), a2a_bytes, r.groups["ep"])
            share = stream / (compute + stream) if compute + stream > 0 else 0.0
            ep_t = ep_t - ep_hid + interference_s(dev, ep_hid, DUALPIPE_COMM_SMS, hbm, share)
    tp_t, tp_hid, tp_whole = _tp_time(c, kernels, lc, t_gemm_fwd * fwd_passes + t_gemm_bwd)
    tp_whole += _fp8_amax_reduce_s(c, kernels) + _fp8_autocast_amax_s(c)
    gpu = compute + stream + tp_t + cp_exp + ep_t
    tp_t += tp_whole
    gpu += tp_whole
    # [27 s14 bloomtp] CUDA_LAUNCH_BLOCKING=1: each launch returns once its kernel has run, so the host cannot run
    # ahead and its time per kernel adds to the GPU's (CUDA C Programming Guide, 'Asynchronous Concurrent Execution':
    # the variable disables asynchronous kernel launches)
    host_exposed = host if layout.launch_blocking else max(0.0, host - gpu)
    # Dist-MoE, and HybridEP with a static rank budget (layout.moe_expert_capacity), read no count on the host
    if a2a_bytes and fw.moe_dispatch_sync and layout.moe_dispatcher != "distmoe" and _counts_on_host(layout):
        # the dispatcher waits for the token counts on the host every forward: the host cannot run ahead of the
        # GPU past that point, and the GPU waits for each launch after it until the host is ahead again
        # (_sync_cycle_s); the backward reuses the counts
        ep_fwd = ep_t / (2 * (fwd_passes + 1.0)) * 2
        pre_gpu = sum(k.fwd_s for k in kernels if not k.eager) + lc.tp_pass / 2
        post_gpu = sum(k.fwd_s for k in kernels if k.eager) + ep_fwd
        fwd_exposed = _sync_cycle_s(c, kernels, ep_fwd, lc.tp_pass / 2, ungraphed) - pre_gpu - post_gpu
        bwd_gpu = gpu - fwd_passes * (pre_gpu + post_gpu)
        host_exposed = fwd_passes * fwd_exposed + max(0.0, bwd_host - bwd_gpu)
        if layout.moe_a2a_overlap and layout.schedule != "dualpipe":
            host_exposed = _ep_overlap_host_s(c, kernels, redo, host_exposed, gpu)
    return (compute, stream, tp_t, cp_exp, cp_hid, ep_t, host_exposed, tp_hid), by_kind


# Megatron-Core's EP all-to-all overlap (overlap_moe_expert_parallel_comm) splits an MoE layer into schedule nodes
# (Megatron-LM cd4afffa megatron/core/models/gpt/fine_grained_callables.py build_transformer_layer_callables; the same
# at 44151194): pre_dispatch_computation (attention, the pre-MLP norm, the shared experts, the router and the
# dispatcher's preprocessing) and mlp (the routed experts between dispatch and combine) on the compute stream;
# moe_dispatch and moe_combine on the communication stream. The kernels of the mlp node, by kernels.py name (their
# launch-gap twins too). 0d8e0714 (25.11) ran the shared experts in the mlp node; no 25.11 row with the overlap has
# shared experts.
EP_OVERLAP_MLP = frozenset(
    {
        "experts_in",
        "experts_activation",
        "experts_out",
        "sort_by_expert",
        "fp8_padding",
        "experts_clamp",
        "experts_bias",
    }
)
# SMs the dispatch and combine kernels hold while they run beside the other micro-batch's compute: NCCL's all-to-all
# one CTA per channel (NCCL_OVERLAP_CTAS); DeepEP Megatron-Core's default moe_deepep_num_sms 20 (transformer_config.py
# at 0d8e0714 and 44151194); HybridEP 32 (Megatron-Bridge's recipes set moe_hybridep_num_sms 32: v0.2.1 and 7ded17da
# recipes/qwen/h100/qwen3_moe.py; Megatron-Core's own default was 16 at 0d8e0714).
EP_OVERLAP_SMS = {"alltoall": float(NCCL_OVERLAP_CTAS), "deepep": 20.0, "hybridep": 32.0}


def combined_1f1b_layer_s(
    f: tuple[float, float], b: tuple[float, float], dw: tuple[float, float], a2a_s: float, layers: int = 4
) -> float:
    """Seconds per layer of a forward layer run beside a backward layer as TransformerLayerSchedulePlan.run issues
    them (Megatron-LM cd4afffa, 44151194 and 0d8e0714 model_chunk_schedule_plan.py), in the steady state of ``layers``
    such pairs: ``f`` the forward's (pre_dispatch, mlp) seconds, ``b`` the backward's, ``dw`` the weight gradients
    delay_wgrad_compute moves out of them (0 without it: then the backward nodes hold them), ``a2a_s`` one dispatch or
    combine. Each stream runs its work in issue order; each micro-batch's nodes wait for its previous node (one CUDA
    event per micro-batch, ScheduleNode.stream_acquire_context):
    comm: combine_bwd | dispatch_fwd, dispatch_bwd | combine_fwd;
    comp: pre_dispatch_fwd | mlp_bwd, mlp_dw, mlp_fwd | pre_dispatch_bwd, pre_dispatch_dw."""
    comp = comm = f_ready = b_ready = 0.0
    ends = []
    for _ in range(layers):
        combine_b = comm = max(comm, b_ready) + a2a_s
        pre_f = comp = max(comp, f_ready) + f[0]
        mlp_b = comp = max(comp, combine_b) + b[1]
        dispatch_f = comm = max(comm, pre_f) + a2a_s
        comp += dw[1]
        dispatch_b = comm = max(comm, mlp_b) + a2a_s
        mlp_f = comp = max(comp, dispatch_f) + f[1]
        f_ready = comm = max(comm, mlp_f) + a2a_s
        b_ready = comp = max(comp, dispatch_b) + b[0]
        comp += dw[0]
        ends.append(max(comp, comm))
    return (ends[-1] - ends[0]) / (layers - 1)


def _etp_gather_s(c: _Setup, a2a_bytes: float) -> float:
    """The expert-TP collectives of one MoE layer's forward under the all-to-all dispatcher [27 s16 grokh100]:
    Megatron-Core's MoEAlltoAllTokenDispatcher sends each rank's own sequence shard over the EP group, then
    token_permutation gathers the expert-TP group's received copies (gather_from_sequence_parallel_region) for the
    TP-split experts and token_unpermutation reduce-scatters their outputs back (reduce_scatter_to_sequence_parallel_
    region; core_r0.9.0 and core_r0.10.0 megatron/core/transformer/moe/token_dispatcher.py); the backward runs the
    converse pair. ``a2a_bytes``: one rank's copies; the gathered tensor is expert TP times that. 0 without expert
    TP or with another dispatcher."""
    r = c.r
    etp = r.expert_tp
    if etp <= 1 or c.layout.moe_dispatcher != "alltoall" or not a2a_bytes:
        return 0.0
    group = r.groups["etp"]
    gathered = a2a_bytes * etp
    return c.comm("all_gather", gathered, group) + c.comm("reduce_scatter", gathered, group)


def _ep_op(layout: ParallelLayout) -> str:
    """The collective an MoE dispatch runs [27 s11 a2anvl]: NCCL's all-to-all for the alltoall dispatcher, the GPUs'
    own all-to-all kernels (:data:`commlens.model.backends.DEVICE_ALL_TO_ALL`) for Dist-MoE, DeepEP's and HybridEP's
    their own ops (at their measured rates inside one NVLink domain) [27 s11 deepepnv]."""
    ops = {"alltoall": "all_to_all", "deepep": DEEPEP_ALL_TO_ALL, "hybridep": HYBRIDEP_ALL_TO_ALL}
    return ops.get(layout.moe_dispatcher, DEVICE_ALL_TO_ALL)


def ep_overlap_paired_share(r: Resolved) -> float:
    """The share of a stage's micro-batch passes whose forward runs beside another's backward: without PP all but
    the first forward and the last backward (combined_1f1b.py combined_1f1b_schedule_for_no_pipelining); interleaved,
    all but the warm-up forwards and the cool-down backwards, one more warm-up forward than the plain schedule
    (schedules.py get_pp_rank_microbatches: 2 (PP - rank - 1) + (VPP - 1) x PP + 1, the group size PP by default),
    averaged over the ranks."""
    passes = r.micro_batches * r.vpp
    warmup = 1.0 if r.pp == 1 else (r.pp - 1) + (r.vpp - 1) * r.pp + 1.0
    return max(0.0, passes - warmup) / passes if passes else 0.0


def _ep_overlap_s(
    c: _Setup, kernels: list[Kernel], a2a_bytes: float, redo: frozenset[str], mem_share: float, prep_s: float = 0.0
) -> float:
    """EP seconds one MoE layer leaves on a micro-batch under Megatron-Core's EP overlap, over a step's micro-batches:
    a paired pass waits for what its streams do not hide (:func:`combined_1f1b_layer_s`) and pays the SMs and HBM
    the hidden transfers take from the compute beside them (``interference_s``); an unpaired pass runs its four
    all-to-alls exposed. A recomputed forward's all-to-alls (full recomputation, which the overlap refuses) would
    stay exposed. ``prep_s``: the dispatcher's own work on the communication stream beside the transfers
    (:func:`hybridep_dispatch_prep_s`), spread over the four."""
    w, r, layout, fwd_passes = c.w, c.r, c.layout, c.fwd_passes
    a2a = c.comm(_ep_op(layout), a2a_bytes, r.groups["ep"])
    plain = a2a * 2 * (fwd_passes + 1.0) + prep_s
    a2a += prep_s / 4.0
    delay = layout.delay_wgrad_compute
    f, b, dw = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
    for k in kernels:
        node = 1 if k.name.removesuffix(GAP_SUFFIX) in EP_OVERLAP_MLP else 0
        f[node] += k.fwd_s
        # a GEMM's backward: data and weight gradient of equal FLOPs; selective recomputation runs in the backward
        wgrad = k.bwd_s / 2 if delay and k.kind in ("gemm", "grouped_gemm") else 0.0
        b[node] += k.bwd_s - wgrad + k.fwd_s * (fwd_passes - 1.0 + recompute_share(k.name, redo, w))
        dw[node] += wgrad
    busy = sum(f) + sum(b) + sum(dw)
    period = combined_1f1b_layer_s((f[0], f[1]), (b[0], b[1]), (dw[0], dw[1]), a2a)
    waited = max(0.0, period - busy)
    hidden = max(0.0, 4 * a2a - waited)
    hbm = _hbm_rate(c.comm, _ep_op(layout), a2a_bytes, r.groups["ep"])
    paired = waited + interference_s(c.dev, hidden, EP_OVERLAP_SMS[layout.moe_dispatcher], hbm, mem_share)
    paired += a2a * 2 * (fwd_passes - 1.0)
    share = ep_overlap_paired_share(r)
    return share * paired + (1.0 - share) * plain


# CUDA runtime calls a schedule node adds around its work, each priced as a launch (Framework.host_s_per_kernel):
# ScheduleNode._forward and _backward run inside stream_acquire_context, which makes the node's stream wait for the
# micro-batch's event and records it again after the node (Megatron-LM 0d8e0714 megatron/core/pipeline_parallel/
# utils.py); a paired layer runs 10 node passes (5 nodes, forward and backward: model_chunk_schedule_plan.py).
EP_OVERLAP_NODE_CALLS = 2.0


def _ep_overlap_host_s(c: _Setup, kernels: list[Kernel], redo: frozenset[str], plain_s: float, gpu_s: float) -> float:
    """The host's exposed seconds of one MoE layer and micro-batch under the EP overlap with a dispatcher that reads
    the token counts on the host (``plain_s``: without the overlap, ``gpu_s``: the layer's GPU seconds, forward and
    backward). [27 s10 a2acpu]

    TransformerLayerSchedulePlan.run (Megatron-LM 0d8e0714 model_chunk_schedule_plan.py) issues a paired layer as
    combine_bwd, attn_fwd, post_attn_fwd (router, the counts and their copy, permutation 1), mlp_bwd, dispatch_fwd,
    mlp_bwd_dw, dispatch_bwd, mlp_fwd, combine_fwd, post_attn_bwd, attn_bwd, attn_dw. The all-to-all dispatcher's
    host wait (token_dispatcher.py ``d2h_event.synchronize()`` at ``before_ep_alltoall``, in dispatch_fwd) comes
    after the host has issued the backward micro-batch's mlp_bwd; the copy it waits for follows the forward's router
    on the compute stream, so at each wait the GPU holds only permutation 1 and mlp_bwd, and the backward layer's
    launches, which the plain schedule issues ahead of the GPU with no wait, now fall between two waits, beside the
    forward's. The cycle from one wait to the next is :func:`queue_finish_s` over those launches in that order (the
    all-to-alls on the communication stream: launches only, their seconds are the GPU's period), plus the schedule
    nodes' event calls (EP_OVERLAP_NODE_CALLS). Unpaired passes (:func:`ep_overlap_paired_share`) keep ``plain_s``."""
    fw, dev, layout, w = c.fw, c.dev, c.layout, c.w
    host_op_s = fw.host_s_per_kernel * dev.host_op_factor
    module_s = fw.module_host_s * dev.host_op_factor
    delay = layout.delay_wgrad_compute
    # per node (0 pre-dispatch: attention, norm, router, counts; 1 mlp: the routed experts): forward, backward less
    # the weight gradients, and the weight gradients delay_wgrad_compute issues on their own, as (host, launches, GPU)
    fwd = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    bwd = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    dw = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    perm1 = (0.0, 0.0, 0.0)
    for k, g in zip(kernels, graph_shares(kernels, layout)):
        u = 1.0 - g
        node = 1 if k.name.removesuffix(GAP_SUFFIX) in EP_OVERLAP_MLP else 0
        f_host = (k.launches * host_op_s + k.modules * module_s) * u
        b_launches = BACKWARD_KERNEL_RATIO * k.launches if k.bwd_launches is None else k.bwd_launches
        b_host = (b_launches * host_op_s + fw.module_bwd_ratio * k.modules * module_s) * u
        b_gpu = k.bwd_s + k.fwd_s * recompute_share(k.name, redo, w)
        wgrad = 0.5 if delay and k.kind in ("gemm", "grouped_gemm") else 0.0
        if k.name == "permute":
            # the counts and permutation 1 before the wait (post_attn), their inverse in the combine (after it)
            perm1 = (f_host / 2, k.launches / 2, k.fwd_s / 2)
            f_host, f_launches, f_gpu = f_host / 2, k.launches / 2, k.fwd_s / 2
            node = 1
        else:
            f_launches, f_gpu = k.launches, k.fwd_s
        for acc, add in (
            (fwd[node], (f_host, f_launches, f_gpu)),
            (bwd[node], (b_host * (1 - wgrad), b_launches * (1 - wgrad), b_gpu - k.bwd_s * wgrad)),
            (dw[node], (b_host * wgrad, b_launches * wgrad, k.bwd_s * wgrad)),
        ):
            for i in range(3):
                acc[i] += add[i]
    node_call = (EP_OVERLAP_NODE_CALLS * host_op_s, EP_OVERLAP_NODE_CALLS, 0.0)
    a2a = (node_call[0], node_call[1] + 1.0, 0.0)  # a dispatch or combine node: its all-to-all on the other stream
    after: list[tuple[float, float, float]] = [a2a, (dw[1][0], dw[1][1], dw[1][2]), a2a]
    after += [(fwd[1][0], fwd[1][1], fwd[1][2]), a2a, (bwd[0][0], bwd[0][1], bwd[0][2])]
    after += [(dw[0][0], dw[0][1], dw[0][2]), a2a, (fwd[0][0], fwd[0][1], fwd[0][2])]
    after += [node_call] * 4  # the compute nodes' event calls: mlp_fwd, post_attn_bwd + attn_bwd (2), attn_fwd
    # issued after the counts' copy, before the wait: permutation 1, post_attn_fwd's close and the backward's mlp_bwd
    before = [(perm1[0] + node_call[0], perm1[1], perm1[2]), (bwd[1][0] + node_call[0], bwd[1][1], bwd[1][2])]
    before_host = sum(op[0] for op in before)
    gpu, host = queue_finish_s(after, gpu_start_s=max(0.0, sum(op[2] for op in before) - MOE_SYNC_S))
    cycle = max(gpu, host + before_host) + MOE_SYNC_S
    paired = max(0.0, cycle - gpu_s)
    share = ep_overlap_paired_share(c.r)
    return share * paired + (1.0 - share) * plain_s


def _distmoe_exposed_s(kernels: list[Kernel], a2a_s: float, fwd_passes: float) -> float:
    """Dist-MoE's transfers beyond the expert GEMMs that carry them (kernels.DISTMOE_LAUNCHES): forward, the
    dispatch inside W13 and the combine inside W2; backward, the output gradient's dispatch inside W2's data gradient
    and the combine inside W13's (each data gradient half its GEMMs' backward); each fused kernel takes the longer of
    its GEMM and its ``a2a_s`` transfer."""
    up = next(k for k in kernels if k.name == "experts_in")
    down = next(k for k in kernels if k.name == "experts_out")
    fwd = max(0.0, a2a_s - up.fwd_s) + max(0.0, a2a_s - down.fwd_s)
    bwd = max(0.0, a2a_s - down.bwd_s / 2) + max(0.0, a2a_s - up.bwd_s / 2)
    return fwd * fwd_passes + bwd


def _cp_time(c: _Setup, kernels: list[Kernel], lc: _LayerComm) -> tuple[float, float]:
    """One layer's CP communication, one micro-batch: (exposed, hidden), the exposed part with the hidden part's
    interference. A ring (Transformer Engine) hides each step's exchange behind that step's attention; an
    all-gather (torch's _AllGatherRotater) hides only behind the first step's, 1/CP of the pass, and its backward
    passes the K/V gradients a step at a time, each beside the next step's attention and the last one waited for
    after the loop (torch/distributed/tensor/experimental/_attention.py, _templated_ring_attention_backward);
    ``layout.cp_comm_overlap`` false: all of it exposed (Llama 3's all-gather)."""
    r, fw, layout, fwd_passes = c.r, c.fw, c.layout, c.fwd_passes
    if r.cp <= 1:
        return 0.0, 0.0
    t_attn = sum(k.fwd_s for k in kernels if k.kind == "attention")
    t_attn_bwd = sum(k.bwd_s for k in kernels if k.kind == "attention")
    cp_fwd, cp_bwd, hop = lc.cp_fwd, lc.cp_bwd, lc.cp_grad_hop
    total = cp_fwd * fwd_passes + cp_bwd + r.cp * hop
    # a Mamba block's all-to-alls: the convolution waits for the forward's, and the backward's inverses wait in turn
    mamba = lc.mamba_cp * (fwd_passes + 1.0)
    mode = fw.overlap.cp
    if layout.cp_comm_overlap is not None:  # the layout's word: beside the attention as the stack does it, or not
        mode = ("ring" if mode == "none" else mode) if layout.cp_comm_overlap else "none"
    if mode == "allgather" and (fw.compile if layout.compile is None else layout.compile):
        # torch's ring traced into a compiled block waits for each exchange where it is issued [27 s11 ttcp]: while
        # tracing, a functional collective returns wait_tensor(result) at once (torch/distributed/
        # _functional_collectives.py _maybe_wrap_tensor, torch 2.6.0 and 2.13), and Inductor moves a wait only under
        # reorder_for_compute_comm_overlap (False by default in torch/_inductor/config.py 2.6.0; torchtitan 9dec370
        # sets only _micro_pipeline_tp). Inductor's code for the ring (notes/s11/27ttcp-scripts) runs no attention
        # between the K/V all-gather or any K/V-gradient exchange and its wait.
        mode = "none"
    if mode == "ring":
        exposed = max(0.0, cp_fwd - t_attn) * fwd_passes + max(0.0, cp_bwd - 2 * t_attn)
    elif mode == "allgather":
        step_f, step_b = t_attn / r.cp, t_attn_bwd / r.cp
        exposed = max(0.0, cp_fwd - step_f) * fwd_passes + max(0.0, cp_bwd - step_b)
        exposed += (r.cp - 1) * max(0.0, hop - step_b) + hop
    else:
        exposed = total
    hidden = total - exposed
    # the hidden part holds NCCL's SMs from the attention beside it (compute-bound: its HBM share does not bite)
    return exposed + mamba + interference_s(c.dev, hidden, NCCL_OVERLAP_CTAS, 0.0, 0.0), hidden


def _fp8_amax_reduce_s(c: _Setup, kernels: list[Kernel]) -> float:
    """fp8 current scaling's amax all-reduces over TP of one layer and micro-batch (kernels.fp8_tp_amax_reductions:
    4 bytes each, on the critical path: the quantize waits for them) [27 s10 fp8cs]."""
    # a hybrid's block has one column-row pair, as an MoE layer's attention half (kernels._hybrid_layer)
    moe = c.w.hybrid is not None or any(k.kind == "grouped_gemm" for k in kernels)
    fwd, bwd = fp8_tp_amax_reductions(c.fw, c.w, c.layout, c.r.tp, moe)
    if not fwd + bwd:
        return 0.0
    # torchtitan's op-level policy keeps aten.max's output (_save_list) but not the all-reduce DTensor issues on it
    # (its Partial(max) made Replicate by the scale's clamp): the recomputed casts reduce their amax again, as the
    # gathers (kernels.op_sac_tp_regathers) [27 s14 tt8btp]
    passes = c.fwd_passes + (1.0 if _op_sac_regathers(c, kernels) else 0.0)
    return (fwd * passes + bwd) * c.comm("all_reduce", 4.0, c.r.groups["tp"])


def _fp8_autocast_amax_s(c: _Setup) -> float:
    """Delayed scaling's amax all-reduces per autocast (kernels.fp8_autocast_amax_reductions: one at the forward's
    autocast exit, one in the backward, per model chunk and micro-batch, over TP x DP x CP, on the critical path),
    as one layer's share: the chunk's pair over the chunk's layers [27 s16 fp8twins]."""
    n = fp8_autocast_amax_reductions(c.fw, c.w, c.layout)
    if not n:
        return 0.0
    r = c.r
    chunk_layers = max(1.0, c.w.layers / (r.pp * r.vpp))
    gemms = chunk_layers * (4 if c.w.moe is None else 3)  # QKV, projection, FFN in / out; MoE: experts as one
    size = r.tp * r.cp * r.dp
    per_node = c.scenario.topology.accelerators_per_node
    if c.layout.order[-1] == "pp":  # the stage's TP x CP x DP ranks are consecutive
        group = Group(size, max(1, -(-size // per_node)), min(size, per_node))
    else:  # strided over the job's nodes
        nodes = max(1, -(-c.scenario.gpus // per_node))
        group = Group(size, min(size, nodes), max(1, size // nodes))
    fwd_b, bwd_b = (e * 4.0 * gemms * r.vpp for e in FP8_AUTOCAST_AMAX_ENTRIES)
    return (c.comm("all_reduce", fwd_b, group) + c.comm("all_reduce", bwd_b, group)) * (n / 2) / chunk_layers


def _tp_time(c: _Setup, kernels: list[Kernel], lc: _LayerComm, gemm_s: float) -> tuple[float, float, float]:
    """One layer's TP communication, one micro-batch: (exposed, hidden, whole), the exposed part with the hidden
    part's interference; ``whole``: the collectives a stack leaves out of its TP pipeline, on the critical path
    (async TP: the backward's unfused reduce-scatters; without sequence parallelism all of them, as torch fuses no
    all-reduce). ``gemm_s``: the layer's GEMM seconds, forward passes and backward."""
    layout, fw, t = c.layout, c.fw, c.r.tp
    tp_t, tp_hid, tp_whole = lc.tp_pass * (c.fwd_passes + 1.0), 0.0, 0.0
    # torchtitan's op-level policy gathers the column-parallel inputs again in the backward [27 s14 tt8btp]
    tp_t += _op_sac_regathers(c, kernels) * lc.tp_ag
    if t <= 1:
        return tp_t, tp_hid, tp_whole
    if layout.tp_comm_overlap and fw.overlap.tp == "async_tp":
        moe = any(k.kind == "grouped_gemm" for k in kernels)
        tp_whole = async_tp_unfused_reduce_scatters(fw, layout, t, moe) * lc.tp_rs if c.sp else tp_t
        if c.sp:
            return _async_tp_time(c, kernels, lc, tp_t - tp_whole, gemm_s) + (tp_whole,)
    tp_t -= tp_whole
    col_exposed = col_hidden = 0.0
    if c.sp and fw.sp_wgrad_gather:
        replaced, col_exposed, col_hidden = _sp_column_backward(c, kernels, lc)
        tp_t -= replaced
        gemm_s = max(0.0, gemm_s - col_hidden)
    if layout.tp_comm_overlap:  # chunked behind the GEMMs it feeds; the first chunk stays exposed
        exposed = max(tp_t / t, tp_t - gemm_s)
        # the hidden part still runs on OVERLAP_COMM_SMS of the GEMMs' SMs while it lasts (GEMMs: compute-bound)
        tp_t, tp_hid = exposed + interference_s(c.dev, tp_t - exposed, OVERLAP_COMM_SMS, 0.0, 0.0), tp_t - exposed
    return tp_t + col_exposed, tp_hid + col_hidden, tp_whole


def _op_sac_regathers(c: _Setup, kernels: Sequence[Kernel]) -> int:
    """TP all-gathers of one layer and micro-batch that torchtitan's op-level policy runs again in the backward
    (kernels.op_sac_tp_regathers) [27 s14 tt8btp]."""
    return op_sac_tp_regathers(recomputed_modules(c.layout), c.r.tp, c.sp, [k.name for k in kernels])


def _async_tp_pairs(
    kernels: Sequence[Kernel], lc: _LayerComm, fwd_passes: float, regathers: Sequence[float] = ()
) -> list[tuple[str, float, float]]:
    """torch's micro-pipelined collectives of one layer, one micro-batch: (all_gather or reduce_scatter, its
    seconds, the GEMM seconds of the matmul it is fused with). Forward (each pass): the all-gather before QKV, the
    reduce-scatter after the output projection, the all-gather before the FFN's input projections, the
    reduce-scatter after its down projection (fused_all_gather_matmul, fused_matmul_reduce_scatter); backward: the
    all-gathers of the row-parallel projections' output gradients, each fused with that projection's data-gradient
    GEMM (half its backward; the weight gradient reads the gathered tensor after the fused op). A collective whose
    GEMM the layer lacks (an MoE layer's FFN half) has no pair. ``regathers``: the share of the QKV and FFN-in
    forwards that torchtitan's op-level policy recomputes where it gathers those inputs again in the backward (K,
    up): each such all-gather is fused with the recomputed matmul it feeds [27 s14 tt8btp]."""
    fwd = {k.name: k.fwd_s * fwd_passes for k in kernels}
    dgrad = {k.name: k.bwd_s / 2.0 for k in kernels}
    f_ag, f_rs = lc.tp_ag * fwd_passes, lc.tp_rs * fwd_passes
    wanted = [
        ("all_gather", f_ag, fwd, "qkv"),
        ("reduce_scatter", f_rs, fwd, "attention_out"),
        ("all_gather", f_ag, fwd, "ffn_in"),
        ("reduce_scatter", f_rs, fwd, "ffn_out"),
        ("all_gather", lc.tp_ag, dgrad, "attention_out"),
        ("all_gather", lc.tp_ag, dgrad, "ffn_out"),
    ]
    redone = {name: {k: v * share for k, v in fwd.items()} for name, share in zip(("qkv", "ffn_in"), regathers)}
    wanted += [("all_gather", lc.tp_ag, redone[name], name) for name in redone]
    return [(op, comm_s, gemms[name]) for op, comm_s, gemms, name in wanted if name in gemms]


def _async_tp_time(
    c: _Setup, kernels: list[Kernel], lc: _LayerComm, fused_s: float, gemm_s: float
) -> tuple[float, float]:
    """torch's async TP under sequence parallelism, one layer, one micro-batch: (exposed, hidden) of the collectives
    it fuses (``fused_s``: TP's all but the unfused reduce-scatters), each beside its own matmul only.

    pytorch/pytorch torch/distributed/_symmetric_memory/__init__.py (torch 2.5-2.6): _pipelined_all_gather_and_consume
    and _pipelined_produce_and_all2all split the matmul into TP row chunks on two streams, copy one peer's chunk at a
    time (``copy_``: cudaMemcpyAsync, the copy engines; the copies of the two streams do not overlap) beside the
    other chunks' matmuls, and return only once the last copy is done (current_stream().wait_stream(backend_stream),
    then a barrier): a fused op hides its collective behind its own matmul, not the layer's. With c the collective's
    seconds and g its matmul's: an all-gather's last chunk is consumed after the last copy and a reduce-scatter's
    first chunk produced before the first, so c - g (TP - 1) / TP is exposed where the collective is the longer; a
    reduce-scatter's last copy follows its last chunk's matmul (c / TP at least), an all-gather's first copy runs
    beside the local chunk's matmul (nothing). What no pair takes (an MoE layer's FFN half) hides behind the layer's
    other GEMMs, one chunk exposed."""
    t = c.r.tp
    exposed = hidden = 0.0
    paired_c = paired_g = 0.0
    regathers: tuple[float, ...] = ()
    if _op_sac_regathers(c, kernels):
        regathers = tuple(
            recompute_share(n, recomputed_modules(c.layout), c.w) / c.fwd_passes for n in ("qkv", "ffn_in")
        )
    for op, comm_s, mm_s in _async_tp_pairs(kernels, lc, c.fwd_passes, regathers):
        floor = comm_s / t if op == "reduce_scatter" else 0.0
        e = max(floor, comm_s - mm_s * (t - 1) / t)
        exposed, hidden = exposed + e, hidden + comm_s - e
        paired_c, paired_g = paired_c + comm_s, paired_g + mm_s
    rest = max(0.0, fused_s - paired_c)
    if rest > 0:
        e = max(rest / t, rest - max(0.0, gemm_s - paired_g))
        exposed, hidden = exposed + e, hidden + rest - e
    return exposed + interference_s(c.dev, hidden, ASYNC_TP_COMM_SMS, 0.0, 0.0), hidden


def _sp_column_backward(c: _Setup, kernels: list[Kernel], lc: _LayerComm) -> tuple[float, float, float]:
    """The backward of the column-parallel linears (QKV, FFN-in) under sequence parallelism where the stack keeps only
    the input's shard (``Framework.sp_wgrad_gather``): each all-gathers its input again beside its data-gradient GEMM
    and reduce-scatters the input gradient beside its weight-gradient GEMM. Returns (the reduce-scatters this takes
    out of the layer's pass count, the exposed seconds with the hidden part's interference, the hidden seconds).

    NVIDIA/Megatron-LM 000c4ac24f61 megatron/core/tensor_parallel/layers.py
    ``LinearWithGradAccumulationAndAsyncCommunication``: the forward gathers into a shared buffer and saves the shard;
    the backward issues the all-gather with ``async_op=True`` before ``grad_output.matmul(weight)``, waits, issues the
    reduce-scatter of the input gradient with ``async_op=True`` and computes the weight gradient beside it.
    NVIDIA/TransformerEngine d0067d0da6cb transformer_engine/pytorch/module/layernorm_linear.py (and linear.py): the
    gathered ``ln_out_total`` is freed after the forward GEMM and ``ln_out`` saved; the backward gathers it
    (``ln_out_needs_gather``) asynchronously, or with userbuffers in bulk (``ub_bulk_dgrad``), beside the dgrad GEMM,
    and reduce-scatters the dgrad asynchronously, or in bulk (``ub_bulk_wgrad``), beside the wgrad GEMM. The
    row-parallel projections' output-gradient all-gathers stay in the pass count (exposed, or TE's chunked
    ring exchange). Beside: NCCL's CTAs, or the userbuffers' SMs under --tp-comm-overlap."""
    sms = OVERLAP_COMM_SMS if c.layout.tp_comm_overlap else NCCL_OVERLAP_CTAS
    exposed = hidden = 0.0
    cols = [k for k in kernels if k.name in SP_COLUMN_LINEARS]
    for k in cols:
        window = k.bwd_s / 2.0  # its data-gradient and weight-gradient GEMMs: the same FLOPs, the data gradient whole
        for comm_s in (lc.tp_ag, lc.tp_rs):
            exposed += max(0.0, comm_s - window)
            hidden += min(comm_s, window)
    return len(cols) * lc.tp_rs, exposed + interference_s(c.dev, hidden, sms, 0.0, 0.0), hidden


def queue_finish_s(
    ops: Sequence[tuple[float, float, float]], gpu_start_s: float = 0.0, host_start_s: float = 0.0
) -> tuple[float, float]:
    """(GPU, host) clocks after a run of kernels issued in order onto one stream: each op is (host seconds to issue
    it, launches, GPU seconds), its launches evenly spaced in both. A launch runs once the host has issued it and the
    GPU has finished the one before (a CUDA stream runs in issue order), so the GPU idles wherever the host has not
    yet issued its next kernel."""
    gpu, host = gpu_start_s, host_start_s
    for host_s, launches, gpu_s in ops:
        n = max(1.0, launches)
        # launch j (1..n) starts at max(GPU before, host + j * host_s / n) and the rest follow it: the latest of the
        # first and the last launch's chains (the starts are linear in j, so the others lie between)
        gpu = max(gpu + gpu_s, host + host_s / n + gpu_s, host + host_s + gpu_s / n)
        host += host_s
    return gpu, host


def _counts_on_host(layout: ParallelLayout) -> bool:
    """Whether the MoE dispatcher reads the token counts on the host: not with HybridEP's static rank budget
    (layout.moe_expert_capacity), nor under Megatron-Core's drop-and-pad (layout.moe_pad_to_capacity: core_v0.14.0
    token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess returns the counts as host tensors of the capacity
    before any device-to-host copy, cuda_sync_point stays 'no_sync' and _maybe_dtoh_and_synchronize does nothing
    when drop_and_pad; the all-to-all runs with equal splits) [27 s10 tokdrop]."""
    return layout.moe_expert_capacity is None and not layout.moe_pad_to_capacity


def _sync_cycle_s(
    c: _Setup, kernels: list[Kernel], ep_fwd: float, tp_fwd: float, ungraphed_shares: list[float] | None = None
) -> float:
    """Seconds from one MoE layer's dispatcher sync to the next's, forward (the layers of a stage alike).

    Megatron-Core's all-to-all dispatcher (NVIDIA/Megatron-LM 0014f13713bf, megatron/core/transformer/moe/
    token_dispatcher.py ``MoEAlltoAllTokenDispatcher``): ``preprocess`` counts the tokens per expert and gathers
    the counts over the EP group; the counts are copied to the host on a side stream at ``cuda_dtoh_point``
    (before permutation 1) and, dropless with EP > 1, the host waits for that copy (``d2h_event.synchronize()``) at
    ``cuda_sync_point`` ``before_ep_alltoall``: after issuing permutation 1, before the all-to-all that needs the
    split sizes. The GPU then holds only permutation 1; everything after it waits for the host to issue it: the
    all-to-all, the experts, the combine, and the next layer's attention and router up to its own sync. DeepEP's
    normal dispatch (the flex dispatcher) has the host poll the received-token counter its notify kernel writes to
    mapped host memory before it permutes (deepseek-ai/DeepEP csrc/deep_ep.cpp ``intranode_dispatch``,
    ``moe_recv_counter``): the stream is drained there, as it is for a stack that synchronizes the stream."""
    fw, dev, layout = c.fw, c.dev, c.layout
    host_op_s = fw.host_s_per_kernel * dev.host_op_factor
    module_s = fw.module_host_s * dev.host_op_factor
    if ungraphed_shares is None:  # (the caller's, where it has them: each kernel's share no graph replays)
        ungraphed_shares = [1.0 - g for g in graph_shares(kernels, layout)]
    ungraphed = {id(k): u for k, u in zip(kernels, ungraphed_shares, strict=True)}

    def op(k: Kernel, share: float = 1.0) -> tuple[float, float, float]:
        host_s = (k.launches * host_op_s + k.modules * module_s) * ungraphed[id(k)]
        return (host_s * share, k.launches * share, k.fwd_s * share)

    eager = [k for k in kernels if k.eager]
    permute = next((k for k in eager if k.name == "permute"), None)
    before = (0.0, 0.0, 0.0)
    after = [op(permute)] if permute else []
    split = permute is not None and fw.moe_sync_after_permute and layout.moe_dispatcher == "alltoall"
    # token drop without padding syncs before permutation 1 (core_v0.14.0 token_dispatcher.py preprocess:
    # 'before_permutation_1' for the dynamic num_out_tokens): the wait drains the stream [27 s10 tokdrop]
    split = split and layout.moe_capacity_factor is None
    # a captured moe_preprocess (kernels.graph_share: the counts and permutation 1 in the router's graph) moves the
    # counts' copy to the sync point itself (token_dispatcher.py at 0d8e0714 and 44151194: cuda_dtoh_point
    # 'before_ep_alltoall' when cuda_graph_scope has moe_preprocess), so the host's wait drains the stream
    drain = split and "moe_preprocess" in (layout.cuda_graph_scope or ()) and layout.cuda_graphs
    if permute is not None and split:
        # the dispatch's kernels: counts and permutation 1 before the sync, their inverse (unpermute) after it
        unpermute = ((permute.launches * host_op_s + permute.modules * module_s) * 0.5, *op(permute, 0.5)[1:])
        before = (0.0, unpermute[1], unpermute[2]) if drain else op(permute, 0.5)
        after = [unpermute]
    after.append((0.0, 1.0, ep_fwd / 2))  # the dispatch all-to-all (its launch counted with the permutation)
    after += [op(k) for k in eager if k is not permute]
    after.append((0.0, 1.0, ep_fwd / 2))  # the combine all-to-all
    after += [op(k) for k in kernels if not k.eager]
    after.append((0.0, 1.0, tp_fwd))
    if drain:
        # the next layer's graph replays permutation 1, then the host waits for the copy behind it: nothing is left
        # queued when it resumes
        gpu, host = queue_finish_s([*after, before])
        return max(gpu, host) + MOE_SYNC_S
    # the GPU resumes with permutation 1 (issued before the wait, run after the copy) still to run
    gpu, host = queue_finish_s(after, gpu_start_s=max(0.0, before[2] - MOE_SYNC_S))
    # the host waits for the next layer's counts (done on the GPU once it has run everything issued before them)
    # after issuing its permutation 1, and resumes a copy's round trip later, with that permutation left to run
    return max(gpu, host + before[0]) + MOE_SYNC_S


def _pp_p2p_stages(c: _Setup) -> list[float]:
    """The pipeline's sends and receives per micro-batch on each stage (forward activations, backward gradients,
    per virtual stage): batched, one exchange each way per pass; serial, as DeepSpeed's pipeline engine runs them
    (:func:`_pp_p2p_serial`), each boundary over the link it takes (:func:`_pp_boundary_intra`) [27 s14 bloomtp]."""
    layout, r, t = c.layout, c.r, c.r.tp
    if r.pp <= 1:
        return [0.0]
    split = t if (c.sp or layout.pp_scatter_gather) else 1
    p2p_bytes = c.tokens * c.w.hidden * 2 / split  # scatter/gather over TP (or SP): each TP rank sends its share
    pp_group = Group(2, 2, 1) if r.groups["pp"].nodes > 1 else Group(2, 1, 2)
    pp_p2p = c.comm("sendrecv", p2p_bytes, pp_group)
    gather = 0.0
    if t > 1 and not c.sp and split > 1:  # scatter/gather: the received slices are all-gathered over TP (NVLink)
        gather = c.comm("all_gather", c.tokens * c.w.hidden * 2, r.groups["tp"])
    if (layout.pp_p2p or c.fw.pp_p2p) != "serial":
        return [(pp_p2p + gather) * 2 * r.vpp] * r.pp
    header = c.comm("sendrecv", PP_HEADER_BYTES, pp_group)
    if r.vpp > 1 or r.groups["pp"].nodes <= 1:  # (interleaving: every stage has both neighbours)
        return [_pp_p2p_serial(c, (pp_p2p, pp_p2p), (header, header), gather, split) * r.vpp] * r.pp
    intra = Group(2, 1, 2)
    near = (c.comm("sendrecv", p2p_bytes, intra), c.comm("sendrecv", PP_HEADER_BYTES, intra))
    links = [near if _pp_boundary_intra(c, s) else (pp_p2p, header) for s in range(r.pp - 1)]
    out = []
    for s in range(r.pp):
        # the first and last stages are priced as if they had a neighbour on each side, over the one they have (the
        # schedule skips the two transfers without one: "Known, not modelled" in docs/project-evidence.md)
        prev = links[s - 1] if s > 0 else links[0]
        nxt = links[s] if s < r.pp - 1 else links[-1]
        out.append(_pp_p2p_serial(c, (prev[0], nxt[0]), (prev[1], nxt[1]), gather, split))
    return out


def _pp_boundary_intra(c: _Setup, s: int) -> bool:
    """[27 s14 bloomtp] Whether stages ``s`` and ``s + 1`` sit on the same node for every rank of the stage. A
    stage's ranks are ``base + s x stride`` (DeepSpeed's PipeModelDataParallelTopology, axes ['pipe', 'data',
    'model'] outermost first, as Megatron's order: PP outermost; bigscience-workshop/Megatron-DeepSpeed 0035f06a
    megatron/model/gpt_model.py GPTModelPipe builds it from mpu's sizes); where the stride divides the node, stage ``s`` and
    the next share one unless ``(s + 1) x stride`` starts a node (the same for every base below the stride)."""
    per_node = c.scenario.topology.accelerators_per_node
    stride = c.r.placement["pp"][1]
    if stride >= per_node or per_node % stride or c.layout.order[-1] != "pp":
        return False
    return ((s + 1) * stride) % per_node != 0


def _pp_p2p_serial(
    c: _Setup, transfer: tuple[float, float], header: tuple[float, float], gather: float, split: int
) -> float:
    """One micro-batch's pipeline communication on a stage as DeepSpeed's pipeline engine runs it (microsoft/DeepSpeed
    v0.5.4, deepspeed/runtime/pipe/schedule.py ``TrainSchedule`` and engine.py, unchanged in this from the engine's
    first commit 65c2f974d to v0.6.x): a forward step receives the activation and sends the previous gradient back
    (``RecvActivation``, ``SendGrad``), a backward step sends the activation on and receives its gradient
    (``SendActivation``, ``RecvGrad``): four blocking ``p2p.send``/``p2p.recv`` calls one after another (no
    batching, so no send beside a receive), with TP each after a small header tensor (the partition's meta). With
    TP, the engine partitions what it sends (``is_pipe_partitioned = is_model_parallel``: 1/TP of the tensor per
    rank, ``PartitionedTensor``, a narrowed clone, twice) and rebuilds the whole tensor three times
    (``PartitionedTensor.full``: the forward's input, the backward's output and its incoming gradient), each a
    zero-filled buffer, a TP all-gather into it and a clone."""
    # (transfer, header): over the boundary to the previous stage (RecvActivation, SendGrad), and to the next
    # (SendActivation, RecvGrad)
    if split <= 1:  # without TP a whole tensor, no header
        return 2 * sum(transfer)
    whole = c.tokens * c.w.hidden * 2
    copies = 3 * 3 * whole + 2 * 2 * whole / split  # a rebuild: zero-fill, clone (read, write); two partitions
    return 2 * (sum(transfer) + sum(header)) + 3 * gather + stream_time_s(c.dev, copies)


def _ends(c: _Setup, gemm_peak: float, tp_bytes: float) -> dict[str, float]:
    """The first stage's embedding and the last stage's output layer, final norm and loss, one micro-batch."""
    dev, w, layout, r, t, h, comm = c.dev, c.w, c.layout, c.r, c.r.tp, c.w.hidden, c.comm
    tokens = c.tokens
    resid = tokens * h * (1.0 if c.sp else t) / t  # elements of the residual stream on this GPU
    # the embedding: gather rows (read + write bf16), its TP reduction, backward scatter-add (fp32)
    embed_stream = stream_time_s(dev, tokens * h * (4.0 + 8.0) / t)
    embed_wgrad, embed_accum = _embedding_wgrad_bytes(c)
    embed_tp = 0.0
    if t > 1:
        embed_tp = comm("reduce_scatter" if c.sp else "all_reduce", tp_bytes, r.groups["tp"])
    # the output layer (logits GEMM, forward and backward), final norm and vocabulary-parallel loss
    elem = 1.0 if w.precision == "fp8" else 2.0
    fp8_out = c.fw.fp8_output_layer if layout.fp8_output_layer is None else layout.fp8_output_layer
    if elem == 1.0 and not fp8_out:  # the stack (or the run) leaves the output projection in 16 bits
        elem, gemm_peak = 2.0, dev.peak("bf16")
    head_compute = (
        gemm_time_s(dev, gemm_peak, tokens, w.vocab / t, h, elem_bytes=elem)
        + gemm_time_s(dev, gemm_peak, tokens, h, w.vocab / t, elem_bytes=elem)
        + gemm_time_s(dev, gemm_peak, h, w.vocab / t, tokens, elem_bytes=elem)
    )
    fw = c.fw
    loss_factor, _ = unfused_factor(fw, loss_fused(fw, layout.compile, layout.compile_loss), "cross_entropy")
    head_loss = stream_time_s(dev, tokens * w.vocab / t * LOSS_BYTES_PER_LOGIT * loss_factor)
    if loss_factor > 1:  # an eager cross-entropy: ATen kernels, slower than a fused stream
        head_loss /= EAGER_STREAM_FRACTION
    head_stream = head_loss + stream_time_s(dev, 8 * resid)
    head_tp = 2 * comm("all_gather" if c.sp else "all_reduce", tp_bytes, r.groups["tp"]) if t > 1 else 0.0
    return {
        "embed_stream": embed_stream + stream_time_s(dev, embed_wgrad),
        "embed_wgrad_accum": stream_time_s(dev, embed_accum),
        "embed_tp": embed_tp,
        "head_compute": head_compute,
        "head_loss": head_loss,
        "head_stream": head_stream,
        "head_tp": head_tp,
    }


def _embedding_wgrad_bytes(c: _Setup) -> tuple[float, float]:
    """HBM bytes of the input embedding's weight gradient per micro-batch on the first stage: (its zero-filled dense
    gradient, its addition into the main grads). The embedding's backward writes a dense ``vocab / TP x hidden``
    gradient, zero-filled first whatever the few rows the batch touched (pytorch/pytorch 01b9dc565e8c
    aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu ``embedding_backward_cuda_kernel``: ``at::zeros({num_weights,
    ...})``, 16 bits); no GEMM accumulates it into the main grads, so where the stack keeps main grads (ZeRO 0-2)
    its gradient hook adds it there every micro-batch (Megatron-Core megatron/core/distributed/
    distributed_data_parallel.py ``_make_backward_post_hook`` at d98e8a64: ``param.main_grad.add_(param.grad.data)``
    unless ``grad_added_to_main_grad``). Without gradient-accumulation fusion the stage already adds every
    gradient, this one included (``grad_accum``)."""
    w, layout = c.w, c.layout
    elements = w.vocab * w.hidden / c.r.tp
    accum = 2.0 + 2.0 * layout.grad_reduce_bytes if layout.grad_accum_fusion and layout.zero < 3 else 0.0
    return elements * 2.0, elements * accum


def _stages(
    c: _Setup,
    kind_times: list[tuple[float, ...]],
    kind_seconds: list[dict[str, float]],
    pp_p2p: list[float],
    ends: dict[str, float],
    gpus: int,
    only: frozenset[int] | None = None,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Each pipeline stage's time per micro-batch by part, and its seconds by kernel class (``only``: those stages
    alone, the others left empty)."""
    w, layout, r = c.w, c.layout, c.r
    partial = _partial_recompute(c)
    kinds = len(kind_times) // (2 if partial else 1)  # partial: each kind again, as the unrecomputed layers run it
    dense_kind = 0 if w.layers - w.moe_layers else None
    moe_kind = kinds - 1 if w.moe is not None else None
    recompute = _stage_rc(c) if partial else []
    straggle = slowest_gpu_factor(gpus)
    stage_params = stage_parameters(w, r, layout.schedule)  # (dense, expert) per GPU of each stage
    accum_bytes = 2 + 2 * layout.grad_reduce_bytes  # each weight gradient added into the main grads
    if layout.grad_accum_cast:  # DeepSpeed BF16_Optimizer.update_hp_grads: lp.grad.to(fp32) first, then add_
        accum_bytes += 2 * layout.grad_reduce_bytes
    stages: list[dict[str, float]] = []
    stage_classes: list[dict[str, float]] = []
    bf16_layers = stage_bf16_layers(w, layout, r)
    # the kinds' change in 16 bits: for the layers kept in bf16, and for MTP modules that are (a transformer's)
    need16 = any(map(any, bf16_layers)) or (_mtp_in_bf16(c) and w.hybrid is None)
    bf16 = _bf16_layer_deltas(c, kind_times, kind_seconds) if need16 else None
    alike: dict[tuple[Any, ...], tuple[dict[str, float], dict[str, float]]] = {}  # a middle stage's, by what it reads
    for i, (dense_n, moe_n) in enumerate(stage_layer_kinds(w, r)):
        if only is not None and i not in only:
            stages.append({})
            stage_classes.append({})
            continue
        key = None
        if 0 < i < r.pp - 1:  # a middle stage like one before it has its time (no embedding, head or MTP)
            rc = tuple(recompute[i][:2]) if partial else ()
            key = (dense_n, moe_n, rc, tuple(bf16_layers[i]) if bf16 is not None else (), stage_params[i], pp_p2p[i])
            seen = alike.get(key)
            if seen is not None:
                stages.append(dict(seen[0]))
                stage_classes.append(dict(seen[1]))
                continue
        n = dense_n + moe_n
        counts: tuple[tuple[int | None, int], ...] = ((dense_kind, dense_n), (moe_kind, moe_n))
        if partial:  # the recomputed layers of each kind, then the rest as they run unrecomputed
            dense_rc, moe_rc = recompute[i][:2]
            counts = (
                (dense_kind, dense_rc),
                (moe_kind, moe_rc),
                (None if dense_kind is None else dense_kind + kinds, dense_n - dense_rc),
                (None if moe_kind is None else moe_kind + kinds, moe_n - moe_rc),
            )
        parts = [0.0] * 8
        for kind, count in counts:
            if kind is not None and count:
                for j, v in enumerate(kind_times[kind]):
                    parts[j] += count * v
        classes: dict[str, float] = {}
        for kind, count in counts:
            if kind is not None and count:
                for cls, v in kind_seconds[kind].items():
                    classes[cls] = classes.get(cls, 0.0) + count * v
        if bf16 is not None:  # the stage's layers kept in 16 bits: each one's change from its fp8 run
            for kind, count in ((dense_kind, bf16_layers[i][0]), (moe_kind, bf16_layers[i][1])):
                if kind is not None and count:
                    for j, v in enumerate(bf16[0][kind]):
                        parts[j] += count * v
                    for cls, v in bf16[1][kind].items():
                        classes[cls] = classes.get(cls, 0.0) + count * v
        if i == r.pp - 1 and w.mtp_layers:  # the multi-token prediction modules, on the last stage
            if w.hybrid is not None:  # an attention block and an E (or MLP) block, priced on their own
                mtp_times, mtp_seconds = _hybrid_mtp_layer(_bf16_setup(c) if _mtp_in_bf16(c) else c)
            else:
                mtp_kind = moe_kind if w.mtp_moe else dense_kind
                assert mtp_kind is not None  # the model's last layer is of this kind
                mtp_times, mtp_seconds = kind_times[mtp_kind], kind_seconds[mtp_kind]
                if _mtp_in_bf16(c):  # in 16 bits: the kind's change from its fp8 run, as a bf16 layer's
                    assert bf16 is not None
                    deltas, delta_classes = bf16[0][mtp_kind], bf16[1][mtp_kind]
                    mtp_times = tuple(a + b for a, b in zip(mtp_times, deltas))
                    mtp_seconds = {
                        k: mtp_seconds.get(k, 0.0) + delta_classes.get(k, 0.0) for k in {*mtp_seconds, *delta_classes}
                    }
            _add_mtp(c, mtp_times, mtp_seconds, ends, parts, classes)
        compute, stream, tp_t, cp_t, cp_h, ep_t, host_t, tp_h = parts
        compute, stream, tp_t = _add_ends(ends, i == 0, i == r.pp - 1, (compute, stream, tp_t), classes)
        if not layout.grad_accum_fusion:
            classes["grad_accum"] = stream_time_s(c.dev, sum(stage_params[i]) * accum_bytes)
            stream += classes["grad_accum"]
        elif layout.zero >= 3 and r.micro_batches > 1 and _fsdp_deferred(layout, c.fw):
            classes["grad_accum"] = stream_time_s(c.dev, _fsdp_pp_accum_bytes(c, *stage_params[i]))
            stream += classes["grad_accum"]
        host_t += _activation_offload_copies_s(c, n)
        stage_classes.append(classes)
        slowest = (compute + stream) * (straggle - 1.0)  # every collective waits for the slowest GPU's share
        per_mb = compute + stream + slowest + tp_t + cp_t + ep_t + pp_p2p[i] + host_t
        stages.append(
            {
                "layers": float(n),
                "compute": compute,
                "memory_bound": stream,
                "tp_comm": tp_t,
                "cp_comm": cp_t,
                "cp_hidden": cp_h,
                "tp_hidden": tp_h,
                "ep_comm": ep_t,
                "pp_comm": pp_p2p[i],
                "host": host_t,
                "slowest_gpu": slowest,
                "per_micro_batch_s": per_mb,
            }
        )
        if key is not None:
            alike[key] = (dict(stages[-1]), dict(classes))
    return stages, stage_classes


def _add_ends(
    ends: dict[str, float], first: bool, last: bool, times: tuple[float, float, float], classes: dict[str, float]
) -> tuple[float, float, float]:
    """A stage's (compute, memory-bound, TP) times with the embedding (the ``first`` stage) and the output layer and
    loss (the ``last``) of :func:`_ends` added; their kernel classes added to ``classes``."""
    compute, stream, tp_t = times
    if first:
        stream += ends["embed_stream"] + ends["embed_wgrad_accum"]
        tp_t += ends["embed_tp"]
        classes["embedding"] = classes.get("embedding", 0.0) + ends["embed_stream"]
        if ends["embed_wgrad_accum"]:
            classes["grad_accum"] = classes.get("grad_accum", 0.0) + ends["embed_wgrad_accum"]
    if last:
        compute += ends["head_compute"]
        classes["gemm"] = classes.get("gemm", 0.0) + ends["head_compute"]
        classes["loss"] = classes.get("loss", 0.0) + ends["head_loss"]
        classes["norm"] = classes.get("norm", 0.0) + ends["head_stream"] - ends["head_loss"]
        stream += ends["head_stream"]
        tp_t += ends["head_tp"]
    return compute, stream, tp_t


def _all_stages(
    c: _Setup,
    kind_times: list[tuple[float, ...]],
    kind_seconds: list[dict[str, float]],
    pp_p2p: list[float],
    ends: dict[str, float],
    gpus: int,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Every pipeline stage (:func:`_stages`), a hybrid's each with its own blocks' layers (``memory.stage_views``):
    Megatron-Core gives each stage a slice of the pattern, so one stage may hold the attention blocks another does
    not. Each distinct mix of M, * and - blocks is priced once (its dense layer kind, then its own stages); with one
    stage or no hybrid, the kinds already priced serve every stage [27 s29 hybridpp]."""
    views = stage_views(c.w, c.r)
    if all(v is c.w for v in views):
        return _stages(c, kind_times, kind_seconds, pp_p2p, ends, gpus)
    stages: list[dict[str, float]] = [{} for _ in views]
    stage_classes: list[dict[str, float]] = [{} for _ in views]
    by_mix: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for i, view in enumerate(views):
        assert view.hybrid is not None
        by_mix.setdefault(tuple(view.hybrid.dense_mix()), []).append(i)
    for members in by_mix.values():
        cv = replace(c, w=views[members[0]])
        mix_times, mix_seconds, _ = _layer_times(cv)
        mix_stages, mix_classes = _stages(cv, mix_times, mix_seconds, pp_p2p, ends, gpus, frozenset(members))
        for i in members:
            stages[i], stage_classes[i] = mix_stages[i], mix_classes[i]
    return stages, stage_classes


def _activation_offload_copies_s(c: _Setup, layers: int) -> float:
    """Blocking activation-offload copies of one micro-batch on a stage of ``layers`` layers: each offloaded layer's
    input (micro-batch x sequence x hidden, 16-bit, split by SP and CP) goes to host memory in the forward and back
    in the backward, at the accelerator's host-link line rate, on the compute stream (``activation_offload_blocking``:
    DeepSpeed v0.6.2's CPU checkpointing, [27 s13 zero3]). 0 where the framework hides the copies or the
    accelerator gives no host-link rate."""
    layout, w, dev = c.layout, c.w, c.dev
    if not (c.fw.activation_offload_blocking and layout.offload_activation_layers and dev.host_link_bytes_per_s):
        return 0.0
    per_layer = w.micro_batch * w.seq_len * w.hidden * 2 / (layout.tp if layout.sp else 1) / layout.cp
    return 2 * min(layers, layout.offload_activation_layers) * per_layer / dev.host_link_bytes_per_s


def _add_mtp(
    c: _Setup,
    layer: tuple[float, ...],
    layer_seconds: dict[str, float],
    ends: dict[str, float],
    parts: list[float],
    classes: dict[str, float],
) -> None:
    """Add the ``mtp_layers`` multi-token prediction modules to the last stage's ``parts`` and ``classes``, one
    micro-batch, as Megatron-Core runs each (Megatron-LM 0d8e0714 megatron/core/transformer/
    multi_token_prediction.py ``MultiTokenPredictionLayer``, the same ops at 44151194; the DeepSeek-V3 report's
    Sec. 2.2 module): the shared
    embedding of the next tokens (``_get_embeddings``: the embedding's forward, backward and dense weight gradient
    again), RMSNorm of it and of the hidden state (``enorm``, ``hnorm``), their concatenation, ``eh_proj`` (a
    column-parallel 2h -> h GEMM, its output gathered over TP and scattered to the sequence-parallel shard), one
    transformer layer like the model's last (``layer``: its kernels, communication and host time, recomputed as the
    main layers are; under full recomputation the module is one checkpoint), its final norm, and a second pass
    through the shared output layer and the vocabulary-parallel cross-entropy (gpt_model.py ``_postprocess``:
    ``output_layer`` and ``compute_language_model_loss`` per module)."""
    dev, w, r, t, d = c.dev, c.w, c.r, c.r.tp, c.w.mtp_layers
    h, tokens = w.hidden, c.tokens
    resid = tokens * h * (1.0 if c.sp else t) / t
    elem = 1.0 if w.precision == "fp8" else 2.0  # eh_proj runs in the module's fp8 context
    eh_proj = (
        gemm_time_s(dev, c.gemm_peak, tokens, h / t, 2 * h, elem_bytes=elem) * c.fwd_passes
        + gemm_time_s(dev, c.gemm_peak, tokens, 2 * h, h / t, elem_bytes=elem)
        + gemm_time_s(dev, c.gemm_peak, 2 * h, h / t, tokens, elem_bytes=elem)
    )
    # two norms (as the final norm is priced: 8 B an element) and the concatenation (read h + h, write 2h)
    norms = stream_time_s(dev, 2 * 8 * resid + 8 * resid)
    embed = ends["embed_stream"] + ends["embed_wgrad_accum"]
    tp = ends["embed_tp"] + ends["head_tp"]
    if t > 1:  # eh_proj's input gather (SP) and its output's gather; backward their reverses
        group, b = r.groups["tp"], tokens * h * 2.0
        if c.sp:
            tp += c.comm("all_gather", 2 * b, group) + c.comm("reduce_scatter", 2 * b, group)
            tp += 2 * c.comm("all_gather", b, group)
        else:
            tp += c.comm("all_gather", b, group) + c.comm("all_reduce", 2 * b, group)
    extra = (eh_proj + ends["head_compute"], norms + ends["head_stream"] + embed, tp, 0.0, 0.0, 0.0, 0.0, 0.0)
    for j, v in enumerate(layer):
        parts[j] += d * (v + extra[j])
    for cls, v in layer_seconds.items():
        classes[cls] = classes.get(cls, 0.0) + d * v
    mtp_classes = {
        "gemm": eh_proj + ends["head_compute"],
        "norm": norms + ends["head_stream"] - ends["head_loss"],
        "loss": ends["head_loss"],
        "embedding": ends["embed_stream"],
        "grad_accum": ends["embed_wgrad_accum"],
    }
    for cls, v in mtp_classes.items():
        if v:
            classes[cls] = classes.get(cls, 0.0) + d * v


def _fsdp_deferred(layout: ParallelLayout, fw: Framework) -> bool:
    """FSDP holds the gradients unsharded to the last micro-batch: under torch's pipelining (the framework's
    ``fsdp_pp_unsharded_grads``) or where the layout defers the reduction (``fsdp_defer_grad_reduce``)."""
    return layout.fsdp_defer_grad_reduce or (layout.pp > 1 and fw.fsdp_pp_unsharded_grads)


def _fsdp_pp_accum_bytes(c: _Setup, dense_p: float, expert_p: float) -> float:
    """Bytes per micro-batch of FSDP2's unsharded gradient accumulation under PP (torch
    distributed/fsdp/_fully_shard/_fsdp_param.py: to_accumulated_grad_if_needed copies the first micro-batch's 16-bit
    gradient to the reduce dtype, accumulate_unsharded_grad_if_needed adds each later one into it; the stage's
    reduce-scatter waits for the last micro-batch). Routed experts that FSDP reduces in their own dtype, or leaves
    out, accumulate in autograd in 16 bits (a read of both and a write)."""
    m, fw = c.r.micro_batches, c.fw
    ignored = c.r.groups["edp"].size == 1 and fw.fsdp_ignores_ep_sharded_experts
    acc = 4.0 if fw.fsdp_expert_grad_bytes >= 4 and not ignored else 2.0
    red = fw.fsdp_accum_bytes(c.layout.grad_reduce_bytes)  # 2: autograd's own bf16 accumulation
    dense = (2.0 + red) + (m - 1) * (2.0 + 2 * red)  # the copy to the reduce dtype, then m - 1 adds into it
    experts = (2.0 + acc) + (m - 1) * (2.0 + 2 * acc)
    return (dense_p * dense + expert_p * experts) / m


def _pipeline(c: _Setup, stages: list[dict[str, float]]) -> tuple[float, int, str]:
    """(the pipeline's time, the stage that sets its pace, the schedule): ``m`` x the slowest stage + one pass
    through the others scaled by the schedule's fill and drain; each stage's own bubble is set in ``idle_s``."""
    r = c.r
    m_count = r.micro_batches
    own = [s["per_micro_batch_s"] for s in stages]
    schedule = c.layout.schedule or ("interleaved" if r.vpp > 1 else "1f1b")
    times = _dualpipe_rank_times(own) if schedule == "dualpipe" else own
    pace = max(range(len(stages)), key=lambda i: (times[i], own[i]))
    t_max = times[pace]
    # 1F1B: (m - 1) x the slowest stage + one pass through all of them; interleaved: the fill and drain / v; each
    # run of the schedule (_schedule_runs) fills and drains on its own
    pipeline_s = m_count * t_max + _schedule_runs(c) * (sum(times) - t_max) * PIPELINE_FILL[schedule](r.pp, r.vpp)
    for st in stages:  # each stage's own bubble: the pipeline's time it spends not working on its micro-batches
        st["idle_s"] = pipeline_s - m_count * st["per_micro_batch_s"]
    return pipeline_s, pace, schedule


def _schedule_runs(c: _Setup) -> int:
    """[27 s11 amscale] How many times the step runs the pipeline schedule: the layout's micro-batches over
    ``pp_schedule_micro_batches`` (one run where unset or without PP). torch.distributed.pipelining's
    ``schedule.step()`` takes one local batch and returns with every stage drained (torch v2.8.0
    distributed/pipelining/schedules.py ``_step_microbatches``), and NeMo AutoModel's benchmark recipe calls it
    once per gradient-accumulation step, ``global_batch / (local_batch x DP)`` times (nemo_automodel/recipes/llm/
    benchmark.py ``run_benchmark`` @01926a5c)."""
    run = c.layout.pp_schedule_micro_batches
    return c.r.micro_batches // run if run and c.r.pp > 1 else 1


def _pace_parts(
    c: _Setup, stages: list[dict[str, float]], stage_classes: list[dict[str, float]], pace: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The pace-setting stage's times and kernel classes per micro-batch; under DualPipe its rank's, the mean of
    the stage and its pair (``_dualpipe_rank_times``)."""
    schedule = c.layout.schedule or ("interleaved" if c.r.vpp > 1 else "1f1b")
    if schedule != "dualpipe":
        return stages[pace], stage_classes[pace]
    a, b = stages[pace], stages[-1 - pace]
    ca, cb = stage_classes[pace], stage_classes[-1 - pace]
    times = {k: (v + b.get(k, 0.0)) / 2 for k, v in a.items()}
    return times, {k: (ca.get(k, 0.0) + cb.get(k, 0.0)) / 2 for k in {*ca, *cb}}


def _dualpipe_rank_times(times: list[float]) -> list[float]:
    """Per micro-batch time of each stage's rank under DualPipe: rank i holds stage i of one direction and stage
    p - 1 - i of the other, and runs half the micro-batches through each (DeepSeek-V3 report Sec. 3.2.1, Fig. 5;
    deepseek-ai/DualPipe: both ends of the model on one rank), so it paces at the mean of the two. A stage heavier
    than its pair (the last, with the output layer and the multi-token prediction modules) costs its rank only
    half its excess."""
    return [(t + times[-1 - i]) / 2 for i, t in enumerate(times)]


def _fsdp_runs(c: _Setup) -> int:
    """How many times the step gathers and reduce-scatters FSDP's deferred parameters and gradients: once per run
    of the schedule (:func:`_schedule_runs`) where FSDP sits under torch's pipeline stage (``fsdp_pp_unsharded_grads``
    and ZeRO-3), else 1. The stage's ``backward_maybe_with_nosync`` calls FSDP's post-backward after each stage's
    last backward of a ``schedule.step()`` (``last_backward``: that run's micro-batch count, torch v2.8.0
    schedules.py), with gradient sync and reshard after backward on, so every run reduce-scatters the stage's
    gradients and reshards, and the next run's first forward gathers again. NeMo AutoModel's own patch of that
    method (nemo_automodel/components/moe/fsdp_mixin.py ``patched_backward_maybe_with_nosync`` @01926a5c, installed
    with ``enable_fsdp_optimizations``) does the same: a stage module that ``apply_fsdp`` wrapped with fully_shard is
    an ``FSDPModule``, and that branch comes before the ``MoEFSDPSyncMixin`` one that would wait for the optimizer
    step. The optimizer runs once."""
    if c.layout.zero < 3 or not c.fw.fsdp_pp_unsharded_grads:
        return 1
    return _schedule_runs(c)


def _slowest_tail(
    c: _Setup, stages: list[dict[str, float]], m_count: int, runs: int = 1
) -> tuple[float, float, float, float, float, float]:
    """Data parallelism and the optimizer per stage (its own parameters; ``tail_s`` set on each): the step waits
    for the slowest stage's (exposed DP, exposed FSDP gathers, optimizer, hidden DP, hidden gathers, and what the
    hidden part costs the compute beside it). ``m_count``: the micro-batches of one FSDP gather-and-reduce cycle,
    which repeats ``runs`` times (:func:`_fsdp_runs`)."""
    dev, layout, r = c.dev, c.layout, c.r
    stage_params = stage_parameters(c.w, r, layout.schedule)
    dp_group, edp_group = r.groups["dp"], r.groups["edp"]
    gb = layout.grad_reduce_bytes
    opt_bytes = ADAM_BYTES_PER_PARAM + (MAIN_GRAD_COPY_BYTES if layout.grad_reduce_bytes < 4 else 0)
    if (layout.optimizer_impl or c.fw.optimizer_impl) == "foreach":
        opt_bytes += FOREACH_ADAM_BYTES_PER_PARAM - FUSED_ADAM_BYTES
    if c.fw.clip_always_scales:
        opt_bytes += CLIP_SCALE_BYTES
    tails: dict[tuple[float, ...], tuple[Any, ...]] = {}  # each stage's _dp_tail_parts, by what they read
    best_tail = (-1.0, 0, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    rates: dict[str, float] = {}  # the DP collectives' HBM traffic per second, from the first stage that hides any
    tied = _tied_embedding_reduce_s(c)
    recompute = _stage_rc(c) if layout.recompute == "full" else []
    fp8_gathered = stage_fp8_gathered(c.w, layout, r)
    fp8_zero1 = _zero1_fp8_gathered(c)
    # [27 s16 fp8bucket] the fp8 weights of each stage, where Megatron-Core merges the non-fp8 buckets into their
    # last bucket group
    fp8_merged = _stage_fp8_params(c) if c.fw.fp8_bucket_merge else [(0.0, 0.0)] * r.pp
    drain = 0.0  # [27 s16 ppbucket] the backward the stages before this one still run after its last backward
    bucket_memo: dict[tuple[Any, ...], tuple[float, float, float, float, float]] = {}
    muon = _muon_stages_s(c)
    for i, st in enumerate(stages):
        dense_local, expert_local = stage_params[i]
        # the share of the stage's layers whose forward full recomputation runs again
        redone = 0.0
        if recompute:  # (an empty stage as under full recomputation of every layer)
            redone = (recompute[i][0] + recompute[i][1]) / r.stage_layers[i] if r.stage_layers[i] else 1.0
        # [27 s16 ppbucket] a stage after the first: each model chunk's gradients in one bucket group
        one_group = max(1, layout.vpp) if i > 0 and c.fw.dp_later_stages_one_bucket and layout.zero < 3 else 0
        # what _dp_tail_parts reads of the stage: stages alike in it share their parts, whatever their drain
        key = (
            dense_local,
            expert_local,
            st["layers"],
            st["compute"],
            st["memory_bound"],
            st["tp_comm"],
            redone,
            fp8_gathered[i],
            *fp8_zero1[i],
            fp8_merged[i][0],
            one_group,
        )
        parts = tails.get(key)
        if parts is None:
            parts = _dp_tail_parts(
                c.comm,
                dev,
                layout,
                dense_local,
                expert_local,
                dp_group,
                edp_group,
                gb,
                opt_bytes,
                st,
                redone,
                m_count,
                c.fw,
                _zero3_modules(c),
                fp8_gathered[i],
                fp8_zero1[i],
                _stage_tensors(c, i) if layout.dp_bucket_elements else (),
                fp8_merged[i][0],
                (one_group, 0.0),  # (the drain is _dp_tail_finish's)
                c.scenario.topology.launch_latency_s,
                bucket_memo,
            )
            tails[key] = parts
        tail = _dp_tail_finish(parts, drain if one_group else 0.0)
        drain += _stage_backward_s(st, redone) / max(1, layout.vpp)
        # exposed DP, exposed FSDP gathers, optimizer, and what the hidden DP reduction and ZeRO-3 gathers cost the
        # compute beside them (NCCL's SMs and their HBM traffic)
        contention = _tail_interference(c, st, dense_local + expert_local, tail[3], tail[4], rates)
        if runs > 1:  # FSDP's gathers and reduce-scatter of m_count micro-batches, once per schedule run
            tail, contention = (tail[0], runs * tail[1], tail[2], tail[3], runs * tail[4]), runs * contention
        if i in (0, r.pp - 1):  # the first and last stages then sum their copies of the tied word embeddings' grads
            tail = (tail[0] + tied, *tail[1:])
        zero3_fixed = _zero3_persistent_gathers_s(c, r.stage_layers[i])
        zero3_fixed += _zero3_gather_copies_s(c, r.stage_layers[i], redone, m_count * runs)
        opt_extra = _zero_grad_buffer_s(c, dense_local + expert_local) + muon[i]
        tail = (tail[0], tail[1] + zero3_fixed, tail[2] + opt_extra, *tail[3:])
        total = tail[0] + tail[1] + tail[2] + contention
        st["tail_s"] = total
        if total > best_tail[0]:
            best_tail = (total, i, (*tail, contention))
    return _drain_reduce_waits(c, stage_params, best_tail[1], best_tail[2], runs)


def _muon_stages_s(c: _Setup) -> list[float]:
    """Each stage's Muon work on its busiest owner rank (:mod:`commlens.project.muon`), 0 under Adam: the dense
    matrices shared over the DP group (all of them on every rank without the distributed optimizer), the experts'
    over the expert-DP group; TP shards each (blockwise) or gathers it whole (duplicated). [27 s26 muon]"""
    r, w, layout = c.r, c.w, c.layout
    if layout.optimizer != "muon":
        return [0.0] * r.pp
    dp = r.groups["dp"].size if layout.zero >= 1 else 1
    edp = r.groups["edp"].size if layout.zero >= 1 else 1
    local_experts = w.moe.experts / r.ep if w.moe is not None else 0.0
    tp = r.groups["tp"]

    def gather(nbytes: float) -> float:
        return c.comm("all_gather", nbytes, tp) if r.tp > 1 and nbytes > 0 else 0.0

    groups = (dp, edp, r.tp, r.expert_tp)
    duplicated = gather if layout.muon_tp_mode == "duplicated" else None
    return [stage_muon_s(c.dev, w, kinds, local_experts, groups, duplicated) for kinds in stage_layer_kinds(w, r)]


def _zero_grad_buffer_s(c: _Setup, local_params: float) -> float:
    """[27 s18 zerograd] The step's zeroing of the stage's whole gradient buffer (``zero_grad_buffer``: Megatron-Core
    DDP, ZeRO 0-2; its FSDP keeps sharded gradients), a write of every local gradient in the reduce dtype."""
    if not c.fw.zero_grad_buffer or c.layout.zero >= 3:
        return 0.0
    return stream_time_s(c.dev, local_params * c.layout.grad_reduce_bytes)


def _stage_backward_s(st: dict[str, float], redone: float) -> float:
    """One micro-batch's backward on a stage, TP waits included: 2 of the 3 + ``redone`` forward-sized passes."""
    return (st["compute"] + st["memory_bound"] + st["tp_comm"]) * 2.0 / (3.0 + redone)


def _drain_reduce_waits(
    c: _Setup,
    stage_params: list[tuple[float, float]],
    pace: int,
    tail: tuple[float, float, float, float, float, float],
    runs: int = 1,
) -> tuple[float, float, float, float, float, float]:
    """[27 s11 amscale] The slowest stage's ``tail`` with the drain's waits for every virtual stage's FSDP
    reduce-scatter, once per schedule run (``runs``), where FSDP sits under torch's pipeline stage (``fsdp_pp_unsharded_grads``: ZeRO-3, PP, the
    parameters kept gathered). The stage's run_post_backward issues
    the virtual stage's reduce-scatters after its last backward and then calls FSDP's root post-backward callback,
    which makes the compute stream wait for them (torch v2.8.0 distributed/pipelining/stage.py
    ``backward_maybe_with_nosync``; fsdp/_fully_shard/_fsdp_state.py ``_root_post_backward_final_callback`` ->
    _fsdp_param_group.py ``finalize_backward`` -> ``_wait_for_post_backward``:
    ``current_stream().wait_event(self._post_reduce_event)``; NeMo AutoModel's patched copy of that method
    @01926a5c does the same). The input gradient the virtual stage then sends waits for that stream, and the
    last micro-batch's backward runs through all PP x VPP virtual stages in turn, so the drain waits for the
    reduce-scatters of every stage's parameters one after another ("The reduce scatter compute stream sync blocks
    the other stages from executing their backwards leading to bubbles": pytorch PR #165106, H-Huang, 2025-10-09).
    Each reduce-scatter is priced as :func:`_dp_tail` prices it (a collective per layer, the framework's reduce
    dtype: ``fsdp_dense_accum_bytes`` for the dense gradients); it replaces the 1/VPP of the stage's own that
    :func:`_dp_tail` leaves exposed."""
    layout, r, fw = c.layout, c.r, c.fw
    if not (layout.zero >= 3 and r.pp > 1 and r.micro_batches // runs > 1 and fw.fsdp_pp_unsharded_grads):
        return tail
    if layout.reshard_after_forward:  # not _dp_tail's deferred path
        return tail
    dp_group, edp_group = r.groups["dp"], r.groups["edp"]
    dense_b, expert_b = fw.fsdp_accum_bytes(layout.grad_reduce_bytes), layout.grad_reduce_bytes

    def reduce_s(params: float, group: Group, nbytes: float, layers: float) -> float:
        if group.size == 1 or params == 0:
            return 0.0
        return layers * c.comm("reduce_scatter", params * nbytes / layers, group)

    waits = []
    for (dense, expert), n in zip(stage_params, r.stage_layers, strict=True):
        layers = max(1.0, float(n))
        waits.append(reduce_s(dense, dp_group, dense_b, layers) + reduce_s(expert, edp_group, expert_b, layers))
    own = waits[pace] / max(1, layout.vpp)  # what _dp_tail left exposed of the stage's own
    return (tail[0], tail[1] + runs * (sum(waits) - own), *tail[2:])


def _zero1_fp8_gathered(c: _Setup) -> list[tuple[float, float]]:
    """(dense, expert) parameters per GPU of every stage that ZeRO-1/2's all-gather moves at 1 B (``layout.
    fp8_param_gather`` with fp8 precision and a per-tensor recipe; else none). Megatron-Core builds each transformer
    layer under Transformer Engine's fp8_model_init when fp8_param is set (NVIDIA/Megatron-LM 0d8e0714 and 44151194
    megatron/core/fp8_utils.py get_fp8_context(is_init=True)), so the layers' TE linears (attention, dense FFN,
    shared and routed experts) hold quantized weights; the distributed optimizer's buffer for such a weight is
    uint8 (distributed_data_parallel.py: is_float8tensor -> param_dtype torch.uint8), one byte each. An MXFP8
    weight's bucket gathers into a bf16 view of its gradient buffer instead (param_and_grad_buffer.py: 'For MXFP8
    param: Create a shared buffer for param AG and grad RS', param_data bf16, with Megatron-Bridge's
    reuse_grad_buf_for_mxfp8_param_ag): two bytes, as without fp8 parameters. The router (a plain matmul), norms,
    embedding and output layer are not TE fp8 linears: two bytes. Under NVFP4 (``fp8_param_gather`` standing for
    Megatron's fp4_param_gather) the weights travel as NVFP4, 0.5625 B each (4-bit data and the E4M3 scales): the
    counts come back as the bytes they save against 1 B each, x (2 - 0.5625), which the callers subtract from the
    16-bit bytes as they do the fp8 weights' [27 s25 nvfp4]."""
    recipe = c.layout.fp8_recipe or c.fw.fp8_recipe
    if recipe == "mxfp8":
        return [(0.0, 0.0)] * c.r.pp
    if recipe == "nvfp4":
        saved = 2.0 - NVFP4_BYTES
        return [(dense * saved, expert * saved) for dense, expert in _stage_fp8_params(c)]
    return _stage_fp8_params(c)


def _stage_fp8_params(c: _Setup) -> list[tuple[float, float]]:
    """(dense, expert) parameters per GPU of every stage that Megatron holds as fp8 weights (the TE linears) under
    ``layout.fp8_param_gather`` with fp8 precision and ZeRO-1/2, whatever the recipe; else none."""
    w, layout, r = c.w, c.layout, c.r
    if not (layout.fp8_param_gather and layout.zero < 3 and w.precision == "fp8"):
        return [(0.0, 0.0)] * r.pp
    moe = w.layer_linear_parameters(True)
    kinds, views = stage_layer_kinds(w, r), stage_views(w, r)  # a hybrid stage's own blocks [27 s29 hybridpp]
    return [
        ((dense_n * view.layer_linear_parameters(False) + moe_n * moe) / r.tp, expert)
        for (dense_n, moe_n), view, (_, expert) in zip(kinds, views, stage_parameters(w, r), strict=True)
    ]


def _stage_tensors(c: _Setup, i: int) -> tuple[tuple[float, bool], ...]:
    """[27 s16 cisco] The parameter tensors of stage ``i`` on one GPU as Megatron-Core registers them, in forward
    order, each as (elements, a TE linear's weight): () for MoE or multi-token-prediction models (not counted one by
    one, nor hybrid models). Megatron-Core's TransformerLayer with the Transformer Engine spec (NVIDIA/Megatron-LM core_v0.13.1,
    megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec) fuses each norm into the
    linear after it: ``linear_qkv`` (TELayerNormColumnParallelLinear: ``layer_norm_weight`` and the fused QKV
    ``weight``), ``linear_proj``, ``linear_fc1`` (``layer_norm_weight`` and the weight, a gated FFN's gate and up
    projections in one), ``linear_fc2``: six tensors a Llama-style layer (MLA: one weight per attention linear);
    Megatron's GPT layer (learned positions, ungated FFN) adds the norms' biases and each linear's bias. The first
    stage holds the word embedding, the last the final norm and, untied or under PP, the output layer."""
    w, r = c.w, c.r
    if w.moe is not None or w.mtp_layers or w.hybrid is not None:
        return ()
    h, t = float(w.hidden), r.tp
    gpt = w.position_embedding == "learned" and not w.gated_ffn
    attn = [(k * n, True) for _, k, n in w.attention_linears(t)]
    ffn = w.hidden * w.ffn_hidden / t
    layer: list[tuple[float, bool]] = [(h, False), *([(h, False)] if gpt else []), attn[0]]
    if gpt:
        layer += [(attn[0][0] / h, False)]  # the QKV bias (its output width)
    layer += attn[1:] + ([(h, False)] if gpt else [])
    layer += [(h, False), *([(h, False)] if gpt else []), (ffn * (2.0 if w.gated_ffn else 1.0), True)]
    layer += [(w.ffn_hidden / t, False)] if gpt else []
    layer += [(ffn, True), *([(h, False)] if gpt else [])]
    embed = w.vocab * h / t
    out: list[tuple[float, bool]] = []
    if i == 0:
        out.append((embed, False))
        if w.position_embedding == "learned":
            out.append((w.seq_len * h, False))
    out += layer * int(r.stage_layers[i])
    if i == r.pp - 1:
        out.append((h, False))
        if not w.tied_embeddings or r.pp > 1:
            out.append((embed, False))
    return tuple(out)


def _mcore_buckets(tensors: Sequence[tuple[float, bool]], bucket: float) -> list[tuple[float, float]]:
    """(elements, TE-linear-weight elements) of each DP bucket when Megatron-Core fills buckets of ``bucket``
    elements: it walks the parameters in reverse (backward) order and closes a bucket once it holds at least
    ``bucket`` elements (NVIDIA/Megatron-LM core_v0.13.1, megatron/core/distributed/param_and_grad_buffer.py
    _ParamAndGradBuffer.__init__: ``(param_end_index - bucket_start_index) >= bucket_size``), so a bucket smaller
    than every tensor puts each tensor in a bucket, and a collective, of its own."""
    out: list[tuple[float, float]] = []
    held = linear = 0.0
    for n, is_linear in reversed(tensors):
        held += n
        linear += n if is_linear else 0.0
        if held >= bucket:
            out.append((held, linear))
            held = linear = 0.0
    if held > 0:
        out.append((held, linear))
    return out


def _tied_embedding_reduce_s(c: _Setup) -> float:
    """The all-reduce that keeps a tied word embedding equal on the first and the last pipeline stage: each holds a
    copy (the input embedding, and the output layer's weight), and after the data-parallel reduction the stack sums
    the two copies' gradients over the pair, on the step's critical path (Megatron-LM 2021 ``train_step``,
    "All-reduce word_embeddings' grad across first and last stages", and Megatron-Core
    megatron/core/distributed/finalize_model_grads.py ``_allreduce_word_embedding_grads`` at d98e8a64: one
    ``all_reduce`` of the weight's ``main_grad`` over the embedding group; DeepSpeed's pipeline engine
    ``ReduceTiedGrads`` -> ``PipelineModule.allreduce_tied_weight_gradients`` at v0.5.4, 16-bit ``grad``):
    ``vocab x hidden / TP`` gradients of ``grad_reduce_bytes``. None without PP or tied embeddings. Multi-token
    prediction's embedding replica on the last stage is kept equal the same way (finalize_model_grads.py at
    0d8e0714 ``_get_shared_word_embedding_weight``: the shared weight where ``mtp_num_layers`` is set), except under
    DualPipe, whose rank holds the embedding and the modules both (``memory.mtp_stage_parameters``)."""
    w, r = c.w, c.r
    mtp_replica = w.mtp_layers > 0 and c.layout.schedule != "dualpipe"
    if r.pp <= 1 or not (w.tied_embeddings or mtp_replica):
        return 0.0
    pair = Group(2, 2, 1) if r.groups["pp"].nodes > 1 else Group(2, 1, 2)
    return c.comm("all_reduce", w.vocab * w.hidden / r.tp * c.layout.grad_reduce_bytes, pair)


def _zero3_modules(c: _Setup) -> tuple[float, ...]:
    """The parameters (on one GPU: its TP share) of each submodule of one dense layer that the stack gathers with an
    all-gather of its own, in forward order; () where it gathers a layer at a time (FSDP's per-block units) or the
    model has experts.

    DeepSpeed's ZeRO-3 fetches parameters submodule by submodule from each module's forward pre-hook, one coalesced
    all-gather per submodule (microsoft/DeepSpeed v0.6.2, 32d97976, runtime/zero/partitioned_param_coordinator.py
    ``fetch_sub_module`` -> ``__all_gather_params`` -> partition_parameters.py ``all_gather_coalesced``: one
    ``_all_gather_base`` over the submodule's flattened parameters; still so at 38327e07), and keeps those
    under ``stage3_param_persistence_threshold`` (1e5 elements) resident: in a transformer layer the weights of the
    QKV and output projections and of the FFN's linears (Megatron-DeepSpeed fuses a gated FFN's two input
    projections into one linear); norms and biases stay."""
    w, layout = c.w, c.layout
    if not c.fw.zero3_live_params or layout.zero < 3 or w.moe is not None:
        return ()
    t = c.r.tp
    ffn = w.hidden * w.ffn_hidden / t
    return (*(k * n for _, k, n in w.attention_linears(t)), ffn * (2.0 if w.gated_ffn else 1.0), ffn)


def _zero3_persistent_gathers_s(c: _Setup, layers: float) -> float:
    """[27 s12 dsfixed] DeepSpeed's ZeRO-3 keeps the parameters under ``stage3_param_persistence_threshold``
    gathered (``zero3_persistence_threshold``: norms and biases) and gathers them all again after every optimizer
    step, one all-gather per parameter, then blocks the host until they finish: microsoft/DeepSpeed v0.6.2
    (32d97976) stage3.py ``_post_step`` -> ``persistent_parameters[0].all_gather(persistent_parameters)`` ->
    partition_parameters.py ``_all_gather`` -> ``_allgather_params_coalesced`` (one ``_all_gather_base`` per
    parameter, then ``torch.cuda.synchronize()``). Each is a collective of its own over the DP group, exposed at the
    step's end. A layer's small tensors: Megatron's GPT layer (learned positions, ungated FFN: Megatron-DeepSpeed's
    ParallelTransformerLayer) has two LayerNorms (weight and bias) and the four linears' biases, the column-parallel
    ones split over TP; a Llama-style layer (rotary or gated) its two RMSNorm weights. The final norm is left out."""
    fw, w = c.fw, c.w
    dp = c.r.groups["dp"]
    if not fw.zero3_persistence_threshold or c.layout.zero < 3 or w.moe is not None or dp.size == 1:
        return 0.0
    h, t = float(w.hidden), c.r.tp
    sizes: tuple[float, ...] = (h, h)  # Llama-style: the two RMSNorm weights
    if w.position_embedding == "learned" and not w.gated_ffn:
        sizes = (h, h, 3 * h / t, h, h, h, w.ffn_hidden / t, h)
    small = [n for n in sizes if n < fw.zero3_persistence_threshold]
    return layers * sum(c.comm("all_gather", n * 2, dp) for n in small)


def _zero3_gather_copies_s(c: _Setup, layers: float, redone: float, m_count: int) -> float:
    """[27 s14 zero3size] DeepSpeed's copy-out of a coalesced gather (``zero3_gather_copy_out``): a submodule with
    more than one parameter over ``stage3_param_persistence_threshold`` is gathered into one flat buffer, and
    ``AllGatherCoalescedHandle.wait`` rebuilds each parameter from its world_size partitions with a ``torch.cat`` on
    the gather stream, which the compute stream then waits for (microsoft/DeepSpeed v0.6.2, 32d97976,
    runtime/zero/partition_parameters.py ``all_gather_coalesced``; a lone parameter is gathered in place). In
    Megatron's GPT layer (learned positions, ungated FFN) each linear has a bias of its output width, the column-
    parallel ones split over TP; the h->4h linear's 4h bias reaches the 1e5 threshold from hidden 25,000 up, so that
    linear's weight and bias are copied out (a read and a write of 2-byte elements) at every gather of the layer:
    the forward, a recomputed forward, and the backward's when resharded. Llama-style linears have no biases."""
    fw, w, layout = c.fw, c.w, c.layout
    if not fw.zero3_gather_copy_out or layout.zero < 3 or w.moe is not None:
        return 0.0
    if c.r.groups["dp"].size == 1 or w.position_embedding != "learned" or w.gated_ffn:
        return 0.0
    t = c.r.tp
    linears = [(k * n, n) for _, k, n in w.attention_linears(t)]
    linears += [(w.hidden * w.ffn_hidden / t, w.ffn_hidden / t), (w.hidden * w.ffn_hidden / t, float(w.hidden))]
    threshold = fw.zero3_persistence_threshold  # 0: none persistent, every bias gathered with its weight
    coalesced = sum(weight + bias for weight, bias in linears if weight >= threshold and bias >= threshold)
    if not coalesced:
        return 0.0
    gathers = (
        1.0 + (0.0 if fw.zero3_recompute_keeps_gather else redone) + (1.0 if layout.reshard_after_forward else 0.0)
    )
    return m_count * gathers * layers * stream_time_s(c.dev, 2.0 * 2.0 * coalesced)


def _reduce_buckets(sizes: Sequence[float], bucket: float) -> list[float]:
    """Gradient elements per reduce-scatter when gradients of ``sizes`` elements arrive in this order: DeepSpeed's
    ZeRO-3 reduces the bucket it holds once the next gradient would overflow ``bucket`` elements (stage3.py
    ``reduce_independent_p_g_buckets_and_remove_grads``), so a gradient larger than the bucket goes alone."""
    out: list[float] = []
    held = 0.0
    for n in sizes:
        if held > 0 and held + n > bucket:
            out.append(held)
            held = 0.0
        held += n
    if held > 0:
        out.append(held)
    return out


def _module_collectives(
    comm: Callable[[str, float, Group], float],
    modules: tuple[float, ...],
    params: float,
    layers: float,
    group: Group,
    gb: float,
    bucket: float,
) -> tuple[float, float]:
    """(all-gathers, reduce-scatters) of one layer when each submodule is gathered on its own and the gradients go
    in buckets (:func:`_zero3_modules`, :func:`_reduce_buckets`); the rest of the stage's ``params`` (embeddings,
    output layer) in one more collective each, spread over its layers."""
    rest = max(0.0, params - layers * sum(modules))
    gathers = sum(comm("all_gather", n * 2, group) for n in modules) + comm("all_gather", rest * 2, group) / layers
    reduces = sum(comm("reduce_scatter", b * gb, group) for b in _reduce_buckets(modules[::-1], bucket))
    return gathers, reduces + comm("reduce_scatter", rest * gb, group) / layers


def _tail_interference(
    c: _Setup, st: dict[str, float], params: float, dp_hidden: float, fsdp_hidden: float, rates: dict[str, float]
) -> float:
    """What one stage's hidden DP reduction and ZeRO-3/FSDP gathers cost the passes they hide under: NCCL's CTAs
    from the compute-bound kernels, their HBM traffic from the memory-bound ones (the stage's own mix). ``rates``
    keeps each collective's HBM traffic per second once found (the link's rate: one collective per projection)."""
    if dp_hidden + fsdp_hidden <= 0:
        return 0.0
    group, layout = c.r.groups["dp"], c.layout
    passes = st["compute"] + st["memory_bound"]
    share = st["memory_bound"] / passes if passes > 0 else 0.0
    if "reduce" not in rates:
        reduce_op = "all_reduce" if layout.zero == 0 else "reduce_scatter"
        rates["reduce"] = _hbm_rate(c.comm, reduce_op, params * layout.grad_reduce_bytes, group)
        rates["gather"] = _hbm_rate(c.comm, "all_gather", params * 2, group)
    return interference_s(c.dev, dp_hidden, NCCL_OVERLAP_CTAS, rates["reduce"], share) + interference_s(
        c.dev, fsdp_hidden, NCCL_OVERLAP_CTAS, rates["gather"], share
    )


def _layout_summary(c: _Setup, schedule: str) -> dict[str, object]:
    """The layout as resolved, for the projection's record."""
    layout, r = c.layout, c.r
    return {
        "tp": r.tp,
        "sp": c.sp,
        "cp": r.cp,
        "pp": r.pp,
        "vpp": r.vpp,
        "dp": r.dp,
        "ep": r.ep,
        "zero": layout.zero,
        "recompute": layout.recompute,
        **(
            {"recompute_layers": layout.recompute_layers, "recompute_method": layout.recompute_method or "block"}
            if layout.recompute_layers is not None
            else {}
        ),
        "micro_batches": r.micro_batches,
        "stage_layers": list(r.stage_layers),
        "order": ",".join(layout.order),
        "schedule": schedule,
        "framework": layout.framework,
        # every other field the layout sets away from its default (overlaps, graphs, fp8 and MoE settings), so the
        # record names what was projected
        "settings": {
            k: v for k, v in layout.model_dump(mode="json", exclude_defaults=True).items() if k not in _SUMMARY_FIELDS
        },
    }


_SUMMARY_FIELDS = frozenset(
    {"tp", "sp", "cp", "pp", "vpp", "dp", "ep", "zero", "recompute", "recompute_layers", "recompute_method"}
    | {"stage_layers", "order", "schedule", "framework"}
)


def _band(step_s: float, family: tuple[str, str, str, str]) -> dict[str, object] | None:
    found = band(step_s, family)
    return None if found is None else found.as_dict()


def interference_s(dev: Device, hidden_s: float, comm_sms: float, hbm_rate: float, memory_share: float) -> float:
    """What ``hidden_s`` seconds of communication hidden under compute cost that compute: the compute-bound part
    (``1 - memory_share`` of it) loses the collective's SMs (``comm_sms`` of ``dev.sms``), the memory-bound part the
    HBM bandwidth its traffic takes (``hbm_rate`` bytes/s of ``dev.hbm_bytes_per_s``)."""
    if hidden_s <= 0:
        return 0.0
    sm = min(1.0, comm_sms / dev.sms)
    hbm = min(1.0, hbm_rate / dev.hbm_bytes_per_s)
    return hidden_s * ((1.0 - memory_share) * sm + memory_share * hbm)


def _hbm_rate(comm: Callable[[str, float, Group], float], op: str, nbytes: float, group: Group) -> float:
    """HBM bytes per second a collective of ``nbytes`` on ``group`` reads and writes on each GPU while it runs (the
    ring's link bytes, ``HBM_PER_LINK_BYTE`` each)."""
    n = group.size
    t = comm(op, nbytes, group) if n > 1 and nbytes > 0 else 0.0
    if t <= 0:
        return 0.0
    link = nbytes * (n - 1) / n * (2.0 if op == "all_reduce" else 1.0)
    return HBM_PER_LINK_BYTE[op] * link / t


@lru_cache(maxsize=256)
def slowest_gpu_factor(gpus: int) -> float:
    """How much slower than the median the slowest of ``gpus`` GPUs computes: GPUs of one SKU differ in speed
    (manufacturing and power management), each synchronous step waits for the slowest, and with speeds spread
    normally with ``GPU_SPEED_CV`` it lags by the ``gpus / (gpus + 1)`` quantile."""
    if gpus <= 1:
        return 1.0
    return 1.0 + GPU_SPEED_CV * NormalDist().inv_cdf(gpus / (gpus + 1.0))


def _grad_reduce_exposed(reduce_s: float, backward_s: float, buckets: float, last: float = -1.0) -> float:
    """The part of the last micro-batch's bucketed gradient reduction the backward cannot hide.

    Megatron-Core issues a bucket's collective once every gradient in it is ready, in the last micro-batch only,
    asynchronously on the one NCCL stream, one bucket after another (NVIDIA/Megatron-LM 001199898c4b,
    megatron/core/distributed/param_and_grad_buffer.py ``register_grad_ready`` -> ``start_grad_sync``;
    ``finish_grad_sync`` waits after the backward). With ``buckets`` equal buckets ready at even steps of the
    backward, each taking ``reduce_s / buckets``, the reduction ends ``max(c, reduce_s - backward_s x (B - 1) / B)``
    after the backward: the last bucket (ready when the backward ends) at best, the whole reduction less the
    backward after the first bucket at worst. ``last`` (where >= 0): the collective of the bucket group ready when
    the backward ends, where it is not one equal bucket ([27 s16 fp8bucket]): it runs after the backward and after
    the others, which share the backward as the equal buckets do."""
    each = reduce_s / buckets
    if last < 0:
        last = each
    return min(reduce_s, last + max(0.0, reduce_s - last - backward_s * (buckets - 1.0) / buckets))


def _param_gather_exposed(gather_s: float, forward_s: float, buckets: float, first: float = -1.0) -> float:
    """The part of ZeRO-1/2's bucketed parameter all-gather the next step's first forward cannot hide.

    With ``overlap_param_gather`` Megatron-Core dispatches the first bucket's all-gather before the forward and
    each following one from the forward pre-hook that waits for the bucket before it (NVIDIA/Megatron-LM
    001199898c4b, param_and_grad_buffer.py ``finish_param_sync``: wait, then
    ``next_param_gather_bucket_group.start_param_sync()``): one bucket of prefetch. The first bucket's gather is
    exposed; each later one hides behind the forward of the bucket before it (``forward_s / buckets``). ``first``
    (where >= 0): the first group's gather where it is not one equal bucket ([27 s16 fp8bucket]); the others
    share the rest equally."""
    if first < 0 or buckets <= 1:
        first = gather_s / buckets
    each = (gather_s - first) / (buckets - 1.0) if buckets > 1 else 0.0
    return min(gather_s, first + (buckets - 1.0) * max(0.0, each - forward_s / buckets))


def _grad_predivide_s(
    dev: Device, fw: Framework, gb: float, parts: tuple[tuple[float, int], ...], reductions: int
) -> float:
    """DeepSpeed's ZeRO-3 divides the flattened gradients by the DP size in place before each reduce-scatter
    (``reduce_scatter_coalesced``'s pre-divide, microsoft/DeepSpeed v0.6.2 32d97976 and 38327e07, from stage3.py
    ``__avg_scatter_grads``): a read and a write of each of ``elements`` gradient elements in the reduce dtype, on
    the reduce stream the step waits for; none where the framework has no such pass. Megatron FSDP, which does not
    average in the collective (Megatron-Bridge's overrides.py turns average_in_collective off), multiplies each
    unsharded gradient bucket by 1/DP in place before its reduce-scatter when the bucket is bf16; an fp32 bucket
    folds the scale into NCCL's premul-sum (gradient_reduce_preprocessing, gradient_reduce_div_fusion on by default:
    NVIDIA/Megatron-LM d98e8a64 and 44151194 megatron/core/distributed/fsdp/src/megatron_fsdp/
    param_and_grad_buffer.py): the same read and write, bf16 buckets only. Megatron-Bridge 25.11's Megatron-LM
    (0d8e0714, and 92c8482e of its main branch) passes ``gbuf.data``, the rank's shard of the sharded gradient buffer,
    to that pre-scale (``zero3_grad_prescale_shard``): 1/DP of the elements. ``parts``: (local gradient elements, DP
    size) of the dense and expert parameters, each sharded over its own group; ``reductions``: reduce-scatters each."""
    prescale = fw.zero3_grad_prescale_bf16 and gb == 2
    if not (fw.zero3_grad_predivide or prescale):
        return 0.0
    per_shard = prescale and fw.zero3_grad_prescale_shard and not fw.zero3_grad_predivide
    elements = sum(params / (size if per_shard else 1) for params, size in parts if size > 1)
    return stream_time_s(dev, 2.0 * gb * elements * reductions)


def _fsdp_copies_s(
    dev, fw: Framework, layout: ParallelLayout, sharded: float, fp8_sharded: float, gb: int, m_count: int
) -> float:
    """FSDP2's copies on the compute stream for ``sharded`` parameters (``fp8_sharded`` of them gathered at 1 B)."""
    out = 0.0
    if fw.fsdp_copy_out:
        # FSDP2 copies each all-gather's output into the parameters on the compute stream (wait_for_unshard ->
        # foreach_all_gather_copy_out): a read and write of every gathered byte per unshard; under PP without
        # resharding the stage stays unsharded across the step's micro-batches
        once = layout.pp > 1 or layout.fsdp_defer_grad_reduce
        unshards = 2 * m_count if layout.reshard_after_forward else (1 if once else m_count)
        out += stream_time_s(dev, 2.0 * (2.0 * sharded - fp8_sharded) * unshards)
    if fw.fsdp_copy_in:
        # and copies the gradients into the reduce-scatter's buffer in the reduce dtype before the compute
        # stream goes on (foreach_reduce -> foreach_reduce_scatter_copy_in): per reduction, once per step under
        # PP where the gradients wait unsharded (in fp32) for the last micro-batch
        pp_once = m_count > 1 and _fsdp_deferred(layout, fw)
        reduces, src_bytes = (1, fw.fsdp_accum_bytes(layout.grad_reduce_bytes)) if pp_once else (m_count, 2.0)
        out += stream_time_s(dev, (src_bytes + gb) * sharded * reduces)
    return out


def _fp8_merged_groups(
    comm: Callable[[str, float, Group], float],
    op: str,
    group: Group,
    params: float,
    fp8_weights: float,
    fp8_gathered: float,
    gb: int,
    bucket: float,
    tensors: tuple[tuple[float, bool], ...] = (),
    launch_s: float = 0.0,
) -> tuple[float, float, float, float, int]:
    """(reduce, all-gather, the merged group's reduce, its all-gather, bucket groups) of a stage's dense DP buckets
    under fp8 parameters: ``params`` elements, ``fp8_weights`` of them fp8 weights (``fp8_gathered`` of those
    gathered at 1 B: per-tensor recipes; MXFP8's at 2 B), in buckets of ``bucket`` elements (filled from
    ``tensors`` where given, else equal).

    [27 s16 fp8bucket] With fp8 parameters Megatron-Core keeps the fp8 weights (a uint8 buffer) and the rest (norms,
    embedding, output layer, biases: a bf16 buffer) in buffers of their own, each filled into buckets, and merges
    every non-fp8 bucket into the last fp8 bucket group, the one of the model's first layers (NVIDIA/Megatron-LM
    core_v0.9.0 .. core_v0.19.0, megatron/core/distributed/param_and_grad_buffer.py ``partition_buckets``, case 3).
    A group starts its reduce-scatter once every gradient in it is ready (``register_grad_ready`` ->
    ``start_grad_sync``, one coalesced launch of its buckets): that group, the output layer's gradient included,
    waits for the end of the backward, after the groups before it on the same stream. Its all-gather is the first of
    the next step's forward, dispatched and waited on by the first forward pre-hook (``finish_param_sync``: 'If
    current bucket's param AG has not been dispatched, dispatch it now'), before the embedding's forward. So the
    merged group's reduce-scatter and all-gather are exposed whole, and the other buckets share the overlap as
    before. ``launch_s``: the launch cost of one collective (the topology's ``launch_latency_s``), paid once by the
    merged group's coalesced launch, not once per bucket ([27 s16 ppbucket])."""
    linear = min(params, fp8_weights)
    if tensors:
        fp8_buckets = [n for n, _ in _mcore_buckets([t for t in tensors if t[1]], bucket)] or [0.0]
        fp8_buckets = [n * linear / sum(fp8_buckets) if sum(fp8_buckets) else 0.0 for n in fp8_buckets]
        others = [n for n, _ in _mcore_buckets([t for t in tensors if not t[1]], bucket)]
        others = [n * (params - linear) / sum(others) for n in others] if sum(others) else []
    else:
        k = max(1, math.ceil(linear / bucket))
        fp8_buckets = [linear / k] * k
        k_o = max(1, math.ceil((params - linear) / bucket))
        others = [(params - linear) / k_o] * k_o if params > linear else []
    lin_b = 2.0 - (fp8_gathered / linear if linear else 0.0)  # the fp8 weights' gather bytes (1 per-tensor, 2 MXFP8)
    rs_groups = [comm(op, n * gb, group) for n in fp8_buckets]
    ag_groups = [comm("all_gather", n * lin_b, group) for n in fp8_buckets]
    # the group's buckets go in one coalesced launch (start_grad_sync / start_param_sync under _coalescing_manager,
    # core_r0.9.0 .. core_v0.19.0), one NCCL launch for them all (NCCL user guide, Group Calls, 'Aggregated
    # Operations (2.2 and later)'): the launch paid once ([27 s16 ppbucket])
    saved = len(others) * launch_s
    last_rs = rs_groups[-1] + sum(comm(op, n * gb, group) for n in others) - saved
    last_ag = ag_groups[-1] + sum(comm("all_gather", n * 2.0, group) for n in others) - saved
    return sum(rs_groups[:-1]) + last_rs, sum(ag_groups[:-1]) + last_ag, last_rs, last_ag, len(fp8_buckets)


def _dp_buckets(
    comm: Callable[[str, float, Group], float],
    layout: ParallelLayout,
    fw: Framework,
    parts: tuple[tuple[float, Group, float], ...],
    gb: int,
    layers: float,
    tensors: tuple[tuple[float, bool], ...] = (),
    fp8_weights: float = 0.0,
    launch_s: float = 0.0,
    one_group: int = 0,
) -> tuple[float, float, float, float, float]:
    """ZeRO-0/1/2's DP collectives of one stage for :func:`_dp_tail`: (reduce, all-gather, buckets, the merged fp8
    group's reduce, its all-gather; -1 each where the buckets are equal). ``parts``: (parameters, group, of them
    gathered at 1 B) of the dense parameters (first) and the experts; ``one_group`` (> 0): that many model chunks,
    each one bucket group (:func:`_dp_one_group`)."""
    if one_group and layout.overlap_grad_reduce:
        return _dp_one_group(comm, layout, parts, gb, one_group, fp8_weights, launch_s)
    rs_s = ag_s = 0.0
    last_rs = last_ag = -1.0  # the merged group's collectives (-1: buckets equal)
    n_buckets = 0.0
    dp_group = parts[0][1]
    for params, group, fp8 in parts:
        if group.size == 1 or params == 0:
            continue
        bucket = layout.dp_bucket_elements or fw.overlap.dp_bucket_elements(group.size) or params / layers
        # without overlap the gradients go in one collective after the backward (Megatron: bucket_size None)
        buckets = max(1.0, math.ceil(params / bucket)) if layout.overlap_grad_reduce else 1.0
        n_buckets += buckets
        # DeepSpeed's 2021 stage 1 all-reduces the whole gradients, then all-gathers (layout.zero1_all_reduce)
        whole = layout.zero == 0 or (layout.zero == 1 and layout.zero1_all_reduce)
        op = "all_reduce" if whole else "reduce_scatter"
        if fp8_weights and group is dp_group and layout.overlap_grad_reduce and 0 < layout.zero < 3:
            # [27 s16 fp8bucket] the fp8 buffer's buckets, the last one merged with the whole non-fp8 buffer
            sized = tensors if layout.dp_bucket_elements else ()
            rs, ag, last_rs, last_ag, groups = _fp8_merged_groups(
                comm, op, group, params, fp8_weights, fp8, gb, bucket, sized, launch_s
            )
            n_buckets += groups - buckets  # one group per fp8 bucket
            rs_s, ag_s = rs_s + rs, ag_s + ag
            continue
        if tensors and group is dp_group and layout.overlap_grad_reduce and layout.dp_bucket_elements:
            # [27 s16 cisco] the buckets as Megatron-Core fills them from the stage's tensors: each bucket's
            # collectives sized by its own elements (its TE linears' weights gathered at 1 B with fp8 parameters),
            # scaled to the stage's parameter count (the tensor list counts the norms whole, not split over TP)
            filled = _mcore_buckets(tensors, layout.dp_bucket_elements)
            scale = params / sum(n for n, _ in filled)
            linear = sum(lin for _, lin in filled)
            share = fp8 / linear if linear else 0.0
            n_buckets += len(filled) - buckets
            rs_s += sum(comm(op, n * scale * gb, group) for n, _ in filled)
            if 0 < layout.zero < 3:
                ag_s += sum(comm("all_gather", n * scale * 2 - lin * share, group) for n, lin in filled)
            continue
        rs_s += buckets * comm(op, params * gb / buckets, group)
        if 0 < layout.zero < 3:
            ag_s += buckets * comm("all_gather", (params * 2 - fp8) / buckets, group)
    return rs_s, ag_s, n_buckets, last_rs, last_ag


def _dp_buckets_once(
    memo: dict[tuple[Any, ...], tuple[float, float, float, float, float]] | None,
    comm: Callable[[str, float, Group], float],
    layout: ParallelLayout,
    fw: Framework,
    parts: tuple[tuple[float, Group, float], ...],
    gb: int,
    layers: float,
    tensors: tuple[tuple[float, bool], ...],
    fp8_weights: float,
    launch_s: float,
    one_group: int,
) -> tuple[float, float, float, float, float]:
    """:func:`_dp_buckets`, looked up in ``memo`` (a projection's) by what varies between its stages: stages alike in
    all of it price their collectives once."""
    key = (parts[0][0], parts[1][0], parts[0][2], parts[1][2], layers, tensors, fp8_weights, one_group)
    got = memo.get(key) if memo is not None else None
    if got is None:
        got = _dp_buckets(comm, layout, fw, parts, gb, layers, tensors, fp8_weights, launch_s, one_group)
        if memo is not None:
            memo[key] = got
    return got


def _dp_one_group(
    comm: Callable[[str, float, Group], float],
    layout: ParallelLayout,
    parts: tuple[tuple[float, Group, float], ...],
    gb: int,
    chunks: int,
    fp8_weights: float = 0.0,
    launch_s: float = 0.0,
) -> tuple[float, float, float, float, float]:
    """:func:`_dp_buckets` of a stage whose ``chunks`` model chunks each keep their gradients in one bucket group
    ([27 s16 ppbucket]; ``dp_later_stages_one_bucket``), as Megatron-Core does on pipeline stages after the first:
    NVIDIA/Megatron-LM distributed_data_parallel.py sets ``bucket_size = None`` where the pipeline rank is > 0 (and
    for model chunks after the first, ``disable_bucketing``), at core_v0.5.0 .. core_v0.19.0. A chunk's reduce-scatter
    starts when its last backward ends (``register_grad_ready``); the last chunk's has nothing after it on this stage
    but the backward the stages before it still run in the pipeline's drain (:func:`_dp_tail`'s ``later``: the
    last micro-batch's backward goes from the last stage to the first, megatron/core/pipeline_parallel/schedules.py);
    its all-gather is dispatched and waited for by the chunk's first forward pre-hook (``finish_param_sync``). Per
    chunk and parameter group (dense, experts) one reduce-scatter (all-reduce without the distributed optimizer) and
    one all-gather of that chunk's share. ``fp8_weights`` (where the framework merges the buffers' buckets into one
    group, ``fp8_bucket_merge``): the dense parameters held as fp8 weights, a buffer of their own beside the rest,
    whose two buckets go in one coalesced launch (``_coalescing_manager`` in param_and_grad_buffer.py
    start_grad_sync / start_param_sync), paying ``launch_s`` once."""
    rs_s = ag_s = 0.0
    for k, (params, group, fp8) in enumerate(parts):
        if group.size == 1 or params == 0:
            continue
        whole = layout.zero == 0 or (layout.zero == 1 and layout.zero1_all_reduce)
        op = "all_reduce" if whole else "reduce_scatter"
        linear = min(params, fp8_weights) if k == 0 else 0.0
        # (elements, gathered bytes) of each buffer's one bucket: the fp8 weights' and the rest's
        buffers = [(linear, 2 * linear - fp8), (params - linear, 2 * (params - linear))] if linear else []
        buffers = [b for b in buffers if b[0] > 0] or [(params, 2 * params - fp8)]
        saved = (len(buffers) - 1) * launch_s
        rs_s += chunks * (sum(comm(op, n * gb / chunks, group) for n, _ in buffers) - saved)
        if 0 < layout.zero < 3:
            ag_s += chunks * (sum(comm("all_gather", b / chunks, group) for _, b in buffers) - saved)
    return rs_s, ag_s, float(chunks), -1.0, -1.0


def _dp_tail(
    comm: Callable[[str, float, Group], float],
    dev,
    layout: ParallelLayout,
    dense_local: float,
    expert_local: float,
    dp_group: Group,
    edp_group: Group,
    gb: int,
    opt_bytes: float,
    st: dict[str, float],
    redone: float,
    m_count: int,
    fw: Framework,
    modules: tuple[float, ...] = (),
    fp8_local: float = 0.0,
    fp8_zero1: tuple[float, float] = (0.0, 0.0),
    tensors: tuple[tuple[float, bool], ...] = (),
    fp8_weights: float = 0.0,
    later: tuple[int, float] = (0, 0.0),
    launch_s: float = 0.0,
    memo: dict[tuple[Any, ...], tuple[float, float, float, float, float]] | None = None,
) -> tuple[float, float, float, float, float]:
    """(exposed DP reduction, exposed ZeRO-3 gathers, optimizer, hidden DP, hidden gathers) of one stage:
    :func:`_dp_tail_parts`, finished with ``later``'s drain (:func:`_dp_tail_finish`).

    Gradients are reduced bucket by bucket, as the framework buckets them (each bucket its own collective, with its
    own latency); the reduction overlaps the last backward when ``overlap_grad_reduce``, and ZeRO-1/2's all-gather
    of the updated parameters overlaps the next step's first forward where the framework does that
    (``overlap_param_gather``). ZeRO-3 gathers a layer at a time, or with ``modules`` (:func:`_zero3_modules`) each
    submodule with its own all-gather and the gradients in the framework's buckets, each collective with its own
    latency. ``redone``: the share of the stage's layers whose forward full recomputation runs again (1: all);
    ``fp8_local``: the dense parameters gathered at 1 B, not 2 (:func:`~commlens.project.memory.stage_fp8_gathered`);
    ``fp8_zero1``: the (dense, expert) parameters ZeRO-1/2 gathers at 1 B (:func:`_zero1_fp8_gathered`);
    ``tensors``: the stage's parameter tensors (:func:`_stage_tensors`), given where the layout sets its DP bucket
    (``dp_bucket_elements``): the dense gradients then go in Megatron-Core's buckets of that size
    (:func:`_mcore_buckets`), each its own reduce-scatter and all-gather with its own latency. ``fp8_weights``: the
    dense parameters held as fp8 weights where the framework merges the other buckets into their last bucket group
    (``fp8_bucket_merge``; :func:`_stage_fp8_params`), else 0: :func:`_fp8_merged_groups`. ``later``: (model chunks,
    the drain's backward after the stage's own) where each chunk is one bucket group, as on a stage after the first
    (:func:`_dp_one_group`); ``launch_s``: one collective's launch, paid once by a coalesced bucket group (``memo``:
    :func:`_dp_buckets_once`)."""
    parts = _dp_tail_parts(
        comm,
        dev,
        layout,
        dense_local,
        expert_local,
        dp_group,
        edp_group,
        gb,
        opt_bytes,
        st,
        redone,
        m_count,
        fw,
        modules,
        fp8_local,
        fp8_zero1,
        tensors,
        fp8_weights,
        later,
        launch_s,
        memo,
    )
    return _dp_tail_finish(parts, later[1])


def _dp_tail_finish(parts: tuple[Any, ...], drain: float) -> tuple[float, float, float, float, float]:
    """:func:`_dp_tail` from its :func:`_dp_tail_parts`: the gradient reduction hidden under the stage's last backward
    and under ``drain`` (the backward the stages before it still run, where its chunks are one bucket group each)."""
    dp_s, rs_s, exposed_rs, hidden_ag, fsdp_exposed, optimizer_s, fsdp_hidden, zero3 = parts
    if zero3:  # the reduce-scatter is part of the backward's communication
        return 0.0, fsdp_exposed, optimizer_s, 0.0, fsdp_hidden
    hidden_rs = rs_s - max(0.0, exposed_rs - drain) if exposed_rs is not None else 0.0
    dp_hidden = hidden_rs + hidden_ag
    return dp_s - dp_hidden, fsdp_exposed, optimizer_s, dp_hidden, fsdp_hidden


def _dp_tail_parts(
    comm: Callable[[str, float, Group], float],
    dev,
    layout: ParallelLayout,
    dense_local: float,
    expert_local: float,
    dp_group: Group,
    edp_group: Group,
    gb: int,
    opt_bytes: float,
    st: dict[str, float],
    redone: float,
    m_count: int,
    fw: Framework,
    modules: tuple[float, ...] = (),
    fp8_local: float = 0.0,
    fp8_zero1: tuple[float, float] = (0.0, 0.0),
    tensors: tuple[tuple[float, bool], ...] = (),
    fp8_weights: float = 0.0,
    later: tuple[int, float] = (0, 0.0),
    launch_s: float = 0.0,
    memo: dict[tuple[Any, ...], tuple[float, float, float, float, float]] | None = None,
) -> tuple[Any, ...]:
    """What :func:`_dp_tail` is made of apart from the drain (``later[1]``): (DP collectives, gradient reduce-scatter,
    its part not hidden under the last backward or None where it does not overlap, hidden parameter all-gather,
    exposed ZeRO-3 gathers, optimizer, hidden ZeRO-3 gathers, ZeRO-3 or not); stages alike but for their drain share
    it (:func:`_slowest_tail`). The arguments as :func:`_dp_tail`'s."""
    layers = max(1.0, st["layers"])
    fsdp_exposed = fsdp_hidden = 0.0
    dp_parts = ((dense_local, dp_group, fp8_zero1[0]), (expert_local, edp_group, fp8_zero1[1]))
    buckets = _dp_buckets_once(memo, comm, layout, fw, dp_parts, gb, layers, tensors, fp8_weights, launch_s, later[0])
    (rs_s, ag_s, n_buckets, last_rs, last_ag), dp_s = buckets, buckets[0] + buckets[1]
    # the DP buckets go on the DP communicator's own NCCL stream: they run on while the backward waits for its exposed
    # TP collectives (another communicator, NVLink), so the window is the passes' wall time, TP waits included
    passes = st["compute"] + st["memory_bound"] + st["tp_comm"]
    last_bwd = passes * 2.0 / (3.0 + redone)  # ~ its backward
    first_fwd = passes / (3.0 + redone)
    hidden_ag = 0.0
    exposed_rs = None  # (less the drain's backward, :func:`_dp_tail_finish`)
    if rs_s and layout.overlap_grad_reduce and fw.overlap.grad_reduce != "none":
        exposed_rs = _grad_reduce_exposed(rs_s, last_bwd, n_buckets, last_rs)
    if ag_s and layout.overlap_param_gather and fw.overlap.param_gather == "next_forward":
        hidden_ag = ag_s - _param_gather_exposed(ag_s, first_fwd, n_buckets, last_ag)
    if layout.zero >= 3:
        # Parameters gathered layer by layer every micro-batch, forward (and again in the backward if resharded; a
        # recomputed forward gathers too, unless the framework keeps that gather for the backward); the gradients'
        # reduce-scatter runs in the backward beside those gathers, on the same links: every micro-batch where the
        # framework says so (FSDP2, Megatron FSDP, DeepSpeed: frameworks.yaml), else in the last one only.
        gather = comm("all_gather", dense_local * 2 - fp8_local, dp_group)  # one all-gather, both dtypes as bytes
        gather += comm("all_gather", expert_local * 2, edp_group)
        g_l, rs_l = gather / layers, rs_s / layers
        if modules and dp_group.size > 1:
            bucket = layout.dp_bucket_elements or fw.overlap.dp_bucket_elements(dp_group.size) or sum(modules)
            g_l, rs_l = _module_collectives(comm, modules, dense_local, layers, dp_group, gb, bucket)
            rs_s = rs_l * layers
        fwd_layer = (st["compute"] + st["memory_bound"]) / (3.0 + redone) / layers
        bwd_layer = (2.0 + (redone if fw.zero3_recompute_keeps_gather else 0.0)) * fwd_layer
        fwd_passes = 1.0 + (0.0 if fw.zero3_recompute_keeps_gather else redone)
        bwd_gather = g_l if layout.reshard_after_forward else 0.0
        rs_each = fw.overlap.grad_reduce == "per_layer" or fw.zero3_reduce_every_microbatch
        prefetch = fw.overlap.param_prefetch_layers if layout.overlap_param_gather else 0

        def pass_exposed(comm_per_layer: float, compute_per_layer: float) -> float:
            """A pass's wait for its layers' communication: all of it gathered on demand; with prefetch, the
            first layer's, then each layer's beyond the compute of the layers before it (prefetch 1: one layer;
            deeper: the slack pooled)."""
            if comm_per_layer <= 0:
                return 0.0
            if prefetch == 0:
                return comm_per_layer * layers
            if prefetch == 1:
                return comm_per_layer + (layers - 1) * max(0.0, comm_per_layer - compute_per_layer)
            return comm_per_layer + max(0.0, (layers - 1) * (comm_per_layer - compute_per_layer))

        fwd_exp = pass_exposed(g_l, fwd_layer) * fwd_passes
        bwd_exp = pass_exposed(bwd_gather + (rs_l if rs_each else 0.0), bwd_layer)
        last_bwd_exp = pass_exposed(bwd_gather + rs_l, bwd_layer)  # the micro-batch that reduces
        comm_mb = g_l * layers * fwd_passes + bwd_gather * layers + (rs_s if rs_each else 0.0)
        total_comm = m_count * comm_mb + (0.0 if rs_each else rs_s)
        exposed = m_count * (fwd_exp + bwd_exp) + (0.0 if rs_each else last_bwd_exp - bwd_exp)
        if layout.pp > 1 and m_count > 1 and fw.fsdp_pp_unsharded_grads and not layout.reshard_after_forward:
            # torch's pipeline stage keeps FSDP's reshard after backward and gradient sync off in every backward
            # (pipelining/stage.py backward_maybe_with_nosync, torch v2.6.0): gathered once per step, and reduced
            # by run_post_backward after the stage's last backward, none beside it (the drain's waits for every
            # stage's reduce-scatter in turn: _drain_reduce_waits, which replaces this 1/vpp of the stage's own)
            total_comm = g_l * layers + rs_s
            exposed = pass_exposed(g_l, fwd_layer) + rs_s / max(1, layout.vpp)
        elif layout.fsdp_defer_grad_reduce and m_count > 1:
            # FSDP2 with gradient sync and reshard after backward off until the last micro-batch (torchtitan's
            # fsdp_defer_gradient_reduction): gathered in the first micro-batch's forward only, and reduce-scattered
            # layer by layer in the last micro-batch's backward, beside its compute
            total_comm = g_l * layers + rs_s
            exposed = pass_exposed(g_l, fwd_layer) + pass_exposed(rs_l, bwd_layer)
        fsdp_exposed = min(total_comm, exposed)
        fsdp_hidden = total_comm - fsdp_exposed
        sharded = (dense_local if dp_group.size > 1 else 0.0) + (expert_local if edp_group.size > 1 else 0.0)
        fp8_sharded = fp8_local if dp_group.size > 1 else 0.0
        fsdp_exposed += _fsdp_copies_s(dev, fw, layout, sharded, fp8_sharded, gb, m_count)
        parts = ((dense_local, dp_group.size), (expert_local, edp_group.size))
        fsdp_exposed += _grad_predivide_s(dev, fw, gb, parts, m_count if rs_each else 1)
    shard = dp_group.size if layout.zero >= 1 else 1
    optimizer_s = stream_time_s(
        dev, (dense_local / shard + expert_local / (edp_group.size if layout.zero else 1)) * opt_bytes
    )
    return dp_s, rs_s, exposed_rs, hidden_ag, fsdp_exposed, optimizer_s, fsdp_hidden, layout.zero >= 3
