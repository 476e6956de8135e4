"""The 25.11 NeMo container's Megatron-Core (release profile ``megatron-core-25.11``).

Megatron-Bridge r0.2.0 (v0.2.0 / v0.2.1, whose performance summary carries the 25.11 section) pins Megatron-LM
0d8e0714 and Transformer Engine 2.9; its Megatron FSDP pre-scales the rank's shard of the sharded gradient buffer by
1/DP before each reduce-scatter (``gradient_reduce_preprocessing(gbuf.data, ...)``; main's 92c8482e the same), where
26.04.01's Megatron-LM (44151194) scales the whole unsharded bucket. The 25.11 rows name that profile."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.bands import family_of
from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.layout import Group
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")
DEV = device_for(H100.accelerator.name)
LAYERS = 32
PARAMS = 8.0e9
DP = Group(size=8, nodes=1, ranks_per_host=8)
NONE = Group(size=1, nodes=1, ranks_per_host=8)
GATHER = PARAMS * 2 / 1.0e11


def _rate(op: str, nbytes: float, group: Group) -> float:
    """A network with no latency: seconds = bytes / 1e11, any collective."""
    return nbytes / 1.0e11


def _fsdp(fw_name: str, micro_batches: int, gb: int) -> float:
    """Exposed plus hidden ZeRO-3 time of one step with nothing to hide it behind."""
    lay = ParallelLayout(tp=1, sp=False, zero=3, grad_reduce_bytes=gb, framework=fw_name)
    st = {"layers": float(LAYERS), "compute": 1.0e-9, "memory_bound": 0.0, "tp_comm": 0.0}
    tail = step_mod._dp_tail(
        _rate, DEV, lay, PARAMS, 0.0, DP, NONE, gb, 0.0, st, 0.0, micro_batches, framework(fw_name)
    )
    return tail[1] + tail[4]


@pytest.mark.parametrize("micro_batches", [1, 16])
def test_the_25_11_release_prescales_only_the_ranks_shard(micro_batches):
    """bf16: a read and a write of 1/DP of the local gradient elements per reduction, not of all of them."""
    whole = stream_time_s(DEV, 2 * 2 * PARAMS)
    reduce16 = PARAMS * 2 / 1.0e11
    got = _fsdp("megatron-core-25.11", micro_batches, 2)
    assert got == pytest.approx(micro_batches * (2 * GATHER + reduce16 + whole / DP.size))
    assert _fsdp("megatron-core", micro_batches, 2) == pytest.approx(micro_batches * (2 * GATHER + reduce16 + whole))
    # fp32 buckets fold the scale into NCCL's premul-sum in both releases
    reduce32 = PARAMS * 4 / 1.0e11
    assert _fsdp("megatron-core-25.11", micro_batches, 4) == pytest.approx(micro_batches * (2 * GATHER + reduce32))


@pytest.mark.parametrize("release", ["megatron-core-25.09", "megatron-core-25.11"])
def test_a_past_release_is_megatron_core_but_for_what_it_states(release):
    """A past release (25.09: Megatron-Core 0.14, 25.11: 0.15): megatron-core's error-band family, and
    megatron-core's profile in every other field; both pre-scale only the rank's shard, which the current
    profile does not."""
    rel = framework(release)
    assert rel.release_of == "megatron-core"
    for gpu in ("H100", "B200"):
        assert family_of(gpu, release, True, 4096) == family_of(gpu, "megatron-core", True, 4096)
    # [27 s11 bwratio] each release states its cuDNN attention on Blackwell
    # [27 s16 nvls] and NVLink SHARP off, as their perf executors set it; [27 s25 nvfp4] and TE's two NVFP4 cast kernels
    stated = {"name", "release_of", "title", "source", "zero3_grad_prescale_shard", "attention", "nccl_nvls"}
    stated |= {"nvfp4_rht_cast_fused"}
    stated |= {"muon"}  # [27 s26 muon] 25.09's Megatron-Core 0.14 has no Muon; 25.11's 0d8e0714 has it
    assert rel.model_dump(exclude=stated) == framework("megatron-core").model_dump(exclude=stated)
    assert rel.muon is (release == "megatron-core-25.11")
    assert rel.zero3_grad_prescale_shard and not framework("megatron-core").zero3_grad_prescale_shard


def test_every_25_11_row_names_the_25_11_release():
    rows = load_set("megatron-bridge-perf-25.11").rows
    assert len(rows) == 19  # the page's 16 and Megatron-Bridge PR #1760's three B200 Qwen3-235B runs [27 s10 a2acpu]
    assert {r.layout.get("framework") for r in rows} == {"megatron-core-25.11"}


def test_the_25_11_fsdp_row_projects_faster_than_under_26_04s_prescale():
    """Projected end to end, the 25.11 8B H100 FSDP row (16 micro-batches): the shard-only pre-scale is cheaper (both
    at one attention family, as megatron-core reads a newer cuDNN's than 25.11 since [27 s11 hop2026])."""
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 128, "micro_batch": 1, "precision": "fp8"})
    times = {}
    for name in ("megatron-core", "megatron-core-25.11"):
        lay = ParallelLayout(
            tp=1, sp=False, zero=3, recompute="none", grad_reduce_bytes=2, framework=name, attention_kernel="cudnn"
        )
        times[name] = project(w, H100, lay, 8, check_memory=False).step_time_s
    assert times["megatron-core-25.11"] < times["megatron-core"]


def test_the_25_11_fsdp_rows_gather_their_fp8_weights_in_fp8():
    """FP8-CS keeps the linears' weights in fp8 (fp8_param_gather) and Megatron FSDP gathers them as uint8: the two
    Megatron FSDP rows say so, and so gather fewer bytes than the same row with 16-bit gathers."""
    rows = [r for r in load_set("megatron-bridge-perf-25.11").rows if r.layout.get("zero") == 3]
    assert len(rows) == 2
    assert all(r.layout.get("fsdp_fp8_all_gather") for r in rows)
    r = next(r for r in rows if r.topology == "dgx-h100")
    w = load_workload(r.workload, r.overrides)
    fp8 = project(w, H100, ParallelLayout(**r.layout), r.gpus, check_memory=False)
    bf16 = project(w, H100, ParallelLayout(**{**r.layout, "fsdp_fp8_all_gather": False}), r.gpus, check_memory=False)
    assert fp8.step_time_s < bf16.step_time_s
