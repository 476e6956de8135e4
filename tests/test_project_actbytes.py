"""The shared experts' activation [27 s12 actbytes]: Megatron-Core's SharedExpertMLP is its dense MLP (moe/
shared_experts.py at NVIDIA/Megatron-LM d98e8a64 and 44151194: MLP.forward, the same bias_swiglu_impl), torchtitan's
shared expert its FeedForward. The model priced the shared experts' GEMMs only; their activation is now priced as the
dense FFN's (kernels.shared_activation). The helper's re-pricing of the dense FFN's activation bytes (6 / 10 B an
element where the model charges 8 / 16) was measured and not kept (docs/project-evidence.md [27 s12 actbytes])."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import LayerShape, layer_kernels, recompute_share
from commlens.topology import load_topology
from commlens.workload import load_workload


def _moe_layer(workload: str) -> list:
    w = load_workload(workload, {"seq_len": 4096, "micro_batch": 1, "precision": "bf16"})
    dev = device_for(load_topology("dgx-h100").accelerator.name)
    shape = LayerShape(tokens=4096.0, keys=4096.0, tp=1, ep=8, sp=False, tp_chunks=1)
    fw = framework("megatron-core")
    return layer_kernels(dev, fw, w, ParallelLayout(ep=8), shape, dev.peak("bf16"), dev.peak("bf16"), True)


def test_shared_experts_run_the_dense_ffn_s_activation() -> None:
    w = load_workload("deepseek-v3-like", {"seq_len": 4096})
    assert w.moe is not None and w.moe.shared_experts == 1
    dev = device_for(load_topology("dgx-h100").accelerator.name)
    (act,) = [k for k in _moe_layer("deepseek-v3-like") if k.name == "shared_activation"]
    elements = 4096.0 * w.moe.shared_experts * w.moe.expert_ffn_hidden
    # the dense FFN's pricing: 4 B an output element per weight matrix of the gated unit forward, twice that backward
    assert act.fwd_s == pytest.approx(stream_time_s(dev, 2 * 2 * elements * 2), rel=1e-9)
    assert act.bwd_s == pytest.approx(2 * act.fwd_s, rel=1e-9)
    assert act.eager
    assert recompute_share("shared_activation", frozenset({"shared_experts"}), w) == 1.0


def test_a_model_without_shared_experts_has_no_shared_activation() -> None:
    assert not [k for k in _moe_layer("qwen3-30b-a3b") if k.name.startswith("shared_")]
