"""Mixtral 8x22B on 64 MI355X (amd-instinct-primus-8node, memory.yaml amd-mi355x-mixtral-8x22b-fits-288gb), checked
term by term against the stack the run used (issue 27, session 9): AMD Primus fd1eeab's config on its Megatron-LM
(d3528a2) with Transformer Engine for ROCm. The layout is written here, not read from the row, so that a later
setting recorded on the row (a recompute count the source gives) does not break what these tests pin: what
Megatron-Core keeps at the config's own settings (MBS 2, GBS 128, no recompute, PP 4, VPP 2, EP 8, DP 16)."""

import pytest

from commlens.project import ParallelLayout
from commlens.project.layout import resolve
from commlens.project.memory import activation_parts, in_flight, stage_memory, stage_parameters
from commlens.workload import load_workload

MI355X_BYTES = 288 * 2**30  # 288 GiB of HBM3E; torch shows 287.98 GiB (the 3.092e11 B of memory.yaml)
LAYOUT = {
    "tp": 1,
    "sp": False,
    "cp": 1,
    "pp": 4,
    "vpp": 2,
    "ep": 8,
    "dp": 16,
    "zero": 1,
    "recompute": "none",
    "grad_reduce_bytes": 2,
    "framework": "megatron-core",
}


def _mixtral():
    w = load_workload("mixtral-8x22b", {"seq_len": 8192, "global_batch": 128, "micro_batch": 2, "precision": "bf16"})
    layout = ParallelLayout.model_validate(LAYOUT)
    return w, layout, resolve(layout, w, 64, 8)


def _megatron_peak_chunks(rank, pp, vpp, micro_batches):
    """Chunk-micro-batches alive at rank's peak, in the op order of Megatron-Core's interleaved 1F1B
    (megatron/core/pipeline_parallel/schedules.py @d3528a2, get_pp_rank_microbatches: warm-up
    2 (p - r - 1) + (v - 1) g forwards, g = microbatch_group_size_per_vp_stage, default p in
    model_parallel_config.py; all in warm-up when that reaches m v; then a forward and a backward in turn, then the
    cool-down backwards)."""
    total = micro_batches * vpp
    warmup = 2 * (pp - rank - 1) + (vpp - 1) * pp
    warmup = min(warmup, total)
    ops = ["F"] * warmup
    for _ in range(total - warmup):
        ops += ["F", "B"]
    ops += ["B"] * (total - ops.count("B"))
    live = peak = 0
    for op in ops:
        live += 1 if op == "F" else -1
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize(("pp", "vpp", "micro_batches"), [(4, 2, 4), (4, 2, 8), (4, 2, 32), (8, 4, 8), (2, 2, 6)])
def test_in_flight_is_megatrons_interleaved_warm_up(pp, vpp, micro_batches):
    # stage units: chunk-micro-batches / v (each chunk holds 1/v of the stage's layers)
    for rank in range(pp):
        assert in_flight(rank, pp, vpp, micro_batches) * vpp == _megatron_peak_chunks(rank, pp, vpp, micro_batches)


def test_row_holds_every_chunk_micro_batch_on_the_first_two_stages():
    # 4 micro-batches per pipeline x VPP 2 = 8 chunk-micro-batches; ranks 0 and 1 run them all in warm-up
    _, _, r = _mixtral()
    assert r.micro_batches == 4
    assert [in_flight(i, 4, 2, 4) for i in range(4)] == [4.0, 4.0, 3.5, 2.5]


def test_moe_layer_keeps_the_tensors_megatron_core_saves():
    # per token, bf16, TP 1 (h 6144, head 128, 48 query and 8 KV heads, experts' FFN 16384, top-2):
    # TE LayerNormLinear (QKV) and TENorm (pre-MLP) keep their inputs; the QKV GEMM and the router keep the norms'
    # outputs; flash attention keeps Q, K, V, its output (also the output projection's input) and fp32 LSE;
    # per routed copy the fc1 GroupedLinear keeps its input, the fused weighted SwiGLU (bias_swiglu_fusion)
    # only its input (fc1's output), fc2 its input (the SwiGLU output); the unpermute after the all-to-all keeps
    # nothing (probs are applied in the SwiGLU), nor does the index_select permute
    w, layout, _ = _mixtral()
    h, fe, d, a, g, k = 6144, 16384, 128, 48, 8, 2
    parts = activation_parts(w, layout, 1, moe=True)
    assert parts["norm_inputs"] == 2 * 2 * h
    assert parts["layernorm"] == 2 * 2 * h
    assert parts["attention"] == 2 * d * (a + 2 * g) + 2 * a * d + 4 * a
    assert parts["moe"] == k * (2 * h + 2 * 2 * fe)
    assert parts["moe_act"] == k * 2 * fe
    assert sum(parts.values()) == 299_200


def test_expert_optimizer_is_sharded_over_the_expert_data_parallel_group():
    # the distributed optimizer shards dense parameters over DP 16 and experts over DP x TP / (EP x ETP) = 2
    w, layout, r = _mixtral()
    dense, experts = stage_parameters(w, r)[0]
    stage = stage_memory(w, layout, r)[0]
    assert stage["optimizer"] == pytest.approx(12 * (dense / 16 + experts / 2))
    assert stage["gradients"] == pytest.approx(2 * (dense + experts))


def test_config_settings_cannot_fit_even_without_allocator_or_transient_terms():
    # model states plus the kept activations alone exceed the GPU: the refusal does not rest on fragmentation,
    # runtime memory or the layer in backward, so no such term can make the run's published settings fit
    w, layout, r = _mixtral()
    stage = stage_memory(w, layout, r)[0]
    tokens = w.micro_batch * w.seq_len
    kept = in_flight(0, 4, 2, 4) * 14 * tokens * sum(activation_parts(w, layout, 1, moe=True).values())
    floor = stage["weights"] + stage["gradients"] + stage["optimizer"] + kept
    assert floor > MI355X_BYTES
    assert floor == pytest.approx(323.6e9, rel=1e-3)


def test_with_amds_multi_node_recompute_the_row_fits_the_mi355x():
    """A run that trained fits: with the recompute AMD's multi-node command gives (1 layer of each 7-layer chunk, block)
    stage 1 drops under the GPU's 288 GiB, where the config's none needs more than the GPU has."""
    w, _, _ = _mixtral()
    layout = ParallelLayout.model_validate(
        {**LAYOUT, "recompute": "full", "recompute_layers": 1, "recompute_method": "block"}
    )
    peak = max(s["reserved"] for s in stage_memory(w, layout, resolve(layout, w, 64, 8)))
    none = max(s["reserved"] for s in stage_memory(*_mixtral()))
    assert peak < MI355X_BYTES < none
