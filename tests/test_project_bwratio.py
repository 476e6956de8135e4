"""Blackwell against Hopper rows of the same release (issue 27, session 11): the 25.09 and 25.11 releases' Blackwell
attention runs at their cuDNN (9.10-9.13: cudnn-frontend's B200 rows of the NGC PyTorch 25.09 container), not at the
2026 cuDNN 9.27 curves; Blackwell's streaming kernels reach the fraction of HBM peak cuDNN's RMSNorm reaches there
relative to Hopper (cudnn-frontend's norms benchmark on GB200, GB300 and H200); a DGX B200's HBM peak is 7.7 TB/s."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.compute import stream_time_s
from commlens.project.efficiency import attention_tflops
from commlens.project.hardware import active_devices, device_for
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.topology import load_topology
from commlens.workload import load_workload

# cudnn-frontend bb37575d, B200, cuDNN 9.13, 128 / 8 heads of 128, causal: (forward, backward) TFLOP/s
CUDNN_913_B200 = {4096: (855.7e12, 701.3e12), 8192: (1171.3e12, 942.5e12)}


def _gb200_over_b200() -> float:
    devices = active_devices()
    b200, gb200 = devices["B200"], devices["B200 (GB200)"]
    return (gb200.peak("bf16") * gb200.gemm_efficiency) / (b200.peak("bf16") * b200.gemm_efficiency)


def test_b200_reads_cudnn_913_measured_rates():
    """The 2025 cuDNN's forward at 4k is 0.65 of the 2026 curve B200 reads for later releases (GB200's 9.27, scaled).
    Both at the B200's sustained fraction of a short run [27 s20 attsust]."""
    keep = device_for("B200").attention_sustained
    for seq, (fwd, bwd) in CUDNN_913_B200.items():
        assert attention_tflops("B200", "cudnn_9.13", "fwd", 128, seq) == pytest.approx(fwd * keep)
        assert attention_tflops("B200", "cudnn_9.13", "bwd", 128, seq) == pytest.approx(bwd * keep)
    later = attention_tflops("B200", "cudnn", "fwd", 128, 4096)
    assert later is not None and 0.6 < 855.7e12 * keep / later < 0.7


def test_gb200_borrows_b200s_cudnn_913_scaled():
    r = _gb200_over_b200()
    assert 1.0 < r < 1.1
    assert attention_tflops("B200 (GB200)", "cudnn_9.13", "fwd", 128, 8192) == pytest.approx(1171.3e12 * r)
    # its own 2026 curve stays for the later releases
    assert attention_tflops("B200 (GB200)", "cudnn", "fwd", 128, 4096) == pytest.approx(1319e12)


def _llama8b(topology: str, framework: str) -> Projection:
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 128, "micro_batch": 2, "precision": "fp8"})
    lay = ParallelLayout(tp=1, sp=False, dp=8, zero=1, recompute="none", grad_reduce_bytes=2, framework=framework)
    return run(Scenario(w, load_topology(topology), lay, 8, check_memory=False))


@pytest.mark.parametrize("topology", ["b200", "gb200-nvl72"])
def test_2509_blackwell_attention_takes_the_2025_cudnn_time(topology: str):
    """The same Llama 3 8B run: the 25.09 release's attention seconds over the current stack's are the ratio of the
    rates at 8k (the 2026 curve over the 9.13 one, forward and backward weighted by their FLOPs, 1 : 2.5)."""
    dev = "B200" if topology == "b200" else "B200 (GB200)"
    old, new = _llama8b(topology, "megatron-core-25.09"), _llama8b(topology, "megatron-core")
    fwd9, bwd9 = (attention_tflops(dev, "cudnn_9.13", p, 128, 8192) for p in ("fwd", "bwd"))
    fwd, bwd = (attention_tflops(dev, "cudnn", p, 128, 8192) for p in ("fwd", "bwd"))
    assert fwd9 and bwd9 and fwd and bwd
    expected = (1 / fwd9 + 2.5 / bwd9) / (1 / fwd + 2.5 / bwd)
    assert 1.2 < expected < 1.5
    assert old.kernels["attention"] / new.kernels["attention"] == pytest.approx(expected, rel=1e-6)
    assert old.tokens_per_s < new.tokens_per_s


def test_blackwell_streams_below_hopper_per_peak():
    """cuDNN RMSNorm at 10 hidden-size shapes reaches 0.885 (GB200) and 0.896 (GB300) of H200's fraction of peak:
    the streaming rate is 0.8 x that; a DGX B200 streams from a 7.7 TB/s peak (its 7680-bit bus), GB200 from 8."""
    devices = active_devices()
    assert devices["B200 (GB200)"].memory_efficiency == pytest.approx(0.8 * 0.885, abs=1e-3)
    assert devices["B300 (GB300)"].memory_efficiency == pytest.approx(0.8 * 0.896, abs=1e-3)
    gib = 2.0**30
    b200 = stream_time_s(devices["B200"], gib)
    assert b200 == pytest.approx(gib / (7.7e12 * 0.708))
    # against an H100 a B200 streams 2.03x as fast, not the 2.39x of the two peaks
    assert stream_time_s(devices["H100 SXM"], gib) / b200 == pytest.approx(7.7 * 0.708 / (3.35 * 0.8), rel=1e-6)


def test_b200_projection_memory_bound_time_follows_the_measured_rate():
    """A user's B200 projection: the norm kernels take 1 / 2.03 of H100's seconds (7.7 TB/s x 0.708 against
    3.35 TB/s x 0.8), where the peaks alone would give 1 / 2.39."""
    b, h = _llama8b("b200", "megatron-core"), _llama8b("dgx-h100", "megatron-core")
    assert h.kernels["norm"] / b.kernels["norm"] == pytest.approx(7.7 * 0.708 / (3.35 * 0.8), rel=1e-3)
