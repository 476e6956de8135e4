"""[27 s15 olmocore] Held-out published table olmo-core-h100-2024: the throughput table of AI2's OLMo-core README
('Official training scripts', tokens per second per device on H100; 2024-09 to 2025-03), every figure of its
versions, with settings from the scripts and library at the same commits. Nothing in the model was fitted to it
(docs/project.md [27 s15 olmocore])."""

from __future__ import annotations

import pytest

from commlens.project.validate import load_set, validate_set
from commlens.workload import load_workload

TABLE = "olmo-core-h100-2024"


def test_the_table_holds_every_figure_of_the_readme():
    table = load_set(TABLE)
    assert table.metric == "tokens_per_s_per_gpu"
    assert "e27ba74550f12a685b95aded46c88f845a7e2d6d" in table.source
    assert "41400c46fcce82cf2f8c491e51d861b1ffef5798" in table.source
    got = [(r.workload, r.overrides["precision"], r.overrides["micro_batch"], r.gpus, r.published) for r in table.rows]
    assert got == [
        ("olmo-core-1b-2024", "bf16", 8, 8, 55000),
        ("olmo-core-1b-2024", "fp8", 8, 8, 65000),
        ("olmo2-7b", "bf16", 2, 8, 10000),
        ("olmo2-7b", "fp8", 2, 8, 13000),
        ("llama3-8b", "bf16", 2, 8, 9500),
        ("llama3-8b", "fp8", 2, 8, 12500),
        ("olmo2-13b", "bf16", 1, 8, 4600),
        ("olmo2-13b", "fp8", 1, 8, 5500),
        ("olmo-core-1b-2024", "bf16", 4, 8, 44000),  # superseded at e27ba74 (micro-batch 4 x 4096 before)
        ("olmo-core-1b-2024", "fp8", 4, 8, 51000),
    ]
    for r in table.rows:
        lay = r.layout
        # FSDP2 over the one node's 8 GPUs (assumed: the scripts' Beaker launch), fp32 reduce, no AC, compile
        assert (lay["dp"], lay["zero"], lay["grad_reduce_bytes"], lay["recompute"], lay["compile"]) == (
            8,
            3,
            4,
            "none",
            True,
        )
        assert lay["framework"] == "olmo-core" and lay["optimizer_impl"] == "fused"
        assert lay.get("fsdp_fp8_all_gather", False) == (r.overrides["precision"] == "fp8")
        assert r.overrides["seq_len"] == 4096
    # the Llama 8B script trains with the dolma2 tokenizer (padded vocab 100352)
    assert table.rows[4].overrides["vocab"] == 100352
    # the 13B's global batch is 2048 x 4096, the others' 1024 x 4096
    assert [r.overrides["global_batch"] for r in table.rows] == [1024] * 6 + [2048] * 2 + [1024] * 2


def test_the_olmo_presets_match_their_published_sizes():
    assert load_workload("olmo2-7b").parameters / 1e9 == pytest.approx(7.30, rel=0.005)
    assert load_workload("olmo2-13b").parameters / 1e9 == pytest.approx(13.72, rel=0.005)
    assert load_workload("olmo-core-1b-2024").parameters == 1335961600  # OLMo-core num_params less the norms


def test_the_profile_is_torchtitans_with_the_sourced_differences():
    from commlens.project.frameworks import framework

    fw, base = framework("olmo-core"), framework("torchtitan")
    differ = {k for k, v in fw.model_dump().items() if v != base.model_dump()[k]}
    assert differ == {"name", "title", "source", "compile_eager", "cuda", "parallel"}
    assert fw.parallel == ()  # [27 s21 parallel] data parallelism only at e27ba745 (FSDP or DDP)
    # OLMo-core's RoPE is real arithmetic, compiled with the block; torchtitan's complex RoPE stays eager
    assert fw.compile_eager == () and "rotary" in base.compile_eager
    assert fw.cuda == "12.1"


def test_every_row_projects_none_refused_and_the_errors_are_recorded():
    res = validate_set(load_set(TABLE))
    assert all(s.predicted is not None for s in res), [s.refused for s in res]
    errors = [s.error for s in res]
    # docs/project.md [27 s15 olmocore]: under torchtitan's profile the rows were -12.3, -16.0, -0.8, -1.3, +1.2,
    # +1.0, +9.3, +23.3, -1.2, -4.6%; [27 s15 h100fp8cuda] the FP8 rows with their GEMMs at the H100's CUDA 12.1 fp8
    # plateau (were -6.9, +7.5, +6.3, +32.3, +4.5%); [27 s15 cu121fix] the BF16 rows at the same finder's CUDA 12.1
    # bf16 plateau (were -7.6, +1.2, +0.5, +10.2, +3.5%); [27 s15 olmo13b] the FP8 rows with torchao's backward copy
    # of the fp8 weights (were -8.9, +3.9, +2.7, +27.6, +2.5%)
    assert errors == pytest.approx(
        [-0.044, -0.091, +0.054, +0.030, +0.047, +0.017, +0.146, +0.254, +0.067, +0.022], abs=0.002
    )
