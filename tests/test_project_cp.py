"""Context parallelism as the stacks run it: torch's all-gather ring (torchtitan) against Transformer Engine's
p2p ring (Megatron-Core)."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.topology import load_topology
from commlens.workload import load_workload


def _cp8(framework: str, overlap: bool | None = None) -> Projection:
    """Llama 3.1 405B at 128K tokens, TP 8 inside each Grand Teton host and CP 8 across hosts (the layout of
    torchtitan's end-2024 Table 6)."""
    w = load_workload("llama3-405b", {"seq_len": 131072, "global_batch": 8, "micro_batch": 1, "precision": "fp8"})
    layout = ParallelLayout(
        tp=8, sp=True, cp=8, pp=1, zero=3, recompute="full", framework=framework, cp_comm_overlap=overlap
    )
    return run(Scenario(w, load_topology("grand-teton-h100-96gb"), layout, 64, check_memory=False))


def _cp_total(p: Projection) -> float:
    return p.breakdown["cp_comm"] + p.overlapped_s.get("cp_comm", 0.0)


def test_torch_all_gather_hides_only_behind_the_first_ring_step():
    """torch's _AllGatherRotater (torchtitan's default rotate method) gathers every rank's K/V in one all-gather
    issued beside the first step's attention and waited for before the second: over the network at 128K, most of
    it is exposed. Transformer Engine's ring sends one chunk a step beside that step's attention and hides most of
    its exchange; a layout that says the exchange is not overlapped exposes all of it."""
    torch_ring, te_ring = _cp8("torchtitan"), _cp8("megatron-core")
    assert torch_ring.breakdown["cp_comm"] > 0.4 * _cp_total(torch_ring)
    assert te_ring.breakdown["cp_comm"] < 0.2 * _cp_total(te_ring)
    exposed = _cp8("torchtitan", overlap=False)
    assert exposed.overlapped_s.get("cp_comm", 0.0) == 0.0
    assert exposed.breakdown["cp_comm"] > torch_ring.breakdown["cp_comm"]


def test_torch_ring_moves_expanded_k_v_and_fp32_gradients():
    """torchtitan repeats K/V to every query head before SDPA (16 per GPU for Llama 3.1 405B at TP 8, against one
    K/V head), so torch's ring gathers 16x the bytes Transformer Engine's ring passes; its backward passes the K/V
    gradients in fp32 (convert_to_f32), one exchange per ring step."""
    torch_ring, te_ring = _cp8("torchtitan"), _cp8("megatron-core")
    assert _cp_total(torch_ring) > 12 * _cp_total(te_ring)


def test_transformer_engine_ring_corrects_the_output_and_adds_gradients_every_step():
    """Transformer Engine's p2p ring (Megatron-Core) runs, per ring step beside the attention, one fused output
    correction (the step's 16-bit output read, the running output read and written: 6 B an element) and, backward,
    dq.add_ and dk/dv.add_ (6 B an element each); with load balance half the steps touch half the queries and the
    others half the K/V, 3/4 on average. K/V are not repeated to the query heads."""
    from commlens.project.compute import stream_time_s
    from commlens.project.hardware import device_for

    w = load_workload("llama3-8b", {"seq_len": 65536, "global_batch": 2, "micro_batch": 1})
    topo = load_topology("dgx-h100")
    p = run(Scenario(w, topo, ParallelLayout(tp=1, cp=4, recompute="full"), 8))
    tokens = 65536 / 4
    q = tokens * w.heads * w.v_head_dim
    kv = tokens * w.kv_heads_n * (w.qk_head_dim + w.v_head_dim)
    dev = device_for(topo.accelerator.name)
    steps = 3
    one_pass = steps * (2 * stream_time_s(dev, 4.5 * q) + stream_time_s(dev, 4.5 * q + 4.5 * kv))  # full recompute
    assert p.kernels["cp_ring"] == pytest.approx(one_pass * w.layers * p.layout["micro_batches"], rel=1e-6)


def test_torch_ring_pays_its_fp32_bookkeeping_once_a_call_when_eager():
    """torch's ring (torchtitan) does, besides its CP - 1 step updates, once per attention call: the K/V made
    contiguous, step 0's output converted to fp32 and the merged one back (forward, 12 B a query element and 4 a
    K/V element); fp32 zeroed gradient buffers, the K/V made contiguous again, the gradient updates of step 0 and the
    gradients converted back to 16 bits (backward, 20 and 32 B). Run eager, Llama 3.1 8B at 64K on 8 GPUs at CP 2
    (one ring step) pays that on every layer and pass; under torch.compile these pointwise ops fuse into the ring's
    updates and only the step updates are left."""
    from commlens.project.compute import stream_time_s
    from commlens.project.hardware import device_for

    w = load_workload("llama3-8b", {"seq_len": 65536, "global_batch": 4, "micro_batch": 1, "precision": "fp8"})
    topo = load_topology("grand-teton-h100-96gb")
    tokens = 65536 / 2
    q = tokens * w.heads * w.v_head_dim
    kv = tokens * w.heads * (w.qk_head_dim + w.v_head_dim)  # repeat_kv: K/V at query-head width
    dev = device_for(topo.accelerator.name)
    step_f, step_b = 10 * q + 4 * kv, 10 * q + 22 * kv  # one ring step's updates (Framework.cp_step_bytes)
    call_f, call_b = 12 * q + 4 * kv, 20 * q + 32 * kv  # once a call, eager

    def cp_ring(compile_: bool) -> float:
        layout = ParallelLayout(tp=1, cp=2, zero=3, recompute="full", compile=compile_, framework="torchtitan")
        p = run(Scenario(w, topo, layout, 8))
        return p.kernels["cp_ring"] / (w.layers * p.layout["micro_batches"])

    eager = 2 * stream_time_s(dev, step_f + call_f) + stream_time_s(dev, step_b + call_b)  # full recompute
    assert cp_ring(False) == pytest.approx(eager, rel=1e-6)
    assert cp_ring(True) == pytest.approx(2 * stream_time_s(dev, step_f) + stream_time_s(dev, step_b), rel=1e-6)
