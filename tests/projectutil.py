"""Shared pieces of the projection tests: a published row run under another framework profile, and NeMo's FLOP
count written out independently of commlens's own (the oracle the NeMo tables' tests check presets against)."""

from __future__ import annotations

from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def row_under(table: str, i: int, framework_name: str) -> Projection:
    """Row ``i`` of a published table, projected with its layout's framework replaced by ``framework_name``."""
    r = load_set(table).rows[i]
    lay = ParallelLayout.model_validate({**r.layout, "framework": framework_name})
    return run(Scenario(load_workload(r.workload, r.overrides), load_topology(r.topology), lay, r.gpus))


def nemo_flops_per_token(name: str, seq: int) -> float:
    """NeMo's performance pages' count: 6 x the matmul weights (the logits included, the input embedding not) plus
    12 l s h for attention over the full sequence (non-causal)."""
    w = load_workload(name, {"seq_len": seq})
    h = w.hidden
    kv = w.kv_heads_n * w.head_size
    layer = h * (h + 2 * kv) + h * w.heads * w.head_size + (3 if w.gated_ffn else 2) * h * w.ffn_hidden
    return 6 * (w.layers * layer + w.vocab * h) + 12 * w.layers * seq * h


def long_sequence_run(
    workload: str, topology: str, seq_len: int, gpus: int, **layout: object
) -> tuple[dict[str, float], float]:
    """NeMo's long-sequence pages' setting: 4M tokens a step, micro-batch 1, FP8; the kernels' seconds and the step."""
    w = load_workload(
        workload,
        {"seq_len": seq_len, "global_batch": 4 * 1024 * 1024 // seq_len, "micro_batch": 1, "precision": "fp8"},
    )
    p = run(Scenario(w, load_topology(topology), ParallelLayout.model_validate(layout), gpus))
    return p.kernels, p.step_time_s
