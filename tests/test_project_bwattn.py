"""cuDNN's fused attention at head dim 64 on Blackwell (issue 27, session 10): gpt-oss's full layers read the forward
rates measured at head dim 64 (flash-attention PR #2605: B200 and GB300), not the head-dim-128 curves; GB200 reads
B200's (the same silicon), scaled; the curves B200 does not table stay GB200's, scaled as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.project import ParallelLayout
from commlens.project.efficiency import attention_tflops
from commlens.project.hardware import active_devices, device_for
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.topology import load_topology
from commlens.workload import load_workload

KEEP = device_for("B200").attention_sustained  # [27 s20 attsust]


def _b200_over_gb200() -> float:
    """B200's large-GEMM rate over GB200's (1000 W against 1200 W): the factor a borrowed curve is scaled by."""
    devices = active_devices()
    b200, gb200 = devices["B200"], devices["B200 (GB200)"]
    return (b200.peak("bf16") * b200.gemm_efficiency) / (gb200.peak("bf16") * gb200.gemm_efficiency)


def test_b200_reads_the_measured_head_dim_64_forward():
    """PR #2605's B200 table (cuDNN, bf16, 32 heads of 64, causal): 501 / 770 / 872 TFLOP/s at 1k / 4k / 16k;
    between the points in log2 of the length; below 1k no faster than the unmasked 846. Each at the B200's sustained
    fraction of a short run (0.853) [27 s20 attsust]."""
    k = KEEP
    assert attention_tflops("B200", "cudnn", "fwd", 64, 1024) == pytest.approx(501e12 * k)
    assert attention_tflops("B200", "cudnn", "fwd", 64, 4096) == pytest.approx(770e12 * k)
    assert attention_tflops("B200", "cudnn", "fwd", 64, 16384) == pytest.approx(872e12 * k)
    assert attention_tflops("B200", "cudnn", "fwd", 64, 4096 * 2**0.5) == pytest.approx((770e12 + 838e12) / 2 * k)
    assert attention_tflops("B200", "cudnn", "fwd", 64, 512) == pytest.approx(501e12 * k)


def test_b200_still_borrows_what_it_does_not_table():
    """Head dim 128, the backward, the 128-key window: GB200's measured curves x the B200 / GB200 GEMM ratio, as
    before B200 had rows of its own (and x the B200's sustained fraction: GB200's curves are short runs too)."""
    r = _b200_over_gb200()
    assert 0.9 < r < 1.0
    r *= KEEP
    assert attention_tflops("B200", "cudnn", "fwd", 128, 4096) == pytest.approx(1319e12 * r)
    assert attention_tflops("B200", "cudnn", "bwd", 64, 4096) == pytest.approx(1102e12 * r)
    assert attention_tflops("B200", "cudnn", "fwd", 64, 4096, window=128) == pytest.approx(164e12 * r)
    assert attention_tflops("B200", "cudnn_mxfp8", "fwd", 128, 4096) == pytest.approx(1698e12 * r)


def test_gb200_reads_b200s_head_dim_64_forward_scaled():
    """GB200 has no head-dim-64 measurement: B200's, scaled up by the GEMM ratio (804 TFLOP/s at 4k), about 0.6 of
    its own head-dim-128 forward; its head-dim-128 curves and its backward stay its own."""
    r = _b200_over_gb200()
    hd64 = attention_tflops("B200 (GB200)", "cudnn", "fwd", 64, 4096)
    assert hd64 == pytest.approx(770e12 / r)
    assert hd64 is not None and 0.55 < hd64 / 1319e12 < 0.65
    assert attention_tflops("B200 (GB200)", "cudnn", "fwd", 128, 4096) == pytest.approx(1319e12)
    assert attention_tflops("B200 (GB200)", "cudnn", "bwd", 64, 4096) == pytest.approx(1102e12)
    assert attention_tflops("B200 (GB200)", "cudnn", "bwd", 64, 4096, window=128) == pytest.approx(183e12)


def test_gb300_reads_its_own_head_dim_64_forward():
    """PR #2605's GB300 table: 627 / 977 / 1115 TFLOP/s at 1k / 4k / 16k; no head-dim-64 backward is published, so
    the backward stays on the head-dim-128 curve (1218 at 4k)."""
    assert attention_tflops("B300 (GB300)", "cudnn", "fwd", 64, 1024) == pytest.approx(627e12)
    assert attention_tflops("B300 (GB300)", "cudnn", "fwd", 64, 4096) == pytest.approx(977e12)
    assert attention_tflops("B300 (GB300)", "cudnn", "fwd", 64, 16384) == pytest.approx(1115e12)
    assert attention_tflops("B300 (GB300)", "cudnn", "bwd", 64, 4096) == pytest.approx(1218e12)
    assert attention_tflops("B300 (GB300)", "cudnn", "fwd", 128, 4096) == pytest.approx(1738e12)


def test_hopper_lookups_are_unchanged():
    """H100 tables head dim 64 itself (the FA3 paper, Fig. 5); H200 borrows all of H100's."""
    assert attention_tflops("H100 SXM", "cudnn", "fwd", 64, 4096) == pytest.approx(363e12)
    assert attention_tflops("H200 SXM", "cudnn", "fwd", 64, 4096) == pytest.approx(363e12)


def _gptoss_b200() -> Projection:
    w = load_workload("gpt-oss-120b", {"global_batch": 1280, "micro_batch": 4})
    lay = ParallelLayout(tp=1, sp=False, ep=8, zero=1, recompute="none", grad_reduce_bytes=2, framework="nemo")
    return run(Scenario(w, load_topology("b200"), lay, 64, check_memory=False))


def test_gptoss_full_layers_pay_the_head_dim_64_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """gpt-oss on 64 B200s (20 sequences of 4096 a GPU in 5 micro-batches of 4, no recomputation): its 18 full
    layers' forward runs at 770 TFLOP/s. A user's efficiency file that gives B200's cuDNN forward 1000 TFLOP/s
    instead shortens the step's attention by exactly 18 x 5 x FLOPs x (1/770 - 1/1000) s, FLOPs = 4 x 4096^2 / 2 x
    64 heads x 64 x 4, both rates at the B200's sustained fraction of a short run [27 s20 attsust]."""
    shipped = _gptoss_b200()
    rows = "\n".join(
        f'      - {{kernel: cudnn, pass: fwd, causal: true, head_dim: 64, seq_len: {s}, tflops: 1000, origin: "test"}}'
        for s in (1024, 65536)
    )
    f = tmp_path / "eff.yaml"
    f.write_text(f'format: commlens.efficiency/1\ngpus:\n  "B200":\n    attention:\n{rows}\n', encoding="utf-8")
    monkeypatch.setenv("COMMLENS_EFFICIENCY", str(f))
    faster = _gptoss_b200()
    flops = 4 * 4096**2 / 2 * 64 * 64 * 4
    keep = device_for("B200").attention_sustained
    expected = 18 * 5 * flops * (1 / 770e12 - 1 / 1000e12) / keep
    assert shipped.kernels["attention"] - faster.kernels["attention"] == pytest.approx(expected, rel=1e-6)
    assert shipped.step_time_s > faster.step_time_s
