"""Muon's orthogonalization as Megatron-Core runs it (``ParallelLayout.optimizer`` muon) [27 s26 muon].

Muon replaces Adam's update of every 2D weight of the transformer layers by the orthogonalized momentum: a few
Newton-Schulz iterations on the whole matrix. Embeddings, the output layer, norms and biases keep an Adam-style
update (``is_managed_by_layer_wise_optimizer``: two-dimensional, not an embedding or output parameter). What that
costs a step beyond Adam's streaming update:

1. The iterations. The quintic iteration on an ``a x b`` matrix (``a <= b``; the wide side is transposed) forms
   ``A = X X^T``, then ``B = beta A + gamma A A``, then ``X = alpha X + B X``: three GEMMs, ``4 a^2 b + 2 a^3`` FLOPs an
   iteration, ``MUON_NS_STEPS`` of them. Emerging-Optimizers normalizes the matrix in fp32 and casts it to bf16 for
   them (``muon_utils.py``, matmul precision ``medium``), so they are priced on the device's bf16 GEMM curve.
2. Who runs them. Megatron-Core's layer-wise distributed optimizer deals whole parameters out to the data-parallel
   ranks (sorted by size, in turn), and each orthogonalizes its own. A rank's share of a stage's matrices is their
   time over the DP group (experts: over the expert-DP group), and never less than the largest one matrix, which a
   single rank holds.
3. Tensor parallelism, ``muon_tp_mode``: blockwise (what Megatron-Bridge's Muon recipes pass) orthogonalizes each
   TP rank's own shard, with no communication; duplicated gathers the owner's gradients over TP and orthogonalizes
   the full matrix on every TP rank.

Adam's per-parameter streaming stays as the step prices it; the optimizer state is the layout's
``optimizer_state_bytes`` (fp32 main weights and one fp32 momentum: 8 B a parameter).

Sources (read for the Kimi-K2 rows, session 26): Megatron-LM d0b3b775 ``megatron/core/optimizer/
emerging_optimizers.py`` (TensorParallelMuon: num_ns_steps 5, quintic coefficients, tp_mode, split_qkv) and
``layer_wise_optimizer.py`` (whole parameters dealt out over DP, an all-gather of the updated bf16 parameters after
the step); NVIDIA-NeMo/Emerging-Optimizers ``muon_utils.py`` (the fp32 normalization, the bf16 cast under
``medium``, the three products); Megatron-Bridge v0.5.0 ``optimizer_utils.py`` lines 20-97 (dist_muon: momentum
0.95, Nesterov, 5 steps, tp_mode blockwise, AdamW for the rest)."""

from __future__ import annotations

from collections.abc import Callable

from commlens.project.compute import gemm_time_s
from commlens.project.hardware import Device
from commlens.workload import Workload

__all__ = ["MUON_NS_STEPS", "layer_matrices", "newton_schulz_s", "stage_muon_s"]

MUON_NS_STEPS = 5  # Megatron-Core TensorParallelMuon num_ns_steps' default
NS_ELEM_BYTES = 2.0  # bf16 operands (Emerging-Optimizers casts the normalized matrix to bf16)
GRAD_BYTES = 4.0  # the fp32 main gradient the owner gathers over TP


def layer_matrices(
    w: Workload, moe: bool, tp: int = 1, etp: int = 1
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """One layer's 2D weights as Megatron-Core stores them on one of ``tp`` ranks (``etp`` for the experts; 1: whole):
    (rows, cols) of the dense part (attention linears, QKV fused, MLA's down-projections replicated; a dense
    layer's fc1 with gate and up fused, and fc2; an MoE layer's shared experts as one MLP and its router, replicated)
    and of one routed expert's (fc1, fc2)."""
    h = w.hidden
    glu = 2 if w.gated_ffn else 1
    dense = [(n, k) for _, k, n in w.attention_linears(tp)]
    experts: list[tuple[float, float]] = []
    if not moe or w.moe is None:
        dense += [(glu * w.ffn_hidden / tp, h), (h, w.ffn_hidden / tp)]
        return dense, experts
    m = w.moe
    if m.shared_experts:
        fs = m.shared_experts * m.expert_ffn_hidden / tp
        dense += [(glu * fs, h), (h, fs)]
    dense.append((m.experts, h))  # the router
    fe = m.expert_ffn_hidden / etp
    experts = [(glu * fe, h), (h, fe)]
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
    groups: tuple[int, int, int, int],
    tp_gather_s: Callable[[float], float] | None = None,
    steps: int = MUON_NS_STEPS,
) -> float:
    """One pipeline stage's Muon work on its busiest owner: (dense layers, MoE layers) ``layer_kinds``, each rank's
    ``local_experts`` per MoE layer; ``groups`` (DP, expert DP, TP, expert TP): the dense matrices shared over DP,
    the experts' over expert DP; blockwise each TP rank takes its shards, or with ``tp_gather_s`` (duplicated)
    every TP rank the whole matrices after gathering the owned gradients (``tp_gather_s(bytes)``)."""
    dp, edp, tp, etp = groups
    if tp_gather_s is not None:  # duplicated: whole matrices
        tp, etp = 1, 1
    dense_n, moe_n = layer_kinds
    kinds = [(n, moe) for n, moe in ((dense_n, False), (moe_n, True)) if n]
    parts = []  # (seconds of all of the stage's dense matrices of a kind, the largest one)
    for kind_n, moe in kinds:
        times = [newton_schulz_s(dev, r, c, steps) for r, c in layer_matrices(w, moe, tp, etp)[0]]
        parts.append((kind_n * sum(times), max(times)))
    dense_total = sum(p[0] for p in parts)
    own = max(dense_total / dp, max(p[1] for p in parts)) if parts else 0.0
    if moe_n and w.moe is not None:
        times = [newton_schulz_s(dev, r, c, steps) for r, c in layer_matrices(w, True, tp, etp)[1]]
        own += max(moe_n * local_experts * sum(times) / edp, max(times))
    if tp_gather_s is not None:
        elements = sum(n * sum(r * c for r, c in layer_matrices(w, moe)[0]) for n, moe in kinds)
        own += tp_gather_s(elements / dp * GRAD_BYTES)
    return own
