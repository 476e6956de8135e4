"""[27 s12 p2407rows] nemo-perf-24.07 holds every pre-training row of its page (NVIDIA/NeMo
docs/source/performance/performance_summary.md at 070a0bb1, NeMo 24.07 container, DGX-H100, FP8), each with the
page's layout, and each workload is the model the page measured."""

from __future__ import annotations

import pytest
from projectutil import nemo_flops_per_token

from commlens.project.validate import load_set, validate_set

# The page's pre-training table, in its order: model, GPUs, GBS, MBS, sequence, TP, PP, CP, VP, tokens/s per GPU,
# Model TFLOP/s per GPU. Its fine-tuning table (SFT, LoRA) is not a pre-training table and is left out.
PAGE = (
    ("nemo-gpt3-5b", 64, 2048, 4, 2048, 1, 1, 1, 1, 22521, 736),
    ("nemo-gpt3-20b", 64, 256, 2, 2048, 2, 1, 1, 1, 5851, 750),
    ("gpt3-175b", 128, 256, 1, 2048, 4, 8, 1, 6, 726, 782),
    ("gpt3-175b", 512, 2048, 2, 2048, 4, 8, 1, 6, 782, 842),
    ("llama2-7b", 8, 128, 1, 4096, 1, 1, 1, 1, 16847, 776),
    ("llama2-13b", 16, 128, 1, 4096, 1, 4, 1, 10, 8646, 754),
    ("llama2-70b", 64, 128, 1, 4096, 4, 4, 1, 20, 1707, 759),
    ("nemotron3-8b", 64, 256, 4, 4096, 2, 1, 1, 1, 12701, 653),
    ("nemotron3-22b", 64, 256, 2, 4096, 2, 4, 1, 10, 4256, 554),
    ("nemotron4-340b", 128, 32, 1, 4096, 8, 8, 1, 12, 322, 678),
    ("llama3-8b", 8, 128, 1, 8192, 1, 1, 2, 1, 12036, 697),
    ("llama3-70b", 64, 128, 1, 8192, 4, 4, 2, 5, 1533, 738),
)


def test_the_table_is_the_pages_twelve_pretraining_rows_with_their_layouts():
    """Twelve rows, one per printed row, none twice: each row's figure, batch, sequence and TP / PP / CP / VP are the
    page's, DP is GPUs / (TP x PP x CP) and every row runs FP8 on nemo-24.07 with the distributed optimizer."""
    table = load_set("nemo-perf-24.07")
    assert "070a0bb168d405d653b9734c0017cf5078e77c0d" in table.source
    got = []
    for r in table.rows:
        lay = r.layout
        assert r.overrides["precision"] == "fp8" and lay["framework"] == "nemo-24.07" and lay["zero"] == 2
        assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == r.gpus
        got.append(
            (
                r.workload,
                r.gpus,
                r.overrides["global_batch"],
                r.overrides["micro_batch"],
                r.overrides["seq_len"],
                lay["tp"],
                lay["pp"],
                lay["cp"],
                lay.get("vpp", 1),
                r.published,
            )
        )
    assert sorted(got, key=str) == sorted((p[:10] for p in PAGE), key=str)
    # the five rows transcribed first stay first, as they were
    assert [r.published for r in table.rows[:5]] == [726, 782, 322, 12036, 1533]


def test_the_llama2_rows_take_the_launcher_configs_of_their_layout_and_the_nemotron_rows_do_not():
    """Llama 2 70B: sequence parallel, TP overlap and no recomputation (launcher 24.07 llama2_70b.yaml, the same TP,
    PP, VP and MBS); Nemotron-8B runs MBS 4 where the launcher's file says 2, so its layout keeps the defaults."""
    rows = {(r.workload, r.gpus): r.layout for r in load_set("nemo-perf-24.07").rows}
    l70 = rows["llama2-70b", 64]
    assert l70["sp"] and l70["tp_comm_overlap"] and l70["recompute"] == "none"
    assert rows["llama2-7b", 8]["sp"] is False and rows["llama2-7b", 8]["recompute"] == "none"
    assert "recompute" not in rows["nemotron3-8b", 64] and "sp" not in rows["nemotron3-8b", 64]


@pytest.mark.parametrize("row", PAGE, ids=lambda p: f"{p[0]}-{p[1]}")
def test_each_workload_is_the_model_the_page_counted(row):
    """The page's Model TFLOP/s over its tokens/s is NeMo's FLOPs per token (6 x matmul weights with the logits
    + 12 l s h): each preset's shapes give it within 0.5% (a 50k vocabulary for Nemotron, or GQA for the Nemotron-3
    models, would miss by more than 3%)."""
    name, _, _, _, seq, *_, tokens, tflops = row
    per_token = nemo_flops_per_token(name, seq)
    assert per_token * tokens / 1e12 == pytest.approx(tflops, rel=0.005)


def test_every_row_is_projected():
    """No layout of the page is refused (memory or divisibility)."""
    results = validate_set(load_set("nemo-perf-24.07"))
    assert len(results) == len(PAGE)
    assert all(r.predicted is not None for r in results), [r.refused for r in results if r.predicted is None]
