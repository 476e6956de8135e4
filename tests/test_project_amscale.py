"""FSDP2 under torch's pipelining: the drain waits for every virtual stage's reduce-scatter in turn (issue 27,
NeMo AutoModel's DeepSeek-V3 on 256 and 1,024 H100s)."""

from __future__ import annotations

import pytest
from test_project_tt405 import _table5 as _tt405  # torchtitan's 405B Table 5 layout, one definition

from commlens.model.backends import nccl_predict
from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload

TOPO = load_topology("grand-teton-h100-96gb")


def _layer_reduce_scatter_s() -> float:
    """One layer's fp32 gradients (per TP rank) reduce-scattered over the 8 DP ranks, one per host."""
    w = load_workload("llama3-405b")
    layer = w.parameter_counts()["attention"] / w.layers + 2 * w.hidden + 3 * w.hidden * w.ffn_hidden
    return nccl_predict(TOPO, "reduce_scatter", int(layer / 8 * 4), nodes=8, ranks_per_host=1).time_s


def test_the_drain_waits_for_every_pipeline_stages_reduce_scatter():
    """Each virtual stage's run_post_backward reduce-scatters its gradients after its last backward and makes the
    compute stream wait for them before it sends its input gradient on (torch stage.py backward_maybe_with_nosync,
    FSDP2 _wait_for_post_backward; pytorch PR #165106): the last micro-batch's backward crosses all eight stages,
    so the step waits for the 126 layers' reduce-scatters one after another, not one stage's."""
    all_layers = 126 * _layer_reduce_scatter_s()
    one = _tt405(vpp=1)
    assert one.breakdown["dp_comm"] >= 0.95 * all_layers
    assert one.breakdown["dp_comm"] == pytest.approx(all_layers, rel=0.15)


def test_interleaving_does_not_hide_the_drains_reduce_scatters():
    """Interleaved, a rank's later virtual stage also waits for its reduce-scatter before its send: the chain of
    waits is the same, whatever the virtual stages per rank."""
    one, two = _tt405(vpp=1), _tt405(vpp=2)
    assert two.breakdown["dp_comm"] == pytest.approx(one.breakdown["dp_comm"], rel=0.1)


def _automodel_row(gpus: int) -> tuple[Projection, float, float]:
    """The table's DeepSeek-V3 row on ``gpus``: its projection, published tokens/s/GPU, and projected."""
    table = load_set("nemo-automodel-moe-h100")
    row = next(r for r in table.rows if r.workload == "deepseek-v3-like" and r.gpus == gpus)
    w = load_workload(row.workload, row.overrides)
    p = run(Scenario(w, load_topology(row.topology), ParallelLayout.model_validate(row.layout), row.gpus))
    return p, float(row.published), p.tokens_per_s / row.gpus


def test_automodel_deepseek_v3_waits_for_its_stages_fp32_reduce_scatters():
    """AutoModel's dense layers reduce in fp32 (apply_fsdp's MixedPrecisionPolicy, reduce_dtype float32,
    @01926a5c) over the 64 DP ranks of the 256-GPU run (its experts, sharded by PP x EP alone, are left out of
    FSDP): the four stages' reduce-scatters, each a collective per layer, are waited for in turn."""
    p, published, projected = _automodel_row(256)
    counts = load_workload("deepseek-v3-like").parameter_counts()
    dense = (sum(counts.values()) - counts["experts"]) * 4  # fp32 bytes, all stages
    floor = nccl_predict(load_topology("dgx-h100"), "reduce_scatter", int(dense), nodes=8, ranks_per_host=8).time_s
    assert p.breakdown["dp_comm"] >= 0.9 * floor
    assert projected / published - 1 < 0.14  # +15.8% before the drain's waits


def test_automodel_runs_its_pipeline_schedule_once_per_local_batch():
    """[27amscale patch] The 1,024-GPU recipe runs local batch 8 (8 micro-batches) per schedule.step() and
    accumulates four of them (page: GA 4): four fills and drains, and four reduce-scatters of every stage, where one
    run of 32 would have one; the 256-GPU row (GA 1) is one run either way."""
    p, published, projected = _automodel_row(1024)
    table = load_set("nemo-automodel-moe-h100")
    row = next(r for r in table.rows if r.workload == "deepseek-v3-like" and r.gpus == 1024)
    assert row.layout["pp_schedule_micro_batches"] == 8
    one_run = ParallelLayout.model_validate({**row.layout, "pp_schedule_micro_batches": None})
    w = load_workload(row.workload, row.overrides)
    base = run(Scenario(w, load_topology(row.topology), one_run, row.gpus))
    assert p.breakdown["bubble"] == pytest.approx(4 * base.breakdown["bubble"], rel=0.05)
    assert p.breakdown["dp_comm"] > 3 * base.breakdown["dp_comm"]
    assert projected / published - 1 < 0.30  # +39.0% as one run without the drain's waits
