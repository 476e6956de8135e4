"""``commlens sim step`` under full recomputation of a layer count (``recompute_layers``): the backward redoes the
forward of the recomputed layers only, so its TP collectives and compute grow by their share, as the projection
prices them (``step._dp_tail``'s ``redone``), not as if every layer were recomputed."""

from __future__ import annotations

from typing import Literal

import pytest

from commlens.project import Scenario
from commlens.project.layout import ParallelLayout
from commlens.project.simstep import SimStep, simulate_step
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")


def _step(recompute: Literal["full", "selective"], layers: int | None = None) -> SimStep:
    """llama3-8b on 32 H100s, TP 4 with SP x PP 2 x DP 4 (16 layers a stage), 8 micro-batches a pipeline."""
    w = load_workload("llama3-8b").model_copy(update={"global_batch": 32})
    layout = ParallelLayout(tp=4, sp=True, pp=2, dp=4, zero=1, recompute=recompute, recompute_layers=layers)
    return simulate_step(Scenario(w, H100, layout, 32))


def test_partial_recompute_redoes_only_its_layers_collectives():
    """4 of 16 layers a stage recomputed: each micro-batch's TP traffic is 2 n (forward and backward) + 4 layers'
    worth, a quarter of the way from no recomputation (2 n) to full (3 n); it was simulated as full."""
    none, full, part = _step("selective"), _step("full"), _step("full", 4)
    tp_none, tp_full, tp_part = (s.communication_s["tp"] for s in (none, full, part))
    assert tp_none < tp_part < tp_full
    assert tp_part - tp_none == pytest.approx(0.25 * (tp_full - tp_none), rel=0.15)
    assert none.step_time_s < part.step_time_s < full.step_time_s
