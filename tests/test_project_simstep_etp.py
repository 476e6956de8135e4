"""[27 s16 simetp] ``commlens sim step`` with the all-to-all dispatcher and expert TP, as the projection prices it
([27 s16 grokh100], ``step._etp_gather_s``): each rank sends its own sequence shard over the EP group, then the
expert-TP group all-gathers the received copies and reduce-scatters the experts' output (Megatron-Core core_r0.9.0 /
core_r0.10.0 megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher)."""

from __future__ import annotations

import pytest

from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.simstep import SimStep, simulate_step
from commlens.project.step import run
from commlens.topology import load_topology
from commlens.workload import load_workload

# the Grok-1 proxy of NVIDIA/dgxc-benchmarking v24.11.1 grok1/configure.sh (4 layers, seq 4096, TP 4, EP 8) on 32
# GPUs, 8 micro-batches
SET = {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "precision": "bf16", "layers": 4}
LAYOUT = {"tp": 4, "sp": True, "ep": 8, "dp": 8, "zero": 1}


def _step(**extra: object) -> tuple[SimStep, float]:
    w = load_workload("grok-1-314b", SET)
    scenario = Scenario(w, load_topology("dgx-h100"), ParallelLayout.model_validate(LAYOUT | extra), 32)
    return simulate_step(scenario), run(scenario).breakdown["ep_comm"]


def test_alltoall_with_expert_tp_sends_the_shard_and_gathers():
    """TP 4 = expert TP: the simulated EP communication (all-to-alls and the expert-TP all-gather / reduce-scatter)
    near the projection's; with the whole TP group's copies over EP it was 2.4x the projection's and the step 17%
    longer than projected."""
    step, ep_comm = _step(moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    assert step.communication_s["ep"] == pytest.approx(ep_comm, rel=0.2)
    assert step.step_time_s == pytest.approx(step.projected_step_time_s, rel=0.05)


def test_flex_dispatcher_keeps_its_bytes_and_folded_expert_tp_sends_its_share():
    """DeepEP dispatches over TP x EP: no expert-TP gather, the simulated EP as the projection's; with expert TP 1
    (folded) each rank sends its own shard (the projection's tokens x expert TP / TP), not TP times it."""
    step, ep_comm = _step(moe_dispatcher="deepep")
    assert step.communication_s["ep"] == pytest.approx(ep_comm, rel=0.05)
    folded, ep_folded = _step(moe_dispatcher="deepep", etp=1)
    assert folded.communication_s["ep"] == pytest.approx(ep_folded, rel=0.25)
    assert folded.communication_s["ep"] < 0.3 * step.communication_s["ep"]
