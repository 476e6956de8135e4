"""The dense FFN's activation, bytes per element of its output as each stack's kernels move them [27 s12 actbytes].

Sources (kernels.py FFN_ACT_BYTES): Megatron-Core's SwiGLUFunction (megatron/core/fusions/fused_bias_swiglu.py swiglu /
swiglu_back, torch.compile'd by megatron/core/jit.py; NVIDIA/Megatron-LM 240a8ef7 to d98e8a64) and GeLUFunction
(fused_bias_gelu.py); torchtitan's ``F.silu(self.w1(x)) * self.w3(x)`` (torchtitan/models/llama/model.py at 9dec370),
eager or under torch.compile (Inductor: one kernel each way, checked on torch 2.13's CPU backend); DeepSpeed's rows'
plain GELU (one ATen kernel each way eager).
"""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import EAGER_STREAM_FRACTION, Kernel, LayerShape, layer_kernels, recompute_share
from commlens.topology import load_topology
from commlens.workload import load_workload

TOKENS = 8192.0


def _activation(workload: str, fw_name: str, compile_: bool | None = None, **fw_update: object) -> tuple[Kernel, float]:
    """The FFN activation kernel of one dense layer of ``workload`` on one H100 (TP 1, bf16) under ``fw_name`` (its
    profile updated by ``fw_update``), and its output elements."""
    w = load_workload(workload, {"seq_len": 8192, "micro_batch": 1, "precision": "bf16"})
    layout = ParallelLayout(framework=fw_name, compile=compile_)
    dev = device_for(load_topology("dgx-h100").accelerator.name)
    fw = framework(fw_name).model_copy(update=fw_update)
    shape = LayerShape(tokens=TOKENS, keys=8192.0, tp=1, ep=1, sp=False, tp_chunks=1)
    kernels = layer_kernels(dev, fw, w, layout, shape, dev.peak("bf16"), dev.peak("bf16"), False)
    (act,) = [k for k in kernels if k.name == "ffn_activation"]
    return act, TOKENS * w.ffn_hidden


def _bytes(act: Kernel, elements: float, eager: tuple[float, float], stream: tuple[float, float]) -> None:
    """``act`` moves ``eager`` bytes an element at the eager rate and ``stream`` at the stream rate, forward and
    backward."""
    dev = device_for(load_topology("dgx-h100").accelerator.name)
    for i, t in enumerate((act.fwd_s, act.bwd_s)):
        want = stream_time_s(dev, eager[i] * elements) / EAGER_STREAM_FRACTION + stream_time_s(
            dev, stream[i] * elements
        )
        assert t == pytest.approx(want, rel=1e-9)
    assert act.nbytes == pytest.approx((eager[0] + stream[0]) * elements, rel=1e-9)


def test_megatron_swiglu_is_one_kernel_of_6_and_10_bytes() -> None:
    # SwiGLUFunction: swiglu reads both halves (4 B) and writes the product (2 B); swiglu_back reads the gradient and
    # both halves and writes both halves' gradients (2 + 4 + 4). The model charged 8 / 16 B.
    act, n = _activation("llama3-8b", "megatron-core")
    _bytes(act, n, (0.0, 0.0), (6.0, 10.0))
    assert (act.launches, act.bwd_launches) == (1.0, 1.0)


def test_torchtitan_compiled_swiglu_moves_what_megatrons_fused_kernel_does() -> None:
    compiled, n = _activation("llama3-8b", "torchtitan", compile_=True)
    fused, _ = _activation("llama3-8b", "megatron-core")
    _bytes(compiled, n, (0.0, 0.0), (6.0, 10.0))
    assert (compiled.fwd_s, compiled.bwd_s) == (fused.fwd_s, fused.bwd_s)


def test_torchtitan_eager_swiglu_is_silu_then_a_product() -> None:
    # forward F.silu (2 + 2, eager rate) and the product (2 + 2 + 2); backward the product's two gradients
    # (2 x (2 + 2 + 2)) and silu_backward (2 + 2 + 2, eager rate): 2 and 3 kernels. The model charged 1.7 x 8 B at the
    # eager rate forward and twice that backward.
    act, n = _activation("llama3-8b", "torchtitan", compile_=False)
    _bytes(act, n, (4.0, 6.0), (6.0, 12.0))
    assert (act.launches, act.bwd_launches) == (2.0, 3.0)
    fused, _ = _activation("llama3-8b", "torchtitan", compile_=True)
    assert 1.5 < act.fwd_s / fused.fwd_s < 2.0 and 1.7 < act.bwd_s / fused.bwd_s < 2.2


def test_eager_swiglu_of_one_gate_up_gemm_adds_the_chunks_backward_cat() -> None:
    # halves chunked from one fc1 output (Megatron-Core's unfused glu, Megatron-DeepSpeed's swiglu): the chunk's
    # backward writes both gradients into the fc1 width (4 + 4 B)
    apart, n = _activation("llama3-8b", "torchtitan", compile_=False)
    chunked, _ = _activation("llama3-8b", "torchtitan", compile_=False, gate_up_fused=True)
    _bytes(chunked, n, (4.0, 6.0), (6.0, 20.0))
    assert chunked.fwd_s == apart.fwd_s and chunked.bwd_launches == 4.0


def test_plain_gelu_fused_with_its_bias_and_eager() -> None:
    # Megatron's GeLUFunction: 2 + 2 forward; bias_gelu_back 2 + 2 + 2 and the bias's gradient, a sum of the input
    # gradient over the rows (2): 4 / 8 B, as before (SC'21's rows). DeepSpeed's rows: F.gelu, one eager kernel each way
    # (was 1.7 x 4 B at the eager rate forward, twice that backward).
    fused, n = _activation("gpt3-175b", "megatron-core")
    _bytes(fused, n, (0.0, 0.0), (4.0, 8.0))
    eager, _ = _activation("gpt3-175b", "deepspeed")
    _bytes(eager, n, (4.0, 6.0), (0.0, 0.0))
    assert (eager.launches, eager.bwd_launches) == (1.0, 1.0)


def test_shared_experts_run_the_dense_ffn_s_activation() -> None:
    # Megatron-Core's SharedExpertMLP is its MLP (MLP.forward's bias_swiglu_impl): 6 / 10 B an element of tokens x the
    # shared width, one kernel each way; recomputed with the shared_experts module. The model priced their GEMMs only.
    w = load_workload("deepseek-v3-like", {"seq_len": 4096, "micro_batch": 1, "precision": "bf16"})
    assert w.moe is not None and w.moe.shared_experts == 1
    dev = device_for(load_topology("dgx-h100").accelerator.name)
    layout = ParallelLayout(ep=8)
    shape = LayerShape(tokens=4096.0, keys=4096.0, tp=1, ep=8, sp=False, tp_chunks=1)
    kernels = layer_kernels(dev, framework("megatron-core"), w, layout, shape, dev.peak("bf16"), dev.peak("bf16"), True)
    (act,) = [k for k in kernels if k.name == "shared_activation"]
    _bytes(act, 4096.0 * w.moe.shared_experts * w.moe.expert_ffn_hidden, (0.0, 0.0), (6.0, 10.0))
    assert act.eager and recompute_share("shared_activation", frozenset({"shared_experts"}), w) == 1.0
