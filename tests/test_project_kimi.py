"""[27 s26 muon] Megatron-Bridge's Kimi-K2 rows (26.02.01-26.06, one GB300 recipe) run Muon: the preset and the table."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def test_the_preset_is_kimi_k2s_config():
    w = load_workload("kimi-k2")
    assert (w.layers, w.hidden, w.heads, w.vocab, w.ffn_hidden) == (61, 7168, 64, 163840, 18432)
    assert (w.moe.experts, w.moe.top_k, w.moe.shared_experts, w.moe.expert_ffn_hidden) == (384, 8, 1, 2048)
    assert w.moe_layers == 60 and w.mtp_layers == 0 and not w.tied_embeddings
    total = sum(w.parameter_counts().values())
    assert 1.00e12 < total < 1.05e12  # Moonshot's "1T total"


def test_the_four_releases_ran_one_recipe_with_muon():
    table = load_set("megatron-bridge-kimi-k2")
    assert [r.published for r in table.rows] == [5072, 5332, 5328, 5372]
    layouts = [{k: v for k, v in r.layout.items() if k != "framework"} for r in table.rows]
    assert all(lay == layouts[0] for lay in layouts)
    lay = layouts[0]
    # Muon's layer-wise distributed optimizer: all-reduced bf16 gradients, no fp8 parameter gather, the parameters'
    # all-gather after the step
    assert lay["optimizer"] == "muon" and lay["optimizer_state_bytes"] == 8 and lay["zero1_all_reduce"]
    assert not lay["fp8_param_gather"] and not lay["overlap_param_gather"]
    assert all(not r.refused for r in validate_set(table))


def test_muon_is_part_of_the_rows_step():
    row = load_set("megatron-bridge-kimi-k2").rows[-1]
    w, topo = load_workload(row.workload, row.overrides), load_topology(row.topology)
    opt = {}
    for name in ("muon", "adam"):
        lay = ParallelLayout.model_validate({**row.layout, "optimizer": name})
        opt[name] = run(Scenario(w, topo, lay, row.gpus)).breakdown["optimizer"]
    # each rank orthogonalizes its 96 local experts' two matrices (EP 64 leaves no expert DP) and a 64th of the rest
    assert opt["muon"] > opt["adam"] + 0.2
    assert opt["muon"] < 0.05 * run(Scenario(w, topo, ParallelLayout.model_validate(row.layout), row.gpus)).step_time_s


@pytest.mark.parametrize("release", [0, 1, 2, 3])
def test_every_row_projects_and_names_its_recipe_and_optimizer(release):
    r = validate_set(load_set("megatron-bridge-kimi-k2"))[release]
    assert r.predicted and not r.refused
    assert r.layout == "tp1 cp1 pp4x4 ep64 dp64 mxfp8 muon"
