"""The last stage's head keeps its two inputs for the backward beside the logits: the final norm's input and the
output projection's input (Korthikanti et al. 2022 Sec. 4.3: 4sbh/t with sequence parallelism, Megatron-style; the
projection's input whole where DTensor TP keeps the gathered tensor, torchtitan's apply_tp at 9dec370)."""

from __future__ import annotations

from commlens.project import ParallelLayout
from commlens.project.layout import resolve
from commlens.project.memory import LOGIT_BYTES, head_input_bytes_per_token, stage_memory
from commlens.workload import load_workload

H, VOCAB, TP = 16384, 128256, 8  # llama3-405b


def _layout(framework: str, **kw) -> ParallelLayout:
    return ParallelLayout(tp=TP, sp=True, framework=framework, **kw)


def test_megatron_head_keeps_korthikanti_4sbh_over_t():
    """Megatron-Core under SP keeps the final LayerNorm's input shard and the output layer's input shard (it gathers
    again in the backward): 4 h / t bytes per token, the paper's output-layer term."""
    w = load_workload("llama3-405b", {"seq_len": 8192, "micro_batch": 1})
    assert head_input_bytes_per_token(w, _layout("megatron-core"), TP) == 4.0 * H / TP
    # without SP nothing is split: both inputs whole
    no_sp = ParallelLayout(tp=TP, sp=False, framework="megatron-core")
    assert head_input_bytes_per_token(w, no_sp, TP) == 4.0 * H


def test_torchtitan_head_keeps_the_gathered_output_input():
    """torchtitan wraps ``norm`` in SequenceParallel and ``output`` in ColwiseParallel(input_layouts=Shard(1)): the
    norm keeps its shard, the projection the all-gathered sequence (16-bit; the output layer is not float8)."""
    w = load_workload("llama3-405b", {"seq_len": 8192, "micro_batch": 4, "precision": "fp8"})
    per_token = head_input_bytes_per_token(w, _layout("torchtitan"), TP)
    assert per_token == 2.0 * H / TP + 2.0 * H
    # Table 5's micro-batch (4 x 8192 tokens, SP shard of the norm input): 1.21 GB on the last stage
    assert abs(4 * 8192 * per_token / 1e9 - 1.208) < 0.001


def test_last_stage_holds_logits_and_head_inputs_beyond_the_first():
    """Two stages of equal layers, one micro-batch in flight on each (Megatron-Core, no pipelining buffers): the last
    stage's activations exceed the first's by exactly the logits and the head's two inputs."""
    w = load_workload("llama3-405b", {"seq_len": 8192, "micro_batch": 1, "global_batch": 1})
    layout = _layout("megatron-core", pp=2, recompute="full", stage_layers=(63, 63))
    r = resolve(layout, w, TP * 2, 8)
    first, last = stage_memory(w, layout, r)
    tokens = 8192
    expected = tokens * VOCAB / TP * LOGIT_BYTES + tokens * 4.0 * H / TP
    assert abs((last["activations"] - first["activations"]) - expected) < 1e-6 * expected
