"""[27 s27 nebius] The PyTorch / Nebius DeepSeek-V3 671B runs on 256 B200 with torchtitan as a held-out table: the
standard all-to-all and DeepEP, one setting apart; the MXFP8-experts run is left out (no layout says 'MXFP8 on the
routed experts only')."""

from __future__ import annotations

from importlib.resources import files

from commlens.project.validate import ab_pairs, load_set, validate_set

NAME = "nebius-torchtitan-dsv3-b200"


def test_the_table_holds_the_two_bf16_runs_and_both_project():
    table = load_set(NAME)
    assert [r.published for r in table.rows] == [651.0, 859.0]
    results = validate_set(table)
    assert all(not r.refused and r.predicted and r.predicted > 0 for r in results), [r.refused for r in results]


def test_the_two_runs_differ_in_the_dispatcher_alone_and_form_one_published_pair():
    a, b = load_set(NAME).rows
    assert {k: v for k, v in a.layout.items() if k != "moe_dispatcher"} == {
        k: v for k, v in b.layout.items() if k != "moe_dispatcher"
    }
    assert (a.layout["moe_dispatcher"], b.layout["moe_dispatcher"]) == ("alltoall", "deepep")
    pairs = [p for p in ab_pairs([NAME]) if p.kind == "setting"]
    assert len(pairs) == 1 and pairs[0].field == "layout.moe_dispatcher"
    assert abs(pairs[0].published_gain - (859 / 651 - 1)) < 1e-9
    assert pairs[0].modelled_gain > 0  # the model has DeepEP faster too (by more: see docs/project-evidence.md)


def test_the_mxfp8_experts_run_is_named_and_left_out():
    text = (files("commlens.project") / "published" / f"{NAME}.yaml").read_text(encoding="utf-8")
    assert "918" in text and "is NOT a row" in text
    assert all(r.published != 918.0 for r in load_set(NAME).rows)
