"""NeMo's long-sequence table (NeMo 24.03.01, Llama 2 7B FP8 on DGX-H100): the settings its rows record from the
launcher of that release (NVIDIA/NeMo-Framework-Launcher tag 24.03.01, launcher_scripts/conf/training/llama/
llama2_7b.yaml)."""

from __future__ import annotations

from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import _FLOPS_PER_TOKEN, load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def test_every_row_runs_delayed_scaling_and_the_distributed_fused_adam():
    """Transformer Engine 1.x had one per-tensor fp8 recipe, DelayedScaling (the launcher sets its amax history 1024
    and compute algorithm max), and NeMo 24.03's Llama configs run Apex's DistributedFusedAdam (ZeRO-2)."""
    table = load_set("nemo-long-context-cp")
    assert len(table.rows) == 9
    for row in table.rows:
        layout = ParallelLayout.model_validate(row.layout)
        assert layout.fp8_recipe == "delayed", row.overrides
        assert layout.zero == 2, row.overrides


def test_the_4k_row_is_the_launchers_llama2_7b_config_without_recomputation():
    """The 4K row (TP 1, PP 1, CP 1, DP 4, micro-batch 1) has the shape of the launcher's llama2_7b.yaml, which
    recomputes nothing (activations_checkpoint_granularity null). The table's prediction is that run's projection,
    faster than the selective recomputation the row assumed before (the attention forward is not run twice)."""
    table = load_set("nemo-long-context-cp")
    row = table.rows[0]
    assert row.overrides["seq_len"] == 4096 and row.gpus == 4
    w = load_workload("llama2-7b", {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "precision": "fp8"})
    topo = load_topology("dgx-h100")

    def step(recompute: str) -> float:
        layout = ParallelLayout(
            tp=1, sp=False, cp=1, pp=1, dp=4, zero=2, recompute=recompute, fp8_recipe="delayed", framework="nemo-24.03"
        )
        return run(Scenario(w, topo, layout, 4)).step_time_s

    launcher, selective = step("none"), step("selective")
    assert launcher < selective * 0.98
    predicted = validate_set(table)[0].predicted
    assert predicted is not None
    tokens_per_gpu = 4096 * 1024 / launcher / 4
    per_token = _FLOPS_PER_TOKEN[table.flops](w)
    assert abs(predicted - per_token * tokens_per_gpu / 1e12) < 1e-6 * predicted


def test_the_table_counts_flops_as_nemos_benchmark_tables():
    """NeMo's count (6 x matmul weights with the output layer, not the input embedding, + 12 l h s) gives the
    launcher 24.03.01 README's Llama 2 figures from their tokens/s (7B 15066 -> 694, 13B 7728 -> 674, 70B 1594 ->
    708 TFLOP/s); 6N + 12 l h s gives 706 and 681 for the 7B and 13B. The table counts as NeMo does, so its 4K
    prediction is 1.7% below what 6N + 12 l h s would print for the same step."""
    count = _FLOPS_PER_TOKEN["nemo"]
    for name, tokens, tflops in (("llama2-7b", 15066, 694), ("llama2-13b", 7728, 674), ("llama2-70b", 1594, 708)):
        # to the rounding of both printed figures
        assert abs(tokens * count(load_workload(name, {"seq_len": 4096})) / 1e12 - tflops) < 1.0, name
    w = load_workload("llama2-7b", {"seq_len": 4096})
    assert round(15066 * _FLOPS_PER_TOKEN["6N+12lhs"](w) / 1e12) == 706
    assert load_set("nemo-long-context-cp").flops == "nemo"
    assert 1.016 < _FLOPS_PER_TOKEN["6N+12lhs"](w) / count(w) < 1.018
