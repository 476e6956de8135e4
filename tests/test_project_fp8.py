"""fp8 scaling recipes as Transformer Engine runs them (ParallelLayout.fp8_recipe, kernels.FP8_RECIPES): what each
cast moves and launches, and MXFP8's block-scaled GEMMs, from TE v2.16's quantizers and its GEMM benchmark."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from commlens.project import ParallelLayout, Projection, project
from commlens.project.efficiency import mxfp8_quantize_fit
from commlens.project.hardware import active_devices
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

GB200 = load_topology("gb200-nvl72")
H100 = load_topology("dgx-h100")
W70 = load_workload("llama3-70b", {"seq_len": 8192, "global_batch": 256, "micro_batch": 1, "precision": "fp8"})


def _70b(topology, recipe: str | None, **layout: object) -> Projection:
    """Llama 3 70B in fp8 on 64 GPUs (the 26.04.01 GB200 MXFP8 row's TP 2, PP 4 x VP 5 unless given)."""
    lay = {"tp": 2, "sp": True, "pp": 4, "vpp": 5, "recompute": "none", "framework": "nemo", **layout}
    return project(W70, topology, ParallelLayout(**lay, fp8_recipe=recipe), 64)  # type: ignore[arg-type]


def test_a_layout_names_its_recipe_and_an_unknown_one_is_refused():
    assert ParallelLayout(fp8_recipe="mxfp8").fp8_recipe == "mxfp8"
    assert ParallelLayout(fp8_recipe="nvfp4").fp8_recipe == "nvfp4"  # [27 s25 nvfp4]
    with pytest.raises(ValidationError):
        ParallelLayout(fp8_recipe="fp4")  # type: ignore[arg-type]


def test_current_scaling_reads_the_tensor_twice_where_delayed_and_mxfp8_cast_in_one_pass():
    """On Blackwell (fp8 GEMMs in any layout, no transposed copy): delayed 2 + 1 B an element, current scaling
    2 (amax) + 2 + 1 B, MXFP8 2 + 1 + 1 B and its 1/32 B scales per direction."""
    cast = {r: _70b(GB200, r).kernels["fp8_cast"] for r in ("delayed", "current", "mxfp8")}
    assert cast["current"] / cast["delayed"] == pytest.approx(5.0 / 3.0, rel=1e-9)
    # MXFP8's casts are priced per quantize kernel from TE's measured times (tests/test_project_mxcast.py): a fixed
    # time each besides their bytes, so they take more than their bytes at the measured kernels' rate [27 s10 mxcast]
    # (current scaling's bytes stream at the device's memory_efficiency, measured apart on Blackwell [27 s11 bwratio])
    dev = active_devices()["B200 (GB200)"]
    fit = mxfp8_quantize_fit("B200 (GB200)")
    assert fit is not None
    elements = cast["current"] * dev.hbm_bytes_per_s * dev.memory_efficiency / 5.0
    assert cast["mxfp8"] > elements * (4.0 + 2.0 / 32) / fit[1]


def test_hopper_casts_write_the_transpose_as_well():
    """Hopper's fp8 GEMMs take only the TN layout: the per-tensor recipes also write a transposed copy (1 B).
    (Without sequence parallelism: under it current scaling gathers fp8 and transposes the gathered tensor instead,
    tests/test_project_fp8cs.py.)"""
    lay = {"tp": 4, "pp": 8, "vpp": 5, "sp": False, "recompute": "full"}
    cast = {r: _70b(H100, r, **lay).kernels["fp8_cast"] for r in ("delayed", "current")}
    assert cast["current"] / cast["delayed"] == pytest.approx(6.0 / 4.0, rel=1e-9)
    # the same layout on Blackwell moves 5 B where Hopper moves 6 (per element cast)
    assert _70b(GB200, "current", **lay).kernels["fp8_cast"] < cast["current"]


def test_mxfp8_gemms_run_at_the_rate_te_s_benchmark_prints():
    """TE's pre-quantized GEMM benchmark on a B300, its two published runs of one 5B layer (PR #2863): 1.94x BF16
    per-tensor fp8 against 1.74x MXFP8 (speedups.rst's figure), 6.812 against 7.161 ms (gemm_profiling.rst's table);
    MXFP8's GEMMs run at the mean ratio [27 s23 mxrate], and with the casts an MXFP8 step is slower than the same layout
    with current scaling. (GEMMs at the HBM floor keep their time: the ratio is the rate's where the GEMMs are
    compute-bound, a little under it overall.)"""
    cur, mx = _70b(GB200, "current"), _70b(GB200, "mxfp8")
    ratio = mx.kernels["gemm"] / cur.kernels["gemm"]
    rate = (1.74 / 1.94 + 6.812 / 7.161) / 2
    assert rate == pytest.approx(0.924, abs=0.001)
    assert ratio == pytest.approx(1 / rate, rel=0.01) and ratio <= 1 / rate + 1e-12
    assert mx.step_time_s > cur.step_time_s * 1.01


def test_a_layout_without_a_recipe_runs_the_framework_s_default():
    """NeMo's performance configs (and the model before recipes) run per-tensor current scaling."""
    assert _70b(GB200, None).step_time_s == _70b(GB200, "current").step_time_s


def test_the_26_04_dense_rows_record_the_recipe_their_page_names():
    """Each fp8 row of the Megatron-Bridge 26.04.01 dense table says MXFP8 or FP8 (current scaling) in its note (the
    page's precision and its FP8_MX / FP8_CS base config); its layout records the same."""
    rows = load_set("megatron-bridge-perf-26.04.01-dense").rows
    recipes = [ParallelLayout(**r.layout).fp8_recipe for r in rows]  # type: ignore[arg-type]
    named = ["nvfp4" if "NVFP4" in r.note[:20] else "mxfp8" if "MXFP8" in r.note else "current" for r in rows]
    assert recipes == named
    assert recipes.count("mxfp8") == 4 and recipes.count("nvfp4") == 4
