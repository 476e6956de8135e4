"""Hopper attention of the current stack at the cuDNN its containers ship (issue 27, session 11): megatron-core and
nemo read cuDNN 9.19.1's measured rates (cudnn-frontend 3929da2e, H200, Llama 3.1's GQA heads), the newest Hopper
cuDNN attention published at or below the cuDNN of the 26.04 / 26.06 images the 26.04.01 and 26.08 Megatron-Bridge
rows ran; the 2024 rows name release profiles (nemo-24.07, megatron-core-2024) that keep cuDNN 9.1's curve, so they
project as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from commlens.project import ParallelLayout
from commlens.project.efficiency import attention_tflops
from commlens.project.frameworks import framework
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.project.validate import PublishedSet, SetRow, load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = "H100 SXM"


def _one_row(table: PublishedSet, row: SetRow, **layout: object) -> float | None:
    """``row`` alone, its layout with ``layout`` over it, projected as the table projects it."""
    return validate_set(replace(table, rows=(replace(row, layout={**row.layout, **layout}),)))[0].predicted


@pytest.mark.parametrize("name", ["megatron-core", "nemo"])
def test_the_current_stack_reads_cudnn_919_on_hopper(name: str):
    fw = framework(name)
    assert fw.attention_kernel("hopper") == "cudnn_9.19"
    assert fw.attention_kernel("blackwell") == "cudnn"  # GB200's cuDNN 9.27 rows, as before


def test_cudnn_919_rows_are_the_h200_llama31_run():
    # cudnn-frontend@3929da2e h200_919_only_cudnn/llama3.1_20260227_034703.csv, bf16, top_left (causal)
    expected = {
        "fwd": {2048: 484, 4096: 591, 8192: 644, 16384: 673, 32768: 688},
        "bwd": {2048: 370, 4096: 474, 8192: 541, 16384: 579, 32768: 581},
    }
    for pass_, curve in expected.items():
        for seq, tflops in curve.items():
            assert attention_tflops(H100, "cudnn_9.19", pass_, 128, seq) == pytest.approx(tflops * 1e12)
    # below 2k the 2k rate is held (no faster than the unmasked kernel there: 633 / 504)
    assert attention_tflops(H100, "cudnn_9.19", "fwd", 128, 1024) == pytest.approx(484e12)
    assert attention_tflops(H100, "cudnn_9.19", "bwd", 128, 1024) == pytest.approx(370e12)
    # 14% faster forward and 11% faster backward than cuDNN 9.1's curve at 4k (9.1's backward: the H200 run's 443.6 on
    # the H100 setup, x 499 / 517.25 [27 s12 lcattn])
    assert attention_tflops(H100, "cudnn", "fwd", 128, 4096) == pytest.approx(518e12)
    assert attention_tflops(H100, "cudnn", "bwd", 128, 4096) == pytest.approx(
        443.6e12 * 499 / 517.2529813957277, rel=1e-3
    )


@pytest.mark.parametrize(
    ("name", "stack", "also"),
    # nemo-24.07 runs fp8 under delayed scaling, Transformer Engine 1.8's only recipe [27 s12 nemo2403]
    # and, on a Megatron-Core older than 0.9, no fp8 bucket merge [27 s16 fp8bucket]
    # and NVLink SHARP off, as the NeMo launcher 24.07 sets it [27 s16 nvls]; both without NVFP4 (TE < 2.7) [27 s25 nvfp4]
    # or Muon [27 s26 muon]
    [
        ("nemo-24.07", "nemo", {"fp8_recipe", "fp8_bucket_merge", "nccl_nvls", "nvfp4", "muon"}),
        ("megatron-core-2024", "megatron-core", {"nvfp4", "muon"}),
    ],
)
def test_2024_release_profiles_differ_from_megatron_core_only_in_hopper_attention(name: str, stack: str, also: set):
    fw, base = framework(name), framework("megatron-core")
    assert fw.release_of == stack
    assert fw.attention_kernel("hopper") == "cudnn"
    assert fw.attention_kernel("blackwell") == base.attention_kernel("blackwell")
    differ = {k for k, v in fw.model_dump().items() if v != base.model_dump()[k]}
    assert differ == {"name", "title", "source", "release_of", "attention"} | also


@pytest.mark.parametrize(
    ("table", "profile"),
    [
        ("nemo-perf-24.07", "nemo-24.07"),
        ("nemotron4-15b-table2", "megatron-core-2024"),
        ("nemotron4-340b-table2", "megatron-core-2024"),
        ("llama3-405b-table4", "megatron-core-2024"),
    ],
)
def test_2024_rows_name_their_release_and_project_at_cudnn_91(table: str, profile: str):
    """Each row names the release profile; its prediction is the one the default stack gives with cuDNN 9.1's
    attention (what these rows projected before the default moved to 9.19)."""
    s = load_set(table)
    results = validate_set(s)
    assert len(results) == len(s.rows) > 0
    for row, res in zip(s.rows, results, strict=True):
        assert row.layout["framework"] == profile
        assert res.predicted is not None
        recipe = {"fp8_recipe": row.layout.get("fp8_recipe", framework(profile).fp8_recipe)}
        pinned = _one_row(s, row, framework="megatron-core", attention_kernel="cudnn", **recipe)
        assert pinned == pytest.approx(res.predicted, rel=1e-12)


def _llama8b(framework_name: str) -> Projection:
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 128, "micro_batch": 2, "precision": "fp8"})
    lay = ParallelLayout(tp=1, sp=False, dp=8, zero=1, recompute="none", grad_reduce_bytes=2, framework=framework_name)
    return run(Scenario(w, load_topology("dgx-h100"), lay, 8, check_memory=False))


def test_the_default_h100_attention_takes_cudnn_919_time():
    """The same Llama 3 8B run on DGX H100: the default stack's attention seconds over megatron-core-2024's are the
    ratio of the two curves' rates at 8k, forward and backward weighted by their FLOPs (1 : 2.5)."""
    now, old = _llama8b("megatron-core"), _llama8b("megatron-core-2024")
    f19, b19 = (attention_tflops(H100, "cudnn_9.19", p, 128, 8192) for p in ("fwd", "bwd"))
    f91, b91 = (attention_tflops(H100, "cudnn", p, 128, 8192) for p in ("fwd", "bwd"))
    assert f19 and b19 and f91 and b91
    expected = (1 / f19 + 2.5 / b19) / (1 / f91 + 2.5 / b91)
    assert 0.83 < expected < 0.88
    assert now.kernels["attention"] / old.kernels["attention"] == pytest.approx(expected, rel=1e-6)
    assert now.tokens_per_s > old.tokens_per_s


def test_a_2026_h100_row_projects_faster_than_at_cudnn_91():
    """The 26.04.01 Llama 3 70B DGX-H100 row (pytorch:26.04 image) projects faster on the 9.19 curve."""
    s = load_set("megatron-bridge-perf-26.04.01-dense")
    idx = next(i for i, r in enumerate(s.rows) if r.topology == "dgx-h100" and r.gpus == 64)
    row = s.rows[idx]
    now, old = validate_set(s)[idx].predicted, _one_row(s, row, attention_kernel="cudnn")
    assert now is not None and old is not None
    assert 1.01 < now / old < 1.05


@pytest.mark.parametrize("pass_", ["fwd", "bwd"])
def test_a_head_size_the_version_never_measured_reads_the_stand_in_that_did(pass_: str):
    """gpt-oss's head size 64 on the current Hopper stack: cudnn_9.19 is measured at 128 only, so the lookup reads
    `cudnn`'s measured 64 rather than 9.19's 128 (15-40% faster than the measured 64); a size 9.19 tables is read
    from 9.19, and MLA's asymmetric 192 / 128 keeps 9.19's nearest size [27 s11 lead]"""
    assert attention_tflops(H100, "cudnn_9.19", pass_, 64, 4096) == attention_tflops(H100, "cudnn", pass_, 64, 4096)
    assert attention_tflops(H100, "cudnn_9.19", pass_, 64, 4096) < 0.85 * attention_tflops(
        H100, "cudnn_9.19", pass_, 128, 4096
    )
    assert attention_tflops(H100, "cudnn_9.19", pass_, 192, 4096, v_head_dim=128) == attention_tflops(
        H100, "cudnn_9.19", pass_, 128, 4096
    )
