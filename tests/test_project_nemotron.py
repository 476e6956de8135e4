"""Nemotron-4 15B's Table 2 (arXiv 2402.16819) as NVIDIA's NeMo launcher config of the model runs it (issue 27)."""

import pytest

from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

TABLE = "nemotron4-15b-table2"


def _rows():
    return load_set(TABLE).rows


def _project(row, **change):
    w = load_workload(row.workload, row.overrides)
    layout = ParallelLayout.model_validate({**row.layout, **change})
    return run(Scenario(w, load_topology(row.topology), layout, row.gpus))


def test_the_preset_has_the_papers_parameter_counts():
    # section 2: 3.2B embedding and 12.5B non-embedding parameters (256k vocabulary, untied)
    counts = load_workload("nemotron4-15b").parameter_counts()
    embedding = counts["embedding"]
    assert embedding == pytest.approx(3.2e9, rel=0.02)
    assert sum(counts.values()) - embedding == pytest.approx(12.5e9, rel=0.01)


def test_the_papers_mfu_is_six_n_flops_per_token_of_its_step_time():
    # Table 2 prints MFU 34.3/33.3/30.5% of 989 TFLOP/s beside step times 0.57/0.58/0.64 s: the preset's 6N per token
    # reproduces them, so the step times and the preset describe the same model
    n = load_workload("nemotron4-15b").parameters
    for row, mfu in zip(_rows(), (0.343, 0.333, 0.305), strict=True):
        tokens = row.overrides["global_batch"] * row.overrides["seq_len"]
        assert 6 * n * tokens / (row.gpus * row.published * 989e12) == pytest.approx(mfu, abs=0.005)


@pytest.mark.parametrize("i", range(3))
def test_every_row_runs_the_launcher_configs_settings(i):
    # launcher_scripts/conf/training/nemotron/nemotron_15b.yaml, every version: no activation checkpointing, sequence
    # parallel, bf16, distributed_fused_adam overlapping both syncs, gradients reduced in fp32 (no grad_sync_dtype)
    row = _rows()[i]
    assert row.layout["recompute"] == "none"
    assert row.layout["sp"] is True
    assert row.layout["grad_reduce_bytes"] == 4
    assert row.overrides["precision"] == "bf16"
    assert "[27 s7]" in row.note
    p = _project(row)
    # no recomputation: the GPUs do the model's FLOPs and no more
    assert p.hw_tflops_per_gpu == pytest.approx(p.model_tflops_per_gpu, rel=1e-9)
    assert p.step_time_s < _project(row, recompute="selective").step_time_s


def test_the_dp_reduction_runs_on_while_the_backward_waits_for_its_tp_collectives():
    # The DP buckets go on the DP communicator's own stream (inter-node), the TP collectives on another (NVLink): a
    # backward that waits longer on exposed TP collectives hides more of its gradient reduction. Without TP overlap
    # the TP waits grow, and the exposed DP reduction shrinks by part of what they add.
    row = _rows()[0]
    hidden_tp = _project(row, tp_comm_overlap=True)
    exposed_tp = _project(row, tp_comm_overlap=False)
    assert exposed_tp.breakdown["tp_comm"] > hidden_tp.breakdown["tp_comm"]
    assert exposed_tp.breakdown["dp_comm"] < hidden_tp.breakdown["dp_comm"]
