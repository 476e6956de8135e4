"""What-if: the single changes that would shorten a projected step most, each projected by the model itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.errors import CommlensError
from commlens.project.sweep import Base, parse_vary, point_inputs, project_point
from commlens.project.whatif import MIN_GAIN, explore, what_if

CLI = [str(Path(sys.executable).parent / "commlens")]
# 16 stages, one pipeline, 32 micro-batches of 2: the bubble is the biggest cost after compute.
BUBBLE_BOUND = Base(
    "llama3-70b", "dgx-h100", 128, {"tp": 8, "pp": 16}, {"precision": "fp8", "global_batch": 64, "micro_batch": 2}
)
# 16 nodes, data-parallel over 25 Gb/s NICs: the gradient reduction dominates the step.
SLOW_NICS = Base("llama3-8b", "dgx-h100", 128, {"tp": 2}, {"precision": "fp8", "global_batch": 128})
BF16_70B = Base("llama3-70b", "dgx-h100", 1024, {"tp": 8, "pp": 4, "vpp": 5}, {})


def _check_order(changes):
    gains = [c.gain for c in changes]
    assert 1 <= len(changes) <= 3
    assert gains == sorted(gains, reverse=True)
    assert all(g > MIN_GAIN for g in gains)


def test_bubble_bound_layout_lists_more_micro_batches_with_the_models_own_gain():
    now = project_point(BUBBLE_BOUND, {})
    assert now.breakdown["bubble"] == max(v for k, v in now.breakdown.items() if k != "compute")
    changes = what_if(BUBBLE_BOUND, {})
    _check_order(changes)
    best = changes[0]
    assert best.label == "micro-batch 2 -> 1 (32 -> 64 micro-batches)"
    assert best.point == {"workload.micro_batch": 1}
    direct = project_point(BUBBLE_BOUND, best.point)
    assert best.gain == pytest.approx(now.step_time_s / direct.step_time_s - 1, rel=1e-12)
    assert best.gain > 0.05
    assert (best.step_time_s, best.tokens_per_s, best.mfu, best.memory_bytes_per_gpu) == (
        direct.step_time_s,
        direct.tokens_per_s,
        direct.mfu,
        direct.memory_bytes_per_gpu,
    )


def test_slow_nics_on_a_multi_node_layout_list_faster_nics():
    point = {"topology.nic_gbps": 25}
    now = project_point(SLOW_NICS, point)
    assert now.breakdown["dp_comm"] > now.breakdown["compute"]
    changes = what_if(SLOW_NICS, point)
    _check_order(changes)
    nics = [c for c in changes if c.label == "NICs 25 -> 50 Gb/s"]
    assert nics and nics[0].point == {"topology.nic_gbps": 50}
    assert nics[0].gain == pytest.approx(now.step_time_s / project_point(SLOW_NICS, nics[0].point).step_time_s - 1)
    assert nics[0].gain > 0.2


def test_fp8_is_a_candidate_for_bf16_only():
    bf16 = explore(BF16_70B, {}, top=50)
    assert "fp8" in [c.label for c in bf16.changes]
    assert bf16.changes[0].point == {"workload.precision": "fp8"}
    fp8 = explore(BF16_70B, {"workload.precision": "fp8"}, top=50)
    assert "fp8" not in [c.label for c in fp8.changes] + [r.label for r in fp8.refused]


def test_other_stacks_are_candidates_but_not_a_past_releases_profile():
    # nemo-24.03 prices the published runs of that container; "move this job to a 2024 container" is no advice
    from commlens.project.whatif import _candidates

    now = project_point(BF16_70B, {})
    labels = [label for label, _ in _candidates(BF16_70B, {}, now)]
    assert "framework megatron-core -> torchtitan" in labels
    assert not [label for label in labels if "nemo-24.03" in label]


def test_fp8_on_hardware_without_it_is_refused_with_the_reason():
    a100 = explore(Base("megatron-gpt-7.5b", "dgx-a100", 128, {"tp": 4}, {}), {}, top=50)
    assert "fp8" not in [c.label for c in a100.changes]
    assert [r.reason for r in a100.refused if r.label == "fp8"] == ["A100 SXM 80GB has no fp8 tensor cores (has: bf16)"]


def test_refused_candidates_name_their_reason_memory_first():
    result = explore(BUBBLE_BOUND, {})
    assert result.refused[0].label == "TP 8 -> 4"
    assert result.refused[0].kind == "memory"
    assert "GB per GPU" in result.refused[0].reason
    kinds = [r.kind for r in result.refused]
    assert kinds == sorted(kinds, key=["memory", "unsupported", "topology", "divides"].index)
    assert any(r.label == "VPP 1 -> 2" and "does not divide 80 layers" in r.reason for r in result.refused)
    assert result.tried > len(result.refused)  # the rest ran; only those above MIN_GAIN are listed
    assert len(result.changes) == 3


def test_top_is_checked():
    with pytest.raises(ValueError, match="top"):
        explore(BUBBLE_BOUND, {}, top=0)


def test_scale_up_domain_override_makes_one_node_of_that_size():
    _, topo, _, _ = point_inputs(BF16_70B, {"topology.scale_up_domain": 72})
    assert topo.scale_out is not None
    assert (topo.accelerators_per_node, topo.scale_up.domain_size, topo.scale_out.nics_per_node) == (72, 72, 72)
    assert topo.scale_out.nic_bandwidth_bytes_per_s == 5.0e10  # the same NICs, one per GPU as on a DGX
    base = Base("llama3-70b", "dgx-h100", 576, {"tp": 16, "pp": 4}, {"global_batch": 576})

    def tp_comm_s(point):
        return project_point(base, point).breakdown["tp_comm"]

    # TP 16 spans two DGX nodes, over their NICs; in a 72-GPU domain it stays on NVLink, whatever the NICs
    slow, domain = {"topology.nic_gbps": 100}, {"topology.scale_up_domain": 72}
    assert tp_comm_s(slow) > 1.5 * tp_comm_s({})
    assert tp_comm_s({**domain, **slow}) == pytest.approx(tp_comm_s(domain), rel=1e-9)
    with pytest.raises(CommlensError, match="scale_up_domain must be a whole number"):
        parse_vary(["topology.scale_up_domain=0"])


def test_scale_up_domain_candidate_is_refused_when_the_gpus_do_not_fill_it():
    refused = {r.label: r for r in explore(BF16_70B, {}).refused}
    assert refused["scale-up domain 8 -> 72 GPUs"].reason == "1024 GPUs do not fill whole nodes of 72"


def _cli(*extra):
    args = ["project", "llama3-70b", "-t", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4", "--vpp", "5"]
    out = subprocess.run(CLI + args + list(extra), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cli_prints_the_section_and_json_carries_it():
    text = _cli()
    head, sep, section = text.partition("what would help most (projected by this model):\n")
    assert sep and "breakdown" in head
    rows = section.splitlines()
    # fp8 has published A/B pairs (bf16 -> fp8 runs of one table): the section quotes them in a last column
    assert rows[0].split() == ["change", "step", "s", "gain", "MFU", "mem", "GB", "model", "vs", "A/B"]
    assert rows[1].split()[-1].startswith("(") and rows[1].split()[-2] == "pts"
    assert rows[1].split()[0] == "fp8" and rows[1].split()[2].startswith("+")
    assert "  refused (" in section and "scale-up domain 8 -> 72 GPUs: 1024 GPUs do not fill whole nodes" in section

    doc = json.loads(_cli("--json"))
    changes = doc["what_if"]["changes"]
    assert changes[0]["label"] == "fp8" and changes[0]["point"] == {"workload.precision": "fp8"}
    assert [c["gain"] for c in changes] == sorted((c["gain"] for c in changes), reverse=True)
    assert {r["kind"] for r in doc["what_if"]["refused"]} <= {"memory", "unsupported", "topology", "divides"}
    assert doc["step_time_s"] / changes[0]["step_time_s"] - 1 == pytest.approx(changes[0]["gain"])


def test_cli_no_what_if_drops_it():
    assert "what would help most" not in _cli("--no-what-if")
    assert "what_if" not in json.loads(_cli("--no-what-if", "--json"))


# [27 s21 parallel] the stacks that run data parallelism only (llm-foundry 2023, OLMo-core of 2024-11, fms-fsdp) and
# DeepSpeed (no K/V ring): a layout with a dimension the stack lacks is refused, and the what-if does not offer the
# stack for it; a data-parallel layout still gets them as candidates
DP_ONLY = ("llm-foundry", "olmo-core", "fms-fsdp")


def test_an_expert_parallel_moe_layout_is_never_moved_to_a_data_parallel_only_stack():
    from commlens.project.whatif import _candidates

    base = Base("qwen3-30b-a3b", "dgx-h100", 16, {"ep": 8}, {"precision": "fp8"})
    labels = [label for label, _ in _candidates(base, {}, project_point(base, {}))]
    switches = [label for label in labels if label.startswith("framework ")]
    assert any(label.startswith("framework megatron-core -> torchtitan") for label in switches)
    assert not [label for label in switches if any(f"-> {fw}" in label for fw in DP_ONLY)]
    assert not [label for label in switches if label.startswith("framework megatron-core -> nemo")]


def test_a_data_parallel_layout_still_offers_the_data_parallel_stacks_once_each():
    from commlens.project.whatif import _candidates

    base = Base("llama3-8b", "dgx-h100", 8, {"zero": 3, "framework": "torchtitan"}, {})
    labels = [label for label, _ in _candidates(base, {}, project_point(base, {}))]
    for fw in DP_ONLY:
        assert sum(label.startswith(f"framework torchtitan -> {fw}") for label in labels) == 1
    assert sum(label.startswith("framework torchtitan -> megatron-core") for label in labels) == 1
    assert not [label for label in labels if label.startswith("framework torchtitan -> nemo")]  # megatron-core's twin


@pytest.mark.parametrize(
    ("framework", "layout", "says"),
    [
        ("llm-foundry", {"tp": 2}, "llm-foundry has no tensor parallelism (tp 2)"),
        ("fms-fsdp", {"pp": 2}, "fms-fsdp has no pipeline parallelism (pp 2)"),
        ("olmo-core", {"cp": 2}, "olmo-core has no context parallelism (cp 2)"),
        ("deepspeed", {"cp": 2}, "deepspeed has no context parallelism (cp 2)"),
    ],
)
def test_a_layout_with_a_dimension_the_stack_lacks_is_refused_naming_it(framework, layout, says):
    from commlens.project.errors import InfeasibleLayoutError

    base = Base("llama3-8b", "dgx-h100", 16, {**layout, "framework": framework}, {"seq_len": 8192})
    with pytest.raises(InfeasibleLayoutError, match=r"has no") as e:
        project_point(base, {})
    assert str(e.value).startswith(says) and e.value.kind == "framework"


def test_cli_refuses_an_expert_parallel_moe_on_llm_foundry_with_exit_2() -> None:
    r = subprocess.run(
        [*CLI, "project", "qwen3-30b-a3b", "-t", "dgx-h100", "--gpus", "16", "--ep", "8", "--framework", "llm-foundry"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "error: llm-foundry has no expert parallelism (ep 8); the model parallelism it has beside data "
        "parallelism: none"
    )
    ok = subprocess.run(
        [*CLI, "project", "qwen3-30b-a3b", "-t", "dgx-h100", "--gpus", "16", "--ep", "8", "--framework", "deepspeed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr  # DeepSpeed-MoE has expert parallelism
