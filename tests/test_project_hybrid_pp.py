"""A hybrid model's pipeline stages, each with its own slice of the pattern (Megatron-Core's
hybrid_layer_allocation.select_pipeline_segment): a stage holding the attention blocks costs what they cost, not
the model's mean block [27 s29 hybridpp]."""

from __future__ import annotations

import pytest
from test_project_hybrid import MAMBA, _plain  # one definition of the small model and its mixer

from commlens.project import InfeasibleLayoutError, ParallelLayout, project
from commlens.project.layout import resolve
from commlens.project.memory import stage_hybrid_blocks, stage_memory, stage_parameters
from commlens.topology import load_topology
from commlens.workload import Workload
from commlens.workload.spec import workload_from_dict

H100 = load_topology("dgx-h100")
MOE = {"experts": 16, "top_k": 2, "expert_ffn_hidden": 1024}


def _hybrid(pattern: str, seq_len: int = 16384, **kw: object) -> Workload:
    data = _plain(layers=len(pattern), seq_len=seq_len, position_embedding="none")
    data.update({"hybrid": {"pattern": pattern, **MAMBA}, **kw})
    return workload_from_dict(data)


def _layout(pp: int, vpp: int = 1, **kw: object) -> ParallelLayout:
    fields = {"tp": 2, "sp": True, "pp": pp, "vpp": vpp, "zero": 1, "recompute": "none"}
    return ParallelLayout.model_validate({**fields, "framework": "megatron-core", **kw})


def test_each_stage_takes_its_slice_of_the_pattern_in_megatron_cores_order() -> None:
    w = _hybrid("MMEE**--", moe=MOE)
    # one chunk a stage: the next stage_layers symbols; with VPP, PP x VPP even segments, segment v x PP + rank to
    # stage rank as its chunk v
    assert stage_hybrid_blocks(w, resolve(_layout(2), w, 32, 8)) == ["MMEE", "**--"]
    assert stage_hybrid_blocks(w, resolve(_layout(2, 2), w, 32, 8)) == ["MM**", "EE--"]
    assert stage_hybrid_blocks(w, resolve(_layout(4), w, 64, 8)) == ["MM", "EE", "**", "--"]


def test_a_stage_of_attention_blocks_sets_the_pace_at_long_sequences() -> None:
    split = project(_hybrid("MMMM****", seq_len=32768), H100, _layout(2), 32, check_memory=False)
    mixed = project(_hybrid("M*M*M*M*", seq_len=32768), H100, _layout(2), 32, check_memory=False)
    mamba, attention = (s["compute"] + s["memory_bound"] for s in split.stages)
    # at 32K tokens a sequence an attention block's quadratic core outweighs a Mamba block's linear scan
    assert attention > 1.5 * mamba
    assert split.pace_stage == 1
    # the same blocks, spread so each stage holds half of each: a faster pipeline, whose stages cost what the
    # split one's cost on average
    assert mixed.step_time_s < split.step_time_s
    spread = [s["compute"] + s["memory_bound"] for s in mixed.stages]
    assert sum(spread) == pytest.approx(mamba + attention, rel=1e-3)


def test_the_stages_share_out_the_model_s_work() -> None:
    # the layers' GPU work does not depend on how the pipeline cuts them: the compute and memory-bound seconds
    # summed over the stages of PP 2 and PP 4 are the single stage's (the ends, the embedding and the head, move
    # with the first and last stage). What is exposed of TP is not additive: each stage's own blocks hide it.
    w = _hybrid("MM-*MM-*MMMM****")
    one = project(w, H100, _layout(1), 16, check_memory=False)
    for pp in (2, 4):
        cut = project(w, H100, _layout(pp), 16 * pp, check_memory=False)
        for part in ("compute", "memory_bound"):
            assert sum(s[part] for s in cut.stages) == pytest.approx(one.stages[0][part], rel=1e-6), part


def test_a_stage_holds_its_own_blocks_parameters_and_activations() -> None:
    w = _hybrid("MMMM****")
    r = resolve(_layout(2), w, 32, 8)
    params = stage_parameters(w, r)
    mixer = w.hybrid.mixer_parameters(w.hidden) if w.hybrid else 0
    attention = sum(k * n for _, k, n in w.attention_linears(1))
    norm = w.hidden
    embed = w.vocab * w.hidden
    assert params[0][0] == pytest.approx((4 * (mixer + norm) + embed) / 2)
    assert params[1][0] == pytest.approx((4 * (attention + norm) + norm + embed) / 2)
    mem = stage_memory(w, _layout(2), r)
    spread = stage_memory(_hybrid("M*M*M*M*"), _layout(2), r)
    # the first stage (no head) keeps its four blocks' activations: four Mamba blocks' (in_proj's wide output, the
    # scan's) where the pattern is split, two of each where it is spread
    only_mamba, half = mem[0]["activations"], spread[0]["activations"]
    assert only_mamba != pytest.approx(half, rel=0.05)
    assert mem[0]["weights"] < spread[0]["weights"] if mixer < attention else mem[0]["weights"] > spread[0]["weights"]


# [27 s29 mambacp] Megatron-Core's Mamba context parallelism: all-to-alls from sequence shards to head shards


def _cp(cp: int, tp: int = 1, **kw: object) -> ParallelLayout:
    fields = {"tp": tp, "sp": tp > 1, "cp": cp, "pp": 1, "zero": 1, "recompute": "none", **kw}
    return ParallelLayout.model_validate({**fields, "framework": "megatron-core"})


def test_a_hybrid_of_attention_and_mlp_blocks_exchanges_what_the_transformer_does_under_cp() -> None:
    plain = workload_from_dict(_plain(layers=8, seq_len=16384, position_embedding="none"))
    a = project(plain, H100, _cp(4), 32, check_memory=False)
    b = project(_hybrid("*-" * 8), H100, _cp(4), 32, check_memory=False)
    # the K/V exchange runs in the attention blocks only: one of the two blocks a transformer layer splits into
    assert b.breakdown["cp_comm"] + b.overlapped_s["cp_comm"] == pytest.approx(
        a.breakdown["cp_comm"] + a.overlapped_s["cp_comm"], rel=1e-9
    )
    assert b.kernels["attention"] == pytest.approx(a.kernels["attention"], rel=1e-9)


def test_mamba_blocks_under_cp_wait_for_their_all_to_alls() -> None:
    mamba = _hybrid("MMMM", seq_len=32768)
    half = _hybrid("MMMM", seq_len=16384)
    cp2 = project(mamba, H100, _cp(2), 16, check_memory=False)
    cp1 = project(half, H100, _cp(1), 8, check_memory=False)
    # the scan over the whole sequence with half the heads is the work of half the sequence with all of them
    assert cp2.kernels["ssm"] == pytest.approx(cp1.kernels["ssm"], rel=1e-9)
    # and the all-to-alls, not hidden: no attention to run beside them
    assert cp2.breakdown["cp_comm"] > 0
    assert cp2.overlapped_s["cp_comm"] == 0.0
    assert cp1.breakdown.get("cp_comm", 0.0) == 0.0
    # more Mamba blocks, more all-to-alls: the exchange grows with the Mamba share of the blocks
    mixed = project(_hybrid("MM**", seq_len=32768), H100, _cp(2), 16, check_memory=False)
    only_attn = project(_hybrid("****", seq_len=32768), H100, _cp(2), 16, check_memory=False)
    assert mixed.breakdown["cp_comm"] > only_attn.breakdown["cp_comm"]


def test_mamba_cp_repeats_the_group_state_where_a_rank_holds_fewer_groups_than_cp() -> None:
    from commlens.project.kernels import mamba_cp_a2a_bytes, mamba_cp_shape

    hy = _hybrid("M").hybrid
    assert hy is not None  # 64 heads, 8 groups
    assert mamba_cp_shape(hy, 2, 2) == (2, 16.0, 2.0, 1.0)  # 4 groups a TP rank over CP 2
    assert mamba_cp_shape(hy, 2, 8) == (8, 4.0, 1.0, 2.0)  # 4 groups a TP rank, each on 2 of the 8 ranks
    z, x, b, c, dt, y = mamba_cp_a2a_bytes(hy, 2, 8, 1000.0)
    assert z == x == y == 2.0 * 1000 * 64 * 64 / 2
    assert b == c == 2.0 * 1000 * 4 * 2 * 128  # the repeated groups' B and C
    assert dt == 2.0 * 1000 * 32
    assert mamba_cp_a2a_bytes(hy, 2, 1, 1000.0) == ()


def test_an_e_block_exchanges_nothing_under_cp() -> None:
    w = _hybrid("MEME", seq_len=16384, moe=MOE)
    p = project(w, H100, _cp(2, ep=2), 16, check_memory=False)
    only_m = project(_hybrid("MM", seq_len=16384), H100, _cp(2), 16, check_memory=False)
    # two Mamba blocks' all-to-alls in both: the E blocks add none (stages hold the same two Mamba blocks)
    assert p.breakdown["cp_comm"] == pytest.approx(only_m.breakdown["cp_comm"], rel=1e-9)


@pytest.mark.parametrize(
    ("mamba", "tp", "cp", "message"),
    [
        ({"mamba_heads": 24, "mamba_groups": 8}, 1, 16, "cp 16 does not divide the 24 Mamba heads of a TP rank"),
        ({"mamba_heads": 48, "mamba_groups": 6}, 1, 4, "cp 4 and the 6 Mamba groups of a TP rank"),
    ],
)
def test_cp_that_megatron_core_s_mamba_cp_refuses_is_refused(
    mamba: dict[str, int], tp: int, cp: int, message: str
) -> None:
    w = _hybrid("M*M-", hybrid={"pattern": "M*M-", **{**MAMBA, **mamba}})
    with pytest.raises(InfeasibleLayoutError, match=message):
        project(w, H100, _cp(cp, tp), tp * cp * 4, check_memory=False)


# [27 s29 hybridpipe] a pattern cut into pipeline segments by '|', as Megatron-Core's hybrid_layer_pattern is


def test_a_pattern_s_separators_give_each_stage_its_segments() -> None:
    w = _hybrid("MM|MM*M-M", layers=8)
    r = resolve(_layout(2), w, 32, 8)
    assert r.stage_layers == (2, 6)
    assert stage_hybrid_blocks(w, r) == ["MM", "MM*M-M"]
    moe = _hybrid("MM|EE|**|--", layers=8, moe=MOE)
    assert moe.moe_layer_flags == [c == "E" for c in "MMEE**--"]
    assert stage_hybrid_blocks(moe, resolve(_layout(2, 2), moe, 32, 8)) == ["MM**", "EE--"]


def test_even_separators_project_what_the_even_split_does() -> None:
    cut = project(_hybrid("M*M-|M*M-", layers=8), H100, _layout(2), 32, check_memory=False)
    even = project(_hybrid("M*M-M*M-"), H100, _layout(2), 32, check_memory=False)
    assert cut.step_time_s == even.step_time_s
    assert cut.memory_bytes_per_gpu == even.memory_bytes_per_gpu


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (_layout(4), "cuts it into 2 pipeline segments; PP 4 x VPP 1 needs 4"),
        (_layout(1), "cuts it into 2 pipeline segments; PP 1 x VPP 1 needs 1"),
        (_layout(2, first_stage_layers=3), "first_stage_layers: the hybrid pattern's '|' separators already split"),
    ],
)
def test_separators_that_do_not_fit_the_layout_are_refused(layout: ParallelLayout, message: str) -> None:
    with pytest.raises(InfeasibleLayoutError, match=message):
        project(_hybrid("MM|MM*M-M", layers=8), H100, layout, 16 * layout.pp, check_memory=False)
