"""AMD Instinct rows and presets as AMD's own sources give them (issue 27): the multi-node commands of AMD's ROCm
documentation ('Training a model with Primus and Megatron-LM') and Primus's hardware configs."""

import pytest

from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

TABLE = "amd-instinct-primus-8node"


def _row(workload, precision):
    return next(r for r in load_set(TABLE).rows if r.workload == workload and r.overrides["precision"] == precision)


def _project(row, overrides=None, **change):
    w = load_workload(row.workload, {**row.overrides, **(overrides or {})})
    layout = ParallelLayout.model_validate({**row.layout, **change})
    result = run(Scenario(w, load_topology(row.topology), layout, row.gpus))
    return w.global_batch * w.seq_len / result.step_time_s / row.gpus, result


def test_mi355x_mesh_is_amds_figure_not_the_mi300_series():
    # AMD-AGI/Primus examples/hardware_configs/mi355x.yaml: node_bw 537.6 GB/s per GPU (mi325x.yaml: 448)
    mi355x, mi325x = load_topology("mi355x-8gpu"), load_topology("mi325x-8gpu")
    assert mi355x.scale_up.bandwidth_bytes_per_s == pytest.approx(537.6e9)
    assert mi325x.scale_up.bandwidth_bytes_per_s == pytest.approx(448e9)


@pytest.mark.parametrize(
    ("workload", "precision", "micro_batch", "global_batch"),
    [("llama3-8b", "fp8", 2, 1024), ("llama3-70b", "fp8", 4, 256), ("llama3-70b", "bf16", 1, 256)],
)
def test_llama_rows_take_the_batches_of_amds_8_node_commands(workload, precision, micro_batch, global_batch):
    # the results table's batch is the micro-batch; the global batch is the command's, not one micro-batch per GPU
    row = _row(workload, precision)
    assert (row.overrides["micro_batch"], row.overrides["global_batch"]) == (micro_batch, global_batch)
    assert "[27 s8]" in row.note and "Multi-node training examples" in row.note


def test_8b_gradient_reduction_is_paid_once_per_eight_micro_batches():
    # GBS 1024 over 64 GPUs at MBS 2: 8 micro-batches per step share one bf16 gradient reduction (the tail that
    # backward does not hide), so a token costs less than at one micro-batch per step
    row = _row("llama3-8b", "fp8")
    eight, _ = _project(row)
    one, _ = _project(row, {"global_batch": 128})
    assert eight > one


def test_70b_bf16_published_figure_lies_between_all_and_no_recompute():
    # AMD's command recomputes 12 of 80 layers (--recompute_num_layers 12, which the row records); the published
    # 1,174 tokens/s/GPU lies between all layers and none (and the run fits 256 GB without any)
    row = _row("llama3-70b", "bf16")
    assert (row.layout["recompute_layers"], row.layout["recompute_method"]) == (12, "block")
    every = {"recompute_layers": None, "recompute_method": None}
    full, _ = _project(row, **every)
    none, result = _project(row, recompute="none", **every)
    assert full < row.published < none
    assert result.memory["reserved"] < 256 * 2**30
