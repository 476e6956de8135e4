"""Pipeline stages (uneven splits, the pace-setting stage, memory per stage) and `commlens project validate`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_project import _tiny

from commlens.errors import CommlensError
from commlens.project import ParallelLayout, project
from commlens.project.layout import resolve
from commlens.project.memory import in_flight, stage_memory, stage_parameters
from commlens.project.validate import (
    MEMORY,
    SC21,
    PublishedSet,
    SetRow,
    load_memory_figures,
    load_set,
    table_names,
    validate_memory,
    validate_set,
)
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")
CLI = [str(Path(sys.executable).parent / "commlens")]
LLAMA_405B_16K = [  # Llama 3 paper (arXiv 2407.21783) Table 4, the 16384-GPU row, as the brief states it
    "project",
    "llama3-405b",
    "-t",
    "dgx-h100",
    "--gpus",
    "16384",
    "--tp",
    "8",
    "--pp",
    "16",
    "--zero",
    "2",
    "--recompute",
    "none",
    "--set",
    "layout.first_stage_layers=7",
    "--set",
    "layout.last_stage_layers=7",
    "--set",
    "workload.global_batch=2048",
    "--set",
    "workload.micro_batch=1",
    "--no-what-if",
]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True)


# --- how layers are split over the stages


def test_first_and_last_stage_layers():
    w = load_workload("llama3-405b")
    assert w.layers == 126
    lay = ParallelLayout(tp=8, pp=16, first_stage_layers=7, last_stage_layers=7)
    assert resolve(lay, w, 16384, 8).stage_layers == (7, *[8] * 14, 7)


def test_embedding_and_loss_in_split_give_the_same_split():
    # 126 layers + the embedding's slot + the loss's slot = 128 = 16 stages x 8, less one at each end
    w = load_workload("llama3-405b", {"global_batch": 2048})
    lay = ParallelLayout(tp=8, pp=16, vpp=4, embedding_in_split=True, loss_in_split=True)
    assert resolve(lay, w, 16384, 8).stage_layers == (7, *[8] * 14, 7)


def test_explicit_stage_layers():
    w = _tiny(layers=8)
    lay = ParallelLayout(pp=4, stage_layers=(1, 3, 3, 1))
    r = resolve(lay, w, 4, 8)
    assert r.stage_layers == (1, 3, 3, 1)
    assert r.layers_per_stage == 3


@pytest.mark.parametrize(
    ("sets", "pp", "message"),
    [
        (["layout.stage_layers=7-8-8-8"], 4, "stage_layers [7, 8, 8, 8] do not add up to 126 layers"),
        (["layout.stage_layers=63-63"], 4, "stage_layers names 2 stages, PP is 4"),
        (
            ["layout.stage_layers=30-33-33-30", "layout.first_stage_layers=30"],
            4,
            "give stage_layers or first/last_stage_layers, not both",
        ),
        (
            ["layout.first_stage_layers=5"],
            16,
            "126 layers less 5 on the first/last stages do not split evenly over 15 stages",
        ),
        ([], 5, "PP 5 x VPP 1 = 5 does not divide 126 layers"),
    ],
    ids=["sum", "count", "both", "middle-uneven", "pp-divides"],
)
def test_split_refusals_through_the_cli(sets, pp, message):
    args = ["project", "llama3-405b", "-t", "dgx-h100", "--gpus", str(8 * pp * 8), "--tp", "8", "--pp", str(pp)]
    for s in sets:
        args += ["--set", s]
    out = _cli(*args, "--no-what-if")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"error: {message}"
    assert "Traceback" not in out.stderr


# --- the slowest stage sets the pace


def _step_from_stages(p) -> float:
    times = [st["per_micro_batch_s"] for st in p.stages]
    t_max = max(times)
    vpp = p.layout["vpp"]
    m = p.layout["micro_batches"]
    return m * t_max + (sum(times) - t_max) / vpp + max(st["tail_s"] for st in p.stages)


@pytest.mark.parametrize("vpp", [1, 2])
def test_the_slowest_stage_sets_the_pace(vpp):
    w = load_workload("llama3-70b", {"global_batch": 64})  # 80 layers
    even = project(w, H100, ParallelLayout(tp=8, pp=4, vpp=vpp), 64, check_memory=False)
    heavy = project(w, H100, ParallelLayout(tp=8, pp=4, vpp=vpp, stage_layers=(18, 18, 26, 18)), 64, check_memory=False)
    assert [st["layers"] for st in heavy.stages] == [18, 18, 26, 18]
    assert heavy.pace_stage == 2
    times = [st["per_micro_batch_s"] for st in heavy.stages]
    assert times[2] == max(times) > times[1]
    assert heavy.step_time_s > even.step_time_s
    for p in (even, heavy):
        assert p.step_time_s == pytest.approx(_step_from_stages(p), rel=1e-9)
        assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
        # each stage's own bubble: the pace-setter idles only for the fill and drain, the others also wait for it
        pace = p.stages[p.pace_stage]
        assert pace["idle_s"] == pytest.approx(p.breakdown["bubble"], rel=1e-9)
        assert all(st["idle_s"] >= pace["idle_s"] for st in p.stages)
    assert heavy.stages[0]["idle_s"] > even.stages[0]["idle_s"]


# --- memory per stage


def test_in_flight_1f1b():
    # tiny: 8 layers, PP 4, DP 2, global batch 4 -> m = 2 micro-batches, fewer than the stages
    w = _tiny(layers=8, global_batch=4)
    lay = ParallelLayout(pp=4, zero=0, recompute="none")
    r = resolve(lay, w, 8, 8)
    assert r.micro_batches == 2
    assert [st["in_flight"] for st in stage_memory(w, lay, r)] == [min(2, 4 - i) for i in range(4)]
    assert [in_flight(i, 4, 1, 64) for i in range(4)] == [4, 3, 2, 1]


@pytest.mark.parametrize(("global_batch", "expected"), [(8, 8 / 2), (64, (2 * 3 + 4 + 1) / 2)])
def test_in_flight_interleaved_first_stage(global_batch, expected):
    # p 4, v 2: stage 0 keeps min(m v, 2 (p - 1) + (v - 1) p + 1) chunks, each 1/v of the stage: the warm-up's
    # chunks and the one in steady state, but never more than the m v chunks there are (m = 4: 8, not 9)
    w = _tiny(layers=8, global_batch=global_batch)
    lay = ParallelLayout(pp=4, vpp=2, zero=0, recompute="none")
    r = resolve(lay, w, 8, 8)
    p, v, m = 4, 2, r.micro_batches
    assert stage_memory(w, lay, r)[0]["in_flight"] == pytest.approx(min(m * v, 2 * (p - 1) + (v - 1) * p + 1) / v)
    assert stage_memory(w, lay, r)[0]["in_flight"] == pytest.approx(expected)


def test_stage_parameters_embedding_first_output_last():
    h, V, t = 1024, 32000, 2
    layer = 12 * h**2 + 2 * h  # attention 4 h^2, MLP 8 h^2, two norms
    for tied in (True, False):
        w = _tiny(tied_embeddings=tied)
        lay = ParallelLayout(tp=t, pp=2, stage_layers=(3, 1), zero=0)
        (first, first_e), (last, last_e) = stage_parameters(w, resolve(lay, w, 4, 8))
        assert first == pytest.approx((3 * layer + V * h) / t)  # + the input embedding
        assert last == pytest.approx((1 * layer + h + V * h) / t)  # + final norm and output layer (a copy if tied)
        assert first_e == last_e == 0
    w = _tiny(tied_embeddings=True)
    ((only, _),) = stage_parameters(w, resolve(ParallelLayout(tp=t, zero=0), w, 2, 8))
    assert only == pytest.approx((4 * layer + h + V * h) / t)  # PP 1, tied: one embedding matrix


def test_a_published_layout_is_feasible():
    # Llama 3 (arXiv 2407.21783) Table 4: 405B trained on 16384 H100s, TP 8 PP 16, one layer less at each end
    w = load_workload("llama3-405b", {"global_batch": 2048, "micro_batch": 1})
    lay = ParallelLayout(tp=8, pp=16, first_stage_layers=7, last_stage_layers=7, zero=2, recompute="none")
    p = project(w, H100, lay, 16384)  # no InfeasibleLayoutError
    assert len(p.stages) == 16
    assert max(st["reserved_bytes"] for st in p.stages) <= p.memory_capacity_bytes


# --- the CLI's per-stage table


def test_cli_prints_stages_for_pp_only():
    out = _cli(*LLAMA_405B_16K)
    assert out.returncode == 0, out.stderr
    data = json.loads(_cli(*LLAMA_405B_16K, "--json").stdout)
    pace = data["pace_stage"]
    assert len(data["stages"]) == 16
    assert {"layers", "per_micro_batch_s", "tail_s", "memory_bytes", "reserved_bytes", "in_flight"} <= set(
        data["stages"][0]
    )
    assert [st["layers"] for st in data["stages"]] == [7, *[8] * 14, 7]
    assert f"pipeline stages (stage {pace + 1} sets the pace):" in out.stdout
    flat = _cli("project", "llama3-8b", "-t", "dgx-h100", "--gpus", "8", "--tp", "8", "--no-what-if")
    assert flat.returncode == 0, flat.stderr
    assert "pipeline stages" not in flat.stdout


# --- commlens project validate


def test_validate_list_names_every_table():
    out = _cli("project", "validate", "--list")
    assert out.returncode == 0, out.stderr
    listed = [line.split(":", 1)[0] for line in out.stdout.splitlines()]
    assert listed == table_names()
    assert listed[0] == SC21 and MEMORY in listed


def test_validate_sc21_table():
    out = _cli("project", "validate", "--table", SC21)
    rows = [line for line in out.stdout.splitlines() if line.startswith("megatron-gpt-")]
    assert len(rows) == 10
    summary = [line for line in out.stdout.splitlines() if line.startswith("overall: 10 rows, mean absolute error")]
    assert len(summary) == 1
    assert f"  {SC21}: mean absolute error" in out.stdout
    met = "none refused: met)" in summary[0]
    assert out.returncode == (0 if met else 1), out.stderr


def test_validate_unknown_table():
    out = _cli("project", "validate", "--table", "nope")
    assert out.returncode == 2
    assert out.stderr.startswith("error: --table: no published table 'nope'")
    assert "Traceback" not in out.stderr


def test_validate_json():
    out = _cli("project", "validate", "--table", SC21, "--json")
    data = json.loads(out.stdout)
    assert len(data["rows"]) == 10
    for row in data["rows"]:
        assert row["predicted"] / row["published"] - 1 == pytest.approx(row["error"])
    assert data["tables"][SC21]["rows"] == 10
    assert set(data["overall"]) == {"rows", "refused", "mean_abs_error", "max_abs_error"}
    assert data["overall"]["max_abs_error"] == pytest.approx(max(abs(r["error"]) for r in data["rows"]))
    assert out.returncode == (0 if data["targets_met"] else 1)
    assert "memory" not in data


def test_a_refused_row_misses_the_targets():
    from commlens.cli.project_cmd import _print_validation
    from commlens.project.validation_report import validation_summary

    fine = SetRow("llama3-8b", {}, 8, {"tp": 8}, 1000.0, "dgx-h100")
    impossible = SetRow("llama3-8b", {}, 8, {"tp": 3}, 1000.0, "dgx-h100")  # 3 divides neither 8 GPUs nor 32 heads
    table = PublishedSet("handmade", "", "", "tokens_per_s_per_gpu", "n/a", None, (fine, impossible))
    rows = validate_set(table)
    assert rows[0].predicted is not None and rows[1].predicted is None
    assert "does not divide 8 GPUs" in rows[1].refused
    summary = validation_summary(rows)
    assert summary.overall is not None and summary.overall.refused == 1 and summary.targets_met is False
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _print_validation(rows, summary)
    line = next(s for s in buf.getvalue().splitlines() if "refused" in s and "tp3" in s)
    assert rows[1].refused in line
    assert "1 refused" in buf.getvalue()


# --- the memory table


def test_memory_table_through_the_cli():
    from commlens.project.memory import MEMORY_TOLERANCE

    out = _cli("project", "validate", "--table", "memory", "--json")
    assert out.returncode in (0, 1), out.stderr
    data = json.loads(out.stdout)
    figures = data["memory"]["figures"]
    names = [f.name for f in load_memory_figures()]
    assert [f["name"] for f in figures] == names and len(names) >= 34
    for f in figures:
        if f["kind"] == "bound":
            # a bound is met within the memory model's stated error, as the projection refuses only beyond it
            allowed = f["published_bytes"] * (1 + MEMORY_TOLERANCE)
            assert f["error"] is None and f["fits"] == (f["predicted_bytes"] <= allowed)
        else:
            assert f["fits"] is None and f["error"] == pytest.approx(f["predicted_bytes"] / f["published_bytes"] - 1)
    assert data["rows"] == []
    met = all(f["fits"] for f in figures if f["kind"] == "bound") and all(
        abs(f["error"]) <= 0.10 for f in figures if f["kind"] != "bound"
    )
    assert data["memory"]["targets_met"] == met == data["targets_met"]
    assert out.returncode == (0 if met else 1)
    text = _cli("project", "validate", "--table", "memory").stdout
    assert "korthikanti-22b-layer-tp " in text and "published GB" in text
    assert ("fits" in text) or ("over the bound" in text)


def test_memory_per_layer_figures_follow_korthikanti():
    # Table 2 of arXiv 2205.05198 is what commlens implements per layer: these agree to rounding
    by_name = {r.name: r for r in validate_memory()}
    for model in ("22b", "175b", "530b", "1t"):
        for row in ("tp", "tp-sp", "tp-sel", "tp-sp-sel", "full"):
            err = by_name[f"korthikanti-{model}-layer-{row}"].error
            assert err is not None and abs(err) < 1e-4


def test_all_includes_memory_and_throughput():
    out = _cli("project", "validate", "--json")
    data = json.loads(out.stdout)
    assert {r["table"] for r in data["rows"]} == set(table_names()) - {MEMORY}
    assert data["memory"]["figures"]
    assert data["targets_met"] == (data["throughput_targets_met"] and data["memory"]["targets_met"])


# --- the loaders on hostile input

GOOD_ROW = "  - {workload: llama3-8b, gpus: 8, layout: {tp: 8}, published: 1000.0}\n"
HEAD = "format: commlens.published/1\nname: t\ntopology: dgx-h100\nmetric: tokens_per_s_per_gpu\nrows:\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("format: something/2\nrows: []\n", "format must be 'commlens.published/1'"),
        ("- just a list\n", "format must be 'commlens.published/1'"),
        (HEAD + GOOD_ROW.replace("published:", "speed: 1, published:"), "row 1: unknown key speed"),
        (HEAD + "  - {workload: llama3-8b, gpus: 8}\n", "row 1: missing published"),
        (HEAD + GOOD_ROW.replace("1000.0", ".nan"), "row 1: published must be a finite positive number, got nan"),
        (HEAD + GOOD_ROW.replace("1000.0", "fast"), "row 1: published must be a finite positive number, got 'fast'"),
        (HEAD + GOOD_ROW.replace("gpus: 8", "gpus: 8.5"), "row 1: gpus must be a positive integer"),
        (HEAD.replace("tokens_per_s_per_gpu", "joules"), "metric must be one of tflops_per_gpu"),
        (HEAD + "  - {workload: a\n", "while parsing"),
    ],
    ids=["format", "not-a-mapping", "unknown-key", "missing-published", "nan", "string", "gpus", "metric", "yaml"],
)
def test_load_set_refuses_hostile_files(tmp_path, text, problem):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(CommlensError) as e:
        load_set("bad", directory=tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'bad.yaml'}: ")
    assert problem in str(e.value)


def test_loader_reads_a_good_file_and_lists_its_directory(tmp_path):
    (tmp_path / "good.yaml").write_text(HEAD + GOOD_ROW)
    (tmp_path / "memory.yaml").write_text("format: commlens.published-memory/1\nfigures: []\n")
    assert table_names(tmp_path) == [SC21, "good", MEMORY]
    t = load_set("good", directory=tmp_path)
    assert t.rows[0].published == 1000.0 and t.rows[0].topology == "dgx-h100"
    assert load_memory_figures(tmp_path) == []
    with pytest.raises(CommlensError, match="no published table 'gone'"):
        load_set("gone", directory=tmp_path)


FIGURE = (
    "format: commlens.published-memory/1\nfigures:\n"
    "  - {name: f, workload: llama3-8b, gpus: 8, layout: {tp: 8}, measures: model_states, stage: any,"
    " published_bytes: 1.0e+10, note: 'printed: x'}\n"
)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("published-memory/1", "published/1", "format must be 'commlens.published-memory/1'"),
        ("measures: model_states", "measures: heat", "f: measures must be one of activations_per_layer"),
        ("stage: any", "stage: middle", "f: stage must be one of first, last, any"),
        ("1.0e+10", ".nan", "f: published_bytes must be a finite positive number"),
        ("'printed: x'", "'guessed: x'", "f: note must start with one of printed:, formula:, bound:"),
        ("'printed: x'", "'bound: x'", "a bound is a peak_reserved figure"),
        (", stage: any", ", stage: any, colour: red", "figure 1: unknown key colour"),
        (", gpus: 8", "", "figure 1: missing gpus"),
    ],
    ids=["format", "measures", "stage", "nan", "kind", "bound", "unknown-key", "missing"],
)
def test_memory_loader_refuses_hostile_files(tmp_path, old, new, problem):
    (tmp_path / "memory.yaml").write_text(FIGURE.replace(old, new))
    with pytest.raises(CommlensError) as e:
        load_memory_figures(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'memory.yaml'}: ")
    assert problem in str(e.value)


def test_memory_refused_layout_is_reported(tmp_path):
    (tmp_path / "memory.yaml").write_text(FIGURE.replace("{tp: 8}", "{tp: 3}"))
    (r,) = validate_memory(directory=tmp_path)
    assert r.predicted_bytes is None and r.error is None
    assert "does not divide 8 GPUs" in r.refused
