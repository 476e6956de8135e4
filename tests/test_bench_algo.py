"""``commlens bench --algo``: commlens' algorithms through the same harness as the built-ins, on real gloo ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchutil import commlens, error_lines, stored_runs
from typer.testing import CliRunner

from commlens.algos import ALGO_OPS, algorithms_for
from commlens.cli.app import _register, app

_register()

QUICK = ("-n", "2", "-w", "1", "-q", "--rounds", "1")  # one round, as benchutil.QUICK


@pytest.fixture(scope="module")
def every_algorithm(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    """Every registered algorithm of every op on 3 ranks, two sizes (one splits unevenly); avg, which int32 refuses."""
    out = tmp_path_factory.mktemp("algo")
    json_path, db = out / "run.json", out / "results.db"
    proc = commlens(
        "bench",
        "--nproc",
        "3",
        "--op",
        ",".join(ALGO_OPS),
        "--algo",
        "all",
        "-b",
        "20",
        "-e",
        "5K",
        "-f",
        "256",
        "-d",
        "float32,int32",
        "-o",
        "avg",
        *QUICK,
        "--json",
        str(json_path),
        "--db",
        str(db),
        timeout=300,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(json_path.read_text()), proc.stdout, db


def test_every_algorithm_runs_validated_in_both_placements_torch_offers(every_algorithm) -> None:
    doc, _, _ = every_algorithm
    rows = doc["measurements"]
    assert doc["config"]["algos"] == ["all"]
    for op in ALGO_OPS:
        ran = {m["algo"] for m in rows if m["op"] == op}
        assert ran == set(algorithms_for(op)), op
    assert all(m["nwrong"] == 0 for m in rows)
    placements = {(m["op"], m["in_place"]) for m in rows}
    assert ("all_gather", False) in placements and ("all_gather", True) in placements
    assert ("reduce_scatter", True) in placements and ("all_to_all", True) not in placements
    assert ("all_reduce", False) not in placements  # in place only, as torch.distributed offers it
    assert {m["size_bytes"] for m in rows if m["op"] == "all_reduce"} == {20, 5120}


def test_a_combination_an_algorithm_refuses_is_skipped_with_a_note(every_algorithm) -> None:
    doc, stdout, _ = every_algorithm
    assert not any(m["dtype"] == "int32" and m["redop"] == "avg" for m in doc["measurements"])
    assert any(m["dtype"] == "int32" and m["redop"] is None for m in doc["measurements"])
    assert any(m["dtype"] == "float32" and m["redop"] == "avg" for m in doc["measurements"])
    assert "# skipped all_reduce size 20 B int32 avg on commlens ring: avg needs a floating-point tensor" in stdout


def test_the_table_marks_each_algorithm_and_the_store_keeps_it(every_algorithm) -> None:
    doc, stdout, db = every_algorithm
    assert "algos all" in stdout.splitlines()[1]
    for op in ALGO_OPS:
        for name in algorithms_for(op):
            assert f"# Collective test: {op}  algo {name}" in stdout
    (run,) = stored_runs(db)
    shown = commlens("show", run["run_id"], "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert "# Collective test: reduce_scatter  algo recursive_halving" in shown.stdout
    exported = commlens("show", run["run_id"], "--db", str(db), "--json")
    stored = {(m["op"], m["algo"]) for m in json.loads(exported.stdout)["measurements"]}
    assert stored == {(m["op"], m["algo"]) for m in doc["measurements"]}


def test_builtin_and_algorithms_share_one_run_and_chunk_bytes_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = commlens(
        "bench",
        "--nproc",
        "2",
        "--op",
        "broadcast",
        "--algo",
        "builtin,chain",
        "--chunk-bytes",
        "1K",
        "-b",
        "16K",
        "-r",
        "1",
        *QUICK,
        "--no-store",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["algos"] == ["builtin", "chain"] and doc["config"]["chunk_bytes"] == 1024
    assert [(m["algo"], m["root"], m["nwrong"]) for m in doc["measurements"]] == [("builtin", 1, 0), ("chain", 1, 0)]
    assert "# Collective test: broadcast\n" in proc.stdout and "# Collective test: broadcast  algo chain" in proc.stdout


def test_algo_list_names_every_registered_algorithm() -> None:
    proc = commlens("bench", "--algo", "list")
    assert proc.returncode == 0, proc.stderr
    listed = {tuple(line.split()[:2]) for line in proc.stdout.splitlines() if not line.startswith("#")}
    assert listed == {(op, name) for op in ALGO_OPS for name in algorithms_for(op, schemes=True)}
    schemes = [line for line in proc.stdout.splitlines() if "[hierarchical picks it]" in line]
    assert [line.split()[1] for line in schemes] == [
        "hierarchical_ring",
        "hierarchical_leaders",
        "hierarchical_one_way",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--op", "all_reduce", "--algo", "ring,nope"),
            "error: unknown all_reduce algorithm 'nope'; known: " + ", ".join(algorithms_for("all_reduce")),
        ),
        (
            ("--op", "all_reduce,all_gather", "--algo", "rabenseifner"),
            "error: unknown all_gather algorithm 'rabenseifner'",
        ),
        (("--op", "gather", "--algo", "ring"), "error: --algo ring: commlens implements no algorithms for gather"),
        (("--op", "all_reduce", "--algo", "ring", "--chunk-bytes", "0"), "error: --chunk-bytes must be > 0, got 0"),
        (("--op", "all_reduce", "--algo", "ring", "--chunk-bytes", "1X"), "error: --chunk-bytes: invalid size '1X'"),
    ],
)
def test_bad_algorithm_input_exits_2_before_any_rank_starts(args: tuple[str, ...], message: str) -> None:
    proc = CliRunner().invoke(app, ["bench", "--nproc", "2", *args, "--no-store"])  # refused before launching
    assert proc.exit_code == 2
    (line,) = error_lines(proc.stderr)
    assert line.startswith(message), line


def test_the_schemes_hierarchical_picks_run_by_their_own_names(tmp_path: Path) -> None:
    """``--algo hierarchical_ring,hierarchical_leaders``: the two-level schemes run as algorithms of their own."""
    json_path = tmp_path / "run.json"
    proc = commlens(
        "bench",
        "--nproc",
        "3",
        "--op",
        "all_reduce",
        "--algo",
        "hierarchical_ring,hierarchical_leaders",
        "-b",
        "20",
        "-e",
        "5K",
        "-f",
        "256",
        *QUICK,
        "--json",
        str(json_path),
        "--no-store",
        timeout=300,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    rows = json.loads(json_path.read_text())["measurements"]
    schemes = ("hierarchical_ring", "hierarchical_leaders")
    assert {(m["algo"], m["size_bytes"]) for m in rows} == {(a, s) for a in schemes for s in (20, 5120)}
    assert all(m["nwrong"] == 0 for m in rows)
