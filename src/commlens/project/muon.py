"""Muon's orthogonalization as Megatron-Core runs it (``ParallelLayout.optimizer`` muon) [27 s26 muon].

Muon replaces Adam's update of every 2D weight of the transformer layers by the orthogonalized momentum: a few
Newton-Schulz iterations on the whole matrix. Embeddings, the output layer, norms and biases keep an Adam-style
update (``is_managed_by_layer_wise_optimizer``: two-dimensional, not an embedding or output parameter). What that
costs a step beyond Adam's streaming update:

1. The iterations. The quintic iteration on an ``a x b`` matrix (``a <= b``; the wide side is transposed) forms
   ``A = X X^T``, then ``B = beta A + gamma A A``, then ``X = alpha X + B X``: three GEMMs, ``4 a^2 b + 2 a^3`` FLOPs an
   iteration, ``MUON_NS_STEPS`` of them. They run on fp32 tensors at the ``medium`` matmul precision (bf16 tensor-core
   products), so they are priced on the device's bf16 GEMM curve with 4-byte operands.
2. Who runs them. Megatron-Core's layer-wise distributed optimizer gives each parameter to one data-parallel rank,
   which orthogonalizes it whole and sends the new weights out in place of ZeRO-1's parameter all-gather. A rank's
   share of a stage's matrices is their time over the DP group (experts: over the expert-DP group), and never less
   than the largest one matrix, which a single rank holds.
3. Tensor parallelism (``tp_mode`` duplicated, Megatron-Core's default): the owner gathers the matrix's gradient
   from its TP group and every TP rank orthogonalizes the full matrix, so TP divides none of the work; the gather
   moves the owner's matrices' fp32 gradients.

Adam's per-parameter streaming stays as the step prices it; the optimizer state is the layout's
``optimizer_state_bytes`` (fp32 main weights and one fp32 momentum: 8 B a parameter)."""

from __future__ import annotations

from collections.abc import Callable

from commlens.project.compute import gemm_time_s
from commlens.project.hardware import Device
from commlens.workload import Workload

__all__ = ["MUON_NS_STEPS", "layer_matrices", "newton_schulz_s", "stage_muon_s"]

MUON_NS_STEPS = 5  # Megatron-Core TensorParallelMuon num_ns_steps' default
NS_ELEM_BYTES = 4.0  # fp32 operands (matmul precision 'medium': bf16 products)
GRAD_BYTES = 4.0  # the fp32 main gradient the owner gathers over TP


def layer_matrices(w: Workload, moe: bool) -> tuple[list[tuple[float, float, float]], list[tuple[float, float, float]]]:
    """One layer's 2D weights as Megatron-Core stores them, unsharded: (rows, cols, count) of the dense part
    (attention linears, QKV fused; a dense layer's fc1 with gate and up fused, and fc2; an MoE layer's shared
    experts as one MLP and its router) and of one routed expert's (fc1, fc2)."""
    h = w.hidden
    glu = 2 if w.gated_ffn else 1
    dense = [(n, k, 1.0) for _, k, n in w.attention_linears(1)]
    experts: list[tuple[float, float, float]] = []
    if not moe or w.moe is None:
        dense += [(glu * w.ffn_hidden, h, 1.0), (h, w.ffn_hidden, 1.0)]
        return dense, experts
    m = w.moe
    if m.shared_experts:
        fs = m.shared_experts * m.expert_ffn_hidden
        dense += [(glu * fs, h, 1.0), (h, fs, 1.0)]
    dense.append((m.experts, h, 1.0))  # the router
    experts = [(glu * m.expert_ffn_hidden, h, 1.0), (h, m.expert_ffn_hidden, 1.0)]
    return dense, experts


def newton_schulz_s(dev: Device, rows: float, cols: float, steps: int = MUON_NS_STEPS) -> float:
    """Seconds of ``steps`` quintic Newton-Schulz iterations on one ``rows x cols`` matrix (module docstring)."""
    a, b = min(rows, cols), max(rows, cols)
    peak = dev.peak("bf16")
    one = (
        gemm_time_s(dev, peak, a, a, b, elem_bytes=NS_ELEM_BYTES)  # X X^T
        + gemm_time_s(dev, peak, a, a, a, elem_bytes=NS_ELEM_BYTES)  # A A
        + gemm_time_s(dev, peak, a, b, a, elem_bytes=NS_ELEM_BYTES)  # B X
    )
    return steps * one


def stage_muon_s(
    dev: Device,
    w: Workload,
    layer_kinds: tuple[float, float],
    local_experts: float,
    dp: int,
    edp: int,
    tp_gather_s: Callable[[float], float],
    steps: int = MUON_NS_STEPS,
) -> float:
    """One pipeline stage's Muon work on its busiest owner: (dense layers, MoE layers) ``layer_kinds``, each rank's
    ``local_experts`` per MoE layer, the dense matrices shared over ``dp`` ranks and the experts' over ``edp``; plus
    ``tp_gather_s(bytes)``, the gather of the owned dense matrices' gradients over TP (0 without TP)."""
    dense_n, moe_n = layer_kinds
    parts: list[tuple[float, float]] = []  # (seconds of all of the stage's matrices, the largest one)
    for kind_n, moe in ((dense_n, False), (moe_n, True)):
        if not kind_n:
            continue
        dense, _ = layer_matrices(w, moe)
        times = [newton_schulz_s(dev, r, c, steps) for r, c, _ in dense]
        parts.append((kind_n * sum(times), max(times)))
    dense_total = sum(p[0] for p in parts)
    dense_max = max((p[1] for p in parts), default=0.0)
    own = max(dense_total / dp, dense_max) if dense_total else 0.0
    if moe_n and w.moe is not None:
        _, experts = layer_matrices(w, True)
        times = [newton_schulz_s(dev, r, c, steps) for r, c, _ in experts]
        total = moe_n * local_experts * sum(times)
        own += max(total / edp, max(times))
    elements = sum(
        kind_n * sum(r * c for r, c, _ in layer_matrices(w, moe)[0])
        for kind_n, moe in ((dense_n, False), (moe_n, True))
        if kind_n
    )
    return own + tp_gather_s(elements / dp * GRAD_BYTES)
