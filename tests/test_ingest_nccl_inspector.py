"""NCCL Inspector's JSON output read into collective records and stored as a run (fixtures: data/nccl_inspector)."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
from benchutil import commlens, stored_runs

from commlens.ingest import IngestError, IngestWarning, detect_format, load_runs
from commlens.ingest import nccl_inspector as insp
from commlens.ingest.nccl_inspector import load_dump_runs, read_inspector, records_from_inspector
from commlens.ops import get_op

DATA = Path(__file__).parent / "data" / "nccl_inspector"
COMPACT = DATA / "compact"
VERBOSE = DATA / "verbose"
WORLD = "0x1f3a5c7e9b2d4f"
TP0, TP1 = "0x6b8d0f2a4c6e81", "0x93c5e7092b4d6f"
GOOD = (
    '{"header":{"id":"0xabc","rank":1,"n_ranks":4,"nnodes":1},"metadata":{"inspector_output_format_version":"v4.0",'
    '"dump_timestamp_us":1764590400000000,"hostname":"h","pid":9},"coll_perf":{"coll":"AllReduce","coll_sn":5,'
    '"coll_msg_size_bytes":1048576,"coll_exec_time_us":100,"coll_timing_source":"kernel_gpu",'
    '"coll_algobw_gbs":10.485760,"coll_busbw_gbs":15.728640}}'
)


def _quiet_read(path: Path) -> insp.InspectorDump:
    """Read with every IngestWarning turned into an error: the fixture must read cleanly."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", IngestWarning)
        return read_inspector(path)


def _variant(**changes: object) -> str:
    """GOOD with fields of its coll_perf / header replaced ("header.rank": "0")."""
    obj = json.loads(GOOD)
    for path, value in changes.items():
        part, key = path.split(".")
        obj[part][key] = value
    return json.dumps(obj, separators=(",", ":"))


def _read_warned(path: Path) -> tuple[insp.InspectorDump, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IngestWarning)
        dump = read_inspector(path)
    return dump, [str(w.message) for w in caught if issubclass(w.category, IngestWarning)]


def test_a_compact_dump_directory_gives_every_process_s_records_with_nccl_tests_sizes() -> None:
    dump = _quiet_read(COMPACT)
    assert len(dump.records) == 4 * 24 and len(dump.files) == 4
    assert dump.hosts == ("node-a", "node-b") and dump.world_size == 4 and not dump.incomplete
    comms = dump.communicators
    assert {c: (comms[c].name, comms[c].n_ranks, comms[c].nnodes, comms[c].ranks) for c in comms} == {
        WORLD: ("world", 4, 2, (0, 1, 2, 3)),
        TP0: ("TP Group 0", 2, 1, (0, 1)),
        TP1: ("TP Group 1", 2, 1, (0, 1)),
    }
    first = dump.records[0]  # node-a-pid41001.log line 1
    assert (first.rank, first.group, first.group_size, first.seq, first.op, first.host) == (
        0,
        WORLD,
        4,
        0,
        "all_reduce",
        "node-a",
    )
    assert first.size_bytes == 67108864 and first.dtype == "other" and first.timing == "inspector"
    # A compact record ends at its dump time; its duration is the inspector's 1480 µs.
    assert first.end_s == 1764590400.250005 and first.duration_s == pytest.approx(1480e-6, abs=3e-7)
    sizes = {(r.group, r.op): r.size_bytes for r in dump.records}
    # AllGather and ReduceScatter write one rank's share: nccl-tests' size is n_ranks times it.
    assert sizes == {
        (WORLD, "all_reduce"): 67108864,
        (WORLD, "all_gather"): 4 * 4194304,
        (TP0, "reduce_scatter"): 2 * 8388608,
        (TP1, "reduce_scatter"): 2 * 8388608,
    }
    world_seqs = sorted(r.seq for r in dump.records if r.group == WORLD and r.rank == 2)
    assert world_seqs == list(range(16))
    assert any("compact records carry no start time" in n for n in dump.notes)


def test_busbw_recomputed_from_size_and_time_equals_the_files_own() -> None:
    checked = 0
    for file in sorted(DATA.rglob("*.log")):
        for line in file.read_text().splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # the truncated fixture's last line
            perf, header = obj.get("coll_perf"), obj.get("header")
            if perf is None or perf["coll"] == "All2All":  # the inspector computes no busBW for All2All
                continue
            n = header["n_ranks"] if header else 8  # the v4.3 fixture's marker says 8
            spec = get_op(insp.NCCL_OPS[perf["coll"]])
            size = perf["coll_msg_size_bytes"] * (n if spec.per_rank_split else 1)
            busbw_gbps = spec.busbw(size, perf["coll_exec_time_us"] / 1e6, n) / 1e9
            assert busbw_gbps == pytest.approx(perf["coll_busbw_gbs"], abs=1e-6), (file.name, line[:80])
            checked += 1
    assert checked == 96 + 6 + 3 + 2
    # The records' own busBW agrees too, to the resolution of epoch-second floats (0.24 µs).
    for r in _quiet_read(COMPACT).records[:4]:
        exact = get_op(r.op).busbw(r.size_bytes, round(r.duration_s * 1e6) / 1e6, r.group_size)
        assert r.busbw_bytes_per_s == pytest.approx(exact, rel=1e-3)


def test_a_busbw_that_disagrees_is_warned_about_and_noted(tmp_path: Path) -> None:
    dump_dir = tmp_path / "dump"
    shutil.copytree(COMPACT, dump_dir)
    file = dump_dir / "node-a-pid41002.log"
    lines = file.read_text().splitlines()
    obj = json.loads(lines[2])
    obj["coll_perf"]["coll_busbw_gbs"] *= 2
    lines[2] = json.dumps(obj, separators=(",", ":"))
    file.write_text("\n".join(lines) + "\n")
    with pytest.warns(IngestWarning, match=r"node-a-pid41002\.log:3: coll_busbw_gbs: printed busBW disagrees"):
        (run,) = load_dump_runs(dump_dir)
    assert any("printed busBW disagrees" in n and "1 of 96" in n for n in run.notes)


def test_a_verbose_record_starts_at_its_first_kernel_channel() -> None:
    dump = _quiet_read(VERBOSE)
    assert dump.verbose and len(dump.records) == 8 and dump.communicators["0xe62dedaa97644b"].name is None
    first = next(r for r in dump.records if r.rank == 0 and r.seq == 0)
    line = json.loads((VERBOSE / "gpu-host-07-pid7001.log").read_text().splitlines()[0])
    channels = line["coll_perf"]["event_trace_ts"]["kernel_events"]
    assert first.start_s == min(c["kernel_start_ts"] for c in channels) / 1e6
    assert first.duration_s == pytest.approx(line["coll_perf"]["coll_exec_time_us"] / 1e6, abs=5e-7)
    by_op = {r.op: r.size_bytes for r in dump.records}
    assert by_op == {"all_reduce": 2147483648, "broadcast": 16777216, "all_to_all": 2 * 1048576}
    assert "2 point-to-point records (Send/Recv) left out: not collectives" in dump.notes


def test_a_missing_rank_file_loses_no_other_record(tmp_path: Path) -> None:
    dump_dir = tmp_path / "dump"
    shutil.copytree(COMPACT, dump_dir)
    (dump_dir / "node-b-pid52002.log").unlink()
    dump = read_inspector(dump_dir)
    assert len(dump.records) == 3 * 24 and dump.incomplete
    assert dump.communicators[WORLD].missing_ranks == (3,) and dump.communicators[TP1].missing_ranks == (1,)
    assert (
        f"communicator {WORLD} (4 ranks): no records from rank 3 (a missing file, or ranks that recorded nothing)"
        in (dump.notes)
    )
    (run,) = load_dump_runs(dump_dir)
    assert run.status == "incomplete" and run.system.world_size == 4


def test_a_truncated_last_line_is_warned_about_and_the_rest_kept() -> None:
    file = DATA / "truncated" / "node-c-pid3001.log"
    dump, warned = _read_warned(file)
    assert warned == [f"{file}:4: left out: a truncated last line (the job stopped while writing?)"]
    assert [r.seq for r in dump.records] == [0, 1, 2] and dump.incomplete


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (_variant(**{"coll_perf.coll_msg_size_bytes": 10**30}), "coll_msg_size_bytes 10000000000000000000000"),
        ('{"header":{"id":"0xabc","rank":' + "9" * 5000 + "}}", "invalid JSON"),
        (_variant(**{"coll_perf.coll_exec_time_us": -5}), "coll_exec_time_us -5 is out of range"),
        (_variant(**{"coll_perf.coll_exec_time_us": "100"}), "coll_exec_time_us must be a finite number"),
        (GOOD.replace('"coll_exec_time_us":100', '"coll_exec_time_us":1e999'), "must be a finite number"),
        (_variant(**{"header.rank": "1"}), "rank must be an integer, got '1'"),
        (_variant(**{"header.n_ranks": True}), "n_ranks must be an integer, got True"),
        (_variant(**{"header.rank": 4}), "rank 4 is out of range (expected 0 <= rank < 4)"),
        (_variant(**{"metadata.dump_timestamp_us": -1}), "dump_timestamp_us -1 is out of range"),
        (_variant(**{"coll_perf.coll_sn": 2**64}), "coll_sn 18446744073709551616 is out of range"),
        (_variant(**{"header.id": "x" * 300}), "id must be a string of 1..200 characters"),
        (_variant(**{"coll_perf.coll_busbw_gbs": "fast"}), "coll_busbw_gbs must be a number >= 0"),
        ('{"header":' + "[" * 100000 + "]" * 100000 + "}", "nested deeper than 64 levels"),
        (
            '{"coll_perf":{"coll":"AllReduce","coll_sn":1}}',
            "a coll_perf record with no header, and no dump_stats marker",
        ),
        ('{"coll_perf":' + '{"a":' * 70 + "1" + "}" * 71, "nested deeper than 64 levels"),
        ("[1, 2]", "a JSON list, not a record object"),
        ('{"unrelated": 1}', "neither coll_perf, p2p_perf nor dump_stats"),
    ],
)
def test_a_hostile_line_is_left_out_with_a_located_reason(tmp_path: Path, line: str, why: str) -> None:
    file = tmp_path / "h-pid1.log"
    file.write_text(f"{GOOD}\n{line}\n{_variant(**{'coll_perf.coll_sn': 6})}\n")
    dump, warned = _read_warned(file)
    assert [r.seq for r in dump.records] == [5, 6]  # the records around it are kept
    assert len(warned) == 1 and warned[0].startswith(f"{file}:2: left out: ") and why in warned[0], warned


def test_an_unknown_op_is_left_out_and_counted(tmp_path: Path) -> None:
    file = tmp_path / "h-pid1.log"
    file.write_text(
        f"{GOOD}\n{_variant(**{'coll_perf.coll': 'Invalid'})}\n{_variant(**{'coll_perf.coll': 'AllGatherV'})}\n"
    )
    dump = _quiet_read(file)
    assert len(dump.records) == 1
    assert "1 'AllGatherV' records left out: no collective of the catalog" in dump.notes
    assert "1 'Invalid' records left out: no collective of the catalog" in dump.notes


def test_a_10_mb_line_is_refused_unparsed_and_the_file_still_read(tmp_path: Path) -> None:
    file = tmp_path / "h-pid1.log"
    huge = '{"header":{"id":"' + "a" * (10 * 2**20) + '"}}'
    file.write_text(f"{huge}\n{GOOD}\n")
    dump, warned = _read_warned(file)
    assert len(dump.records) == 1
    assert warned == [f"{file}:1: left out: a line of {len(huge)} characters (at most 1048576): not a record"]


def test_many_bad_lines_are_warned_about_five_then_summed(tmp_path: Path) -> None:
    file = tmp_path / "h-pid1.log"
    file.write_text(GOOD + "\n" + "\n".join(_variant(**{"header.rank": -1}) for _ in range(40)) + "\n")
    dump, warned = _read_warned(file)
    assert len(dump.records) == 1 and len(warned) == 6
    assert warned[-1] == f"{file}:41: left out 35 more lines, the last here"


def test_a_file_of_nothing_readable_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "h-pid1.log"
    file.write_text(_variant(**{"header.rank": -1}) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        with pytest.raises(IngestError, match=r"h-pid1\.log: no collective records \(coll_perf\) that commlens reads"):
            read_inspector(file)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(IngestError, match=r"no \*\.log or \*\.jsonl files: not an NCCL Inspector dump directory"):
        read_inspector(empty)


def test_in_a_directory_a_file_that_is_not_the_inspector_s_is_skipped(tmp_path: Path) -> None:
    shutil.copytree(COMPACT, tmp_path / "dump")
    (tmp_path / "dump" / "stdout.log").write_text("# nccl-tests output\n")
    (tmp_path / "dump" / "nccl_inspector_metrics_GPU0.prom").write_text("nccl_bus_bandwidth_gbs 1\n")
    dump, warned = _read_warned(tmp_path / "dump")
    assert len(dump.records) == 96 and dump.incomplete
    assert warned == [
        f"{tmp_path / 'dump' / 'stdout.log'}:1: not NCCL Inspector output (no coll_perf records); the other files are read"
    ]
    assert "1 files not named *.log or *.jsonl not read (Prometheus .prom files hold no records)" in dump.notes


def test_the_file_count_and_bytes_per_file_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(insp, "MAX_FILES", 3)
    with pytest.raises(IngestError, match=r"more than 3 record files: ingest a part of the dump"):
        read_inspector(COMPACT)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        with pytest.raises(IngestError, match=r"larger than 0.00476837 MiB, the most ingest reads"):
            read_inspector(COMPACT, max_bytes=5000)


def test_the_record_count_is_bounded_and_a_repeated_record_kept_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump_dir = tmp_path / "dump"
    shutil.copytree(COMPACT, dump_dir)
    shutil.copy(dump_dir / "node-a-pid41001.log", dump_dir / "node-a-pid41001.jsonl")  # the same process twice
    dump = _quiet_read(dump_dir)
    assert len(
        dump.records
    ) == 96 and "24 records repeated (same communicator, rank, collective and coll_sn) kept once" in (dump.notes)
    monkeypatch.setattr(insp, "MAX_RECORDS", 30)
    with pytest.raises(IngestError, match=r"node-a-pid41002\.log:7: more than 30 collective records in the dump"):
        read_inspector(dump_dir)


def test_coll_sn_counts_per_collective_type_so_an_allgather_5_is_no_repeat_of_allreduce_5(tmp_path: Path) -> None:
    """NCCL numbers each collective type of a communicator on its own (comm->seqNumber[func])."""
    gather = (
        GOOD.replace('"coll":"AllReduce"', '"coll":"AllGather"')
        .replace("10.485760", "41.943040")
        .replace("15.728640", "31.457280")
    )
    path = tmp_path / "h-pid9.log"
    path.write_text(GOOD + "\n" + gather + "\n")
    dump = _quiet_read(path)
    assert sorted((r.op, r.seq) for r in dump.records) == [("all_gather", 5), ("all_reduce", 5)]


def test_the_v4_3_marker_layout_and_a_pretty_printed_record_are_read(tmp_path: Path) -> None:
    dump = read_inspector(DATA / "marker_v4_3.log")
    assert [(r.rank, r.seq, r.size_bytes) for r in dump.records] == [(2, 1406, 17179869184), (2, 1407, 17179869184)]
    assert dump.format_versions == ("v4.3",)
    pretty = tmp_path / "readme.json"
    pretty.write_text(json.dumps(json.loads(GOOD), indent=2) + "\n")
    (record,) = _quiet_read(pretty).records
    assert (record.rank, record.seq, record.op, record.group) == (1, 5, "all_reduce", "0xabc")


def test_records_from_inspector_join_ranks_by_communicator_and_sequence_number() -> None:
    records = records_from_inspector(COMPACT)
    joined: dict[tuple[str, int], list[int]] = {}
    for r in records:
        joined.setdefault((r.group, r.seq), []).append(r.rank)
    assert sorted(joined[(WORLD, 7)]) == [0, 1, 2, 3] and sorted(joined[(TP1, 7)]) == [0, 1]
    assert all(len(ranks) == len(set(ranks)) for ranks in joined.values())


def test_one_file_is_detected_and_ingested_as_a_run_per_communicator_series() -> None:
    file = COMPACT / "node-a-pid41001.log"
    assert detect_format(file) == "nccl-inspector"
    (run,) = load_runs(file)
    assert run.source == "nccl-inspector" and run.system.world_size == 4 and run.status == "incomplete"
    series = sorted((m.group, m.op, m.size_bytes, m.world_size, len(m.samples_s)) for m in run.measurements)
    assert series == [
        (WORLD, "all_gather", 16777216, 4, 8),
        (WORLD, "all_reduce", 67108864, 4, 8),
        (TP0, "reduce_scatter", 16777216, 2, 8),
    ]
    assert all(not math.isclose(s, 0) for m in run.measurements for s in m.samples_s)


def test_commlens_ingest_stores_a_dump_directory_and_runs_lists_it(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    url = f"sqlite:///{db}"
    proc = commlens("ingest", str(COMPACT), "--db", url, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{COMPACT}: stored run ")
    assert proc.stdout.rstrip().endswith(
        "(nccl-inspector; all_gather,all_reduce,reduce_scatter; 4 measurements; 4 ranks)"
    )
    (listed,) = stored_runs(db)
    assert (listed["source"], listed["world_size"], listed["backend"], listed["nmeasurements"]) == (
        "nccl-inspector",
        4,
        "nccl",
        4,
    )
    table = commlens("runs", "--db", url, timeout=60)
    assert table.returncode == 0 and listed["run_id"][:12] in table.stdout
    again = commlens("ingest", str(COMPACT), "--db", url, timeout=120)
    assert again.returncode == 0 and "already stored" in again.stderr
    wrong = commlens("ingest", str(COMPACT), "--format", "param", "--db", url, timeout=60)
    assert wrong.returncode == 2
    assert f"error: {COMPACT}: a directory, read only as nccl-inspector output (not --format param)" in wrong.stderr
