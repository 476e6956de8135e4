"""Held-out table added in session 16 [27 s16 mlperfamd]: MLPerf Training v5.1 closed-division Llama 3.1 8B
pre-training step times of the submissions that ran on AMD Instinct MI355X (AMD, Dell, GigaComputing, Supermicro: AMD's
NeMo-on-ROCm implementation), read from the result logs, with the settings of each submission's own config and
src/train.py. Nothing in the model was fitted to them; these tests check that the table loads as the logs give it,
that the rows carry the implementation's settings and that every row projects."""

from __future__ import annotations

from commlens.project.validate import load_set, validate_set

TABLE = "mlperf-training-amd"


def test_the_table_holds_every_amd_pretraining_submission_once():
    table = load_set(TABLE)
    assert table.metric == "step_time_s" and len(table.rows) == 4
    for r in table.rows:
        assert (r.workload, r.topology, r.gpus, r.layout["framework"]) == (
            "llama3-8b",
            "mi355x-8gpu",
            8,
            "megatron-core",
        )
        assert "[27 s16 mlperfamd]" in r.note and "result_*.txt" in r.note and "config_MI355X_1x8x1_8b.sh" in r.note
        assert (r.overrides["global_batch"], r.overrides["micro_batch"], r.overrides["seq_len"]) == (32, 2, 8192)
    # the block-duration medians: AMD, Dell, GigaComputing, Supermicro
    assert [r.published for r in table.rows] == [1.043, 1.0903, 1.0999, 1.0772]
    assert [r.note.split("'")[1] for r in table.rows] == [
        "MI355X_EPYC_9575F_pytorch",
        "XE9785L_8xMI355X",
        "G893-ZX1-AAX4_pytorch",
        "8xMI355X_2xEPYC_9575F",
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
    # step time: error = published / predicted - 1; the model predicts 1.109 s for all four (the same settings)
    assert all(abs(s.predicted - 1.109) < 0.005 for s in res)
    assert max(abs(e) for e in errs) < 0.08
    assert sum(abs(e) for e in errs) / len(errs) < 0.04
