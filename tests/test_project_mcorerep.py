"""Megatron-Core's own MoE ablations against the model's physics [27 s11 mcorerep].

Each published ablation whose configuration is stated is replayed as the same switch on the model's layout, and the
modelled change is held to the published one. Where the model misses, the test is a strict xfail naming the gap: it
fails the day the model starts to agree, so the mark has to be lifted then.

Sources:
- [GUIDE] NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md
  (read at 1d9edcf8c7c16c66ca6acc3801265b21588116a3), its table 'Summary and Outlook': DeepSeek-V3, 256 GB200, MXFP8,
  TFLOP/s per GPU after each optimization in the order they were made; the layout from the same directory's
  deepseek-v3-gb200-reproduce-guide.md (read at 32ea0afdbf6bd87380a8cb0b9eafb4eda18a9fd9): TP1 PP8 EP32 (VPP 4 from
  --pipeline-model-parallel-layout 'Et|(tt|)*30L': 32 virtual stages, per rank 7/8/8/8/8/8/8/6 layers), MBS 1,
  GBS 2048, sequence 4096, no MTP, BF16 Adam moments, --fp8-param-gather; the baseline recomputed 'mlp up_proj'.
- [REPORT] 'Scalable Training of Mixture-of-Experts Models with Megatron Core', arXiv 2603.07685v1: Table 7 (HybridEP
  and NCCL all-to-all dispatch/combine latency, hidden 7168, sequence 4096, 256 experts), Sec. 4.2.3 and 9.2.2 (EP
  all-to-all share of DeepSeek-V3's H100 step with and without the 1F1B overlap).

The guide's steps are not isolated switches: between them the authors also fused kernels and bound CPUs (its rows
'Fuse torch.zeros ... Permute', 'Router fusion', 'CPU-side optimization', 'PDL ... swizzle'), which no layout field
states. A modelled gain within 3 points of the published one is therefore as close as one switch can be read; the
misses below are 6-10 points, far beyond that.
"""

from __future__ import annotations

import pytest

from commlens.model.backends import HYBRIDEP_ALL_TO_ALL, nccl_predict
from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import deepep_share, hybridep_probs_factor, run
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

GRAPHS = ("attn", "moe_router", "moe_preprocess")

# [GUIDE] the final configuration (970 TFLOP/s); each ablation below changes it back one switch at a time
_GUIDE = {
    "tp": 1,
    "sp": False,
    "cp": 1,
    "pp": 8,
    "vpp": 4,
    "ep": 32,
    "dp": 32,
    "zero": 1,
    "recompute": "selective",
    "recompute_modules": ["moe_act", "mlp"],
    "stage_layers": [7, 8, 8, 8, 8, 8, 8, 6],
    "framework": "megatron-core",
    "fp8_recipe": "mxfp8",
    "optimizer_state_bytes": 8,
    "fp8_param_gather": True,
    "moe_dispatcher": "hybridep",
    "cuda_graphs": True,
    "cuda_graph_scope": list(GRAPHS),
}
_NO_GRAPHS = {"cuda_graphs": False, "cuda_graph_scope": None}
_UP_PROJ = {"recompute_modules": ["mlp", "mla_up_proj"]}


def _guide_tokens(**change: object) -> float:
    w = load_workload("deepseek-v3-like", {"seq_len": 4096, "global_batch": 2048, "micro_batch": 1, "precision": "fp8"})
    layout = ParallelLayout.model_validate({**_GUIDE, **change})
    return run(Scenario(w, load_topology("gb200-nvl72"), layout, 256)).tokens_per_s


# (name, the layout before, the layout after, published TFLOP/s before, after): same model and sequence, so the
# TFLOP/s ratio is the throughput ratio
_ABLATIONS = [
    pytest.param(
        "alltoall -> DeepEP",
        {"moe_dispatcher": "alltoall", **_UP_PROJ, **_NO_GRAPHS},
        {"moe_dispatcher": "deepep", **_UP_PROJ, **_NO_GRAPHS},
        540.00,
        566.07,
        id="deepep",
        marks=pytest.mark.xfail(
            strict=True,
            reason="modelled -15.1% against +4.8% since DeepEP inside the rack runs at its measured rate [27 s11 "
            "deepepnv] (DeepEP's GB200 rows in docs/README_Hybrid-EP.md, 24 SMs: 0.56 of the link at EP 8, 0.32 at EP "
            "24 and beyond, as the guide's ~400 / 190 GB/s at EP32); +10.8% before: the guide says the switch brought "
            "no communication gain and its +4.8% was DeepEP's fused preprocessing on the host, which is not priced",
        ),
    ),
    pytest.param(
        "no MLA up-projection recompute",
        {"moe_dispatcher": "deepep", **_UP_PROJ, **_NO_GRAPHS},
        {"moe_dispatcher": "deepep", **_NO_GRAPHS},
        566.07,
        610.71,
        id="up_proj",
        marks=pytest.mark.xfail(
            strict=True,
            reason="the model prices recomputing MLA's up-projections as their GPU time (+0.5% to drop it); the guide "
            "measured +7.9% and names the recompute's host overhead (its many small kernels on the Grace host) as "
            "the cost: an eager-path host cost the model leaves hidden under GPU time",
        ),
    ),
    pytest.param(
        "partial CUDA graphs (attn, moe_router, moe_preprocess)",
        {"moe_dispatcher": "deepep", **_NO_GRAPHS},
        {"moe_dispatcher": "deepep"},
        610.71,
        663.27,
        id="cuda_graphs",
        marks=pytest.mark.xfail(
            strict=True,
            reason="modelled +1.9% against +8.6% published (the report, Sec. 4.3.6: 'about 10%' on DeepSeek-V3 "
            "GB200): the model's host launches of attention, router and dispatch preprocessing are mostly hidden "
            "under GPU time, where the guide's traces show the Grace host behind the GPU",
        ),
    ),
    pytest.param(
        "DeepEP -> HybridEP",
        {"moe_dispatcher": "deepep"},
        {},
        829.93,
        943.56,
        id="hybridep",
        marks=pytest.mark.xfail(
            strict=True,
            reason="modelled +32.8% against +13.7% since both run at their measured rates inside the rack [27 s11 "
            "deepepnv] (+3.5% before, both at the link's rate): the DeepEP step it starts from is 15% slow in the "
            "model for want of its host-side preprocessing gain (the deepep ablation), which this step gives back",
        ),
    ),
]


@pytest.mark.parametrize(("name", "before", "after", "pub_before", "pub_after"), _ABLATIONS)
def test_a_guide_ablation_gains_what_the_guide_measured(
    name: str, before: dict, after: dict, pub_before: float, pub_after: float
):
    modelled = _guide_tokens(**after) / _guide_tokens(**before) - 1.0
    published = pub_after / pub_before - 1.0
    assert modelled == pytest.approx(published, abs=0.03), (
        f"{name}: modelled {modelled:+.1%}, published {published:+.1%}"
    )


def test_the_guide_ablations_all_point_the_published_way():
    """Whatever their size, each switch the guide made is a gain in the model too."""
    for p in _ABLATIONS:
        if p.id == "deepep":  # [27 s11 deepepnv] DeepEP at its measured ~0.3-0.56 of the rack's link: a loss
            continue  # in the model; the guide's gain was host preprocessing, which is not priced (its xfail)
        _, before, after, _, _ = p.values
        assert _guide_tokens(**after) > _guide_tokens(**before), p.id


# [REPORT] Table 7: microseconds per dispatch and combine, 4096 tokens per GPU of hidden 7168 to top-8 of 256 experts,
# in 16 bits: GPUs per EP group -> (HybridEP dispatch, all-to-all dispatch, HybridEP combine, all-to-all combine)
_TABLE7 = {
    "gb200-nvl72": {
        8: (391, 735, 353, 741),
        16: (578, 743, 527, 765),
        32: (612, 769, 646, 758),
        64: (675, 930, 744, 827),
    },
    "dgx-h100": {
        8: (661, 1265, 624, 1277),
        16: (1485, 5774, 1688, 5628),
        32: (3064, 8059, 3088, 7815),
        64: (4626, 9164, 4398, 8727),
    },
}


def _a2a_us(topology: str, ep: int, dispatcher: str) -> float:
    """The model's time of one of a layer's four EP transfers (step._layer_kinds' bytes, step._comm_s' collective)."""
    topo = load_topology(topology)
    per_host = topo.accelerators_per_node
    nodes = max(1, ep // per_host)
    domains = -(-nodes // max(1, topo.scale_up.domain_size // per_host))
    nbytes = 4096 * 8 * 7168 * 2.0
    op = "all_to_all"  # NCCL's
    if dispatcher == "hybridep":  # HybridEP's own kernels (step._ep_op)
        # [27 s11 grouplim] DeepSeek-V3's router: 8 groups of 32 experts, top-4 groups (the Model Zoo's DeepSeek-V3
        # config, --moe-router-num-groups 8 --moe-router-group-topk 4, which Table 7's runs would keep; not stated)
        nbytes *= deepep_share(256, 8, domains, ep, "uniform", 8, 4) * hybridep_probs_factor(256, 7168, domains, ep)
        op = HYBRIDEP_ALL_TO_ALL  # [27 s11 deepepnv] at its measured rate inside one NVLink domain
    return nccl_predict(topo, op, int(nbytes), nodes=nodes, ranks_per_host=min(per_host, ep)).time_s * 1e6


def _table7_cases() -> list:
    # [27 s11 a2aib] the NICs at their measured all-to-all share (backends.A2A_NIC_SHARE). [27 s11 grouplim] with
    # DeepSeek-V3's group-limited router (at most 4 of 8 groups a token) HybridEP over 8 H100 nodes is 4,668 us
    # (+1% / +6%; 6,175 us with routing uniform over the nodes, as HybridEP's own H100 table measures it at 6.1 ms),
    # over 4 nodes 3,182 us (+4% / +3%; 3,657 before). Within one NVLink domain the limit cuts a token's destination
    # GPUs too, where a GPU holds a whole group: GB200 EP 8 (32 experts a GPU) reaches 4 GPUs, not 5.3
    # [27 s11 deepepnv] HybridEP inside one NVLink domain at its own GB200 table's rate (backends.EP_KERNEL_NVLINK):
    # GB200 EP 8 dispatch 293 -> 322 us against 391 (-25.0% -> -17.6%; its strict xfail lifted), EP 16 471 -> 527,
    # EP 32 567 -> 677, EP 64 617 -> 745 us
    slow: dict[tuple[str, int, str, str], str] = {}
    cases = []
    for topology, rows in _TABLE7.items():
        for ep, us in rows.items():
            for i, (dispatcher, op) in enumerate(
                (("hybridep", "dispatch"), ("alltoall", "dispatch"), ("hybridep", "combine"), ("alltoall", "combine"))
            ):
                reason = slow.get((topology, ep, dispatcher, op))
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                cases.append(
                    pytest.param(
                        topology, ep, dispatcher, us[i], marks=marks, id=f"{topology}-ep{ep}-{dispatcher}-{op}"
                    )
                )
    return cases


@pytest.mark.parametrize(("topology", "ep", "dispatcher", "published_us"), _table7_cases())
def test_an_ep_transfer_takes_the_reports_measured_time(topology: str, ep: int, dispatcher: str, published_us: int):
    """The EP transfer the step charges (per-destination bytes for HybridEP, every routed copy for NCCL) within 25%
    of Table 7's latency."""
    assert _a2a_us(topology, ep, dispatcher) == pytest.approx(published_us, rel=0.25)


def _h100_dsv3_ep_share(overlap: bool) -> float:
    """[REPORT] Table 17 / Sec. 9.2: DeepSeek-V3 on 1,024 H100, TP2 PP8 EP64 VPP4, MBS 1, GBS 8192, DeepEP, recompute
    mlp, mla_up_proj, moe_act and layernorm, layout 'Et*3|(tt|)*29m|L' (per rank 9/8/8/8/8/8/6/6 and MTP). Its FP8 is
    blockwise, which the model has no recipe for: per-tensor current scaling stands in (the share is a ratio)."""
    w = load_workload(
        "deepseek-v3-like",
        {"seq_len": 4096, "global_batch": 8192, "micro_batch": 1, "precision": "fp8", "mtp_layers": 1},
    )
    layout = ParallelLayout.model_validate(
        {
            "tp": 2,
            "cp": 1,
            "pp": 8,
            "vpp": 4,
            "ep": 64,
            "etp": 1,
            "dp": 64,
            "recompute": "selective",
            "recompute_modules": ["mlp", "mla_up_proj", "moe_act", "layernorm"],
            "stage_layers": [9, 8, 8, 8, 8, 8, 6, 6],
            "framework": "megatron-core",
            "fp8_recipe": "current",
            "optimizer_state_bytes": 8,
            "moe_dispatcher": "deepep",
            "moe_a2a_overlap": overlap,
            "delay_wgrad_compute": overlap,
        }
    )
    p = run(Scenario(w, load_topology("dgx-h100"), layout, 1024))
    return p.breakdown["ep_comm"] / p.step_time_s


@pytest.mark.xfail(
    strict=True,
    reason="[27 s11 grouplim] the model books 28.2% of the step as EP time without the overlap (34.1% before): "
    "DeepSeek-V3's group-limited router sends a token to at most 4 of the 8 nodes (4.0 expected, 5.3 routed "
    "uniformly), so DeepEP's per-node copies across the network drop by a quarter; the report's 30-40% is of the "
    "same router (the Model Zoo's DeepSeek-V3 config keeps --moe-router-group-topk 4)",
)
def test_deepeps_all_to_all_is_a_third_of_the_h100_step_without_the_overlap():
    """[REPORT] Sec. 4.2.3: 'EP all-to-all communication can still account for 30-40% of iteration time' after
    DeepEP, for DeepSeek-V3 with EP64."""
    assert 0.30 <= _h100_dsv3_ep_share(False) <= 0.40


@pytest.mark.xfail(
    strict=True,
    reason="the model books 9.6% of the step as EP time under the 1F1B overlap: 3.1 points of waits in the paired "
    "passes, 2.6 of warm-up/cool-down passes it cannot pair and 3.9 of SM and HBM interference it charges the hidden "
    "transfers (5.6% without that); the report gives 'under 5%' exposed (a 93% overlap ratio) and puts DeepEP's "
    "20-SM carve-out in GEMM efficiency instead (about 20% slower GEMMs, Sec. 4.2.3). [27 s11 grouplim] 11.4% -> "
    "6.1% with DeepSeek-V3's group-limited router (the split above is of an earlier state)",
)
def test_the_1f1b_overlap_leaves_under_5_percent_of_the_h100_step_in_ep_transfers():
    assert _h100_dsv3_ep_share(True) < 0.05


def test_the_report_table_holds_the_runs_with_a_published_layout():
    table = load_set("megatron-core-moe-report-2026")
    assert table.metric == "tokens_per_s_per_gpu" and "2603.07685" in table.source
    got = [(r.workload, r.topology, r.gpus, r.published) for r in table.rows]
    assert got == [
        ("deepseek-v3-like", "gb200-nvl72", 256, 4020.0),
        ("deepseek-v3-like", "gb300-nvl72", 256, 4730.0),
        ("qwen3-235b-a22b", "gb300-nvl72", 128, 1556.0),
        ("qwen3-235b-a22b", "dgx-h100", 256, 2132.0),
    ]
    for r in table.rows:
        assert "Table 11" in r.note and "Table 20" in r.note and "[ZOO" in r.note
        assert r.overrides["seq_len"] in (4096, 131072)


def test_the_report_rows_project_within_20_percent():
    """Held out (nothing fitted): at the commit that added them, +6.2%, +11.1%, +3.9%, +10.3% (all optimistic, mean
    7.9%)."""
    rows = validate_set(load_set("megatron-core-moe-report-2026"))
    assert len(rows) == 4
    for r in rows:
        assert r.predicted is not None, r.refused
        assert abs(r.error) < 0.2, (r.workload, r.topology, r.error)
