"""[27 s16 llama4] Llama 4: the llama4-scout-17b-16e and llama4-maverick-17b-128e presets (NVIDIA/NeMo v2.4.0
Llama4Experts16Config / Llama4Experts128Config, the numbers of Meta's config.json text_config), Maverick's MoE on
every second layer (``moe.every``, Megatron-Core moe_layer_freq [0, 1] * 24) carried through the parameter counts and
every per-stage layer count, and chunked attention priced as full causal attention up to one chunk, refused past it."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.layout import resolve
from commlens.project.memory import stage_layer_kinds, stage_parameters, stage_recompute
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.topology import load_topology
from commlens.workload import WorkloadError, load_workload

SCOUT, MAVERICK = "llama4-scout-17b-16e", "llama4-maverick-17b-128e"


def test_the_presets_match_meta_s_published_sizes():
    """Meta's model cards: Scout 109B total (the vision encoder included) / 17B active, Maverick 400B / 17B."""
    scout, mav = load_workload(SCOUT), load_workload(MAVERICK)
    assert scout.parameters / 1e9 == pytest.approx(109, rel=0.02)
    assert mav.parameters / 1e9 == pytest.approx(400, rel=0.01)
    assert scout.active_parameters / 1e9 == pytest.approx(17.2, abs=0.1)
    assert mav.active_parameters / 1e9 == pytest.approx(17.2, abs=0.1)
    # Maverick: 24 MoE layers (128 experts each) and 24 dense (FFN 16384); every layer MoE would make it 780B
    assert (scout.moe_layers, mav.moe_layers) == (48, 24)
    assert mav.parameter_counts()["ffn"] == 24 * 3 * 5120 * 16384
    assert [i for i, f in enumerate(mav.moe_layer_flags) if f] == list(range(1, 48, 2))  # [0, 1] * 24


def test_every_counts_from_the_first_moe_layer():
    w = load_workload(
        MAVERICK,
        {"moe": {"experts": 8, "top_k": 1, "expert_ffn_hidden": 64, "first_moe_layer": 3, "every": 4}, "layers": 12},
    )
    assert [i for i, f in enumerate(w.moe_layer_flags) if f] == [6, 10]
    with pytest.raises(WorkloadError, match="moe.every"):
        load_workload(MAVERICK, {"moe": {"experts": 8, "top_k": 1, "expert_ffn_hidden": 64, "every": 49}})


def test_the_stages_hold_interleaved_layers():
    """PP 4 over Maverick's 48 layers: each stage 12 layers, 6 dense and 6 MoE (not the dense ones first and the MoE
    ones last), so the stages' parameters are equal and a block recompute of N layers takes them in order."""
    w = load_workload(MAVERICK)
    lay = ParallelLayout(tp=1, sp=False, pp=4, ep=64, recompute="full", recompute_layers=3)
    r = resolve(lay, w, 256, 4)
    assert stage_layer_kinds(w, r) == [(6, 6)] * 4
    params = stage_parameters(w, r)
    assert params[1] == params[2] and params[1][1] == pytest.approx(6 * 128 * 3 * 5120 * 8192 / 64)
    assert stage_recompute(w, lay, r) == [(2, 1, 3, 1)] * 4  # layers 0, 1, 2 of each stage: dense, MoE, dense


def test_the_step_counts_every_second_layer_s_experts():
    """Maverick cut to 8 layers runs 4 layers of grouped expert GEMMs and 4 of dense FFN GEMMs: setting every to 1
    (8 MoE layers) doubles the expert work and drops the dense FFN's."""
    topo = load_topology("gb200-nvl72")
    lay = ParallelLayout(tp=1, sp=False, pp=2, ep=64, zero=1)
    set_ = {"global_batch": 1024, "precision": "bf16", "layers": 8}
    mav = load_workload(MAVERICK, set_)
    every_layer = load_workload(MAVERICK, {**set_, "moe": {**mav.moe.model_dump(), "every": 1}})
    a, b = (run(Scenario(w, topo, lay, 128)).kernels for w in (mav, every_layer))
    assert b["grouped_gemm"] == pytest.approx(2 * a["grouped_gemm"], rel=0.05)
    assert b["gemm"] < a["gemm"]


def test_chunked_attention_up_to_one_chunk_and_refused_past_it():
    assert load_workload(SCOUT).attention_chunk == 8192
    load_workload(SCOUT, {"seq_len": 4096})
    with pytest.raises(WorkloadError, match="chunked attention .* is not modelled"):
        load_workload(MAVERICK, {"seq_len": 16384})
