"""Held-out table added in session 16 [27 s16 mlperfamd]: MLPerf Training v5.1 closed-division Llama 3.1 8B
pre-training step times of the submissions that ran on AMD Instinct MI355X (AMD, Dell, GigaComputing, Supermicro: AMD's
NeMo-on-ROCm implementation) and, from [27 s16 mi350x], on the MI350X (AMD, and Cisco on AMD's implementation), read
from the result logs, with the settings of each submission's own config and
src/train.py. Nothing in the model was fitted to them; these tests check that the table loads as the logs give it,
that the rows carry the implementation's settings and that every row projects."""

from __future__ import annotations

from commlens.project.hardware import device_for
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology

TABLE = "mlperf-training-amd"


def test_the_table_holds_every_amd_pretraining_submission_once():
    table = load_set(TABLE)
    assert table.metric == "step_time_s" and len(table.rows) == 6
    for r in table.rows:
        assert (r.workload, r.gpus, r.layout["framework"]) == ("llama3-8b", 8, "megatron-core")
        assert "result_*.txt" in r.note
        assert (r.overrides["global_batch"], r.overrides["micro_batch"], r.overrides["seq_len"]) == (32, 2, 8192)
    mi355x, mi350x = table.rows[:4], table.rows[4:]
    for r in mi355x:
        assert r.topology == "mi355x-8gpu"
        assert "[27 s16 mlperfamd]" in r.note and "config_MI355X_1x8x1_8b.sh" in r.note
    for r in mi350x:
        assert r.topology == "mi350x-8gpu"
        assert "[27 s16 mi350x]" in r.note and "config_MI350X_1x8x1_8b.sh" in r.note
    # Cisco's folder has no MI350X implementation: the row says it assumes AMD's, and why
    assert "ASSUMED AMD's MI350X one" in mi350x[1].note and "/workspace/code/src/callbacks.py" in mi350x[1].note
    # the block-duration medians: AMD, Dell, GigaComputing, Supermicro (MI355X); AMD, Cisco (MI350X)
    assert [r.published for r in table.rows] == [1.043, 1.0903, 1.0999, 1.0772, 1.2848, 1.3281]
    assert [r.note.split("'")[1] for r in table.rows] == [
        "MI355X_EPYC_9575F_pytorch",
        "XE9785L_8xMI355X",
        "G893-ZX1-AAX4_pytorch",
        "8xMI355X_2xEPYC_9575F",
        "MI350X_EPYC_9575F_pytorch",
        "1xC885A_M8-8xMI350X-OAM-288GB",
    ]


def test_the_rows_carry_the_implementations_settings():
    for r in load_set(TABLE).rows:
        lay = r.layout
        # DistributedDataParallelConfig(use_distributed_optimizer, fp8_param_gather, grad_reduce_in_fp32=False) and
        # no overlap flags (Megatron-Core's defaults, off); fp8 'hybrid' with DelayedScaling; no recompute, no graphs
        assert (lay["tp"], lay["pp"], lay["cp"], lay["dp"], lay["zero"]) == (1, 1, 1, 8, 1)
        assert (lay["overlap_grad_reduce"], lay["overlap_param_gather"]) == (False, False)
        assert (lay["fp8_recipe"], lay["fp8_param_gather"], lay["grad_reduce_bytes"]) == ("delayed", True, 2)
        assert (lay["recompute"], lay["cuda_graphs"], lay["tp_comm_overlap"]) == ("none", False, False)
        assert r.overrides["precision"] == "fp8"


def test_every_row_projects_and_the_figures_stand():
    table = load_set(TABLE)
    res = validate_set(table)
    assert all(s.error is not None for s in res)
    errs = [s.error for s in res]
    # step time: error = published / predicted - 1; the model predicts 1.112 s for the four MI355X rows (the same
    # settings) and 1.188 s for the two MI350X rows (1.109 / 1.185 s before the step's zeroing of the gradient
    # buffer [27 s18 zerograd])
    assert all(abs(s.predicted - 1.112) < 0.005 for s in res[:4])
    assert all(abs(s.predicted - 1.188) < 0.005 for s in res[4:])
    assert max(abs(e) for e in errs[:4]) < 0.08
    assert sum(abs(e) for e in errs[:4]) / 4 < 0.04
    # [27 s16 mi350x] the MI350X rows run slower than the model says (AMD +8.2%, Cisco +11.8%): the MI350X's step is
    # 1.23 x the MI355X's in AMD's own logs, its clock ratio 2400 / 2200 only 1.09
    assert [round(e, 3) for e in errs[4:]] == [0.082, 0.118]
    assert sum(abs(e) for e in errs) / len(errs) < 0.06


def test_the_mi350x_is_the_mi355x_silicon_at_its_lower_clock():
    """[27 s16 mi350x] the mi350x-8gpu preset: the MI355X's mesh and HBM, compute peaks at 2200 / 2400 of the MI355X's
    (256 CUs x 4 Matrix Cores x 512 FMAs x 2 x 2.2 GHz), the MI355X's GEMM efficiency (the same silicon)."""
    mi350x, mi355x = load_topology("mi350x-8gpu"), load_topology("mi355x-8gpu")
    assert mi350x.accelerator.name == "MI350X"
    assert mi350x.scale_up.bandwidth_bytes_per_s == mi355x.scale_up.bandwidth_bytes_per_s == 537.6e9
    d350, d355 = device_for("MI350X"), device_for("MI355X")
    assert d350.peak_flops == {"bf16": 2306.9e12, "fp8": 4613.7e12}
    assert abs(d350.peak_flops["bf16"] / d355.peak_flops["bf16"] - 2200 / 2400) < 1e-4
    assert (d350.sms, d350.hbm_bytes_per_s, d350.hbm_bytes) == (d355.sms, d355.hbm_bytes_per_s, d355.hbm_bytes)
    assert (d350.gemm_efficiency, d350.memory_efficiency) == (d355.gemm_efficiency, d355.memory_efficiency)
    # the same settings project slower on the MI350X, by its compute (GEMMs and attention) alone
    r355, r350 = validate_set(load_set(TABLE))[0], validate_set(load_set(TABLE))[4]
    assert 1.06 < r350.predicted / r355.predicted < 2400 / 2200
