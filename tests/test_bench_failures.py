"""What a user sees when a benchmark cannot run or goes wrong (issue item 8): real ranks, injected faults.

Faults are injected through ``COMMLENS_INJECT_FAULT`` (see ``commlens.bench.faults``): one rank raises,
hangs, or corrupts its output, inside a real gloo group started by ``commlens bench``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from benchutil import BIN, QUICK, clean_env, commlens, error_lines, stored_runs, table_rows


@pytest.mark.parametrize(
    "args, message",
    [
        (["--op", "all_reduce,allgatherr"], "unknown op 'allgatherr'"),
        (["--dtype", "float7"], "unknown dtype 'float7'"),
        (["--redop", "mean"], "unknown reduction 'mean'"),
        (["--backend", "carrier-pigeon"], "unknown backend 'carrier-pigeon'"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--device", "cuda"], "--device cuda: no CUDA device"),
        (["-b", "1M", "-e", "1K"], "min size 1048576 B is larger than max size 1024 B"),
        (["--root", "2"], "--root 2 is not a rank (world size 2)"),
        (["-b", "12x"], "invalid size '12x'"),
    ],
)
def test_bad_input_exits_2_naming_the_bad_value(args: list[str], message: str, tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    proc = commlens("bench", "--nproc", "2", *QUICK, "--db", str(db), *args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [line for line in proc.stderr.splitlines() if line.strip()]
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not db.exists() or stored_runs(db) == []


def test_nccl_on_a_cpu_machine_says_what_to_use_instead() -> None:
    proc = commlens("bench", "--nproc", "2", "--backend", "nccl", "--no-store", timeout=60)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: backend nccl needs CUDA GPUs and an NCCL-enabled torch; none here (use --backend gloo)"
    ]


def test_unsupported_combination_fails_when_asked(tmp_path: Path) -> None:
    """gloo cannot average integers. By default such rows are skipped with a note (see test_bench_sweep);
    with --on-unsupported fail the run stops, saying which combination."""
    db = tmp_path / "results.db"
    proc = commlens(
        "bench",
        "--nproc",
        "2",
        "--op",
        "all_reduce",
        "-d",
        "int32",
        "-o",
        "avg",
        "-b",
        "64",
        *QUICK,
        "--on-unsupported",
        "fail",
        "--db",
        str(db),
        timeout=120,
    )
    assert proc.returncode == 2
    (err,) = error_lines(proc.stderr)
    assert err.startswith("error: all_reduce size 64 B int32 avg on gloo: ")
    assert "Traceback" not in proc.stderr
    assert not db.exists() or stored_runs(db) == []


def test_a_rank_that_raises_stops_every_rank_and_is_named(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    env = clean_env(COMMLENS_INJECT_FAULT="raise:rank=2,op=all_reduce,size=1024")
    t0 = time.monotonic()
    proc = commlens(
        "bench",
        "--nproc",
        "4",
        "--op",
        "all_reduce",
        "-b",
        "256",
        "-e",
        "4K",
        *QUICK,
        "--db",
        str(db),
        env=env,
        timeout=120,
    )
    assert time.monotonic() - t0 < 90
    assert proc.returncode == 1
    errors = error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr  # one explanation, not one per rank
    assert errors[0].startswith("error: rank 2: all_reduce size 1024 B float32 sum")
    assert "injected failure" in errors[0] and "ranks 0, 1, 3 stopped waiting for it" in errors[0]
    assert "Traceback" not in proc.stderr
    assert len(table_rows(proc.stdout)) == 2  # 256 B and 512 B finished before the failure
    assert stored_runs(db) == []  # a failed run is not stored as if it were complete


def test_a_rank_that_hangs_is_named_after_the_timeout(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    env = clean_env(COMMLENS_INJECT_FAULT="hang:rank=1,op=all_gather,size=48")
    t0 = time.monotonic()
    proc = commlens(
        "bench",
        "--nproc",
        "3",
        "--op",
        "all_gather",
        "-b",
        "24",
        "-e",
        "96",
        *QUICK,
        "--timeout",
        "5",
        "--db",
        str(db),
        env=env,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0 and proc.returncode != 130
    assert elapsed < 60, f"took {elapsed:.0f} s with --timeout 5"
    errors = error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    err = errors[0]
    assert err.startswith("error: rank 1 hung")
    assert "all_gather size 48 B float32" in err
    assert "5 s timeout" in err
    assert stored_runs(db) == []


def test_wrong_results_fail_the_run_naming_op_size_dtype_and_rank(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    env = clean_env(COMMLENS_INJECT_FAULT="corrupt:rank=1,op=reduce_scatter")
    proc = commlens(
        "bench",
        "--nproc",
        "3",
        "--op",
        "all_reduce,reduce_scatter",
        "-d",
        "bfloat16",
        "-b",
        "96",
        *QUICK,
        "--no-store",
        "--json",
        str(out),
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1
    errors = error_lines(proc.stderr)
    assert errors == [
        "error: wrong results: reduce_scatter size 96 B bfloat16 sum out-of-place: 1 wrong elements on rank 1",
        "error: wrong results: reduce_scatter size 96 B bfloat16 sum in-place: 1 wrong elements on rank 1",
    ]
    assert "# Out of bounds values : 2 FAILED" in proc.stdout.splitlines()
    doc = json.loads(out.read_text())
    assert {(m["op"], m["in_place"]): m["nwrong"] for m in doc["measurements"]} == {
        ("all_reduce", True): 0,
        ("reduce_scatter", False): 1,
        ("reduce_scatter", True): 1,
    }


def test_ctrl_c_keeps_the_finished_rows_marked_incomplete(tmp_path: Path) -> None:
    db, out = tmp_path / "results.db", tmp_path / "run.json"
    # One round: with rounds a row is printed only once its last round is done: no first row to wait for.
    proc = subprocess.Popen(
        [
            str(BIN / "commlens"),
            "bench",
            "--nproc",
            "2",
            "--op",
            "all_reduce",
            "-b",
            "8",
            "-e",
            "1G",
            "-n",
            "20",
            "-w",
            "1",
            "--rounds",
            "1",
            "--db",
            str(db),
            "--json",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        seen = []
        assert proc.stdout is not None
        for line in proc.stdout:  # wait for the first finished row
            seen.append(line)
            if line.strip() and not line.startswith("#"):
                break
        assert table_rows("".join(seen)), "no row was printed"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at a terminal signals the whole process group
        # Read on through the same text stream: communicate() reads the raw pipe and would lose the
        # lines the loop above has already buffered.
        rest = proc.stdout.read()
        proc.wait(timeout=60)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stdout = "".join(seen) + rest
    assert proc.returncode == 130, err
    assert "# run incomplete: interrupted before the sweep finished" in stdout
    rows = table_rows(stdout)
    (run,) = stored_runs(db)
    assert run["status"] == "incomplete"
    assert run["nmeasurements"] == len(rows) >= 1
    doc = json.loads(out.read_text())
    assert doc["status"] == "incomplete" and doc["run_id"] == run["run_id"]
    assert [m["size_bytes"] for m in doc["measurements"]] == [8 << i for i in range(len(rows))]
    assert all(m["nwrong"] == 0 for m in doc["measurements"])
