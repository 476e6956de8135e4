"""An MoE layer's kernels hold the GPU beyond their bytes (issue 27, the MoE rows at short micro-batches): DeepSeek's
published H800 training trace (deepseek-ai/profile-data train.json; benchmarks/moe_kernel_trace.py) shows a median
2 us between consecutive kernels on a stream the host keeps fed, and 2.5 us for a small ATen kernel whatever its
bytes. The model charges both per kernel the MoE layer launches on its main stream, as their own class
``launch_gap``."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, project
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import KERNEL_GAP_S, KERNEL_MIN_S, Kernel, LayerShape, layer_kernels
from commlens.topology import load_topology
from commlens.workload import load_workload

SHAPE = LayerShape(tokens=4096, keys=4096, tp=1, ep=8, sp=False, tp_chunks=1)


def _moe(precision: str = "bf16", layout: ParallelLayout | None = None) -> dict[str, Kernel]:
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "micro_batch": 1, "precision": precision})
    lay = layout or ParallelLayout(ep=8)
    ks = layer_kernels(device_for("H100 SXM"), framework("megatron-core"), w, lay, SHAPE, 989e12, 989e12, True)
    return {k.name: k for k in ks}


def test_the_routing_kernels_that_move_no_bytes_still_hold_the_gpu():
    """Megatron-Core's router launches 22 kernels forward and 10 backward beside its gating GEMM, priced at no bytes:
    each holds the GPU the trace's small-kernel time and the gap before the next, 4.5 us."""
    ks = _moe()
    assert ks["router_topk"].fwd_s == 0.0
    gap = ks["router_topk_gap"]
    assert gap.kind == "launch_gap"
    assert gap.fwd_s == pytest.approx(22 * (KERNEL_MIN_S + KERNEL_GAP_S))
    assert gap.bwd_s == pytest.approx(10 * (KERNEL_MIN_S + KERNEL_GAP_S))
    assert gap.launches == 0 and gap.bwd_launches == 0  # GPU time only: the host's launches are counted already


def test_a_kernel_longer_than_the_floor_pays_only_the_gap():
    """The permutation moves every routed token: longer than 2.5 us a kernel, so only the gaps are added."""
    ks = _moe()
    permute, gap = ks["permute"], ks["permute_gap"]
    assert permute.fwd_s > permute.launches * KERNEL_MIN_S
    assert gap.fwd_s == pytest.approx(permute.launches * KERNEL_GAP_S)
    assert gap.bwd_s == pytest.approx(permute.bwd_launches * KERNEL_GAP_S)


def test_expert_gemms_on_side_streams_pay_no_gap_but_their_casts_do():
    """Transformer Engine issues the per-expert GEMMs round-robin over its compute streams, where one stream's gap
    runs beside another's kernel: in bf16 the experts add nothing; under fp8 their per-expert casts, launched on the
    main stream, each pay the gap."""
    assert "experts_in_gap" not in _moe("bf16") and "experts_out_gap" not in _moe("bf16")
    fp8 = _moe("fp8")
    local = 128 // 8
    casts_fwd = fp8["experts_in"].launches - local
    assert casts_fwd >= local
    assert fp8["experts_in_gap"].fwd_s >= casts_fwd * KERNEL_GAP_S


def test_cuda_graphs_remove_the_gaps_of_the_kernels_they_capture():
    """Under CUDA graphs the router is replayed from the graph: no launch gap, but its small kernels still run their
    minimum time on the GPU [27 s23 graphmin]; the dispatch stays eager and keeps its own."""
    eager, graphed = _moe(), _moe(layout=ParallelLayout(ep=8, cuda_graphs=True))
    router = graphed["router_topk"]
    assert graphed["router_topk_gap"].fwd_s == pytest.approx(max(0.0, router.launches * KERNEL_MIN_S - router.fwd_s))
    assert graphed["router_topk_gap"].fwd_s < eager["router_topk_gap"].fwd_s - router.launches * 0.99 * KERNEL_GAP_S
    assert graphed["permute_gap"].fwd_s == pytest.approx(eager["permute_gap"].fwd_s)


def test_the_gaps_show_in_the_step_breakdown_and_weigh_more_in_an_moe_layer():
    """A user sees the class in the breakdown of any eager projection; an MoE layer's many small kernels give it a
    larger share of the step than a dense model's few long ones, and CUDA graphs remove the dense model's."""
    b200 = load_topology("b200")
    moe = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "global_batch": 256, "micro_batch": 1})
    p = project(moe, b200, ParallelLayout(ep=8), 8)
    dense = load_workload("llama3-8b", {"seq_len": 4096, "global_batch": 64, "micro_batch": 1})
    d = project(dense, b200, ParallelLayout(), 8)
    assert 0 < d.kernels["launch_gap"] < p.kernels["launch_gap"]
    assert "launch_gap" not in project(dense, b200, ParallelLayout(cuda_graphs=True), 8).kernels


def test_a_partly_captured_kernel_splits_its_side_stream_launches_with_its_launches():
    """[27 s23 graphmin] The all-to-all dispatcher's first permutation is half captured under ``moe_preprocess``: the
    eager half pays the minimum and the gap, the replayed half the minimum only, and launches on side streams (none
    of them waiting on the main one) leave each half in proportion, not twice."""
    from commlens.project.kernels import _scoped_gap

    layout = ParallelLayout(
        ep=8, cuda_graphs=True, cuda_graph_scope=["moe_router", "moe_preprocess"], moe_dispatcher="alltoall"
    )
    k = Kernel("permute", "moe_routing", 0.0, 0.0, launches=10.0, bwd_launches=20.0)
    got = _scoped_gap(k, (4.0, 8.0), layout, True)
    # eager half: (10 - 4) / 2 = 3 launches forward, (20 - 8) / 2 = 6 backward at min + gap; replayed half the same at min
    assert got is not None and got.kind == "launch_gap"
    assert got.fwd_s == pytest.approx(3 * (KERNEL_MIN_S + KERNEL_GAP_S) + 3 * KERNEL_MIN_S)
    assert got.bwd_s == pytest.approx(6 * (KERNEL_MIN_S + KERNEL_GAP_S) + 6 * KERNEL_MIN_S)
    # uncaptured it pays both on every main-stream launch; fully side-streamed nothing is left
    eager = _scoped_gap(k, (4.0, 8.0), ParallelLayout(ep=8), True)
    assert eager is not None and eager.fwd_s == pytest.approx(6 * (KERNEL_MIN_S + KERNEL_GAP_S))
    assert _scoped_gap(k, (10.0, 20.0), layout, True) is None
