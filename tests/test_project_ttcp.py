"""torch's CP ring (torchtitan) traced into a compiled block: every K/V exchange waited for where it is issued."""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.topology import load_topology
from commlens.workload import load_workload


def _table2_cp4(framework: str, compile: bool, overlap: bool | None = None) -> Projection:
    """Llama 3.1 8B at 128K tokens on one Grand Teton host, CP 4 x FSDP 2, full recomputation (torchtitan's
    end-2024 Table 2 row)."""
    w = load_workload("llama3-8b", {"seq_len": 131072, "global_batch": 2, "micro_batch": 1, "precision": "fp8"})
    layout = ParallelLayout(
        tp=1, cp=4, dp=2, zero=3, recompute="full", framework=framework, compile=compile, cp_comm_overlap=overlap
    )
    return run(Scenario(w, load_topology("grand-teton-h100-96gb"), layout, 8))


def test_compiled_torch_ring_waits_for_its_k_v_gather_and_gradient_exchanges():
    """Under torch.compile a functional collective is waited for at once (wait_tensor where it is traced) and
    Inductor moves no wait by default, so the compiled ring hides nothing: its CP time is all on the step's
    critical path, as a layout that says the exchange is not overlapped; eager, the all-gather hides beside the
    first ring step and each gradient exchange beside the next step."""
    compiled, eager = _table2_cp4("torchtitan", True), _table2_cp4("torchtitan", False)
    assert compiled.overlapped_s.get("cp_comm", 0.0) == 0.0
    assert eager.overlapped_s["cp_comm"] > 0.5 * eager.breakdown["cp_comm"]
    assert compiled.breakdown["cp_comm"] > 2 * eager.breakdown["cp_comm"]
    not_overlapped = _table2_cp4("torchtitan", False, overlap=False)
    assert compiled.breakdown["cp_comm"] == pytest.approx(not_overlapped.breakdown["cp_comm"], rel=1e-9)


def test_transformer_engine_ring_keeps_its_overlap_under_compile():
    """Megatron-Core's CP is Transformer Engine's p2p ring, not torch's: compiling the model changes nothing of its
    exchange, each step's still beside that step's attention."""
    compiled, eager = _table2_cp4("megatron-core", True), _table2_cp4("megatron-core", False)
    assert compiled.overlapped_s["cp_comm"] > 0.0
    assert compiled.breakdown["cp_comm"] == pytest.approx(eager.breakdown["cp_comm"], rel=1e-9)
