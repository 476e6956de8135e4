"""The host time of a Transformer Engine linear module's backward, against what was measured [27 s11 hostbwd].

NVIDIA/TransformerEngine PR #3523 (2026-09-15, GB200) timed the CPU side of one bf16 te.Linear: forward 59.19 us,
forward and backward 311.30 us, so a backward of 252.11 us, 4.26x its forward (the model had charged 2x). The model
prices a te.Linear forward as one GEMM launch and the module's own time, and its backward as two GEMM launches and
``module_bwd_ratio`` times the module's time.
"""

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import Kernel, LayerShape, layer_kernels
from commlens.topology import load_topology
from commlens.workload import load_workload

TE_LINEAR_FWD_S = 59.19e-6
TE_LINEAR_FWD_BWD_S = 311.30e-6
MEASURED_RATIO = (TE_LINEAR_FWD_BWD_S - TE_LINEAR_FWD_S) / TE_LINEAR_FWD_S
TE_STACKS = ("megatron-core", "nemo", "megatron-core-25.09", "megatron-core-25.11", "automodel")
H100 = device_for("H100 SXM")


def _te_linear_s(stack: str, accelerator: str) -> tuple[float, float]:
    """(forward, backward) host seconds of one bf16 te.Linear as the model prices it."""
    fw, dev = framework(stack), device_for(accelerator)
    fwd = fw.host_s_per_kernel + fw.module_host_s
    bwd = 2 * fw.host_s_per_kernel + fw.module_bwd_ratio * fw.module_host_s
    return fwd * dev.host_op_factor, bwd * dev.host_op_factor


@pytest.mark.parametrize("stack", TE_STACKS)
@pytest.mark.parametrize("accelerator", ["H100 SXM", "B200", "B200 (GB200)"])
def test_a_te_linear_backward_costs_the_host_what_te_measured_over_its_forward(stack, accelerator):
    fwd, bwd = _te_linear_s(stack, accelerator)
    assert MEASURED_RATIO == pytest.approx(4.26, abs=0.005)
    assert bwd / fwd == pytest.approx(MEASURED_RATIO, rel=0.005)


def test_a_te_linear_backward_on_a_grace_host_is_no_cheaper_than_the_later_te_measured():
    # the ratio is carried to the 2025 forward (99 us on a GB200): 421 us, over the 252 us a later TE took
    fwd, bwd = _te_linear_s("megatron-core", "B200 (GB200)")
    assert fwd == pytest.approx(99.0e-6, rel=0.01)
    assert bwd == pytest.approx(4.26 * 99.0e-6, rel=0.01)
    assert bwd > TE_LINEAR_FWD_BWD_S - TE_LINEAR_FWD_S


def test_a_stack_on_torch_linears_keeps_the_backward_at_twice_its_launches():
    for stack in ("torchtitan", "deepspeed"):
        fw = framework(stack)
        assert fw.module_host_s == 0.0
        assert fw.module_bwd_ratio == 2.0


def _module_host_s(monkeypatch: pytest.MonkeyPatch, update: dict[str, float]) -> float:
    """Exposed host seconds of a host-bound Megatron-Core MoE step on GB200 (qwen3-30b-a3b, micro-batch 1, EP 8 on 8
    GPUs) with the profile's fields changed by ``update``."""
    fw = framework("megatron-core").model_copy(update=update)
    monkeypatch.setattr(step_mod, "framework", lambda name: fw)
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "precision": "bf16"})
    host = project(w, load_topology("gb200-nvl72"), ParallelLayout(ep=8, recompute="none"), 8).breakdown
    monkeypatch.undo()
    return host["host_overhead"]


def test_a_host_bound_step_pays_each_te_modules_backward_at_the_measured_ratio(monkeypatch):
    # 48 layers x 8 micro-batches x 4 TE modules (QKV, projection, two GroupedLinear), all exposed on a Grace host:
    # the modules' forward share (backward priced at nothing) and their whole share differ by the backward, which is
    # module_bwd_ratio times the forward's
    ratio = framework("megatron-core").module_bwd_ratio
    none = _module_host_s(monkeypatch, {"module_host_s": 0.0})
    fwd_only = _module_host_s(monkeypatch, {"module_bwd_ratio": 0.0}) - none
    whole = _module_host_s(monkeypatch, {}) - none
    assert fwd_only == pytest.approx(48 * 8 * 4 * 26e-6 * 2.75, rel=1e-6)
    assert (whole - fwd_only) / fwd_only == pytest.approx(ratio, rel=1e-6)
    # more than the twice the forward the model charged before
    assert whole - fwd_only > 2.5 * fwd_only


def _dense_kernels(stack: str, recipe: str) -> dict[str, Kernel]:
    """One fp8 Llama-3 8B layer's kernels at 4096 tokens, TP 1, on an H100."""
    w = load_workload("llama3-8b", {"seq_len": 4096, "micro_batch": 1, "precision": "fp8"})
    lay = ParallelLayout(framework=stack, fp8_recipe=recipe)
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=1, sp=False, tp_chunks=1)
    peak = H100.peak_flops["bf16"]
    return {k.name: k for k in layer_kernels(H100, framework(stack), w, lay, shape, 2 * peak, peak, False)}


@pytest.mark.parametrize(("recipe", "casts"), [("delayed", 1), ("current", 3)])
def test_an_fp8_te_linears_backward_launches_two_gemms_and_one_inputs_casts(recipe, casts):
    # TE v2.9 _Linear.backward casts the output gradient once; the forward's cast kept the input's column-wise copy
    # for the weight gradient: forward GEMM + casts, backward 2 GEMMs + the same casts, not twice the forward's
    proj = _dense_kernels("megatron-core", recipe)["attention_out"]
    assert proj.launches == 1 + casts
    assert proj.bwd_launches == 2 + casts


def test_a_torchao_fp8_linear_still_casts_each_backward_input():
    proj = _dense_kernels("torchtitan", "current")["attention_out"]
    assert proj.bwd_launches is None  # twice the forward's, as the step prices a kernel without its own count


def test_small_fp8_te_layers_wait_on_the_host_where_bf16_ones_do_not():
    # Llama-3 8B at TP 8 and 2,048 tokens on 64 H100s: the fp8 GEMMs are so small that the host's backward (TE's
    # modules at the measured ratio, the casts' launches) outlasts the GPU's, as TE #445 and #836 report fp8 slower
    # than 16 bits at small shapes; bf16's host stays hidden
    lay, topo = ParallelLayout(tp=8, recompute="none"), load_topology("dgx-h100")
    host = {}
    for precision in ("bf16", "fp8"):
        w = load_workload("llama3-8b", {"seq_len": 2048, "global_batch": 64, "precision": precision})
        host[precision] = project(w, topo, lay, 64).breakdown["host_overhead"]
    assert host["bf16"] == 0.0
    assert host["fp8"] > 0.0
