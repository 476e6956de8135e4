"""FSDP's float8 all-gather (``fsdp_fp8_all_gather``; torchao's ``enable_fsdp_float8_all_gather``, set by torchtitan's
llama3_405b.toml at 3faaa1a and 9dec370): the Float8Linear weights are cast to fp8 before the all-gather and used as
gathered, so the gather moves 1 B a linear weight and the unsharded window holds 1 B, not a 16-bit copy and its fp8
cast; the embedding, the norms and the output projection stay in bf16."""

from __future__ import annotations

import pytest

from commlens.model.backends import nccl_predict
from commlens.project import ParallelLayout
from commlens.project.layout import resolve
from commlens.project.memory import stage_memory
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.topology import load_topology
from commlens.workload import load_workload

TOPO = load_topology("grand-teton-h100-96gb")
H, VOCAB, FFN, KV = 16384, 128256, 53248, 8 * 128  # llama3-405b: hidden, vocabulary, FFN, K/V width
LINEARS = 2 * H * H + 2 * H * KV + 3 * H * FFN  # one layer's Q, K, V, output and SwiGLU weights


def _two_d(fp8_gather: bool, precision: str = "fp8") -> Projection:
    """torchtitan's 405B on 128 H100s, FSDP 16 x TP 8, local batch 2, full AC (docs/performance.md at 3faaa1a)."""
    w = load_workload("llama3-405b", {"seq_len": 8192, "global_batch": 32, "micro_batch": 2, "precision": precision})
    layout = ParallelLayout(
        tp=8, sp=True, zero=3, recompute="full", compile=True, framework="torchtitan", fsdp_fp8_all_gather=fp8_gather
    )
    return run(Scenario(w, TOPO, layout, 128, check_memory=False))


def test_fsdp_float8_all_gather_moves_one_byte_a_linear_weight():
    """Resharded after forward, each layer is gathered for its forward and again before its backward: each gather
    moves half the bytes of the linears' weights; without fp8 GEMMs the setting changes nothing."""
    bf16, fp8 = _two_d(False), _two_d(True)
    gathered = [p.breakdown["dp_comm"] + p.overlapped_s["fsdp_gather"] for p in (bf16, fp8)]
    assert fp8.step_time_s < bf16.step_time_s
    half = nccl_predict(TOPO, "all_gather", int(LINEARS / 8), nodes=16, ranks_per_host=1).time_s  # 1 B, TP share
    assert gathered[0] - gathered[1] > 1.8 * 126 * half
    assert _two_d(True, "bf16").step_time_s == _two_d(False, "bf16").step_time_s


def _table5_stages(fp8_gather: bool) -> list[dict[str, float]]:
    """Table 5 1F1B (end-2024 benchmarks): FSDP 8 x TP 8 x PP 8, not resharded after forward under PP, so each
    stage keeps its whole gathered weights for the step."""
    w = load_workload("llama3-405b", {"seq_len": 8192, "global_batch": 256, "micro_batch": 4, "precision": "fp8"})
    layout = ParallelLayout(
        tp=8,
        sp=True,
        pp=8,
        zero=3,
        reshard_after_forward=False,
        recompute="full",
        stage_layers=(15, 16, 16, 16, 16, 16, 16, 15),
        framework="torchtitan",
        fsdp_fp8_all_gather=fp8_gather,
    )
    return stage_memory(w, layout, resolve(layout, w, 512, 8))


def test_gathered_float8_weights_hold_one_byte_and_the_embedding_two():
    """The first stage's unsharded weights: 15 layers' linears at 1 B, the embedding and norms at 2 B (per TP rank);
    the last's: the output projection and final norm at 2 B. Without the fp8 gather: every weight at 2 B plus its
    fp8 cast (3 B)."""
    fp8, bf16 = _table5_stages(True), _table5_stages(False)
    norms = 2 * H
    first = 15 * LINEARS / 8 + 2 * (VOCAB * H + 15 * norms) / 8
    last = 15 * LINEARS / 8 + 2 * (VOCAB * H + 15 * norms + H) / 8
    assert fp8[0]["weights"] == pytest.approx(first, rel=1e-6)
    assert fp8[-1]["weights"] == pytest.approx(last, rel=1e-6)
    assert bf16[0]["weights"] == pytest.approx(3 * (15 * (LINEARS + norms) + VOCAB * H) / 8, rel=1e-6)
    assert bf16[0]["total"] - fp8[0]["total"] > 12e9  # the 405B stage's window shrinks by about 12 GB
