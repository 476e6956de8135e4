"""[27 s28] The held-out tables of hybrid Mamba models: Nemotron-H 56B on NVIDIA's DGX Cloud benchmarks
(dgxc-nemotronh) and Nemotron 3 Nano on Megatron-Bridge's performance pages and its verification card
(megatron-bridge-nemotron3-nano)."""

from __future__ import annotations

import re

import pytest

from commlens.project.validate import load_set, validate_set
from commlens.workload import load_workload

NANO = "megatron-bridge-nemotron3-nano"
NEMOTRONH = "dgxc-nemotronh"


def _bridge_flops_per_token(name: str, seq: int) -> float:
    """Megatron-Bridge's model FLOPs per token of a hybrid (flop_utils.py at 067f987d, hybrid_flops: the Mamba term
    with d_in = 2 x hidden whatever the heads, scan 7 d_in N; attention 4 h p (h + h g / n) + 2 h p s; squared-ReLU
    MLP and MoE 4 h f; logits 2 h V; x 3), from the preset's shapes."""
    w = load_workload(name)
    hy = w.hybrid
    assert hy is not None
    h, n_heads, g = w.hidden, w.heads, w.kv_heads_n
    p = w.head_size * n_heads / h
    attn = 4 * h * p * (h + h * g / n_heads) + 2 * h * p * seq
    d_in = 2 * h
    mamba = 2 * h * (2 * d_in + 2 * hy.mamba_groups * hy.mamba_state + hy.mamba_heads) + 7 * d_in * hy.mamba_state
    mamba += 2 * d_in * h
    mlp = 4 * h * w.ffn_hidden
    moe = 0.0
    if w.moe is not None:
        moe = 4 * h * w.moe.expert_ffn_hidden * (w.moe.top_k + w.moe.shared_experts)
    fwd = hy.count("*") * attn + hy.count("M") * mamba + hy.count("-") * mlp + hy.count("E") * moe
    return 3 * (fwd + 2 * h * w.vocab)


def test_the_nano_rows_carry_the_pages_throughput_and_every_one_projects():
    """Each page row prints tokens/s and model TFLOP/s; their quotient is Megatron-Bridge's FLOPs per token of the
    preset's shapes (22.28 GFLOP at 8,192 tokens), to the pages' rounding of tokens/s to 1,024 in later releases."""
    table = load_set(NANO)
    assert len(table.rows) == 21
    per_token = _bridge_flops_per_token("nemotron-3-nano-30b-a3b", 8192)
    assert per_token / 1e9 == pytest.approx(22.278, abs=0.005)
    checked = 0
    for row in table.rows:
        m = re.search(r"(\d+) model TFLOP/s/GPU", row.note)
        if m is None:
            continue
        checked += 1
        assert int(m.group(1)) * 1e12 / row.published == pytest.approx(per_token, rel=0.015), row.note[:120]
    assert checked == 20  # every page row; the card prints its own figures
    results = validate_set(table)
    assert all(not r.refused and r.predicted and r.predicted > 0 for r in results), [r.refused for r in results]


def test_the_nemotronh_step_time_table_and_its_examples_project():
    """v25.05's table: seven sizes of one recipe (TP 8, GBS 3 x GPUs), then the three later READMEs' example runs."""
    table = load_set(NEMOTRONH)
    rows = table.rows
    assert [r.published for r in rows[:7]] == [15.119, 15.058, 15.496, 15.892, 15.586, 15.678, 15.723]
    for r in rows[:7]:
        assert r.overrides["global_batch"] == 3 * r.gpus and r.layout["tp"] == 8
    assert all("WORKED EXAMPLE" in r.note for r in rows[7:])
    results = validate_set(table)
    assert all(not r.refused and r.predicted for r in results), [r.refused for r in results]
    # weak scaling: the published step grows 4% from 32 to 2,048 GPUs; so may the projection, not more than 6%
    steps = [r.predicted for r in results[:7]]
    assert max(steps) / min(steps) < 1.06, steps
