"""[27 s12 dsfixed] DeepSpeed ZeRO-3's per-step cost outside the passes: the persistent parameters gathered again
after every optimizer step (microsoft/DeepSpeed v0.6.2, 32d97976, stage3.py ``_post_step``)."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.frameworks import framework
from commlens.project.memory import stage_parameters
from commlens.project.scenario import Scenario
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

A100 = load_topology("dgx-a100")
LAYOUT = ParallelLayout(
    tp=1, sp=False, zero=3, recompute="full", grad_reduce_bytes=2, flash_attention=False, framework="deepspeed"
)


def _without_persistent_gathers(monkeypatch, threshold: float = 0):
    fw = framework("deepspeed")
    # [27 s14 zero3size] with no persistent parameters every bias would be gathered with its weight and copied out
    # of the coalesced buffer: that copy is held off on both sides, to isolate the post-step gathers
    off = {"zero3_persistence_threshold": threshold, "zero3_gather_copy_out": False}
    monkeypatch.setattr(step_mod, "framework", lambda name: fw.model_copy(update=off))


@pytest.mark.parametrize(
    ("workload", "gpus", "small"),
    [
        # 530B (h 20480, FFN 81920): QKV bias 61440 and FFN bias 81920 are under 1e5 -> all eight small tensors
        ("megatron-gpt-529.6b", 1024, lambda h, f: (h, h, 3 * h, h, h, h, f, h)),
        # 1T (h 25600, FFN 102400): the FFN's 4h bias is over 1e5 and is gathered with its weight instead
        ("megatron-gpt-1t", 1024, lambda h, f: (h, h, 3 * h, h, h, h, h)),
    ],
)
def test_deepspeed_gathers_each_persistent_parameter_again_after_the_step(monkeypatch, workload, gpus, small):
    """Every LayerNorm weight and bias and every bias under stage3_param_persistence_threshold (1e5) is gathered
    again after the optimizer step, one all-gather each over the 1024 ranks, and the step waits for them all:
    the step is longer by the layers' count of those collectives, each with its own ring latency."""
    assert framework("deepspeed").zero3_persistence_threshold == 1e5
    w = load_workload(workload, {"seq_len": 1024, "global_batch": 8 * gpus, "micro_batch": 8})
    _without_persistent_gathers(monkeypatch, 1e5)
    with_gathers = project(w, A100, LAYOUT, gpus, check_memory=False)
    c, _, _ = step_mod._setup(Scenario(w, A100, LAYOUT, gpus, check_memory=False))
    dp = c.r.groups["dp"]
    expected = w.layers * sum(c.comm("all_gather", n * 2, dp) for n in small(w.hidden, w.ffn_hidden))
    assert expected > 0.5  # hundreds of latency-bound collectives at 1024 ranks: most of a second or more
    _without_persistent_gathers(monkeypatch)
    without = project(w, A100, LAYOUT, gpus, check_memory=False)
    assert with_gathers.breakdown["dp_comm"] - without.breakdown["dp_comm"] == pytest.approx(expected, rel=1e-9)
    assert with_gathers.step_time_s - without.step_time_s == pytest.approx(expected, rel=1e-6)


def test_only_deepspeed_zero3_regathers_its_persistent_parameters():
    """ZeRO-1 (MT-NLG's stage) keeps every parameter gathered, and FSDP has no persistent parameters."""
    assert not framework("torchtitan").zero3_persistence_threshold
    assert not framework("megatron-core").zero3_persistence_threshold
    w = load_workload("megatron-gpt-529.6b", {"seq_len": 2048, "global_batch": 1920})
    lay = ParallelLayout(tp=8, pp=35, zero=1, recompute="full", framework="deepspeed")
    c, _, _ = step_mod._setup(Scenario(w, A100, lay, 2240, check_memory=False))
    assert step_mod._zero3_persistent_gathers_s(c, 3) == 0.0


def test_deepspeeds_2021_zero1_all_reduces_the_whole_gradients():
    """DeepSpeed v0.5.4 runs ZeRO stage 1 through stage2.py with contiguous gradients forced off, so each bucket
    goes through buffered_reduce_fallback -> allreduce_bucket, whose rank is set to None: an all-reduce of the whole
    gradients, then the updated partitions' all-gather. MT-NLG's rows say so (zero1_all_reduce); the step is longer
    by an all-reduce less a reduce-scatter of the pace stage's gradients."""
    w = load_workload("megatron-gpt-529.6b", {"seq_len": 2048, "global_batch": 1920})
    lay = {"tp": 8, "sp": False, "pp": 35, "zero": 1, "recompute": "full", "overlap_grad_reduce": False}
    lay |= {"grad_reduce_bytes": 2, "flash_attention": False, "pp_p2p": "serial"}
    scatter = project(w, A100, ParallelLayout(**lay), 2240, check_memory=False)
    whole = project(w, A100, ParallelLayout(**lay, zero1_all_reduce=True), 2240, check_memory=False)
    c, _, _ = step_mod._setup(Scenario(w, A100, ParallelLayout(**lay), 2240, check_memory=False))
    dp = c.r.groups["dp"]
    grads = max(dense for dense, _ in stage_parameters(w, c.r)) * 2
    extra = c.comm("all_reduce", grads, dp) - c.comm("reduce_scatter", grads, dp)
    assert extra > 0.1  # 2e9 16-bit gradients over 8 nodes
    assert whole.step_time_s - scatter.step_time_s == pytest.approx(extra, rel=1e-6)
    for row in load_set("mt-nlg-530b").rows:
        assert row.layout["zero1_all_reduce"] is True
