"""[27 s14 zero3size] DeepSpeed ZeRO-3's copy-out of a coalesced gather: a submodule with more than one gathered
parameter (Megatron's h->4h linear once its 4h bias is over stage3_param_persistence_threshold, 1e5) is gathered into
one flat buffer and copied out of it on the gather stream (microsoft/DeepSpeed v0.6.2, 32d97976,
partition_parameters.py ``all_gather_coalesced`` / ``AllGatherCoalescedHandle.wait``)."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.scenario import Scenario
from commlens.topology import load_topology
from commlens.workload import load_workload

A100 = load_topology("dgx-a100")
LAYOUT = ParallelLayout(
    tp=1, sp=False, zero=3, recompute="full", grad_reduce_bytes=2, flash_attention=False, framework="deepspeed"
)


def _without_copy_out(monkeypatch):
    fw = framework("deepspeed")
    monkeypatch.setattr(step_mod, "framework", lambda name: fw.model_copy(update={"zero3_gather_copy_out": False}))


@pytest.mark.parametrize("workload", ["megatron-gpt-1t", "gpt-2t-deepspeed-azure"])
def test_deepspeed_copies_the_h_to_4h_linear_out_of_its_coalesced_gather(monkeypatch, workload):
    """1T (4h bias 102400) and 2T (131072): the h->4h weight and bias are gathered together and copied out, a read
    and a write of 2 bytes each, at the forward's, the recomputed forward's and the backward's gather of every
    layer: 2.5 s and 5 s a step on the A100, in the breakdown's dp_comm."""
    assert framework("deepspeed").zero3_gather_copy_out
    w = load_workload(workload, {"seq_len": 1024, "global_batch": 8192, "micro_batch": 8})
    with_copies = project(w, A100, LAYOUT, 1024, check_memory=False)
    c, _, _ = step_mod._setup(Scenario(w, A100, LAYOUT, 1024, check_memory=False))
    h, f = w.hidden, w.ffn_hidden
    expected = 3 * w.layers * stream_time_s(c.dev, 4.0 * (h * f + f))
    assert 2.0 < expected < 6.0
    _without_copy_out(monkeypatch)
    without = project(w, A100, LAYOUT, 1024, check_memory=False)
    assert with_copies.breakdown["dp_comm"] - without.breakdown["dp_comm"] == pytest.approx(expected, rel=1e-9)
    assert with_copies.step_time_s - without.step_time_s == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    ("workload", "layout"),
    [
        # 530B: every bias (QKV 61440, FFN 81920) is under 1e5, so each linear's weight is gathered alone, in place
        ("megatron-gpt-529.6b", LAYOUT),
        # Llama-style linears have no biases
        ("llama2-70b", LAYOUT),
        # FSDP gathers whole blocks into its own buffers
        ("megatron-gpt-1t", LAYOUT.model_copy(update={"framework": "torchtitan", "flash_attention": True})),
    ],
)
def test_no_copy_out_where_each_gathered_submodule_has_one_parameter(workload, layout):
    w = load_workload(workload, {"seq_len": 1024, "global_batch": 8192, "micro_batch": 8})
    c, _, _ = step_mod._setup(Scenario(w, A100, layout, 1024, check_memory=False))
    assert step_mod._zero3_gather_copies_s(c, w.layers, 1.0, 1) == 0.0
