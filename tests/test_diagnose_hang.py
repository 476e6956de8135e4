"""commlens diagnose hang: real gloo Flight Recorder dumps (tests/scenarios/fr_hang.py), exact culprits.

Fixtures under tests/data/hang_<scenario>/ were produced once by 4-rank gloo
jobs with a 3 s timeout; each holds one dump per rank, written by
commlens.diagnose.flightrec (exception hook, SIGTERM, or on demand).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commlens.cli import diagnose_cmd  # noqa: F401  (registers the diagnose commands)
from commlens.cli.app import app
from commlens.diagnose.hang import DumpError, HangConfig, run
from commlens.ingest.flightrec import GroupConfig, read_dump_dir

DATA = Path(__file__).parent / "data"
SCENARIO = "tests/scenarios/fr_hang.py"


def _cli(*args: str):
    return CliRunner().invoke(app, ["diagnose", "hang", *args], catch_exceptions=False)


def test_skipped_collective_names_the_rank_that_never_arrived() -> None:
    report = run(HangConfig(DATA / "hang_hang"))
    d = report.divergence
    assert d is not None and d.kind == "missing_ranks"
    assert (d.process_group, d.process_group_desc, d.collective_seq_id) == ("0", "default_pg", 7)
    assert d.expected["op"] == "all_reduce" and d.expected["ranks"] == [0, 1, 3]
    assert d.expected["input_sizes"] == [[1024]] and d.expected["input_dtypes"] == ["Float"]
    [culprit] = d.culprits
    assert culprit["rank"] == 2 and culprit["last_collective_seq_id"] == 6 and culprit["last_op"] == "broadcast"
    assert culprit["dump_reason"] == "signal SIGTERM"
    # Where rank 2 was when torchrun stopped it: the "slow data loader" sleep of the scenario.
    assert culprit["frames"][0].endswith(f"{SCENARIO}:59 in main")
    assert d.expected["frames"][2].endswith(f"{SCENARIO}:61 in main")
    assert report.last_seq_by_rank == {0: 7, 1: 7, 2: 6, 3: 7}
    assert [(s.rank, s.reason) for s in report.suspects] == [(2, "missing_ranks")]


def test_op_mismatch_names_the_rank_that_called_broadcast() -> None:
    d = run(HangConfig(DATA / "hang_op_mismatch")).divergence
    assert d is not None and (d.kind, d.collective_seq_id) == ("op_mismatch", 7)
    assert d.expected["op"] == "all_reduce" and d.expected["ranks"] == [0, 2, 3]
    [culprit] = d.culprits
    assert (culprit["rank"], culprit["op"]) == (1, "broadcast")
    assert culprit["frames"][2].endswith(f"{SCENARIO}:64 in main")


def test_dtype_mismatch_gloo_let_through_is_found() -> None:
    d = run(HangConfig(DATA / "hang_dtype_mismatch")).divergence
    assert d is not None and (d.kind, d.collective_seq_id) == ("dtype_mismatch", 7)
    assert d.expected["input_dtypes"] == ["Float"] and d.expected["ranks"] == [0, 1, 2]
    [culprit] = d.culprits
    assert (culprit["rank"], culprit["op"], culprit["input_dtypes"]) == (3, "all_reduce", ["Int"])


def test_dtype_mismatch_gloo_aborts_on_names_the_dumpless_rank_first() -> None:
    """float64 vs float32: gloo aborts rank 2 (no dump); rank 0 dumped without entry stacks."""
    report = run(HangConfig(DATA / "hang_dtype_abort"))
    assert report.ranks == (0, 1, 3) and report.ranks_without_dump == (2,) and report.expected_ranks == (0, 1, 2, 3)
    assert [(s.rank, s.reason) for s in report.suspects] == [(2, "no_dump"), (3, "dtype_mismatch")]
    assert report.missing_evidence[2] == (
        "the pg_config of group 0 (default_pg) lists it (3 of 3 dumps)",
        "the file names run from fr_trace_rank_0 to fr_trace_rank_3 without fr_trace_rank_2",
    )
    d = report.divergence
    assert d is not None and (d.kind, d.collective_seq_id) == ("dtype_mismatch", 7)
    assert d.expected["ranks"] == [0, 1] and d.expected["input_dtypes"] == ["Float"]
    assert d.expected["frames"][2].endswith(f"{SCENARIO}:70 in main")  # rank 0's python_stack
    [culprit] = d.culprits
    assert (culprit["rank"], culprit["input_dtypes"]) == (3, ["Double"])
    assert culprit["frames"][2].endswith(f"{SCENARIO}:70 in main")


def test_healthy_run_is_consistent() -> None:
    report = run(HangConfig(DATA / "hang_healthy"))
    assert report.divergence is None and report.ranks == (0, 1, 2, 3) and report.ranks_without_dump == ()
    assert report.consistent and report.suspects == ()
    assert report.backend == "gloo"


def test_gloo_pg_config_quirk_is_mapped_to_the_default_group() -> None:
    dumps = read_dump_dir(DATA / "hang_healthy").dumps
    raw = pickle.loads((DATA / "hang_healthy" / "fr_trace_rank_0").read_bytes())
    assert list(raw["pg_config"]) == [""]  # what gloo writes (torchfrtrace's KeyError)
    assert {e["state"] for e in raw["entries"]} == {"scheduled"}
    assert dumps[0].groups == {"0": GroupConfig(name="0", desc="default_pg", ranks=(0, 1, 2, 3))}


def test_missing_dump_is_the_first_suspect(tmp_path: Path) -> None:
    """Rank 2's dump of the hang scenario lost: the others agree, and rank 2 is named with where they wait."""
    for rank in (0, 1, 3):
        (tmp_path / f"fr_trace_rank_{rank}").write_bytes((DATA / "hang_hang" / f"fr_trace_rank_{rank}").read_bytes())
    report = run(HangConfig(tmp_path))
    assert report.divergence is None and report.ranks_without_dump == (2,) and not report.consistent
    [suspect] = report.suspects
    assert (suspect.rank, suspect.reason) == (2, "no_dump")
    assert suspect.detail.endswith("its peers in group 0 reached collective 7 (all_reduce, scheduled on rank 0)")
    result = _cli(str(tmp_path))
    assert result.exit_code == 1 and "suspects (first is likeliest): 2" in result.output
    out = json.loads(_cli(str(tmp_path), "--json").output)
    assert out["consistent"] is False and out["suspect_ranks"] == [2] and out["divergence"] is None


def test_cli_table_json_and_exit_codes(tmp_path: Path) -> None:
    result = _cli(str(DATA / "hang_op_mismatch"))
    assert result.exit_code == 1
    assert "divergence: op_mismatch in process group 0 (default_pg) at collective 7" in result.output
    assert "culprit rank(s): 1" in result.output
    result = _cli(str(DATA / "hang_hang"), "--json")
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["consistent"] is False and out["divergence"]["culprit_ranks"] == [2] and out["suspect_ranks"] == [2]
    abort = _cli(str(DATA / "hang_dtype_abort"))
    assert abort.exit_code == 1 and "suspects (first is likeliest): 2,3" in abort.output
    assert _cli(str(DATA / "hang_healthy")).exit_code == 0
    missing = _cli(str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "no such directory" in missing.stderr
    (tmp_path / "fr_trace_rank_0").write_bytes(b"not a pickle")
    bad = _cli(str(tmp_path))
    assert bad.exit_code == 2 and "fr_trace_rank_0: not a readable Flight Recorder dump" in bad.stderr
    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpError, match="no Flight Recorder dumps"):
        run(HangConfig(tmp_path / "empty"))
    with pytest.raises(DumpError, match="^max_bytes: must be a whole number >= 1, got 0$"):
        HangConfig(tmp_path, max_bytes=0)
    with pytest.raises(DumpError, match="^dump_dir: must be a Path, got str$"):
        HangConfig(str(tmp_path))  # type: ignore[arg-type]


JOB = """
import os, signal, sys, datetime, torch, torch.distributed as dist
from commlens.diagnose import flightrec
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
path = flightrec.install(sys.argv[1], stack_traces=False)  # the symbolizing dump is covered end to end below
dist.all_reduce(torch.ones(8))
os.kill(os.getpid(), signal.SIGUSR1)  # on demand, from outside
assert path.exists(), "no dump after SIGUSR1"
os.rename(path, str(path) + ".usr1")
dist.broadcast(torch.ones(3, dtype=torch.float64), 0)
raise RuntimeError("collective failed")
"""


def test_flightrec_dumps_on_signal_and_on_uncaught_exception(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "dumps")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "MASTER_ADDR": "127.0.0.1"},
    )
    # The job fails with the exception printed. Its exit status is 1, or SIGABRT now and then: torch's gloo
    # worker threads are still running at interpreter teardown when a job dies without destroy_process_group
    # ("terminate called without an active exception"), which is torch's behaviour, not flightrec's.
    assert proc.returncode in (1, -6) and "RuntimeError: collective failed" in proc.stderr, proc.stderr[-2000:]
    on_signal = pickle.loads((tmp_path / "dumps" / "fr_trace_rank_0.usr1").read_bytes())
    assert on_signal["dump_reason"] == "signal SIGUSR1" and on_signal["rank"] == 0
    assert [e["profiling_name"] for e in on_signal["entries"]] == ["gloo:all_reduce"]
    at_exit = pickle.loads((tmp_path / "dumps" / "fr_trace_rank_0").read_bytes())
    assert at_exit["dump_reason"] == "uncaught RuntimeError: collective failed"
    assert [e["profiling_name"] for e in at_exit["entries"]] == ["gloo:all_reduce", "gloo:broadcast"]
    assert at_exit["entries"][1]["input_dtypes"] == ["Double"]
    assert at_exit["python_stack"][0] == {"name": "<module>", "filename": str(script), "line": 11}  # the raise
    assert "frames" not in at_exit["entries"][0]  # stack_traces=False


def test_live_gloo_hang_is_dumped_and_diagnosed(tmp_path: Path) -> None:
    """End to end: a fresh 3-rank torchrun job hangs; flightrec dumps every rank; rank 2 is named."""
    root = Path(__file__).parent.parent
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "3",
            str(root / SCENARIO),
            "--scenario",
            "hang",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=root,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode != 0  # the job did fail
    report = run(HangConfig(tmp_path))
    assert report.ranks == (0, 1, 2)
    d = report.divergence
    assert d is not None and (d.kind, d.collective_seq_id) == ("missing_ranks", 7)
    assert [c["rank"] for c in d.culprits] == [2] and d.culprits[0]["dump_reason"] == "signal SIGTERM"
    # the scenario's sleep is line 60 today (its dumps under tests/data were recorded when it was line 59)
    assert d.culprits[0]["frames"][0].endswith(f"{SCENARIO}:60 in main")


def test_killed_highest_rank_is_named_from_pg_config_alone() -> None:
    """Recorded: rank 3 SIGKILLed (no dump); the file names end at rank 2, so only pg_config tells."""
    report = run(HangConfig(DATA / "hang_killed_last"))
    assert report.ranks == (0, 1, 2) and report.expected_ranks == (0, 1, 2, 3)
    assert report.missing_evidence == {3: ("the pg_config of group 0 (default_pg) lists it (3 of 3 dumps)",)}
    assert report.divergence is None and [(s.rank, s.reason) for s in report.suspects] == [(3, "no_dump")]
    assert [d.dump_reason.split(":")[0] for d in read_dump_dir(DATA / "hang_killed_last").dumps] == [
        "uncaught RuntimeError",
        "signal SIGTERM",
        "uncaught RuntimeError",
    ]
    result = _cli(str(DATA / "hang_killed_last"))
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == "# 3 dumps (gloo, version 2.10), ranks 0,1,2 of 0-3"
    assert (
        "suspect: rank 3, no dump: the pg_config of group 0 (default_pg) lists it (3 of 3 dumps); its peers in "
        "group 0 reached collective 7 (all_reduce, scheduled on rank 0)" in result.output
    )
