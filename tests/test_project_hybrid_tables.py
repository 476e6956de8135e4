"""[27 s28] The held-out tables of hybrid Mamba models: Nemotron-H 56B on NVIDIA's DGX Cloud benchmarks
(dgxc-nemotronh) and Nemotron 3 Nano on Megatron-Bridge's performance pages and its verification card
(megatron-bridge-nemotron3-nano)."""

from __future__ import annotations

import re

import pytest

from commlens.project.validate import load_set, validate_set
from commlens.workload import load_workload

NANO = "megatron-bridge-nemotron3-nano"
SUPER = "megatron-bridge-nemotron3-super"
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
    if w.moe is not None:  # moe_layer_flops: a latent MoE's routed experts at the latent width, and its projections
        m = w.moe
        moe = 4 * m.routed_width(h) * m.expert_ffn_hidden * m.top_k + 4 * h * m.expert_ffn_hidden * m.shared_experts
        moe += 4 * h * m.latent_size if m.latent_size else 0.0
    fwd = hy.count("*") * attn + hy.count("M") * mamba + hy.count("-") * mlp + hy.count("E") * moe
    # the MTP pattern ('*E') once per depth, and the logits once more per depth (eh_proj and norms not counted)
    fwd += w.mtp_layers * (attn + moe)
    return 3 * (fwd + 2 * h * w.vocab * (1 + w.mtp_layers))


def _rows_at_page_flops(table, per_token: dict[str, float], page_rel: float) -> int:
    """Check each row whose note prints the page's model TFLOP/s: that over its tokens/s is the workload's FLOPs per
    token, to ``page_rel`` (the pages round tokens/s to 1,024) or 0.1% for a card's unrounded figures; the rows
    checked."""
    checked = 0
    for row in table.rows:
        m = re.search(r"(\d+(?:\.\d+)?) model TFLOP/s/GPU", row.note)
        if m is None:
            continue
        checked += 1
        rel = 0.001 if "card" in row.note[:200] else page_rel
        assert float(m.group(1)) * 1e12 / row.published == pytest.approx(per_token[row.workload], rel=rel), row.note
    return checked


def _every_row_projects(table) -> None:
    results = validate_set(table)
    assert all(not r.refused and r.predicted and r.predicted > 0 for r in results), [r.refused for r in results]


def test_the_nano_rows_carry_the_pages_throughput_and_every_one_projects():
    """Each page row prints tokens/s and model TFLOP/s; their quotient is Megatron-Bridge's FLOPs per token of the
    preset's shapes (22.28 GFLOP at 8,192 tokens), to the pages' rounding of tokens/s to 1,024 in later releases."""
    table = load_set(NANO)
    assert len(table.rows) == 21
    per_token = _bridge_flops_per_token("nemotron-3-nano-30b-a3b", 8192)
    assert per_token / 1e9 == pytest.approx(22.278, abs=0.005)
    assert _rows_at_page_flops(table, {"nemotron-3-nano-30b-a3b": per_token}, page_rel=0.015) == 20  # the card: none
    _every_row_projects(table)


def test_the_nemotronh_step_time_table_and_its_examples_project():
    """v25.05's table: seven sizes of one recipe (TP 8, GBS 3 x GPUs), then the three later READMEs' example runs."""
    table = load_set(NEMOTRONH)
    rows = table.rows
    assert [r.published for r in rows[:7]] == [15.119, 15.058, 15.496, 15.892, 15.586, 15.678, 15.723]
    for r in rows[:7]:
        assert r.overrides["global_batch"] == 3 * r.gpus and r.layout["tp"] == 8
    assert all("WORKED EXAMPLE" in r.note for r in rows[7:])
    _every_row_projects(table)
    results = validate_set(table)
    # weak scaling: the published step grows 4% from 32 to 2,048 GPUs; so may the projection, not more than 6%
    steps = [r.predicted for r in results[:7]]
    assert max(steps) / min(steps) < 1.06, steps


def test_the_super_and_lightning_rows_carry_the_pages_throughput_and_every_one_projects():
    """Nemotron 3 Super (latent MoE, two MTP depths) and Nemotron 3.5 Lightning (Nano with MTP): Megatron-LM's FLOPs
    per token of the presets' shapes (84.727 and 28.147 GFLOP at 8,192 tokens) are what the pages' TFLOP/s over
    tokens/s give, to their rounding of tokens/s to 1,024 (the card, unrounded, to 0.1%)."""
    table = load_set(SUPER)
    assert len(table.rows) == 32
    per_token = {
        name: _bridge_flops_per_token(name, 8192)
        for name in ("nemotron-3-super-120b-a12b", "nemotron-3.5-lightning-30b-a3b")
    }
    assert per_token["nemotron-3-super-120b-a12b"] / 1e9 == pytest.approx(84.727, abs=0.01)
    assert per_token["nemotron-3.5-lightning-30b-a3b"] / 1e9 == pytest.approx(28.147, abs=0.01)
    assert _rows_at_page_flops(table, per_token, page_rel=0.02) >= 31
    _every_row_projects(table)
