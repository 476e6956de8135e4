"""``commlens ingest`` under hostile and awkward input: pipes, endless streams, huge numbers, deep nesting,
type confusion, a bad file among good ones, and two processes ingesting the same file at once.

Everything runs the real command in real processes; memory bounds are enforced on the child with
``RLIMIT_AS``, so a parser that allocated by a number it read would die with MemoryError, not pass.
"""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

import pytest
from benchutil import BIN, clean_env, commlens, stored_runs

from commlens.ingest import IngestError, load_runs
from commlens.results import Measurement, Run, SystemInfo, run_to_dict

DATA = Path(__file__).parent / "data" / "ingest"
H100 = DATA / "h100-8gpu-all_reduce.log"
PARAM = DATA / "param-h100-8rank.log"
JSON_V3 = DATA / "h100-8gpu-all_reduce-I.json"
# Address space a child ingest gets: ample for these small files, far below what a range(2**32) would need.
CHILD_AS_BYTES = 1536 * 2**20


def _stored_lines(out: bytes) -> str:
    """ingest's stored-run lines, without the '# expect:' verdict lines it prints under each (issue 30)."""
    return "".join(line + "\n" for line in out.decode().splitlines() if not line.startswith("#"))


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_AS_BYTES, CHILD_AS_BYTES))


def _ingest(*args: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """``commlens ingest ARGS`` in a child with bounded memory, fed ``stdin`` through a real pipe."""
    return subprocess.run(
        [str(BIN / "commlens"), "ingest", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env=clean_env(),
        preexec_fn=_limited,
    )


def _run_dict(**changes: object) -> dict:
    system = SystemInfo(world_size=2, backend="gloo", device="cpu")
    m = Measurement(
        op="all_reduce",
        dtype="float32",
        size_bytes=64,
        count=16,
        in_place=False,
        world_size=2,
        samples_s=(2e-5, 3e-5),
        redop="sum",
    )
    doc = run_to_dict(Run(run_id="ab" * 16, started_at="2025-02-01T00:00:00+00:00", system=system, measurements=(m,)))
    doc.update(changes)
    return doc


# -- item 9: input from pipes ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_a_log_piped_in_is_stored_as_the_same_run_as_the_file(tmp_path: Path, name: str) -> None:
    db = tmp_path / "r.db"
    run_id = load_runs(H100)[0].run_id
    piped = subprocess.Popen(["cat", str(H100)], stdout=subprocess.PIPE)  # cat log | commlens ingest NAME
    try:
        proc = subprocess.run(
            [str(BIN / "commlens"), "ingest", name, "--db", str(db)],
            stdin=piped.stdout,
            capture_output=True,
            timeout=120,
            env=clean_env(),
            preexec_fn=_limited,
        )
    finally:
        piped.stdout.close()  # type: ignore[union-attr]
        piped.wait()
    assert proc.returncode == 0, proc.stderr
    assert (
        _stored_lines(proc.stdout)
        == f"{name}: stored run {run_id} (nccl-tests; all_reduce; 22 measurements; 8 ranks)\n"
    )
    (stored,) = stored_runs(db)
    assert stored["run_id"] == run_id and stored["nmeasurements"] == 22
    # The file itself afterwards: the same content, so the same run, already there.
    again = commlens("ingest", str(H100), "--db", str(db))
    assert again.returncode == 0 and "already stored" in again.stderr


def test_json_and_export_lists_come_through_a_pipe(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    json_run = _ingest("-", "--db", str(db), stdin=JSON_V3.read_bytes())
    assert json_run.returncode == 0, json_run.stderr
    assert b"(nccl-tests-json; all_reduce; 6 measurements; 8 ranks)" in json_run.stdout
    export = _ingest("-", "--db", str(db), stdin=json.dumps([_run_dict()]).encode())
    assert export.returncode == 0, export.stderr
    assert (
        _stored_lines(export.stdout) == f"-: stored run {'ab' * 16} (commlens; all_reduce; 1 measurements; 2 ranks)\n"
    )
    # A pipe has no modification time: a log that does not say when it ran is placed when it was read.
    (piped,) = [r for r in stored_runs(db) if r["source"] == "nccl-tests"]
    assert piped["started_at"] > "2025"


def test_an_endless_stream_is_cut_at_the_size_cap(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    endless = subprocess.Popen(["yes", "# not a log"], stdout=subprocess.PIPE)
    try:
        proc = subprocess.run(
            [str(BIN / "commlens"), "ingest", "-", "--db", str(db), "--max-input-mib", "1"],
            stdin=endless.stdout,
            capture_output=True,
            timeout=120,
            env=clean_env(),
            preexec_fn=_limited,
        )
    finally:
        endless.stdout.close()  # type: ignore[union-attr]
        endless.kill()
        endless.wait()
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        "error: <stdin>: larger than 1 MiB, the most ingest reads (--max-input-mib): not read further\n"
    )
    zero = _ingest("/dev/zero", "--db", str(db))  # unbounded, and binary: refused at its first byte
    assert zero.returncode == 2
    assert zero.stderr.decode() == "error: /dev/zero:1: binary data (NUL byte): not a text log or JSON file\n"
    big = tmp_path / "big.log"
    big.write_bytes(H100.read_bytes() + b"# padding\n" * 200_000)
    capped = _ingest(str(big), "--db", str(db), "--max-input-mib", "1")
    assert capped.returncode == 2 and b"larger than 1 MiB" in capped.stderr
    for bad in ("0", "nan", "-3"):
        usage = _ingest(str(H100), "--db", str(db), "--max-input-mib", bad)
        assert usage.returncode == 2 and f"error: --max-input-mib {float(bad)}" in usage.stderr.decode()
    assert stored_runs(db) == []


# -- item 5: bounded resources -----------------------------------------------------------------------------


def test_a_rank_of_4294967296_is_refused_without_allocating_by_it(tmp_path: Path) -> None:
    lines = H100.read_text().splitlines(True)
    i = next(i for i, ln in enumerate(lines) if ln.startswith("#  Rank  7 "))
    lines[i] = lines[i].replace("Rank  7 ", "Rank 4294967296 ")
    path = tmp_path / "huge-rank.log"
    path.write_text("".join(lines))
    proc = _ingest(str(path), "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode() == (
        f"error: {path}:{i + 1}: rank 4294967296 is beyond what commlens accepts "
        f"(< 1048576): a corrupted or hostile file?\n"
    )
    # The same through nccl-tests -J: a process count that would make a world of 2**40 ranks.
    doc = json.loads(JSON_V3.read_text())
    doc["config"]["nthreads"] = 2**19
    jpath = tmp_path / "huge-world.json"
    jpath.write_text(json.dumps(doc, indent=1))
    err = pytest.raises(IngestError, load_runs, jpath).value
    assert "world size 4194304 is beyond what commlens accepts" in err.message


def test_a_missing_rank_list_is_summarised_not_printed_whole(tmp_path: Path) -> None:
    lines = H100.read_text().splitlines(True)
    i = next(i for i, ln in enumerate(lines) if ln.startswith("#  Rank  7 "))
    lines[i] = lines[i].replace("Rank  7 ", "Rank 1000000 ")
    path = tmp_path / "gap.log"
    path.write_text("".join(lines))
    err = pytest.raises(IngestError, load_runs, path).value
    assert err.message == "rank lines do not list ranks [7, 8, 9, 10, 11, 12, 13, 14 ... (999993 in all)] of 1000001"


def test_deep_nesting_huge_numbers_and_long_lines_give_short_errors(tmp_path: Path) -> None:
    nested = tmp_path / "nested.json"
    nested.write_text('{"results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    proc = _ingest(str(nested), "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2
    assert proc.stderr.decode() == f"error: {nested}:1: JSON nested deeper than 64 levels: not a result file\n"
    digits = tmp_path / "digits.json"
    digits.write_text('{"results": [{"size": ' + "9" * 5000 + "}]}")
    assert pytest.raises(IngestError, load_runs, digits).value.message.startswith("invalid JSON: ")
    long_rank = tmp_path / "long-line.log"
    long_rank.write_text(H100.read_text().replace("#  Rank  7 ", "#  Rank  7 " + "x" * 1_000_000, 1))
    proc = _ingest(str(long_rank), "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2
    message = proc.stderr.decode()
    assert "unreadable rank line: '#  Rank  7 xxxx" in message and "...(cut)" in message and len(message) < 400


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"run_id": 12345}, "run_id: expected a string, got 12345"),
        ({"system": True}, "system: expected an object, got True"),
        ({"measurements": [True]}, "a measurement must be an object, got True"),
        ({"tag": ["x"]}, "tag: expected a string or null, got ['x']"),
    ],
)
def test_type_confusion_in_commlens_json_is_an_error_naming_the_field(
    tmp_path: Path, changes: dict, message: str
) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_run_dict(**changes), indent=1))
    proc = _ingest(str(path), "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 2
    assert proc.stderr.decode().endswith(f": {message}\n"), proc.stderr


def test_a_format_version_below_1_is_refused_not_upgraded(tmp_path: Path) -> None:
    """Found by benchmarks/fuzz_ingest.py: "commlens.run/0" looked for an upgrader from version 0 (KeyError)."""
    path = tmp_path / "run.json"
    for fmt in ("commlens.run/0", "commlens.run/-1", "commlens.run/x"):
        path.write_text(json.dumps(_run_dict(format=fmt), indent=1))
        assert pytest.raises(IngestError, load_runs, path, fmt="commlens").value.message == (
            f"bad format version in {fmt!r}"
        )


def test_infinite_or_out_of_range_numbers_in_commlens_json(tmp_path: Path) -> None:
    doc = _run_dict()
    path = tmp_path / "run.json"
    for field, value, message in (
        ("size_bytes", float("inf"), "size_bytes: expected an integer, got inf"),
        ("world_size", 2**40, "world_size must be in 1..1048576, got 1099511627776"),
        ("samples_s", [float("inf")], "samples_s: expected finite numbers of seconds"),
        ("nwrong", 2**62, "nwrong must be >= 0 and < 1125899906842624"),
    ):
        bad = dict(doc, measurements=[dict(doc["measurements"][0], **{field: value})])
        path.write_text(json.dumps(bad, indent=1))  # json writes inf as Infinity, which Python's json reads
        err = pytest.raises(IngestError, load_runs, path).value
        assert message in err.message, err.message


def test_type_confusion_in_nccl_tests_json(tmp_path: Path) -> None:
    doc = json.loads(JSON_V3.read_text())
    doc["results"][0]["experiment_name"] = 7
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc, indent=1))
    assert pytest.raises(IngestError, load_runs, path).value.message == (
        "results[0].experiment_name: expected a string, got 7"
    )
    doc = json.loads(JSON_V3.read_text())
    doc["results"][0]["out_of_place_per_iter"]["times_us"] = {"a": 1}
    path.write_text(json.dumps(doc, indent=1))
    assert pytest.raises(IngestError, load_runs, path).value.message == (
        "results[0].out_of_place_per_iter.times_us: expected a list of times"
    )


def test_an_integer_of_hundreds_of_digits_is_refused_not_an_overflow(tmp_path: Path) -> None:
    """A number no float holds (the fuzzer found one in -J's times_us): a located error, in every JSON reader."""
    huge = 10**400
    doc = json.loads(JSON_V3.read_text())
    doc["results"][2]["in_place_per_iter"]["times_us"][5] = huge
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(doc))
    message = pytest.raises(IngestError, load_runs, path).value.message
    assert message.startswith("results[2].in_place_per_iter.times_us: expected a finite number >= 0, got 1000"), message
    run = _run_dict()
    for field, value, expected in (
        ("samples_s", [2e-5, huge], "samples_s: expected finite numbers of seconds"),
        ("reported", {"mean_s": huge, "n": 2}, "reported.mean_s: expected a finite number or null"),
    ):
        bad = dict(run, measurements=[dict(run["measurements"][0], **{field: value})])
        other = tmp_path / f"{field}.json"
        other.write_text(json.dumps(bad))
        message = pytest.raises(IngestError, load_runs, other).value.message
        assert expected in message, message
    proc = _ingest(str(path), "--db", str(tmp_path / "runs.db"))
    assert proc.returncode == 2 and b"expected a finite number >= 0" in proc.stderr and b"Traceback" not in proc.stderr


# -- item 3: one file's failure never stops the others -------------------------------------------------------


def test_each_failing_file_is_reported_and_the_others_stored(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    folder = tmp_path / "a-directory"
    folder.mkdir()
    not_iso = tmp_path / "not-iso.json"  # reads as a run, but the store refuses its start time
    not_iso.write_text(json.dumps(_run_dict(started_at="yesterday"), indent=1))
    unknown = tmp_path / "notes.txt"
    unknown.write_text("nothing commlens reads\n")
    proc = _ingest(
        str(folder), str(H100), str(tmp_path / "missing.log"), str(not_iso), str(unknown), str(PARAM), "--db", str(db)
    )
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.decode().splitlines() if ln.startswith("error: ")]
    assert errors == [
        f"error: {folder}: no *.log or *.jsonl files: not an NCCL Inspector dump directory",
        f"error: {tmp_path / 'missing.log'}: cannot read: No such file or directory",
        f"error: {not_iso}: run {'ab' * 16!r}: started_at 'yesterday' is not an ISO 8601 time",
        f"error: {unknown}:1: not a format commlens reads: no nccl-tests table, no PARAM COMMS-RES rows, no JSON "
        f"(pass --format if it is one of nccl-tests, nccl-tests-json, param, nccl-inspector, commlens)",
    ]
    assert sorted(r["source"] for r in stored_runs(db)) == ["nccl-tests", "param"]


# -- item 10: two processes ingest the same file at once -----------------------------------------------------


def test_concurrent_ingests_of_one_file_store_it_once_and_both_succeed(tmp_path: Path) -> None:
    """Four processes at once, three times over: without the fix, one of them lost the race and failed with
    "already in the store" in about two of three tries (measured before the fix)."""
    run_id = load_runs(H100)[0].run_id
    for attempt in range(3):
        db = tmp_path / f"r{attempt}.db"
        ready = commlens("ingest", str(PARAM), "--db", str(db))  # the store exists: the race is on the run
        assert ready.returncode == 0, ready.stderr
        procs = [
            subprocess.Popen(
                [str(BIN / "commlens"), "ingest", str(H100), "--db", str(db)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=clean_env(),
            )
            for _ in range(4)
        ]
        outs = [p.communicate(timeout=180) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, [o[1] for o in outs]
        assert [_stored_lines(o[0]) for o in outs if o[0]] == [
            f"{H100}: stored run {run_id} (nccl-tests; all_reduce; 22 measurements; 8 ranks)\n"
        ]
        assert [o[1].decode() for o in outs if not o[0]] == [
            f"{H100}: already stored as run {run_id} (same content); skipped\n"
        ] * 3
        assert len([r for r in stored_runs(db) if r["run_id"] == run_id]) == 1
