"""[27 s18 zerograd] Megatron-Core zeroes its whole DDP gradient buffer at the start of every step (Megatron-LM
training.py ``train_step`` -> ``zero_grad_buffer`` -> ``_ParamAndGradBuffer.reset``: ``grad_data.zero_()``): a write of
every local gradient in the reduce dtype, which the stacks that set gradients to None do not pay."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.memory import stage_parameters
from commlens.project.scenario import Scenario
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")


def _without_zeroing(monkeypatch):
    real = step_mod.framework
    monkeypatch.setattr(step_mod, "framework", lambda name: real(name).model_copy(update={"zero_grad_buffer": False}))


@pytest.mark.parametrize("grad_bytes", [2, 4])
def test_the_step_writes_every_local_gradient_once_to_zero_it(monkeypatch, grad_bytes):
    """Llama 3 8B on 16 H100s, DP 16 over the distributed optimizer: the optimizer share (and the step) grow by the
    local parameters x the gradient buffer's dtype at HBM rate, the whole buffer, not the optimizer's 1/16 shard."""
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 16, "micro_batch": 1})
    layout = ParallelLayout(tp=1, zero=1, grad_reduce_bytes=grad_bytes, overlap_grad_reduce=True)
    with_zero = project(w, H100, layout, 16, check_memory=False)
    c, _, _ = step_mod._setup(Scenario(w, H100, layout, 16, check_memory=False))
    dense, expert = stage_parameters(c.w, c.r, layout.schedule)[0]
    expected = stream_time_s(c.dev, (dense + expert) * grad_bytes)
    assert dense > 7.5e9 and expected > 2e-3  # 8B gradients: milliseconds a step on H100
    _without_zeroing(monkeypatch)
    without = project(w, H100, layout, 16, check_memory=False)
    assert with_zero.breakdown["optimizer"] - without.breakdown["optimizer"] == pytest.approx(expected, rel=1e-9)
    assert with_zero.step_time_s - without.step_time_s == pytest.approx(expected, rel=1e-6)


def test_only_megatron_cores_ddp_buffers_are_zeroed():
    """Its releases and NeMo inherit it; torch FSDP2 under Megatron, torchtitan and DeepSpeed set gradients to None;
    Megatron FSDP (ZeRO 3) keeps sharded gradients, and none is charged there."""
    for name in ("megatron-core", "megatron-core-25.09", "nemo", "nemo-25.04"):
        assert framework(name).zero_grad_buffer, name
    for name in ("megatron-core-fsdp2", "torchtitan", "deepspeed", "llm-foundry"):
        assert not framework(name).zero_grad_buffer, name
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 16, "micro_batch": 1})
    c, _, _ = step_mod._setup(Scenario(w, H100, ParallelLayout(tp=1, zero=3), 16, check_memory=False))
    assert step_mod._zero_grad_buffer_s(c, 8e9) == 0.0
