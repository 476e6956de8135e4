"""One GPU-bound Megatron-Core MoE layer against NVIDIA's own measurement of it [27 s12 moegpu].

Source: NVIDIA/Megatron-LM ``tests/functional_tests/test_cases/common/moe_perf`` at 57a0267265f6a37c4eb0b49dff840c1bd35d84f4
(baseline.json, test_cases.py, __main__.py; the baseline is the same from cf39a4dd, 2025-12-17, to d98e8a64).

- What ran: one ``MoELayer`` (router, token dispatcher, TE ``TEGroupedMLP`` experts; no attention, no norm, no residual),
  H100 (the cases' gpu_platform), TP 1, EP 8, 4,096 tokens a GPU (sequence 4,096, micro-batch 1), bf16, fp32 router
  (moe_router_dtype), moe_permute_fusion and moe_router_fusion on, moe_router_force_load_balancing (random logits:
  balanced routing), aux loss, no shared expert (DeepSeek proxy: ``_build_transformer_config`` does not pass its size).
- The experts are NOT SwiGLU: ``_build_transformer_config`` leaves ``gated_linear_unit`` (False), ``activation_func``
  (F.gelu) and ``bias_activation_fusion`` (False) at TransformerConfig's defaults, so each expert is a plain GELU MLP and
  its activation runs as eager ops (experts.py bias_act_func, last branch: gelu, the fp32 routing weights' multiply,
  the cast back). The marin #3666 harness builds its config the same way (tests/test_project_mzhost.py).
- Timing: CUDA events around the forward and around the backward, mean of 20 after 5 warm-up, each iteration after a
  barrier and an fp32 ``torch.matmul`` of two 8,192 x 8,192 matrices ("a long CUDA kernel to hide the router launch
  overhead"): the host queues the router while the GPU runs it, so the router's launch gaps are not measured.

The model's time is its kernels for the MoE half of one MoE layer (step._layer_kinds), less what MoELayer does not run
(the attention half and the FFN norm before it, the residual add after it) and less the router's launch gaps.
(tests/test_project_mzhost.py quoted another stored baseline.json, 32f2c9cf's, 0.1-2% from this one, and priced
SwiGLU experts: 1.5x the expert FLOPs that ran.)"""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout
from commlens.project.kernels import LayerShape, layer_kernels
from commlens.project.scenario import Scenario
from commlens.topology import load_topology
from commlens.workload import load_workload

QWEN30 = "qwen3-30b-a3b"  # the base preset; the proxies override its sizes
MIXTRAL_PROXY: dict[str, object] = {"hidden": 4096, "moe.experts": 8, "moe.top_k": 2, "moe.expert_ffn_hidden": 14336}
DEEPSEEK_PROXY: dict[str, object] = {
    "hidden": 7168,
    "moe.experts": 32,
    "moe.top_k": 8,
    "moe.expert_ffn_hidden": 2048,
    "moe.router_groups": 8,
    "moe.group_topk": 4,
}
PROXIES = {"mixtral": MIXTRAL_PROXY, "deepseek": DEEPSEEK_PROXY}
# baseline.json at 57a02672: case -> (forward_ms, backward_ms); cases <proxy>_<a2a|deepep|hybridep>_tp1ep8_bf16
MEASURED = {
    ("mixtral", "alltoall"): (4.32688798904419, 7.684332823753357),
    ("mixtral", "deepep"): (4.635550403594971, 7.854356813430786),
    ("mixtral", "hybridep"): (4.342604804039001, 7.740782427787781),
    ("deepseek", "alltoall"): (7.119169592857361, 10.482670497894286),
    ("deepseek", "deepep"): (5.681718397140503, 9.055137538909912),
    ("deepseek", "hybridep"): (5.390828824043274, 8.795001602172851),
}
CASES = sorted(MEASURED)
# TransformerConfig's defaults that the harness keeps: plain GELU experts, activation unfused
HARNESS_EXPERTS: dict[str, object] = {"gated_ffn": False}
ATTENTION_FREE = {"ffn_in", "ffn_activation", "ffn_out", "ffn_residual"}  # a dense layer's FFN half
NOT_IN_MOE_LAYER = frozenset(
    {"ffn_residual", "ffn_residual_gap"}
)  # TransformerLayer's residual add, after MoELayer returns
HIDDEN_BY_WARMUP = frozenset({"router_gap", "router_topk_gap"})  # the fp32 warm-up GEMM hides the router's launches


def moe_half_kernels(
    overrides: dict[str, object], dispatcher: str, fused_act: bool = False, leave_out: frozenset[str] = frozenset()
):
    """The model's kernels of the MoE half of one MoE layer (no attention half, no norm before it), EP 8 over one DGX
    H100, megatron-core, bf16, 4,096 tokens a GPU times the micro-batch (``overrides`` may set ``micro_batch``), less
    ``leave_out``; with the setup and the all-to-all bytes. tests/test_project_mzhost.py reads it too."""
    mb = int(str(overrides.get("micro_batch", 1)))
    fixed = {"seq_len": 4096, "micro_batch": mb, "global_batch": 8 * mb, "layers": 1, "precision": "bf16"}
    w = load_workload(QWEN30, {**fixed, "moe.first_moe_layer": 0, **overrides})
    layout = ParallelLayout(ep=8, moe_dispatcher=dispatcher, expert_activation_fused=fused_act)  # type: ignore[arg-type]
    c, _, _ = step_mod._setup(Scenario(w, load_topology("dgx-h100"), layout, 8))
    kernels, a2a_bytes = step_mod._layer_kinds(c, None, c.gemm_peak)[-1]
    shape = LayerShape(tokens=c.tokens, keys=4096.0, tp=1, ep=8, sp=False, tp_chunks=1)
    dense = layer_kernels(c.dev, c.fw, w, layout, shape, c.gemm_peak, c.dev.peak("bf16"), False)
    attention = {k.name for k in dense if k.name.removesuffix("_gap") not in ATTENTION_FREE}
    return c, [k for k in kernels if k.name not in attention | leave_out], a2a_bytes


def _moe_kernels(overrides: dict[str, object], dispatcher: str, fused_act: bool = False):
    """What NVIDIA's harness times: the MoE half less the residual add after MoELayer and the router's hidden gaps."""
    return moe_half_kernels(overrides, dispatcher, fused_act, NOT_IN_MOE_LAYER | HIDDEN_BY_WARMUP)


def moe_perf_ms(proxy: str, dispatcher: str, experts: dict[str, object] | None = None) -> tuple[float, float]:
    """The model's (forward, backward) milliseconds of NVIDIA's moe_perf layer: its kernels' own times and the
    dispatcher's transfers (two a pass), the exposed host time split as the launches are."""
    overrides = {**PROXIES[proxy], **(HARNESS_EXPERTS if experts is None else experts)}
    c, kernels, a2a_bytes = _moe_kernels(overrides, dispatcher, fused_act=experts is not None)
    parts, _ = step_mod._layer_time(c, kernels, a2a_bytes, step_mod._layer_comm(c))
    compute, stream, tp_t, cp_exposed, _, ep_t, host_exposed, _ = parts
    total = compute + stream + tp_t + cp_exposed + ep_t + host_exposed
    fwd = sum(k.fwd_s for k in kernels) + ep_t / 2
    return fwd * 1e3, (total - fwd) * 1e3


@pytest.mark.parametrize("case", CASES)
def test_the_moe_perf_layer_forward_and_backward_is_within_8_percent_of_nvidia_measurement(case):
    """Router, dispatch, plain GELU experts, combine, forward and backward: 12.0-17.6 ms measured; the model is
    -4.7% to +5.3% (Mixtral all-to-all 12.65 against 12.01 ms, DeepSeek DeepEP 14.05 against 14.74 ms)."""
    fwd, bwd = moe_perf_ms(*case)
    assert fwd + bwd == pytest.approx(sum(MEASURED[case]), rel=0.08)


@pytest.mark.parametrize("case", CASES)
def test_the_moe_perf_layer_backward_is_within_10_percent(case):
    """The backward alone (experts' data and weight gradients, the activation's backward, the permutations'
    inverses, the transfers back, the exposed host time): -2.2% to +8.2% (Mixtral all-to-all 8.31 against 7.68 ms)."""
    _, bwd = moe_perf_ms(*case)
    assert bwd == pytest.approx(MEASURED[case][1], rel=0.10)


@pytest.mark.parametrize("proxy", sorted(PROXIES))
def test_the_all_to_all_layer_forward_is_within_3_percent(proxy):
    """With the all-to-all dispatcher the forward is the permutations, NCCL's all-to-alls, the experts and the sort by
    local expert: 4.34 against 4.33 ms (Mixtral), 7.13 against 7.12 ms (DeepSeek)."""
    fwd, _ = moe_perf_ms(proxy, "alltoall")
    assert fwd == pytest.approx(MEASURED[(proxy, "alltoall")][0], rel=0.03)


@pytest.mark.xfail(
    strict=True,
    reason="[27 s12 moegpu] the flex dispatcher's forward is 6.5-11% below NVIDIA's measurement (DeepEP Mixtral 4.11 "
    "against 4.64 ms, HybridEP 4.06 against 4.34 ms; DeepSeek 5.19 against 5.68 ms and 5.00 against 5.39 ms) while its "
    "backward is within 4%: measured, DeepEP's forward takes 0.31 ms more than all-to-all's at Mixtral, where the "
    "model has it 0.23 ms less. Not priced: the forward-only part (DeepEP's dispatch layout and notify, the host's "
    "wait for the token counts before the experts) is not sized by any source read here",
)
@pytest.mark.parametrize("case", [c for c in CASES if c[1] != "alltoall"])
def test_the_flex_dispatcher_layer_forward_is_within_5_percent(case):
    fwd, _ = moe_perf_ms(*case)
    assert fwd == pytest.approx(MEASURED[case][0], rel=0.05)


def test_the_permutation_moves_each_source_row_and_each_copy_once_and_its_backward_the_same():
    """Transformer Engine's fused permute loads a token once and stores each of its copies; the unpermute loads the
    copies and stores the token once (triton permutation.py at v2.9 and d0067d0d); the backward is the other kernel
    over the gradient. DeepSeek proxy, all-to-all: 4,096 tokens, 32,768 copies of 7,168 values, 16 bits."""
    _, kernels, _ = _moe_kernels({**DEEPSEEK_PROXY, **HARNESS_EXPERTS}, "alltoall")
    permute = next(k for k in kernels if k.name == "permute")
    assert permute.nbytes == pytest.approx(2 * 2 * (4096 + 32768) * 7168)
    assert permute.bwd_s == pytest.approx(permute.fwd_s)


def test_deepep_permutes_the_received_tokens_one_per_destination_gpu():
    """The flex dispatcher's local permute reads what DeepEP delivered, one row per token and destination GPU: at the
    DeepSeek proxy's group limit (4 of 8 groups, one group a GPU) 4 rows for a token's 8 copies; at Mixtral's top-2 of
    8 experts (one a GPU) a row per copy."""
    _, ds, _ = _moe_kernels({**DEEPSEEK_PROXY, **HARNESS_EXPERTS}, "deepep")
    _, mx, _ = _moe_kernels({**MIXTRAL_PROXY, **HARNESS_EXPERTS}, "deepep")
    ds_received = next(k for k in ds if k.name == "permute").nbytes / (2 * 2 * 7168) - 32768
    mx_received = next(k for k in mx if k.name == "permute").nbytes / (2 * 2 * 4096) - 8192
    assert ds_received == pytest.approx(4 * 4096)
    assert mx_received == pytest.approx(8192)


@pytest.mark.parametrize("case", CASES)
def test_pricing_swiglu_experts_instead_of_the_harness_gelu_ones_is_15_percent_too_slow(case):
    """What the 25-34% miss first reported for these layers was: SwiGLU experts (1.5x the expert GEMM FLOPs, the fused
    activation) priced against a layer that ran plain GELU experts (now +20% to +32%)."""
    proxy, dispatcher = case
    fwd, bwd = moe_perf_ms(proxy, dispatcher, experts={"gated_ffn": True})
    assert fwd + bwd > 1.15 * sum(MEASURED[case])
