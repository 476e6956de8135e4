"""`commlens topology ...` and `commlens model predict | fit | check` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from commlens.cli.app import _register, app
from commlens.model import predict
from commlens.topology import load_topology, topology_from_dict

FIXTURE = Path(__file__).parent / "data" / "model" / "gloo-4ranks.json"
_register()


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def test_predict_json_has_the_documented_keys_and_the_library_numbers() -> None:
    out = json.loads(
        ok(
            "model",
            "predict",
            "--topology",
            "dgx-h100",
            "--nodes",
            "16",
            "--op",
            "all_reduce",
            "--size",
            "1G",
            "--json",
        )
    )
    for key in ("time_s", "algbw_bytes_per_s", "busbw_bytes_per_s", "algo", "auto", "world_size", "breakdown"):
        assert key in out
    expected = predict(load_topology("dgx-h100"), "all_reduce", 1 << 30, nodes=16)
    assert out["algo"] == expected.algo and out["auto"] is True
    assert out["time_s"] == pytest.approx(expected.time_s)
    assert out["world_size"] == 128 and out["size_bytes"] == 1 << 30
    assert {"stage", "level", "term", "amount", "time_s", "critical"} <= set(out["breakdown"][0])


def test_predict_prints_one_line_with_time_and_bandwidths() -> None:
    out = ok("model", "predict", "-t", "dgx-h100", "--op", "all_reduce", "--size", "8G", "--algo", "ring")
    assert out.splitlines()[0] == "# dgx-h100: 1 node x 8 ranks = 8 ranks; all_reduce 8589934592 B, algo ring"
    assert "busBW 370." in out and "bottleneck scale_up bandwidth" in out
    out = ok("model", "predict", "-t", "dgx-h100", "--size", "1M", "--breakdown")
    assert "stage  level" in out and "launch" in out


def test_predict_all_compares_every_algorithm_and_says_why_some_cannot_run() -> None:
    out = ok("model", "predict", "-t", "dgx-a100", "--op", "all_reduce", "--size", "256M", "--algo", "all")
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert set(lines) == {
        "ring",
        "recursive_doubling",
        "rabenseifner",
        "binomial",
        "double_binary_tree",
        "direct",
        "hierarchical",
        "nvls",
    }
    assert "cannot run: nvls needs in-switch reduction" in lines["nvls"]
    assert sum("<- fastest" in line for line in lines.values()) == 1
    rows = json.loads(ok("model", "predict", "-t", "dgx-a100", "--size", "256M", "--algo", "all", "--json"))
    assert {r["algo"] for r in rows if "infeasible" in r} == {"hierarchical", "nvls"}


def test_sweep_predicts_the_nccl_tests_table() -> None:
    out = json.loads(
        ok(
            "model",
            "predict",
            "-t",
            "dgx-h100",
            "-N",
            "2",
            "--op",
            "all_reduce,all_gather",
            "--sweep",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "4",
            "--json",
        )
    )
    requested = [8 * 4**k for k in range(9)]  # 8 B .. 512 KiB: the last step under -e 1M
    assert out["world_size"] == 16 and len(out["rows"]) == 2 * len(requested)
    first = out["rows"][0]
    assert (first["op"], first["size_bytes"], first["count"], first["redop"], first["root"]) == (
        "all_reduce",
        8,
        2,
        "sum",
        -1,
    )
    for row in out["rows"]:
        assert {"time_s", "algbw_bytes_per_s", "busbw_bytes_per_s", "algo"} <= set(row)
    ag = [r for r in out["rows"] if r["op"] == "all_gather"]
    # rounded down to whole float32 elements per rank, as nccl-tests does
    assert [r["size_bytes"] for r in ag] == [s // (4 * 16) * 4 * 16 for s in requested]
    text = ok("model", "predict", "-t", "dgx-h100", "--op", "all_reduce", "--sweep", "-b", "1K", "-e", "4K")
    lines = text.splitlines()
    assert "(predicted, not measured)" in lines[0]
    assert lines[2].split()[:5] == ["#", "size", "count", "type", "redop"]
    assert [line.split()[0] for line in lines[4:]] == ["1024", "2048", "4096"]


@pytest.mark.parametrize(
    "args,message",
    [
        (("--size", "12Q"), "--size: invalid size '12Q'"),
        (("--size", "1M", "--op", "allreduse"), "unknown op 'allreduse'"),
        (("--size", "1M", "--algo", "tree"), "unknown algorithm 'tree'"),
        (("--size", "1M", "--algo", "bruck"), "no bruck algorithm for all_reduce"),
        (("--size", "1M", "--nodes", "0"), "--nodes must be >= 1"),
        (("--size", "1M", "--ranks-per-node", "9"), "ranks per node must be between 1 and dgx-h100's 8"),
        (("--size", "1M", "--nodes", "100000"), "100000 nodes exceed dgx-h100's fabric"),
        ((), "give --size (a message size) or --sweep"),
        (("--size", "1M", "--sweep"), "--size and --sweep exclude each other"),
        (("--sweep", "-b", "1M", "-e", "1K"), "sizes must satisfy"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    result = run("model", "predict", "-t", "dgx-h100", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_topology_exits_2_listing_the_presets() -> None:
    result = run("model", "predict", "-t", "dgx-h900", "--size", "1M")
    assert result.exit_code == 2 and "unknown topology preset 'dgx-h900'; known: b200" in result.stderr
    result = run("topology", "show", "no-such.yaml")
    assert result.exit_code == 2 and "topology file 'no-such.yaml' not found" in result.stderr


def test_a_bad_topology_file_exits_2_naming_the_field(tmp_path) -> None:
    data = yaml.safe_load(ok("topology", "show", "dgx-h100"))
    data["scale_out"]["nics_per_node"] = 3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("model", "predict", "-t", str(path), "--size", "1M")
    assert result.exit_code == 2
    assert "bad.yaml: scale_out.nics_per_node: 3 NICs do not divide the 8 accelerators per node" in result.stderr


def test_topology_show_prints_yaml_that_loads_back_and_json() -> None:
    shown = yaml.safe_load(ok("topology", "show", "gb200-nvl72"))
    assert topology_from_dict(shown) == load_topology("gb200-nvl72")
    as_json = json.loads(ok("topology", "show", "dgx-h100", "--json"))
    assert as_json["scale_up"]["bandwidth_bytes_per_s"] == 450e9
    listed = ok("topology", "list")
    for name in ("dgx-a100", "dgx-h100", "dgx-h200", "gb200-nvl72", "b200", "local-cpu"):
        assert f"\n{name} " in listed
    assert {r["name"] for r in json.loads(ok("topology", "list", "--json"))} >= {"dgx-h100", "local-cpu"}


def test_fit_then_check_a_stored_run_file(tmp_path) -> None:
    out_path = tmp_path / "box.yaml"
    text = ok("model", "fit", str(FIXTURE), "--stat", "min", "--output", str(out_path), "--name", "box")
    assert "scale_up.rate_bytes_per_s" in text and "# fit error: MAPE" in text
    assert text.count("all_gather") >= 30  # every row's residual is printed
    fitted = load_topology(out_path)
    assert fitted.name == "box" and fitted.calibration["rows"] == 105
    report = json.loads(ok("model", "check", str(FIXTURE), "--topology", str(out_path), "--stat", "min", "--json"))
    assert report["summary"]["rows"] == 105
    assert set(report["by_op"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"}
    row = report["rows"][0]
    assert {"measured_s", "predicted_s", "error_pct", "model"} <= set(row)
    assert fitted.calibration["parameters"]["scale_up.latency_s"]["value"] == fitted.scale_up.latency_s


def test_fit_json_lists_constants_and_residuals(tmp_path) -> None:
    run_json = json.loads(ok("model", "fit", str(FIXTURE), "--stat", "min", "--min-size", "64K", "--json"))
    assert {p["name"] for p in run_json["parameters"]} >= {"scale_up.latency_s", "launch_latency_s"}
    # 64 KiB .. 16 MiB: 9 sizes; gloo runs all_gather and reduce_scatter in and out of place, the rest one way
    assert len(run_json["residuals"]) == 9 * (1 + 2 + 2 + 1 + 1)
    assert run_json["mape_pct"] == pytest.approx(
        sum(abs(r["error_pct"]) for r in run_json["residuals"]) / len(run_json["residuals"])
    )


def test_check_fails_with_exit_1_beyond_max_mape_and_2_on_unknown_runs(tmp_path) -> None:
    result = run("model", "check", str(FIXTURE), "--max-mape", "0.5")
    assert result.exit_code == 1 and "exceeds --max-mape 0.5%" in result.stderr
    result = run("model", "check", "feedbeef", "--db", str(tmp_path / "empty.db"))
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and "feedbeef" in result.stderr
    result = run("model", "fit", str(FIXTURE), "--stat", "p90")
    assert result.exit_code == 2 and "--stat must be one of mean, p50, min" in result.stderr


def test_model_predict_starts_without_torch() -> None:
    code = (
        "import sys\nsys.argv = ['commlens', 'model', 'predict', '-t', 'dgx-h100', '--size', '1G']\n"
        "from commlens.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'sqlalchemy') if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "busBW" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "[]"


def test_runs_are_found_in_the_store_by_id_prefix(tmp_path) -> None:
    from commlens.results import load_run
    from commlens.store import Store

    db = str(tmp_path / "results.db")
    run = load_run(FIXTURE)
    with Store.open(db) as store:
        store.save_run(run)
    report = json.loads(ok("model", "check", run.run_id[:8], "--db", db, "--stat", "min", "--json"))
    assert report["summary"]["rows"] == 105 and report["rows"][0]["run_id"] == run.run_id
