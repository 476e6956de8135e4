"""Sliding-window attention (workload ``sliding_window``): gpt-oss attends over a 128-key causal band on every other
layer; those layers are priced at the band's FLOPs and at the rate cuDNN reaches on it (cudnn-frontend's gpt_oss
benchmark), the other layers as full causal attention."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, model_flops_per_step
from commlens.project.efficiency import attention_tflops
from commlens.project.hardware import device_for
from commlens.project.kernels import window_entries
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.project.validate import validate_tables
from commlens.topology import load_topology
from commlens.workload import WorkloadError, load_workload


def _gptoss(topology: str, overrides: dict[str, object] | None = None) -> Projection:
    """The 26.04.01 gpt-oss-120b layout on 64 GPUs: EP 8, MBS 4, selective recompute of layernorm and moe_act."""
    w = load_workload("gpt-oss-120b", {"global_batch": 1280, "micro_batch": 4, **(overrides or {})})
    lay = ParallelLayout(
        tp=1,
        sp=False,
        ep=8,
        zero=1,
        recompute="selective",
        recompute_modules=("layernorm", "moe_act"),
        grad_reduce_bytes=2,
        framework="nemo",
    )
    return run(Scenario(w, load_topology(topology), lay, 64, check_memory=False))


def test_preset_windows_every_other_layer():
    """config.json: sliding_window 128, layer_types alternating from a sliding layer 0; Megatron-Bridge: window_size
    (127, 0) and window_attn_skip_freq 2. 18 of the 36 layers attend over the window."""
    w = load_workload("gpt-oss-120b")
    assert w.sliding_window is not None
    assert (w.sliding_window.tokens, w.sliding_window.full_every) == (128, 2)
    assert w.window_layers == 18
    every = load_workload("gpt-oss-120b", {"sliding_window.full_every": 0})
    assert every.window_layers == 36
    assert load_workload("llama3-8b").window_layers == 0


def test_window_must_hold_a_key():
    with pytest.raises(WorkloadError, match="sliding_window.tokens"):
        load_workload("gpt-oss-120b", {"sliding_window.tokens": 0})


def test_band_entries_as_cudnn_frontend_counts_them():
    """A query sees min(i + 1, w) keys: w (w + 1) / 2 + (s - w) w entries a head; 16 times fewer than the causal
    triangle's s^2 / 2 at s 4096, w 128. cudnn-frontend's GB200 row (batch 2, 128 heads of 64, 0.207 ms forward at
    164 TFLOP/s) is that count at 4 FLOPs an entry and head-dimension element."""
    assert window_entries(4096, 128) == 128 * 129 / 2 + (4096 - 128) * 128 == 516160
    assert window_entries(4096, 0) == window_entries(4096, 4096) == 4096 * 4096 / 2
    gb200_flops = 2 * 128 * window_entries(4096, 128) * 4 * 64
    assert gb200_flops / 0.207e-3 / 1e12 == pytest.approx(164, abs=1)


def test_windowed_rates_are_the_measured_ones():
    """cuDNN on the 128-key band (cuDNN 9.27): H100 (measured on H200, the same GH100 compute) 129 / 92 TFLOP/s,
    GB200 164 / 183, forward / backward at s 4096, a third or less of the full causal kernel's; the full causal
    lookup is the one it was."""
    assert attention_tflops("H100 SXM", "cudnn", "fwd", 64, 4096, window=128) == pytest.approx(129e12)
    assert attention_tflops("H100 SXM", "cudnn", "bwd", 64, 4096, window=128) == pytest.approx(92e12)
    assert attention_tflops("B200 (GB200)", "cudnn", "fwd", 64, 4096, window=128) == pytest.approx(164e12)
    assert attention_tflops("B200 (GB200)", "cudnn", "bwd", 64, 4096, window=128) == pytest.approx(183e12)
    assert attention_tflops("H100 SXM", "cudnn", "fwd", 64, 4096) == pytest.approx(363e12)


def test_a_family_without_windowed_rows_reads_its_causal_curve_at_the_window():
    """A100's FlashAttention-2 has no windowed measurement: the window's length on its causal curve."""
    assert attention_tflops("A100 SXM 80GB", "fa2", "fwd", 64, 4096, window=128) == attention_tflops(
        "A100 SXM 80GB", "fa2", "fwd", 64, 128
    )


def test_attention_is_the_mean_of_windowed_and_full_layers():
    """On B200 half the layers run the full causal kernel and half the band: the attention seconds are the full
    ones x (1 + t_window / t_full) / 2, each layer's time its FLOPs over its rate (backward 2.5 x the forward's FLOPs)."""
    windowed, full = _gptoss("b200"), _gptoss("b200", {"sliding_window": None})
    dev = device_for(load_topology("b200").accelerator.name).name

    def layer_s(window: int) -> float:
        rates = [attention_tflops(dev, "cudnn", p, 64, 4096, window=window) for p in ("fwd", "bwd")]
        assert all(rates)
        return window_entries(4096, window) * (1 / rates[0] + 2.5 / rates[1])  # type: ignore[operator]

    ratio = (1 + layer_s(128) / layer_s(0)) / 2
    assert windowed.kernels["attention"] == pytest.approx(full.kernels["attention"] * ratio, rel=1e-9)
    assert 0.6 < ratio < 0.8  # the band is 16x fewer FLOPs at 1/7 of the rate
    assert windowed.step_time_s < full.step_time_s


def test_a_window_as_long_as_the_sequence_changes_nothing():
    same = _gptoss("b200", {"sliding_window.tokens": 4096})
    assert same.step_time_s == _gptoss("b200", {"sliding_window": None}).step_time_s


def test_model_flops_count_the_window_as_megatron_bridge_does():
    """Megatron-Bridge's flop_utils: a windowed layer's core attention over min(window, s) keys a query instead of s
    (Megatron-LM's un-halved count otherwise)."""
    w = load_workload("gpt-oss-120b")
    full = load_workload("gpt-oss-120b", {"sliding_window": None})
    tokens = w.global_batch * w.seq_len
    per_layer = 3 * 2 * tokens * (w.seq_len - 128) * w.heads * (w.qk_head_dim + w.v_head_dim)
    assert model_flops_per_step(full) - model_flops_per_step(w) == pytest.approx(18 * per_layer, rel=1e-12)


def test_published_gptoss_rows_stay_within_their_bound():
    """The windowed layers make every gpt-oss row faster (they were already optimistic, +6% to +33%; now +10% to
    +35%); each row stays optimistic and the five rows' mean error under 25% (the GB300 row +5.2 -> +4.8% with the
    graphed kernels' minimum run time [27 s23 graphmin])."""
    tables = ["megatron-bridge-perf-26.04.01-moe", "nemo-automodel-moe-h100"]
    rows = [r for r in validate_tables(tables) if r.workload == "gpt-oss-120b" and r.topology != "dgx-b300"]
    assert len(rows) == 5  # the DGX-B300 row (session 25): tests/test_project_b300.py
    errors = [r.error for r in rows]
    assert all(e is not None and 0.04 < e < 0.40 for e in errors)
    assert sum(abs(e) for e in errors if e is not None) / len(errors) < 0.25
