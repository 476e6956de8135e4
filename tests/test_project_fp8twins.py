"""Delayed scaling's amax all-reduce per fp8 autocast [27 s16 fp8twins]: Transformer Engine 1.6+ reduces every fp8
module's amaxes over the autocast's group (Megatron-Core: TP x DP x CP) when the model chunk's autocast exits and again
in its backward, synchronously; NeMo 24.07 .. 25.02 (delayed scaling) pay it per model chunk and micro-batch, TE 1.4's
NeMo 24.03 and current scaling do not."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, Projection, project
from commlens.project.frameworks import framework
from commlens.project.kernels import fp8_autocast_amax_reductions
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")


def _70b(precision: str, framework_name: str, gpus: int = 512, **layout: object) -> Projection:
    """Llama 3.1 70B as the dgxc-benchmarking v24.11.1 recipe runs it: TP 4, PP 4 x VP 5, CP 2, 8K tokens, GBS 1024."""
    w = load_workload(
        "llama3-70b",
        {"seq_len": 8192, "global_batch": 2 * gpus, "micro_batch": 1, "precision": precision},
    )
    lay = {
        "tp": 4,
        "sp": True,
        "cp": 2,
        "pp": 4,
        "vpp": 5,
        "zero": 2,
        "recompute": "none",
        "tp_comm_overlap": True,
        "framework": framework_name,
        **layout,
    }
    return project(w, H100, ParallelLayout(**lay), gpus)  # type: ignore[arg-type]


def test_which_stacks_reduce_amaxes_per_autocast():
    w8 = load_workload("llama3-8b", {"precision": "fp8"})
    wb = load_workload("llama3-8b", {"precision": "bf16"})
    lay = ParallelLayout(tp=1, pp=1, recompute="none")
    assert fp8_autocast_amax_reductions(framework("nemo-24.09"), w8, lay) == 2
    assert fp8_autocast_amax_reductions(framework("nemo-25.02"), w8, lay) == 2
    assert fp8_autocast_amax_reductions(framework("nemo-24.09"), wb, lay) == 0  # bf16: no autocast
    assert fp8_autocast_amax_reductions(framework("nemo-24.03"), w8, lay) == 0  # TE 1.4's other path
    assert fp8_autocast_amax_reductions(framework("nemo-24.05"), w8, lay) == 0  # TE 1.6.0.dev0: either side of #575
    assert fp8_autocast_amax_reductions(framework("nemo-24.07"), w8, lay) == 2  # TE 1.8
    assert fp8_autocast_amax_reductions(framework("nemo-25.04"), w8, lay) == 0  # current scaling
    delayed = ParallelLayout(tp=1, pp=1, recompute="none", fp8_recipe="delayed")
    assert fp8_autocast_amax_reductions(framework("megatron-core"), w8, delayed) == 2
    graphed = ParallelLayout(tp=1, pp=1, recompute="none", cuda_graphs=True)
    assert fp8_autocast_amax_reductions(framework("nemo-24.09"), w8, graphed) == 0  # TE graph.py: not counted


def test_the_70b_fp8_row_pays_two_reductions_per_chunk_and_micro_batch():
    """At 512 GPUs the reduction group is TP 4 x CP 2 x DP 16 = 128 GPUs on 16 nodes; each GPU runs 64 micro-batches
    of 5 chunks: 640 small all-reduces a step, some 23 ms of a 10.1 s step, in the exposed TP-side communication;
    at 2,048 GPUs (512 in the group) more. The bf16 twin has none, and NeMo 24.03's TE 1.4 is not charged."""
    fp8, bf16 = _70b("fp8", "nemo-24.09"), _70b("bf16", "nemo-24.09")
    old = _70b("fp8", "nemo-24.03")
    fp8_tp = fp8.breakdown["tp_comm"]
    # the same layout on a stack without the per-autocast reduction (TE 1.4) differs only by it, here and elsewhere
    # (nemo-24.03 differs from nemo-24.09 in attention rates and CP ring ops, not in TP): compare the TP items
    assert fp8_tp - old.breakdown["tp_comm"] == pytest.approx(0.0235, rel=0.25)
    assert fp8.step_time_s > 10.1
    big = _70b("fp8", "nemo-24.09", gpus=2048)
    big_old = _70b("fp8", "nemo-24.03", gpus=2048)
    assert big.breakdown["tp_comm"] - big_old.breakdown["tp_comm"] > fp8_tp - old.breakdown["tp_comm"]
    assert bf16.breakdown["tp_comm"] == pytest.approx(_70b("bf16", "nemo-24.03").breakdown["tp_comm"], rel=1e-9)
