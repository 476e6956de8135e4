"""nccl-tests and rccl-tests logs as published: the op inferred where the log does not name it, older
conventions normalised with a note, failed results checks, RCCL versions, errors located in multi-table logs.

Fixtures under ``tests/data/ingest/`` reproduce published layouts (see its README for each file's source).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from benchutil import commlens, stored_runs

from commlens.ingest import IngestError, IngestWarning, load_runs
from commlens.results import Run

DATA = Path(__file__).parent / "data" / "ingest"
OLD_ALL_GATHER = DATA / "v100-8gpu-all_gather-2020-failed.log"
SENDRECV = DATA / "a100-8gpu-sendrecv-redop-sum.log"
RCCL = DATA / "mi300x-8gpu-rccl-all_reduce-no-command.log"
NO_OP = DATA / "no-op-named.log"
H100 = DATA / "h100-8gpu-all_reduce.log"
THREE_OPS = DATA / "gb10-2rank-three-ops.log"


def _load(path: Path, **kw: object) -> Run:
    with warnings.catch_warnings():
        warnings.simplefilter("error", IngestWarning)
        (run,) = load_runs(path, time="2025-01-01", **kw)  # type: ignore[arg-type]
    return run


def _error(path: Path, **kw: object) -> IngestError:
    with pytest.raises(IngestError) as info:
        load_runs(path, time="2025-01-01", **kw)  # type: ignore[arg-type]
    return info.value


def _without(path: Path, tmp_path: Path, *needles: str) -> Path:
    """``path`` with every line naming the op (command line, banners, Collective test lines) removed."""
    out = tmp_path / path.name
    out.write_text("".join(ln for ln in path.read_text().splitlines(True) if not any(n in ln for n in needles)))
    return out


# -- the op inferred from the table ---------------------------------------------------------------------------


def test_an_mpirun_capture_without_command_line_is_read_as_all_reduce(tmp_path: Path) -> None:
    """8 ranks, redop sum, root -1, busBW/algBW 1.75 = 2(n-1)/n: only all_reduce fits."""
    path = _without(H100, tmp_path, "_perf", "Collective test")
    run = _load(path)
    (cfg,) = run.config.values["runs"]
    first_row = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("       32768"))
    assert cfg["op"] == "all_reduce"
    assert cfg["op_from"] == (
        f"inferred from the table at line {first_row} (size = count x 4 B; redop sum; root -1; "
        "busBW/algBW 1.750 at 8 ranks): only all_reduce fits"
    )
    assert [m.stats.mean_s for m in run.measurements] == [m.stats.mean_s for m in _load(H100).measurements]


def test_rccl_tests_log_without_command_line(tmp_path: Path) -> None:
    run = _load(RCCL)
    assert run.source == "rccl-tests" and run.status == "complete"
    system = run.system
    assert (system.backend, system.backend_version, system.world_size) == ("rccl", "2.22.3", 8)
    assert system.extra["library"] == "RCCL" and system.extra["library_version"] == "2.22.3-HEAD:c5b9d2a"
    assert system.extra["rccl_tests_version"] == "develop:83d38d9"
    assert (system.extra["hip_version"], system.extra["rocm_version"], system.extra["hostname"]) == (
        "6.4.43482-0f2d60242",
        "6.4.1.0-83-0f2d602",
        "g100n126",
    )
    assert system.extra["library_path"] == "/opt/rocm-6.4.1/lib/librccl.so.1"
    assert system.hosts == ("g100n126",) and system.device_names == ("AMD Instinct MI300X",) * 8
    assert run.config.values["runs"][0]["op_from"].endswith("busBW/algBW 1.750 at 8 ranks): only all_reduce fits")
    first = run.measurements[0]
    assert (first.op, first.size_bytes, first.count, first.redop, first.nwrong) == (
        "all_reduce",
        8388608,
        2097152,
        "sum",
        0,
    )
    assert first.stats.mean_s == pytest.approx(91.10e-6)
    assert first.busbw_bytes_per_s / 1e9 == pytest.approx(161.14, abs=0.005)
    assert len(run.measurements) == 16


def test_rccl_tests_version_header_of_newer_rccl_tests(tmp_path: Path) -> None:
    """``# rccl-tests version V rccl-headers=H rccl-library=L`` (ROCm/rocm-systems PR #3415's layout)."""
    path = tmp_path / "rccl.log"
    path.write_text(
        "# rccl-tests version 2.17.9-develop:f220897c9b rccl-headers=22803 rccl-library=22803\n"
        "# Collective test starting: all_reduce_perf\n" + "".join(RCCL.read_text().splitlines(True)[:-1])
    )
    run = _load(path)
    assert (run.system.backend, run.system.backend_version) == ("rccl", "2.28.3")  # the library code wins
    assert run.system.extra["rccl_tests_version"] == "2.17.9-develop:f220897c9b"
    assert run.system.extra["rccl_headers_version"] == "2.28.3"
    assert run.config.values["runs"][0]["op_from"] == "'Collective test starting' line at line 2"


def test_all_reduce_and_sendrecv_at_two_ranks_are_refused_with_both_named() -> None:
    err = _error(NO_OP)
    assert err.line == 11
    assert err.message == (
        "the log does not say which collective this table measured, and its evidence (size = count x 4 B; redop sum; "
        "root -1; busBW/algBW undecided (no row reaches 1 GB/s algBW)) fits 2: all_reduce, sendrecv; pass the op "
        "(commlens ingest --op all_reduce or --op sendrecv)"
    )
    assert _load(NO_OP, op="sendrecv").measurements[0].op == "sendrecv"  # --op wins, either way
    assert _load(NO_OP, op="all_reduce").config.values["runs"][0]["op_from"] == "given by the caller"


def test_nccl_coll_records_decide_between_candidates(tmp_path: Path) -> None:
    """NCCL_DEBUG_SUBSYS=COLL logs each call by name (NCCL ``enqueue.cc``): AllReduce settles the 2-rank table."""
    lines = NO_OP.read_text().splitlines(True)
    record = (
        "spark-d708:1666603:1666603 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3a20000000 recvbuff "
        "0x7f3a1c000000 count 2048 datatype 7 op 0 root 0 comm 0x55d0c8a0e0 [nranks=2] stream 0x55d0c7f0\n"
    )
    path = tmp_path / "coll.log"
    path.write_text("".join(lines[:10]) + record + "".join(lines[10:]))
    cfg = _load(path).config.values["runs"][0]
    assert cfg["op"] == "all_reduce"
    assert cfg["op_from"] == (
        "inferred from the table at line 12 (size = count x 4 B; redop sum; root -1; "
        "busBW/algBW undecided (no row reaches 1 GB/s algBW); NCCL logged AllReduce calls "
        "(line 11)): only all_reduce fits"
    )
    path.write_text("".join(lines[:10]) + record.replace("AllReduce", "Send") + "".join(lines[10:]))
    assert _load(path).config.values["runs"][0]["op"] == "sendrecv"


def test_sendrecv_inferred_at_eight_ranks_and_its_printed_redop_normalised(tmp_path: Path) -> None:
    """sendrecv prints its -o reduction (sum); at 8 ranks busBW/algBW 1 rules out all_reduce (1.75)."""
    named = _load(SENDRECV)
    assert named.config.values["runs"][0]["op_from"] == "binary named at line 1"
    path = _without(SENDRECV, tmp_path, "_perf")
    run = _load(path)
    (cfg,) = run.config.values["runs"]
    assert cfg["op"] == "sendrecv" and cfg["printed_redop"] == ["sum"]
    assert cfg["op_from"] == (
        "inferred from the table at line 17 (size = count x 4 B; redop sum; root -1; "
        "busBW/algBW 1.000 at 8 ranks): only sendrecv fits"
    )
    assert {m.redop for m in run.measurements} == {None}
    assert (
        "sendrecv (line 17): the table prints redop 'sum' (nccl-tests gives sendrecv its -o reduction, sum by "
        "default, though it does not reduce): stored as 'none'"
    ) in run.notes
    last = [m for m in run.measurements if m.size_bytes == 1073741824 and not m.in_place][0]
    # the time reads back as printed (kept within its rounding where that gives the printed bandwidths)
    assert f"{last.stats.mean_s * 1e6:.1f}" == "5503.4" and last.busbw_bytes_per_s / 1e9 == pytest.approx(
        195.10, abs=0.005
    )
    assert [m.nwrong for m in run.measurements[:2]] == [0, None]  # in place: N/A, not checked
    # "NCCL version 2.12.7+cuda11.4" (NCCL's INFO record): the library and its build, as printed.
    assert (run.system.backend, run.system.backend_version) == ("nccl", "2.12.7")
    assert run.system.extra["library_version"] == "2.12.7+cuda11.4" and run.system.extra["library"] == "NCCL"


def test_all_gather_and_all_to_all_look_alike_and_are_refused(tmp_path: Path) -> None:
    path = _without(THREE_OPS, tmp_path, "_perf")
    lines = path.read_text().splitlines(True)
    start = next(i for i, ln in enumerate(lines) if "nccl-tests version" in ln and i > 5)
    end = next(i for i, ln in enumerate(lines) if "Avg bus bandwidth" in ln and i > start)
    path.write_text("".join(lines[start : end + 1]))
    err = _error(path)
    assert (
        "fits 2: all_gather, all_to_all; pass the op (commlens ingest --op all_gather or --op all_to_all)"
        in err.message
    )
    assert "size = count x 2 B x ranks; redop none; root -1; busBW/algBW 0.500 at 2 ranks" in err.message


# -- older conventions ----------------------------------------------------------------------------------------


def test_all_gather_before_2020_algbw_definition_normalised_and_kept() -> None:
    """NVIDIA/nccl-tests issue #37's row: algBW printed = busBW = count x 4 x 7 / time (before ec1b5e2)."""
    run = _load(OLD_ALL_GATHER)
    (cfg,) = run.config.values["runs"]
    assert cfg["op"] == "all_gather"
    assert cfg["op_from"] == (
        "inferred from the table at line 16 (size = count x 4 B x ranks; busBW/algBW 1.000 "
        "at 8 ranks): only all_gather fits"
    )
    assert cfg["printed_algbw_gbps"] == [129.05, 128.84]
    out, inp = run.measurements
    assert (out.size_bytes, out.count, out.redop, out.root, out.nwrong) == (4294967296, 134217728, None, None, None)
    assert out.stats.mean_s == pytest.approx(29122e-6) and inp.stats.mean_s == pytest.approx(29169e-6)
    # Today's definition: algBW = size / time; busBW (unchanged since) = algBW x 7/8 = the printed busBW.
    assert out.algbw_bytes_per_s / 1e9 == pytest.approx(147.4819, abs=1e-4)
    assert out.busbw_bytes_per_s / 1e9 == pytest.approx(129.05, abs=0.005)
    assert inp.busbw_bytes_per_s / 1e9 == pytest.approx(128.84, abs=0.005)
    assert run.notes[0] == (
        "all_gather (line 16): the table prints algBW as nccl-tests did before 2020-06-19 (commit ec1b5e2): "
        "count x elem x (ranks-1) / time, equal to busBW; stored with today's definition, size / time (1.143 x the "
        "printed figure); the printed algBW is kept in the run's config (printed_algbw_gbps)"
    )


def test_today_s_all_gather_is_not_flagged_as_old() -> None:
    run = _load(THREE_OPS)
    assert "printed_algbw_gbps" not in run.config.values["runs"][1]
    assert not any("before 2020" in n for n in run.notes)


# -- failed results checks ------------------------------------------------------------------------------------


def test_out_of_bounds_failed_is_a_check_failed_run() -> None:
    run = _load(OLD_ALL_GATHER)
    assert run.status == "check_failed" and run.config.values["runs"][0]["check"] == "failed"
    assert (
        "results check failed: the all_gather table (line 16) reports 'Out of bounds values : 2 FAILED'; the "
        "pre-2.13 'error' column does not say which rows; the run is stored with status check_failed"
    ) in run.notes
    three = _load(THREE_OPS)
    assert three.status == "check_failed"
    assert [c["check"] for c in three.config.values["runs"]] == ["passed", "passed", "failed"]
    assert (
        "results check failed: the sendrecv table (line 66) reports 'Out of bounds values : 3 FAILED'; rows "
        "with wrong results: 1048576 B out-of-place (3 wrong); the run is stored with status check_failed"
    ) in three.notes
    assert _load(H100).status == "complete" and _load(H100).config.values["runs"][0]["check"] == "passed"


# -- errors located in a multi-table log ----------------------------------------------------------------------


def test_an_error_in_one_table_of_several_names_that_table(tmp_path: Path) -> None:
    text = THREE_OPS.read_text().replace("   822083584     205520896  bfloat16", "   822083584     205520896    uint32")
    path = tmp_path / "bad.log"
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "uint32" in ln)
    err = _error(path)
    assert err.line == line
    assert err.message.startswith("data type 'uint32' has no commlens dtype")
    assert err.message.endswith("(in the all_gather table starting at line 37, table 2 of 3 read)")
    cut = tmp_path / "cut.log"
    cut.write_text("".join(THREE_OPS.read_text().splitlines(True)[:67]) + "     2097152        524288     float")
    err = _error(cut)
    assert err.line == 68 and err.message.endswith("(in the sendrecv table starting at line 66, table 3 of 3 read)")


# -- the command ----------------------------------------------------------------------------------------------


def test_cli_ingest_warns_of_a_failed_check_and_stores_it_as_such(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    proc = commlens("ingest", str(OLD_ALL_GATHER), "--db", str(db), "--time", "2025-01-01")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"warning: {OLD_ALL_GATHER}: results check failed: the all_gather table (line 16) reports 'Out of bounds "
        f"values : 2 FAILED'; the pre-2.13 'error' column does not say which rows; the run is stored with status "
        f"check_failed (compare does not judge its failed rows; detect leaves the run out of history)"
    ]
    assert proc.stdout.endswith("(nccl-tests; all_gather; 2 measurements; 8 ranks; check_failed)\n")
    (stored,) = stored_runs(db)
    assert stored["status"] == "check_failed"
    shown = json.loads(commlens("show", stored["run_id"], "--db", str(db), "--json").stdout)
    assert shown["status"] == "check_failed" and shown["config"]["runs"][0]["op_from"].startswith("inferred")
    table = commlens("show", stored["run_id"], "--db", str(db)).stdout.splitlines()
    assert (
        "# op all_gather: inferred from the table at line 16 (size = count x 4 B x ranks; busBW/algBW 1.000 at "
        "8 ranks): only all_gather fits"
    ) in table
    assert table[-1].startswith("# status check_failed")


def test_cli_op_resolves_an_ambiguous_log_and_ambiguity_exits_2(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    refused = commlens("ingest", str(NO_OP), "--db", str(db))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"error: {NO_OP}:11: the log does not say which collective")
    assert "--op all_reduce or --op sendrecv" in refused.stderr
    given = commlens("ingest", str(NO_OP), "--db", str(db), "--op", "all_reduce", "--json")
    assert given.returncode == 0, given.stderr
    (doc,) = json.loads(given.stdout)
    assert doc["run"]["config"]["runs"][0]["op_from"] == "given by the caller"
    assert {m["op"] for m in doc["run"]["measurements"]} == {"all_reduce"}
    bad = commlens("ingest", str(NO_OP), "--db", str(db), "--op", "allsum")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --op: unknown op 'allsum'")


def test_rccl_tests_in_place_only_table(tmp_path: Path) -> None:
    """rccl-tests -O 0 prints the in-place half only (ROCm/rccl-tests ``src/common.cu`` print_header)."""
    out = []
    busbw = []
    for line in RCCL.read_text().splitlines():
        if "out-of-place" in line:
            line = "# %10s  %12s  %8s  %6s  %6s           in-place          " % ("", "", "", "", "")
        elif line.startswith("#       size"):
            line = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s" % (
                "size",
                "count",
                "type",
                "redop",
                "root",
                "time",
                "algbw",
                "busbw",
                "#wrong",
            )
        elif line.startswith("#        (B)"):
            line = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s" % (
                "(B)",
                "(elements)",
                "",
                "",
                "",
                "(us)",
                "(GB/s)",
                "(GB/s)",
                "",
            )
        elif line[:12].strip().isdigit():
            tokens = line.split()
            line = "%12s  %12s  %8s  %6s  %6s" % tuple(tokens[:5]) + "  %7s  %6s  %6s  %5s" % tuple(tokens[9:13])
            busbw.append(float(tokens[11]))
        elif "Avg bus bandwidth" in line:
            line = "# Avg bus bandwidth    : %g " % (sum(busbw) / len(busbw))
        out.append(line)
    path = tmp_path / "inplace.log"
    path.write_text("\n".join(out) + "\n")
    run = _load(path)
    assert len(run.measurements) == 8 and all(m.in_place for m in run.measurements)
    assert run.config.values["runs"][0]["in_place_only"] is True and run.config.values["runs"][0]["op"] == "all_reduce"
    first = run.measurements[0]
    assert f"{first.stats.mean_s * 1e6:.2f}" == "94.94" and first.busbw_bytes_per_s / 1e9 == pytest.approx(
        154.63, abs=0.005
    )


def test_nccl_tests_json_with_out_of_bounds_is_check_failed(tmp_path: Path) -> None:
    """The -J file's ``out_of_bounds {count, okay}`` is the text footer's count: a failed check there too."""
    source = DATA / "h100-8gpu-all_reduce-I.json"
    path = tmp_path / "failed.json"
    path.write_text(
        source.read_text().replace(
            '"out_of_bounds":{"count":0,"okay":"true"}', '"out_of_bounds":{"count":5,"okay":"false"}'
        )
    )
    run = _load(path)
    assert run.status == "check_failed"
    assert "results check failed: out_of_bounds count 5; the run is stored with status check_failed" in run.notes
    assert _load(source).status == "complete"


def test_old_all_gather_named_by_its_command_line_is_normalised_alike(tmp_path: Path) -> None:
    path = tmp_path / "named.log"
    path.write_text("all_gather_perf -g 8 -b 4294967296 -e 4294967296 -n 100\n" + OLD_ALL_GATHER.read_text())
    run = _load(path)
    (cfg,) = run.config.values["runs"]
    assert cfg["op_from"] == "binary named at line 1" and cfg["printed_algbw_gbps"] == [129.05, 128.84]
    assert run.measurements == _load(OLD_ALL_GATHER).measurements
    # Told it is a reduce_scatter (same size rule, same old ratio), the table has no redop column to say otherwise:
    # --op wins; the reduction is nccl-tests' default, noted.
    told = _load(OLD_ALL_GATHER, op="reduce_scatter")
    assert {m.redop for m in told.measurements} == {"sum"}
    assert any("no redop column: stored as 'sum'" in n for n in told.notes)


def test_wrong_rows_in_a_table_cut_before_its_footer_still_fail_the_check(tmp_path: Path) -> None:
    path = tmp_path / "cut.log"
    path.write_text("".join(THREE_OPS.read_text().splitlines(True)[:69]))  # up to the last sendrecv row
    run = _load(path)
    assert run.status == "check_failed"  # wrong results outrank a missing footer
    assert (
        "results check failed: the sendrecv table (line 66) has rows with wrong results: 1048576 B "
        "out-of-place (3 wrong); the run is stored with status check_failed"
    ) in run.notes
    assert any("stops after 4 rows without its footer" in n for n in run.notes)
