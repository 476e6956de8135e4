"""Streaming kernels as a fixed time per kernel plus bytes over a sustained rate (issue 27, session 11): the measured
kernel times of cuDNN's RMSNorm forward (cudnn-frontend df73764 benchmark/norms, H200, GB200, GB300; efficiency.yaml
stream_kernel) lie on a line time = fixed + bytes / rate per GPU generation, whose fixed part is 2.3-2.5 us and whose
rate is 0.81-0.82 of HBM peak on Hopper and Blackwell alike."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest

from commlens.project.efficiency import stream_kernel_fit, stream_kernel_fixed_s
from commlens.specdata import load_yaml


def _rows(gpu: str) -> list[dict[str, Any]]:
    data = load_yaml((resources.files("commlens.project") / "efficiency.yaml").read_text(encoding="utf-8"))
    return list(data["gpus"][gpu]["stream_kernel"])


def test_hopper_line_through_the_h200_norm_kernels():
    """The H200 rows: 2.26 us a kernel and 3.89 TB/s, 0.81 of 4.8 TB/s (the 0.8 memory_efficiency of Hopper); H100
    and H800 (the same GH100 die and clocks) read the same line."""
    fit = stream_kernel_fit("H200 SXM")
    assert fit is not None
    fixed, rate = fit
    assert fixed == pytest.approx(2.26e-6, rel=0.01)
    assert rate / 4.8e12 == pytest.approx(0.811, abs=0.002)
    assert stream_kernel_fit("H100 SXM") == fit
    assert stream_kernel_fit("H800 SXM") == fit


def test_blackwell_line_through_the_gb200_and_gb300_norm_kernels():
    """GB200 and GB300 together: 2.40 us a kernel and 6.56 TB/s (0.82 of 8 TB/s, as Hopper's fraction); the rate
    per byte is Hopper's fraction of peak, the fixed time a little longer."""
    fit = stream_kernel_fit("B200 (GB200)")
    assert fit is not None
    fixed, rate = fit
    assert fixed == pytest.approx(2.40e-6, rel=0.01)
    assert rate / 8.0e12 == pytest.approx(0.819, abs=0.002)
    assert stream_kernel_fit("B200") == fit
    hopper = stream_kernel_fit("H200 SXM")
    assert hopper is not None and fixed > hopper[0]


def test_the_line_holds_the_measured_kernels_within_16_percent():
    """Each tabled kernel (34-269 MB) within 16% of its generation's line; a flat fraction of peak at the large
    kernels' rate misses the smallest (Qwen3-30B's 4096 x 2048 norm: 10.4 us on an H200) by 17%."""
    for gpu in ("H200 SXM", "B200 (GB200)", "B300 (GB300)"):
        fit = stream_kernel_fit(gpu)
        assert fit is not None
        fixed, rate = fit
        rows = _rows(gpu)
        assert len(rows) == 10
        for row in rows:
            assert (fixed + row["bytes"] / rate) / (row["us"] * 1e-6) == pytest.approx(1.0, abs=0.16)
    small = next(r for r in _rows("H200 SXM") if r["cols"] == 2048)
    fixed, rate = stream_kernel_fit("H200 SXM") or (0.0, 1.0)
    assert small["bytes"] / rate / (small["us"] * 1e-6) < 0.84  # 8.6 us for the rate alone: 17% short


def test_generations_without_measured_kernels_have_no_fixed_time():
    """Ampere, Volta and CDNA have no kernel times tabled: no line, no fixed time."""
    for gpu in ("A100 SXM 80GB", "V100 SXM3 32GB", "MI300X"):
        assert stream_kernel_fit(gpu) is None
        assert stream_kernel_fixed_s(gpu) == 0.0
