"""[27 s27 abwhatif] The what-if quotes the published A/B pairs of a change: how far the model's gain was from the
runs' on pairs that made the same change (commlens.project.abevidence, abpairs.yaml)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from commlens.project.abevidence import PairEntry, dump, evidence, shipped
from commlens.project.validate import ab_pairs
from commlens.specdata import load_yaml


def _e(field, before, after, published, modelled, row="t w x 8"):
    return PairEntry(field, before, after, published, modelled, row)


def test_a_pair_counts_in_its_own_direction_and_turned_around():
    pairs = [
        _e("layout.moe_a2a_overlap", False, True, 0.20, 0.30),
        _e("layout.moe_a2a_overlap", True, False, -0.10, -0.20),
    ]
    ev = evidence("layout.moe_a2a_overlap", False, True, pairs)
    assert ev is not None and ev.pairs == 2
    # the second, turned: 1 / 0.9 - 1 published, 1 / 0.8 - 1 projected
    assert ev.published_gain == pytest.approx((0.20 + (1 / 0.9 - 1)) / 2)
    assert ev.modelled_gain == pytest.approx((0.30 + 0.25) / 2)
    assert ev.excess == pytest.approx(ev.modelled_gain - ev.published_gain)
    back = evidence("layout.moe_a2a_overlap", True, False, pairs)
    assert back is not None and back.published_gain == pytest.approx(((1 / 1.2 - 1) + -0.10) / 2)


def test_an_unset_field_stands_for_its_default_and_other_values_do_not_count():
    pairs = [_e("layout.moe_a2a_overlap", None, True, 0.2, 0.3), _e("layout.tp", 2, 4, 0.1, 0.1)]
    assert evidence("layout.moe_a2a_overlap", False, True, pairs) is not None  # the layout's default is False
    assert evidence("layout.tp", 4, 8, pairs) is None  # another change of the same field
    assert evidence("layout.tp", 4.0, 2, pairs) is not None  # 2 -> 4 turned around
    assert evidence("layout.pp", 2, 4, pairs) is None


def test_a_workload_change_reads_the_pairs_of_the_tables_set_fields():
    pairs = [_e("set.precision", "bf16", "fp8", 0.3, 0.25)]
    ev = evidence("workload.precision", "bf16", "fp8", pairs)
    assert ev is not None and ev.excess == pytest.approx(-0.05)


def test_dump_keeps_the_setting_pairs_and_shipped_reads_them():
    found = ab_pairs(["megatron-bridge-skills-qwen3-30b-h100", "nebius-torchtitan-dsv3-b200"])
    text = dump(found)
    data = load_yaml(text)
    assert data["format"] == "commlens.abpairs/1"
    assert {p["field"] for p in data["pairs"]} == {"layout.moe_a2a_overlap", "layout.moe_dispatcher"}
    # the shipped file holds the pairs of every published table, these among them
    rows = {e.row for e in shipped()}
    assert "nebius-torchtitan-dsv3-b200 deepseek-v3-like b200 256" in rows
    assert all(isinstance(e.published_gain, float) for e in shipped())


def _project(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "commlens", "project", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_the_what_if_quotes_the_pairs_beside_the_ep_overlap_it_offers():
    args = ["qwen3-30b-a3b", "-t", "dgx-h100", "--gpus", "16", "--ep", "8", "--precision", "fp8", "--recompute", "none"]
    text = _project(*args)
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if x.strip().startswith("EP all-to-all overlap"))
    ev = evidence("layout.moe_a2a_overlap", False, True)
    assert ev is not None and ev.pairs >= 2
    assert line.rstrip().endswith(f"{100 * ev.excess:+.1f} pts ({ev.pairs})")
    assert "model vs A/B" in text.stdout
    out = json.loads(_project(*args, "--json").stdout)
    by_label = {c["label"]: c for c in out["what_if"]["changes"]}
    assert by_label["EP all-to-all overlap"]["published_pairs"]["pairs"] == ev.pairs
    graphs = [c for label, c in by_label.items() if label.startswith("CUDA graphs")]
    assert graphs and graphs[0]["published_pairs"] is None  # two fields at once: no pair made that change
