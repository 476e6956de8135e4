"""BLOOM 176B (BigScience tr11-176B-ml) on Jean Zay: a held-out DeepSpeed pipeline-engine table whose settings are
all published (the slurm script, README and reshaping log at a commit), issue 27."""

import pytest

from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

TABLE = "bloom-176b-jean-zay"


def test_the_table_is_the_published_runs_layouts():
    table = load_set(TABLE)
    assert all(r.topology == "jean-zay-a100" for r in table.rows)
    layouts = [(r.gpus, r.layout["tp"], r.layout["pp"], r.layout["dp"], r.overrides["micro_batch"]) for r in table.rows]
    assert layouts == [
        (384, 4, 12, 8, 2),  # README: the run at iteration 85376, 104.70 s
        (192, 4, 12, 4, 2),  # reshaping-log.md: 24 and 36 nodes
        (192, 4, 24, 2, 1),
        (192, 2, 24, 4, 1),
        (288, 4, 36, 2, 1),
        (288, 2, 36, 4, 1),
        (288, 1, 72, 4, 1),
    ]
    for r in table.rows:
        assert r.gpus == r.layout["tp"] * r.layout["pp"] * r.layout["dp"]
        # DeepSpeed's BF16_Optimizer in the pipeline engine: fp32 accumulation each micro-batch, fp32 all-reduce
        assert r.layout["grad_reduce_bytes"] == 4 and r.layout["grad_accum_fusion"] is False
        assert r.layout["zero1_all_reduce"] is True and r.layout["pp_p2p"] == "serial"


def test_the_partition_puts_the_embedding_in_the_split():
    # --pp-partition-method 'type:transformer|embedding' at PP 12: 5 blocks on the first and last stages, 6 elsewhere
    row = load_set(TABLE).rows[0]
    split = ParallelLayout.model_validate(row.layout)
    explicit = ParallelLayout.model_validate(
        {k: v for k, v in row.layout.items() if not k.endswith("_in_split")}
        | {"first_stage_layers": 5, "last_stage_layers": 5}
    )
    topo, w = load_topology("jean-zay-a100"), load_workload("bloom-176b", row.overrides)
    a = run(Scenario(w, topo, split, row.gpus)).step_time_s
    assert a == pytest.approx(run(Scenario(w, topo, explicit, row.gpus)).step_time_s, rel=1e-9)


def test_the_rows_project_as_validated():
    # the figures docs/project-evidence.md reports for the table [27 s14 dspipe] [27 s14 bloomtp]
    errors = [s.error for s in validate_set(load_set(TABLE))]
    assert errors == pytest.approx([0.047, 0.138, 0.055, -0.015, 0.084, -0.007, -0.055], abs=0.006)


def test_the_bf16_optimizer_casts_each_gradient_before_adding_it():
    # DeepSpeed 56c522386 BF16_Optimizer.update_hp_grads: hp_grad.add_(lp.grad.to(fp32)) after every micro-batch's
    # backward: the cast reads 2 B and writes a 4 B temporary, the add reads 4 + 4 and writes 4: 18 B per parameter,
    # where a mixed-dtype add_ (grad_accum_cast false) moves 2 + 4 + 4 = 10
    row = load_set(TABLE).rows[0]
    topo, w = load_topology("jean-zay-a100"), load_workload("bloom-176b", row.overrides)
    cast = run(Scenario(w, topo, ParallelLayout.model_validate(row.layout), row.gpus))
    fused = run(Scenario(w, topo, ParallelLayout.model_validate(row.layout | {"grad_accum_cast": False}), row.gpus))
    assert cast.kernels["grad_accum"] / fused.kernels["grad_accum"] == pytest.approx(18 / 10, rel=1e-6)
    assert cast.step_time_s - fused.step_time_s == pytest.approx(2.79, abs=0.05)  # 97.2 -> 100.0 s


def test_the_jean_zay_fabric_is_four_omni_path_links():
    topo = load_topology("jean-zay-a100")
    assert topo.scale_out.nics_per_node == 4 and topo.scale_out.nic_bandwidth_bytes_per_s == pytest.approx(12.5e9)
    assert topo.approximate


def test_tp1_pp72_pairs_stages_on_a_node():
    # [27 s14 bloomtp] TP 1 x DP 4 = 4 GPUs a stage, PP outermost (PipeModelDataParallelTopology): stages 2k and
    # 2k + 1 share a node, so every middle stage has one boundary over NVLink and one over Omni-Path, and the last
    # stage (LM head and loss) exchanges only with stage 70 on its own node. Before, every stage paid four
    # Omni-Path transfers (20.9 ms a micro-batch) and the row read -11.8%
    row = load_set(TABLE).rows[6]
    topo, w = load_topology("jean-zay-a100"), load_workload("bloom-176b", row.overrides)
    p = run(Scenario(w, topo, ParallelLayout.model_validate(row.layout), row.gpus))
    comm = [st["pp_comm"] for st in p.stages]
    assert comm[1] == pytest.approx(comm[70], rel=1e-9) and comm[1] == pytest.approx(0.01098, rel=0.02)
    assert comm[0] == pytest.approx(comm[71], rel=1e-9) and comm[71] < 0.002
    assert p.pace_stage == 71 and p.step_time_s == pytest.approx(149.9, abs=0.5)


def test_launch_blocking_adds_the_host_time_of_every_kernel():
    # [27 s14 bloomtp] tr11-176B-ml.slurm exports CUDA_LAUNCH_BLOCKING=1: no launch returns before its kernel is
    # done, so a block's host time (the deepspeed profile's 15 us a kernel) adds to its GPU time instead of hiding
    # under it. TP 4 PP 36 (pace: the last stage, one block and the LM head): 1.3 s of the 155.7 s step
    row = load_set(TABLE).rows[4]
    assert row.layout["launch_blocking"] is True
    topo, w = load_topology("jean-zay-a100"), load_workload("bloom-176b", row.overrides)
    on = run(Scenario(w, topo, ParallelLayout.model_validate(row.layout), row.gpus))
    off = run(Scenario(w, topo, ParallelLayout.model_validate(row.layout | {"launch_blocking": False}), row.gpus))
    assert off.breakdown["host_overhead"] == 0.0
    assert on.breakdown["host_overhead"] == pytest.approx(1.29, abs=0.05)
    assert on.step_time_s - off.step_time_s == pytest.approx(1.38, abs=0.1)
