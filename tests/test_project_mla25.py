"""DeepSeek-V3's MLA attention on Blackwell in the 25.09 and 25.11 releases (issue 27, session 12). The containers
shipped Transformer Engine 2.7.0 with cuDNN 9.11.0.98 (25.09) and TE 2.9 with cuDNN 9.13.1.26 (25.11)
(Megatron-Bridge docs/releases/software-versions.md at d3d8fb09 and 76966997). TE's backend selection
(get_attention_backend, nvte_get_fused_attn_backend) runs MLA's 192 / 128 bf16 training on sm100 in cuDNN's fused
attention from cuDNN 9.11 on, so these rows run the fused kernel at the release's cuDNN, not FlashAttention (TE drops
it for head_dim_qk != head_dim_v) nor the unfused path (TE's only choice below 9.11, which neither container is). No
MLA run at cuDNN 9.11-9.13 is published: MLA reads the release family's head-size-128 rows."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.efficiency import attention_tflops
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import LayerShape, fused_attention, layer_kernels
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

RELEASES = ("megatron-core-25.09", "megatron-core-25.11")


@pytest.mark.parametrize("release", RELEASES)
def test_2025_blackwell_mla_layer_runs_cudnn_fused_attention(release: str):
    """One DeepSeek-V3 layer on a B200 at 4k under the release's stack: one fused attention kernel (no unfused
    score pass through HBM), forward at cuDNN 9.13's head-size-128 forward rate, backward 2.6 x those FLOPs at its
    backward rate."""
    dev, fw = device_for("B200"), framework(release)
    lay = ParallelLayout(framework=release)
    assert fused_attention(dev, fw, lay)
    w = load_workload("deepseek-v3-like", {"seq_len": 4096, "micro_batch": 1, "precision": "fp8"})
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=8, sp=False, tp_chunks=1)
    peak = dev.peak("bf16")
    kernels = {k.name: k for k in layer_kernels(dev, fw, w, lay, shape, peak, peak, False)}
    assert "softmax" not in kernels
    core = kernels["attention"]
    fwd, bwd = (attention_tflops("B200", "cudnn_9.13", p, 128, 4096) for p in ("fwd", "bwd"))
    assert fwd and bwd
    assert core.flops == pytest.approx(4096 * 4096 * 128 * (192 + 128))
    assert core.fwd_s == pytest.approx(core.flops / fwd)
    assert core.bwd_s == pytest.approx(2.6 * core.flops / bwd)


@pytest.mark.parametrize("table", ["megatron-bridge-perf-25.09", "megatron-bridge-perf-25.11"])
def test_2025_b200_deepseek_v3_rows_attention_is_the_fused_kernel_share(table: str):
    """The published B200 DeepSeek-V3 rows: attention is the fused kernel's small share of the step and no score
    pass streams through HBM (the unfused path, priced, is 0.14 of the step in attention GEMMs and 0.31 in its
    softmax and mask passes, and puts the rows 19.5-22.6% under their published throughput)."""
    rows = [r for r in load_set(table).rows if r.workload == "deepseek-v3-like" and r.topology == "b200"]
    assert rows
    for r in rows:
        lay = ParallelLayout.model_validate(r.layout)
        assert lay.framework in RELEASES
        p = run(Scenario(load_workload(r.workload, r.overrides), load_topology(r.topology), lay, r.gpus))
        assert 0.03 < p.kernels["attention"] / p.step_time_s < 0.1
        assert p.kernels["activation"] / p.step_time_s < 0.02
