"""What-if with the stacks' own settings (session 9): proposed where the layout's stack and GPU run them, never
elsewhere, and a framework switch that drops what the other stack lacks."""

import subprocess
import sys
from pathlib import Path

import pytest

from commlens.project.sweep import Base, project_point
from commlens.project.whatif import explore

CLI = [str(Path(sys.executable).parent / "commlens")]
HEADER = "what would help most (projected by this model):\n"

# Megatron-Core MoE on Hopper: Qwen3-30B-A3B, EP 8 over two DGX nodes, fp8, no EP overlap set
MOE_H100 = ("qwen3-30b-a3b", "-t", "dgx-h100", "--gpus", "16", "--ep", "8", "--precision", "fp8", "--recompute", "none")
# dense fp8 (MXFP8) on Blackwell at 32k tokens: attention is a large share of the step
DENSE_GB200 = (
    "llama3-8b", "-t", "gb200-nvl72", "--gpus", "8", "--cp", "2", "--precision", "fp8", "--recompute", "none",
    "--seq-len", "32768", "--global-batch", "16", "--set", "layout.fp8_recipe=mxfp8",
)  # fmt: skip
# the 26.08 Megatron-Bridge Qwen3-30B-A3B GB200 row's layout before its fused MLP, budget and whole-step graph
HYBRIDEP_GB200 = (
    "qwen3-30b-a3b", "-t", "gb200-nvl72", "--gpus", "8", "--ep", "8", "--precision", "fp8", "--recompute", "none",
    "--framework", "nemo", "--set", "layout.fp8_recipe=mxfp8", "--set", "layout.moe_dispatcher=hybridep",
)  # fmt: skip
# the same layout as the 26.08 row states it, every setting on
ROW_2608 = {
    "tp": 1, "sp": False, "ep": 8, "dp": 8, "zero": 1, "recompute": "none", "grad_reduce_bytes": 2,
    "framework": "nemo", "fp8_recipe": "mxfp8", "moe_dispatcher": "hybridep", "cuda_graphs": True,
    "cuda_graph_scope": ["full_iteration"], "moe_fused_mlp": True, "moe_expert_capacity": 1.5,
    "fp8_param_gather": True, "moe_a2a_overlap": True, "delay_wgrad_compute": True, "fp8_attention": "fwd_bwd",
}  # fmt: skip
# the stack-specific lines; none may appear where the stack or the GPU cannot run it
MEGATRON_LINES = ("EP all-to-all overlap", "fp8 attention", "fused grouped MLP", "CUDA graphs", "fp8 parameter")


def _what_if_rows(*args: str) -> list[str]:
    out = subprocess.run([*CLI, "project", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    head, sep, section = out.stdout.partition(HEADER)
    assert sep, out.stdout
    return section.splitlines()


def _row(rows: list[str], label: str) -> list[str]:
    """The printed row whose change is ``label``: [step s, gain, MFU, mem GB] (the published A/B column, when the
    section has one, after them)."""
    found = [r for r in rows if r.strip().startswith(label + "  ")]
    assert len(found) == 1, rows
    return found[0].strip()[len(label) :].split()[:4]


def test_ep_overlap_is_offered_on_an_moe_megatron_layout_at_the_models_own_gain():
    rows = _what_if_rows(*MOE_H100)
    # the overlap alone, or with delayed weight gradients where those gain more (they do since a TE linear's fp8
    # backward launches its casts once [27 s11 hostbwd])
    label = next(r.strip().split("  ")[0] for r in rows if r.strip().startswith("EP all-to-all overlap"))
    step_s, gain, _, _ = _row(rows, label)
    base = Base("qwen3-30b-a3b", "dgx-h100", 16, {"ep": 8, "recompute": "none"}, {"precision": "fp8"})
    change = {"layout.moe_a2a_overlap": True}
    if label.endswith("+ delayed wgrad"):
        change["layout.delay_wgrad_compute"] = True
    now, on = project_point(base, {}), project_point(base, change)
    assert float(step_s) == pytest.approx(on.step_time_s, abs=5e-4)
    assert gain == f"+{100 * (now.step_time_s / on.step_time_s - 1):.1f}%"
    assert on.step_time_s < 0.95 * now.step_time_s  # the dispatch and combine hide behind the other micro-batch


def test_fp8_attention_is_offered_on_a_blackwell_fp8_megatron_layout():
    rows = _what_if_rows(*DENSE_GB200)
    step_s, gain, _, _ = _row(rows, "fp8 attention (fwd+bwd)")
    base = Base(
        "llama3-8b", "gb200-nvl72", 8, {"cp": 2, "recompute": "none", "fp8_recipe": "mxfp8"},
        {"precision": "fp8", "seq_len": 32768, "global_batch": 16},
    )  # fmt: skip
    assert float(step_s) == pytest.approx(
        project_point(base, {"layout.fp8_attention": "fwd_bwd"}).step_time_s, abs=5e-4
    )
    assert gain.startswith("+")


def test_fused_mlp_static_budget_and_whole_step_graph_on_a_blackwell_mxfp8_hybridep_layout():
    rows = _what_if_rows(*HYBRIDEP_GB200)
    # the best of the chain stands, labelled with what it adds; each step needs the one before
    step_s, gain, _, _ = _row(rows, "fused grouped MLP + budget 1.5 + full-iteration graphs")
    assert rows[1].strip().startswith("fused grouped MLP + budget 1.5 + full-iteration graphs")  # the largest gain
    base = Base(
        "qwen3-30b-a3b", "gb200-nvl72", 8,
        {"ep": 8, "recompute": "none", "framework": "nemo", "fp8_recipe": "mxfp8", "moe_dispatcher": "hybridep"},
        {"precision": "fp8"},
    )  # fmt: skip
    done = {
        "layout.moe_fused_mlp": True,
        "layout.moe_expert_capacity": 1.5,
        "layout.cuda_graphs": True,
        "layout.cuda_graph_scope": ["full_iteration"],
    }
    assert float(step_s) == pytest.approx(project_point(base, done).step_time_s, abs=5e-4)
    found = {c.label: c for c in explore(base, {}, top=50).changes}
    chain = found["fused grouped MLP + budget 1.5 + full-iteration graphs"]
    assert chain.point == done
    # the whole-step graph alone is not offered: a dropless MoE layer cannot be captured (layout._check_graph_scope)
    assert "CUDA graphs (full iteration)" not in found


def test_nothing_megatron_is_offered_on_torchtitan():
    rows = _what_if_rows(
        "qwen3-30b-a3b", "-t", "gb200-nvl72", "--gpus", "8", "--ep", "8", "--zero", "3", "--precision", "fp8",
        "--framework", "torchtitan", "--set", "layout.fp8_recipe=mxfp8",
    )  # fmt: skip
    assert not [r for r in rows if r.strip().startswith(MEGATRON_LINES)]
    base = Base(
        "qwen3-30b-a3b", "gb200-nvl72", 8, {"ep": 8, "zero": 3, "framework": "torchtitan", "fp8_recipe": "mxfp8"},
        {"precision": "fp8"},
    )  # fmt: skip
    found = explore(base, {}, top=50)
    labels = [c.label for c in found.changes] + [r.label for r in found.refused]
    assert not [label for label in labels if label.startswith(MEGATRON_LINES)]
    # torchtitan's own: Dist-MoE in one NVLink domain (GB200 NVL72), shown in the printed table
    assert _row(rows, "dispatcher alltoall -> distmoe (Dist-MoE)")[1].startswith("+")


def test_dist_moe_is_not_offered_where_the_ep_group_leaves_the_nvlink_domain():
    # EP 16 over two DGX H100 nodes: Dist-MoE reads its peers' memory over NVLink only (step.py refuses it)
    base = Base("qwen3-30b-a3b", "dgx-h100", 16, {"ep": 16, "zero": 3, "framework": "torchtitan"}, {})
    found = explore(base, {}, top=50)
    labels = [c.label for c in found.changes] + [r.label for r in found.refused]
    assert not [label for label in labels if "distmoe" in label]
    inside = explore(Base("qwen3-30b-a3b", "dgx-h100", 16, {"ep": 8, "zero": 3, "framework": "torchtitan"}, {}), {})
    assert [c for c in inside.changes if c.label == "dispatcher alltoall -> distmoe (Dist-MoE)"]


def test_mxfp8_attention_and_fused_mlp_are_not_offered_on_hopper():
    args = {"tp": 2, "cp": 4, "recompute": "none"}
    wl = {"precision": "fp8", "seq_len": 32768, "global_batch": 16}
    # MXFP8 itself is refused on Hopper (TE's check_mxfp8_support), so the layouts here run current scaling
    hopper = explore(Base("llama3-8b", "dgx-h100", 8, {**args, "fp8_recipe": "current"}, wl), {}, top=50)
    labels = [c.label for c in hopper.changes] + [r.label for r in hopper.refused]
    assert not [label for label in labels if label.startswith("fp8 attention")]  # TE: current-scaling DPA is sm100
    # the per-tensor delayed recipe runs fp8 attention on Hopper: offered there
    delayed = explore(Base("llama3-8b", "dgx-h100", 8, {**args, "fp8_recipe": "delayed"}, wl), {}, top=50)
    assert [c for c in delayed.changes if c.label.startswith("fp8 attention")]
    moe = Base(
        "qwen3-30b-a3b", "dgx-h100", 16,
        {"ep": 8, "recompute": "none", "fp8_recipe": "current", "moe_dispatcher": "hybridep"}, {"precision": "fp8"},
    )  # fmt: skip
    found = explore(moe, {}, top=50)
    labels = [c.label for c in found.changes] + [r.label for r in found.refused]
    assert not [label for label in labels if "fused grouped MLP" in label]  # the fused MLP is MXFP8's, sm100


def test_a_setting_already_on_is_not_offered_again():
    base = Base("qwen3-30b-a3b", "gb200-nvl72", 8, ROW_2608, {"precision": "fp8"})
    found = explore(base, {}, top=50)
    labels = [c.label for c in found.changes] + [r.label for r in found.refused]
    assert not [label for label in labels if label.startswith(MEGATRON_LINES) or label.startswith("delayed")]


def test_a_framework_switch_drops_what_the_other_stack_lacks_and_says_so():
    base = Base("qwen3-30b-a3b", "gb200-nvl72", 8, ROW_2608, {"precision": "fp8"})
    from commlens.project.whatif import _candidates

    now = project_point(base, {})
    cands = dict(_candidates(base, {}, now))
    label = (
        "framework nemo -> torchtitan (without EP overlap, fp8 attention, fused MLP, static expert budget, "
        "CUDA graph scope, fp8 parameter gather, HybridEP)"
    )
    (_, point), *_ = cands[label]
    moved = project_point(base, point)  # runs: nothing torchtitan lacks is left on
    assert moved.framework == "torchtitan" and moved.step_time_s > now.step_time_s
    assert not [c for c in cands if c.startswith("framework nemo -> megatron-core")]  # NeMo runs Megatron-Core
    # and back: torchtitan's Dist-MoE layout onto Megatron-Core runs its all-to-all dispatcher
    tt = Base("qwen3-30b-a3b", "dgx-h100", 8, {"ep": 8, "zero": 3, "framework": "torchtitan"}, {})
    tt_point = {"layout.moe_dispatcher": "distmoe"}
    back = dict(_candidates(tt, tt_point, project_point(tt, tt_point)))
    (_, point), *_ = back["framework torchtitan -> megatron-core (without Dist-MoE)"]
    assert point["layout.moe_dispatcher"] == "alltoall"
    assert project_point(tt, point).framework == "megatron-core"


def test_ep_overlap_on_a_pipelined_layout_comes_with_the_interleaved_schedule_it_needs():
    # Megatron-Core pairs micro-batches only under VPP > 1 where PP > 1 (layout._check_ep_overlap)
    rows = _what_if_rows(*MOE_H100[:4], "32", *MOE_H100[5:], "--pp", "2")
    step_s, _, _, _ = _row(rows, "EP all-to-all overlap (VPP 1 -> 2)")
    base = Base("qwen3-30b-a3b", "dgx-h100", 32, {"ep": 8, "pp": 2, "recompute": "none"}, {"precision": "fp8"})
    both = project_point(base, {"layout.moe_a2a_overlap": True, "layout.vpp": 2})
    assert float(step_s) == pytest.approx(both.step_time_s, abs=5e-4)
    assert both.step_time_s < project_point(base, {"layout.vpp": 2}).step_time_s  # the overlap, not the VPP alone


def test_hybridep_onto_automodel_takes_its_deepep_dispatch():
    from commlens.project.whatif import _candidates

    base = Base("qwen3-30b-a3b", "gb200-nvl72", 8, ROW_2608, {"precision": "fp8"})
    cands = dict(_candidates(base, {}, project_point(base, {})))
    (label, point), *_ = next(v for k, v in cands.items() if k.startswith("framework nemo -> automodel"))
    assert label.endswith(", HybridEP)") and point["layout.moe_dispatcher"] == "deepep"
    assert project_point(base, point).framework == "automodel"


def test_a_scoped_graph_line_is_reproduced_from_the_shell_and_leaves_with_megatron():
    rows = _what_if_rows(*MOE_H100)
    step_s, _, _, _ = _row(rows, "CUDA graphs (attn, moe_router, moe_preprocess)")
    # the line's change as --set takes it (a list option splits on commas: the scope's names joined by '-')
    scoped = ("--set", "layout.cuda_graphs=true", "--set", "layout.cuda_graph_scope=attn-moe_router-moe_preprocess")
    out = subprocess.run([*CLI, "project", *MOE_H100, *scoped, "--no-what-if"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("step time")[1].split()[0] == step_s
    # off Megatron, scoped graphs go with their scope: a scope-less cuda_graphs would capture more than they did
    from commlens.project.whatif import _candidates

    lay = {
        "ep": 8,
        "recompute": "none",
        "cuda_graphs": True,
        "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
    }
    base = Base("qwen3-30b-a3b", "dgx-h100", 16, lay, {"precision": "fp8"})
    cands = dict(_candidates(base, {}, project_point(base, {})))
    (_, point), *_ = cands["framework megatron-core -> torchtitan (without CUDA graphs)"]
    assert point["layout.cuda_graphs"] is False and point["layout.cuda_graph_scope"] is None
