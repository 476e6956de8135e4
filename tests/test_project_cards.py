"""[27 s27 cards] Megatron-Bridge's model verification cards as a held-out table: the tuned performance runs of
Qwen3-30B-A3B, Qwen3-235B-A22B, GPT-OSS 120B and DeepSeek-V3, each at the commit it ran."""

from __future__ import annotations

from importlib.resources import files

import pytest

from commlens.project.validate import load_set, validate_set

NAME = "megatron-bridge-verification-cards"

# the cards' last_10_steps_tokens_per_second_per_gpu_avg, in the table's order
PUBLISHED = [
    13011.378,
    40322.898,
    44773.361,
    44511.004,
    45086.158,
    44951.404,
    45052.607,
    8784.492,
    7320.274,
    33017.081,
    16398.332,
    1061.206,
    4734.856,
    6143.635,
]
# the same runs' last_10_steps_step_time_ms_avg, global batch and GPUs: tokens/s/GPU is their quotient
STEP_MS = [
    20147.290,
    6501.120,
    5854.910,
    5889.420,
    5814.290,
    5831.720,
    5818.620,
    14920.840,
    17905.340,
    2481.140,
    4995.630,
    61756.130,
    13841.180,
    10667.300,
]


def test_the_table_holds_the_cards_performance_runs_and_every_one_projects():
    table = load_set(NAME)
    assert [r.published for r in table.rows] == PUBLISHED
    for row, ms in zip(table.rows, STEP_MS, strict=True):
        tokens = row.overrides["global_batch"] * row.overrides["seq_len"]
        assert tokens / (ms / 1e3) / row.gpus == pytest.approx(row.published, rel=2e-4), row.note[:80]
    results = validate_set(table)
    assert all(not r.refused and r.predicted and r.predicted > 0 for r in results), [r.refused for r in results]


def test_the_weak_scaling_points_keep_the_recipe_and_grow_only_data_parallelism():
    """pretrain_weak_scaling.GB300: 8, 32, 128 and 256 GPUs, the global batch 64 x GPUs, the same EP 8 recipe."""
    rows = [r for r in load_set(NAME).rows if r.topology == "gb300-nvl72" and r.workload == "qwen3-30b-a3b"]
    points = rows[1:]  # the first is the performance item, the same command three days earlier
    assert [r.gpus for r in points] == [8, 32, 128, 256]
    assert [r.overrides["global_batch"] for r in points] == [512, 2048, 8192, 16384]
    base = {k: v for k, v in points[0].layout.items() if k != "dp"}
    for r in points:
        assert {k: v for k, v in r.layout.items() if k != "dp"} == base
        assert r.layout["dp"] == r.gpus and r.layout["ep"] == 8


def test_the_projection_keeps_the_published_weak_scaling_flat():
    """The published throughput moves by 1.3% from 8 to 256 GPUs; the projection must not lose more than 3% either."""
    results = [r for r in validate_set(load_set(NAME)) if r.topology == "gb300-nvl72" and r.workload == "qwen3-30b-a3b"]
    projected = [r.predicted for r in results[1:]]
    assert max(projected) / min(projected) < 1.03, projected


def test_functional_runs_are_left_out_and_the_header_says_why():
    text = (files("commlens.project") / "published" / f"{NAME}.yaml").read_text(encoding="utf-8")
    assert "sanity checks rather than optimized performance results" in text
    assert all(r.published not in (8654.602, 21205.047, 1966.285) for r in load_set(NAME).rows)
