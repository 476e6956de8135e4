"""Held-out published tables added in session 9 [27 s9 mb2608]: the Megatron-Bridge 26.08 container's MoE rows
(GB200/GB300, MXFP8, full-iteration CUDA graphs) and the one-row H100 baseline of Megatron-Bridge's EP-overlap
skill. Nothing in the model was fitted to them; these tests check that they load as their sources print them and
that every row projects."""

from __future__ import annotations

from commlens.project.validate import load_set, validate_set


def test_the_26_08_table_holds_the_pages_rows_with_their_recipes():
    table = load_set("megatron-bridge-perf-26.08-moe")
    assert table.metric == "tokens_per_s_per_gpu"
    # the page's commit and the release tag whose recipes the notes read
    assert "4ab94dfad36641cabdeb96452b21bf676aac4772" in table.source
    assert "51885cf132b2814188b6855c25a8588254274c2a" in table.source
    got = [(r.workload, r.topology, r.gpus, r.published) for r in table.rows]
    assert got == [
        ("qwen3-30b-a3b", "gb200-nvl72", 8, 39936.0),
        ("qwen3-30b-a3b", "gb300-nvl72", 8, 44544.0),
        ("qwen3-235b-a22b", "gb200-nvl72", 256, 7280.0),
        ("qwen3-235b-a22b", "gb300-nvl72", 256, 8816.0),
        ("deepseek-v3-like", "gb200-nvl72", 256, 4912.0),
        ("deepseek-v3-like", "gb300-nvl72", 256, 6288.0),
        ("gpt-oss-120b", "gb200-nvl72", 64, 28672.0),
        ("gpt-oss-120b", "gb300-nvl72", 64, 33024.0),
    ]
    for r in table.rows:
        # every row names the perf-recipe function it was read from, runs MXFP8 through HybridEP
        assert "Recipe [PR " in r.note and "_fp8mx_config" in r.note, r.note[:80]
        assert r.layout["fp8_recipe"] == "mxfp8" and r.layout["moe_dispatcher"] == "hybridep"
        assert r.layout["framework"] == "nemo"


def test_the_26_08_rows_project_and_none_is_refused():
    """Measured at 430cae0 (session 9), before the rows could state the fused expert MLP, the static expert budget and
    whole-step graphs: -22.1%, -19.2%, -20.1%, -21.9%, -8.0%, -18.2%, -11.4%, -19.1%, slower than every 26.08 run."""
    rows = validate_set(load_set("megatron-bridge-perf-26.08-moe"))
    assert len(rows) == 8
    for r in rows:
        assert r.predicted is not None, r.refused
        assert abs(r.predicted / r.published - 1) < 0.3, (r.workload, r.topology)


def test_the_26_08_page_is_faster_than_26_04_01_in_the_same_layouts():
    """The four Qwen3 rows keep 26.04.01's layout (GPUs, parallelism, micro-batch): the release alone is 27-53%
    faster, which is what the held-out table tests the model on."""
    new = load_set("megatron-bridge-perf-26.08-moe").rows
    old = {(r.workload, r.topology): r for r in load_set("megatron-bridge-perf-26.04.01-moe").rows}
    shape = ("tp", "pp", "vpp", "ep", "dp")
    same = [r for r in new if r.workload.startswith("qwen3")]
    assert len(same) == 4
    for r in same:
        o = old[(r.workload, r.topology)]
        assert o.gpus == r.gpus and o.overrides == r.overrides
        assert all(o.layout[k] == r.layout[k] for k in shape)
        assert 1.25 < r.published / o.published < 1.55


def test_the_skills_baseline_row_is_the_ep_overlap_off_run():
    table = load_set("megatron-bridge-skills-qwen3-30b-h100")
    assert table.metric == "step_time_s"
    assert "7ded17dae62523b664dd3d8d2dbc632c844b1cef" in table.source
    row = table.rows[0]  # the second row, EP overlap on, came with moe_a2a_overlap (27epovl, session 9)
    assert (row.workload, row.topology, row.gpus, row.published) == ("qwen3-30b-a3b", "dgx-h100", 16, 24.7138)
    assert row.overrides == {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "precision": "bf16"}
    assert row.layout["ep"] == 16 and row.layout["moe_dispatcher"] == "hybridep"
    assert "20.9920 s" in row.note  # the overlap-on figure
    result = validate_set(table)[0]
    assert result.predicted is not None, result.refused
