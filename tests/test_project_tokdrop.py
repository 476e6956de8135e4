"""Megatron-Core's token drop (``ParallelLayout.moe_capacity_factor`` / ``moe_pad_to_capacity``) [27 s10 tokdrop].

Megatron-LM core_v0.14.0: with moe_expert_capacity_factor each expert takes at most its capacity of tokens
(moe_utils.py get_capacity, apply_router_token_dropping); with moe_pad_expert_input_to_capacity every expert takes
exactly that many rows, and the all-to-all dispatcher knows each split on the host, so it copies nothing back and
never waits (token_dispatcher.py MoEAlltoAllTokenDispatcher, drop_and_pad: cuda_sync_point 'no_sync'). The 25.09
Megatron-Bridge performance runs set it for their token-drop recipes (moe_token_drop.py at v0.1.0rc4)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from commlens.cli import project_cmd  # noqa: F401  (registers the command)
from commlens.cli.app import app
from commlens.project import InfeasibleLayoutError, ParallelLayout, project
from commlens.project.hardware import device_for
from commlens.project.kernels import capacity_mask_kernel, topk_multiblock
from commlens.project.validate import MEMORY, SC21, load_set, table_names
from commlens.topology import load_topology
from commlens.workload import load_workload

DROPLESS = {"moe_capacity_factor": None, "moe_pad_to_capacity": False}


def _row(topology: str = "b200"):
    """The 25.09 B200 Qwen3-30B-A3B token-drop row (all-to-all dispatcher, EP 8, per-layer CUDA graphs)."""
    row = next(
        r
        for r in load_set("megatron-bridge-perf-25.09").rows
        if r.workload == "qwen3-30b-a3b" and r.topology == topology
    )
    return load_workload(row.workload, row.overrides), load_topology(row.topology), row


def _project(extra: dict, topology: str = "b200"):
    w, topo, row = _row(topology)
    return project(w, topo, ParallelLayout(**{**row.layout, **extra}), row.gpus, check_memory=False)


def test_drop_and_pad_waits_for_no_token_counts():
    # the same layout without CUDA graphs, so only the dispatcher's host read differs
    eager = {"cuda_graphs": False}
    dropless = _project({**eager, **DROPLESS})
    padded = _project(eager)
    drop_only = _project({**eager, "moe_pad_to_capacity": False})  # capacity without padding still reads the counts
    assert padded.breakdown["host_overhead"] < 0.8 * dropless.breakdown["host_overhead"]
    assert padded.breakdown["host_overhead"] < 0.8 * drop_only.breakdown["host_overhead"]
    assert padded.step_time_s < dropless.step_time_s


def test_padded_experts_run_exactly_their_capacity_whatever_the_routing():
    balanced = _project(DROPLESS).kernels["grouped_gemm"]
    skewed = {"moe_load_imbalance": 1.5}
    # padded: the capacity, not the most loaded GPU's share
    assert _project(skewed).kernels["grouped_gemm"] == pytest.approx(balanced)
    # capacity factor 1.25, padded: every expert 1.25 x the mean, as a dropless run whose busiest GPU takes 1.25 x
    wide = _project({"moe_capacity_factor": 1.25}).kernels["grouped_gemm"]
    assert wide == pytest.approx(_project({**DROPLESS, "moe_load_imbalance": 1.25}).kernels["grouped_gemm"])
    assert wide > 1.1 * balanced
    # without padding the tokens past the capacity are dropped, not computed: the busiest GPU runs the capacity
    dropped = _project({**skewed, "moe_pad_to_capacity": False}).kernels["grouped_gemm"]
    assert dropped == pytest.approx(balanced)
    assert _project({**DROPLESS, **skewed}).kernels["grouped_gemm"] > 1.2 * balanced


def test_static_shapes_let_the_layer_graph_capture_dispatch_and_experts():
    # Megatron-Core 0.14's enable_cuda_graph graphs the whole layer; dropless experts stay eager and pay launch gaps
    # under the whole-layer graph only the small kernels' minimum run time is left, no gap [27 s23 graphmin]
    graphed = _project({}).kernels.get("launch_gap", 0.0)
    assert 0.0 < graphed < _project(DROPLESS).kernels["launch_gap"] / 3
    # the whole-MoE scope, refused for dropless experts, runs under drop-and-pad
    assert _project({"cuda_graph_scope": ["moe"]}).step_time_s > 0
    with pytest.raises(InfeasibleLayoutError, match="drop-and-pad"):
        _project({**DROPLESS, "cuda_graph_scope": ["moe"]})


def test_the_routers_capacity_mask_is_counted():
    # PyTorch's multi-block top-k for 128 expert columns of >= 5000 tokens (17 launches), one kernel below that; then
    # zeros_like, scatter, bool and the product
    assert topk_multiblock(128, 16384) and not topk_multiblock(128, 4096)
    dev = device_for(load_topology("b200").accelerator.name)
    assert capacity_mask_kernel(dev, 16384, 128, 16384 * 8).launches == 21
    assert capacity_mask_kernel(dev, 4096, 128, 4096 * 8).launches == 5
    assert _project({}).kernels["moe_routing"] > _project(DROPLESS).kernels["moe_routing"]


def test_combinations_megatron_refuses_are_refused():
    with pytest.raises(ValueError, match="needs moe_capacity_factor"):
        ParallelLayout(moe_pad_to_capacity=True)
    for dispatcher in ("deepep", "hybridep"):
        with pytest.raises(ValueError, match="flex dispatcher"):
            ParallelLayout(ep=8, moe_dispatcher=dispatcher, moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    with pytest.raises(ValueError, match="Dist-MoE"):
        ParallelLayout(moe_dispatcher="distmoe", moe_capacity_factor=1.0)
    with pytest.raises(InfeasibleLayoutError, match="dense model"):
        project(
            load_workload("llama3-8b"),
            load_topology("b200"),
            ParallelLayout(dp=8, moe_capacity_factor=1.0),
            8,
            check_memory=False,
        )
    with pytest.raises(InfeasibleLayoutError, match="torchtitan"):
        _project({"framework": "torchtitan"})
    w, topo, row = _row()
    twice = load_workload(row.workload, {**row.overrides, "moe.capacity_factor": 1.0})
    with pytest.raises(InfeasibleLayoutError, match="state one"):
        project(twice, topo, ParallelLayout(**row.layout), row.gpus, check_memory=False)


def test_set_states_token_drop_on_the_command_line():
    base = ["project", "qwen3-30b-a3b", "-t", "b200", "--gpus", "8", "--ep", "8", "--precision", "fp8", "--json"]

    def step(*sets: str) -> float:
        args = [*base]
        for s in sets:
            args += ["--set", s]
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
        return float(json.loads(out.output)["step_time_s"])

    assert step("layout.moe_capacity_factor=1.0", "layout.moe_pad_to_capacity=true") < step()
    refused = CliRunner().invoke(app, [*base, "--set", "layout.moe_pad_to_capacity=true"])
    assert "moe_pad_to_capacity needs moe_capacity_factor" in refused.output


def test_only_the_25_09_token_drop_runs_state_it():
    stated = [
        (name, r.topology, r.workload)
        for name in table_names()
        if name not in (SC21, MEMORY)  # SC'21 Table 1 is dense (a script's sweep); the memory figures no table
        for r in load_set(name).rows
        if r.layout.get("moe_capacity_factor") is not None
    ]
    # [27 s15 nemo2502] and the two Mixtral rows of nemo-perf-25.02, whose NeMo v2.2.1 recipes add
    # MegatronTokenDropCallback (capacity factor 1.0 with padding); [27 s15 gbvsb] and nemo-perf-25.04's two, whose NeMo
    # v2.3.0 scripts build the recipes' performance_mode with the same callback
    # [27 s16 dgxcmoe] and every row of dgxc-moe: the Grok-1 launcher config (moe_expert_capacity_factor 1.0,
    # moe_pad_expert_input_to_capacity true) and NeMo's pretrain_grok1_314b.py / pretrain_deepseek_v3.py
    # (MegatronTokenDropCallback); [27 s16 llama4] and nemo-perf-25.07's Llama 4 Scout row, whose NeMo v2.4.0
    # recipe's performance_mode adds the same callback
    assert {name for name, _, _ in stated} == {
        "megatron-bridge-perf-25.09",
        "nemo-perf-25.02",
        "nemo-perf-25.04",
        "nemo-perf-25.07",
        "dgxc-moe",
    }
    assert [w for name, _, w in stated if name == "nemo-perf-25.07"] == ["llama4-scout-17b-16e"]
    assert len([s for s in stated if s[0] == "dgxc-moe"]) == len(load_set("dgxc-moe").rows)
    for nemo in ("nemo-perf-25.02", "nemo-perf-25.04"):
        assert sorted(w for name, _, w in stated if name == nemo) == ["mixtral-8x22b", "mixtral-8x7b"]
    rows = load_set("megatron-bridge-perf-25.09").rows
    tokendrop = [r for r in rows if "'(tokendrop)'" in r.note]
    assert len([s for s in stated if s[0] == "megatron-bridge-perf-25.09"]) == len(tokendrop) == 12
    assert all(r.layout["moe_capacity_factor"] == 1.0 and r.layout["moe_pad_to_capacity"] for r in tokendrop)
