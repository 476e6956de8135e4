"""``commlens bench`` on real gloo groups of 1, 2, 3 and 4 ranks: every op validates, the outputs agree.

One launcher call per world size runs every op of the catalog over several dtypes and reductions
(all of them at world sizes 1 and 3); the tests below read its table, its JSON files and the store.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from benchutil import ALL_OPS, QUICK, clean_env, commlens, stored_runs, table_rows

from commlens.ops import OPS
from commlens.results import DTYPE_SIZES, load_run, run_to_dict
from commlens.results.table import column_header_lines

INT_DTYPES = ("int32", "int64", "int8", "uint8")

# world size -> what to sweep besides the ops (sizes chosen so some do not split evenly over the ranks)
SWEEPS: dict[int, tuple[str, ...]] = {
    1: ("-d", "all", "-o", "all", "-b", "1K"),
    2: ("-d", "float32,bfloat16,int64,uint8", "-o", "sum,min,avg", "-r", "all", "-b", "8", "-e", "4K", "-f", "512"),
    3: ("-d", "all", "-o", "all", "-b", "64", "-e", "4K", "-f", "64"),
    4: ("-d", "float16,float64,int8,int32", "-o", "sum,prod,max", "-b", "8", "-e", "4K", "-f", "512"),
}
# (out-of-place, in-place) as torch.distributed offers them
PLACEMENTS = {
    "all_reduce": {True},
    "broadcast": {True},
    "reduce": {True},
    "all_to_all": {False},
    "sendrecv": {False},
    "barrier": {False},
    "all_gather": {False, True},
    "reduce_scatter": {False, True},
    "gather": {False, True},
    "scatter": {False, True},
}
REQUIRED_KEYS = {
    "op",
    "algo",
    "dtype",
    "redop",
    "root",
    "size_bytes",
    "count",
    "in_place",
    "world_size",
    "samples_s",
    "mean_s",
    "p50_s",
    "p95_s",
    "p99_s",
    "min_s",
    "max_s",
    "cv",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "nwrong",
}


@dataclass
class Sweep:
    world: int
    proc: subprocess.CompletedProcess[str]
    doc: dict[str, Any]  # the --json file
    nccl: dict[str, Any]  # the --nccl-tests-json file
    json_path: Path
    db: Path

    @property
    def measurements(self) -> list[dict[str, Any]]:
        return self.doc["measurements"]


_CACHE: dict[int, Sweep] = {}


def _run_sweep(world: int, tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """The world size's sweep, run once per test session."""
    if world not in _CACHE:
        out = tmp_path_factory.mktemp(f"sweep{world}")
        json_path, nccl_path, db = out / "run.json", out / "nccl.json", out / "results.db"
        proc = commlens(
            "bench",
            "--nproc",
            str(world),
            "--op",
            ",".join(ALL_OPS),
            *SWEEPS[world],
            *QUICK,
            "--json",
            str(json_path),
            "--nccl-tests-json",
            str(nccl_path),
            "--db",
            str(db),
            "--tag",
            f"world{world}",
            "--revision",
            "rev-abc",
            timeout=240,
            env=clean_env(NCCL_COMMLENS_TEST=f"world{world}"),
        )
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        _CACHE[world] = Sweep(
            world, proc, json.loads(json_path.read_text()), json.loads(nccl_path.read_text()), json_path, db
        )
    return _CACHE[world]


@pytest.fixture(params=sorted(SWEEPS), ids=lambda w: f"world{w}")
def sweep(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    return _run_sweep(request.param, tmp_path_factory)


def _cfg_list(sweep: Sweep, key: str) -> list[Any]:
    return list(sweep.doc["config"][key])


def _requested_sizes(sweep: Sweep) -> list[int]:
    cfg = sweep.doc["config"]
    sizes, size = [], cfg["min_bytes"]
    while size <= cfg["max_bytes"]:
        sizes.append(size)
        size *= cfg["step_factor"]
    return sizes


def test_every_row_validates(sweep: Sweep) -> None:
    assert sweep.doc["status"] == "complete"
    assert sweep.measurements
    assert [m for m in sweep.measurements if m["nwrong"] != 0] == []
    assert "# Out of bounds values : 0 OK" in sweep.proc.stdout.splitlines()
    assert "error" not in sweep.proc.stderr.lower()


def test_every_op_dtype_and_reduction_is_measured(sweep: Sweep) -> None:
    """Each combination has a row per size and placement, or a note saying the backend refused it."""
    world = sweep.world
    every = sweep.doc["config"]["roots"] in ([], "all")  # "all" since BenchConfig.roots says it in words
    roots = list(range(world)) if every else _cfg_list(sweep, "roots")
    have: dict[tuple, set[tuple[int, bool]]] = {}
    for m in sweep.measurements:
        have.setdefault((m["op"], m["dtype"], m["redop"], m["root"]), set()).add((m["size_bytes"], m["in_place"]))
    skipped = [n for n in sweep.doc["notes"] if n.startswith("skipped ")]
    dtypes = _cfg_list(sweep, "dtypes")
    for op in ALL_OPS:
        spec = OPS[op]
        if op == "barrier":  # no payload: one row per run
            assert len([m for m in sweep.measurements if m["op"] == "barrier"]) == 1
            (bar,) = [m for m in sweep.measurements if m["op"] == "barrier"]
            assert (bar["size_bytes"], bar["count"], bar["in_place"]) == (0, 0, False)
            continue
        for dtype in dtypes:
            elem = DTYPE_SIZES[dtype]
            for redop in _cfg_list(sweep, "redops") if spec.reduces else [None]:
                for root in roots if spec.has_root else [None]:
                    got = have.get((op, dtype, redop, root))
                    if got is None:
                        # gloo refuses avg on integers; nothing else may be missing, and the skip is said
                        assert redop == "avg" and dtype in INT_DTYPES, (op, dtype, redop, root)
                        said = [
                            n
                            for n in skipped
                            if re.match(rf"skipped {op} size \d+ B {dtype} avg( root {root})? on gloo: ", n)
                        ]
                        assert said and f"# {said[0]}" in sweep.proc.stdout.splitlines()
                        continue
                    want = {
                        (spec.plan_size(s, elem, world).size_bytes, p)
                        for s in _requested_sizes(sweep)
                        for p in PLACEMENTS[op]
                    }
                    assert got == want, (op, dtype, redop, root)
    # floating-point avg is supported by gloo and must have run
    assert any(
        m["redop"] == "avg" and m["dtype"] in ("float32", "float16", "bfloat16", "float64") for m in sweep.measurements
    ) == ("avg" in _cfg_list(sweep, "redops"))


def test_rows_follow_the_catalog_and_the_timing_rules(sweep: Sweep) -> None:
    iters = sweep.doc["config"]["iters"]
    for m in sweep.measurements:
        assert REQUIRED_KEYS <= set(m), REQUIRED_KEYS - set(m)
        assert m["world_size"] == sweep.world and m["algo"] == "builtin"
        elem = DTYPE_SIZES[m["dtype"]]
        assert any(
            OPS[m["op"]].plan_size(s, elem, sweep.world).size_bytes == m["size_bytes"]
            and OPS[m["op"]].plan_size(s, elem, sweep.world).count == m["count"]
            for s in _requested_sizes(sweep)
        ), m["op"]
        assert (m["redop"] is not None) == OPS[m["op"]].reduces and m["redop"] != "none"
        assert (m["root"] is not None and m["root"] >= 0) == OPS[m["op"]].has_root
        assert m["root"] is None or m["root"] >= 0
        # every iteration kept; each is the slowest rank's time
        samples = m["samples_s"]
        assert len(samples) == iters and m["iterations"] == iters
        assert len(m["rank_samples_s"]) == sweep.world
        # one host: each iteration runs from the last rank's start to the last rank's end, which can
        # never exceed the longest rank's own duration (see commlens.bench.worker.iteration_times)
        assert all(0 <= s <= max(col) + 1e-12 for s, col in zip(samples, zip(*m["rank_samples_s"])))
        assert all(s > 0 for s in samples)
        assert m["mean_s"] == pytest.approx(sum(samples) / iters, rel=1e-12)
        assert m["min_s"] == min(samples) and m["max_s"] == max(samples)
        assert m["min_s"] <= m["p50_s"] <= m["p95_s"] <= m["p99_s"] <= m["max_s"]
        assert m["cv"] >= 0
        # bandwidths from the mean time, busBW by the nccl-tests factor
        assert m["algbw_bytes_per_s"] == pytest.approx(m["size_bytes"] / m["mean_s"], rel=1e-12)
        factor = OPS[m["op"]].busbw_factor(sweep.world)
        assert m["busbw_bytes_per_s"] == pytest.approx(m["algbw_bytes_per_s"] * factor, rel=1e-12, abs=1e-300)
        assert m["busbw_p50_bytes_per_s"] == pytest.approx(m["size_bytes"] / m["p50_s"] * factor, rel=1e-12, abs=1e-300)


def test_no_two_rows_are_the_same_experiment(sweep: Sweep) -> None:
    keys = [
        (m["op"], m["algo"], m["dtype"], m["redop"], m["root"], m["size_bytes"], m["in_place"])
        for m in sweep.measurements
    ]
    # sizes that round to the same bytes (8 B and 12 B on 4 ranks) could collide; these sweeps have none
    assert len(keys) == len(set(keys))


def test_table_on_the_terminal(sweep: Sweep) -> None:
    lines = sweep.proc.stdout.splitlines()
    header = column_header_lines()
    start = lines.index(header[0])
    assert lines[start : start + 3] == header
    assert f"world size {sweep.world}" in sweep.proc.stdout
    assert sum(line.startswith("#  Rank ") for line in lines) == sweep.world
    rows = table_rows(sweep.proc.stdout)
    distinct = {(m["op"], m["dtype"], m["redop"], m["root"], m["size_bytes"]) for m in sweep.measurements}
    assert len(rows) == len(distinct)
    width = len(header[1])
    assert all(len(r) == width for r in rows)  # columns line up under the header
    avg = [line for line in lines if line.startswith("# Avg bus bandwidth")]
    assert len(avg) == 1
    assert float(avg[0].split(":")[1]) == pytest.approx(sweep.doc["avg_busbw_bytes_per_s"] / 1e9, rel=1e-5)
    first = next(m for m in sweep.measurements if m["op"] == "all_reduce")
    row = next(
        r
        for r in rows
        if r.split()[:5] == [str(first["size_bytes"]), str(first["count"]), first["dtype"], first["redop"], "-1"]
    )
    # out-of-place half is "-" (torch offers all_reduce in place only); in-place time in us, #wrong 0
    fields = row.split()
    assert fields[5:11] == ["-"] * 6
    assert float(fields[11]) == pytest.approx(first["mean_s"] * 1e6, rel=0.01) and fields[14] == "0"


def test_sizes_not_divisible_by_the_ranks_are_rounded_and_said(tmp_path_factory: pytest.TempPathFactory) -> None:
    """At 3 ranks, 64 B of float32 is 16 elements: 5 per rank, 60 B, as nccl-tests runs it."""
    sweep3 = _run_sweep(3, tmp_path_factory)
    note = "all_gather float32: requested 64 B, ran 60 B (5 elements per rank x 3 ranks, rounded down as nccl-tests)"
    assert f"# note: {note}" in sweep3.proc.stdout.splitlines()
    assert note in sweep3.doc["notes"]
    ag = [m for m in sweep3.measurements if m["op"] == "all_gather" and m["dtype"] == "float32"]
    assert sorted({(m["size_bytes"], m["count"]) for m in ag}) == [(60, 5), (4092, 341)]


def test_json_file_loads_and_round_trips(sweep: Sweep) -> None:
    run = load_run(sweep.json_path)
    assert run.run_id == sweep.doc["run_id"] and run.world_size == sweep.world
    assert len(run.measurements) == len(sweep.measurements)
    again = run_to_dict(run)
    assert again["measurements"] == sweep.measurements
    assert again["format"] == sweep.doc["format"] == "commlens.run/5"


def test_run_metadata(sweep: Sweep) -> None:
    doc = sweep.doc
    assert (doc["tag"], doc["revision"]) == (f"world{sweep.world}", "rev-abc")
    assert "commlens bench" in doc["command_line"] and f"--nproc {sweep.world}" in doc["command_line"]
    assert doc["started_at"] <= doc["finished_at"]
    system = doc["system"]
    assert system["world_size"] == sweep.world and system["backend"] == "gloo" and system["device"] == "cpu"
    assert sum(system["ranks_per_host"].values()) == sweep.world and len(system["hosts"]) == 1
    assert system["device_names"] == ["cpu"] * sweep.world
    assert system["torch_version"] and system["python_version"] and system["cpu_model"] and system["cpu_cores"] >= 1
    assert system["commlens_version"] and system["fingerprint"]
    assert system["env"]["NCCL_COMMLENS_TEST"] == f"world{sweep.world}"  # NCCL_*/GLOO_*/TORCH_* are recorded
    assert "OMP_NUM_THREADS" in system["env"]
    assert doc["config"]["timing"] == "shared_clock"  # every rank on this one host: one clock


def test_store_lists_and_shows_the_same_run(sweep: Sweep) -> None:
    runs = stored_runs(sweep.db)
    assert [(r["run_id"], r["status"], r["world_size"], r["nmeasurements"], r["tag"]) for r in runs] == [
        (sweep.doc["run_id"], "complete", sweep.world, len(sweep.measurements), f"world{sweep.world}")
    ]
    assert sorted(runs[0]["ops"]) == sorted(ALL_OPS)
    assert f"# stored run {sweep.doc['run_id']} (complete, {len(sweep.measurements)} rows)" in sweep.proc.stderr
    prefix = sweep.doc["run_id"][:8]
    shown = commlens("show", prefix, "--db", str(sweep.db), "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["measurements"] == sweep.measurements
    assert {k: v for k, v in doc.items() if k != "measurements"} == {
        k: v for k, v in sweep.doc.items() if k != "measurements"
    }
    # the table again, same rows as the terminal showed
    text = commlens("show", prefix, "--db", str(sweep.db))
    assert text.returncode == 0, text.stderr
    assert sorted(table_rows(text.stdout)) == sorted(table_rows(sweep.proc.stdout))
    listing = commlens("runs", "--db", str(sweep.db))
    assert listing.returncode == 0
    assert sweep.doc["run_id"][:12] in listing.stdout  # the id users copy is printed whole, even when piped


def test_nccl_tests_json_layout(sweep: Sweep) -> None:
    nccl = sweep.nccl
    assert {
        "version",
        "start_time",
        "args",
        "env",
        "nccl_version",
        "config",
        "devices",
        "results",
        "out_of_bounds",
        "average_bus_bandwidth",
        "errors",
    } <= set(nccl)
    assert {
        "nthreads",
        "ngpus",
        "minimum_bytes",
        "maximum_bytes",
        "step_factor",
        "warmup_iters",
        "iterations",
        "aggregated_iterations",
        "validation",
        "graph",
        "blocking_collectives",
        "parallel_init",
    } <= set(nccl["config"])
    assert (nccl["config"]["minimum_bytes"], nccl["config"]["iterations"]) == (sweep.doc["config"]["min_bytes"], 3)
    assert [d["rank"] for d in nccl["devices"]] == list(range(sweep.world))
    assert {"pid", "hostname", "device"} <= set(nccl["devices"][0])
    assert nccl["out_of_bounds"] == {"count": 0, "okay": True}
    assert nccl["average_bus_bandwidth"]["bandwidth"] == pytest.approx(sweep.doc["avg_busbw_bytes_per_s"] / 1e9)
    distinct = {(m["op"], m["dtype"], m["redop"], m["root"], m["size_bytes"]) for m in sweep.measurements}
    assert len(nccl["results"]) == len(distinct)
    types = {"float32": "float", "float16": "half", "float64": "double", "bfloat16": "bfloat16"}
    for r in nccl["results"]:
        assert {
            "size",
            "count",
            "type",
            "redop",
            "root",
            "out_of_place",
            "in_place",
            "actual_iterations",
            "experiment_name",
        } <= set(r)
        assert isinstance(r["root"], str) and r["actual_iterations"] == 3
        pair = {
            p: m
            for m in sweep.measurements
            for p in ("out_of_place", "in_place")
            if (m["op"], m["size_bytes"], m["redop"] or "none", -1 if m["root"] is None else m["root"])
            == (r["experiment_name"], r["size"], r["redop"], int(r["root"]))
            and types.get(m["dtype"], m["dtype"]) == r["type"]
            and m["in_place"] == (p == "in_place")
        }
        for place in ("out_of_place", "in_place"):
            if place not in pair:
                assert r[place] is None
                continue
            m, half = pair[place], r[place]
            assert half["time"] == pytest.approx(m["mean_s"] * 1e6)
            assert half["alg_bw"] == pytest.approx(m["algbw_bytes_per_s"] / 1e9)
            assert half["bus_bw"] == pytest.approx(m["busbw_bytes_per_s"] / 1e9)
            assert half["nwrong"] == 0
            assert math.isclose(half["p99"], m["p99_s"] * 1e6)
