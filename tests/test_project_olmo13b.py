"""[27 s15 olmo13b] torchao's Float8Linear copies each fp8 weight into column-major for the data-gradient GEMM in every
backward (torchao v0.5.0 float8_linear.py manual_float8_matmul.backward -> float8_ops.py preprocess_addmm,
``b_data.t().contiguous().t()``): 1 B read and 1 B written per weight element, each micro-batch. Charged where FSDP
gathers the weights in fp8 (the weight enters the linear already cast); Transformer Engine stacks do not have it."""

from __future__ import annotations

import pytest

from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import LayerShape, layer_kernels
from commlens.project.layout import ParallelLayout
from commlens.project.validate import load_set, validate_set
from commlens.workload import load_workload

OLMO = "olmo-core-h100-2024"


def _layer(fw_name: str, precision: str, fp8_gather: bool) -> dict:
    dev, fw = device_for("H100 SXM"), framework(fw_name)
    w = load_workload("olmo2-13b", {"seq_len": 4096, "micro_batch": 1, "precision": precision})
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=1, sp=False, tp_chunks=1)
    lay = ParallelLayout(zero=3, compile=True, fsdp_fp8_all_gather=fp8_gather, framework=fw_name)
    return {k.name: k for k in layer_kernels(dev, fw, w, lay, shape, 989e12, 989e12, False)}


def test_the_fp8_weight_copy_of_the_backward():
    ks = _layer("olmo-core", "fp8", True)
    copy = ks["fp8_weight_transpose"]
    # OLMo 2 13B layer: Q, K, V, O (4 x 5120^2) and gate, up, down (3 x 5120 x 13824), 2 B each, backward only
    weights = 4 * 5120 * 5120 + 3 * 5120 * 13824
    assert copy.fwd_s == 0.0 and copy.kind == "fp8_cast"
    assert copy.bwd_s == pytest.approx(2 * weights / device_for("H100 SXM").hbm_bytes_per_s / 0.8, rel=0.15)
    assert copy.bwd_launches == 7
    # not under bf16, not without FSDP's fp8 gathers, not for Transformer Engine's linears
    assert "fp8_weight_transpose" not in _layer("olmo-core", "bf16", False)
    assert "fp8_weight_transpose" not in _layer("olmo-core", "fp8", False)
    assert "fp8_weight_transpose" not in _layer("llm-foundry", "fp8", True)
    assert "fp8_weight_transpose" not in _layer("automodel", "fp8", True)
    assert framework("torchtitan").fp8_weight_bwd_copy and framework("olmo-core").fp8_weight_bwd_copy


def test_recorded_figures():
    errors = [s.error for s in validate_set(load_set(OLMO))]
    # docs/project-evidence.md [27 s15 olmo13b]: the FP8 rows -8.9/+3.9/+2.7/+27.6/+2.5% -> -9.1/+3.0/+1.7/+25.4/+2.2%; the
    # BF16 rows unchanged; the table 8.2% -> 7.7%
    assert errors[1::2] == pytest.approx([-0.091, 0.030, 0.017, 0.254, 0.022], abs=0.002)
    assert errors[0::2] == pytest.approx([-0.044, 0.054, 0.047, 0.146, 0.067], abs=0.002)
    assert sum(abs(e) for e in errors) / len(errors) == pytest.approx(0.077, abs=0.002)
