"""Time of compute on one accelerator: GEMMs from shape-dependent efficiency, streaming ops from HBM bandwidth.

The GEMM efficiency curve (defaults documented in docs/project.md):

1. ``gemm_efficiency`` of the device: what a large GEMM reaches (measured
   maximum achievable matmul FLOP/s, see ``accelerators.yaml``);
2. wave quantization: the output is cut into tiles, one per SM at a time; the
   best of the usual cuBLAS tile shapes is taken, each charged for its padded
   area and for the idle SMs of its last wave; smaller tiles reuse operands
   less (``DEFAULT_TILES``: relative tile throughput);
3. short reductions: a K of k costs as k + ``DEFAULT_K_OVERHEAD`` (prologue and
   epilogue of each tile);
4. roofline: a GEMM never runs faster than its operands stream from HBM.

A device's ``gemm_shape`` (fitted by ``commlens project calibrate``) replaces
the tile throughputs of 2 and the K overhead of 3; without it, the defaults.

Streaming (element-wise, normalization, softmax) kernels run at
``memory_efficiency`` x HBM bandwidth.
"""

from __future__ import annotations

from functools import lru_cache

from commlens.project.hardware import Device

__all__ = [
    "DEFAULT_K_OVERHEAD",
    "DEFAULT_TILES",
    "FLASH_ATTENTION_FRACTION",
    "gemm_efficiency",
    "gemm_time_s",
    "shape_factor",
    "stream_time_s",
]

# (tile rows, tile cols, relative throughput): larger tiles reuse each operand load more (CUTLASS/cuBLAS SM80 tiles).
DEFAULT_TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.95), (128, 64, 0.85), (64, 64, 0.7))
DEFAULT_K_OVERHEAD = 64.0  # elements of K: one main-loop stage of a 3-4 stage pipelined tile (prologue + epilogue)
# FlashAttention-2 (Dao 2023): fwd+bwd reaches ~0.6 of A100 peak at head dim 128 -> 0.7 of a large GEMM's rate.
FLASH_ATTENTION_FRACTION = 0.7


def shape_factor(
    m: int,
    n: int,
    k: int,
    sms: int,
    tiles: tuple[tuple[int, int, float], ...] = DEFAULT_TILES,
    k_overhead: float = DEFAULT_K_OVERHEAD,
    batch: int = 1,
) -> float:
    """Steps 2 and 3 of the curve: the fraction of the plateau ``batch`` (m x k) @ (k x n) GEMMs keep.

    A batched GEMM is one launch: the tiles of every matrix in the batch share
    the waves, so only the last wave of the whole launch runs partly idle.
    """
    best = 0.0
    area = m * n
    for tm, tn, rel in tiles:
        if rel <= best:  # a tile keeps at most its relative throughput (both shares below are at most 1)
            continue
        rows, cols = -(-m // tm), -(-n // tn)
        count = rows * cols * batch
        waves = -(-count // sms)
        kept = area / (rows * tm * cols * tn) * count / (waves * sms) * rel
        if kept > best:
            best = kept
    return best * k / (k + k_overhead)


_cached_shape_factor = lru_cache(maxsize=4096)(shape_factor)


def gemm_efficiency(device: Device, m: int, n: int, k: int, batch: int = 1) -> float:
    """Fraction of peak ``batch`` (m x k) @ (k x n) GEMMs in one launch reach on ``device`` (before the roofline)."""
    shape = device.gemm_shape
    if shape is None:
        return device.gemm_efficiency * _cached_shape_factor(int(m), int(n), int(k), device.sms, batch=int(batch))
    return device.gemm_efficiency * _cached_shape_factor(
        int(m), int(n), int(k), device.sms, shape.tiles, shape.k_overhead, int(batch)
    )


def gemm_time_s(
    device: Device, peak_flops: float, m: float, n: float, k: float, batch: float = 1.0, elem_bytes: float = 2.0
) -> float:
    """Time of ``batch`` GEMMs of (m x k) @ (k x n): compute at the shape's efficiency, floored by HBM traffic."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    # gemm_efficiency inlined (a projection times ~20-70 GEMMs): the sides rounded, at least 1
    mi, ni, ki, bi = round(m) or 1, round(n) or 1, round(k) or 1, max(1, round(batch))
    shape = device.gemm_shape
    if shape is None:
        factor = _cached_shape_factor(mi, ni, ki, device.sms, batch=bi)
    else:
        factor = _cached_shape_factor(mi, ni, ki, device.sms, shape.tiles, shape.k_overhead, bi)
    compute = flops / (peak_flops * (device.gemm_efficiency * factor))
    traffic_s = (m * k + k * n + m * n) * elem_bytes * batch / (device.hbm_bytes_per_s * device.memory_efficiency)
    return compute if compute >= traffic_s else traffic_s


def stream_time_s(device: Device, nbytes: float) -> float:
    """Time of streaming kernels moving ``nbytes`` through HBM."""
    return nbytes / (device.hbm_bytes_per_s * device.memory_efficiency)
