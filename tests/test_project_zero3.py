"""DeepSpeed ZeRO-3 as the 2022 Azure runs used it (microsoft/DeepSpeed v0.6.2, 32d97976)."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.layout import resolve
from commlens.project.memory import stage_parameters
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

A100 = load_topology("dgx-a100")


def test_deepspeed_divides_every_gradient_before_its_reduce_scatter(monkeypatch):
    """reduce_scatter_coalesced divides the flattened 16-bit gradients by the DP size in place before each
    reduce-scatter: a read and a write of every gradient element on the reduce stream, which the step waits for
    as it waits for the reduce-scatter."""
    fw = framework("deepspeed")
    assert fw.zero3_grad_predivide
    w = load_workload("megatron-gpt-1t", {"seq_len": 1024, "global_batch": 8192, "micro_batch": 8})
    lay = ParallelLayout(
        tp=1, sp=False, zero=3, recompute="full", grad_reduce_bytes=2, flash_attention=False, framework="deepspeed"
    )
    with_divide = project(w, A100, lay, 1024, check_memory=False)
    monkeypatch.setattr(step_mod, "framework", lambda name: fw.model_copy(update={"zero3_grad_predivide": False}))
    without = project(w, A100, lay, 1024, check_memory=False)
    params = stage_parameters(w, resolve(lay, w, 1024, 8))[0][0]
    divide = stream_time_s(device_for(A100.accelerator.name), 2 * 2 * params)
    assert with_divide.breakdown["dp_comm"] - without.breakdown["dp_comm"] == pytest.approx(divide, rel=1e-9)
    assert with_divide.step_time_s - without.step_time_s == pytest.approx(divide, rel=1e-6)
    assert not framework("torchtitan").zero3_grad_predivide  # FSDP reduces in its own buffer, no pre-divide pass


def test_the_azure_rows_offload_activations_exactly_where_they_would_not_fit():
    """The recipes set no CPU checkpointing; the 1T and 2T rows offload every layer's input on the post's word
    ('activation and optimizer states are allocated in the main memory') because without it they need more than
    80 GB; the 175B and 530B rows fit without and leave it out."""
    from commlens.project.errors import InfeasibleLayoutError

    for row in load_set("deepspeed-zero3-azure-2022").rows:
        w = load_workload(row.workload, row.overrides)
        lay = ParallelLayout.model_validate({k: v for k, v in row.layout.items() if k != "offload_activation_layers"})
        offloads = bool(row.layout.get("offload_activation_layers"))
        try:
            project(w, load_topology(row.topology), lay, row.gpus)
        except InfeasibleLayoutError:
            assert offloads, row.workload
        else:
            assert not offloads, row.workload
