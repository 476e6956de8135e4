"""Full recomputation of a layer count per model chunk (issue 27): Megatron-LM's ``--recompute-granularity full
--recompute-method block|uniform --recompute-num-layers N``, as Megatron-Core's ``checkpointed_forward`` runs it
(megatron/core/recompute.py @d98e8a6): block checkpoints the first N layers of each chunk and runs the rest
unchecked; uniform checkpoints the chunk in groups of N layers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from commlens.errors import CommlensError
from commlens.project import ParallelLayout
from commlens.project.errors import InfeasibleLayoutError
from commlens.project.layout import resolve
from commlens.project.memory import activation_bytes_per_token, stage_memory, stage_recompute
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.sweep import Base, layout_from
from commlens.project.validate import load_set
from commlens.project.whatif import explore
from commlens.topology import load_topology
from commlens.workload import load_workload

# llama3-8b, 32 layers, on 16 H100s: PP 2 (16 layers a stage), DP 8, 8 micro-batches of 1 (stage 0 holds 2)
W8 = {"seq_len": 4096, "global_batch": 64, "micro_batch": 1}
PP2 = {"tp": 1, "sp": False, "pp": 2, "zero": 1}


def _layout(**change) -> ParallelLayout:
    return ParallelLayout(**{**PP2, **change})


def _stage0(lay: ParallelLayout) -> dict[str, float]:
    w = load_workload("llama3-8b", W8)
    return stage_memory(w, lay, resolve(lay, w, 16, 8))[0]


def _step(lay: ParallelLayout, workload: str = "llama3-8b", overrides=None, gpus: int = 16) -> float:
    w = load_workload(workload, overrides or W8)
    return run(Scenario(w, load_topology("dgx-h100"), lay, gpus, check_memory=False)).step_time_s


def test_block_keeps_the_inputs_of_the_recomputed_layers_and_everything_of_the_rest():
    w = load_workload("llama3-8b", W8)
    tokens, live, n = 4096, 2, 16
    every = activation_bytes_per_token(w, _layout(recompute="none"), 1, False)  # a layer that keeps everything
    layer_input = 2.0 * w.hidden
    none = _stage0(_layout(recompute="none"))["activations"]
    full = _stage0(_layout(recompute="full"))["activations"]
    for k in (1, 5, 12):
        block = _stage0(_layout(recompute="full", recompute_layers=k))["activations"]
        assert full < block < none
        # k inputs and n - k whole layers per micro-batch in flight; on top the layer rebuilt and its gradients
        assert block == pytest.approx(tokens * live * (k * layer_input + (n - k) * every) + 2 * tokens * every)
        assert block - full == pytest.approx(tokens * live * (n - k) * (every - layer_input))
    # N = every layer of the chunk is full recomputation as before
    assert _stage0(_layout(recompute="full", recompute_layers=n))["activations"] == pytest.approx(full)


def test_uniform_keeps_one_input_per_group_and_rebuilds_a_group_at_a_time():
    w = load_workload("llama3-8b", W8)
    tokens, live = 4096, 2
    every = activation_bytes_per_token(w, _layout(recompute="none"), 1, False)
    uniform4 = _stage0(_layout(recompute="full", recompute_layers=4, recompute_method="uniform"))["activations"]
    assert uniform4 == pytest.approx(tokens * live * 4 * 2.0 * w.hidden + 5 * tokens * every)
    # groups of one are every layer its own checkpoint: full recomputation without a count
    one = _layout(recompute="full", recompute_layers=1, recompute_method="uniform")
    assert _stage0(one) == _stage0(_layout(recompute="full"))
    # every layer is recomputed whatever the group: the step costs what full recomputation costs
    assert _step(_layout(recompute="full", recompute_layers=4, recompute_method="uniform")) == pytest.approx(
        _step(_layout(recompute="full")), rel=1e-12
    )


def test_block_reruns_the_forward_of_the_recomputed_layers_only():
    none, full = _step(_layout(recompute="none")), _step(_layout(recompute="full"))
    steps = {k: _step(_layout(recompute="full", recompute_layers=k)) for k in (4, 8, 12)}
    assert none < steps[4] < steps[8] < steps[12] < full
    # each recomputed layer adds one forward of one layer: the step grows with the count by the layers' share
    for k, t in steps.items():
        assert (t - none) / (full - none) == pytest.approx(k / 16, abs=0.001)
    assert _step(_layout(recompute="full", recompute_layers=16)) == pytest.approx(full, rel=1e-12)


def test_hardware_flops_count_the_recomputed_layers_forward_only():
    w = load_workload("llama3-8b", W8)
    topo = load_topology("dgx-h100")

    def flops(lay: ParallelLayout) -> float:
        p = run(Scenario(w, topo, lay, 16, check_memory=False))
        return p.hw_tflops_per_gpu * p.step_time_s

    none, full = (flops(_layout(recompute=r)) for r in ("none", "full"))
    eight = flops(_layout(recompute="full", recompute_layers=8))
    # 8 of a stage's 16 layers, on both stages: half of the layers' extra forward (the logits are not recomputed)
    assert eight == pytest.approx((none + full) / 2)


def test_the_count_is_per_model_chunk_under_interleaving():
    # llama3-70b, PP 4 x VPP 5: 20 layers a stage in 5 chunks of 4; N = 2 recomputes 2 of each chunk, 10 a stage
    w = load_workload("llama3-70b")
    lay = ParallelLayout(tp=8, pp=4, vpp=5, recompute="full", recompute_layers=2)
    assert stage_recompute(w, lay, resolve(lay, w, 1024, 8)) == [(10, 0, 10, 1)] * 4
    with pytest.raises(InfeasibleLayoutError, match="fullest chunk has 4"):
        resolve(lay.model_copy(update={"recompute_layers": 5}), w, 1024, 8)
    # Mixtral 8x22B as AMD's 4-node command runs it: 56 MoE layers over PP 4 x VPP 2, the first layer of each chunk
    mixtral = load_workload("mixtral-8x22b", {"micro_batch": 1, "global_batch": 512})
    lay = ParallelLayout(tp=1, sp=False, pp=4, vpp=2, ep=8, recompute="full", recompute_layers=1)
    assert stage_recompute(mixtral, lay, resolve(lay, mixtral, 32, 8)) == [(0, 2, 2, 1)] * 4


def test_a_count_is_refused_where_megatron_refuses_it_with_the_reason():
    with pytest.raises(ValidationError, match="recompute_layers need recompute full, not selective"):
        ParallelLayout(recompute="selective", recompute_layers=4)
    with pytest.raises(ValidationError, match="recompute_method need recompute full, not none"):
        ParallelLayout(recompute="none", recompute_method="block")
    with pytest.raises(ValidationError, match="at least 1 layer per model chunk, got 0"):
        ParallelLayout(recompute="full", recompute_layers=0)
    with pytest.raises(ValidationError, match="recompute_method uniform needs recompute_layers"):
        ParallelLayout(recompute="full", recompute_method="uniform")
    with pytest.raises(ValidationError, match="recompute_method"):
        ParallelLayout(recompute="full", recompute_layers=2, recompute_method="every")
    # a sweep's or the CLI's layout names the problem
    with pytest.raises(CommlensError, match="layout: recompute_layers need recompute full"):
        layout_from({"recompute": "none", "recompute_layers": 3})
    w = load_workload("llama3-8b", W8)
    with pytest.raises(InfeasibleLayoutError, match="recompute_layers 17 .* fullest chunk has 16"):
        resolve(_layout(recompute="full", recompute_layers=17), w, 16, 8)


def test_what_if_drops_the_count_with_the_recompute_and_the_record_names_it():
    base = Base("llama3-8b", "dgx-h100", 16, {**PP2, "recompute": "full", "recompute_layers": 4}, W8)
    what = explore(base, {}, top=50)
    labels = [c.label for c in what.changes] + [r.label for r in what.refused]
    assert "recompute full (block 4) -> none" in labels
    assert not [r for r in what.refused if "recompute" in r.label]
    w = load_workload("llama3-8b", W8)
    p = run(Scenario(w, load_topology("dgx-h100"), _layout(recompute="full", recompute_layers=4), 16))
    assert (p.layout["recompute_layers"], p.layout["recompute_method"]) == (4, "block")
    assert "recompute_layers" not in run(Scenario(w, load_topology("dgx-h100"), _layout(), 16)).layout


def _row(table: str, workload: str, topology: str, precision: str):
    return next(
        r
        for r in load_set(table).rows
        if (r.workload, r.topology, r.overrides.get("precision")) == (workload, topology, precision)
    )


def test_published_rows_record_the_count_their_sources_give():
    amd = _row("amd-instinct-primus-8node", "llama3-70b", "mi325x-8gpu", "bf16")  # --recompute_num_layers 12
    assert (amd.layout["recompute"], amd.layout["recompute_layers"], amd.layout["recompute_method"]) == (
        "full",
        12,
        "block",
    )
    bridge = _row("megatron-bridge-perf-25.11", "llama3-8b", "dgx-h100", "fp8")  # recompute_num_layers 5, block
    assert (bridge.layout["recompute"], bridge.layout["recompute_layers"], bridge.layout["recompute_method"]) == (
        "full",
        5,
        "block",
    )
    # the Mixtral 8-node row: the config's no recompute cannot fit (tests/test_project_mixtral_mem.py), so it takes AMD's
    # multi-node command's 1 layer per chunk (--recompute_num_layers 1, the config's block method)
    mixtral = _row("amd-instinct-primus-8node", "mixtral-8x22b", "mi355x-8gpu", "bf16")
    assert (mixtral.layout["recompute"], mixtral.layout["recompute_layers"], mixtral.layout["recompute_method"]) == (
        "full",
        1,
        "block",
    )
