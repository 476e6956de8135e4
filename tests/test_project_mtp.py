"""DeepSeek-V3's multi-token prediction (arXiv 2412.19437 Sec. 2.2; Megatron-Core ``mtp_num_layers``) [27 s9]:
``mtp_layers`` modules after the last layer on the last pipeline stage, each a transformer layer like the last, its
norms and 2h -> h projection, and a second pass through the shared output head and cross-entropy."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, model_flops_per_step, project
from commlens.project.layout import resolve
from commlens.project.memory import stage_memory, stage_parameters
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import WorkloadError, load_workload

DSV3 = {"seq_len": 4096, "global_batch": 2048, "micro_batch": 1, "precision": "fp8"}
# the 25.11 DGX-B200 DeepSeek-V3 row's layout (Megatron-Bridge layout_map (16, 1): 4 layers a stage, the last 1)
B200 = {
    "tp": 1,
    "sp": False,
    "pp": 16,
    "ep": 8,
    "zero": 1,
    "recompute": "selective",
    "recompute_modules": ["mla_up_proj"],
    "stage_layers": [4] * 15 + [1],
    "optimizer_state_bytes": 8,
    "framework": "megatron-core",
}


def _dsv3(mtp: int, **extra: object):
    return load_workload("deepseek-v3-like", {**DSV3, "mtp_layers": mtp, **extra})


def _b200(mtp: int, **layout: object):
    lay = ParallelLayout.model_validate({**B200, **layout})
    return project(_dsv3(mtp), load_topology("b200"), lay, 256)


def test_the_depth_defaults_to_none_and_the_module_is_deepseeks_14b():
    assert load_workload("deepseek-v3-like").mtp_layers == 0
    with pytest.raises(WorkloadError, match="mtp_layers"):
        _dsv3(-1)
    w = _dsv3(1)
    # DeepSeek-V3's release: 671B main model + 14B MTP module, whose checkpoint stores its own copies of the
    # embedding and the output head (vocab x hidden each) beside one MoE layer, eh_proj and the norms
    module = sum(w.mtp_parameter_counts().values()) + 2 * w.vocab * w.hidden
    assert module == pytest.approx(14e9, rel=0.05)
    assert w.parameters == _dsv3(0).parameters  # the published size leaves the module out


def test_the_module_runs_on_the_last_stage_only_a_layer_and_a_loss_more():
    base, mtp = _b200(0), _b200(1)
    assert mtp.step_time_s > base.step_time_s
    for a, b in zip(base.stages[:-1], mtp.stages[:-1], strict=True):
        assert b["per_micro_batch_s"] == pytest.approx(a["per_micro_batch_s"])
    # the last stage gains at least what one of its own MoE layers and its output layer and loss cost
    one_layer = base.stages[1]["per_micro_batch_s"] / 4
    added = mtp.stages[-1]["per_micro_batch_s"] - base.stages[-1]["per_micro_batch_s"]
    assert added > one_layer
    assert added < 3 * one_layer  # a layer, the projection and one head pass: not a second stage


def test_model_flops_count_the_module_as_megatron_bridge_does():
    # Megatron-Bridge 25.11 page (v0.2.1): 557 TFLOP/s at 2139 tokens/s 'w/ MTP' against 782 at 3139 'w/o MTP'
    # (flop_utils.py counts MTP as one more MoE layer, eh_proj and a second logits GEMM); the model counts attention
    # over the full sequence, so compare the increase
    page = (557e12 / 2139) / (782e12 / 3139)
    ratio = model_flops_per_step(_dsv3(1)) / model_flops_per_step(_dsv3(0))
    assert ratio == pytest.approx(page, abs=0.01)


def test_the_last_stage_holds_the_module_an_embedding_replica_and_one_micro_batch_of_it():
    w0, w1 = _dsv3(0), _dsv3(1)
    topo = load_topology("b200")
    lay = ParallelLayout.model_validate(B200)
    r = resolve(lay, w1, 256, topo.accelerators_per_node)
    p0, p1 = stage_parameters(w0, r), stage_parameters(w1, r)
    assert p1[:-1] == p0[:-1]
    counts = w1.mtp_parameter_counts()
    dense = sum(v for k, v in counts.items() if k != "experts") + w1.vocab * w1.hidden  # + the replica
    assert p1[-1][0] - p0[-1][0] == pytest.approx(dense)
    assert p1[-1][1] - p0[-1][1] == pytest.approx(counts["experts"] / 8)
    # DualPipe keeps the embedding on the module's rank: no replica
    dual = ParallelLayout.model_validate({**B200, "schedule": "dualpipe", "framework": "torchtitan"})
    rd = resolve(dual, w1, 256, topo.accelerators_per_node)
    assert stage_parameters(w1, rd, "dualpipe")[-1][0] - stage_parameters(w0, rd, "dualpipe")[-1][0] == pytest.approx(
        dense - w1.vocab * w1.hidden
    )
    # activations: one micro-batch of the module, whatever the stage keeps of its own layers
    added = []
    for pp, vpp, layers in ((16, 1, B200["stage_layers"]), (8, 2, [8] * 7 + [5])):
        la = ParallelLayout.model_validate({**B200, "pp": pp, "vpp": vpp, "stage_layers": layers})
        ra = resolve(la, w1, 256, topo.accelerators_per_node)
        added.append(stage_memory(w1, la, ra)[-1]["activations"] - stage_memory(w0, la, ra)[-1]["activations"])
    assert added[0] == pytest.approx(added[1])


def test_published_mtp_rows_project_and_the_mtp_run_is_the_slower():
    # torchtitan's PP2/VPP8 GB300 runs: 5,615.50 tokens/s/GPU without MTP, 5,548.44 with one module
    rows = validate_set(load_set("torchtitan-dsv3-gb300-2026"))
    no_mtp, mtp = rows[1], rows[2]
    assert mtp.published < no_mtp.published
    assert mtp.predicted is not None and no_mtp.predicted is not None
    assert mtp.predicted < no_mtp.predicted
    # DeepSeek-V3 on 2048 H800 trained with D = 1 under DualPipe: it fits, and its rank pairs the last stage with
    # the first, so the module costs the step about half its stage's excess
    (h800,) = validate_set(load_set("deepseek-v3-h800"))
    assert not h800.refused
    assert h800.error is not None and abs(h800.error) < 0.08


def test_sim_step_runs_the_modules_all_to_alls_on_the_last_stage():
    from commlens.project.scenario import Scenario
    from commlens.project.simstep import simulate_step

    h100 = load_topology("dgx-h100")
    layout = ParallelLayout(tp=2, pp=2, ep=8, order=("tp", "cp", "pp", "dp"))
    steps = []
    for mtp in (0, 1):
        w = load_workload("mixtral-8x7b", {"global_batch": 64, "mtp_layers": mtp})
        steps.append(simulate_step(Scenario(w, h100, layout, 64)))
    base, mtp_step = steps
    assert mtp_step.communication_s["ep"] > base.communication_s["ep"]
    assert mtp_step.step_time_s > base.step_time_s
    assert mtp_step.step_time_s == pytest.approx(mtp_step.projected_step_time_s, rel=0.2)
