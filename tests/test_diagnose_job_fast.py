"""`diagnose job`'s fast readers (columns checked at once, sources read in parallel) against the record-by-record
readers: the same report on clean files, and on files they do not vouch for the record-by-record account
(damaged lines counted, warnings raised).

The job is written by tests/scenarios/job_files.py (8 ranks, a late rank), as in tests/test_diagnose_job.py.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from commlens.diagnose import job as job_module
from commlens.diagnose import job_sources
from commlens.diagnose.job import diagnose_job
from commlens.ingest.base import IngestWarning
from commlens.ingest.flightrec import read_dump_dir_columns
from commlens.ingest.monitor_jsonl import read_monitor_columns
from commlens.ingest.nccl_inspector import read_inspector_columns

sys.path.insert(0, str(Path(__file__).parent))
from scenarios.job_files import JobSpec, write_flightrec, write_inspector, write_monitor  # noqa: E402

SPEC = JobSpec(ranks=8, ranks_per_host=4, collectives=80, late_rank=3, onset=30, late_ms=3.0, seed=11)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fastjob")
    write_inspector(SPEC, out / "inspector")
    write_flightrec(SPEC, out / "flightrec")
    write_monitor(SPEC, out / "monitor")
    return out


def _paths(root: Path) -> list[Path]:
    return [root / "inspector", root / "flightrec", root / "monitor"]


def _record_by_record(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("read_inspector_columns", "read_dump_dir_columns", "read_monitor_columns"):
        monkeypatch.setattr(job_sources, name, lambda *a, **k: None)


def _report(paths: list[Path]) -> dict[str, Any]:
    return json.loads(json.dumps(diagnose_job(paths).to_json()))


def test_fast_readers_give_the_record_by_record_report(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fast paths take these files...
    assert read_inspector_columns(job / "inspector") is not None
    assert read_dump_dir_columns(job / "flightrec") is not None
    assert read_monitor_columns(job / "monitor") is not None
    fast = _report(_paths(job))
    assert "rank 3 (node-000) is late" in str(fast["verdict"])
    # ...and the report is the one the record-by-record readers give, field for field
    with monkeypatch.context() as m:
        _record_by_record(m)
        slow = _report(_paths(job))
    assert fast == slow


def test_sources_read_in_parallel_give_the_same_report(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sequential = _report(_paths(job))
    monkeypatch.setattr(job_module, "PARALLEL_BYTES", 1)
    assert _report(_paths(job)) == sequential


def _copy(job: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(job, tmp_path / "job")
    return tmp_path / "job"


def test_lines_valid_only_when_joined_are_damaged_lines(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two monitor records cut across two lines parse as two records if the lines were joined; read line by
    line each line is invalid: both are left out and counted, in the parallel reading too."""
    root = _copy(job, tmp_path)
    file = root / "monitor" / "monitor-rank2.jsonl"
    lines = file.read_text().splitlines()
    first, second = lines[5], lines[6]
    cut = first.index('"op"')
    lines[5:7] = [first + "," + second[:cut], second[cut:]]
    file.write_text("\n".join(lines) + "\n")
    assert read_monitor_columns(root / "monitor") is None
    monkeypatch.setattr(job_module, "PARALLEL_BYTES", 1)
    report = _report(_paths(root))
    (monitor,) = [s for s in report["sources"] if s["kind"] == "monitor"]
    assert "monitor: 2 damaged lines left out" in monitor["notes"]
    assert "rank 3 (node-000) is late" in str(report["verdict"])


def test_a_repeated_inspector_record_is_noted_and_warned_in_parallel(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(job, tmp_path)
    file = next((root / "inspector").iterdir())
    text = file.read_text()
    file.write_text(text + text.splitlines()[3] + "\n")  # the same record twice
    assert read_inspector_columns(root / "inspector") is None
    with monkeypatch.context() as m:
        _record_by_record(m)
        slow = _report(_paths(root))
    monkeypatch.setattr(job_module, "PARALLEL_BYTES", 1)
    assert _report(_paths(root)) == slow
    notes = next(s for s in slow["sources"] if s["kind"] == "nccl-inspector")["notes"]
    assert any("1 records repeated" in n for n in notes)
    # a damaged line's warning, raised in a reader process, reaches the caller
    file.write_text(text + "{not json\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _report(_paths(root))
    assert any(issubclass(w.category, IngestWarning) and "left out" in str(w.message) for w in caught)


def test_flight_recorder_values_the_fast_path_leaves_to_the_full_reader(job: Path, tmp_path: Path) -> None:
    """A sequence number written as text (PyTorch's JSON writes some integers so) is read by the full reader;
    the fast path declines it, and the report is the same as with the number."""
    root = _copy(job, tmp_path)
    dump = root / "flightrec" / "nccl_trace_rank_4"
    doc = json.loads(dump.read_text())
    doc["entries"][10]["collective_seq_id"] = str(doc["entries"][10]["collective_seq_id"])
    dump.write_text(json.dumps(doc))
    assert read_dump_dir_columns(root / "flightrec") is None
    assert _report(_paths(root))["verdict"] == _report(_paths(job))["verdict"]


def _typed(value: Any) -> Any:
    """The value with every scalar's type beside it (1 and 1.0 compare equal; NaN never does)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize(
    "line",
    [
        '{"seq":18446744073709551616}',  # orjson alone reads these two as floats
        '{"seq":-9223372036854775809}',
        '{"t":NaN,"u":-Infinity}',  # orjson alone refuses these
        '{"t":1e400}',
        '{"name":"\\ud800"}',
        '{"a":1,"b":2,"a":3}',
        '{"v":[1,-0,-0.0,0.1,1E5,123456789.123456789e-7]}',
        "[" * 600 + "]" * 600,
    ],
)
def test_fast_scanners_give_the_standard_librarys_values(line: str) -> None:
    from commlens.ingest.json_columns import loads_like_json, scan_json_lines

    expected = json.loads(line)
    typed = _typed if len(line) < 100 else (lambda v: v)  # the nested line: lists only, compared as they are
    text = f'{{"x":1}}\n{line}\n'
    assert typed(scan_json_lines(text, 10**6)) == typed([{"x": 1}, expected])
    assert typed(loads_like_json(line.encode())) == typed(expected)
    assert scan_json_lines(f"{line} \n", 10**6) is None  # whitespace around a line: the full reader, as before


def _dump_columns(d: Any) -> dict[str, Any]:
    """A DumpColumns as plain values (arrays as lists), to compare field for field."""
    ranks = [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in r.__dict__.items()} for r in d.ranks]
    return {"ranks": ranks, "names": d.names, "signatures": d.signatures, "notes": d.notes}


@pytest.mark.parametrize("n", [2, 3, 9])
def test_flight_recorder_shares_joined_are_the_directory_read_at_once(job: Path, tmp_path: Path, n: int) -> None:
    """The dumps read in n shares (9 > 8 ranks: an empty share) and joined give the codes one reading gives;
    the later ranks list their entries backwards, so their shares meet the names in another order."""
    from commlens.ingest.flightrec import join_dump_columns

    root = _copy(job, tmp_path)
    for rank in range(4, 8):
        dump = root / "flightrec" / f"nccl_trace_rank_{rank}"
        doc = json.loads(dump.read_text())
        doc["entries"].reverse()
        dump.write_text(json.dumps(doc))
    whole = read_dump_dir_columns(root / "flightrec")
    assert whole is not None
    parts = [read_dump_dir_columns(root / "flightrec", share=(i, n)) for i in range(n)]
    assert all(p is not None for p in parts)
    joined = join_dump_columns([p for p in parts if p is not None])
    assert _dump_columns(joined) == _dump_columns(whole)


def test_a_monitor_time_beyond_64_bits_leaves_the_file_to_the_full_reader(job: Path, tmp_path: Path) -> None:
    """An integer time wider than 64 bits, which orjson alone reads as a float, is not taken by the fast path."""
    root = _copy(job, tmp_path)
    file = sorted((root / "monitor").iterdir())[0]
    lines = file.read_text().splitlines()
    record = json.loads(lines[5])
    record["end_s"] = 10**20
    lines[5] = json.dumps(record, separators=(",", ":"))
    file.write_text("\n".join(lines) + "\n")
    assert read_monitor_columns(root / "monitor") is None


def test_a_dump_integer_beyond_64_bits_is_read_as_the_standard_library_reads_it(job: Path, tmp_path: Path) -> None:
    """Outside the entries (here a group's description) such an integer keeps its digits, as json.loads
    reads it, where orjson alone would give 1e+20."""
    root = _copy(job, tmp_path)
    dump = root / "flightrec" / "nccl_trace_rank_2"
    doc = json.loads(dump.read_text())
    [config] = doc["pg_config"].values()
    config["desc"] = 10**20
    dump.write_text(json.dumps(doc))
    fast = read_dump_dir_columns(root / "flightrec")
    assert fast is not None
    assert {g.desc for g in fast.ranks[2].groups.values()} == {str(10**20)}
