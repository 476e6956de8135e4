"""torch's async TP leaves its gathered tensors seq-major [27 s14 asyncbf16]: _fused_all_gather_matmul_impl (and its
Meta kernel) returns A as unflatten(...).movedim(0, gather_dim), which for DTensor's dim-1 gathers of [batch, seq,
hidden] is contiguous only at batch 1, and Inductor's micro-pipeline pass hands it to the weight gradient, whose
[batch * seq, hidden] reshape then copies it (torch/_inductor/fx_passes/micro_pipeline_tp.py fuse_all_gather_matmul;
restride_A_for_fused_matmul_reduce_scatter orders the row-parallel inputs the same way)."""

from __future__ import annotations

from commlens.project import kernels
from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

TABLE = "torchtitan-asynctp-h100-202506"


def _run(row, **overrides):
    lay = ParallelLayout.model_validate(row.layout)
    w = load_workload(row.workload, {**row.overrides, **overrides})
    return run(Scenario(w, load_topology(row.topology), lay, row.gpus))


def test_async_tp_in_bf16_copies_the_seq_major_tensors_for_the_weight_gradients():
    table = load_set(TABLE)
    asynctp = _run(table.rows[1])  # 70B bf16, async TP, local batch 16
    # 80 layers x (4 gathered tensors of 16 x 8192 x 8192 + the wo and w2 inputs, 1024 + 3584 wide), 16-bit read and
    # write, beside the 2 backward reduce-scatters' dim-1 copies NCCL keeps (0.36 s)
    assert 1.0 < asynctp.kernels["tp_copy"] < 1.35
    vanilla = _run(table.rows[0])
    assert 1.9 < vanilla.kernels["tp_copy"] < 2.4  # unchanged: vanilla TP gathers batch-major


def test_no_layout_copy_at_one_sequence_a_micro_batch_nor_under_fp8():
    table = load_set(TABLE)
    row = table.rows[1]
    w = load_workload(row.workload, row.overrides)
    shape = kernels.LayerShape(tokens=8192.0, keys=8192.0, tp=8, ep=1, sp=True, tp_chunks=8)
    one = w.model_copy(update={"micro_batch": 1})
    assert kernels.async_tp_layout_copies(None, one, shape, False) == []  # type: ignore[arg-type]
    fp8 = w.model_copy(update={"precision": "fp8"})
    assert kernels.async_tp_layout_copies(None, fp8, shape, False) == []  # type: ignore[arg-type]
    assert _run(table.rows[3]).kernels["tp_copy"] < 0.5  # 70B float8 async: torchao copies the operands anyway


def test_the_async_rows_with_the_layout_copies():
    res = validate_set(load_set(TABLE))
    # session 14 before: 70B bf16 async +7.8%, 8B bf16 async +11.3%; the float8 and vanilla rows do not move
    assert [round(s.error, 3) for s in res] == [-0.001, 0.041, 0.009, -0.005, 0.034, 0.056, 0.136, 0.162]
