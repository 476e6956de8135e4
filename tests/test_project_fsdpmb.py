"""ZeRO-3 under gradient accumulation: how many reduce-scatters and gathers each stack issues per micro-batch.

Megatron FSDP (optim_grads_params) reduce-scatters every micro-batch's gradients in its backward
(NVIDIA/Megatron-LM 1e057005 megatron/core/distributed/custom_fsdp/fully_sharded_data_parallel.py and 92c8482e /
44151194 megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py: ``grad_reduce_every_bprop``), gathers
each layer in the forward and again in the backward, and under full recomputation the recomputed forward's gather
is the one the backward uses (``_post_forward`` keeps the parameters in PRE_BACKWARD). DeepSpeed ZeRO-3 reduces
every micro-batch too (stage3.py at v0.6.2 32d97976)."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.layout import Group
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")
LAYERS = 32
PARAMS = 8.0e9  # a stage's parameters, sharded over the DP group
DP = Group(size=8, nodes=1, ranks_per_host=8)
NONE = Group(size=1, nodes=1, ranks_per_host=8)


def _rate(op: str, nbytes: float, group: Group) -> float:
    """A network with no latency: seconds = bytes / 1e11, any collective."""
    return nbytes / 1.0e11


def _fsdp_comm(fw_name: str, micro_batches: int, redone: float) -> float:
    """Exposed plus hidden ZeRO-3 communication of one step (``_dp_tail``'s second and fifth values)."""
    fw = framework(fw_name)
    lay = ParallelLayout(tp=1, sp=False, zero=3, grad_reduce_bytes=2, framework=fw_name)
    st = {"layers": float(LAYERS), "compute": 1.0e-9, "memory_bound": 0.0, "tp_comm": 0.0}  # nothing hides it
    tail = step_mod._dp_tail(
        _rate, device_for(H100.accelerator.name), lay, PARAMS, 0.0, DP, NONE, 2, 0.0, st, redone, micro_batches, fw
    )
    return tail[1] + tail[4]


GATHER = PARAMS * 2 / 1.0e11  # one all-gather of every parameter in 16 bits
REDUCE = PARAMS * 2 / 1.0e11  # one reduce-scatter of every gradient in 16 bits
# Megatron FSDP's in-place 1/DP pre-scale of each bf16 bucket before its reduce-scatter (tests/test_project_fsdpscale.py)
PRESCALE = stream_time_s(device_for(H100.accelerator.name), 2 * 2 * PARAMS)


@pytest.mark.parametrize("micro_batches", [1, 4, 16])
def test_megatron_fsdp_reduce_scatters_and_gathers_twice_every_micro_batch(micro_batches):
    """Gradient accumulation does not defer Megatron FSDP's reduce-scatter: each micro-batch gathers twice (forward,
    backward) and reduce-scatters once, so the step's FSDP traffic grows with the micro-batch count."""
    assert framework("megatron-core").zero3_reduce_every_microbatch
    assert framework("nemo").zero3_reduce_every_microbatch  # Megatron-Bridge runs Megatron-Core's FSDP
    assert _fsdp_comm("megatron-core", micro_batches, 0.0) == pytest.approx(
        micro_batches * (2 * GATHER + REDUCE + PRESCALE)
    )


def test_megatron_fsdp_recompute_reuses_its_gather_in_the_backward():
    """Under full recomputation Megatron FSDP gathers a layer in the forward and once in the backward (the
    recomputed forward's gather, kept for the backward): still two gathers a micro-batch, where a stack whose
    recomputed forward gathers as a pass of its own (the default) has three."""
    assert framework("megatron-core").zero3_recompute_keeps_gather
    assert _fsdp_comm("megatron-core", 4, 1.0) == pytest.approx(4 * (2 * GATHER + REDUCE + PRESCALE))
    assert not framework("deepspeed").zero3_recompute_keeps_gather
    # DeepSpeed: three gathers a micro-batch under recomputation, and its pre-divide pass before each reduction
    divide = stream_time_s(device_for(H100.accelerator.name), 2 * 2 * PARAMS)
    assert _fsdp_comm("deepspeed", 4, 1.0) == pytest.approx(4 * (3 * GATHER + REDUCE + divide))


def test_deepspeed_zero3_reduces_every_micro_batch():
    """DeepSpeed's ZeRO-3 gradient hooks reduce-scatter whatever is_gradient_accumulation_boundary says."""
    assert framework("deepspeed").zero3_reduce_every_microbatch
    four, one = _fsdp_comm("deepspeed", 4, 0.0), _fsdp_comm("deepspeed", 1, 0.0)
    assert four == pytest.approx(4 * one)


def test_a_megatron_fsdp_step_pays_the_reduction_in_every_micro_batch(monkeypatch):
    """Projected end to end: with 16 micro-batches, Megatron FSDP's DP time is what it would be with the reduction
    deferred to the last micro-batch plus the other 15 micro-batches' reduce-scatters' exposed share."""
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 128, "micro_batch": 1})
    lay = ParallelLayout(tp=1, sp=False, zero=3, recompute="none", grad_reduce_bytes=2, framework="megatron-core")
    every = project(w, H100, lay, 8, check_memory=False)
    fw = framework("megatron-core")
    monkeypatch.setattr(
        step_mod, "framework", lambda name: fw.model_copy(update={"zero3_reduce_every_microbatch": False})
    )
    last_only = project(w, H100, lay, 8, check_memory=False)
    assert every.breakdown["dp_comm"] > last_only.breakdown["dp_comm"]
    assert every.step_time_s > last_only.step_time_s


def test_torch_fsdp2_recompute_inside_the_unit_gathers_no_third_time():
    """torchtitan checkpoints each block inside its FSDP2 unit, and FSDP2's pre-forward returns at once during the
    pre-backward (``FSDPState._pre_forward``, torch 2.4-2.6): the recomputed forward uses the backward's gather, so
    full recomputation adds no FSDP traffic to a micro-batch, where a stack that gathers for it again pays a third
    gather."""
    assert framework("torchtitan").zero3_recompute_keeps_gather
    assert _fsdp_comm("torchtitan", 4, 1.0) == pytest.approx(_fsdp_comm("torchtitan", 4, 0.0))
    assert _fsdp_comm("deepspeed", 4, 1.0) > _fsdp_comm("deepspeed", 4, 0.0) + 3 * GATHER
