"""torch's async TP (torchtitan's experimental.enable_async_tensor_parallel) as torch 2.5-2.6 runs it: each fused
collective overlaps its own matmul's chunks, not the layer's other GEMMs."""

from __future__ import annotations

from commlens.project import ParallelLayout, project
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")


def _tp(heads: dict[str, int], overlap: bool):
    w = load_workload("llama3-70b", {"seq_len": 8192, "micro_batch": 2, "global_batch": 64, **heads})
    lay = ParallelLayout(
        tp=8, sp=True, zero=3, framework="torchtitan", tp_comm_overlap=overlap, recompute="full", compile=True
    )
    return project(w, H100, lay, 256)


def test_async_tp_hides_each_collective_behind_its_own_matmul_only():
    """A narrow attention (16 heads of 128: the output projection's K per GPU a quarter of Llama 3 70B's) leaves the
    reduce-scatter after it, and the all-gather of its output gradient, longer than their matmuls: the fused op
    returns after its last copy (torch/distributed/_symmetric_memory _pipelined_produce_and_all2all,
    _pipelined_all_gather_and_consume), so the FFN's long GEMMs later in the layer cannot hide the rest. The same TP
    bytes go over the link either way (hidden x tokens per collective)."""
    wide, narrow = _tp({}, True), _tp({"heads": 16, "kv_heads": 8, "head_dim": 128}, True)
    plain_wide, plain_narrow = _tp({}, False), _tp({"heads": 16, "kv_heads": 8, "head_dim": 128}, False)
    assert plain_narrow.breakdown["tp_comm"] == plain_wide.breakdown["tp_comm"]
    assert narrow.breakdown["tp_comm"] > 1.25 * wide.breakdown["tp_comm"]
    assert narrow.overlapped_s["tp_comm"] < 0.85 * wide.overlapped_s["tp_comm"]
    # what async TP saves is at most what its matmuls could cover
    assert plain_narrow.step_time_s - narrow.step_time_s < plain_wide.step_time_s - wide.step_time_s
