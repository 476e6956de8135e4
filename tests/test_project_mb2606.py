"""[27 s26 mb2606] Megatron-Bridge's 26.06 and 26.06.01 pages as held-out tables, the 26.08 rows' MXFP8 output layer
[27 s26 fp8out], and the 26.06.01 container's dGLU regression [27 s26 dglu]."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, project
from commlens.project.frameworks import framework
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

# the pages' figures, tokens/s/GPU, in their order
PAGES = {
    "megatron-bridge-perf-26.06-dense": [1048, 952, 1413, 843, 783, 1166, 326],
    "megatron-bridge-perf-26.06-moe": [
        6338,
        6422,
        4969,
        3541,
        33166,
        28947,
        18534,
        45275,
        40706,
        40769,
        8826,
        9015,
        7376,
    ],
    "megatron-bridge-perf-26.06.01-moe": [6304, 4928, 20288, 18304, 44544, 40960, 9008, 7360],
}


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_tables_hold_the_pages_rows_and_every_row_projects(name):
    table = load_set(name)
    assert [r.published for r in table.rows] == PAGES[name]
    results = validate_set(table)
    assert all(not r.refused and r.predicted and r.predicted > 0 for r in results), [r.refused for r in results]


def test_the_26_06_llama_rows_run_the_26_04_01_recipes():
    """The recipes did not change between the two releases (git diff 21d102f5 v0.5.0 of every file the rows read is
    empty), so each 26.06 row's layout is its 26.04.01 twin's: same system and precision."""
    old = load_set("megatron-bridge-perf-26.04.01-dense").rows
    for row in load_set("megatron-bridge-perf-26.06-dense").rows:
        twins = [
            r
            for r in old
            if r.workload == row.workload
            and r.topology == row.topology
            and r.layout.get("fp8_recipe") == row.layout.get("fp8_recipe")
        ]
        assert twins and row.layout == twins[0].layout, (row.topology, row.layout.get("fp8_recipe"))


def test_the_26_08_deepseek_and_gpt_oss_rows_run_an_mxfp8_output_layer():
    """v0.6.0's perf recipes set fp8_output_proj for DeepSeek-V3 (GB200, GB300) and GPT-OSS (the full-iteration MXFP8
    helper), not for Qwen3: Megatron-Core then builds the LM head as an MXFP8 GEMM."""
    for row in load_set("megatron-bridge-perf-26.08-moe").rows:
        assert row.layout.get("fp8_output_layer", False) is (row.workload in ("deepseek-v3-like", "gpt-oss-120b"))


def _step(row, fw: str) -> float:
    layout = ParallelLayout.model_validate({**row.layout, "framework": fw})
    w = load_workload(row.workload, row.overrides)
    return project(w, load_topology(row.topology), layout, row.gpus).step_time_s


def test_the_26_06_01_profile_slows_only_the_dglu_kernel_of_experts_with_biases():
    """cudnn-frontend 1.24.0 (v0.5.1's pin) ran the fused grouped MLP's dGLU-with-dbias backward 8.76 times slower
    (issue #256, PR #322's before/after at the issue's shape): GPT-OSS (expert biases) pays it, DeepSeek-V3 does not."""
    assert framework("megatron-core-26.06.01").fused_mlp_dglu_dbias_slowdown == pytest.approx(
        1362.768 / 155.632, abs=0.01
    )
    assert framework("megatron-core").fused_mlp_dglu_dbias_slowdown == 1.0
    rows = {r.workload: r for r in load_set("megatron-bridge-perf-26.06.01-moe").rows if r.topology == "gb200-nvl72"}
    gpt, dsv3 = rows["gpt-oss-120b"], rows["deepseek-v3-like"]
    assert _step(dsv3, "megatron-core-26.06.01") == pytest.approx(_step(dsv3, "megatron-core"), rel=1e-12)
    slowed, fixed = _step(gpt, "megatron-core-26.06.01"), _step(gpt, "megatron-core")
    # the page: 26.06 (cudnn-frontend 1.23.0) 28947 tokens/s, 26.06.01 18304: 1.58x; the kernel's factor gives less
    assert 1.2 < slowed / fixed < 28947 / 18304
