"""[27 s13 zero3] DeepSpeed's CPU checkpointing: each offloaded layer's input goes to host memory in the forward and
back in the backward with blocking copies (microsoft/DeepSpeed v0.6.2, 32d97976, runtime/activation_checkpointing/
checkpointing.py ``CheckpointFunction``), priced at the A100's PCIe Gen4 line rate (NVIDIA A100 datasheet)."""

from __future__ import annotations

import pytest

import commlens.project.step as step_mod
from commlens.project import ParallelLayout, project
from commlens.project.frameworks import framework
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def _row(i: int):
    row = load_set("deepspeed-zero3-azure-2022").rows[i]
    w = load_workload(row.workload, row.overrides)
    return w, Scenario(w, load_topology(row.topology), ParallelLayout.model_validate(row.layout), row.gpus)


@pytest.mark.parametrize(("i", "layers"), [(3, 128), (4, 160)])
def test_azure_offloaded_rows_pay_the_copies(i: int, layers: int) -> None:
    """1T and 2T on 1024 A100s, micro-batch 8 x 1024 tokens: 2 x layers x 8 x 1024 x h x 2 B at 32 GB/s, in the
    breakdown's host overhead (3.4 s and 5.4 s a step)."""
    w, sc = _row(i)
    expected = 2 * layers * 8 * 1024 * w.hidden * 2 / 32e9
    p = run(sc)
    assert p.breakdown["host_overhead"] == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx({3: 3.36, 4: 5.37}[i], abs=0.01)


def test_hidden_offload_costs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A framework whose offload copies hide under compute (Megatron's --cpu-offloading) charges nothing."""
    _, sc = _row(4)
    blocking = run(sc).step_time_s
    fw = framework("deepspeed")
    monkeypatch.setattr(
        step_mod, "framework", lambda name: fw.model_copy(update={"activation_offload_blocking": False})
    )
    hidden = run(sc)
    assert hidden.breakdown["host_overhead"] == 0.0
    assert blocking - hidden.step_time_s == pytest.approx(2 * 160 * 8 * 1024 * 32768 * 2 / 32e9, rel=1e-9)


def test_no_offload_no_copies() -> None:
    """Rows that keep their activations on the GPU (175B, 530B) pay nothing."""
    for i in (0, 1, 2):
        _, sc = _row(i)
        assert run(sc).breakdown["host_overhead"] == 0.0


def test_project_api_reports_it() -> None:
    _, sc = _row(3)
    p = project(sc.workload, sc.topology, sc.layout, sc.gpus)
    assert p.breakdown["host_overhead"] > 3.0
