"""Time of compute on one accelerator: GEMMs from shape-dependent efficiency, streaming ops from HBM bandwidth.

The GEMM efficiency curve (defaults documented in docs/project.md):

1. ``gemm_efficiency`` of the device: what a large GEMM reaches (measured
   maximum achievable matmul FLOP/s, see ``accelerators.yaml``);
2. wave quantization: the output is cut into tiles, one per SM at a time; the
   best of the usual cuBLAS tile shapes is taken, each charged for its padded
   area and for the idle SMs of its last wave; smaller tiles reuse operands
   less (``_TILES``: relative tile throughput);
3. short reductions: a K of k costs as k + ``_K_OVERHEAD`` (prologue and
   epilogue of each tile);
4. roofline: a GEMM never runs faster than its operands stream from HBM.

Streaming (element-wise, normalization, softmax) kernels run at
``memory_efficiency`` x HBM bandwidth.
"""

from __future__ import annotations

from functools import lru_cache

from commlens.project.hardware import Device

__all__ = ["FLASH_ATTENTION_FRACTION", "gemm_efficiency", "gemm_time_s", "stream_time_s"]

# (tile rows, tile cols, relative throughput): larger tiles reuse each operand load more (CUTLASS/cuBLAS SM80 tiles).
_TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.95), (128, 64, 0.85), (64, 64, 0.7))
_K_OVERHEAD = 64  # elements of K: one main-loop stage of a 3-4 stage pipelined tile (prologue + epilogue)
# FlashAttention-2 (Dao 2023): fwd+bwd reaches ~0.6 of A100 peak at head dim 128 -> 0.7 of a large GEMM's rate.
FLASH_ATTENTION_FRACTION = 0.7


@lru_cache(maxsize=4096)
def _shape_factor(m: int, n: int, k: int, sms: int) -> float:
    best = 0.0
    for tm, tn, rel in _TILES:
        rows, cols = -(-m // tm), -(-n // tn)
        tiles = rows * cols
        waves = -(-tiles // sms)
        useful = (m * n) / (rows * tm * cols * tn) * tiles / (waves * sms)
        best = max(best, useful * rel)
    return best * k / (k + _K_OVERHEAD)


def gemm_efficiency(device: Device, m: int, n: int, k: int) -> float:
    """Fraction of peak an (m x k) @ (k x n) GEMM reaches on ``device`` (before the HBM roofline)."""
    return device.gemm_efficiency * _shape_factor(int(m), int(n), int(k), device.sms)


def gemm_time_s(device: Device, peak_flops: float, m: float, n: float, k: float, batch: float = 1.0,
                elem_bytes: float = 2.0) -> float:
    """Time of ``batch`` GEMMs of (m x k) @ (k x n): compute at the shape's efficiency, floored by HBM traffic."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    compute = flops / (peak_flops * gemm_efficiency(device, max(1, round(m)), max(1, round(n)), max(1, round(k))))
    traffic = (m * k + k * n + m * n) * elem_bytes * batch
    return max(compute, traffic / (device.hbm_bytes_per_s * device.memory_efficiency))


def stream_time_s(device: Device, nbytes: float) -> float:
    """Time of streaming kernels moving ``nbytes`` through HBM."""
    return nbytes / (device.hbm_bytes_per_s * device.memory_efficiency)
