"""Modules of a hybrid at their own precision under an fp8 / NVFP4 recipe, as Megatron-Core's quant_recipe sets them
(Megatron-Bridge's Nemotron 3 Super NVFP4 recipes load te_quant.cfg: attention projections and latent projections in
BF16, the Mamba out_proj in MXFP8) [27 s29 quantrecipe]."""

from __future__ import annotations

import pytest
from test_project_hybrid import MAMBA, _plain  # one definition of the small model and its mixer

from commlens.project import InfeasibleLayoutError, ParallelLayout, Projection, project
from commlens.project.layout import resolve
from commlens.project.memory import stage_memory
from commlens.topology import load_topology
from commlens.workload.spec import workload_from_dict

B200 = load_topology("b200")
MOE = {"experts": 16, "top_k": 2, "expert_ffn_hidden": 1024, "latent_size": 512}


def _w(pattern: str, precision: str = "fp8", **kw: object):  # noqa: ANN202
    data = _plain(layers=len(pattern), position_embedding="none", precision=precision)
    data.update({"hybrid": {"pattern": pattern, **MAMBA}, **kw})
    return workload_from_dict(data)


def _layout(recipe: str = "nvfp4", **kw: object) -> ParallelLayout:
    fields = {"tp": 1, "pp": 1, "zero": 1, "recompute": "none", "fp8_recipe": recipe, "framework": "megatron-core"}
    return ParallelLayout.model_validate({**fields, **kw})


def test_attention_kept_in_bf16_runs_as_the_bf16_model_s_attention() -> None:
    # a model of attention blocks alone: with its attention in bf16 under NVFP4 its GEMMs are the bf16 model's and it
    # casts nothing
    kept = project(_w("****"), B200, _layout(module_precision={"attention": "bf16"}), 8, check_memory=False)
    bf16 = project(_w("****", "bf16"), B200, _layout(), 8, check_memory=False)
    fp4 = project(_w("****"), B200, _layout(), 8, check_memory=False)
    assert kept.kernels["gemm"] == pytest.approx(bf16.kernels["gemm"], rel=1e-9)
    assert kept.kernels.get("fp8_cast", 0.0) == 0.0 < fp4.kernels["fp8_cast"]
    # the GEMMs at the 16-bit rate; at this small size NVFP4's casts cost more than its GEMMs save, so the step is
    # not slower: the model prices both sides
    assert kept.kernels["gemm"] > fp4.kernels["gemm"]


def test_the_mamba_out_proj_in_mxfp8_under_nvfp4_casts_at_its_own_recipe() -> None:
    plain = project(_w("MMMM"), B200, _layout(), 8, check_memory=False)
    mx = project(_w("MMMM"), B200, _layout(module_precision={"mamba_out": "mxfp8"}), 8, check_memory=False)
    # out_proj at MXFP8's rate, below NVFP4's: more GEMM time; its input and output gradient cast as MXFP8
    assert mx.kernels["gemm"] > plain.kernels["gemm"]
    assert mx.step_time_s > plain.step_time_s


def test_latent_projections_in_bf16_slow_the_e_blocks_and_keep_16_bit_inputs() -> None:
    w = _w("MEME", moe=MOE)
    layout = _layout(ep=8)
    kept = layout.model_copy(update={"module_precision": {"latent": "bf16"}})
    assert (
        project(w, B200, kept, 8, check_memory=False).kernels["gemm"]
        > project(w, B200, layout, 8, check_memory=False).kernels["gemm"]
    )
    r = resolve(layout, w, 8, 8)
    assert stage_memory(w, kept, r)[0]["activations"] > stage_memory(w, layout, r)[0]["activations"]


def test_attention_in_bf16_keeps_its_inputs_in_16_bits() -> None:
    # the QKV projection's input (the norm's output) in 16 bits, not NVFP4's 0.56 B; no separate low-precision copy
    # of the attention output for the output projection: more bytes in all
    w = _w("M*M*")
    layout = _layout()
    r = resolve(layout, w, 8, 8)
    kept = layout.model_copy(update={"module_precision": {"attention": "bf16"}})
    assert stage_memory(w, kept, r)[0]["activations"] > stage_memory(w, layout, r)[0]["activations"]


@pytest.mark.parametrize(
    ("pattern", "topology", "over", "message"),
    [
        (None, "b200", {"attention": "bf16"}, "module_precision is modelled for hybrid models' blocks"),
        ("M*M*", "b200", {"latent": "bf16"}, "the workload's MoE has no latent projections"),
        ("M*M*", "dgx-h100", {"mamba_out": "mxfp8"}, "module_precision mxfp8 needs compute capability 10.0"),
    ],
)
def test_module_precisions_the_model_does_not_cover_are_refused(
    pattern: str | None, topology: str, over: dict[str, str], message: str
) -> None:
    w = workload_from_dict(_plain(layers=4, precision="fp8")) if pattern is None else _w(pattern)
    layout = _layout("current", module_precision=over)
    with pytest.raises(InfeasibleLayoutError, match=message):
        project(w, load_topology(topology), layout, 8, check_memory=False)


def test_a_bad_module_name_or_precision_is_a_layout_error() -> None:
    with pytest.raises(ValueError, match="module_precision"):
        _layout(module_precision={"ffn": "bf16"})
    with pytest.raises(ValueError, match="module_precision"):
        _layout(module_precision={"attention": "fp16"})


def test_attention_kept_in_bf16_gathers_16_bit_inputs_over_tp() -> None:
    # [27 s30 attnag] under sequence parallelism NVFP4 gathers each TP shard's 4-bit copy; an attention block kept in
    # BF16 gathers its 16-bit input, as the BF16 model does
    layout = _layout(tp=2, sp=True)
    kept = project(
        _w("****"), B200, layout.model_copy(update={"module_precision": {"attention": "bf16"}}), 8, check_memory=False
    )
    fp4 = project(_w("****"), B200, layout, 8, check_memory=False)
    bf16 = project(_w("****", "bf16"), B200, layout, 8, check_memory=False)

    def tp(p: Projection) -> float:
        return p.breakdown["tp_comm"] + p.overlapped_s["tp_comm"]

    # the gathers the compute hides are the bf16 model's; all of them move 3.6x NVFP4's bytes (one pair a block)
    assert kept.overlapped_s["tp_comm"] == pytest.approx(bf16.overlapped_s["tp_comm"], rel=1e-9)
    assert tp(kept) > 1.15 * tp(fp4)
