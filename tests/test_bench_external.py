"""The worker runs unchanged under an external launcher (torchrun), as on a multi-node job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchutil import QUICK, clean_env, stored_runs, table_rows

from commlens.results import load_run
from commlens.results.table import column_header_lines


def test_torchrun_runs_the_worker_and_rank_0_prints_and_stores(tmp_path: Path) -> None:
    out, db = tmp_path / "run.json", tmp_path / "results.db"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "commlens.bench",
            "--op",
            "all_reduce,all_gather",
            "-b",
            "8",
            "-e",
            "1K",
            "-f",
            "4",
            *QUICK,
            "--json",
            str(out),
            "--db",
            str(db),
            "--tag",
            "torchrun",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = column_header_lines()
    assert lines.count(header[1]) == 1  # only rank 0 prints the table
    rows = table_rows(proc.stdout)
    assert [r.split()[0] for r in rows] == ["8", "32", "128", "512"] + ["8", "32", "128", "512"]
    assert "# Out of bounds values : 0 OK" in lines
    run = load_run(out)
    assert run.world_size == 2 and run.status == "complete" and run.tag == "torchrun"
    assert {m.op for m in run.measurements} == {"all_reduce", "all_gather"}
    assert all(m.nwrong == 0 and len(m.samples_s) == 3 for m in run.measurements)
    assert len(run.measurements) == 4 + 8  # all_reduce in place only, all_gather both placements
    assert sum(run.system.ranks_per_host.values()) == 2 and len(run.system.device_names) == 2
    (stored,) = stored_runs(db)
    assert (stored["run_id"], stored["nmeasurements"], stored["world_size"]) == (run.run_id, 12, 2)
    assert f"# stored run {run.run_id}" in proc.stderr
    assert json.loads(out.read_text())["measurements"][0]["world_size"] == 2


def test_under_torchrun_rank_0_refuses_a_bad_destination_before_the_sweep(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "commlens.bench",
            *QUICK,
            "--json",
            str(tmp_path),
            "--no-store",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert f"error: --json {tmp_path}: is a directory; give a file name" in proc.stderr
    assert table_rows(proc.stdout) == []
