"""Memory of session 9's Megatron-Core MoE settings (issue 27 deliverable 3, 27memmoe): HybridEP's static rank
budget, FP8 attention's saved tensors, the combined 1F1B's paired layers, and fp8 weights under fp8_param_gather."""

from __future__ import annotations

from commlens.project import ParallelLayout
from commlens.project.layout import resolve
from commlens.project.memory import (
    MXFP8_BOTH_LAYOUTS_BYTES,
    activation_parts,
    stage_fp8_params,
    stage_memory,
    stage_parameters,
)
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def _row(table: str, workload: str, topology: str):
    row = next(r for r in load_set(table).rows if r.workload == workload and r.topology == topology)
    return load_workload(row.workload, row.overrides), ParallelLayout.model_validate(row.layout), row.gpus


def _memory(w, layout, gpus, topology):
    r = resolve(layout, w, gpus, load_topology(topology).accelerators_per_node)
    return stage_memory(w, layout, r), r


def test_static_rank_budget_sizes_the_routed_experts_tensors():
    """Under moe_expert_capacity the experts keep tokens x top-k x 1.5 rows (the HybridEP budget), not x top-k."""
    w, lay, _ = _row("megatron-bridge-perf-26.08-moe", "qwen3-30b-a3b", "gb200-nvl72")
    assert lay.moe_expert_capacity == 1.5
    dynamic = lay.model_copy(update={"moe_expert_capacity": None, "cuda_graph_scope": None})
    with_budget = activation_parts(w, lay, 1, True)
    without = activation_parts(w, dynamic, 1, True)
    for part in ("moe", "moe_act"):
        assert abs(with_budget[part] / without[part] - 1.5) < 1e-9
    assert with_budget["attention"] == without["attention"]


def test_fp8_attention_saves_what_transformer_engine_saves():
    """MXFP8 attention keeps Q, K, V in both layouts with scales (a little more than 16 bits); per-tensor delayed
    scaling keeps Q, K, V and O in one byte each; fwd-only keeps the 16-bit tensors."""
    w, lay, _ = _row("megatron-bridge-perf-26.08-moe", "qwen3-30b-a3b", "gb200-nvl72")
    assert lay.fp8_attention == "fwd_bwd" and lay.fp8_recipe in (None, "mxfp8")
    plain = lay.model_copy(update={"fp8_attention": None})
    qkv = w.head_size * (w.heads + 2 * w.kv_heads_n)
    o = w.heads * w.head_size
    base = activation_parts(w, plain, 1, True)["attention"]
    mx = activation_parts(w, lay, 1, True)["attention"]
    assert abs((mx - base) - (MXFP8_BOTH_LAYOUTS_BYTES - 2.0) * qkv) < 1e-6
    delayed = activation_parts(w, lay.model_copy(update={"fp8_recipe": "delayed"}), 1, True)["attention"]
    delayed_base = activation_parts(w, plain.model_copy(update={"fp8_recipe": "delayed"}), 1, True)["attention"]
    assert abs((delayed_base - delayed) - (qkv + o)) < 1e-6
    fwd = activation_parts(w, lay.model_copy(update={"fp8_attention": "fwd"}), 1, True)["attention"]
    assert fwd == base


def test_combined_1f1b_holds_the_paired_backward_layers_attention_side():
    """The overlap's forward layer completes before the paired backward layer frees its attention side: that much
    more at the peak on a stage with MoE layers, and nothing without a second micro-batch to pair."""
    w, lay, gpus = _row("megatron-bridge-perf-26.08-moe", "qwen3-30b-a3b", "gb200-nvl72")
    assert lay.moe_a2a_overlap
    on, r = _memory(w, lay, gpus, "gb200-nvl72")
    off, _ = _memory(
        w, lay.model_copy(update={"moe_a2a_overlap": False, "delay_wgrad_compute": False}), gpus, "gb200-nvl72"
    )
    parts = activation_parts(w, lay, r.tp, True)
    held = sum(v for k, v in parts.items() if k not in ("moe", "moe_act"))
    tokens = w.micro_batch * w.seq_len / r.cp
    assert r.pp == 1 and r.micro_batches > 1
    assert abs((on[0]["activations"] - off[0]["activations"]) - tokens * held) < 1.0
    one = w.model_copy(update={"global_batch": w.micro_batch * r.dp})
    on1, r1 = _memory(one, lay, gpus, "gb200-nvl72")
    off1, _ = _memory(
        one, lay.model_copy(update={"moe_a2a_overlap": False, "delay_wgrad_compute": False}), gpus, "gb200-nvl72"
    )
    assert r1.micro_batches == 1 and on1[0]["activations"] == off1[0]["activations"]


def test_fp8_param_gather_keeps_fp8_weights_without_a_16_bit_copy():
    """MXFP8: the TE linears' weights in both layouts with scales (2.06 B), the rest 2 B, against 3 B without the
    setting; per-tensor recipes 2 B (uint8 data and its transpose)."""
    w, lay, gpus = _row("megatron-bridge-perf-26.04.01-moe", "qwen3-30b-a3b", "gb200-nvl72")
    assert lay.fp8_param_gather and w.precision == "fp8"
    r = resolve(lay, w, gpus, load_topology("gb200-nvl72").accelerators_per_node)
    full = sum(stage_parameters(w, r)[0])
    linears = stage_fp8_params(w, lay, r)[0]
    assert 0.8 * full < linears < full  # the embedding and output layer are the rest
    off = stage_memory(w, lay.model_copy(update={"fp8_param_gather": False}), r)[0]["weights"]
    assert abs(off - 3.0 * full) < 1.0
    for recipe, per_weight in (("mxfp8", MXFP8_BOTH_LAYOUTS_BYTES), ("current", 2.0)):
        on = stage_memory(w, lay.model_copy(update={"fp8_recipe": recipe}), r)[0]["weights"]
        assert abs(on - (per_weight * linears + 2.0 * (full - linears))) < 1.0


def test_the_rows_that_state_these_settings_still_fit():
    """Every published run trained: no Megatron-Bridge row with the settings is refused for memory."""
    for table in ("megatron-bridge-perf-26.08-moe", "megatron-bridge-perf-26.04.01-moe", "megatron-bridge-perf-25.11"):
        results = validate_set(load_set(table))
        assert all(res.predicted is not None for res in results), [res.refused for res in results if res.refused]
