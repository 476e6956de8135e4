"""AMD Instinct 8-node runs (Primus, Megatron-LM backend) as the stack ran them: torch FSDP2 prefetches its gathers
(issue 27)."""

import pytest

from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

TABLE = "amd-instinct-primus-8node"


def _fsdp_rows():
    """The Llama 3.1 70B rows: torch FSDP2 over all 64 GPUs (Primus's use_torch_fsdp2 configs)."""
    return [r for r in load_set(TABLE).rows if r.layout.get("zero") == 3]


def _project(row, **change):
    w = load_workload(row.workload, row.overrides)
    layout = ParallelLayout.model_validate({**row.layout, **change})
    return run(Scenario(w, load_topology(row.topology), layout, row.gpus))


def test_both_70b_rows_are_fsdp2_with_its_prefetch():
    # Megatron's overlap_param_gather is the distributed optimizer's flag (Primus sets it false because it turns
    # the distributed optimizer off); torch FSDP2 overlaps the next layer's all-gather with this layer's compute
    rows = _fsdp_rows()
    assert len(rows) == 2
    assert {r.overrides["precision"] for r in rows} == {"fp8", "bf16"}  # same layout, the precision differs
    for row in rows:
        assert row.layout["overlap_param_gather"] is True
        assert "[27 s7]" in row.note and "fully_shard" in row.note


@pytest.mark.parametrize("i", range(2))
def test_prefetched_gathers_hide_behind_the_layers_compute(i):
    # batch 1 or 4 at sequence 8192: a layer's forward outlasts its 1.75 GB all-gather over 8 nodes, so with one
    # layer of prefetch most of the gather time is hidden; gathered on demand, none is
    row = _fsdp_rows()[i]
    on, off = _project(row), _project(row, overlap_param_gather=False)
    assert on.overlapped_s.get("fsdp_gather", 0.0) > 1.0
    assert off.overlapped_s.get("fsdp_gather", 0.0) == 0.0
    assert off.step_time_s - on.step_time_s > 1.0


def test_the_dense_rows_are_within_twenty_percent():
    # issue 27's target for every row; the BF16 70B row was 33% too slow with its gathers exposed
    results = [r for r in validate_set(load_set(TABLE)) if r.workload.startswith("llama3")]
    assert len(results) == 3
    for r in results:
        assert r.error is not None and abs(r.error) < 0.20, (r.workload, r.published, r.predicted)


def test_every_row_reduces_its_gradients_in_bf16():
    # Primus's Megatron defaults (accumulate_allreduce_grads_in_fp32: false) and Megatron's torch FSDP2 wrapper
    # (bf16 parameters, no fp32 reduce dtype): the gradient buffer and its reduction are 2 B per parameter, half
    # of what an fp32 main-grad buffer holds
    rows = load_set(TABLE).rows
    assert all(r.layout["grad_reduce_bytes"] == 2 for r in rows)
    dense = rows[0]  # Llama 3.1 8B, DDP with the distributed optimizer
    bf16, fp32 = _project(dense), _project(dense, grad_reduce_bytes=4)
    assert bf16.memory["gradients"] == pytest.approx(fp32.memory["gradients"] / 2, rel=1e-6)
    assert bf16.step_time_s < fp32.step_time_s


@pytest.mark.parametrize("i", range(2))
def test_fp8_rows_cast_with_delayed_scaling(i):
    # Primus's FP8 configs run Transformer Engine's delayed scaling (fp8_recipe: delayed), one cast kernel per GEMM
    # input; megatron-core's default here, current scaling, reads every tensor twice (amax, then the cast)
    row = [r for r in load_set(TABLE).rows if r.overrides["precision"] == "fp8"][i]
    assert row.layout["fp8_recipe"] == "delayed"
    delayed, current = _project(row), _project(row, fp8_recipe="current")
    assert 0 < delayed.kernels["fp8_cast"] < current.kernels["fp8_cast"]
    assert delayed.step_time_s < current.step_time_s
