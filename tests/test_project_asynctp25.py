"""Held-out published table added in session 14 [27 s14 asynctp25]: torchtitan's June 2025 async TP benchmarks
(benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md at 2887250b): Llama 3.1 70B on 256 and 8B on 64 Grand Teton
H100 (500 W), FSDP x TP 8, torch.compile, vanilla and async TP, bf16 and float8 tensorwise. The float8 rowwise pairs
are left out (no commlens recipe for torchao's per-row scaling). Nothing in the model was fitted to it."""

from __future__ import annotations

import pytest

from commlens.project.validate import load_set, validate_set

TABLE = "torchtitan-asynctp-h100-202506"
PUBLISHED = [597.3, 652.4, 809.8, 942.4, 4378.0, 4809.4, 5078.1, 5570.1]


def test_the_table_is_the_pages_bf16_and_float8_tensorwise_pairs():
    table = load_set(TABLE)
    assert table.metric == "tokens_per_s_per_gpu"
    assert "2887250bbd9103d0bc997ea2efb3a525b5e5dbc0" in table.source
    assert "820504e20d1149fbf0b98c567af24c4b0433b22d" in table.source
    assert [r.published for r in table.rows] == PUBLISHED
    assert all(r.topology == "grand-teton-h100-96gb" for r in table.rows)
    for i, r in enumerate(table.rows):
        big = r.workload == "llama3-70b"
        assert (r.gpus, r.layout["tp"], r.layout["dp"]) == ((256, 8, 32) if big else (64, 8, 8))
        assert r.overrides["micro_batch"] == (16 if big else 12)
        assert r.overrides["precision"] == ("bf16" if i % 4 < 2 else "fp8")
        assert r.layout["recompute"] == ("full" if big else "selective")
        assert r.layout["tp_comm_overlap"] is (i % 2 == 1)
        assert r.layout["compile"] and r.layout["compile_loss"] and r.layout["framework"] == "torchtitan"
        assert not r.layout.get("fsdp_fp8_all_gather", False)
        assert "rowwise" not in r.note


def test_every_row_projects_and_async_tp_raises_each_pair():
    res = validate_set(load_set(TABLE))
    assert all(s.predicted is not None for s in res), [s.refused for s in res]
    for vanilla, asynctp in zip(res[0::2], res[1::2], strict=True):
        assert asynctp.predicted > vanilla.predicted
    # measured at session 14 (main 98d19d4 + this table): 70B +8.6/+9.5/+9.9/+1.6%, 8B +21.1/+17.3/+29.2/+22.0%;
    # after [27 s14 tt8btp] 70B -0.1/+7.8/+0.9/-0.5%, 8B +3.4/+11.3/+13.6/+16.2%
    errs = [s.error for s in res]
    assert all(e is not None and abs(e) < 0.35 for e in errs)


# [27 s14 asynctp25] the model gave +7.6% (70B) and +3.5% (8B); since [27 s14 tt8btp] (vanilla TP's dim-1 collective
# copies, which async TP fuses) +14.8% and +12.2% against the published +16.4% and +9.7%
def test_the_model_gives_async_tps_float8_gain():
    res = validate_set(load_set(TABLE))
    for v, a in ((res[2], res[3]), (res[6], res[7])):
        assert v.predicted is not None and a.predicted is not None
        assert a.predicted / v.predicted == pytest.approx(a.published / v.published, abs=0.03)


@pytest.mark.xfail(
    strict=True,
    reason="[27 s14 tt8btp] async TP's gain on the bf16 pairs: published +9.2% (70B) and +9.9% (8B), the model +17.8% "
    "and +18.3% once vanilla TP pays its dim-1 collective copies, +13.8% and +12.2% with its seq-major layout copies "
    "[27 s14 asyncbf16]: async TP's own costs are still under-priced on the 70B",
)
def test_the_model_gives_async_tps_bf16_gain():
    res = validate_set(load_set(TABLE))
    for v, a in ((res[0], res[1]), (res[4], res[5])):
        assert v.predicted is not None and a.predicted is not None
        assert a.predicted / v.predicted == pytest.approx(a.published / v.published, abs=0.03)
