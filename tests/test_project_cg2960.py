"""Held-out published table added in session 13 [27 s13 gpt20]: Megatron-Bridge's CUDA-graphs guide (PR #2960,
2f3ecca4) measured GPT-OSS-20B on 16 H100 eager and with TE-scoped graphs (attn, moe_router, moe_preprocess) in the
same recipe. Nothing in the model was fitted to it. The eager-minus-graphed difference is the host time the graphs
remove; the model prices a small part of it (docs/project-evidence.md [27 s13 gpt20])."""

from __future__ import annotations

import pytest

from commlens.project.layout import ParallelLayout
from commlens.project.validate import load_set, validate_set

TABLE = "megatron-bridge-cuda-graphs-2960"


def test_the_table_is_the_guides_gpt_oss_20b_pair():
    table = load_set(TABLE)
    assert table.metric == "step_time_s"
    assert "2f3ecca4860003ee6d6409e6a7ed608eb9cf1064" in table.source
    got = [(r.workload, r.topology, r.gpus, r.published) for r in table.rows]
    assert got == [("gpt-oss-20b", "dgx-h100", 16, 0.4935), ("gpt-oss-20b", "dgx-h100", 16, 0.395)]
    eager, graphed = table.rows
    assert (
        eager.overrides
        == graphed.overrides
        == {"seq_len": 4096, "global_batch": 4, "micro_batch": 1, "precision": "bf16"}
    )
    # the pair differs only in the graphs; EP 4 spans TP 2 x DP 2 (expert TP 1: MoE parallel folding)
    assert {k: v for k, v in graphed.layout.items() if k not in ("cuda_graphs", "cuda_graph_scope")} == eager.layout
    assert "cuda_graphs" not in eager.layout
    scope = ParallelLayout.model_validate(graphed.layout).cuda_graph_scope
    assert graphed.layout["cuda_graphs"] and scope == ("attn", "moe_router", "moe_preprocess")
    assert (eager.layout["tp"], eager.layout["ep"], eager.layout["etp"], eager.layout["dp"]) == (2, 4, 1, 2)
    assert eager.layout["recompute"] == "none" and eager.layout["moe_dispatcher"] == "alltoall"
    assert "467-520 ms" in eager.note and "391-399 ms" in graphed.note


def test_both_rows_project_and_the_graphs_shorten_the_step():
    eager, graphed = validate_set(load_set(TABLE))
    assert eager.predicted is not None, eager.refused
    assert graphed.predicted is not None, graphed.refused
    assert graphed.predicted < eager.predicted
    # measured at session 13 (7da697a + this table): 265.5 ms eager, 257.0 ms graphed, both optimistic
    assert eager.predicted < eager.published and graphed.predicted < graphed.published


@pytest.mark.xfail(
    strict=True,
    reason="[27 s13 gpt20] the graphs remove 98.5 ms (68-129 ms over the published ranges); the model's eager host "
    "launches price 8.5 ms of it: the x86 host time of an eager Megatron-Core MoE layer is not in the model",
)
def test_the_model_prices_the_host_time_the_graphs_remove():
    eager, graphed = validate_set(load_set(TABLE))
    assert eager.predicted is not None and graphed.predicted is not None
    modelled = eager.predicted - graphed.predicted
    published = eager.published - graphed.published
    assert modelled == pytest.approx(published, rel=0.2)
