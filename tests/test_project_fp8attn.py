"""FP8 attention (``ParallelLayout.fp8_attention``): Megatron-Core's fp8_dot_product_attention, Transformer Engine's
fp8_dpa on cuDNN's fused attention, priced with cudnn-frontend's published fp8 / MXFP8 SDPA curves and refused where
TE has no backend for it (TE 4329ff84 dot_product_attention/utils.py get_attention_backend)."""

from __future__ import annotations

import pytest

from commlens.project import InfeasibleLayoutError, ParallelLayout, project
from commlens.project.efficiency import attention_tflops
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

GB200 = "B200 (GB200)"


def _row(workload: str, topology: str):
    row = next(
        r for r in load_set("megatron-bridge-perf-26.08-moe").rows if (r.workload, r.topology) == (workload, topology)
    )
    return load_workload(row.workload, row.overrides), dict(row.layout), row


def _run(w, layout: dict, row, fp8_attention: str | None):
    lay = {k: v for k, v in layout.items() if k != "fp8_attention"}
    if fp8_attention:
        lay["fp8_attention"] = fp8_attention
    return project(w, load_topology(row.topology), ParallelLayout(**lay), row.gpus, check_memory=False)


def test_the_published_mxfp8_curves_are_read_apart_from_bf16():
    """cudnn-frontend d6d35d69 llama3.1/gb200 (cuDNN 9.27): at 4k, causal, head dim 128, MXFP8 runs the forward at
    1698 TFLOP/s against BF16's 1319 and the backward at 989 against 1102."""
    assert attention_tflops(GB200, "cudnn_mxfp8", "fwd", 128, 4096) == pytest.approx(1698e12)
    assert attention_tflops(GB200, "cudnn_mxfp8", "bwd", 128, 4096) == pytest.approx(989e12)
    assert attention_tflops(GB200, "cudnn", "fwd", 128, 4096) == pytest.approx(1319e12)
    assert attention_tflops(GB200, "cudnn_fp8", "fwd", 128, 4096) == pytest.approx(1792e12)
    assert attention_tflops("H100 SXM", "cudnn_fp8", "fwd", 128, 4096) == pytest.approx(854e12)


def test_fp8_attention_on_the_26_08_rows():
    """Forward in MXFP8 is faster, the published backward slower than BF16's on GB200 at 4k, so the step with the
    backward in fp8 (TE's default) is slower than with the forward only, and the casts of Q, K, V and dO appear."""
    w, layout, row = _row("qwen3-30b-a3b", "gb200-nvl72")
    off, fwd, both = (_run(w, layout, row, v) for v in (None, "fwd", "fwd_bwd"))
    assert "fp8_cast" in off.kernels and fwd.kernels["fp8_cast"] > off.kernels["fp8_cast"]
    assert fwd.kernels["attention"] < off.kernels["attention"] < both.kernels["attention"]
    assert both.kernels["fp8_cast"] > fwd.kernels["fp8_cast"]  # dO cast before the fp8 backward
    assert fwd.step_time_s < off.step_time_s < both.step_time_s


def test_windowed_layers_read_the_windowed_fp8_curve():
    """cudnn-frontend 07b111f1 gpt_oss/gb200 (cuDNN 9.27; 9.22 reads the same): over a 128-key window the fp8
    backward runs at 41 TFLOP/s against BF16's 183 at 4k, so gpt-oss's step with fp8 attention is slower."""
    assert attention_tflops(GB200, "cudnn_mxfp8", "bwd", 64, 4096, window=128) == pytest.approx(41e12)
    assert attention_tflops(GB200, "cudnn", "bwd", 64, 4096, window=128) == pytest.approx(183e12)
    w, layout, row = _row("gpt-oss-120b", "gb200-nvl72")
    off, both = _run(w, layout, row, None), _run(w, layout, row, "fwd_bwd")
    assert both.kernels["attention"] > 1.5 * off.kernels["attention"]  # half the layers are windowed


def test_the_recipes_that_set_it():
    """v0.6.0 51885cf1: every 26.08 helper sets fp8_dot_product_attention but DeepSeek-V3's on GB200."""
    rows = load_set("megatron-bridge-perf-26.08-moe").rows
    on = {(r.workload, r.topology) for r in rows if r.layout.get("fp8_attention") == "fwd_bwd"}
    assert len(on) == 7 and ("deepseek-v3-like", "gb200-nvl72") not in on
    for name in ("megatron-bridge-perf-25.11", "megatron-bridge-perf-26.04.01-moe", "nemo-perf-24.07"):
        assert not any("fp8_attention" in r.layout for r in load_set(name).rows)


def test_where_te_has_no_fp8_attention():
    w, layout, row = _row("qwen3-30b-a3b", "gb200-nvl72")
    bf16 = load_workload("llama3-8b", {"precision": "bf16"})
    with pytest.raises(InfeasibleLayoutError, match="precision fp8"):
        project(bf16, load_topology("dgx-h100"), ParallelLayout(dp=8, fp8_attention="fwd_bwd"), 8, check_memory=False)
    with pytest.raises(InfeasibleLayoutError, match="cuDNN"):
        _run(w, {**layout, "attention_kernel": "fa3"}, row, "fwd_bwd")
    dense = load_workload("llama3-8b", {"precision": "fp8"})
    h100 = load_topology("dgx-h100")
    with pytest.raises(InfeasibleLayoutError, match="no fp8 attention"):
        project(
            dense, h100, ParallelLayout(dp=8, framework="torchtitan", fp8_attention="fwd_bwd"), 8, check_memory=False
        )
    for recipe in ("mxfp8", "current"):  # sm100 only
        with pytest.raises(InfeasibleLayoutError, match="Blackwell"):
            project(
                dense, h100, ParallelLayout(dp=8, fp8_recipe=recipe, fp8_attention="fwd_bwd"), 8, check_memory=False
            )
    delayed = project(
        dense, h100, ParallelLayout(dp=8, fp8_recipe="delayed", fp8_attention="fwd"), 8, check_memory=False
    )
    plain = project(dense, h100, ParallelLayout(dp=8, fp8_recipe="delayed"), 8, check_memory=False)
    assert delayed.kernels["attention"] < plain.kernels["attention"]  # Hopper's fp8 forward: 854 vs 591 at 4k


def test_the_26_08_table_projects_with_it():
    results = validate_set(load_set("megatron-bridge-perf-26.08-moe"))
    assert all(r.predicted is not None for r in results)


def test_mxfp8_gemms_are_refused_below_blackwell():
    """Transformer Engine runs MXFP8 only from compute capability 10.0 (check_mxfp8_support): an H100 layout asking
    for it is refused with the way out, not projected at Blackwell's block-scaled rates."""
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "precision": "fp8"})
    layout = ParallelLayout(tp=1, sp=False, dp=8, fp8_recipe="mxfp8")
    with pytest.raises(InfeasibleLayoutError, match="compute capability 10.0"):
        project(w, load_topology("dgx-h100"), layout, 8, check_memory=False)
    assert project(w, load_topology("b200"), layout, 8, check_memory=False).step_time_s > 0
