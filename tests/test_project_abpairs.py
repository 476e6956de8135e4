"""[27 s21 abpairs] The published A/B pairs: runs of one table that differ in exactly one setting, the gain that change
brought against the gain the model projects for it (what the what-if prints for that change)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.project.validate import ab_pairs, load_set, table_names, validate_set

CLI = [str(Path(sys.executable).parent / "commlens")]
ZOO = "megatron-moe-qwen3-235b-h100"


def test_the_model_zoo_ep_overlap_pair_is_found_with_both_gains():
    (pair,) = ab_pairs([ZOO])
    assert (pair.field, pair.before, pair.after, pair.kind) == ("layout.moe_a2a_overlap", None, True, "setting")
    # step-time table: the gain is the step before / the step after - 1 (published 19.7 s -> 17.6 s)
    assert pair.published_gain == pytest.approx(19.7 / 17.6 - 1)
    table = load_set(ZOO)
    steps = {
        bool(row.layout.get("moe_a2a_overlap")): r.predicted
        for row, r in zip(table.rows, validate_set(table))
        if row.layout.get("moe_dispatcher") == "deepep" and row.layout.get("pp") == 8 and row.layout.get("tp") == 2
    }
    assert pair.modelled_gain == pytest.approx(steps[False] / steps[True] - 1)
    # the model promises far more than the runs gave: the EP overlap hides transfers the x86 host then waits on
    assert pair.difference > 0.15


def test_every_pair_differs_in_exactly_one_field_and_is_classed():
    names = table_names()
    pairs = ab_pairs(names)
    assert len(pairs) > 50
    kinds = {p.kind for p in pairs}
    assert kinds == {"setting", "release", "batch", "unstated"}
    # torchtitan's 'selective layer' checkpointing has no layout field; its row stands in with the default module set,
    # so the pair projects alike and is no claim of the model
    (unstated,) = [p for p in pairs if p.kind == "unstated"]
    assert unstated.table == "torchtitan-performance-2024" and unstated.modelled_gain == 0.0
    assert all(p.modelled_gain != 0.0 for p in pairs if p.kind == "setting")
    for p in pairs:
        assert p.before != p.after
        if p.kind == "release":
            assert p.field == "layout.framework" and {p.before, p.after} <= {
                "nemo-24.09",
                "nemo-24.12",
                "nemo-25.02",
                "nemo-25.04",
                # [27 s28 nano] one table across Megatron-Bridge releases: 26.02.01, 26.04 on, 26.06.01
                "megatron-core-26.02",
                "nemo",
                "megatron-core-26.06.01",
            }
        if p.kind == "batch":
            assert p.field == "set.global_batch"
    fp8 = [p for p in pairs if p.field == "set.precision"]
    assert fp8 and all((p.before, p.after) == ("bf16", "fp8") for p in fp8)


def test_cli_pairs_prints_each_setting_pair_and_a_summary() -> None:
    r = subprocess.run([*CLI, "project", "validate", "--pairs"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "layout.moe_a2a_overlap: default -> True" in r.stdout
    assert "pairs that change one setting: the model's gain has the published sign in" in r.stdout
    assert "pairs at another release of the same stack" in r.stdout
    one = subprocess.run(
        [*CLI, "project", "validate", "--pairs", "--table", ZOO, "--json"], capture_output=True, text=True, timeout=300
    )
    assert one.returncode == 0, one.stderr
    (pair,) = json.loads(one.stdout)["pairs"]
    assert pair["field"] == "layout.moe_a2a_overlap" and pair["kind"] == "setting"
    assert pair["difference"] == pytest.approx(pair["modelled_gain"] - pair["published_gain"])
    bad = subprocess.run(
        [*CLI, "project", "validate", "--pairs", "--table", "nope"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: --table: no published table 'nope'")


def test_pairs_from_rows_already_projected_are_the_same_pairs():
    from commlens.project.validate import validate_tables

    names = [n for n in table_names() if n != "memory"]
    assert ab_pairs(names, results=validate_tables(names)) == ab_pairs(names)
