"""Megatron-Core's MoE experts under fp8 as its dispatchers leave the tokens (issue 27, the Megatron-Bridge MoE
rows audited B200 against GB200/GB300): TEGroupedMLP pads each expert's tokens to the fp8 GEMM's alignment and
unpads the output (Transformer Engine's Fp8Padding), unless the HybridEP dispatch padded them already; and the
published rows name the dispatcher and settings their configs set."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, Projection, project
from commlens.project.step import deepep_share
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

B200 = load_topology("b200")


def _qwen235(precision: str, dispatcher: str) -> Projection:
    """Qwen3-235B on 256 B200s as the 26.04.01 row runs it (PP 8, EP 8, MBS 1), with the dispatcher given."""
    w = load_workload(
        "qwen3-235b-a22b", {"seq_len": 4096, "global_batch": 8192, "micro_batch": 1, "precision": precision}
    )
    lay = {"pp": 8, "ep": 8, "recompute": "none", "embedding_in_split": True, "loss_in_split": True}
    if precision == "fp8":
        lay["fp8_recipe"] = "mxfp8"
    return project(w, B200, ParallelLayout(**lay, framework="nemo", moe_dispatcher=dispatcher), 256)  # type: ignore[arg-type]


def test_hybridep_is_the_flex_dispatcher_with_deepep_s_traffic():
    """In 16 bits the two flex backends send the same copies (one per destination GPU, no local sort); HybridEP
    adds its routing-map gather and scan and the probabilities it sends (tests/test_project_hybridep.py)."""
    hybrid = _qwen235("bf16", "hybridep").step_time_s
    deepep = _qwen235("bf16", "deepep").step_time_s
    # [27 s11 deepepnv] the same copies, at each kernel's measured rate inside the node: HybridEP 0.91 of the link
    # (its GB200 table, 32 SMs), DeepEP 0.56 (the same README's DeepEP rows, 24 SMs)
    assert hybrid < deepep
    assert hybrid < _qwen235("bf16", "alltoall").step_time_s


def test_fp8_experts_pad_their_tokens_unless_the_hybridep_dispatch_padded_them():
    """Under fp8 the all-to-all and DeepEP layers pay the padding pass and HybridEP's does not: the same seconds
    in both (the routed tokens are the same), and 2 / (1 + share) of the permutation's (the padding reads and writes
    the routed tokens twice each way; the fused permutation and unpermutation each way the received rows and the
    routed ones once, kernels.mcore_permute [27 s12 moegpu])."""
    routing = {(p, d): _qwen235(p, d).kernels["moe_routing"] for p in ("fp8", "bf16") for d in ("alltoall", "deepep")}
    hybrid = _qwen235("fp8", "hybridep")
    pad_alltoall = routing["fp8", "alltoall"] - routing["bf16", "alltoall"]
    pad_deepep = routing["fp8", "deepep"] - hybrid.kernels["moe_routing"]
    assert pad_alltoall > 0
    assert pad_deepep == pytest.approx(pad_alltoall, rel=1e-9)
    share = deepep_share(128, 8, 1, 8, "uniform")  # received rows over routed copies: one per destination GPU
    assert pad_deepep == pytest.approx(2.0 / (1.0 + share) * hybrid.kernels["moe_routing"], rel=1e-9)
    assert routing["bf16", "deepep"] == hybrid.kernels["moe_routing"]
    assert _qwen235("fp8", "deepep").step_time_s > hybrid.step_time_s


def test_the_megatron_bridge_moe_rows_name_the_dispatcher_their_configs_set():
    """26.04.01 (Megatron-Bridge 21d102f5): HybridEP on every GB200/GB300 Qwen3 and DeepSeek-V3 row, on B200
    Qwen3-30B and on H100 Qwen3-30B; DeepEP on B200 DeepSeek-V3 (its FP8-MX V2 config: the page's layout, with
    mla_up_proj and mlp recomputed); the all-to-all dispatcher on B200/H100 Qwen3-235B and every gpt-oss row."""
    rows = {(r.workload, r.topology): r.layout for r in load_set("megatron-bridge-perf-26.04.01-moe").rows}
    flex = {
        (w, t): rows[w, t].get("moe_dispatcher", "alltoall")
        for w in ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3-like", "gpt-oss-120b")
        for t in ("gb200-nvl72", "gb300-nvl72", "b200", "dgx-h100")
        if (w, t) in rows
    }
    assert {k for k, v in flex.items() if v == "hybridep"} == {
        (w, t) for w in ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3-like") for t in ("gb200-nvl72", "gb300-nvl72")
    } | {("qwen3-30b-a3b", "b200"), ("qwen3-30b-a3b", "dgx-h100")}
    assert flex["deepseek-v3-like", "b200"] == "deepep"
    assert {k for k, v in flex.items() if v == "alltoall"} == {
        ("qwen3-235b-a22b", "b200"),
        ("qwen3-235b-a22b", "dgx-h100"),
    } | {("gpt-oss-120b", t) for t in ("gb200-nvl72", "gb300-nvl72", "b200", "dgx-h100")}
    assert tuple(rows["deepseek-v3-like", "b200"]["recompute_modules"]) == ("mla_up_proj", "mlp")
