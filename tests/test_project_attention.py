"""The attention core as the stacks ran it: which kernel family, and its causal backward's measured rate."""

from __future__ import annotations

import pytest

from commlens.project.efficiency import attention_tflops
from commlens.project.frameworks import framework, generation
from commlens.project.hardware import device_for
from commlens.project.kernels import LayerShape, layer_kernels
from commlens.project.layout import ParallelLayout
from commlens.workload import load_workload

# FlashAttention-3 paper Fig. 6 (H100, no causal mask, head dim 128): the unmasked backward the tables held before
UNMASKED_BWD_8K = {"cudnn": 518e12, "fa2": 318e12}


def test_the_stacks_call_the_kernel_family_their_code_selects_on_each_gpu():
    # Transformer Engine prefers cuDNN's fused attention on sm90 (and sm90+ in TE 2.x); torchtitan's SDPA runs
    # FlashAttention-2 on H100 (cuDNN opt-in after torch 2.5; flash/efficient only under CP) and cuDNN on B200
    # (on Hopper at the cuDNN of the stack's containers: 9.19.1's rows today, 9.1's for 2024's [27 s11 hop2026])
    for fw, hopper in (("megatron-core", "cudnn_9.19"), ("nemo", "cudnn_9.19"), ("nemo-24.07", "cudnn")):
        assert framework(fw).attention_kernel(generation("H100 SXM")) == hopper
        assert framework(fw).attention_kernel(generation("B200")) == "cudnn"
    assert framework("torchtitan").attention_kernel(generation("H100 SXM")) == "fa2"
    assert framework("torchtitan").attention_kernel(generation("B200")) == "cudnn"


# [27 s12 lcattn] cuDNN's rows were measured on an H200 at 1980 MHz; H100 reads them x the FA3 paper's H100 unmasked
# backward over the same H200 run's (518 / 530.37 at 8k); FlashAttention-2's (torch's SDPA build) as measured
@pytest.mark.parametrize(
    ("kernel", "measured", "on_h100"), [("cudnn", 463.5e12, 518 / 530.3655776577822), ("fa2", 277.4e12, 1.0)]
)
def test_a_causal_backward_on_h100_runs_at_its_measured_causal_rate_not_the_unmasked_one(kernel, measured, on_h100):
    # cudnn-frontend@b740542 benchmark_results.csv, causal, head dim 128, 8k: slower than without the mask
    got = attention_tflops("H100 SXM", kernel, "bwd", 128, 8192)
    assert got == pytest.approx(measured * on_h100, rel=1e-3)
    assert got < 0.92 * UNMASKED_BWD_8K[kernel]
    # the H200 the rows were measured on reads them as measured
    assert attention_tflops("H200 SXM", kernel, "bwd", 128, 8192) == pytest.approx(measured, rel=1e-3)


def test_below_the_shortest_causal_length_the_rate_is_no_faster_than_unmasked():
    # no causal backward is tabled under 4k; at 512 tokens the unmasked rate (FA3 paper: cuDNN 305) bounds it
    short = attention_tflops("H100 SXM", "cudnn", "bwd", 128, 512)
    assert short is not None and short <= 305e12 + 1
    assert short < attention_tflops("H100 SXM", "cudnn", "bwd", 128, 4096)  # and it still rises with length


def test_head_size_64_keeps_its_own_backward_rows():
    # the nearest head size first: a head-64 model reads head-64 rows (FA3 paper Fig. 6, cuDNN 395 at 2k), not
    # head-128 causal ones measured at another shape
    assert attention_tflops("H100 SXM", "cudnn", "bwd", 64, 2048) == pytest.approx(395e12)


def test_the_long_context_layer_pays_the_causal_backward():
    # one layer of NeMo's Llama 2 7B at 16k on H100 (cuDNN 9.1, NeMo 24.07): the attention backward takes more than the
    # 2.5 x the forward's FLOPs at the forward's rate, as the measured causal backward is slower per FLOP than the forward
    dev, fw = device_for("H100 SXM"), framework("nemo-24.07")
    w = load_workload("llama2-7b", {"seq_len": 16384, "micro_batch": 1})
    shape = LayerShape(tokens=16384, keys=16384, tp=1, ep=1, sp=False, tp_chunks=1)
    ks = {k.name: k for k in layer_kernels(dev, fw, w, ParallelLayout(), shape, 989e12, 989e12, False)}
    core = ks["attention"]
    fwd_rate = attention_tflops("H100 SXM", "cudnn", "fwd", 128, 16384)
    assert fwd_rate is not None
    assert core.fwd_s == pytest.approx(core.flops / fwd_rate)
    # the H200 run's 497.7 on the H100 setup (x 516 / 538.46, the FA3 paper's H100 unmasked 16k over the run's) [27 s12 lcattn]
    assert core.bwd_s == pytest.approx(2.5 * core.flops / (497.7e12 * 516 / 538.4599964919703), rel=1e-3)
    assert core.bwd_s / core.fwd_s > 2.5 * 1.05


def test_a100_flash_attention_runs_at_the_published_forward_plus_backward_rate():
    # FlashAttention-2's A100 chart (flash-attention@4f285b35, causal, head dim 128) gives forward + backward
    # together: 182 TFLOP/s at 8k; each pass takes that rate (the pair's measured time split by FLOPs), not the
    # default fraction of the GEMM rate
    for pass_ in ("fwd", "bwd"):
        assert attention_tflops("A100 SXM 80GB", "fa2", pass_, 128, 8192) == pytest.approx(182e12)
    assert attention_tflops("A100 SXM 80GB", "fa2", "bwd", 64, 2048) == pytest.approx(140e12)
    # the H100 still reads its passes apart (FA3 paper Fig. 5: FlashAttention-2 causal forward 333 at 8k)
    assert attention_tflops("H100 SXM", "fa2", "fwd", 128, 8192) == pytest.approx(333e12)
