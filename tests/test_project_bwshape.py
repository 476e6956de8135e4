"""The Blackwell GEMM curve against measured B200 kernel times [27 s22 bwshape].

The points are openxla/xla's measured table (matmul_interpolator_data.h, entry sm_100_B200, bf16 x bf16 -> bf16,
batch 1, every dimension at least 1024: CUPTI kernel time, median of 10 runs); accelerators.yaml's Blackwell
``gemm_shape`` was fitted to that table. A user projecting a Blackwell step notices the curve: the default one ran
these GEMMs a third faster than the GPU does.
"""

from __future__ import annotations

import statistics

from commlens.project.compute import gemm_time_s
from commlens.project.hardware import Device, active_devices

# (m, n, k, measured TFLOP/s)
XLA_B200_BF16 = [
    (1024, 1024, 1024, 288.0),
    (1024, 2048, 1024, 492.5),
    (1024, 4096, 1024, 723.4),
    (1024, 1024, 2048, 468.5),
    (1024, 2048, 2048, 760.3),
    (1024, 4096, 2048, 981.3),
    (1024, 1024, 4096, 675.3),
    (1024, 2048, 4096, 1014.9),
    (1024, 4096, 4096, 1214.0),
    (2048, 1024, 1024, 496.1),
    (2048, 2048, 1024, 725.4),
    (2048, 4096, 1024, 911.4),
    (2048, 1024, 2048, 760.4),
    (2048, 2048, 2048, 985.8),
    (2048, 4096, 2048, 1172.8),
    (2048, 1024, 4096, 1017.7),
    (2048, 2048, 4096, 1208.5),
    (2048, 4096, 4096, 1342.5),
    (4096, 1024, 1024, 715.6),
    (4096, 2048, 1024, 913.8),
    (4096, 4096, 1024, 1075.6),
    (4096, 1024, 2048, 990.3),
    (4096, 2048, 2048, 1170.0),
    (4096, 4096, 2048, 1277.8),
    (4096, 1024, 4096, 1204.9),
    (4096, 2048, 4096, 1343.5),
    (4096, 4096, 4096, 1416.9),
]


def _errors(dev: Device) -> list[float]:
    """Model rate / measured rate - 1 for every point (+: the model is faster than the GPU)."""
    out = []
    for m, n, k, measured in XLA_B200_BF16:
        rate = 2.0 * m * n * k / gemm_time_s(dev, dev.peak("bf16"), m, n, k) / 1e12
        out.append(rate / measured - 1.0)
    return out


def test_b200_curve_follows_the_measured_kernel_times() -> None:
    dev = active_devices(None)["B200"]
    errors = _errors(dev)
    assert statistics.mean(abs(e) for e in errors) < 0.20
    assert abs(statistics.median(errors)) < 0.06
    # the 2048^3 GEMM: measured 985.8 TFLOP/s; the default curve gave 1,308
    assert _errors(dev)[13] < 0.25


def test_default_curve_is_far_too_fast_on_blackwell() -> None:
    """Without the fitted shape terms the same points are a third too fast: the fit is what changed."""
    dev = active_devices(None)["B200"].model_copy(update={"gemm_shape": None})
    errors = _errors(dev)
    assert statistics.median(errors) > 0.25
    assert statistics.mean(abs(e) for e in errors) > 0.4


def test_blackwell_parts_share_the_fit_and_hopper_keeps_its_calibration() -> None:
    devices = active_devices(None)
    shapes = {name: devices[name].gemm_shape for name in ("B200", "B200 (GB200)", "B300 (GB300)")}
    assert all(s is not None and "27 s22 bwshape" in s.origin for s in shapes.values())
    assert len({(s.k_overhead, s.tiles) for s in shapes.values() if s is not None}) == 1
    assert devices["H100 SXM"].gemm_shape is None and devices["H200 SXM"].gemm_shape is None
