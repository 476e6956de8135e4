"""Ingest: nccl-tests text and -J JSON, PARAM output and commlens JSON into runs, and ``commlens ingest``.

Fixtures under ``tests/data/ingest/`` are in the tools' own layouts (see its README for where their
values come from); the tests assert the exact numbers in them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from benchutil import commlens, stored_runs

from commlens.ingest import IngestError, IngestWarning, detect_format, load_runs
from commlens.results import BenchSettings, Measurement, Run, SystemInfo, dump_run, run_to_dict
from commlens.results.nccltests_json import run_to_nccl_tests_json

DATA = Path(__file__).parent / "data" / "ingest"
H100 = DATA / "h100-8gpu-all_reduce.log"
PER_ITER = DATA / "h100-2x4gpu-all_reduce-I.log"
THREE_OPS = DATA / "gb10-2rank-three-ops.log"
PREPEND = DATA / "h100-24rank-prepend-rank.log"
LEGACY = DATA / "v100-4rank-legacy.log"
JSON_V3 = DATA / "h100-8gpu-all_reduce-I.json"
JSON_V1 = DATA / "a100-2node-reduce_scatter-v1.json"
PARAM = DATA / "param-h100-8rank.log"
PARAM_LEGACY = DATA / "param-2node-all_to_all-legacy.log"


def _load(path: Path, **kw: object) -> Run:
    """The one run in ``path``; any IngestWarning fails the test (the fixtures are consistent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", IngestWarning)
        runs = load_runs(path, **kw)  # type: ignore[arg-type]
    assert len(runs) == 1
    return runs[0]


def _row(run: Run, op: str, size: int, in_place: bool) -> Measurement:
    (m,) = [m for m in run.measurements if m.op == op and m.size_bytes == size and m.in_place == in_place]
    return m


def _error(path: Path, **kw: object) -> IngestError:
    with pytest.raises(IngestError) as info:
        load_runs(path, **kw)  # type: ignore[arg-type]
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}:{info.value.line}: ")
    return info.value


# -- nccl-tests text ---------------------------------------------------------------------------------------


def test_nccl_tests_log_header_metadata_and_rows() -> None:
    assert detect_format(H100) == "nccl-tests"
    run = _load(H100)
    assert run.source == "nccl-tests" and run.status == "complete"
    assert len(run.measurements) == 22 and {m.op for m in run.measurements} == {"all_reduce"}
    system = run.system
    assert system.world_size == 8
    assert system.hosts == ("dgx-h100-07",) and system.ranks_per_host == {"dgx-h100-07": 8}
    assert system.device == "cuda" and system.device_names == ("NVIDIA H100 80GB HBM3",) * 8
    assert system.backend == "nccl" and system.backend_version == "2.28.3"  # nccl-library=22803
    assert system.extra["nccl_tests_version"] == "2.19.4"
    assert system.extra["rank_pids"] == list(range(2291840, 2291848))
    assert system.extra["rank_bus_ids"][7] == "0000:db:00"
    assert system.env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_NVLS_ENABLE": "1"}
    assert run.command_line.endswith("./build/all_reduce_perf -b 32K -e 32M -f 2 -g 1")
    (cfg,) = run.config.values["runs"]
    assert (cfg["op"], cfg["iters"], cfg["warmup_iters"], cfg["min_bytes"], cfg["max_bytes"], cfg["step_factor"]) == (
        "all_reduce",
        20,
        1,
        32768,
        33554432,
        2,
    )
    assert cfg["avg_busbw_gbps"] == 100.952 and cfg["out_of_bounds"] == 0 and cfg["complete"] is True

    first = run.measurements[0]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root, first.in_place, first.nwrong) == (
        32768,
        8192,
        "float32",
        "sum",
        None,
        False,
        0,
    )
    assert first.samples_s == () and first.reported is not None
    assert first.reported.mean_s == pytest.approx(18.66e-6) and first.reported.n == 20
    assert first.reported.min_s is None and first.reported.p99_s is None
    assert first.busbw_bytes_per_s / 1e9 == pytest.approx(3.07, abs=0.005)
    # The row NCCL's own log record was glued into, completed three lines later.
    out, inp = _row(run, "all_reduce", 1048576, False), _row(run, "all_reduce", 1048576, True)
    # Times read back as printed; where the two-decimal time cannot give the printed algBW (27.76 us for
    # 37.78 GB/s), the time kept is the one within its rounding that does.
    assert f"{out.stats.mean_s * 1e6:.2f}" == "27.76" and f"{inp.stats.mean_s * 1e6:.2f}" == "27.49"
    assert f"{out.algbw_bytes_per_s / 1e9:.2f}" == "37.78"
    last = _row(run, "all_reduce", 33554432, True)
    assert f"{last.stats.mean_s * 1e6:.2f}" == "195.40"
    assert last.busbw_bytes_per_s / 1e9 == pytest.approx(300.52, abs=0.01)


def test_per_iteration_columns_fill_min_max_p99_cv() -> None:
    run = _load(PER_ITER)
    assert len(run.measurements) == 10 and run.world_size == 8
    assert run.system.hosts == ("gpu-a17", "gpu-a18")
    assert run.system.ranks_per_host == {"gpu-a17": 4, "gpu-a18": 4}
    assert run.system.extra["rank_devices"] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert run.system.extra["rank_pids"] == [48211] * 4 + [49211] * 4
    (cfg,) = run.config.values["runs"]
    assert cfg["per_iter_timing"] is True and cfg["per_iter_skip"] == 2 and cfg["ngpus"] == 4
    assert cfg["op"] == "all_reduce"  # "Collective test starting: all_reduce_perf_mpi"
    s = _row(run, "all_reduce", 65536, False).reported
    assert s is not None
    assert (s.mean_s, s.min_s, s.max_s, s.p99_s, s.cv) == pytest.approx(
        (18.95e-6, 17.84e-6, 22.91e-6, 22.91e-6, 0.0612)
    )
    assert s.p50_s is None and s.n == 20
    s = _row(run, "all_reduce", 16777216, True).reported
    assert (s.mean_s, s.min_s, s.max_s, s.cv) == pytest.approx((120.47e-6, 119.52e-6, 122.90e-6, 0.0074))
    assert any("nccl-tests -I" in n for n in run.notes)


def test_several_ops_in_one_log_give_one_run() -> None:
    run = _load(THREE_OPS)
    assert [c["op"] for c in run.config.values["runs"]] == ["all_reduce", "all_gather", "sendrecv"]
    assert [sum(m.op == op for m in run.measurements) for op in ("all_reduce", "all_gather", "sendrecv")] == [8, 20, 8]
    assert run.world_size == 2 and run.system.hosts == ("spark-d708", "spark-dbf4")
    assert run.system.device_names == ("NVIDIA GB10", "NVIDIA GB10") and run.system.backend_version == "2.31.2"
    ag = _row(run, "all_gather", 771751936, False)
    assert (ag.dtype, ag.count, ag.redop, ag.root) == ("bfloat16", 192937984, None, None)
    assert ag.stats.mean_s == pytest.approx(2786.5e-6)
    assert ag.busbw_bytes_per_s / 1e9 == pytest.approx(138.48, abs=0.01)
    step = run.config.values["runs"][1]
    assert step["step_bytes"] == 16777216 and "step_factor" not in step
    sendrecv = [m for m in run.measurements if m.op == "sendrecv"]
    assert [m.nwrong for m in sendrecv] == [3, 0, 0, 0, 0, 0, 0, 0]
    assert [c["out_of_bounds"] for c in run.config.values["runs"]] == [0, 0, 3]
    assert _row(run, "all_reduce", 65536, True).stats.mean_s == pytest.approx(64.71e-6)


def test_interleaved_mpi_output_rank_marks_and_split_rows() -> None:
    """Intel MPI's [rank] marks at every write, NCCL INFO/WARN records mid-row, 24 ranks on 3 nodes."""
    run = _load(PREPEND)
    assert run.world_size == 24 and len(run.measurements) == 20
    assert run.system.ranks_per_host == {"h100clust-worker-1": 8, "h100clust-worker-32": 8, "h100clust-worker-33": 8}
    assert run.system.backend_version == "2.21.5"  # from NCCL's own "NCCL version" record
    assert run.config.values["runs"][0]["op_from"] == "binary named at line 1"
    assert run.system.env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"}
    got = [(m.size_bytes, m.in_place, round(m.stats.mean_s * 1e6, 1)) for m in run.measurements[:4]]
    assert got == [(1048576, False, 1626.5), (1048576, True, 2302.3), (2097152, False, 2325.3), (2097152, True, 416.7)]
    assert _row(run, "all_reduce", 536870912, True).stats.mean_s == pytest.approx(192903e-6)


def test_pre_2022_layout_without_root_and_with_an_error_column() -> None:
    run = _load(LEGACY)
    assert run.world_size == 4 and len(run.measurements) == 8
    assert run.system.extra["rank_pids"] == [190712, 190713, 190714, 190715]
    assert run.system.device_names == ("Tesla V100-SXM2-16GB",) * 4
    last = _row(run, "all_reduce", 16777216, False)
    assert (last.root, last.nwrong, last.redop) == (None, None, "sum")
    assert last.stats.mean_s == pytest.approx(330.2e-6) and last.reported.n == 100  # type: ignore[union-attr]
    assert any("max delta" in n for n in run.notes)


@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda text: text.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda text: "".join(f"[1,0]<stdout>:{ln}" for ln in text.splitlines(True)), id="openmpi-tag"),
        pytest.param(lambda text: "".join(f"0: {ln}" for ln in text.splitlines(True)), id="srun-label"),
        pytest.param(lambda text: text.replace("\n", "\r\n").encode("utf-16"), id="utf16-powershell"),
    ],
)
def test_line_endings_and_launcher_prefixes_change_nothing(tmp_path: Path, transform) -> None:
    path = tmp_path / "log.txt"
    data = transform(THREE_OPS.read_text())
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    assert _load(path).measurements == _load(THREE_OPS).measurements


def test_cputime_and_timestamp_columns(tmp_path: Path) -> None:
    """``-C`` renames the time columns ``cputime``; ``-T`` appends a ``timestamp`` column to every row."""
    out = []
    for line in THREE_OPS.read_text().splitlines()[:22]:
        if line.startswith("#       size"):
            line = line.replace(" time ", " cputime ").rstrip() + "            timestamp"
        elif line[:12].strip().isdigit():
            line += "  2025-10-28 14:02:11"
        out.append(line)
    path = tmp_path / "cputime.log"
    path.write_text("\n".join(out) + "\n")
    run = _load(path)
    assert len(run.measurements) == 8 and _row(run, "all_reduce", 8192, False).stats.mean_s == pytest.approx(35.15e-6)
    assert run.config.values["runs"][0]["cputime"] is True and any("CPU wall times" in n for n in run.notes)


def test_busbw_that_disagrees_with_size_and_time_warns(tmp_path: Path) -> None:
    """Rank lines of 16 of the 24 ranks lost: the table's busBW says 24 ranks, the world size says 8."""
    lines = PREPEND.read_text().splitlines(True)
    kept = [ln for ln in lines if not any(f"Rank {r:2d} " in ln for r in range(8, 24))]
    path = tmp_path / "cut.log"
    path.write_text("".join(kept))
    with pytest.warns(IngestWarning) as caught:
        (run,) = load_runs(path)
    first_row = next(i for i, ln in enumerate(kept, 1) if "1048576        262144" in ln)
    (w,) = [w for w in caught if "busBW" in str(w.message)]
    assert str(w.message).startswith(f"{path}:{first_row}: all_reduce (line 2): printed busBW disagrees")
    assert "in 20 of 20 measurements" in str(w.message)
    assert run.world_size == 8 and any("printed busBW disagrees" in n for n in run.notes)


def test_a_log_that_does_not_name_its_op_needs_one(tmp_path: Path) -> None:
    path = DATA / "no-op-named.log"
    err = _error(path)
    assert err.line == 11 and "--op all_reduce" in err.message
    run = _load(path, op="all_reduce")
    assert len(run.measurements) == 8 and run.config.values["runs"][0]["op_from"] == "given by the caller"
    assert _error(THREE_OPS, op="broadcast").message == (
        "the log names all_reduce_perf ('Collective test starting' line) but the op given is 'broadcast'"
    )


# -- malformed nccl-tests logs ------------------------------------------------------------------------------


def test_truncated_row_is_an_error_at_its_line() -> None:
    err = _error(DATA / "truncated-row.log")
    assert err.line == 67
    assert err.message == (
        "table row cut short: 10 of 13 columns before the file ends (a truncated log?): "
        "'16777216 4194304 float sum -1 121.33 138.28 242.00 0 120.47'"
    )


def test_table_without_footer_is_an_incomplete_run() -> None:
    run = _load(DATA / "table-stops.log", time="2025-01-01")
    assert run.status == "incomplete" and len(run.measurements) == 18
    assert run.notes[0] == (
        "the all_reduce table (line 53) stops after 9 rows without its footer: the job ended early or the log was cut"
    )
    assert run.config.values["runs"][0]["complete"] is False


@pytest.mark.parametrize(
    "name, line, message",
    [
        ("uint32-type.log", 16, "data type 'uint32' has no commlens dtype"),
        ("nan-time.log", 15, "bad time value '-nan' in a table row: not a finite number >= 0"),
        ("duplicate-rank.log", 9, "rank 0 is listed twice: several independent nccl-tests processes wrote to this log"),
    ],
)
def test_malformed_logs_name_file_and_line(name: str, line: int, message: str) -> None:
    err = _error(DATA / name)
    assert err.line == line and err.message.startswith(message)


def test_empty_binary_and_unknown_files_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("\n  \n")
    assert (_error(empty).line, _error(empty).message) == (1, "empty file: no results to ingest")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x7fELF\x02\x01\x01\n\x00\x00\x00\x03\x00>\x00")
    err = _error(junk)
    assert (err.line, err.message) == (2, "binary data (NUL byte): not a text log or JSON file")
    prose = tmp_path / "notes.txt"
    prose.write_text("the nightly ran fine\nbusbw looked ok\n")
    assert _error(prose).message.startswith("not a format commlens reads")
    no_rows = tmp_path / "header-only.log"
    no_rows.write_text("".join(H100.read_text().splitlines(True)[:52]))
    assert _error(no_rows).message == "no nccl-tests result rows found"


# -- nccl-tests -J JSON ------------------------------------------------------------------------------------------


def test_nccl_tests_json_with_per_iteration_times() -> None:
    assert detect_format(JSON_V3) == "nccl-tests-json"
    run = _load(JSON_V3)
    # One process drove 8 GPUs (-g 8): devices[] lists its first GPU only.
    assert run.world_size == 8 and run.system.hosts == ("dgx-h100-07",)
    assert run.system.extra["rank_devices"] == list(range(8))
    assert run.system.backend_version == "2.28.3" and run.system.extra["json_version"] == 3
    assert run.system.env == {"NCCL_NVLS_ENABLE": "1", "NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert (run.started_at, run.finished_at) == ("2026-07-21T09:14:03+00:00", "2026-07-21T09:14:09+00:00")
    assert run.command_line.startswith("./build/all_reduce_perf -b 1M -e 16M")
    assert len(run.measurements) == 6
    m = _row(run, "all_reduce", 1048576, False)
    assert len(m.samples_s) == 18 and m.reported is None  # 20 iterations, the first 2 skipped (-K 2)
    assert m.samples_s[:2] == pytest.approx((26.987742e-6, 28.045808e-6))
    assert m.stats.min_s == pytest.approx(26.605198e-6) and m.stats.max_s == pytest.approx(28.544849e-6)
    assert m.stats.mean_s == pytest.approx(27.423097e-6, rel=1e-6)  # the file's avg_us, over the same 18
    assert (m.nwrong, m.dtype, m.count) == (0, "float32", 262144)
    assert any("one device per process" in n for n in run.notes)


def test_first_nccl_tests_json_version_with_its_misspelt_keys() -> None:
    run = _load(JSON_V1)
    assert run.world_size == 2 and run.system.hosts == ("node-a01", "node-a02")
    assert run.system.device_names == ("NVIDIA A100-SXM4-80GB",) * 2 and run.system.backend_version == "2.27.3"
    assert run.system.env == {"NCCL_IB_HCA": "mlx5_0,mlx5_3", "NCCL_ALGO": "Ring", "UCX_NET_DEVICES": "mlx5_0:1"}
    m = _row(run, "reduce_scatter", 134217728, False)
    assert (m.dtype, m.count, m.redop, m.nwrong) == ("bfloat16", 33554432, "sum", None)
    assert m.reported is not None and m.reported.mean_s == pytest.approx(801.92e-6) and m.reported.n == 50


def test_bad_json_values_point_at_their_line(tmp_path: Path) -> None:
    doc = json.loads(JSON_V1.read_text())
    doc["results"][1]["in_place"]["time"] = "nan"  # how nccl-tests writes a NaN double
    path = tmp_path / "pretty.json"
    text = json.dumps(doc, indent=1)
    path.write_text(text)
    err = _error(path)
    lines = text.splitlines()
    results_at = next(i for i, ln in enumerate(lines) if '"results"' in ln)
    expected = (
        next(
            i
            for i, ln in enumerate(lines)
            if i > results_at and '"in_place"' in ln and any('"size": 134217728' in x for x in lines[results_at:i])
        )
        + 1
    )
    assert err.line == expected
    assert err.message == "results[1].in_place.time: expected a finite number >= 0, got 'nan'"
    cut = tmp_path / "cut.json"
    cut.write_text(JSON_V3.read_text()[:2000])
    err = _error(cut)
    assert err.line == 1 and err.message.startswith("invalid JSON (column ")


def test_commlens_own_nccl_tests_json_round_trips_its_samples(tmp_path: Path) -> None:
    system = SystemInfo(
        world_size=4,
        hosts=("node-a",),
        ranks_per_host={"node-a": 4},
        backend="gloo",
        device="cpu",
        extra={"rank_hosts": ["node-a"] * 4, "rank_pids": [11, 12, 13, 14]},
    )
    samples = (1.25e-5, 1.5e-5, 1.125e-5)
    measurements = tuple(
        Measurement(
            op=op,
            dtype="float32",
            size_bytes=4096,
            count=count,
            in_place=in_place,
            world_size=4,
            samples_s=samples,
            redop=redop,
            root=root,
            nwrong=0,
        )
        for op, count, redop, root in (
            ("all_reduce", 1024, "sum", None),
            ("all_gather", 256, None, None),
            ("broadcast", 1024, None, 0),
        )
        for in_place in (False, True)
    )
    run = Run(
        run_id="ab" * 16,
        started_at="2025-03-04T05:06:07+00:00",
        system=system,
        measurements=measurements,
        command_line="commlens bench --nproc 4",
        config=BenchSettings({"iters": 3, "warmup": 1, "min_bytes": 4096, "max_bytes": 4096, "step_factor": 2}),
    )
    path = tmp_path / "commlens-nccl.json"
    path.write_text(json.dumps(run_to_nccl_tests_json(run)))
    assert detect_format(path) == "nccl-tests-json"
    back = _load(path)
    assert back.world_size == 4 and back.system.device == "cpu" and back.system.backend == "gloo"
    assert back.started_at == "2025-03-04T05:06:07+00:00"
    assert [(m.op, m.in_place, m.root, m.count) for m in back.measurements] == [
        (m.op, m.in_place, m.root, m.count) for m in run.measurements
    ]
    for got, want in zip(back.measurements, run.measurements):
        assert got.samples_s == pytest.approx(want.samples_s, rel=1e-12)


# -- PARAM -----------------------------------------------------------------------------------------------------


def test_param_rows_map_percentiles_across_ranks() -> None:
    assert detect_format(PARAM) == "param"
    run = _load(PARAM)
    assert run.source == "param" and run.world_size == 8 and len(run.measurements) == 16
    assert run.system.backend == "nccl" and run.system.backend_version == "2.21.5"
    assert run.system.extra == {"local_size": 8, "nw_stack": "pytorch-dist"}
    ar, ar_bf16 = [m for m in run.measurements if m.op == "all_reduce" and m.size_bytes == 1048576]
    assert (ar.dtype, ar.in_place, ar_bf16.dtype) == ("float32", True, "bfloat16")
    s = ar.reported
    assert s is not None
    assert (s.mean_s, s.p50_s, s.p95_s, s.min_s, s.max_s) == pytest.approx(
        (27.9e-6, 27.9e-6, 30.1e-6, 27.5e-6, 31.0e-6)
    )
    assert s.p99_s is None and s.n == 0
    assert ar.busbw_bytes_per_s / 1e9 == pytest.approx(65.771, abs=0.001)  # PARAM's own BusBW column
    rs = [m for m in run.measurements if m.op == "reduce_scatter" and m.size_bytes == 67108864][0]
    assert (rs.dtype, rs.count, rs.redop, rs.in_place) == ("float32", 2097152, "sum", False)
    assert ar_bf16.reported.p50_s == pytest.approx(28.7e-6)  # type: ignore[union-attr]  # 27.9 x 1.03
    assert "percentiles across ranks, not iterations" in run.notes[0]


def test_older_param_output_under_srun_labels() -> None:
    run = _load(PARAM_LEGACY)
    assert run.world_size == 16 and len(run.measurements) == 3
    m = run.measurements[2]
    assert (m.op, m.dtype, m.size_bytes, m.count, m.in_place) == ("all_to_all", "float32", 134217728, 2097152, False)
    assert m.reported is not None and m.reported.p50_s == pytest.approx(4361.0e-6)
    assert run.config.values["param_tags"] == ["ib4x"] and run.system.backend_version == "2.20.5"


def test_malformed_param_output(tmp_path: Path) -> None:
    lines = PARAM.read_text().splitlines(True)
    cut = tmp_path / "cut.log"
    cut.write_text("".join(lines[:12]) + lines[12][:60])
    err = _error(cut)
    assert (err.line, err.message) == (13, "COMMS-RES row has 2 values, the header names 10 (a truncated line?)")
    no_env = tmp_path / "no-env.log"
    no_env.write_text("".join(ln for ln in lines if "environment" not in ln))
    assert _error(no_env).message.startswith("no 'PARAM COMM environment: {'world_size': N, ...}' line")
    quant = tmp_path / "quant.log"
    quant.write_text("".join(lines[:8]) + "\tCOMMS-RES-QUANT-all_reduce-float32\t  1024  256  1.0  2.0  1.0  4.0\n")
    assert _error(quant).message == "quantized PARAM results (COMMS-RES-QUANT) are not supported"


# -- commlens JSON, and what the caller sets ------------------------------------------------------------------


def _bench_run() -> Run:
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
    return Run(
        run_id="cd" * 16, started_at="2025-02-01T00:00:00+00:00", system=system, measurements=(m,), tag="old-tag"
    )


def test_commlens_json_keeps_the_run(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with path.open("w") as fp:
        dump_run(_bench_run(), fp)
    assert detect_format(path) == "commlens"
    run = _load(path)
    assert run_to_dict(run) == run_to_dict(_bench_run())
    assert _load(path, tag="new-tag").tag == "new-tag"
    doc = json.loads(path.read_text())
    doc["measurements"].append(dict(doc["measurements"][0], samples_s=[-1.0]))
    text = json.dumps(doc, indent=1)
    path.write_text(text)
    err = _error(path)
    second = [i for i, ln in enumerate(text.splitlines(), 1) if ln == "  {"][1]
    assert err.line == second and "negative or NaN sample" in err.message


def test_tag_revision_and_time_place_the_run_in_history() -> None:
    run = _load(H100, tag="nightly", revision="abc123", time="2025-05-01T13:45:00+02:00")
    assert (run.tag, run.revision, run.started_at) == ("nightly", "abc123", "2025-05-01T11:45:00+00:00")
    assert _load(H100, time="2025-05-01").started_at == "2025-05-01T00:00:00+00:00"
    from_file = _load(JSON_V3, time="2025-01-02")
    assert (from_file.started_at, from_file.finished_at) == ("2025-01-02T00:00:00+00:00", None)
    # The run id comes from the content: the same file is the same run, whatever it is labelled.
    assert _load(H100).run_id == run.run_id != _load(PER_ITER).run_id and len(run.run_id) == 32
    with pytest.raises(ValueError, match="not an ISO 8601 date"):
        load_runs(H100, time="yesterday")


# -- the command ----------------------------------------------------------------------------------------------


def test_cli_stores_files_with_tag_revision_and_time(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    proc = commlens(
        "ingest",
        str(H100),
        str(JSON_V3),
        "--db",
        str(db),
        "--tag",
        "nightly",
        "--revision",
        "r42",
        "--time",
        "2025-05-01T12:00:00Z",
    )
    assert proc.returncode == 0, proc.stderr
    h100_id, json_id = _load(H100).run_id, _load(JSON_V3).run_id
    assert [line for line in proc.stdout.splitlines() if not line.startswith("#")] == [  # less expect's lines
        f"{H100}: stored run {h100_id} (nccl-tests; all_reduce; 22 measurements; 8 ranks)",
        f"{JSON_V3}: stored run {json_id} (nccl-tests-json; all_reduce; 6 measurements; 8 ranks)",
    ]
    runs = {r["run_id"]: r for r in stored_runs(db)}
    assert set(runs) == {h100_id, json_id}
    for r in runs.values():
        assert (r["tag"], r["revision"], r["status"]) == ("nightly", "r42", "complete")
        assert r["started_at"] == "2025-05-01T12:00:00+00:00"
    assert runs[h100_id]["nmeasurements"] == 22 and runs[h100_id]["source"] == "nccl-tests"
    shown = commlens("show", h100_id, "--db", str(db), "--json")
    assert shown.returncode == 0, shown.stderr
    first = json.loads(shown.stdout)["measurements"][0]
    assert first["size_bytes"] == 32768 and first["mean_s"] == pytest.approx(18.66e-6)
    # The same file again: recognised by its content, not stored twice.
    again = commlens("ingest", str(H100), "--db", str(db), "--tag", "other")
    assert again.returncode == 0
    assert again.stderr.strip() == f"{H100}: already stored as run {h100_id} (same content); skipped"
    assert len(stored_runs(db)) == 2


def test_cli_refuses_a_bad_file_and_stores_nothing_of_it(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    bad = DATA / "truncated-row.log"
    proc = commlens("ingest", str(bad), str(PARAM), "--db", str(db), "--time", "2025-01-01")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        f"error: {bad}:67: table row cut short: 10 of 13 columns before the file "
        f"ends (a truncated log?): '16777216 4194304 float sum -1 121.33 138.28 "
        f"242.00 0 120.47'"
    )
    assert [r["source"] for r in stored_runs(db)] == ["param"]  # the good file still went in
    only_bad = commlens("ingest", str(DATA / "uint32-type.log"), "--db", str(db), "--json")
    assert only_bad.returncode == 2 and json.loads(only_bad.stdout) == []
    assert "uint32-type.log:16: data type 'uint32'" in only_bad.stderr
    assert len(stored_runs(db)) == 1
    usage = commlens("ingest", str(H100), "--db", str(db), "--format", "csv")
    assert usage.returncode == 2 and "error: --format 'csv'" in usage.stderr


def test_cli_json_output_and_warnings(tmp_path: Path) -> None:
    lines = PREPEND.read_text().splitlines(True)
    path = tmp_path / "eight-of-24.log"
    path.write_text("".join(ln for ln in lines if not any(f"Rank {r:2d} " in ln for r in range(8, 24))))
    proc = commlens("ingest", str(path), "--db", str(tmp_path / "r.db"), "--json", "--op", "all_reduce")
    assert proc.returncode == 0, proc.stderr
    (warning,) = proc.stderr.splitlines()
    assert warning.startswith(f"warning: {path}:") and "printed busBW disagrees" in warning
    (doc,) = json.loads(proc.stdout)
    assert (doc["file"], doc["format"], doc["stored"]) == (str(path), "nccl-tests", True)
    assert doc["run"]["format"] == "commlens.run/5" and doc["run"]["system"]["world_size"] == 8
    assert len(doc["run"]["measurements"]) == 20


def test_cli_ingests_what_export_writes(tmp_path: Path) -> None:
    """Two runs exported from one store as a JSON list go into another store in one go, equal to themselves."""
    from commlens.store import Store

    first, second = tmp_path / "first.db", tmp_path / "second.db"
    stored = commlens("ingest", str(H100), str(THREE_OPS), "--db", str(first), "--tag", "nightly")
    assert stored.returncode == 0, stored.stderr
    export = tmp_path / "runs.json"
    exported = commlens("export", "--format", "json", "-o", str(export), "--db", str(first))
    assert exported.returncode == 0, exported.stderr
    with Store.open(str(first)) as store:
        runs = store.get_runs([s.run_id for s in store.list_runs()])
    assert len(runs) == 2 and {r.source for r in runs} == {"nccl-tests"}

    proc = commlens("ingest", str(export), "--db", str(second))
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if not line.startswith("#")] == [  # less expect's lines
        f"{export}: stored run {r.run_id} (commlens; {','.join(dict.fromkeys(m.op for m in r.measurements))}; "
        f"{len(r.measurements)} measurements; {r.world_size} ranks{'' if r.status == 'complete' else '; ' + r.status})"
        for r in sorted(runs, key=lambda r: (r.started_at, r.run_id))  # export writes oldest first
    ]
    with Store.open(str(second)) as store:
        assert store.get_runs([r.run_id for r in runs]) == runs
        assert {s.tag for s in store.list_runs()} == {"nightly"}

    # Again: both recognised by their run ids, nothing stored twice; a tag for the file relabels every run.
    again = commlens("ingest", str(export), "--db", str(second))
    assert (again.returncode, again.stdout) == (0, "")
    assert sorted(again.stderr.splitlines()) == sorted(
        f"{export}: already stored as run {r.run_id} (same content); skipped" for r in runs
    )
    relabelled = commlens("ingest", str(export), "--db", str(tmp_path / "third.db"), "--tag", "imported", "--json")
    assert relabelled.returncode == 0, relabelled.stderr
    assert [(d["format"], d["stored"], d["run"]["tag"]) for d in json.loads(relabelled.stdout)] == [
        ("commlens", True, "imported")
    ] * 2


def test_cli_refuses_an_export_it_cannot_store_whole(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    docs = [run_to_dict(_bench_run()), dict(run_to_dict(_bench_run()), run_id="ef" * 16)]
    docs[1]["measurements"] = docs[1]["measurements"] * 2
    docs[1]["measurements"][1] = dict(docs[1]["measurements"][1], samples_s=[-1.0])
    export = tmp_path / "runs.json"
    text = json.dumps(docs, indent=1)
    export.write_text(text)
    bad = commlens("ingest", str(export), "--db", str(db))
    line = [i for i, ln in enumerate(text.splitlines(), 1) if ln == "   {"][2]  # run [1], its measurement [1]
    assert (bad.returncode, bad.stderr.splitlines()) == (
        2,
        [f"error: {export}:{line}: [1]: all_reduce 64 B: negative or NaN sample"],
    )
    # One time for a file of several runs would erase each run's own.
    docs[1]["measurements"] = docs[0]["measurements"]
    export.write_text(json.dumps(docs, indent=1))
    timed = commlens("ingest", str(export), "--db", str(db), "--time", "2025-05-01")
    assert timed.returncode == 2
    assert timed.stderr == (
        f"error: {export}:1: 2 runs, each with its own start time: one time for the whole "
        f"file applies only to a file of one run\n"
    )
    assert stored_runs(db) == []
    empty = tmp_path / "none.json"
    empty.write_text("[]\n")  # what an export of no runs writes
    refused = commlens("ingest", str(empty), "--db", str(db))
    assert (refused.returncode, refused.stderr) == (2, f"error: {empty}:1: an empty list: no runs to ingest\n")


def test_show_prints_an_ingested_param_run_whose_config_has_ops_of_its_own(tmp_path):
    """PARAM's config names its ops but is no bench config: show once failed with KeyError 'dtypes'."""
    from typer.testing import CliRunner

    from commlens.cli.app import _register, app

    _register()
    db = f"sqlite:///{tmp_path / 'p.db'}"
    log = Path(__file__).parent / "data" / "ingest" / "param-2node-all_to_all-legacy.log"
    runner = CliRunner()
    stored = runner.invoke(app, ["ingest", str(log), "--db", db, "--json"])
    assert stored.exit_code == 0, stored.output
    run_id = json.loads(stored.stdout)[0]["run"]["run_id"]
    shown = runner.invoke(app, ["show", run_id, "--db", db])
    assert shown.exit_code == 0, shown.output
    assert "# Collective test: all_to_all" in shown.output and "# ops" not in shown.output


def test_the_ingest_stage_takes_one_request_checked_when_built_and_load_runs_is_its_shorthand() -> None:
    from commlens import ingest
    from commlens.ingest import IngestOptionError, IngestRequest

    request = IngestRequest(H100, tag="nightly", time="2025-05-01", op="all_reduce")
    (run,) = ingest.run(request)
    assert run.tag == "nightly" and run.started_at == "2025-05-01T00:00:00+00:00"
    assert (run,) == tuple(load_runs(H100, tag="nightly", time="2025-05-01", op="all_reduce"))
    # refused in this order, before the file is opened
    with pytest.raises(IngestOptionError, match="'yesterday' is not an ISO 8601 date"):
        IngestRequest(DATA / "nosuch.log", time="yesterday", op="all_shuffle", fmt="csv")
    with pytest.raises(IngestOptionError, match="^unknown op .all_shuffle.; known: "):
        IngestRequest(DATA / "nosuch.log", op="all_shuffle", fmt="csv")
    with pytest.raises(IngestOptionError, match="^unknown format .csv.; known: auto, "):
        IngestRequest(DATA / "nosuch.log", fmt="csv")
