"""[27 s16 dgxcmoe] Held-out published table dgxc-moe: NVIDIA/dgxc-benchmarking's MoE pre-training step times at tags
v24.11.1 .. v25.05.05 (Grok-1 314B on H100 and GB200, DeepSeek-V3 on H100 and GB200), settings from each tag's own
recipe and the NeMo scripts it clones. Nothing in the model was fitted to it (docs/project-evidence.md [27 s16 dgxcmoe])."""

from __future__ import annotations

import pytest

from commlens.project.validate import load_set, validate_set
from commlens.workload import load_workload

TABLE = "dgxc-moe"
GROK_BF16_DEV = [24.03, 21.52, 10.64, 20.64, 20.64, 20.7, 20.83, 21, 21.09]
GROK_FP8_DEV = [19.89, 17.08, 8.3, 16.21, 16.48, 16.55, 16.69, 16.89, 17.04]
GROK_BF16_2412 = [24.00, 21.71, 10.70, 21.42, 20.73, 20.83, 21.01, 21.20, 21.29]
GROK_FP8_2412 = [19.71, 17.80, 8.70, 17.53, 16.70, 16.75, 16.90, 17.01, 17.30]
PROXY_GPUS = [8, 16, 32, 64, 128, 256, 512, 1024, 2048]
PROXY_LAYERS = [2, 4, 4, 8, 16, 32, 64, 64, 64]


def test_the_table_holds_every_readme_row_once():
    table = load_set(TABLE)
    assert table.metric == "step_time_s" and len(table.rows) == 59
    for tag in ("35a9aecc8d5b17d99d80f52f38c75ade0dbab7ae", "8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad"):
        assert tag in table.source
    rows = table.rows
    launcher = rows[:36]  # NeMo 1 launcher: nemo:dev (v24.11.1, labelled 24.09) then nemo:24.12 (v25.02)
    assert [r.published for r in launcher] == GROK_BF16_DEV + GROK_FP8_DEV + GROK_BF16_2412 + GROK_FP8_2412
    assert [r.gpus for r in launcher] == PROXY_GPUS * 4
    assert [r.overrides["layers"] for r in launcher] == PROXY_LAYERS * 4  # the proxy configs of configure.sh
    assert [r.layout["framework"] for r in launcher] == ["nemo-24.09"] * 18 + ["nemo-24.12"] * 18
    # [27 s16 grokh100] configure.sh at v24.11.1 and v25.02 exports NVTE_FUSED_ATTN=0: TE runs flash-attn 2
    assert all(r.layout["attention_kernel"] == "fa2" for r in launcher)
    gb200 = rows[36:42]
    assert [(r.topology, r.gpus, r.published) for r in gb200] == [
        ("gb200-nvl72", 128, 7.325),
        ("gb200-nvl72", 256, 7.39),
        ("gb200-nvl72", 512, 7.324),
        ("gb200-nvl72", 128, 5.298),
        ("gb200-nvl72", 256, 5.224),
        ("gb200-nvl72", 512, 5.193),
    ]
    assert all(r.layout["etp"] == 4 and r.layout["cuda_graphs"] for r in gb200)
    # the H100 512-GPU run was re-measured between v25.05.01 and v25.05.02 (same recipe and image): two rows each
    assert [(r.gpus, r.published) for r in rows[42:46]] == [(512, 16.93), (512, 13.454), (512, 15.933), (512, 13.433)]
    ds = rows[46:50]
    assert [(r.workload, r.topology, r.gpus, r.published) for r in ds] == [
        ("deepseek-v3-like", "dgx-h100", 1024, 52.04),
        ("deepseek-v3-like", "gb200-nvl72", 128, 34.168),
        ("deepseek-v3-like", "gb200-nvl72", 256, 34.194),
        ("deepseek-v3-like", "gb200-nvl72", 512, 34.274),
    ]
    for r in ds:  # NeMo 7a8f1cc7's pretrain_deepseek_v3.py: MTP 1, first stage 64 / PP - 1, last 64 / PP - 2 layers
        assert r.overrides["mtp_layers"] == 1 and sum(r.layout["stage_layers"]) == 61
        assert r.overrides["global_batch"] == 8 * r.gpus
    for r in rows[:46]:  # every Grok-1 recipe: Llama 3 tokenizer, untied embeddings, token drop padded to capacity 1.0
        assert r.overrides["vocab"] == 128256 and r.overrides["tied_embeddings"] is False
        assert r.layout["moe_capacity_factor"] == 1.0 and r.layout["moe_pad_to_capacity"] is True
        assert (r.layout.get("fp8_recipe") == "delayed") == (r.overrides["precision"] == "fp8")


def test_the_llama4_maverick_rows_as_the_readme_and_launch_sh_give_them():
    """[27 s16 llama4] llama4/README.md at v25.05 (the same figures through v25.05.05, nemo:25.04.01): GB200 BF16 /
    FP8 at 128 / 256 / 512 GPUs (TP 1, PP 2, VP 12, EP 64, GBS 8 x GPUs), H100 BF16 / FP8 at 512 (TP 4, EP 128, ETP 4,
    CUDA graphs for FP8 only); every row at 8192 tokens, one attention chunk."""
    table = load_set(TABLE)
    assert "llama4/README.md" in table.source
    rows = table.rows[50:58]
    assert [(r.workload, r.topology, r.gpus, r.overrides["precision"], r.published) for r in rows] == [
        ("llama4-maverick-17b-128e", "gb200-nvl72", 128, "bf16", 7.781),
        ("llama4-maverick-17b-128e", "gb200-nvl72", 256, "bf16", 7.859),
        ("llama4-maverick-17b-128e", "gb200-nvl72", 512, "bf16", 7.992),
        ("llama4-maverick-17b-128e", "gb200-nvl72", 128, "fp8", 6.093),
        ("llama4-maverick-17b-128e", "gb200-nvl72", 256, "fp8", 6.223),
        ("llama4-maverick-17b-128e", "gb200-nvl72", 512, "fp8", 6.327),
        ("llama4-maverick-17b-128e", "dgx-h100", 512, "bf16", 4.426),
        ("llama4-maverick-17b-128e", "dgx-h100", 512, "fp8", 3.855),
    ]
    for r in rows:
        lay = r.layout
        assert r.overrides["seq_len"] == 8192 and lay["framework"] == "nemo-25.04"
        assert lay["moe_capacity_factor"] == 1.0 and lay["grad_reduce_bytes"] == 2
        assert (lay.get("fp8_recipe") == "delayed") == (r.overrides["precision"] == "fp8")
        assert lay["tp"] * lay["pp"] * lay["dp"] == r.gpus
    assert [(r.layout["pp"], r.layout["vpp"], r.layout["ep"]) for r in rows[:6]] == [(2, 12, 64)] * 6
    assert [r.layout["cuda_graphs"] for r in rows[6:]] == [False, True]


def test_grok_preset_matches_the_release():
    w = load_workload("grok-1-314b")
    assert (w.layers, w.hidden, w.heads, w.kv_heads, w.moe.experts, w.moe.top_k) == (64, 6144, 48, 8, 8, 2)
    assert w.moe.expert_ffn_hidden == 32768 and w.vocab == 131072  # ffn_size(6144, 8); 128 * 1024
    assert w.parameters / 1e9 == pytest.approx(314.0, rel=0.01)


def test_every_row_projects_and_the_figures_as_measured():
    """Measured when the table was added (session 16): Grok-1 on GB200 (NeMo 25.04.00) -1.5 -0.7 -1.8 -2.7 -4.1 -4.8%;
    Grok-1 H100 launcher rows -14% on most (the model's step slower than the runs'), the 8-GPU proxy +11 / +17%;
    Grok-1 H100 512 NeMo 2 -8.0 +2.5 -13.4 +2.4%; DeepSeek-V3 H100 +18.2%, GB200 +165% (34 s published against 13 s
    projected: 250 TFLOP/s a GPU, 10% MFU on the README). [27 s16 dsv3dgxc] DeepSeek-V3 with FP32 gradient reduction
    and, on GB200, unfused attention: H100 +17.6%, GB200 +59.6 / +59.8 / +59.9% (21.4 s projected), and without the
    dropout pass at p = 0: GB200 +95%. [27 s16 grokh100] With flash-attn 2 (NVTE_FUSED_ATTN=0) and the all-to-all
    dispatcher's shard-then-expert-TP-gather: launcher rows +0.5..+15% (512 GPUs BF16 +0.5 / +1.4%),
    GB200 -1.5..-5.7%."""
    res = validate_set(load_set(TABLE))
    assert all(s.predicted is not None for s in res), [s.refused for s in res]
    err = [s.error for s in res]
    # [27 s22 bwshape] the Blackwell GEMM curve: GB200 Grok-1 -2.2..-5.7% -> -3.9..-7.9%
    # [27 s22 smallring] the 4-GPU rings of TP 4 on a tray: -3.9..-7.9% -> -4.7..-8.9%
    # [27 s22 bwshape, relative fit]: -> -6.1..-9.9%
    # [27 s23 graphmin] the graphed kernels' minimum run time: -> -7.1..-11.3% (42:46 -8.0, +2.5, -13.4, +2.4% before)
    assert err[36:42] == pytest.approx([-0.077, -0.071, -0.081, -0.091, -0.105, -0.113], abs=0.01)
    assert err[42:46] == pytest.approx([-0.081, +0.018, -0.135, +0.017], abs=0.01)
    assert err[6] == pytest.approx(0.005, abs=0.01) and err[24] == pytest.approx(0.014, abs=0.01)
    assert err[46] == pytest.approx(0.176, abs=0.02)
    # [27 s16 dsv3dgxc] GB200 runs TE's unfused attention for MLA (head 192 > 128 on sm100): +165% -> +60%; and no
    # dropout pass over the scores at attention_dropout 0 (torch returns the input at p = 0): +60% -> +95%
    # [27 s17 dsv3gb200] and TE's causal mask built over 4096^2 entries each forward (get_full_mask, 81 B an entry):
    # 17.5 -> 18.0 s projected, +95.4..+95.9% -> +89.5..+90.0%
    # [27 s22 bwshape] the Blackwell GEMM curve fitted to XLA's B200 table: +89.5..+90.0% -> +76.7..+77.0%
    # [27 s22 smallring]: -> +75.1..+75.4%
    # [27 s22 bwshape, relative fit]: -> +65.2..+65.8%
    assert err[47:50] == pytest.approx([0.652, 0.657, 0.658], abs=0.015)
    # [27 s16 llama4] Llama 4 Maverick (held out, measured when added): GB200 BF16 +18.2 / +19.4 / +21.2%, FP8 +19.7 /
    # +22.2 / +24.1% (the model's step faster than the runs'), H100 BF16 +4.4%, FP8 (CUDA graphs) +19.2%
    # [27 s22 bwshape]: GB200 BF16 +15.4 / +16.4 / +17.9%, FP8 +17.1 / +18.9 / +20.3%
    # [27 s22 bwshape, relative fit]: GB200 BF16 +13.7 / +14.7 / +16.1%, FP8 +15.7 / +17.5 / +18.9%
    # [27 s23 graphmin] the graphed kernels' minimum run time: H100 BF16 +4.4 -> +3.5%, FP8 (CUDA graphs) +18.3 -> +15.6%
    assert err[50:58] == pytest.approx([0.137, 0.147, 0.161, 0.157, 0.175, 0.189, 0.035, 0.156], abs=0.02)
    # [27 s16 auditdgxc] DeepSeek-V3 BF16 on 512 H100 (v25.05.04, PP 8), added after the audit: +15.9%
    assert err[58] == pytest.approx(0.159, abs=0.02)


def test_deepseek_rows_run_what_the_recipe_runs():
    """[27 s16 dsv3dgxc] NeMo 7a8f1cc7's DeepSeek-V3 recipe reduces gradients in FP32 (recipes/deepseek.py trainer():
    grad_reduce_in_fp32 True, bf16_mixed(); set_primary_perf_configs clears it for fp8 only), and on GB200 the
    container's Transformer Engine (2.2: fused_attn.cpp excludes cuDNN fused attention on sm100 for a head over 128;
    FlashAttention is off for MLA's 192 / 128) runs the unfused attention: s x s scores and their softmax through HBM,
    which the GB200 breakdown shows beside the attention GEMMs and the H100 one does not."""
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.project.step import run
    from commlens.topology import load_topology

    rows = load_set(TABLE).rows[46:50]
    assert all(r.layout["grad_reduce_bytes"] == 4 for r in rows)
    assert [r.layout.get("attention_kernel") for r in rows] == [None, "unfused", "unfused", "unfused"]
    acts = []
    for r in rows[:2]:
        lay = ParallelLayout.model_validate(r.layout)
        p = run(Scenario(load_workload(r.workload, r.overrides), load_topology(r.topology), lay, r.gpus))
        acts.append(p.kernels["activation"])
    assert acts[0] < 1.0 < 3.0 < acts[1]  # the softmax over 64 heads x 4096^2 scores, 1,024 layer passes a step


def test_unfused_attention_drops_out_only_where_the_model_has_dropout():
    """[27 s16 dsv3dgxc] The unfused attention's dropout pass (5 B a score beside the scale-mask-softmax's 4) runs
    only at a non-zero attention dropout: at p = 0 torch's dropout returns its input (ATen Dropout.cpp), and
    DeepSeek-V3 / Llama-style models set 0. Toggling the workload's dropout on the GB200 DeepSeek-V3 row moves the
    softmax's HBM traffic by 5 / 4."""
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.project.step import run
    from commlens.topology import load_topology

    r = load_set(TABLE).rows[47]
    lay = ParallelLayout.model_validate(r.layout)
    acts = []
    for dropout in (False, True):
        w = load_workload(r.workload, {**r.overrides, "dropout": dropout})
        acts.append(run(Scenario(w, load_topology(r.topology), lay, r.gpus)).kernels["activation"])
    assert acts[1] > 1.5 * acts[0]


def test_te_unfused_attention_builds_its_causal_mask_each_forward():
    """[27 s17 dsv3gb200] Transformer Engine bee4649c (the NeMo 25.04 container's) UnfusedDotProductAttention calls
    get_full_mask every forward, which builds the causal mask over sq x sk in int32 / int64 / bool tensors: 81 B an
    entry through HBM, once per layer and forward (not per head), no backward, run again where core_attn is
    recomputed. The GB200 DeepSeek-V3 rows (unfused MLA attention) pay it; the H100 row (cuDNN fused attention) does
    not."""
    from commlens.project import step
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.topology import load_topology

    masks = []
    for r in load_set(TABLE).rows[46:48]:
        sc = Scenario(
            load_workload(r.workload, r.overrides),
            load_topology(r.topology),
            ParallelLayout.model_validate(r.layout),
            r.gpus,
        )
        c, _, _ = step._setup(sc)
        kernels, _ = step._layer_kinds(c, None, c.gemm_peak)[-1]
        masks.append([k for k in kernels if k.name == "causal_mask"])
    assert masks[0] == []
    (mask,) = masks[1]
    assert mask.nbytes == pytest.approx(81 * 4096 * 4096)
    assert mask.bwd_s == 0.0 and mask.bwd_launches == 0.0 and mask.launches == 11
    assert 0.1e-3 < mask.fwd_s < 0.3e-3  # ~1.36 GB at the GB200's HBM rate
