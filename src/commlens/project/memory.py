"""Memory per GPU of a training step: weights, gradients, optimizer state, activations.

Mixed-precision Adam as Megatron-LM keeps it, per parameter: bf16 weights (2 B,
+1 B fp8 copy with fp8 GEMMs), fp32 gradients (4 B), fp32 master weights and two
moments (12 B). ZeRO-1 shards the 12 B over the data-parallel group, ZeRO-2
also the gradients, ZeRO-3 / FSDP also the weights.

Activations per layer and token (bytes; Korthikanti et al. 2022 for the
standard layer, 34 h + 5 a s, generalised to GQA, gated FFN and MoE): inputs
kept for backward of the norms, QKV, attention core, projections and FFN.
Parts inside the TP region divide by TP; the rest (norm inputs, dropout masks:
10 h) only with sequence parallelism. The unfused attention core keeps 5 a s
per token (softmax output, dropout mask and output); flash attention and
selective recomputation drop it. Full recomputation keeps only each layer's
input (2 h) plus one layer's full working set. The first pipeline stage holds
``min(m, p)`` micro-batches in flight (x (1 + (p - 1) / (p v)) interleaved).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commlens.project.layout import ParallelLayout, Resolved
    from commlens.workload import Workload

__all__ = ["activation_bytes_per_token", "memory_per_gpu"]


def activation_bytes_per_token(w: Workload, layout: ParallelLayout, tp: int, moe: bool) -> float:
    """Activation bytes one layer keeps per token for backward (per GPU of its TP group), no recomputation."""
    h, d, a, g = w.hidden, w.head_size, w.heads, w.kv_heads_n
    sp = layout.sp and tp > 1
    outside = 10.0 * h  # 2 norm inputs (2 B), their outputs feeding QKV / FC1 (2 B), 2 dropout masks (1 B)
    inside = 2.0 * d * (a + 2 * g) + 2.0 * a * d  # Q, K, V and the attention output
    m = w.moe if moe else None
    if m is not None:
        copies = m.top_k * (m.capacity_factor or 1.0)
        fe = m.expert_ffn_hidden
        inside += copies * (2.0 * h + 2.0 * fe * (2 if w.gated_ffn else 1) + 2.0 * fe)
        inside += m.shared_experts * (2.0 * fe * (2 if w.gated_ffn else 1) + 2.0 * fe)
    else:
        f = w.ffn_hidden
        inside += 2.0 * f * (2 if w.gated_ffn else 1) + 2.0 * f  # FC1 output(s) and the activation output
    if not layout.flash_attention and layout.recompute == "none":
        inside += 5.0 * a * w.seq_len / 1.0  # softmax out (2 B), dropout mask (1 B), dropout out (2 B)
    return outside / (tp if sp else 1) + inside / tp


def memory_per_gpu(w: Workload, layout: ParallelLayout, r: Resolved) -> dict[str, float]:
    """Bytes per GPU by kind (``weights``, ``gradients``, ``optimizer``, ``activations``) and ``total``."""
    counts = w.parameter_counts()
    experts = counts["experts"]
    dense = sum(counts.values()) - experts
    # The first stage also holds the (untied) embedding; parameters spread evenly is the usual approximation.
    dense_local = dense / (r.tp * r.pp)
    expert_local = experts / (r.ep * r.tp * r.pp)
    dp_shard = r.dp * r.cp
    edp_shard = dp_shard // r.ep
    weight_bytes = 3.0 if w.precision == "fp8" else 2.0

    def sharded(per_param: float, stage: int) -> float:
        if layout.zero >= stage:
            return per_param * (dense_local / dp_shard + expert_local / edp_shard)
        return per_param * (dense_local + expert_local)

    weights = sharded(weight_bytes, 3)
    grads = sharded(4.0, 2)
    optimizer = sharded(12.0, 1)

    tokens = w.micro_batch * w.seq_len / r.cp
    layers = r.layers_per_stage
    moe_share = w.moe_layers / w.layers
    per_token = (1 - moe_share) * activation_bytes_per_token(w, layout, r.tp, False) + (
        moe_share * activation_bytes_per_token(w, layout, r.tp, True) if w.moe_layers else 0.0
    )
    sp = layout.sp and r.tp > 1
    working = 0.0
    if layout.recompute == "full":  # stored: each layer's input; working: one layer being recomputed
        per_mb = tokens * layers * 2.0 * w.hidden / (r.tp if sp else 1)
        working = tokens * per_token
    else:
        per_mb = tokens * layers * per_token
    in_flight: float = min(r.micro_batches, r.pp)
    if r.vpp > 1:
        in_flight *= 1.0 + (r.pp - 1) / (r.pp * r.vpp)
    activations = per_mb * in_flight + working
    total = weights + grads + optimizer + activations
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "activations": activations, "total": total}
