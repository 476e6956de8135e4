"""Megatron-Core's CUDA graph scopes (``ParallelLayout.cuda_graph_scope``) and ZeRO-1's fp8 parameter gathers
(``ParallelLayout.fp8_param_gather``).

Megatron-LM 0d8e0714 (the 25.11 container) and 44151194 (26.04.01): ``--cuda-graph-scope`` decides which parts of a
layer Transformer Engine's graphs replay, and with ``moe_preprocess`` the all-to-all dispatcher copies its token
counts at the point where the host waits for them, so the stream drains there. With fp8 parameters
(``fp8_param_gather``) the distributed optimizer keeps per-tensor-scaled weights in a uint8 buffer and gathers one
byte each; MXFP8 weights are gathered in bf16."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import InfeasibleLayoutError, ParallelLayout, project
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.kernels import Kernel, graph_share
from commlens.project.layout import Group
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

B200 = load_topology("b200")


def _step(workload, layout: dict, gpus: int = 8, topology=B200) -> float:
    return project(workload, topology, ParallelLayout(**layout), gpus, check_memory=False).step_time_s


def _qwen_row() -> tuple:
    """The 25.11 B200 Qwen3-30B-A3B row: the all-to-all dispatcher, graphs on moe_router and moe_preprocess."""
    rows = load_set("megatron-bridge-perf-25.11").rows
    row = next(r for r in rows if r.workload == "qwen3-30b-a3b" and r.topology == "b200")
    base = {k: v for k, v in row.layout.items() if k != "cuda_graph_scope"}
    return load_workload(row.workload, row.overrides), base, row


def test_a_scope_follows_megatrons_own_rules():
    with pytest.raises(ValueError, match="needs cuda_graphs true"):
        ParallelLayout(cuda_graph_scope=("attn",))
    with pytest.raises(ValueError, match="only with moe_router"):
        ParallelLayout(cuda_graphs=True, cuda_graph_scope=("attn", "moe_preprocess"))
    with pytest.raises(ValueError, match="both moe and moe_router"):
        ParallelLayout(cuda_graphs=True, cuda_graph_scope=("moe", "moe_router"))
    with pytest.raises(ValueError, match="full_iteration"):
        ParallelLayout(cuda_graphs=True, cuda_graph_scope=("full_iteration", "attn"))


def test_scopes_the_model_cannot_capture_are_refused():
    dense = load_workload("llama3-8b")
    with pytest.raises(InfeasibleLayoutError, match="dense model"):
        _step(dense, {"dp": 8, "cuda_graphs": True, "cuda_graph_scope": ["moe_router"]})
    moe, base, _ = _qwen_row()
    for scope in (["moe"], ["full_iteration"]):
        with pytest.raises(InfeasibleLayoutError, match="drop-and-pad"):
            _step(moe, {**base, "cuda_graph_scope": scope})


def test_what_each_scope_replays():
    """Router and pre-MLP norm under moe_router; permutation 1 (half the dispatch launches) only with moe_preprocess
    and the all-to-all dispatcher; the residual add after the combine and the experts never; attention under attn."""

    def shares(**lay) -> dict[str, float]:
        layout = ParallelLayout(cuda_graphs=True, **lay)
        names = ("qkv", "ffn_norm", "router", "permute", "experts_in", "ffn_residual")
        eager = {"permute", "experts_in"}
        return {n: graph_share(Kernel(n, "gemm", 0.0, 0.0, eager=n in eager), layout, True) for n in names}

    assert shares(cuda_graph_scope=("moe_router", "moe_preprocess")) == {
        "qkv": 0.0,
        "ffn_norm": 1.0,
        "router": 1.0,
        "permute": 0.5,
        "experts_in": 0.0,
        "ffn_residual": 0.0,
    }
    assert shares(cuda_graph_scope=("attn", "moe_router", "moe_preprocess"), moe_dispatcher="hybridep")["permute"] == 0
    assert shares(cuda_graph_scope=("attn", "moe_router"))["qkv"] == 1.0
    # no scope: every static kernel, as before the field
    assert shares() == {
        "qkv": 1.0,
        "ffn_norm": 1.0,
        "router": 1.0,
        "permute": 0.0,
        "experts_in": 0.0,
        "ffn_residual": 1.0,
    }


def test_a_dense_layer_graphed_whole_is_the_unscoped_graph():
    w = load_workload("llama3-8b", {"seq_len": 2048, "global_batch": 64, "micro_batch": 1})
    lay = {"dp": 8, "cuda_graphs": True}
    whole = _step(w, lay)
    assert _step(w, {**lay, "cuda_graph_scope": ["full_iteration"]}) == whole
    assert _step(w, {**lay, "cuda_graph_scope": ["attn", "mlp"]}) == whole
    # the MLP launched from the host again: its launch gaps and host time come back
    assert _step(w, {**lay, "cuda_graph_scope": ["attn"]}) > whole
    assert _step(w, {"dp": 8}) > _step(w, {**lay, "cuda_graph_scope": ["attn"]})


def test_a_captured_preprocess_drains_the_all_to_all_dispatchers_stream():
    """With moe_preprocess the host's wait for the counts finds nothing queued; without it permutation 1 still runs
    when the host resumes. The flex (HybridEP) dispatcher syncs inside its dispatch either way. At micro-batch 2:
    at the row's 4,096 tokens permutation 1 (TE's fused permute, kernels.mcore_permute) runs shorter than the host
    time its capture saves, so draining costs nothing there [27 s12 moegpu]."""
    w, base, row = _qwen_row()
    w = load_workload(row.workload, {**row.overrides, "micro_batch": 2})
    router_only = _step(w, {**base, "cuda_graph_scope": ["moe_router"]})
    drained = _step(w, {**base, "cuda_graph_scope": ["moe_router", "moe_preprocess"]})
    assert drained > router_only
    flex = {**base, "moe_dispatcher": "hybridep"}
    assert _step(w, {**flex, "cuda_graph_scope": ["moe_router"]}) == _step(
        w, {**flex, "cuda_graph_scope": ["moe_router", "moe_preprocess"]}
    )


def test_the_rows_record_their_recipes_scope():
    _, _, row = _qwen_row()
    assert row.layout["cuda_graph_scope"] == ["moe_router", "moe_preprocess"]
    assert row.layout["cuda_graphs"] is True
    scopes = {
        (r.workload, r.topology): tuple(r.layout.get("cuda_graph_scope") or ())
        for r in load_set("megatron-bridge-perf-26.04.01-moe").rows
    }
    assert scopes[("qwen3-30b-a3b", "gb200-nvl72")] == ("moe_router", "moe_preprocess")
    assert scopes[("gpt-oss-120b", "gb300-nvl72")] == ("attn", "moe_router", "moe_preprocess")
    assert scopes[("gpt-oss-120b", "dgx-h100")] == ()


DEV = device_for(load_topology("dgx-h100").accelerator.name)
DP = Group(size=8, nodes=1, ranks_per_host=8)
NONE = Group(size=1, nodes=1, ranks_per_host=8)


def test_zero1_gathers_fp8_weights_at_one_byte():
    """_dp_tail's ZeRO-1 all-gather: 2 B a parameter less 1 B for each one stored in fp8."""
    gathered: list[float] = []

    def comm(op: str, nbytes: float, group: Group) -> float:
        if op == "all_gather":
            gathered.append(nbytes)
        return 0.0

    lay = ParallelLayout(zero=1, overlap_grad_reduce=False, overlap_param_gather=False)
    st = {"layers": 32.0, "compute": 1.0, "memory_bound": 0.0, "tp_comm": 0.0}
    fw = framework("megatron-core")
    step_mod._dp_tail(comm, DEV, lay, 8.0e9, 4.0e9, DP, DP, 2, 0.0, st, 0.0, 1, fw, (), 0.0, (6.0e9, 4.0e9))
    assert gathered == [pytest.approx(2 * 8.0e9 - 6.0e9), pytest.approx(2 * 4.0e9 - 4.0e9)]


@pytest.mark.parametrize(("recipe", "precision", "faster"), [("current", "fp8", True), ("mxfp8", "fp8", False)])
def test_fp8_param_gather_follows_the_recipe(recipe, precision, faster):
    # MXFP8 weights gather at 2 B as without fp8 parameters, but the non-fp8 buckets then join the first layers'
    # bucket group, exposed whole (partition_buckets, [27 s16 fp8bucket]): no faster, a little slower
    w = load_workload("llama3-8b", {"precision": precision, "seq_len": 8192, "global_batch": 128, "micro_batch": 2})
    lay = {"dp": 8, "zero": 1, "overlap_param_gather": False, "fp8_recipe": recipe}
    off = project(w, B200, ParallelLayout(**lay), 8, check_memory=False).breakdown["dp_comm"]
    on = project(w, B200, ParallelLayout(**lay, fp8_param_gather=True), 8, check_memory=False).breakdown["dp_comm"]
    assert (on < off) if faster else (off < on < 1.5 * off)


def test_fp8_param_gather_needs_fp8_precision():
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 128, "micro_batch": 2})
    lay = {"dp": 8, "zero": 1, "overlap_param_gather": False}
    assert _step(w, {**lay, "fp8_param_gather": True}) == _step(w, lay)


def test_the_scope_is_given_on_the_command_line_as_a_list():
    """``--set layout.cuda_graph_scope=moe_router,moe_preprocess`` (or one scope) reads as Megatron's list; an unknown
    scope is named in the error."""
    assert ParallelLayout.model_validate(
        {"cuda_graphs": True, "cuda_graph_scope": "moe_router,moe_preprocess"}
    ).cuda_graph_scope == ("moe_router", "moe_preprocess")
    assert ParallelLayout.model_validate({"cuda_graphs": True, "cuda_graph_scope": "attn"}).cuda_graph_scope == (
        "attn",
    )
    with pytest.raises(ValueError, match="'attn', 'mlp'"):
        ParallelLayout.model_validate({"cuda_graphs": True, "cuda_graph_scope": "bogus"})
