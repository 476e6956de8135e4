"""Hopper attention at the cuDNN each release ran (issue 27, session 11): the 25.09 (cuDNN 9.10.2) and 25.11 (9.13)
releases' H100 attention reads cuDNN 9.4.0's measured rates (cudnn-frontend de355c70, H200 at 1980 MHz, the shapes of
the 9.1.0 rows), the newest Hopper cuDNN attention published at or below their versions; the default stack and NeMo
24.03 keep the cuDNN 9.1 curve."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.efficiency import attention_tflops
from commlens.project.frameworks import framework
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.topology import load_topology
from commlens.workload import load_workload

# cudnn-frontend de355c70 benchmark/benchmark_results.csv, causal, 16 heads of 128: (forward, backward) TFLOP/s
CUDNN_94_H200 = {4096: (613.49e12, 438.45e12), 8192: (645.95e12, 461.89e12), 65536: (631.20e12, 508.07e12)}


# [27 s12 lcattn] H100 reads the H200 rows on the H100 setup: x the FA3 paper's H100 rate over cudnn-frontend b740542's
# H200 rate for the same cuDNN 9.1 kernel (causal forward, unmasked backward), 4k / 8k / 16k (held beyond)
ON_H100 = {
    4096: (518 / 542.3175668926519, 499 / 517.2529813957277),
    8192: (529 / 572.8628678140092, 518 / 530.3655776577822),
}
ON_H100[65536] = (539 / 586.8151359973481, 516 / 538.4599964919703)


def test_h100_reads_cudnn_94_measured_rates():
    """cuDNN 9.4.0's causal rates (on the H100 setup), and its forward well over the 9.1 curve's (518 TFLOP/s at 4k,
    FA3 paper)."""
    for seq, (fwd, bwd) in CUDNN_94_H200.items():
        f_h100, b_h100 = ON_H100[seq]
        assert attention_tflops("H100 SXM", "cudnn_9.4", "fwd", 128, seq) == pytest.approx(fwd * f_h100, rel=1e-3)
        assert attention_tflops("H100 SXM", "cudnn_9.4", "bwd", 128, seq) == pytest.approx(bwd * b_h100, rel=1e-3)
    old_fwd = attention_tflops("H100 SXM", "cudnn", "fwd", 128, 4096)
    old_bwd = attention_tflops("H200 SXM", "cudnn", "bwd", 128, 4096)
    assert old_fwd == pytest.approx(518e12) and old_bwd == pytest.approx(443.6e12)
    # the backward barely moved from 9.1.0 to 9.4.0 (within 2% at 4k and 8k, the same H200 run's harness)
    assert 0.98 < 438.45e12 / old_bwd < 1.0


def test_h200_reads_the_same_cudnn_94_curve():
    """H200 has the GH100 compute of an H100 SXM: it borrows the family at the two GPUs' GEMM-rate ratio (1)."""
    assert attention_tflops("H200 SXM", "cudnn_9.4", "fwd", 128, 8192) == pytest.approx(645.95e12)


def test_blackwell_has_no_cudnn_94_rows_and_reads_its_cudnn():
    """The family is tabled on Hopper only: elsewhere it stands in with the cudnn curve."""
    assert attention_tflops("B200", "cudnn_9.4", "fwd", 128, 4096) == attention_tflops(
        "B200", "cudnn", "fwd", 128, 4096
    )


@pytest.mark.parametrize("name", ["megatron-core-25.09", "megatron-core-25.11"])
def test_2025_releases_read_cudnn_94_on_hopper(name: str):
    fw = framework(name)
    assert fw.attention_kernel("hopper") == "cudnn_9.4"
    assert fw.attention_kernel("blackwell") == "cudnn_9.13"


# the default stack reads cudnn_9.19 since [27 s11 hop2026] (tests/test_project_hop2026.py); the 2024 releases keep 9.1's
@pytest.mark.parametrize("name", ["nemo-24.03", "nemo-24.07", "megatron-core-2024"])
def test_other_stacks_keep_the_cudnn_91_curve_on_hopper(name: str):
    assert framework(name).attention_kernel("hopper") == "cudnn"


def _llama8b(framework_name: str) -> Projection:
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 128, "micro_batch": 2, "precision": "fp8"})
    lay = ParallelLayout(tp=1, sp=False, dp=8, zero=1, recompute="none", grad_reduce_bytes=2, framework=framework_name)
    return run(Scenario(w, load_topology("dgx-h100"), lay, 8, check_memory=False))


@pytest.mark.parametrize("release", ["megatron-core-25.09", "megatron-core-25.11"])
def test_2025_release_h100_attention_takes_cudnn_94_time(release: str):
    """The same Llama 3 8B run on DGX H100: the release's attention seconds over megatron-core-2024's are the ratio
    of the two curves' rates at 8k, forward and backward weighted by their FLOPs (1 : 2.5); the step is shorter."""
    rel, default = _llama8b(release), _llama8b("megatron-core-2024")
    fwd9, bwd9 = (attention_tflops("H100 SXM", "cudnn_9.4", p, 128, 8192) for p in ("fwd", "bwd"))
    fwd, bwd = (attention_tflops("H100 SXM", "cudnn", p, 128, 8192) for p in ("fwd", "bwd"))
    assert fwd9 and bwd9 and fwd and bwd
    expected = (1 / fwd9 + 2.5 / bwd9) / (1 / fwd + 2.5 / bwd)
    # 0.93-0.97 before [27 s12 lcattn] put cudnn_9.4's forward (an H200 run) on the H100 setup of the 9.1 forward
    assert 0.96 < expected < 0.99
    assert rel.kernels["attention"] / default.kernels["attention"] == pytest.approx(expected, rel=1e-6)
    assert rel.tokens_per_s > default.tokens_per_s
