"""Megatron FSDP's in-place gradient pre-scaling, and Megatron's torch FSDP2 mode under recomputation.

Megatron FSDP does not average in the collective, so ``gradient_reduce_preprocessing`` multiplies each bf16 gradient
bucket by 1/DP (``mul_``) before its reduce-scatter, every micro-batch; fp32 buckets fold the scale into NCCL's
premul-sum (NVIDIA/Megatron-LM d98e8a64 and 44151194, megatron/core/distributed/fsdp/src/megatron_fsdp/
param_and_grad_buffer.py). Megatron's ``use_torch_fsdp2`` runs torch's fully_shard under Megatron's reentrant
checkpoint, whose recomputed forward gathers a layer of its own: three gathers per recomputed layer."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.layout import Group
from commlens.project.validate import load_memory_figures, load_set
from commlens.topology import load_topology

H100 = load_topology("dgx-h100")
DEV = device_for(H100.accelerator.name)
LAYERS = 32
PARAMS = 8.0e9
DP = Group(size=8, nodes=1, ranks_per_host=8)
NONE = Group(size=1, nodes=1, ranks_per_host=8)
GATHER = PARAMS * 2 / 1.0e11
REDUCE16 = PARAMS * 2 / 1.0e11


def _rate(op: str, nbytes: float, group: Group) -> float:
    """A network with no latency: seconds = bytes / 1e11, any collective."""
    return nbytes / 1.0e11


def _fsdp(fw_name: str, micro_batches: int, redone: float, gb: int) -> float:
    """Exposed plus hidden ZeRO-3 time of one step with nothing to hide it behind."""
    lay = ParallelLayout(tp=1, sp=False, zero=3, grad_reduce_bytes=gb, framework=fw_name)
    st = {"layers": float(LAYERS), "compute": 1.0e-9, "memory_bound": 0.0, "tp_comm": 0.0}
    tail = step_mod._dp_tail(
        _rate, DEV, lay, PARAMS, 0.0, DP, NONE, gb, 0.0, st, redone, micro_batches, framework(fw_name)
    )
    return tail[1] + tail[4]


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_megatron_fsdp_pays_a_bf16_prescale_pass_every_micro_batch(micro_batches):
    """bf16 buckets: a read and a write of every local gradient element per reduction, every micro-batch."""
    scale = stream_time_s(DEV, 2 * 2 * PARAMS)
    assert scale > 0
    for name in ("megatron-core", "nemo"):
        got = _fsdp(name, micro_batches, 0.0, 2)
        assert got == pytest.approx(micro_batches * (2 * GATHER + REDUCE16 + scale))


def test_megatron_fsdp_fp32_buckets_fold_the_scale_into_the_collective():
    """fp32 buckets use NCCL's premul-sum: no pass of their own."""
    reduce32 = PARAMS * 4 / 1.0e11
    assert _fsdp("megatron-core", 4, 0.0, 4) == pytest.approx(4 * (2 * GATHER + reduce32))


def test_megatron_torch_fsdp2_gathers_a_recomputed_layer_three_times():
    """use_torch_fsdp2 under full recomputation: forward, recomputed forward and backward each gather (no
    Megatron FSDP pre-scaling either), where Megatron FSDP keeps the recompute's gather."""
    fsdp2 = framework("megatron-core-fsdp2")
    assert not fsdp2.zero3_recompute_keeps_gather
    assert _fsdp("megatron-core-fsdp2", 4, 1.0, 2) == pytest.approx(4 * (3 * GATHER + REDUCE16))
    assert _fsdp("megatron-core-fsdp2", 4, 0.0, 2) == pytest.approx(4 * (2 * GATHER + REDUCE16))
    # the rest is megatron-core's (kernels, overlaps)
    # (and no DDP gradient buffer to zero each step [27 s18 zerograd])
    own = {"name", "release_of", "title", "source", "zero3_recompute_keeps_gather", "zero3_grad_prescale_bf16"}
    own.add("zero_grad_buffer")
    assert fsdp2.model_dump(exclude=own) == framework("megatron-core").model_dump(exclude=own)


def test_the_amd_primus_fsdp_rows_name_megatrons_torch_fsdp2_mode():
    """Primus's MI325X 70B configs set use_torch_fsdp2: their zero-3 rows (throughput and memory) say so."""
    rows = [r for r in load_set("amd-instinct-primus-8node").rows if r.layout.get("zero") == 3]
    assert len(rows) == 2
    assert {r.layout["framework"] for r in rows} == {"megatron-core-fsdp2"}
    memory = [f for f in load_memory_figures() if f.name.startswith("amd-mi325x-llama3-70b")]
    assert memory and {r.layout["framework"] for r in memory} == {"megatron-core-fsdp2"}
