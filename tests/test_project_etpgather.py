"""[27 s16 grokh100] Megatron-Core's all-to-all dispatcher with expert TP: each rank sends its own sequence shard over
the EP group, then gathers the expert-TP group's copies after the transfer and reduce-scatters the experts' output
(core_r0.9.0 / core_r0.10.0 megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher:
tensor_parallel.all_to_all over the EP group, then gather_from_sequence_parallel_region; token_unpermutation's
reduce_scatter_to_sequence_parallel_region)."""

from __future__ import annotations

import pytest

from commlens.project.layout import ParallelLayout, resolve
from commlens.project.scenario import Scenario
from commlens.project.step import _comm_s, run
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

# the 32-GPU Grok-1 proxy of NVIDIA/dgxc-benchmarking v24.11.1 grok1/configure.sh (4 layers, seq 4096, TP 4, EP 8)
SET = {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "precision": "bf16", "layers": 4}
LAYOUT = {"tp": 4, "sp": True, "ep": 8, "dp": 8, "zero": 1, "moe_capacity_factor": 1.0, "moe_pad_to_capacity": True}


def _case(**extra):
    w = load_workload("grok-1-314b", SET)
    topo = load_topology("dgx-h100")
    layout = ParallelLayout.model_validate(LAYOUT | extra)
    return w, topo, layout, resolve(layout, w, 32, topo.accelerators_per_node)


def test_alltoall_sends_the_sequence_shard_and_gathers_over_expert_tp():
    w, topo, layout, r = _case()
    p = run(Scenario(w, topo, layout, 32))
    shard = w.seq_len / r.tp * w.moe.top_k * w.hidden * 2.0  # this rank's copies, 16 bits: 25.2 MB
    a2a = _comm_s(topo, "all_to_all", shard, r.groups["ep"])
    gather = _comm_s(topo, "all_gather", shard * r.tp, r.groups["etp"])
    scatter = _comm_s(topo, "reduce_scatter", shard * r.tp, r.groups["etp"])
    per_layer = 4 * a2a + 2 * (gather + scatter)  # dispatch and combine, forward and backward
    assert r.groups["etp"] == r.groups["tp"]  # expert TP as TP: the TP group, inside one node
    assert p.breakdown["ep_comm"] == pytest.approx(w.layers * r.micro_batches * per_layer, rel=1e-6)
    # the TP group's whole set of copies over EP, as priced before: 3.53 s of this row's step, now 1.2 s
    whole = 4 * _comm_s(topo, "all_to_all", shard * r.tp, r.groups["ep"]) * w.layers * r.micro_batches
    assert whole == pytest.approx(3.53, rel=0.02)
    assert p.breakdown["ep_comm"] < 0.4 * whole


def test_folded_expert_tp_pays_no_gather():
    w, topo, layout, r = _case(etp=1)
    p = run(Scenario(w, topo, layout, 32))
    shard = w.seq_len / r.tp * w.moe.top_k * w.hidden * 2.0
    a2a = _comm_s(topo, "all_to_all", shard, r.groups["ep"])
    assert p.breakdown["ep_comm"] == pytest.approx(w.layers * r.micro_batches * 4 * a2a, rel=1e-6)


def test_grok_launcher_rows_move_to_the_runs():
    """dgxc-moe's 36 Grok-1 NeMo 1 launcher rows (H100, TP 4 = expert TP, EP 8, alltoall): -12..-17% with the whole
    TP group's copies over EP; within +1..+16% with the shard and the expert-TP gather."""
    err = [s.error for s in validate_set(load_set("dgxc-moe"))][:36]
    assert sum(abs(e) for e in err) / 36 < 0.07
    assert max(abs(e) for e in err) < 0.16
