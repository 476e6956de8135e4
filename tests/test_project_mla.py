"""DeepSeek-V3's multi-head latent attention at its measured rates (issue 27, session 11): query/key head size 192,
value head size 128. The GB200 and GB300 cuDNN 9.27 runs of cudnn-frontend's dsv3 config (4780afd3, 752dc46d; the
campaign of the head-size-128 rows) are read for exactly that shape, and the backward is priced at its five GEMMs'
FLOPs, 2 (3 d_qk + 2 d_v) per score entry, as cudnn-frontend counts them (benchmark/attention_training/flops.py)."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.efficiency import attention_tflops
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import LayerShape, bwd_flop_ratio, layer_kernels
from commlens.workload import load_workload

# (forward, backward) TFLOP/s, bf16, causal, batch 2, 128 heads of 192 / 128, non-deterministic backward, cuDNN 9.27.0
GB200_MLA = {2048: (1079e12, 849e12), 4096: (1369e12, 1066e12), 32768: (1723e12, 1107e12)}
GB300_MLA = {4096: (1687e12, 1150e12), 16384: (2061e12, 1319e12)}


def test_gb200_and_gb300_read_the_measured_mla_curve():
    for dev, curve in (("B200 (GB200)", GB200_MLA), ("B300 (GB300)", GB300_MLA)):
        for seq, (fwd, bwd) in curve.items():
            assert attention_tflops(dev, "cudnn", "fwd", 192, seq, v_head_dim=128) == pytest.approx(fwd)
            assert attention_tflops(dev, "cudnn", "bwd", 192, seq, v_head_dim=128) == pytest.approx(bwd)
    # between the tabled lengths: log2 interpolation on the MLA curve (4k and 8k at 1066 and 1158)
    mid = attention_tflops("B200 (GB200)", "cudnn", "bwd", 192, 4096 * 2**0.5, v_head_dim=128)
    assert mid == pytest.approx((1066e12 + 1158e12) / 2)


def test_mla_fp8_families_have_their_own_curves():
    # the same runs in fp8 with MXFP8 block scales and with per-tensor scales (4k, GB300)
    assert attention_tflops("B300 (GB300)", "cudnn_mxfp8", "fwd", 192, 4096, v_head_dim=128) == pytest.approx(2590e12)
    assert attention_tflops("B300 (GB300)", "cudnn_mxfp8", "bwd", 192, 4096, v_head_dim=128) == pytest.approx(1559e12)
    assert attention_tflops("B200 (GB200)", "cudnn_fp8", "bwd", 192, 4096, v_head_dim=128) == pytest.approx(1700e12)


def test_other_head_sizes_do_not_read_the_mla_rows():
    # a symmetric head size keeps its own curve (Llama 3.1 shapes, 1319 / 1102 at 4k), and so does a model of 192 / 192
    assert attention_tflops("B200 (GB200)", "cudnn", "fwd", 128, 4096) == pytest.approx(1319e12)
    assert attention_tflops("B200 (GB200)", "cudnn", "bwd", 128, 4096) == pytest.approx(1102e12)
    assert attention_tflops("B200 (GB200)", "cudnn", "fwd", 192, 4096) == pytest.approx(1319e12)
    assert attention_tflops("B200 (GB200)", "cudnn", "fwd", 192, 4096, v_head_dim=192) == pytest.approx(1319e12)


def test_b200_borrows_the_gb200_mla_curve_at_the_gemm_rate_ratio():
    ratio = attention_tflops("B200", "cudnn", "bwd", 128, 4096) / 1102e12  # the hd-128 curve, borrowed the same way
    assert ratio < 1
    assert attention_tflops("B200", "cudnn", "bwd", 192, 4096, v_head_dim=128) == pytest.approx(1066e12 * ratio)


def test_2025_containers_keep_their_hd128_rates():
    # no MLA run of cuDNN 9.10-9.13 is published: the 2025 release profiles' family reads its head-size-128 rows
    assert attention_tflops("B200", "cudnn_9.13", "fwd", 192, 4096, v_head_dim=128) == attention_tflops(
        "B200", "cudnn_9.13", "fwd", 128, 4096
    )


def test_backward_flops_count_the_query_key_size_three_times():
    assert bwd_flop_ratio(128, 128) == 2.5
    assert bwd_flop_ratio(192, 128) == pytest.approx(2.6)


def test_deepseek_v3_layer_attention_takes_the_measured_mla_time():
    # one DeepSeek-V3 layer on a GB200 at 4k: forward FLOPs at the MLA forward rate, the backward's 2.6 x those FLOPs
    # at the MLA backward rate
    dev, fw = device_for("B200 (GB200)"), framework("megatron-core")
    w = load_workload("deepseek-v3-like", {"seq_len": 4096, "micro_batch": 1, "precision": "bf16"})
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=1, sp=False, tp_chunks=1)
    peak = dev.peak("bf16")
    core = {k.name: k for k in layer_kernels(dev, fw, w, ParallelLayout(), shape, peak, peak, False)}["attention"]
    assert core.flops == pytest.approx(4096 * 4096 * 128 * (192 + 128))  # 2 s^2 h (d_qk + d_v), halved by the mask
    assert core.fwd_s == pytest.approx(core.flops / 1369e12)
    assert core.bwd_s == pytest.approx(2.6 * core.flops / 1066e12)
