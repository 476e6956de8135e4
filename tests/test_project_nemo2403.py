"""The NeMo 24.03 stack (NeMo v1.23.0 on Megatron-LM 240a8ef7 and Transformer Engine da30634a, 1.4.0dev): its
profile, and NeMo's long-sequence table, whose runs used that release's container, named with it."""

from __future__ import annotations

import pytest
from projectutil import long_sequence_run

from commlens.project.frameworks import framework
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def _llama2_7b(seq_len: int, gpus: int, **layout: object) -> tuple[dict[str, float], float]:
    return long_sequence_run("llama2-7b", "dgx-h100", seq_len, gpus, **layout)


def test_the_long_sequence_rows_name_the_release_their_container_ran():
    """Every row of the table says it ran the NeMo 24.03.01 container; its framework is that release's profile, which
    runs delayed scaling (Transformer Engine 1.x's only per-tensor recipe) where a layout names none, and the launcher's
    unfused bias-dropout-add."""
    table = load_set("nemo-long-context-cp")
    assert len(table.rows) == 9
    for row in table.rows:
        assert "NeMo 24.03.01 container" in row.note
        assert row.layout["framework"] == "nemo-24.03", row.overrides
    fw = framework("nemo-24.03")
    assert fw.fp8_recipe == "delayed" and not fw.fused.bias_dropout_add
    assert fw.attention_kernel("hopper") == "cudnn"  # TE da30634a picks FusedAttention (cuDNN) on sm90, CP included
    # the loss as Megatron-LM 240a8ef7 runs it: vocab_parallel_cross_entropy on logits.float(), the bytes every
    # Megatron profile counts (not torch's eager F.cross_entropy)
    assert fw.fused.cross_entropy
    no_recipe = _llama2_7b(4096, 4, tp=1, dp=4, zero=2, recompute="none", framework="nemo-24.03")
    delayed = _llama2_7b(4096, 4, tp=1, dp=4, zero=2, recompute="none", fp8_recipe="delayed", framework="nemo-24.03")
    current = _llama2_7b(4096, 4, tp=1, dp=4, zero=2, recompute="none", fp8_recipe="current", framework="nemo-24.03")
    assert no_recipe[1] == pytest.approx(delayed[1], rel=1e-9)
    assert no_recipe[1] < current[1]
    # 24.07 shipped Transformer Engine 1.8, delayed scaling too [27 s12 nemo2403]
    assert framework("nemo-24.07").fp8_recipe == "delayed"
    delayed_2407 = _llama2_7b(
        4096, 4, tp=1, dp=4, zero=2, recompute="none", fp8_recipe="delayed", framework="nemo-24.07"
    )
    assert _llama2_7b(4096, 4, tp=1, dp=4, zero=2, recompute="none", framework="nemo-24.07")[1] == pytest.approx(
        delayed_2407[1], rel=1e-9
    )


def test_transformer_engine_1_4_copies_chunks_every_ring_step():
    """TE da30634a's AttnFuncWithCP copies half the K/V (the steps fed by an earlier rank) or half of Q (the others)
    every forward ring step, and in the backward half the K/V, or halves of Q, the output and its gradient, and
    concatenates dK and dV every step: on average 1 B a query and 1 B a K/V element more forward, 3 and 4 more
    backward, besides the output correction and gradient adds of today's ring. The 256K row (TP 4, CP 8) pays them;
    the 16K row (no CP) projects as before."""
    from commlens.project.compute import stream_time_s
    from commlens.project.hardware import device_for

    shape = {"tp": 4, "sp": True, "cp": 8, "dp": 8, "zero": 2, "fp8_recipe": "delayed"}
    old, old_step = _llama2_7b(262144, 256, **shape, framework="nemo-24.03")
    new, new_step = _llama2_7b(262144, 256, **shape, framework="nemo-24.07")
    w = load_workload("llama2-7b", {"seq_len": 262144})
    tokens = 262144 / 8
    q = tokens * w.heads / 4 * w.v_head_dim
    kv = tokens * w.kv_heads_n / 4 * (w.qk_head_dim + w.v_head_dim)
    dev = device_for(load_topology("dgx-h100").accelerator.name)
    passes = w.layers * 2  # 16 sequences over DP 8: 2 micro-batches of one sequence per DP rank
    # selective recomputation redoes the attention core only, not the ring's ops
    extra = 7 * (stream_time_s(dev, 5.5 * q + 1.0 * kv) + stream_time_s(dev, 7.5 * q + 8.5 * kv))
    extra -= 7 * (stream_time_s(dev, 4.5 * q) + stream_time_s(dev, 4.5 * q + 4.5 * kv))
    assert old["cp_ring"] - new["cp_ring"] == pytest.approx(extra * passes, rel=1e-6)
    assert old_step > new_step
    short = {"tp": 2, "sp": True, "dp": 8, "zero": 2, "fp8_recipe": "delayed"}
    # without CP the two releases differ only by TE 1.8's amax all-reduce per autocast, which TE 1.4 does not run
    # that way (frameworks.yaml te_autocast_amax_reduction) [27 s16 fp8twins]: a few milliseconds a step
    old_short = _llama2_7b(16384, 16, **short, framework="nemo-24.03")[1]
    new_short = _llama2_7b(16384, 16, **short, framework="nemo-24.07")[1]
    assert old_short < new_short
    assert old_short == pytest.approx(new_short, rel=1e-3)
