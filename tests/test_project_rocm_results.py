"""[27 s16 rocmtrain] Held-out published table amd-rocm-training-results: AMD's ROCm Performance Results page, AI
training (Primus Megatron backend), as AMD's Primus projection blog quotes it with container and date; settings not
printed from the Primus config at the release (tag v26.2). Nothing in the model was fitted to it
(docs/project-evidence.md [27 s16 rocmtrain])."""

from __future__ import annotations

from pathlib import Path

import pytest

import commlens.project
from commlens.project.validate import load_set, validate_set

TABLE = "amd-rocm-training-results"
PUBLISHED = Path(commlens.project.__file__).parent / "published"


def test_the_table_holds_the_re_measured_mixtral_row_with_its_release():
    table = load_set(TABLE)
    assert table.metric == "tokens_per_s_per_gpu" and len(table.rows) == 1
    assert "5f2d6c1577aea3285f06e2d011ba5730184e1a77" in table.source  # rocm-blogs primus-projection
    assert "1ec29c67dd22e79d638abed65a42bfb39622491a" in table.source  # Primus v26.2
    (row,) = table.rows
    assert (row.workload, row.topology, row.gpus, row.published) == ("mixtral-8x22b", "mi355x-8gpu", 64, 3475)
    assert "rocm/primus:v26.2" in row.note
    # printed: batch 1, seq 8192, TP 1 PP 4 VPP 2 CP 1 EP 8; from the v26.2 config: GBS 128, no recompute
    assert row.overrides == {"seq_len": 8192, "global_batch": 128, "micro_batch": 1, "precision": "bf16"}
    lay = row.layout
    assert (lay["tp"], lay["pp"], lay["vpp"], lay["cp"], lay["ep"], lay["dp"]) == (1, 4, 2, 1, 8, 16)
    assert lay["recompute"] == "none" and lay["framework"] == "megatron-core"


def test_duplicates_of_the_primus_8node_table_are_left_out():
    old = load_set("amd-instinct-primus-8node")
    new = load_set(TABLE)
    old_keys = {(r.workload, r.published) for r in old.rows}
    assert not old_keys & {(r.workload, r.published) for r in new.rows}
    header = (PUBLISHED / f"{TABLE}.yaml").read_text().split("\nrows:")[0]
    assert all(f in header for f in ("16,186", "1,726", "1,174", "JAX MaxText"))  # listed as left out


def test_no_row_is_refused_and_the_figure_is_pinned():
    (res,) = validate_set(load_set(TABLE))
    assert res.predicted is not None and res.error is not None
    # 3536 (+1.8%) when written; 3504 (+0.8%) with the later stages' gradients in one bucket group each chunk,
    # reduced in the pipeline's drain and gathered whole [27 s16 ppbucket]
    assert res.predicted == pytest.approx(3504, rel=0.01)
    assert res.error == pytest.approx(0.008, abs=0.005)
