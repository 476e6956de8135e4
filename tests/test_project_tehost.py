"""The host time the model charges per Transformer Engine linear module, against what was measured [27 s10 tehost].

NVIDIA/TransformerEngine issue #2053 (2025-08-11, "High CPU overhead on Grace systems") measured the CPU time of one
bf16 forward (hidden 2048, 8192 tokens): torch.nn.Linear 37.08 us on a GB200, 33.17 us on a GH200 and 13.48 us on a
DGX H100 (Xeon Platinum 8480C); te.Linear 99.66 us on the GB200 and 90.53 us on the GH200.
"""

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.topology import load_topology
from commlens.workload import load_workload

TE_LINEAR_GB200_S = 99.66e-6
TORCH_LINEAR_GB200_S = 37.08e-6
TORCH_LINEAR_DGX_H100_S = 13.48e-6
TE_STACKS = ("megatron-core", "nemo")


def _te_linear_forward_s(stack: str, accelerator: str) -> float:
    """One te.Linear forward as the model prices it: its one bf16 GEMM launch and the module's own host time."""
    fw, dev = framework(stack), device_for(accelerator)
    return (fw.host_s_per_kernel + fw.module_host_s) * dev.host_op_factor


@pytest.mark.parametrize("stack", TE_STACKS)
@pytest.mark.parametrize("accelerator", ["B200 (GB200)", "B300 (GB300)"])
def test_a_te_linear_forward_on_a_grace_host_costs_what_the_gb200_measured(stack, accelerator):
    assert _te_linear_forward_s(stack, accelerator) == pytest.approx(TE_LINEAR_GB200_S, rel=0.02)


@pytest.mark.parametrize("stack", TE_STACKS)
@pytest.mark.parametrize("accelerator", ["H100 SXM", "H200 SXM", "B200"])
def test_a_te_linear_forward_on_a_xeon_dgx_costs_the_grace_figure_over_the_cpus_ratio(stack, accelerator):
    # the x86 te.Linear is the GB200's over torch's Grace/Xeon ratio: 99.66 x 13.48 / 37.08 = 36.2 us
    x86 = TE_LINEAR_GB200_S * TORCH_LINEAR_DGX_H100_S / TORCH_LINEAR_GB200_S
    assert device_for(accelerator).host_op_factor == 1.0
    assert _te_linear_forward_s(stack, accelerator) == pytest.approx(x86, rel=0.02)
    # a Grace host takes the measured torch ratio longer (37.08 / 13.48 = 2.75)
    grace = _te_linear_forward_s(stack, "B200 (GB200)")
    assert grace / _te_linear_forward_s(stack, accelerator) == pytest.approx(
        TORCH_LINEAR_GB200_S / TORCH_LINEAR_DGX_H100_S, rel=0.01
    )


def test_a_stack_on_torch_linears_pays_no_module_cost():
    assert framework("torchtitan").module_host_s == 0.0


def test_nemo_automodels_te_linears_cost_its_own_launch_more():
    # AutoModel keeps torchtitan's 12 us per launch and adds megatron-core's 26 us a TE module: 38 us on a Xeon and
    # 104.5 us on a Grace, 5% over the measurement (its launch figure is torchtitan's, not re-derived here)
    assert _te_linear_forward_s("automodel", "H100 SXM") == pytest.approx(38e-6)
    assert _te_linear_forward_s("automodel", "B200 (GB200)") == pytest.approx(TE_LINEAR_GB200_S, rel=0.06)


def _module_host_share(monkeypatch: pytest.MonkeyPatch, topology: str) -> float:
    """Seconds of exposed host time a host-bound Megatron-Core MoE step (qwen3-30b-a3b, micro-batch 1, EP 8 on 8
    GPUs) owes to its TE linear modules' own host time."""
    fw = framework("megatron-core")
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "precision": "fp8"})
    lay, topo = ParallelLayout(ep=8, recompute="none"), load_topology(topology)
    host = []
    for module_s in (fw.module_host_s, 0.0):
        priced = fw.model_copy(update={"module_host_s": module_s})
        monkeypatch.setattr(step_mod, "framework", lambda name, p=priced: p)
        host.append(project(w, topo, lay, 8).breakdown["host_overhead"])
    monkeypatch.undo()
    return host[0] - host[1]


def test_each_te_module_of_a_host_bound_grace_step_adds_its_measured_cost(monkeypatch):
    # 48 layers x 8 micro-batches x 4 TE modules (QKV, projection, two GroupedLinear; the router is a plain matmul),
    # each forward once and its backward at module_bwd_ratio forwards [27 s11 hostbwd], at 26 us x 2.75 = 71.5 us:
    # all exposed on a Grace host
    fw = framework("megatron-core")
    per_module = fw.module_host_s * device_for("B200 (GB200)").host_op_factor
    passes = 1 + fw.module_bwd_ratio
    assert per_module == pytest.approx(TE_LINEAR_GB200_S - 10e-6 * 2.75, rel=0.02)
    assert _module_host_share(monkeypatch, "gb200-nvl72") == pytest.approx(48 * 8 * 4 * passes * per_module, rel=1e-6)
    # the Xeon 8570 of a DGX B200 pays 26 us a module, and some of it hides under the GPU's time
    x86 = _module_host_share(monkeypatch, "b200")
    assert 0 < x86 <= 48 * 8 * 4 * passes * 26e-6 * (1 + 1e-9)
