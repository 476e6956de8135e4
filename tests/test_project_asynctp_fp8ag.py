"""torchtitan's float8 TP (torchao Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput) casts
before the all-gathers: they move fp8, the reduce-scatters 16 bits."""

from __future__ import annotations

from commlens.project import ParallelLayout, project
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")


def _tp_comm(fw: str, precision: str) -> float:
    w = load_workload("llama3-70b", {"seq_len": 8192, "micro_batch": 2, "global_batch": 64, "precision": precision})
    lay = ParallelLayout(tp=8, sp=True, zero=3, framework=fw, tp_comm_overlap=False, recompute="full")
    p = project(w, H100, lay, 256)
    return p.breakdown["tp_comm"] + p.overlapped_s["tp_comm"]  # exposed and hidden: all of it


def test_torchtitan_float8_tp_gathers_fp8():
    # a layer's TP traffic is as many all-gathers as reduce-scatters: half of it at half the bytes under Float8
    assert _tp_comm("torchtitan", "fp8") < 0.8 * _tp_comm("torchtitan", "bf16")
    # Transformer Engine (v2.9 / v2.16, Megatron-Core's linears) also casts before gathering under current scaling
    # [27 s10 fp8cs]; its reduce-scatters stay 16-bit
    assert _tp_comm("megatron-core", "fp8") < 0.8 * _tp_comm("megatron-core", "bf16")
