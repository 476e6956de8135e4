"""Transformer Engine's fused grouped MLP (``ParallelLayout.moe_fused_mlp``), HybridEP's static rank budget
(``moe_expert_capacity``) and whole-step CUDA graphs of MoE models, as the 26.08 Megatron-Bridge recipes run them.

Megatron-Bridge v0.6.0 51885cf1 perf_recipes (the full-iteration MXFP8 helpers) set use_transformer_engine_op_fuser,
moe_expert_rank_capacity_factor 1.5 and cuda_graph_impl full_iteration; Megatron-LM cd4afffa experts.py
``TEGroupedMLP._fused_forward`` hands TE's fused ops (TE 4329ff84 ops/fused/grouped_mlp.py) the per-expert counts as a
device tensor, and token_dispatcher.py sizes HybridEP's buffers from the budget, so no count reaches the host."""

from __future__ import annotations

import pytest

from commlens.project import InfeasibleLayoutError, ParallelLayout, project
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

NEW = ("moe_fused_mlp", "moe_expert_capacity", "cuda_graph_scope")


def _row(workload: str, topology: str):
    row = next(
        r for r in load_set("megatron-bridge-perf-26.08-moe").rows if (r.workload, r.topology) == (workload, topology)
    )
    return load_workload(row.workload, row.overrides), dict(row.layout), row


def _project(w, layout: dict, row):
    return project(w, load_topology(row.topology), ParallelLayout(**layout), row.gpus, check_memory=False)


def test_the_budget_follows_megatrons_own_rules():
    with pytest.raises(ValueError, match="moe_expert_capacity needs"):
        ParallelLayout(moe_expert_capacity=1.5, moe_fused_mlp=True)  # the all-to-all dispatcher
    with pytest.raises(ValueError, match="moe_expert_capacity needs"):
        ParallelLayout(moe_expert_capacity=1.5, moe_dispatcher="hybridep")  # TE GroupedLinear
    ParallelLayout(moe_expert_capacity=1.5, moe_dispatcher="hybridep", moe_fused_mlp=True)


def test_te_fuses_the_grouped_mlp_only_for_mxfp8_moe():
    w, layout, row = _row("qwen3-30b-a3b", "gb200-nvl72")
    with pytest.raises(InfeasibleLayoutError, match="mxfp8"):
        _project(w, {**layout, "fp8_recipe": "current"}, row)
    bf16 = load_workload(row.workload, {**row.overrides, "precision": "bf16"})
    with pytest.raises(InfeasibleLayoutError, match="mxfp8"):
        _project(bf16, {k: v for k, v in layout.items() if k != "fp8_param_gather"}, row)
    dense = load_workload("llama3-8b", {"precision": "fp8"})
    with pytest.raises(InfeasibleLayoutError, match="MoE model"):
        project(dense, load_topology("gb200-nvl72"), ParallelLayout(dp=8, fp8_recipe="mxfp8", moe_fused_mlp=True), 8)


def test_a_whole_step_graph_of_an_moe_model_needs_the_static_budget():
    w, layout, row = _row("qwen3-30b-a3b", "gb200-nvl72")
    dynamic = {k: v for k, v in layout.items() if k != "moe_expert_capacity"}
    with pytest.raises(InfeasibleLayoutError, match="static token counts"):
        _project(w, dynamic, row)
    graphed = _project(w, layout, row)
    assert "host_overhead" not in {k for k, v in graphed.breakdown.items() if v}  # the layer is captured too
    eager = _project(w, {k: v for k, v in layout.items() if k != "cuda_graph_scope"}, row)
    assert graphed.step_time_s < eager.step_time_s


def test_the_budget_removes_the_host_read_of_the_token_counts():
    w, layout, row = _row("qwen3-30b-a3b", "gb200-nvl72")
    base = {k: v for k, v in layout.items() if k not in ("cuda_graph_scope", "moe_expert_capacity")}
    synced = _project(w, base, row).step_time_s
    static = _project(w, {**base, "moe_expert_capacity": 1.5}, row).step_time_s
    assert static < synced


def test_the_fused_mlp_drops_the_eager_expert_ops_and_per_expert_launches():
    for workload, topology in (("gpt-oss-120b", "gb200-nvl72"), ("qwen3-30b-a3b", "gb200-nvl72")):
        w, layout, row = _row(workload, topology)
        plain = {k: v for k, v in layout.items() if k not in NEW}
        unfused = _project(w, plain, row).breakdown["memory_bound"]
        fused = _project(w, {**plain, "moe_fused_mlp": True}, row).breakdown["memory_bound"]
        # gpt-oss: the clamp/cat and fc2's bias loop go as well as the activation and fc2's input cast
        assert fused < unfused * (0.6 if workload.startswith("gpt-oss") else 0.8), (workload, fused, unfused)


def test_the_26_08_rows_state_their_recipes_and_the_older_releases_do_not():
    rows = load_set("megatron-bridge-perf-26.08-moe").rows
    for r in rows:
        assert r.layout["moe_fused_mlp"] is True and r.layout["moe_expert_capacity"] == 1.5
        assert r.layout["cuda_graph_scope"] == ["full_iteration"] and r.layout["fp8_param_gather"] is True
        assert r.overrides.get("mtp_layers", 0) == (1 if r.workload.startswith("deepseek") else 0)
    for name in ("megatron-bridge-perf-25.11", "megatron-bridge-perf-26.04.01-moe"):
        assert not any(r.layout.get("moe_fused_mlp") for r in load_set(name).rows)  # the perf scripts turn it off


def test_the_26_08_table_with_its_settings():
    """Measured in session 9: with the fused MLP, the static budget and whole-step graphs -8.8, -10.9, -13.2, -15.8,
    -9.3, -19.3, +14.8, +7.4% (mean 12.4%); with the EP overlap (27epovl) and the FP8 attention (27fp8attn) the
    recipes also set +4.2, +2.1, +0.2, -0.0, +2.5, -9.3, +18.0, +10.5% (mean 5.9%); before the settings were stated:
    17.5%, every row slower."""
    results = validate_set(load_set("megatron-bridge-perf-26.08-moe"))
    errors = [r.predicted / r.published - 1 for r in results if r.predicted is not None]
    assert len(errors) == 8
    assert all(abs(e) < 0.2 for e in errors)
    assert sum(abs(e) for e in errors) / len(errors) < 0.08
