"""DeepSeek-V3's group-limited (node-limited) routing in the EP transfers [27 s11 grouplim].

DeepSeek-V3 sends a token's 8 experts from at most 4 of 8 groups of 32 consecutive experts (report arXiv 2412.19437
Sec. 2.1.2; Megatron-Core moe_router_num_groups 8 / moe_router_group_topk 4, moe_utils.group_limited_topk, applied
after moe_router_force_load_balancing's random logits). A per-destination dispatcher (DeepEP, HybridEP) sends one
copy per destination node, so the limit cuts its bytes across nodes; NCCL's all-to-all sends one copy per expert
and is unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import deepep_share, destination_reached, run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload
from commlens.workload.spec import WorkloadError

E, K, GROUPS, TOPK_GROUPS = 256, 8, 8, 4
NO_LIMIT = {"moe.router_groups": None, "moe.group_topk": None}


def _megatron_group_limited(tokens: int, seed: int = 0) -> np.ndarray:
    """Megatron-Core's group_limited_topk on force-balanced (standard normal) logits through DeepSeek-V3's sigmoid:
    group score = the sum of each group's top K / M scores, the M best groups kept, then the top K of their experts.
    Returns the chosen expert indices, one row per token."""
    scores = 1.0 / (1.0 + np.exp(-np.random.default_rng(seed).standard_normal((tokens, E))))
    per_group = np.sort(scores.reshape(tokens, GROUPS, -1), axis=-1)[..., -(K // TOPK_GROUPS) :].sum(-1)
    kept = np.argsort(-per_group, axis=1)[:, :TOPK_GROUPS]
    mask = np.zeros((tokens, GROUPS), dtype=bool)
    np.put_along_axis(mask, kept, True, axis=1)
    masked = np.where(np.repeat(mask, E // GROUPS, axis=1), scores, -np.inf)
    return np.argsort(-masked, axis=1)[:, :K]


def _distinct(chosen: np.ndarray, dests: int) -> float:
    where = chosen // (E // dests)
    return float(np.mean([len(set(row)) for row in where.tolist()]))


def test_the_deepseek_v3_preset_carries_its_group_limit():
    moe = load_workload("deepseek-v3-like").moe
    assert moe is not None and (moe.router_groups, moe.group_topk) == (GROUPS, TOPK_GROUPS)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"moe.router_groups": None}, "set both"),
        ({"moe.router_groups": 7}, "does not divide"),
        ({"moe.group_topk": 9}, "exceeds"),
        ({"moe.router_groups": 256, "moe.group_topk": 4}, "fewer than top_k"),
    ],
)
def test_a_group_limit_that_megatron_cannot_run_is_refused(change: dict, field: str):
    with pytest.raises(WorkloadError, match=field):
        load_workload("deepseek-v3-like", change)


@pytest.mark.parametrize("dests", [2, 4, 8])
def test_nodes_of_whole_groups_are_reached_as_megatrons_router_reaches_them(dests: int):
    """Destinations of whole groups: a node is reached when it holds a chosen group; within 2% of a Monte Carlo of
    the router itself (1.97 / 3.12 / 3.96 nodes), under routing without the limit (1.99 / 3.61 / 5.30)."""
    modelled = dests * destination_reached(E, K, dests, GROUPS, TOPK_GROUPS)
    assert modelled == pytest.approx(_distinct(_megatron_group_limited(4000), dests), rel=0.02)
    assert modelled < dests * destination_reached(E, K, dests)


@pytest.mark.parametrize("dests", [16, 32, 64])
def test_gpus_within_a_group_are_reached_between_the_router_and_no_limit(dests: int):
    """Destinations within a group (each chosen group gives its quota of K / M experts): fewer GPUs than routing
    without the limit, and within 7% of the router's Monte Carlo (5.72 / 6.85 / 7.49 at 16 / 32 / 64)."""
    modelled = dests * destination_reached(E, K, dests, GROUPS, TOPK_GROUPS)
    assert modelled < dests * destination_reached(E, K, dests)
    assert modelled == pytest.approx(_distinct(_megatron_group_limited(4000), dests), rel=0.07)


def test_deepseeks_own_eight_nodes_take_one_copy_in_two_across_the_network():
    """EP 64 over 8 nodes, one group a node (DeepSeek-V3's own layout): a token reaches 4 nodes, its own half the
    time, so 3.5 of its 7 remote copies cross: share 0.5 (0.66 routed uniformly)."""
    assert deepep_share(E, K, 8, 64, "uniform", GROUPS, TOPK_GROUPS) == pytest.approx(0.5)
    assert deepep_share(E, K, 8, 64, "uniform") == pytest.approx(8 * (1 - math.comb(224, 8) / math.comb(256, 8)) / 8)


def _row(table: str, workload: str, dispatcher: str, topology: str):
    t = load_set(table)
    return next(
        r
        for r in t.rows
        if r.workload == workload
        and r.topology == topology
        and ParallelLayout.model_validate(r.layout).moe_dispatcher == dispatcher
    )


def _ep_comm(row, extra: dict | None = None) -> float:
    w = load_workload(row.workload, {**row.overrides, **(extra or {})})
    p = run(Scenario(w, load_topology(row.topology), ParallelLayout.model_validate(row.layout), row.gpus))
    return p.breakdown["ep_comm"]


def test_deepseeks_h800_run_spends_less_on_ep_transfers_with_its_node_limit():
    row = _row("deepseek-v3-h800", "deepseek-v3-like", "deepep", "deepseek-h800")
    assert _ep_comm(row) < 0.9 * _ep_comm(row, NO_LIMIT)


def test_nccls_all_to_all_is_untouched_by_the_limit():
    """NCCL's all-to-all sends every routed copy (megatron-bridge-perf-25.09's B200 DeepSeek-V3 row, alltoall)."""
    row = _row("megatron-bridge-perf-25.09", "deepseek-v3-like", "alltoall", "b200")
    assert _ep_comm(row) == _ep_comm(row, NO_LIMIT)
