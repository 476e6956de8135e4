"""NeMo's long-sequence page, LLAMA3-8B (FP8) - B200 table (container NeMo 25.04.rc2, DGX-B200) [27 s15 lcb200]:
every row's GPU count is its TP x PP x DP x CP (the table's first version, NVIDIA/NeMo 14d427f575), its settings are
NeMo r2.3.0's (delayed-scaling fp8 with fp8 weight gathers, BF16 gradient reduction, no recomputation) and its metric is
NeMo's FLOP count of Llama 3 (v2.3.0 nemo/utils/flops_formulas.py llama3)."""

from __future__ import annotations

from commlens.project import ParallelLayout
from commlens.project.validate import _FLOPS_PER_TOKEN, load_set, validate_set
from commlens.workload import load_workload

TABLE = "nemo-long-context-b200"
# the page: sequence (K), global batch, TP, PP, DP, CP, with-CP TFLOP/s per GPU
PAGE = [
    (8, 512, 1, 1, 2, 1, 1671),
    (16, 256, 1, 1, 4, 1, 1717),
    (32, 128, 1, 1, 4, 2, 1624),
    (64, 64, 1, 1, 4, 4, 1600),
    (128, 32, 2, 1, 4, 4, 1588),
    (256, 16, 4, 1, 4, 4, 1590),
    (512, 8, 4, 1, 4, 8, 1619),
    (1024, 4, 4, 1, 4, 16, 1608),
]


def test_every_row_is_the_pages_layout_on_tp_pp_dp_cp_gpus():
    table = load_set(TABLE)
    assert table.flops == "nemo" and table.metric == "tflops_per_gpu"
    assert len(table.rows) == len(PAGE)
    for row, (k, gbs, tp, pp, dp, cp, tflops) in zip(table.rows, PAGE, strict=True):
        layout = ParallelLayout.model_validate(row.layout)
        assert (layout.tp, layout.pp, layout.dp, layout.cp) == (tp, pp, dp, cp)
        assert row.gpus == tp * pp * dp * cp  # 2 ... 256, not the later version's 8 ... 1024
        assert row.overrides["seq_len"] == k * 1024 and row.overrides["global_batch"] == gbs
        assert row.overrides["seq_len"] * gbs == 4 * 1024 * 1024  # 4M tokens a step, as the page's batches
        assert row.published == tflops
        assert row.topology == "b200"
        # NeMo r2.3.0: bf16_with_fp8_mixed (delayed scaling, fp8 param gather), grad_reduce_in_fp32 False,
        # no recompute, sequence parallelism with TP > 1, no TP comm overlap
        assert layout.fp8_recipe == "delayed" and layout.fp8_param_gather
        assert layout.grad_reduce_bytes == 2 and layout.recompute == "none"
        assert layout.sp == (tp > 1) and not layout.tp_comm_overlap


def test_the_count_is_nemos_llama3_formula_and_every_row_projects():
    """NeMo v2.3.0 flops_formulas.llama3 per token: l h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(l h))."""
    for k in (8, 1024):
        s = k * 1024
        w = load_workload("llama3-8b", {"seq_len": s})
        layers, h, a, g, f, vocab = 32, 4096, 32, 8, 14336, 128256
        nemo = layers * h * h * (12 + 12 * g / a + 18 * f / h + 12 * s / h + 6 * vocab / (layers * h))
        assert abs(_FLOPS_PER_TOKEN["nemo"](w) / nemo - 1) < 1e-9
    results = validate_set(load_set(TABLE))
    assert all(r.predicted is not None for r in results)
