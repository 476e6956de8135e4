"""NVLink SHARP as the run's launch set it [27 s16 nvls]: NVIDIA's NeMo launcher (24.01 .. 24.09), NeMo 2's
performance scripts (v2.2.1 .. v2.4.0), Megatron-Bridge's perf executors (r0.1.0 .. r0.6.0) and NVIDIA's MLPerf LLM
submissions (v3.1 on) set NCCL_NVLS_ENABLE=0 ('Disable NVLink SHARP to save memory'); NCCL then has no NVLS
candidate, so a large all-reduce inside an NVSwitch domain runs as a ring instead of in the switch."""

from __future__ import annotations

import pytest

from commlens.model.backends import nccl_choice
from commlens.project import ParallelLayout, Projection, project
from commlens.project.frameworks import framework
from commlens.project.step import nccl_nvls
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")


def _8b_tp8(framework_name: str, nvls: bool | None = None) -> Projection:
    """Llama 3 8B, TP 8 without sequence parallelism (each layer's TP exchange an all-reduce), 64 GPUs."""
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "precision": "bf16"})
    lay = ParallelLayout(
        tp=8,
        sp=False,
        pp=1,
        zero=0,
        recompute="none",
        overlap_grad_reduce=False,
        framework=framework_name,
        nccl_nvls=nvls,
    )
    return project(w, H100, lay, 64)


def test_profiles_whose_launch_scripts_turn_nvls_off():
    for name in (
        "nemo-24.03",
        "nemo-24.05",
        "nemo-24.07",
        "nemo-24.09",
        "nemo-24.12",
        "nemo-25.02",
        "nemo-25.04",
        "nemo-25.07",
        "megatron-core-25.09",
        "megatron-core-25.11",
        "megatron-core-26.02",
    ):
        assert framework(name).nccl_nvls is False, name
    for name in ("nemo", "megatron-core", "megatron-core-2024", "torchtitan", "deepspeed"):
        assert framework(name).nccl_nvls is True, name  # default unchanged: NVLS where the switch reduces
    lay = ParallelLayout(framework="nemo-25.04")
    assert nccl_nvls(lay) is False
    assert nccl_nvls(lay.model_copy(update={"nccl_nvls": True})) is True  # a row's own env overrides
    assert nccl_nvls(ParallelLayout(framework="nemo", nccl_nvls=False)) is False


def test_nccl_drops_the_nvls_candidate_when_off():
    on, _ = nccl_choice(H100, "all_reduce", 128 << 20, nodes=1, ranks_per_host=8)
    off, _ = nccl_choice(H100, "all_reduce", 128 << 20, nodes=1, ranks_per_host=8, nvls=False)
    assert on.algo == "nvls" and off.algo == "ring"
    assert off.time_s > on.time_s * 1.2


def test_tp_all_reduce_is_slower_without_nvls():
    """The TP all-reduces of one node: 0.29 s of the step with NVLS, 0.39 s as rings under NeMo 25.04's launch."""
    with_nvls = _8b_tp8("nemo")
    without = _8b_tp8("nemo-25.04")
    assert with_nvls.breakdown["tp_comm"] == pytest.approx(0.286, rel=0.05)
    assert without.breakdown["tp_comm"] == pytest.approx(0.391, rel=0.05)
    assert without.breakdown["dp_comm"] == pytest.approx(with_nvls.breakdown["dp_comm"])  # one rank per node
    assert _8b_tp8("nemo", nvls=False).breakdown["tp_comm"] == pytest.approx(without.breakdown["tp_comm"])
    assert _8b_tp8("nemo-25.04", nvls=True).breakdown["tp_comm"] == pytest.approx(with_nvls.breakdown["tp_comm"])


def test_published_rows_carry_their_own_env():
    """Rows whose launch set NCCL_NVLS_ENABLE apart from their release's scripts say so in the layout."""
    mb2509 = load_set("megatron-bridge-perf-25.09")
    ub = [r for r in mb2509.rows if r.layout.get("nccl_nvls") is True]
    assert len(ub) == 1 and ub[0].workload == "llama3-8b" and ub[0].topology == "dgx-h100"  # nccl_ub: NVLS 1
    mlperf = load_set("mlperf-training-llm")
    on = [r for r in mlperf.rows if r.layout.get("nccl_nvls") is True]
    assert len(on) == 7  # v3.0's five (no setting: NCCL's default) and Nebius v5.0's two (NVLS 1)
    for name in (
        "megatron-bridge-perf-26.04.01-dense",
        "megatron-bridge-perf-26.04.01-moe",
        "megatron-bridge-perf-26.08-moe",
    ):
        assert all(r.layout.get("nccl_nvls") is False for r in load_set(name).rows), name
