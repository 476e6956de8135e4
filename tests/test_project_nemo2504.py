"""[27 s15 nemo2504] Held-out published table nemo-perf-25.04: the NeMo Framework performance summary of the NeMo 25.04
container, DGX-GB200 pre-training, FP8 with per-tensor current scaling (docs.nvidia.com, archive
25.04-performance-summary.html). Nothing in the model was fitted to it; settings from NVIDIA/NeMo v2.3.0
scripts/performance (docs/project.md [27 s15 nemo2504])."""

from __future__ import annotations

import pytest

from commlens.project.validate import load_set, validate_set

TABLE = "nemo-perf-25.04"


def test_the_table_holds_the_pages_gb200_pretraining_rows():
    table = load_set(TABLE)
    assert table.metric == "tokens_per_s_per_gpu"
    assert "25.04-performance-summary.html" in table.source and "v2.3.0" in table.source
    got = [(r.workload, r.topology, r.gpus, r.published) for r in table.rows]
    assert got == [
        ("gpt3-175b", "gb200-nvl72", 128, 1804),
        ("llama3-8b", "gb200-nvl72", 8, 33099),
        ("llama3-70b", "gb200-nvl72", 64, 4035),
        ("llama3-405b", "gb200-nvl72", 128, 665),
        ("nemotron4-15b", "gb200-nvl72", 64, 17809),
        ("nemotron4-340b", "gb200-nvl72", 128, 737),
        ("mixtral-8x7b", "gb200-nvl72", 64, 19275),
        ("mixtral-8x22b", "gb200-nvl72", 256, 2731),
    ]
    # the page's recipe is FP8 current scaling on every row; the FSDP row is Megatron FSDP
    assert all(r.layout["fp8_recipe"] == "current" and r.overrides["precision"] == "fp8" for r in table.rows)
    assert table.rows[2].layout["zero"] == 3
    # GBS = MBS x DP x GA on every row (the 8x22B row's swapped GBS / MBS cells read as 64 / 1)
    ga = [16, 8, 2, 32, 2, 8, 2, 16]
    for r, g in zip(table.rows, ga, strict=True):
        assert r.overrides["global_batch"] == r.overrides["micro_batch"] * r.layout["dp"] * g


def test_every_row_projects_none_refused():
    res = validate_set(load_set(TABLE))
    assert all(s.predicted is not None for s in res), [s.refused for s in res]


def test_the_rows_run_the_25_04_containers_attention():
    """[27 s15 nemo2504lib] The 25.04 container shipped cuDNN 9.7.0.66; its rows read Blackwell attention at the nearest
    measured family (cuDNN 9.10-9.13), not megatron-core's 2026 curve, and the attention-heavy 405B row (CP 2, 8K)
    projects slower for it."""
    from commlens.project.frameworks import framework

    fw, base = framework("nemo-25.04"), framework("megatron-core")
    assert fw.release_of == "nemo"
    assert fw.attention_kernel("blackwell") == "cudnn_9.13" and base.attention_kernel("blackwell") != "cudnn_9.13"
    differ = {k for k, v in fw.model_dump().items() if v != base.model_dump()[k]}
    # and TE 1.14's CP ring copies [27 s15 te114cp]
    assert differ == {
        "nvfp4",  # TE older than 2.7: no NVFP4 [27 s25 nvfp4]
        "muon",  # Megatron-Core older than Muon [27 s26 muon]
        "name",
        "title",
        "source",
        "release_of",
        "attention",
        "cp_step_bytes",
        "cp_call_bytes",
        "nccl_nvls",  # NeMo v2.3.0 scripts/performance/utils.py: NCCL_NVLS_ENABLE 0 [27 s16 nvls]
        "unfused_mask_bytes",  # TE bee4649c's unfused attention builds its causal mask each forward [27 s17 dsv3gb200]
    }
    table = load_set(TABLE)
    assert {r.layout["framework"] for r in table.rows} == {"nemo-25.04"}
    errors = [s.error for s in validate_set(table)]
    # GPT3-175B, 8B, 70B, 405B, 15B, 340B, 8x7B, 8x22B (megatron-core's attention gave +0.1, -7.6, +1.4, +14.5, +6.7,
    # +17.6, -3.3, +11.0%; the 25.04 profile before the rows took v2.3.0's recompute, graphs, fp8 parameter gather
    # and token drop [27 s15 gbvsb]: -3.9, -13.2, -2.1, +8.9, +1.9, +15.3, -6.2, -2.4%); the CP rows (405B, 8x22B) with
    # TE 1.14's ring copies [27 s15 te114cp]; the FSDP 70B row without gradient-accumulation fusion [27 s15 audit15]
    # (-2.1% -> -5.6%); the GB200's FP8 sustained factor against the H200's CUDA 12.8 run [27 s15 bwfp8ratio] (0.850 ->
    # 0.877: -3.8, -7.8, -5.6, +11.6, +2.5, +15.5, -3.1, +8.9% before); the non-fp8 buckets in the first layers'
    # group, exposed [27 s16 fp8bucket] (15B +4.2 -> +1.2%, 340B +18.0 -> +17.7%, 8x7B -1.5 -> -1.7%, 8x22B +9.8 ->
    # +9.6%); the callback's 128M-element DP bucket filled from the stage's tensors [27 s17 nemobucket] (15B +1.1 ->
    # +3.3%, 8x7B -1.8 -> -1.5%); the step's zeroing of the gradient buffer [27 s18 zerograd] (8B -6.4 -> -6.6%, 405B
    # +14.2 -> +14.1%, 15B +3.3 -> +2.6%, 340B +17.7 -> +17.5%)
    # [27 s22 bwshape] the Blackwell GEMM curve fitted to XLA's B200 table: -1.6, -6.6, -3.9, +14.1, +2.7, +17.5, -1.8, +9.6% before
    # [27 s22 smallring] (-4.1, -8.0, -5.0, +10.6, +1.2, +8.8, -3.3, +8.8% before)
    # [27 s22 bwshape, relative fit]: -4.4, -8.0, -5.0, +10.3, +1.2, +8.7, -3.3, +6.8% before
    # [27 s23 graphmin] the graphed kernels' minimum run time: -6.1, -9.0, -5.9, +8.6, +0.0, +11.7, -4.4, +6.2% before
    assert errors == pytest.approx([-0.066, -0.090, -0.059, +0.086, +0.000, +0.112, -0.051, +0.062], abs=0.002)


def test_the_rows_carry_nemo_v2_3_0s_recompute_graphs_fp8_gather_and_token_drop():
    """[27 s15 gbvsb] Settings NeMo v2.3.0 states that the rows had left at commlens's defaults: no recomputation
    (every gb200 csv line has recompute_layers 0, utils.py set_primary_perf_configs sets recompute only for > 0, and no
    recipe sets it), CUDA graphs on the 8B row (both gb200 llama3 8b pre_train lines say cuda_graphs 1; the CLI
    overrides fields one by one), fp8 parameter gather (bf16_with_fp8_current_scaling_mixed: fp8_param_gather True;
    utils.py drops it only under Megatron FSDP) and the Mixtral recipes' MegatronTokenDropCallback (performance_mode:
    capacity factor 1.0, padded). The 8B row stops recomputing attention: -13.2% -> -7.8% (-6.4% since the GB200's FP8
    sustained factor was taken against the H200's CUDA 12.8 run [27 s15 bwfp8ratio])."""
    table = load_set(TABLE)
    for r in table.rows:
        lay = r.layout
        assert lay.get("recompute") == "none", r.workload
        assert lay.get("fp8_param_gather", False) == (lay["zero"] < 3), r.workload
        if r.workload.startswith("mixtral"):
            assert lay["moe_capacity_factor"] == 1.0 and lay["moe_pad_to_capacity"]
    assert table.rows[1].layout["cuda_graphs"] is True
    res = validate_set(table)
    assert res[1].error == pytest.approx(
        -0.090, abs=0.002
    )  # -6.4% before [27 s22 bwshape], -8.0% before [27 s22 bwshape, relative fit]


def test_the_fsdp_row_runs_without_gradient_accumulation_fusion():
    """[27 s15 audit15] NeMo v2.3.0 scripts/performance/utils.py set_primary_perf_configs sets
    recipe.model.config.gradient_accumulation_fusion = False whenever use_mcore_fsdp is on (the gb200 csv's llama3 70b
    fp8 line: use_mcore_fsdp 1); the 70B row had taken commlens's default (fused). Unfused accumulation adds a pass per
    micro-batch over the weight gradients: -2.1% -> -5.6% (-3.9% with the GB200 FP8 factor of [27 s15 bwfp8ratio])."""
    table = load_set(TABLE)
    assert table.rows[2].layout["zero"] == 3 and table.rows[2].layout["grad_accum_fusion"] is False
    assert all("grad_accum_fusion" not in r.layout for i, r in enumerate(table.rows) if i != 2)
    assert validate_set(table)[2].error == pytest.approx(
        -0.059, abs=0.002
    )  # -3.9%, -5.0% before [27 s22 bwshape, relative fit]
