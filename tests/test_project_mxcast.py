"""MXFP8 casts priced per quantize kernel from Transformer Engine's measured kernel times [27 s10 mxcast]: a fixed
time per kernel plus its bytes at the measured rate (efficiency.yaml ``mxfp8_quantize``), so GroupedLinear's
per-expert split_quantize pays the fixed time once per expert, and the fused grouped MLP's group quantize once."""

from __future__ import annotations

from importlib import resources

import pytest

from commlens.project import ParallelLayout, Projection, project
from commlens.project.efficiency import MXFP8_QUANTIZE_BYTES, mxfp8_quantize_fit
from commlens.specdata import load_yaml
from commlens.topology import load_topology
from commlens.workload import load_workload

GB200 = load_topology("gb200-nvl72")
# the 26.04.01 GB200 Qwen3-30B MXFP8 row's shape: 48 layers, 128 experts, 16 micro-batches of 4 per GPU
QWEN = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "global_batch": 512, "micro_batch": 4, "precision": "fp8"})


def _qwen(ep: int, recipe: str = "mxfp8", **layout: object) -> Projection:
    lay = {"tp": 1, "sp": False, "pp": 1, "ep": ep, "recompute": "none", "framework": "nemo", **layout}
    return project(QWEN, GB200, ParallelLayout(**lay, fp8_recipe=recipe, moe_dispatcher="hybridep"), 8)  # type: ignore[arg-type]


def _rows() -> list[tuple[str, float, float]]:
    data = load_yaml((resources.files("commlens.project") / "efficiency.yaml").read_text(encoding="utf-8"))
    return [
        (gpu, r["rows"] * r["cols"] * MXFP8_QUANTIZE_BYTES, r["us"] * 1e-6)
        for gpu, tables in data["gpus"].items()
        for r in tables.get("mxfp8_quantize") or []
    ]


def test_the_measured_quantize_times_are_a_fixed_time_per_kernel_plus_bytes_at_the_hbm_rate():
    """TE's kernel on GB200 (nsys) and B200: 16.0 us at 4096 x 4096 to 149.3 us at 8192 x 28672, every row within 6%
    of one line: about 5.9 us per kernel and 6.6 TB/s (0.83 of the 8 TB/s HBM)."""
    fixed, rate = mxfp8_quantize_fit("B200 (GB200)")  # type: ignore[misc]
    assert fixed == pytest.approx(5.9e-6, rel=0.02) and rate == pytest.approx(6.64e12, rel=0.01)
    rows = _rows()
    assert {gpu for gpu, _, _ in rows} == {"B200", "B200 (GB200)"} and len(rows) == 9
    for _, nbytes, seconds in rows:
        assert fixed + nbytes / rate == pytest.approx(seconds, rel=0.06)
    # a per-expert tensor of 2048 x 2048: the fixed part is most of the kernel, 3x what the HBM rate alone gives
    small = 2048 * 2048 * MXFP8_QUANTIZE_BYTES
    assert fixed + small / rate > 3 * small / (0.8 * 8e12)
    # one table for the generation: GB300 reads it, Hopper (no MXFP8 in TE) has none
    assert mxfp8_quantize_fit("B300 (GB300)") == (fixed, rate) and mxfp8_quantize_fit("H100 SXM") is None


def test_grouped_linear_pays_the_fixed_time_once_per_expert():
    """The same tokens cast on 8 GPUs with 32 local experts (EP 4) instead of 16 (EP 8): the bytes are the same,
    the quantize kernels 4 x 16 more per layer and micro-batch (fc1's and fc2's inputs forward, their output
    gradients backward), each at the measured fixed time."""
    fixed, _ = mxfp8_quantize_fit("B200 (GB200)")  # type: ignore[misc]
    extra = _qwen(4).kernels["fp8_cast"] - _qwen(8).kernels["fp8_cast"]
    layers, micro_batches = 48, 512 // (4 * 8)
    assert extra == pytest.approx(fixed * 2 * 2 * 16 * layers * micro_batches, rel=1e-9)
    # and the step is slower by it
    assert _qwen(4).step_time_s > _qwen(8).step_time_s


def test_the_fused_grouped_mlp_and_the_per_tensor_recipes_pay_no_per_expert_time():
    """TE's fused grouped MLP (the 26.08 recipes) group-quantizes all experts in one kernel; current scaling keeps the
    HBM stream pricing: neither depends on how many experts a GPU holds."""
    assert _qwen(4, moe_fused_mlp=True).kernels["fp8_cast"] == pytest.approx(
        _qwen(8, moe_fused_mlp=True).kernels["fp8_cast"]
    )
    assert _qwen(4, "current").kernels["fp8_cast"] == pytest.approx(_qwen(8, "current").kernels["fp8_cast"])
    # with the fixed time per kernel, MXFP8's casts cost more than their bytes' share of current scaling's
    mx, cur = _qwen(8).kernels["fp8_cast"], _qwen(8, "current").kernels["fp8_cast"]
    assert mx > cur * (4.0 + 2.0 / 32) / 5.0
