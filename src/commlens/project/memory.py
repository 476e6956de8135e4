"""Memory per GPU of a training step, stage by stage: parameters, gradients, optimizer state, activations.

Model states, per parameter held by a GPU (its TP x PP x EP share of the
stage's layers; the input embedding on the first stage, the output layer and
final norm on the last, each split over TP as vocabulary-parallel layers):

- weights: 2 B (bf16), 3 B with fp8 GEMMs (the fp8 copy beside the bf16 one); the
  linears' weights 1 B where ZeRO-3 gathers them in fp8 (``fsdp_fp8_all_gather``,
  :func:`stage_fp8_gathered`), the rest 2 B;
- gradients: ``grad_reduce_bytes`` (Megatron's main-grad buffer: fp32 4 B, or
  bf16 2 B);
- optimizer: ``optimizer_state_bytes`` (fp32 master + Adam moments: 12 B; bf16
  moments: 8 B).

ZeRO-1 shards the optimizer over the data-parallel group (x CP), ZeRO-2 also
the gradients. ZeRO-3 / FSDP keeps only shards (the fp32 master is the
sharded parameter, so no separate 16-bit copy) plus the gathered 16-bit
weights it computes with: two layers at a time (the one running and the one
prefetched) when it reshards after forward, or the whole stage when it does not
(FSDP ``reshard_after_forward=False``, ZeRO-2-like).

Activations kept for backward, per layer and token (bytes), after Korthikanti et
al. 2022 (34 h + 5 a s for the GPT layer with dropout) generalised to GQA,
SwiGLU, MoE and flash attention:

- outside the TP region (split by TP only with sequence parallelism): each of
  the two norms keeps its input (2 h) and its output, which the next GEMM keeps
  as its input (2 h; under fp8 the GEMM keeps its 1-byte fp8 copy instead, as
  Transformer Engine does): 8 h, 6 h with fp8 (the norms' outputs whole, not split by TP, where the stack's TP
  gathers them before the column-parallel linears and keeps the gathered tensor: torchtitan's DTensor TP,
  ``tp_saves_gathered_input``); dropout keeps a 1-byte mask after attention and after
  the FFN (2 h) when the model has dropout;
- inside (split by TP): Q, K, V (2 d (a + 2 g)); the attention output, kept by
  flash attention and by the output projection as one tensor (2 a d); FC1's
  outputs (gate and up: 2 x 2 f) and the activation's output (2 f; f with fp8,
  which also adds the output projection's fp8 copy of the attention output); an MoE layer
  keeps these per routed token copy, with the permuted input (2 h);
- the unfused attention core adds 5 a s (softmax output, dropout mask, dropout
  output); flash attention keeps only a 4-byte log-sum-exp per head, and
  selective recomputation drops the 5 a s.

Full recomputation keeps each layer's input (2 h, split with SP) and rebuilds
one layer at a time. With a layer count (``recompute_layers`` N, Megatron's
``--recompute-num-layers``, per model chunk: a stage, or each of its ``v`` virtual
stages), method block recomputes the first N layers of each chunk, which keep
their inputs, and the chunk's other layers keep their full activations; method
uniform checkpoints the chunk in groups of N layers, keeping only each group's
input and rebuilding a group (N layers) at a time (Megatron-Core
megatron/core/recompute.py ``checkpointed_forward`` @d98e8a6). Layers whose activations are offloaded to host memory
(``offload_activation_layers``) keep none on the device. One layer's worth of transient memory (the activations
being recomputed, or the activation gradients of the layer in backward) is
added on top. The last stage adds its logits for one micro-batch: the 16-bit
GEMM output and the fp32 copy the cross-entropy works on (6 B per logit).

Micro-batches in flight on stage ``i`` of ``p`` (Megatron-LM's schedules):
1F1B keeps ``min(m, p - i)``; interleaved with ``v`` chunks keeps the
``min(m v, 2 (p - i - 1) + (v - 1) p) + 1`` chunk activations its warm-up
leaves, each of ``1 / v`` of the stage's layers.

What a job needs from the device is the allocated peak times the caching
allocator's fragmentation (``ALLOCATOR_FRAGMENTATION``), plus what lives
outside PyTorch's allocator (``RUNTIME_BYTES``: CUDA context, cuBLAS
workspaces, NCCL buffers). It is compared with the capacity PyTorch sees
(``torch.cuda.get_device_properties().total_memory``), not the marketing
figure (an "80 GB" H100 shows 79.11 GiB = 84.9e9 B).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commlens.project.layout import ParallelLayout, Resolved
    from commlens.workload import Workload

__all__ = [
    "ALLOCATOR_FRAGMENTATION",
    "MEMORY_TOLERANCE",
    "LOGIT_BYTES",
    "UNFUSED_LOGIT_BYTES",
    "op_policy_bytes",
    "RUNTIME_BYTES",
    "activation_bytes_per_token",
    "activation_parts",
    "head_input_bytes_per_token",
    "recomputed_modules",
    "stage_recompute",
    "in_flight",
    "memory_per_gpu",
    "stage_layer_flags",
    "stage_bf16_layers",
    "stage_layer_kinds",
    "stage_memory",
    "stage_fp8_gathered",
    "mtp_activation_bytes",
    "mtp_layer_bytes_per_token",
    "hybrid_block_parts",
    "mtp_stage_parameters",
    "stage_parameters",
    "stage_root_parameters",
    "pp_peak_counts",
    "pp_retained",
    "torch_pp_order",
    "MXFP8_BOTH_LAYOUTS_BYTES",
    "NVFP4_BYTES",
    "routed_copies",
    "fp8_attention_saved_delta",
    "ep_overlap_held_bytes",
    "ep_overlap_pairs",
    "stage_fp8_params",
    "fp8_param_weight_bytes",
]

# Reserved / allocated of PyTorch's caching allocator in steady training (the frameworks' default, frameworks.yaml;
# expandable segments, as torchtitan runs, leave none): blocks cached but not in use. Documented
# in docs/project.md (memory): OOM reports of training jobs show 0.5-2 GiB reserved-but-unallocated beside 43-77 GiB
# allocated on 80 GB GPUs (about 1-3%), more when allocation sizes churn.
ALLOCATOR_FRAGMENTATION = 1.03
# A layout whose predicted peak exceeds the device by no more than the memory model's stated error (published
# figures within 10%, docs/benchmarks.md) may fit: it is projected and flagged "tight", not refused.
MEMORY_TOLERANCE = 0.10
# Device memory outside the caching allocator: CUDA context and kernels' modules (~0.5 GiB), cuBLAS/cuDNN
# workspaces, NCCL's channel buffers for each communicator (4 MiB x channels x peers). OOM reports of single-node
# jobs on H100 show 1.6-4 GiB of "non-PyTorch memory".
RUNTIME_BYTES = 2.0 * 2**30
LOGIT_BYTES = 2.0 + 4.0  # the output layer's 16-bit logits and the fp32 copy the vocabulary-parallel loss uses
# An eager cross-entropy (torch.nn.functional.cross_entropy on logits.float()): the 16-bit logits, their fp32 copy,
# the fp32 log-softmax kept for the backward, and the fp32 gradient the backward writes beside them.
UNFUSED_LOGIT_BYTES = 2.0 + 4.0 + 4.0 + 4.0


def activation_parts(w: Workload, layout: ParallelLayout, tp: int, moe: bool) -> dict[str, float]:
    """Activation bytes one layer keeps per token for backward, per GPU of its TP group, by the module that keeps
    them (Megatron-Core's recompute module names: ``layernorm``, ``core_attn``, ``mla_up_proj``, ``mlp``,
    ``moe``, ``moe_act``, ``shared_experts``; ``attention`` and ``norm_inputs`` are kept by every layer)."""
    from commlens.project.frameworks import framework

    if w.hybrid is not None:
        return _hybrid_activation_parts(w, layout, tp, moe)
    h, d, a, g = w.hidden, w.head_size, w.heads, w.kv_heads_n
    sp = layout.sp and tp > 1
    outside_div = tp if sp else 1
    # a GEMM keeps its input for the weight gradient: 16-bit, or its fp8 copy (1 B) under fp8; under NVFP4 the
    # Hadamard-transformed column-wise NVFP4 copy the weight gradient reads (Transformer Engine's NVFP4 linears keep
    # the quantized input, as for fp8) [27 s25 nvfp4]
    nvfp4 = (layout.fp8_recipe or framework(layout.framework).fp8_recipe) == "nvfp4"
    gemm_in = (NVFP4_BYTES if nvfp4 else 1.0) if w.precision == "fp8" else 2.0
    # DTensor TP (torchtitan) keeps the all-gathered norm output; Megatron-Core keeps the shard and gathers again
    gathered_div = 1 if framework(layout.framework).tp_saves_gathered_input else outside_div
    parts = {
        "norm_inputs": (4.0 * h + (2.0 * h if w.dropout else 0.0)) / outside_div,  # + dropout masks
        "layernorm": 2.0 * gemm_in * h / gathered_div,  # the norms' outputs, kept as the next GEMMs' inputs
    }
    if w.mla is None:
        parts["attention"] = (2.0 * d * (a + 2 * g) + 2.0 * a * d) / tp  # Q, K, V and the attention output
    else:  # the latents (inputs of the up-projections and their norms), expanded Q, K, V, and the output
        ml = w.mla
        latents = (ml.q_lora_rank or 0) + ml.kv_lora_rank + ml.qk_rope_head_dim
        parts["attention"] = 2.0 * 2 * latents + 2.0 * a * w.v_head_dim / tp
        parts["mla_up_proj"] = 2.0 * a * (2 * w.qk_head_dim + w.v_head_dim) / tp
        d = w.v_head_dim
    if w.precision == "fp8":
        parts["attention"] += gemm_in * a * d / tp  # the output projection's own fp8 copy of the attention output
    fc1_outputs = 2 if w.gated_ffn else 1
    m = w.moe if moe else None
    if m is not None:
        copies = routed_copies(w, layout)
        fe = m.expert_ffn_hidden
        # a latent MoE's experts read latent-wide tokens, and fc2_latent_proj keeps its latent input [27 s28 latent]
        parts["moe"] = copies * (gemm_in * m.routed_width(h) + 2.0 * fe * fc1_outputs) / tp
        if m.latent_size is not None:
            parts["moe"] += gemm_in * m.latent_size / tp
        parts["moe_act"] = copies * gemm_in * fe / tp
        parts["shared_experts"] = m.shared_experts * (2.0 * fe * fc1_outputs + gemm_in * fe) / tp
    else:
        f = w.ffn_hidden
        parts["mlp"] = (2.0 * f * fc1_outputs + gemm_in * f) / tp  # FC1 output(s) and the activation output
    parts["attention" if w.mla is None else "mla_up_proj"] += fp8_attention_saved_delta(w, layout, tp)
    if layout.flash_attention:
        parts["attention"] += 4.0 * a / tp  # log-sum-exp per query and head (fp32)
    else:
        parts["core_attn"] = 5.0 * a * w.seq_len / tp  # softmax out (2 B), dropout mask (1 B), dropout out (2 B)
    return parts


def hybrid_block_parts(w: Workload, layout: ParallelLayout, tp: int) -> dict[str, dict[str, float]]:
    """Activation bytes per token each block of a hybrid keeps (as ``activation_parts``), by its pattern symbol:
    ``M``, ``*``, ``-`` and, with experts, ``E``; each block with one pre-norm's input and output. A Mamba layer keeps
    its norm's input, in_proj's input (the norm output), in_proj's output (z, x, B, C, dt: the fused convolution and
    scan keep it and run both again in the backward), the scan's pre-gate output, the grouped norm's input and rstd,
    and the norm's output (out_proj's input)."""
    hy = w.hybrid
    assert hy is not None
    dense = activation_parts(w.model_copy(update={"hybrid": None, "moe": None}), layout, tp, False)
    one_norm = {"norm_inputs": dense["norm_inputs"] / 2, "layernorm": dense["layernorm"] / 2}
    from commlens.project.frameworks import framework

    nvfp4 = (layout.fp8_recipe or framework(layout.framework).fp8_recipe) == "nvfp4"
    gemm_in = (NVFP4_BYTES if nvfp4 else 1.0) if w.precision == "fp8" else 2.0
    d_i = hy.d_inner / tp
    # modules at their own precision (layout.module_precision, Megatron-Core's quant_recipe) keep their GEMM inputs
    # at it: bf16 two bytes, mxfp8 one [27 s29 quantrecipe]
    own = (layout.module_precision or {}) if w.precision == "fp8" else {}
    own_in = {module: 2.0 if p == "bf16" else 1.0 for module, p in own.items()}
    # in_proj's output and the scan's pre-gate output (mamba_split_conv1d_scan_combined's save_for_backward,
    # state-spaces/mamba e9594ce1 ssd_combined.py:888), the grouped norm's input and fp32 rstd a group
    # (layernorm_gated.py:360), out_proj's input
    out_in = own_in.get("mamba_out", gemm_in)
    saved = 2.0 * hy.in_proj_width(tp) + 2.0 * d_i + 2.0 * d_i + 4.0 * hy.mamba_groups / tp + out_in * d_i
    attention, attention_norm = dense, one_norm
    if own.get("attention") == "bf16":  # the attention block's linears in 16 bits: their inputs kept so
        w16 = w.model_copy(update={"hybrid": None, "moe": None, "precision": "bf16"})
        attention = activation_parts(w16, layout, tp, False)
        attention_norm = {"norm_inputs": attention["norm_inputs"] / 2, "layernorm": attention["layernorm"] / 2}
    blocks = {
        "M": {**one_norm, "mamba": saved},
        "*": {
            **attention_norm,
            **{k: v for k, v in attention.items() if k not in ("norm_inputs", "layernorm", "mlp")},
        },
        "-": {**one_norm, "mlp": dense["mlp"]},
    }
    if w.moe is not None:
        full = activation_parts(w.model_copy(update={"hybrid": None}), layout, tp, True)
        blocks["E"] = {**one_norm, **{k: v for k, v in full.items() if k in ("moe", "moe_act", "shared_experts")}}
        if w.moe.latent_size is not None and "latent" in own_in:  # fc2_latent_proj's input at its own precision
            blocks["E"]["moe"] += (own_in["latent"] - gemm_in) * w.moe.latent_size / tp
    return blocks


def _hybrid_activation_parts(w: Workload, layout: ParallelLayout, tp: int, moe: bool) -> dict[str, float]:
    """A hybrid's layer of each kind (as ``activation_parts``): an E layer, or the mean of its M, * and - layers
    (:func:`hybrid_block_parts`)."""
    hy = w.hybrid
    assert hy is not None
    blocks = hybrid_block_parts(w, layout, tp)
    if moe:
        return blocks["E"]
    kinds = [(count, blocks[sym]) for sym, count in hy.dense_mix()]  # the model's blocks, or a stage's
    n = sum(c for c, _ in kinds)
    out: dict[str, float] = {}
    for count, parts in kinds:
        for key, v in parts.items():
            out[key] = out.get(key, 0.0) + v * count / n
    return out


def head_input_bytes_per_token(w: Workload, layout: ParallelLayout, tp: int) -> float:
    """Bytes per token the last stage's head keeps for its backward beside the logits, per GPU of its TP group: the
    final norm's input (16-bit, split by TP only with sequence parallelism) and the output projection's input, the
    norm's output, which it keeps for its weight gradient (16-bit: the output layer stays bf16 under fp8, see
    ``fp8_output_layer``). Neither is inside a transformer layer, so no layer or recomputation counts them; both live
    from the micro-batch's forward to its backward through the head. Where the stack's TP gathers the norm output
    before the column-parallel projection and keeps the gathered tensor (``tp_saves_gathered_input``: torchtitan's
    apply_tp at 9dec370 wraps ``output`` in ColwiseParallel(input_layouts=Shard(1)) and ``norm`` in
    SequenceParallel(), so F.linear saves the all-gathered input), it is whole; else the shard (Megatron-Core's
    ColumnParallelLinear under sequence parallelism saves its shard and gathers again in the backward)."""
    from commlens.project.frameworks import framework

    sp_div = tp if (layout.sp and tp > 1) else 1
    gathered_div = 1 if framework(layout.framework).tp_saves_gathered_input else sp_div
    return 2.0 * w.hidden / sp_div + 2.0 * w.hidden / gathered_div


def recomputed_modules(layout: ParallelLayout) -> frozenset[str]:
    """The modules selective recomputation redoes: the layout's, or the framework's default (Megatron-Core: the
    attention core; torchtitan: its op-level policy, ``op``)."""
    if layout.recompute != "selective":
        return frozenset()
    from commlens.project.frameworks import framework

    return frozenset(layout.recompute_modules or framework(layout.framework).selective_default)


def op_policy_bytes(w: Workload, layout: ParallelLayout, tp: int, moe: bool) -> float:
    """Bytes per token one layer keeps under torchtitan's op-level selective checkpointing (``op``; see
    ``commlens.project.kernels.OP_POLICY``): the block's input, the attention kernel's output and log-sum-exp, and
    the outputs of the odd matmuls in call order (Q, V, gate, down; K, the output projection and up are
    recomputed)."""
    h, a, g, d = w.hidden, w.heads, w.kv_heads_n, w.head_size
    sp = layout.sp and tp > 1
    out = 2.0 * h / (tp if sp else 1)  # block input
    out += (2.0 * a * d + 4.0 * a) / tp  # SDPA out, lse
    out += (2.0 * a * d + 2.0 * max(g / tp, 1.0) * tp * d) / tp  # Q, V
    if moe and w.moe is not None:
        m = w.moe
        return out + m.top_k * (m.capacity_factor or 1.0) * 2.0 * m.expert_ffn_hidden / tp  # experts' gate outputs
    # gate projection's output; down projection's output (the matmul's, before its reduce-scatter under TP)
    return out + 2.0 * w.ffn_hidden / tp + 2.0 * h


def activation_bytes_per_token(w: Workload, layout: ParallelLayout, tp: int, moe: bool) -> float:
    """Activation bytes one layer keeps per token for backward (per GPU of its TP group), with selective
    recomputation's modules dropped (full recomputation is handled by the caller)."""
    dropped = recomputed_modules(layout) if layout.recompute == "selective" else frozenset()
    if "op" in dropped:
        return op_policy_bytes(w, layout, tp, moe)
    if layout.recompute == "full":  # one layer rebuilt at a time, its attention core kernel by kernel
        dropped = frozenset({"core_attn"})
    return sum(v for k, v in activation_parts(w, layout, tp, moe).items() if k not in dropped)


def in_flight(stage: int, pp: int, vpp: int, micro_batches: int, schedule: str | None = None) -> float:
    """Micro-batches' worth of a stage's activations alive at its peak (in units of the whole stage).

    1F1B keeps ``min(m, p - i)``; interleaved keeps its warm-up's chunks; GPipe every micro-batch; zero-bubble
    (ZB-H1) as 1F1B; DualPipe holds both directions' micro-batches, ``p + 1`` (Table 2 of the DeepSeek-V3 report)."""
    if pp == 1:
        return 1.0
    if schedule == "gpipe":
        return float(micro_batches)
    if schedule == "dualpipe":
        return float(min(micro_batches, pp + 1))
    if vpp == 1:
        return float(min(micro_batches, pp - stage))
    # Megatron's interleaved warm-up runs this many chunk forwards before the first backward; with fewer
    # micro-batch chunks than that, all of them are in flight and no more
    warmup = 2 * (pp - stage - 1) + (vpp - 1) * pp
    chunks = min(micro_batches * vpp, warmup + 1)
    return chunks / vpp


def stage_hybrid_blocks(w: Workload, r: Resolved) -> list[str]:
    """A hybrid's pattern symbols on every pipeline stage, first to last, as Megatron-Core gives them out
    (hybrid_layer_allocation.py ``select_pipeline_segment`` at d98e8a64): with one model chunk a stage, each stage the
    next ``stage_layers`` symbols; with VPP, the pattern cut into PP x VPP segments (each stage's ``chunk_layers``)
    taken in the interleaved order, segment ``v x PP + rank`` to stage ``rank`` as its chunk ``v`` (Megatron-Core
    runs VPP only on a pattern whose '|' separators cut it so; the segments here are even); a pattern with '|'
    separators gives each stage its segments as written (``Hybrid.segments``) [27 s29 hybridpp] [27 s29 hybridpipe]."""
    assert w.hybrid is not None
    segments = w.hybrid.segments
    if segments is not None:  # cut by the pattern's '|' separators: PP x VPP of them (layout.resolve checks)
        return ["".join(segments[v * r.pp + rank] for v in range(r.vpp)) for rank in range(r.pp)]
    pattern = w.hybrid.layer_symbols
    chunks = [chunk_layers(n, r.vpp) for n in r.stage_layers]
    out, start = [""] * len(chunks), 0
    for v in range(r.vpp):
        for rank, sizes in enumerate(chunks):
            out[rank] += pattern[start : start + sizes[v]]
            start += sizes[v]
    return out


# stage_views' last answers, by (id(workload), PP, VPP, stage layers), each with the workload it was made for (an id
# is only reused once its object is gone, and the entry keeps it alive); cleared when full
_VIEWS: dict[tuple[int, int, int, tuple[int, ...]], tuple[Workload, list[Workload]]] = {}
_VIEWS_MAX = 256


def stage_views(w: Workload, r: Resolved) -> list[Workload]:
    """The workload as each pipeline stage sees its dense layer kind: a hybrid's stage with its own blocks' mean
    (``Hybrid.for_blocks``) where PP > 1, one view per mix of M, * and - blocks (stages of one mix share it: the
    callers price a view once); otherwise ``w`` itself, every stage [27 s29 hybridpp]."""
    if w.hybrid is None or r.pp == 1:
        return [w] * r.pp
    key = (id(w), r.pp, r.vpp, tuple(r.stage_layers))
    hit = _VIEWS.get(key)
    if hit is not None and hit[0] is w:
        return hit[1]
    by_mix: dict[tuple[int, ...], Workload] = {}
    views = []
    for blocks in stage_hybrid_blocks(w, r):
        mix = tuple(blocks.count(sym) for sym in "M*-")
        if mix not in by_mix:
            canonical = "".join(sym * n for sym, n in zip("M*-", mix, strict=True))
            by_mix[mix] = w.model_copy(update={"hybrid": w.hybrid.for_blocks(canonical)})
        views.append(by_mix[mix])
    if len(_VIEWS) >= _VIEWS_MAX:
        _VIEWS.clear()
    _VIEWS[key] = (w, views)
    return views


def stage_layer_flags(w: Workload, r: Resolved) -> list[list[bool]]:
    """Whether each layer of every stage is an MoE layer, stage by stage, first to last (the stages' layers taken
    in order: ``Workload.moe_layer_flags`` cut at ``stage_layers``; a hybrid's as :func:`stage_hybrid_blocks` gives
    them out)."""
    if w.hybrid is not None:
        return [[c == "E" for c in blocks] for blocks in stage_hybrid_blocks(w, r)]
    flags, out, start = w.moe_layer_flags, [], 0
    for n in r.stage_layers:
        out.append(flags[start : start + n])
        start += n
    return out


def stage_bf16_layers(w: Workload, layout: ParallelLayout, r: Resolved) -> list[tuple[int, int]]:
    """(dense, MoE) layers of every stage that run in 16 bits under fp8 precision (``bf16_layers_start`` /
    ``bf16_layers_end``: Megatron-Core's first_last_layers_bf16, whose fp8 / fp4 context is a null one for a layer
    number below num_layers_at_start_in_bf16 or at or past layers - num_layers_at_end_in_bf16, megatron/core
    fp8_utils.py / fp4_utils.py at d98e8a64). The stages hold their layers in order, as :func:`stage_layer_kinds`
    counts them (under VPP a stage's chunks are interleaved; the first layers are still the first stage's, the last
    the last stage's, while the count stays within one chunk) [27 s25 bf16layers]."""
    start, end = layout.bf16_layers_start, layout.bf16_layers_end
    if w.precision != "fp8" or not (start or end):
        return [(0, 0)] * len(r.stage_layers)
    flags = w.moe_layer_flags
    kept = [i < start or i >= w.layers - end for i in range(w.layers)]
    out, first = [], 0
    for n in r.stage_layers:
        idx = range(first, min(first + n, w.layers))
        out.append((sum(kept[i] and not flags[i] for i in idx), sum(kept[i] and flags[i] for i in idx)))
        first += n
    return out


def stage_layer_kinds(w: Workload, r: Resolved) -> list[tuple[int, int]]:
    """(dense, MoE) transformer layers of every stage, first to last (which layers are MoE:
    ``Workload.moe_layer_flags``: the last ones from ``first_moe_layer`` on, or every ``every``-th of them)."""
    total, moe = w.layers, w.moe
    if moe is None and sum(r.stage_layers) <= total:
        return [(n, 0) for n in r.stage_layers]
    if w.hybrid is not None:  # a hybrid's E layers sit where its pattern puts them
        return [(len(f) - sum(f), sum(f)) for f in stage_layer_flags(w, r)]
    first, every = (moe.first_moe_layer, moe.every) if moe is not None else (total, 1)
    out, start, before = [], 0, 0  # before: MoE layers among the model's first `start` (counted, not listed)
    for n in r.stage_layers:
        end = min(start + n, total)
        upto = max(0, end - first) // every
        out.append((max(0, end - start) - (upto - before), upto - before))  # layers past the model's end are none
        start, before = start + n, upto
    return out


def chunk_layers(n: int, vpp: int) -> list[int]:
    """A stage's ``n`` layers by model chunk (its ``vpp`` virtual stages), first to last."""
    base, extra = divmod(n, vpp)
    return [base + (j < extra) for j in range(vpp)]


def stage_recompute(w: Workload, layout: ParallelLayout, r: Resolved) -> list[tuple[int, int, int, int]]:
    """Full recomputation per stage, first to last: (dense layers recomputed, MoE layers recomputed, layer inputs
    kept as checkpoints, layers rebuilt at once), as Megatron-Core's ``checkpointed_forward`` runs each model
    chunk (megatron/core/recompute.py @d98e8a6; N = ``recompute_layers``, per chunk since each virtual stage is
    its own TransformerBlock): block checkpoints the first N layers of the chunk one at a time and runs the rest
    unchecked; uniform checkpoints the chunk in groups of N layers (every layer recomputed, each group rebuilt
    whole from its input). Without a count every layer is its own checkpoint. A stage's layers are taken in order
    (:func:`stage_layer_flags`), its chunks in order. None recomputed without full recomputation."""
    out = []
    n_rc, method = layout.recompute_layers, layout.recompute_method or "block"
    for flags in stage_layer_flags(w, r):
        n, moe_n = len(flags), sum(flags)
        dense_n = n - moe_n
        if layout.recompute != "full":
            out.append((0, 0, 0, 0))
        elif n_rc is None:
            out.append((dense_n, moe_n, n, 1))
        elif method == "uniform":
            chunks = chunk_layers(n, r.vpp)
            out.append((dense_n, moe_n, sum(-(-c // n_rc) for c in chunks), min(n_rc, max(chunks))))
        else:  # block: the first N of each chunk, at positions start .. start + N of the stage's layers
            start, dense_rc, rc = 0, 0, 0
            for c in chunk_layers(n, r.vpp):
                k = min(n_rc, c)
                rc += k
                dense_rc += k - sum(flags[start : start + k])
                start += c
            out.append((dense_rc, rc - dense_rc, rc, 1 if rc else 0))
    return out


def stage_parameters(w: Workload, r: Resolved, schedule: str | None = None) -> list[tuple[float, float]]:
    """(dense, expert) parameters per GPU of every stage (the last with its multi-token prediction modules:
    :func:`mtp_stage_parameters`; ``schedule``: the layout's pipeline schedule), counted once for a workload and
    its resolved layout (a projection asks several times)."""
    key = (id(w), id(r), schedule)
    hit = _PARAMS.get(key)
    if hit is not None and hit[0] is w and hit[1] is r:
        return list(hit[2])
    out = _stage_parameters(w, r, schedule)
    if len(_PARAMS) >= _VIEWS_MAX:
        _PARAMS.clear()
    _PARAMS[key] = (w, r, tuple(out))
    return out


# stage_parameters' answers by (id(workload), id(resolved), schedule), each kept with the objects it was made for
_PARAMS: dict[tuple[int, int, str | None], tuple[Workload, Resolved, tuple[tuple[float, float], ...]]] = {}


def _stage_parameters(w: Workload, r: Resolved, schedule: str | None) -> list[tuple[float, float]]:
    """:func:`stage_parameters`, counted."""
    moe_dense_layer = w.layer_dense_parameters(True)
    expert_layer = w.parameter_counts()["experts"] / w.moe_layers if w.moe_layers else 0.0
    out = []
    kinds, roots = stage_layer_kinds(w, r), stage_root_parameters(w, r)
    per_view: dict[int, float] = {}  # a dense layer's parameters as each view sees it, once a view
    for (dense_n, moe_n), root, view in zip(kinds, roots, stage_views(w, r), strict=True):
        if id(view) not in per_view:
            per_view[id(view)] = view.layer_dense_parameters(False)
        dense = dense_n * per_view[id(view)] + moe_n * moe_dense_layer
        out.append((dense / r.tp + root, moe_n * expert_layer / (r.ep * r.expert_tp)))
    if w.mtp_layers:
        mtp_dense, mtp_expert = mtp_stage_parameters(w, r, schedule)
        out[-1] = (out[-1][0] + mtp_dense, out[-1][1] + mtp_expert)
    return out


def mtp_stage_parameters(w: Workload, r: Resolved, schedule: str | None = None) -> tuple[float, float]:
    """(dense, expert) parameters per GPU that the ``mtp_layers`` multi-token prediction modules add to the last
    pipeline stage, where the stacks place them (Megatron-LM 0d8e0714 megatron/core/transformer/
    multi_token_prediction.py ``mtp_on_this_rank``: the last stage without a custom layout, and the Megatron-Bridge
    DeepSeek-V3 recipes' layouts end with ``["mtp", "loss"]``; torchtitan's 256-GPU DeepSeek-V3 configs
    ``_historical_sanket_mtp1_stage_modules``: ``mtp_layers.0`` on the final stage): each module's own parameters
    (``Workload.mtp_parameter_counts``; experts over EP), and with PP an embedding replica, since each module embeds
    the next tokens itself (``_get_embeddings``; gpt_model.py builds a ``LanguageModelEmbedding`` on the MTP stage and
    ties it to the first stage's; torchtitan's final stage lists ``tok_embeddings``). DualPipe holds the first and
    the last layers on one rank and shares that embedding physically (DeepSeek-V3 report Sec. 3.2.3): no replica."""
    c = w.mtp_parameter_counts()
    dense = sum(v for k, v in c.items() if k != "experts") / r.tp
    if r.pp > 1 and schedule != "dualpipe" and not w.tied_embeddings:  # tied: the last stage's head is it
        dense += w.vocab * w.hidden / r.tp
    return dense, c["experts"] / (r.ep * r.expert_tp)


def stage_root_parameters(w: Workload, r: Resolved) -> list[float]:
    """Parameters per GPU of every stage outside its transformer layers: the input embedding on the first stage, the
    final norm and output layer on the last (split over TP)."""
    embed = w.vocab * w.hidden
    out = []
    for i in range(r.pp):
        root = embed if i == 0 else 0.0
        if i == r.pp - 1:
            root += w.hidden + (embed if (not w.tied_embeddings or r.pp > 1) else 0.0)
        out.append(root / r.tp)
    return out


def mtp_layer_bytes_per_token(w: Workload, layout: ParallelLayout, tp: int) -> float:
    """Activation bytes per token of one multi-token prediction module's layer: a layer like the model's last, or in a
    hybrid an attention block and an E block (an MLP block without experts), Megatron-Core's MTP pattern '*E' of
    Nemotron 3 (multi_token_prediction.py at cd4afffa: a HybridStack of the MTP pattern), with selective
    recomputation's modules dropped as :func:`activation_bytes_per_token` drops them."""
    if layout.mtp_bf16:  # kept out of the fp8 autocast: its GEMM inputs in 16 bits
        w = w.model_copy(update={"precision": "bf16"})
    if w.hybrid is None:
        return activation_bytes_per_token(w, layout, tp, w.mtp_moe)
    dropped = recomputed_modules(layout) if layout.recompute == "selective" else frozenset()
    blocks = hybrid_block_parts(w, layout, tp)
    second = blocks["E" if w.moe is not None else "-"]
    return sum(v for k, v in (*blocks["*"].items(), *second.items()) if k not in dropped)


def mtp_activation_bytes(w: Workload, layout: ParallelLayout, r: Resolved, logit_bytes: float) -> float:
    """Activation bytes per GPU that the ``mtp_layers`` modules add to the last stage: each module's transformer
    layer as the main layers keep theirs, and the tensors its own ops keep (the two norms' inputs, the concatenated
    2h input of ``eh_proj``, the final norm's input: 10 h bytes a token, 16 bits each; Megatron-LM 0d8e0714
    multi_token_prediction.py ``_concat_embeddings``/``_postprocess``); under full recomputation the module is one
    checkpoint (``_checkpointed_forward`` of ``_proj_and_transformer_layer`` whenever ``recompute_granularity`` is
    full), keeping its two h inputs. Plus each module's logits beside the main ones (gpt_model.py
    ``_postprocess``: the MTP losses are computed, and their logits kept for the backward, before the main
    model's). For one micro-batch, as the output layer's logits: the modules are in the pipeline's last model chunk,
    which runs each micro-batch's backward right after its forward (1F1B: ``in_flight`` of the last stage is 1;
    interleaved: the last rank's warm-up runs only earlier chunks, (v - 1) p forwards; DualPipe's PP + 1 is PP
    micro-batches on a rank's first chunk and one on its last, DeepSeek-V3 report Table 2); GPipe keeps them all."""
    tokens = w.micro_batch * w.seq_len / r.cp
    split = r.tp if layout.sp and r.tp > 1 else 1
    live = float(r.micro_batches) if layout.schedule == "gpipe" and r.pp > 1 else 1.0
    if layout.recompute == "full":
        per_token = 2 * 2.0 * w.hidden / split
    else:
        per_token = mtp_layer_bytes_per_token(w, layout, r.tp) + 10.0 * w.hidden / split
    logits = tokens * w.vocab / r.tp * logit_bytes
    return w.mtp_layers * (tokens * per_token * live + logits)


def stage_fp8_gathered(w: Workload, layout: ParallelLayout, r: Resolved) -> list[float]:
    """Parameters per GPU of every stage that ZeRO-3/FSDP gathers in fp8 (``fsdp_fp8_all_gather`` with fp8 precision;
    else none): the blocks' linear weights, which torchao's Float8Linear holds as ``WeightWithDynamicFloat8CastTensor``
    (pytorch/ao eab345c torchao/float8/float8_linear.py ``from_float``; fsdp_utils.py ``fsdp_pre_all_gather`` casts the
    shard to fp8 and gathers its bytes, ``fsdp_post_all_gather`` wraps the gathered bytes as a ``Float8Tensor`` that
    ``cast_weight_to_float8_t`` uses as it is). Attention's projections and a dense layer's FFN; not the embedding,
    the norms or the output projection (torchtitan's float8 filter), nor routed experts (not ``nn.Linear``)."""
    if not (layout.fsdp_fp8_all_gather and layout.zero >= 3 and w.precision == "fp8"):
        return [0.0] * r.pp
    # an MoE layer's attention (its shared experts are gathered in bf16, as the routed ones); a hybrid's E layer none
    moe = w.attention_parameters if w.hybrid is None else 0.0
    return [
        (dense_n * view.layer_linear_parameters(False) + moe_n * moe) / r.tp
        for (dense_n, moe_n), view in zip(stage_layer_kinds(w, r), stage_views(w, r), strict=True)
    ]


def torch_pp_order(rank: int, pp: int, vpp: int, micro_batches: int) -> list[tuple[bool, int]]:
    """A rank's passes under torch.distributed.pipelining (v2.6.0 schedules.py), as (is forward, local chunk):
    Schedule1F1B runs ``min(m, p - i)`` forwards, then a backward and a forward in turn, then the backwards;
    ScheduleInterleaved1F1B runs ``min((v - 1) r + 2 (p - 1 - i), m v)`` forwards (``r`` micro-batches a round,
    ``m // max(1, m // p)``), chunk ``(k // r) mod v`` for the k-th, then a forward and a backward in turn (the
    backward's chunk ``v - 1 - ((k - warm-up) // r) mod v``), then the backwards."""
    if vpp == 1:
        warmup = min(micro_batches, pp - rank)
        order = [(True, 0)] * warmup
        for _ in range(micro_batches - warmup):
            order += [(False, 0), (True, 0)]
        return order + [(False, 0)] * warmup
    per_round = micro_batches // max(1, micro_batches // pp)
    total = micro_batches * vpp
    warmup = min((vpp - 1) * per_round + 2 * (pp - 1 - rank), total)
    order = []
    for k in range(total + warmup):
        if k < total:
            order.append((True, (k // per_round) % vpp))
        if k >= warmup:
            order.append((False, vpp - 1 - ((k - warmup) // per_round) % vpp))
    return order


def pp_peak_counts(rank: int, pp: int, vpp: int, micro_batches: int) -> list[tuple[int, int, int]]:
    """Per local chunk of a rank, (forwards run, backwards run, micro-batches in flight) at the last backward with
    the most chunks in flight in :func:`torch_pp_order`: the backward where the activations peak and the most that
    torch's pipelining keeps until the step's end has piled up (it only grows). Every forward has run by then (the
    last steady op, or the first backward when the warm-up runs them all); the backwards run before it are the
    first ``m v - most in flight`` of the order, ``r`` a chunk in turn from the last chunk down."""
    total = micro_batches * vpp
    if vpp == 1:
        most = min(micro_batches, pp - rank)  # 1F1B runs its steady backward before the forward
    else:
        per_round = micro_batches // max(1, micro_batches // pp)
        warmup = min((vpp - 1) * per_round + 2 * (pp - 1 - rank), total)
        most = min(warmup + 1, total)  # a steady op runs its forward before its backward
        groups, rest = divmod(total - most, per_round)
    out = []
    for j in range(vpp):
        if vpp == 1:
            done = total - most
        else:  # backward b runs chunk vpp - 1 - (b // per_round) % vpp
            turn = vpp - 1 - j
            done = per_round * (groups // vpp + (turn < groups % vpp)) + (rest if groups % vpp == turn else 0)
        out.append((micro_batches, done, micro_batches - done))
    return out


def pp_retained(w: Workload, layout: ParallelLayout, r: Resolved, tokens: float, boundary: float) -> list[float]:
    """Bytes per GPU of every stage that torch.distributed.pipelining keeps beside the activations counted per
    micro-batch in flight (``pp_recv_buffers``, ``pp_retained_outputs``; 1F1B and interleaved, torch v2.6.0
    2236df17 torch/distributed/pipelining/stage.py, the same in 2.7-2.9 except where said):

    1. ``_prepare_forward_infra`` and ``_prepare_backward_infra`` allocate a receive buffer for every
       micro-batch's input (all but the first stage) and output gradient (all but the last), once, and keep them;
       an input buffer in flight is the first layer's kept input, already counted.
    2. ``stage_backward`` (_backward.py) accumulates the input's gradient into its buffer's ``.grad``, which
       ``clear_runtime_states`` drops only at the next ``step()``: one per micro-batch already backwarded.
    3. ``forward_one_chunk`` appends each output to ``output_chunks``, cleared at the next ``step()``: every
       stage's (2.6-2.7), or only the last stage's, its 16-bit logits (2.8+; the others' outputs are kept by
       ``fwd_cache`` until their backward). The logits of the micro-batch in backward are counted already.

    A stage boundary is ``boundary`` bytes (one micro-batch's hidden state per GPU), counted at
    :func:`pp_peak_counts`' backward. Other schedules (GPipe, zero-bubble, DualPipe) are not priced."""
    from commlens.project.frameworks import framework

    fw = framework(layout.framework)
    schedule = layout.schedule or ("interleaved" if r.vpp > 1 else "1f1b")
    if (
        r.pp == 1
        or schedule not in ("1f1b", "interleaved")
        or (not fw.pp_recv_buffers and fw.pp_retained_outputs == "none")
    ):
        return [0.0] * r.pp
    m, p, v = r.micro_batches, r.pp, r.vpp
    logits = tokens * w.vocab / r.tp * 2.0
    out = []
    for rank in range(p):
        kept = 0.0
        for j, (fwd, bwd, live) in enumerate(pp_peak_counts(rank, p, v, m)):
            stage = j * p + rank  # global stage of the local chunk (looped placement)
            last = stage == p * v - 1
            if fw.pp_recv_buffers:
                kept += (m - live + bwd) * boundary if stage else 0.0  # idle input buffers, input gradients
                kept += 0.0 if last else m * boundary  # output-gradient buffers
            if last and fw.pp_retained_outputs != "none":
                kept += (fwd - 1) * logits  # the micro-batch in backward: the logits counted per stage
            elif not last and fw.pp_retained_outputs == "all":
                kept += fwd * boundary
            elif not last and fw.pp_retained_outputs == "last":
                kept += live * boundary  # fwd_cache keeps the output until its backward
        out.append(kept)
    return out


def _dense_bytes(
    views: list[Workload], layout: ParallelLayout, tp: int, need16: bool, partial: bool
) -> dict[int, tuple[float, float, float]]:
    """The dense layer kind's bytes per token as each stage sees it (a hybrid stage's own blocks:
    :func:`stage_views`), once a view, by ``id(view)``: kept for backward, kept in 16 bits beyond that (``need16``:
    layers kept out of fp8), and everything it makes (``partial``: layers a recompute count leaves unrecomputed)."""
    out: dict[int, tuple[float, float, float]] = {}
    for view in views:
        if id(view) in out:
            continue
        act = activation_bytes_per_token(view, layout, tp, False)
        d16 = 0.0
        if need16:
            d16 = activation_bytes_per_token(view.model_copy(update={"precision": "bf16"}), layout, tp, False) - act
        kept_all = sum(activation_parts(view, layout, tp, False).values()) if partial else 0.0
        out[id(view)] = (act, d16, kept_all)
    return out


def stage_memory(w: Workload, layout: ParallelLayout, r: Resolved) -> list[dict[str, float]]:
    """Bytes per GPU of every pipeline stage, by kind, with ``total`` (allocated peak) and ``reserved``."""
    from commlens.project.frameworks import framework, loss_fused

    fw = framework(layout.framework)
    dp_shard = r.dp * r.cp
    edp_shard = max(1, dp_shard * r.tp // (r.ep * r.expert_tp))
    weight_bytes = 3.0 if w.precision == "fp8" else 2.0
    grad_bytes = float(layout.grad_reduce_bytes)
    opt_bytes = layout.optimizer_state_bytes
    zero = layout.zero
    sp = layout.sp and r.tp > 1
    tokens = w.micro_batch * w.seq_len / r.cp
    moe_share = w.moe_layers / w.layers
    moe_act = activation_bytes_per_token(w, layout, r.tp, True) if w.moe_layers else 0.0
    bf16_layers = stage_bf16_layers(w, layout, r)  # [27 s25 bf16layers] their GEMM inputs kept in 16 bits
    need16 = any(map(any, bf16_layers))
    moe_16 = 0.0  # what one such layer keeps beyond its fp8 run, per token
    if need16 and w.moe_layers:
        moe_16 = activation_bytes_per_token(w.model_copy(update={"precision": "bf16"}), layout, r.tp, True) - moe_act
    # a layer count other than uniform's groups of one (every layer its own checkpoint, as without a count)
    partial = layout.recompute == "full" and layout.recompute_layers is not None
    partial = partial and (layout.recompute_method != "uniform" or layout.recompute_layers != 1)
    views = stage_views(w, r)
    dense = _dense_bytes(views, layout, r.tp, need16, partial) if moe_share < 1 else {}
    layer_input = 2.0 * w.hidden / (r.tp if sp else 1)
    logit_bytes = LOGIT_BYTES if loss_fused(fw, layout.compile, layout.compile_loss) else UNFUSED_LOGIT_BYTES
    params = stage_parameters(w, r, layout.schedule)
    fp8_gathered = stage_fp8_gathered(w, layout, r)
    fp8_params = stage_fp8_params(w, layout, r)
    overlap_held = ep_overlap_held_bytes(w, layout, r.tp)
    retained = pp_retained(w, layout, r, tokens, tokens * layer_input)
    roots = stage_root_parameters(w, r)
    if partial:  # the layers a count leaves unrecomputed keep everything (Megatron runs them unchecked)
        recompute = stage_recompute(w, layout, r)
        moe_all = sum(activation_parts(w, layout, r.tp, True).values()) if w.moe_layers else 0.0
    stages = []
    for i, (dense_n, moe_n) in enumerate(stage_layer_kinds(w, r)):
        n = dense_n + moe_n
        dense_act, dense_16, dense_all = dense.get(id(views[i]), (0.0, 0.0, 0.0))
        dense_p, expert_p = params[i]
        shard_states = dense_p / dp_shard + expert_p / edp_shard
        full = dense_p + expert_p
        if layout.schedule == "dualpipe":  # two copies of every stage's parameters (both directions)
            dense_p, expert_p = 2 * dense_p, 2 * expert_p
            shard_states = dense_p / dp_shard + expert_p / edp_shard
            full = dense_p + expert_p
        weights_shard = weight_bytes * shard_states  # ZeRO-3's 16-bit shard (model states as ZeRO counts them)
        if zero >= 3:
            window = 1.0 if not layout.reshard_after_forward else min(1.0, 2.0 / max(n, 1))
            gathered = full * window
            if fw.zero3_live_params and layout.reshard_after_forward:  # DeepSpeed: submodule by submodule
                largest = max(w.hidden * w.ffn_hidden, w.hidden * w.heads * w.head_size) / r.tp
                gathered = min(gathered, max(fw.zero3_live_params, largest))
            weights = weight_bytes * gathered
            if fp8_gathered[i]:  # gathered as fp8 and used so: 1 B each, no 16-bit copy; the rest 16-bit
                in_fp8 = min(gathered, fp8_gathered[i] * window * (2 if layout.schedule == "dualpipe" else 1))
                weights = in_fp8 + 2.0 * (gathered - in_fp8)
            if fw.fsdp_root_unsharded and layout.reshard_after_forward and layout.schedule != "dualpipe":
                weights += 2.0 * roots[i] * (1.0 - window)  # the root's 16-bit parameters stay gathered the step
            grads = grad_bytes * shard_states
            deferred = layout.fsdp_defer_grad_reduce or (r.pp > 1 and fw.fsdp_pp_unsharded_grads)
            if r.micro_batches > 1 and deferred:
                # accumulated unsharded until the last micro-batch's reduce-scatter, in the reduce dtype; the
                # routed experts in the stack's own dtype for them, not at all where the stack leaves them out of FSDP
                ignored = edp_shard == 1 and fw.fsdp_ignores_ep_sharded_experts
                expert_acc = 0.0 if ignored else fw.fsdp_expert_grad_bytes
                grads += fw.fsdp_accum_bytes(layout.grad_reduce_bytes) * dense_p + expert_acc * expert_p
            optimizer = opt_bytes * shard_states
        else:
            weights = weights_shard = weight_bytes * full
            if fp8_params[i]:  # fp8 weights in place of the 16-bit copy and its fp8 cache
                weights = weights_shard = fp8_param_weight_bytes(w, layout, full, fp8_params[i])
            grads = grad_bytes * (shard_states if zero >= 2 else full)
            optimizer = opt_bytes * (shard_states if zero >= 1 else full)
        per_token = dense_n * dense_act + moe_n * moe_act  # the stage's layers, no recomputation
        per_token += bf16_layers[i][0] * dense_16 + bf16_layers[i][1] * moe_16
        one_layer = max(dense_act if dense_n else 0.0, moe_act if moe_n else 0.0)
        live = in_flight(i, r.pp, r.vpp, r.micro_batches, layout.schedule)
        if layout.offload_activation_layers and n:  # offloaded layers keep nothing on the device between passes
            per_token *= max(0, n - layout.offload_activation_layers) / n
        if partial:
            dense_rc, moe_rc, inputs, rebuilt = recompute[i]
            stored_n = (dense_n - dense_rc, moe_n - moe_rc)
            kept_token = inputs * layer_input + stored_n[0] * dense_all + stored_n[1] * moe_all
            if layout.offload_activation_layers and n:
                kept_token *= max(0, n - layout.offload_activation_layers) / n
            kept = tokens * kept_token * live
            # the layers being rebuilt and one layer's activation gradients, or an unrecomputed layer's gradients
            stored_one = max(dense_all if stored_n[0] else 0.0, moe_all if stored_n[1] else 0.0)
            rebuilt_one = max(dense_act if dense_rc else 0.0, moe_act if moe_rc else 0.0)
            transient = tokens * max((rebuilt + 1) * rebuilt_one, stored_one)
        elif layout.recompute == "full":
            kept = tokens * max(0, n - layout.offload_activation_layers) * layer_input * live
            transient = 2.0 * tokens * one_layer  # the layer being recomputed and its activation gradients
        else:
            kept = tokens * per_token * live
            transient = tokens * one_layer
        if overlap_held and moe_n and ep_overlap_pairs(i, r.pp, r.vpp, r.micro_batches):
            transient += tokens * overlap_held  # the paired backward layer's attention side beside a forward layer
        logits = tokens * w.vocab / r.tp * logit_bytes if i == r.pp - 1 else 0.0
        logits += tokens * head_input_bytes_per_token(w, layout, r.tp) if i == r.pp - 1 else 0.0
        if i == r.pp - 1 and w.mtp_layers:
            logits += mtp_activation_bytes(w, layout, r, logit_bytes)
        activations = kept + transient + logits + retained[i]
        total = weights + grads + optimizer + activations
        stages.append(
            {
                "weights": weights,
                "weights_shard": weights_shard,
                "gradients": grads,
                "optimizer": optimizer,
                "activations": activations,
                "total": total,
                "reserved": total * fw.allocator_fragmentation + RUNTIME_BYTES,
                "layers": float(n),
                "in_flight": live,
            }
        )
    return stages


def memory_per_gpu(w: Workload, layout: ParallelLayout, r: Resolved) -> dict[str, float]:
    """Bytes per GPU of the stage that needs the most, by kind (``weights``, ``gradients``, ``optimizer``,
    ``activations``), ``total`` (allocated peak), ``reserved`` (what the device must hold) and ``stage``."""
    stages = stage_memory(w, layout, r)
    worst = max(range(len(stages)), key=lambda i: stages[i]["reserved"])
    out = {k: stages[worst][k] for k in ("weights", "gradients", "optimizer", "activations", "total", "reserved")}
    out["stage"] = float(worst)
    return out


# [27 s9 memmoe] What Megatron-Core's MoE settings of session 9 keep on the device.
# MXFP8 data and its E8M0 scales (one byte per 32 values) in both layouts, rowwise and columnwise.
MXFP8_BOTH_LAYOUTS_BYTES = 2.0 + 2.0 / 32
# one NVFP4 copy of an element: 4 bits of data and its share of an E4M3 scale per 16 elements [27 s25 nvfp4]
NVFP4_BYTES = 0.5 + 1.0 / 16


def routed_copies(w: Workload, layout: ParallelLayout) -> float:
    """Rows of the routed experts' tensors per token: top-k x the capacity factor of drop-and-pad, or under
    HybridEP's static rank budget (``moe_expert_capacity``) top-k x that factor, since the dispatch writes into a
    permuted-token buffer of ``tokens x top-k x factor`` rows whatever the routing (Megatron-LM cd4afffa
    token_dispatcher.py ``_HybridEPManager.setup_metadata``: ``budget = padded_num_tokens x moe_router_topk x
    moe_expert_rank_capacity_factor``, rounded up to the fp8 alignment, passed as ``num_permuted_tokens``), and the
    fused grouped MLP runs on that static shape. DeepSeek's recipes also set ``moe_paged_stash``, which copies the
    saved tensors into pages sized from the average count x 1.2 (paged_stash.py ``allocate_stash_buffers``); the
    layout does not state it, so the budget's shape is counted."""
    m = w.moe
    if m is None:
        return 0.0
    if layout.moe_expert_capacity is not None:
        return m.top_k * layout.moe_expert_capacity
    return m.top_k * (m.capacity_factor or 1.0)


def fp8_attention_saved_delta(w: Workload, layout: ParallelLayout, tp: int) -> float:
    """Bytes per token (per GPU of the TP group) that FP8 attention (``fp8_attention: fwd_bwd``) changes in what
    the attention core keeps for its backward, against 16-bit Q, K, V and O (Transformer Engine 4329ff84
    attention/dot_product_attention/backends.py ``FusedAttnFunc.forward``, "save q, k, v, o tensors"): under
    per-tensor recipes (delayed; current with NVTE_DPA_FP8CS_O_in_F16=0) it saves Q, K, V and O in fp8, 1 B each;
    under current scaling's default (O in 16 bits) Q, K, V in fp8 and O in 16 bits; under MXFP8 Q, K, V quantized
    in both layouts with their scales (utils.py ``combine_and_quantize``: the quantizer's default usage, rowwise and
    columnwise, in training) and O in 16 bits. With ``fwd`` (NVTE_FP8_DPA_BWD=0) it saves the 16-bit tensors: no
    change."""
    from commlens.project.frameworks import fp8_attention_recipe, framework

    if layout.fp8_attention != "fwd_bwd" or w.precision != "fp8":
        return 0.0
    a, g = w.heads, w.kv_heads_n
    if w.mla is None:
        qkv, o = w.head_size * (a + 2 * g), a * w.head_size
    else:
        qkv, o = a * (2 * w.qk_head_dim + w.v_head_dim), a * w.v_head_dim
    recipe = fp8_attention_recipe(framework(layout.framework), layout)
    if recipe == "mxfp8":
        return (MXFP8_BOTH_LAYOUTS_BYTES - 2.0) * qkv / tp
    if recipe == "current":  # TE's default keeps O in 16 bits under current scaling
        return (1.0 - 2.0) * qkv / tp
    return (1.0 - 2.0) * (qkv + o) / tp


def ep_overlap_held_bytes(w: Workload, layout: ParallelLayout, tp: int) -> float:
    """Activation bytes per token beside the stage's kept activations and one layer's gradients while Megatron-Core's
    combined 1F1B (``moe_a2a_overlap``) pairs one micro-batch's forward layer with another's backward layer. The
    pairs run layer i of the forward with layer n-1-i of the backward (Megatron-LM cd4afffa, 44151194, 0d8e0714
    models/common/model_chunk_schedule_plan.py ``TransformerModelChunkSchedulePlan.run``), so the two micro-batches
    hold n layers between them, plus what the backward layer has not freed yet when the forward layer is done:
    ``TransformerLayerSchedulePlan.run`` runs the backward's experts (mlp), then the forward's experts and combine,
    and only then the backward's ``pre_dispatch_computation`` (attention, norms, router, shared experts), unless
    ``ep_overlap_early_attn_memory_release`` (not set by the recipes read). So one MoE layer's tensors other than the
    routed experts' stay alive on top. The interleaved schedule's extra warm-up micro-batch
    (schedules.py ``overlap_moe_expert_parallel_comm``: ``num_warmup_microbatches + 1``) is the chunk the paired
    step's forward would have added, so the chunks in flight are unchanged (:func:`in_flight`)."""
    if not layout.moe_a2a_overlap or w.moe is None:
        return 0.0
    dropped = recomputed_modules(layout) if layout.recompute == "selective" else frozenset()
    if "op" in dropped:
        return 0.0
    experts = sum(v for k, v in activation_parts(w, layout, tp, True).items() if k in ("moe", "moe_act"))
    return activation_bytes_per_token(w, layout, tp, True) - experts


def ep_overlap_pairs(stage: int, pp: int, vpp: int, micro_batches: int) -> bool:
    """Whether a stage runs any paired forward/backward step under the combined 1F1B: PP 1 pairs micro-batches
    2..m with 1..m-1 (combined_1f1b.py ``combined_1f1b_schedule_for_no_pipelining``); interleaved PP pairs the
    steady steps after a warm-up one longer than Megatron's (schedules.py), none if the warm-up runs every chunk."""
    if pp == 1:
        return micro_batches > 1
    warmup = 2 * (pp - stage - 1) + (vpp - 1) * pp + 1
    return micro_batches * vpp > warmup


def stage_fp8_params(w: Workload, layout: ParallelLayout, r: Resolved) -> list[float]:
    """Parameters per GPU of every stage that Megatron holds as fp8 weights under ``fp8_param_gather`` (fp8
    precision, ZeRO-1/2): the layers' Transformer Engine linears (attention, dense FFN, shared and routed experts),
    built under TE's fp8_model_init (Megatron-LM cd4afffa / 44151194 / 0d8e0714 fp8_utils.py
    ``get_fp8_context(is_init=True)``); none otherwise."""
    if not (layout.fp8_param_gather and layout.zero < 3 and w.precision == "fp8"):
        return [0.0] * r.pp
    moe = w.layer_linear_parameters(True)
    kinds, views = stage_layer_kinds(w, r), stage_views(w, r)
    return [
        (dense_n * view.layer_linear_parameters(False) + moe_n * moe) / r.tp + expert
        for (dense_n, moe_n), view, (_, expert) in zip(kinds, views, stage_parameters(w, r), strict=True)
    ]


def fp8_param_weight_bytes(w: Workload, layout: ParallelLayout, full: float, fp8_params: float) -> float:
    """Weight bytes per GPU of a stage's ``full`` parameters, ``fp8_params`` of them TE linears held as fp8 weights
    (:func:`stage_fp8_params`). TE quantizes such a weight at init with rowwise and columnwise usage (4329ff84
    module/base.py ``reset_parameters``: ``quantizer.set_usage(rowwise=True, columnwise=torch.is_grad_enabled())``)
    and keeps no 16-bit copy: per-tensor recipes 1 B of data, in the distributed optimizer's uint8 buffer
    (param_and_grad_buffer.py ``group_params_for_buffers``: quantized storage -> torch.uint8), and 1 B of its
    transpose (the columnwise copy Hopper's TN-only fp8 GEMMs need; Blackwell may skip it, so an upper bound there);
    MXFP8 both layouts with their scales, and the all-gather lands in a bf16 view of the gradient buffer
    (param_and_grad_buffer.py 'For MXFP8 param: Create a shared buffer for param AG and grad RS', ``shared_buffer``),
    no memory of its own. The other parameters (router, norms, embedding, output layer) 2 B, with no fp8 copy."""
    from commlens.project.frameworks import framework

    recipe = layout.fp8_recipe or framework(layout.framework).fp8_recipe
    per_weight = {"mxfp8": MXFP8_BOTH_LAYOUTS_BYTES, "nvfp4": 2 * NVFP4_BYTES}.get(recipe, 2.0)
    fp8_params = min(fp8_params, full)
    return per_weight * fp8_params + 2.0 * (full - fp8_params)
