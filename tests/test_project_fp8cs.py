"""FP8 current scaling (Transformer Engine Float8CurrentScaling) on Hopper as TE v2.9 / v2.16 run it [27 s10 fp8cs]:
the casts a layer pays and their size against TE's own benchmark, the fp8 TP all-gather with its amax all-reduce,
and the transpose of the gathered tensor that Hopper's TN-only fp8 GEMMs need."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, Projection, project
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import (
    FP8_RECIPES,
    LayerShape,
    _Builder,
    fp8_cast_bytes,
    fp8_gather_transposes,
    fp8_tp_amax_reductions,
    fp8_tp_gathers,
    tp_fp8_all_gather,
)
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")
B200 = load_topology("b200")


def _70b(topology, precision: str, **layout: object) -> Projection:
    """Llama 3 70B on 64 GPUs at TP 4 / PP 8 x VP 5 with sequence parallelism (the 26.04.01 H100 FP8-CS row's
    layout), current scaling."""
    w = load_workload("llama3-70b", {"seq_len": 8192, "global_batch": 256, "micro_batch": 1, "precision": precision})
    lay = {"tp": 4, "sp": True, "pp": 8, "vpp": 5, "recompute": "none", "framework": "nemo", **layout}
    return project(w, topology, ParallelLayout(**lay), 64)  # type: ignore[arg-type]


def test_current_scaling_casts_cost_what_te_s_hopper_benchmark_measures():
    """TE's GEMM benchmark on an H200 (docs/examples/gemm_profiling/gemm_profiling.rst at d0067d0d: a 5B layer,
    hidden 4096, FFN 16384, 15,872 tokens; te.Linear autocast against pre-quantized GEMMs) spends 20.285 - 16.785 =
    3.50 ms a layer quantizing under current scaling, 18.978 - 16.785 = 2.19 ms under delayed scaling. Each of its
    12 GEMMs casts its input and its weight (both layouts: the weights require grad). The model's bytes per element
    at the H200's streaming rate give the same within 20%, and current costs more than delayed as it does there."""
    h, f, m = 4096, 16384, 15872
    shapes = [(m, h, 3 * h), (m, h, h), (m, h, f), (m, f, h)]  # forward (M, K, N)
    shapes += [(m, n, k) for m, k, n in shapes] + [(k, m, n) for m, k, n in shapes]  # data and weight gradients
    elements = sum(m * k + k * n for m, k, n in shapes)
    dev = device_for("H200 SXM")
    model = {r: stream_time_s(dev, fp8_cast_bytes(dev, FP8_RECIPES[r]) * elements) for r in ("current", "delayed")}
    assert model["current"] == pytest.approx(3.50e-3, rel=0.2)
    assert model["delayed"] == pytest.approx(2.19e-3, rel=0.2)
    assert model["current"] / model["delayed"] == pytest.approx(3.50 / 2.19, rel=0.1)


def test_an_fp8_moe_layer_on_h100_pays_the_casts_and_launches_te_runs_per_expert():
    """Qwen3-30B-A3B on 16 H100s as the 26.04.01 FP8-CS row runs it (TP 1, EP 16): each local expert's input and
    output gradient is cast with three kernels (amax, scale, quantize) and every GEMM input costs 6 B an element
    (a transposed copy on Hopper); BF16 has neither. No TP, so no amax all-reduce or gathered transpose."""
    w = {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1}
    lay = ParallelLayout(tp=1, ep=16, pp=1, recompute="none", framework="nemo", moe_dispatcher="hybridep")
    fp8 = project(load_workload("qwen3-30b-a3b", {**w, "precision": "fp8"}), H100, lay, 16)
    bf16 = project(load_workload("qwen3-30b-a3b", {**w, "precision": "bf16"}), H100, lay, 16)
    assert "fp8_cast" not in bf16.kernels
    assert fp8.kernels["fp8_cast"] > 0.05 * fp8.step_time_s
    assert fp8.kernels["launch_gap"] > 1.5 * bf16.kernels["launch_gap"]  # 3 casts per expert GEMM input and pass
    assert fp8.breakdown["tp_comm"] == 0.0


def test_amax_reductions_only_where_te_casts_before_a_tp_gather():
    """TE's _customize_quantizers_float8_current_scaling: the column-parallel inputs (forward) and the row-parallel
    output gradients (backward) under sequence parallelism; an MoE layer's experts are not TP-split."""
    mc = framework("megatron-core")
    fp8 = load_workload("llama3-70b", {"precision": "fp8"})
    sp = ParallelLayout(tp=4, sp=True)
    assert fp8_tp_amax_reductions(mc, fp8, sp, 4, False) == (2, 2)
    assert fp8_tp_amax_reductions(mc, fp8, sp, 4, True) == (1, 1)
    assert fp8_tp_amax_reductions(mc, fp8, ParallelLayout(tp=4, sp=False), 4, False) == (0, 0)
    assert fp8_tp_amax_reductions(mc, fp8, ParallelLayout(tp=4, sp=True, fp8_recipe="delayed"), 4, False) == (0, 0)
    assert fp8_tp_amax_reductions(mc, load_workload("llama3-70b", {"precision": "bf16"}), sp, 4, False) == (0, 0)
    # torchao's float8 TP reduces the amax of every TP-sharded tensor it casts (tests/test_project_tt70b.py)
    assert fp8_tp_amax_reductions(framework("torchtitan"), fp8, sp, 4, False) == (11, 7)


def test_delayed_scaling_gathers_fp8_too_without_the_amax_reductions():
    """Transformer Engine casts the shard before its TP all-gather under delayed scaling as well (v1.4 da30634a and
    v1.8 layernorm_linear.py / linear.py; v2.x's Float8Quantizer): the same fp8 gathers and Hopper transposes as
    current scaling, but no amax all-reduce (delayed scaling reads its amax history) [27 s12 tpovl]."""
    fp8 = load_workload("llama3-70b", {"precision": "fp8"})
    for name in ("megatron-core", "nemo-24.03", "nemo-24.07"):
        fw = framework(name)
        delayed = ParallelLayout(tp=4, sp=True, fp8_recipe="delayed", framework=name)
        assert tp_fp8_all_gather(fw, fp8, delayed)
        assert fp8_tp_gathers(fw, fp8, delayed, 4, False) == (2, 2)
        assert fp8_tp_amax_reductions(fw, fp8, delayed, 4, False) == (0, 0)
        assert not tp_fp8_all_gather(fw, fp8, ParallelLayout(tp=4, sp=True, fp8_recipe="mxfp8", framework=name))
    # the step: half the all-gather bytes of BF16 over TP, as under current scaling
    fp8_run, bf16_run = (_70b(H100, p, tp_comm_overlap=False, framework="nemo-24.03") for p in ("fp8", "bf16"))
    tp8, tp16 = (p.breakdown["tp_comm"] + p.overlapped_s.get("tp_comm", 0.0) for p in (fp8_run, bf16_run))
    assert tp8 < 0.85 * tp16


def test_hopper_transposes_the_gathered_fp8_tensors_and_blackwell_does_not():
    """Under TP 4 with sequence parallelism TE gathers fp8 row-wise and, on Hopper, transposes the gathered input
    and output gradient for the weight gradient: 2 B per gathered element, TP x 2 - 1 B per local element net of
    the local cast's own transpose. Blackwell's fp8 GEMMs take any layout: no transpose there."""
    w = load_workload("llama3-70b", {"seq_len": 8192, "micro_batch": 1, "precision": "fp8"})
    shape = LayerShape(tokens=8192, keys=8192, tp=4, ep=1, sp=True, tp_chunks=1)
    for topo, expected in ((H100, 4 * 8192 * 8192 / 4 * 7), (B200, None)):
        dev = device_for(topo.accelerator.name)
        b = _Builder(dev, framework("nemo"), False, 1e15, 1.0, 4)
        kernels = fp8_gather_transposes(b, w, ParallelLayout(tp=4, sp=True), shape, False)
        if expected is None:
            assert kernels == []
        else:
            assert kernels[0].fwd_s == 0.0 and kernels[0].bwd_s == pytest.approx(stream_time_s(dev, expected))


def test_te_s_tp_all_gathers_move_fp8():
    """The same TP 4 layout in fp8 moves half the all-gather bytes of BF16 over TP (the reduce-scatters stay
    16-bit), the amax all-reduces beside them."""
    fp8, bf16 = (_70b(H100, p, tp_comm_overlap=False) for p in ("fp8", "bf16"))
    tp8, tp16 = (p.breakdown["tp_comm"] + p.overlapped_s.get("tp_comm", 0.0) for p in (fp8, bf16))
    assert tp8 < 0.85 * tp16
