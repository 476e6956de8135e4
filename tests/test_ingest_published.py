"""Published nccl-tests / rccl-tests logs and NCCL Inspector records (issue 33): every stored value against
an independent reading, refusals that name their cause.

The files are other people's output as published, kept in ../shared/realdata/ingest_published/ (its README names
each source) and ../shared/realdata/nccltests/; a test whose file is absent skips and says why. The reading
below is the test's own: a plain split of each table line under its header, nothing of commlens' reader.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from benchutil import commlens

from commlens.ingest import GivenFacts, IngestError, IngestWarning, load_runs
from commlens.ingest.nccl_inspector import read_inspector
from commlens.results import Run
from commlens.store import Store

# Published logs and records as their authors published them: third-party files, kept in ../shared/realdata/
# (placed there by the project, not committed here; README there names each source). Absent: the tests that read
# them skip and say why.
DATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "ingest_published"


def published(name: str) -> Path:
    """A published file of ../shared/realdata/ingest_published/; the test skips, saying why, where it is absent."""
    path = DATA / name
    if not path.is_file():
        pytest.skip(
            f"{path} is not in this checkout (published logs: see the issue 33 note; placed in shared/realdata)"
        )
    return path


# The test's own prefix rule: any "(..., pid=N...)" and "[r,s]<stdout>:" in front, in any order and number.
_PREFIX = re.compile(r"^\s*(?:\([^()]*pid=\d+[^()]*\)\s?|\[\d+,\d+\]<std(?:out|err)>:)+")
_TYPES = {
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int32": "int32",
    "uint8": "uint8",
}


@dataclass(frozen=True)
class Printed:
    """One half of one printed row, as text."""

    size: int
    count: int
    dtype: str
    redop: str | None  # None: no column or a blank cell
    root: int | None
    in_place: bool
    time: str
    algbw: str
    busbw: str
    wrong: str | None  # None: a pre-2.13 'error' column (not a count)


def read_tables(path: Path) -> list[list[Printed]]:
    """Each table of the log: its rows' halves, by the header's columns (a short row's missing cell: redop)."""
    tables: list[list[Printed]] = []
    columns: list[str] = []
    for raw in path.read_text().splitlines():
        line = _PREFIX.sub("", raw)
        words = line.split()
        if line.startswith("#") and "size" in words and "count" in words:
            columns = words[1:]
            tables.append([])
            continue
        if not columns or len(words) < 8 or not (words[0].isdigit() and words[1].isdigit()):
            continue
        left = columns[: columns.index("time")]
        half = columns.index("time", len(left) + 1) - len(left)
        if len(words) == len(columns) - 1 and "redop" in left:  # pre-2.13 alltoall leaves redop blank
            words.insert(left.index("redop"), "")
        assert len(words) == len(columns), raw
        cells = dict(zip(left, words))
        for in_place in (False, True):
            h = words[len(left) + half * in_place : len(left) + half * (in_place + 1)]
            tables[-1].append(
                Printed(
                    size=int(cells["size"]),
                    count=int(cells["count"]),
                    dtype=_TYPES[cells["type"]],
                    redop=None if cells.get("redop", "none") in ("none", "") else cells["redop"],
                    root=None if int(cells.get("root", -1)) < 0 else int(cells["root"]),
                    in_place=in_place,
                    time=h[0],
                    algbw=h[1],
                    busbw=h[2],
                    wrong=None if columns[len(left) + 3] == "error" or h[3] == "N/A" else h[3],
                )
            )
    return [t for t in tables if t]


def stored(tmp_path: Path, path: Path, **kw: object) -> list[Run]:
    """The file's runs as the store gives them back after ingesting."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        runs = load_runs(path, **kw)  # type: ignore[arg-type]
    with Store.open(str(tmp_path / "store.db")) as store:
        store.save_runs(runs)
        return [store.get_run(r.run_id) for r in runs]


def _decimals(token: str) -> int:
    return len(token.split(".", 1)[1]) if "." in token else 0


def assert_equal_to_printed(
    run: Run, printed: list[Printed], *, redop_default: str | None = None, reduces: bool = True
) -> int:
    """Every stored value of every measurement equals the printed one; returns how many were compared.

    ``reduces`` False: an op that does not reduce keeps no redop (sendrecv prints its -o op, 'sum')."""
    assert len(run.measurements) == len(printed)
    for m, p in zip(run.measurements, printed):
        where = f"{p.size} B {'in' if p.in_place else 'out-of'}-place"
        assert (m.size_bytes, m.count, m.dtype, m.in_place) == (p.size, p.count, p.dtype, p.in_place), where
        assert m.redop == ((p.redop or redop_default) if reduces else None) and m.root == p.root, where
        assert m.nwrong == (None if p.wrong is None else int(p.wrong)), where
        time_us = m.stats.mean_s * 1e6
        assert f"{time_us:.{_decimals(p.time)}f}" == p.time, where
        assert f"{m.algbw_bytes_per_s / 1e9:.2f}" == p.algbw, where
        assert f"{m.busbw_bytes_per_s / 1e9:.2f}" == p.busbw, where
    return len(printed)


# (fixture, load_runs options, op stored, default redop of a table without a redop column)
CASES = [
    ("skypilot-gke-h200-16rank-nested-prefix.log", {"op": "all_gather"}, "all_gather"),
    ("gcp-gke-h200-16rank-run_nccl_tests-t-all_gather.log", {}, "all_gather"),
    ("aws-eks-g5-a10g-1rank-all_reduce-subus-times.log", {"op": "all_reduce"}, "all_reduce"),
    (
        "nccl-tests-issue128-fragment-reduce_scatter-2x4gpu.log",
        {"op": "reduce_scatter", "given": GivenFacts(ranks=8, nhosts=2)},
        "reduce_scatter",
    ),
    ("nccl-tests-issue287-rtx5090-1rank-subus-times.log", {}, "all_reduce"),
    ("dgx-spark-gb10-2node-all_reduce-excerpt.log", {}, "all_reduce"),
    ("a3mega-h100-16rank-quoted-mpirun.md", {}, "all_reduce"),
    ("eks-efa-mpijob-fragment-indented-tagoutput.md", {"given": GivenFacts(ranks=16)}, "all_reduce"),
    ("b200-vultr-report-reduce_scatter-8rank-fragment.md", {"given": GivenFacts(ranks=8)}, "reduce_scatter"),
    ("b200-vultr-report-sendrecv-8rank-fragment.md", {"given": GivenFacts(ranks=8)}, "sendrecv"),
    ("b200-vultr-report-all_reduce-16rank-fragment.md", {"given": GivenFacts(ranks=16, nhosts=2)}, "all_reduce"),
    (
        "b200-vultr-report-alltoall-8rank-uint8-fragment.md",
        {"op": "all_to_all", "given": GivenFacts(ranks=8, nhosts=1, gpu="NVIDIA B200")},
        "all_to_all",
    ),
]


@pytest.mark.parametrize(("name", "options", "op"), CASES, ids=[c[0] for c in CASES])
def test_published_logs_store_every_value_as_printed(tmp_path: Path, name: str, options: dict, op: str) -> None:
    (run,) = stored(tmp_path, published(name), **options)
    (printed,) = read_tables(published(name))
    assert {m.op for m in run.measurements} == {op}
    assert assert_equal_to_printed(run, printed, reduces=op != "sendrecv") >= 8


def test_the_three_settings_of_one_log_are_three_runs_each_as_printed(tmp_path: Path) -> None:
    path = published("spcx-2node-alltoall-three-settings-2026.log")
    runs = stored(tmp_path, path)
    tables = read_tables(path)
    assert len(runs) == len(tables) == 3
    for run, printed in zip(runs, tables):
        assert assert_equal_to_printed(run, printed) == 48
        assert run.world_size == 16 and run.system.hosts == ("R6KD-CX8aaS-GPU-14", "R6KD-CX8aaS-GPU-15")
    # Each run has its own settings, shell escapes undone, and its wrapper's start time.
    assert [r.system.env["NCCL_IB_ADAPTIVE_ROUTING"] for r in runs] == ["0", "1", "1"]
    assert [r.system.env["NCCL_IB_OOO_RQ"] for r in runs] == ["0", "0", "1"]
    assert runs[0].system.env["NCCL_IB_HCA"] == "mlx5_2,mlx5_3,mlx5_0,mlx5_1,mlx5_6,mlx5_7,mlx5_4,mlx5_5"
    assert runs[0].system.env["NCCL_DEBUG_SUBSYS"] == "GRAPH,NET,TUNING"
    assert [r.started_at for r in runs] == [
        "2026-04-19T11:14:23+00:00",
        "2026-04-19T11:16:43+00:00",
        "2026-04-19T11:19:03+00:00",
    ]
    assert len({r.run_id for r in runs}) == 3
    assert "run 3 of 3" in runs[2].notes[0] and "NCCL_IB_OOO_RQ=1" in runs[2].notes[0]


def test_sub_microsecond_times_keep_the_printed_bandwidths_with_a_note(tmp_path: Path) -> None:
    (run,) = stored(tmp_path, published("aws-eks-g5-a10g-1rank-all_reduce-subus-times.log"), op="all_reduce")
    in_place = {m.size_bytes: m for m in run.measurements if m.in_place}
    # 2 GiB in place is printed 0.12 us at 18401745.06 GB/s: both read back as printed
    big = in_place[2147483648]
    assert f"{big.stats.mean_s * 1e6:.2f}" == "0.12" and f"{big.algbw_bytes_per_s / 1e9:.2f}" == "18401745.06"
    note = next(n for n in run.notes if "printed too coarsely" in n)
    assert "printed_times_us" in note
    kept = run.config.values["runs"][0]["printed_times_us"]
    assert {"line": 29, "in_place": True, "printed": 0.11} == {k: kept[0][k] for k in ("line", "in_place", "printed")}


def test_a_nested_launcher_prefix_is_read_and_the_op_left_to_the_user(tmp_path: Path) -> None:
    path = published("skypilot-gke-h200-16rank-nested-prefix.log")
    with pytest.raises(IngestError, match=r"fits 2: all_gather, all_to_all; pass the op") as e:
        load_runs(path)
    assert "size = count x 4 B x ranks" in str(e.value)
    (run,) = stored(tmp_path, path, op="all_gather")
    assert run.system.hosts == ("nc-d87e1263-head", "nc-d87e1263-worker1")


def test_a_wrapper_names_the_op_with_its_own_option(tmp_path: Path) -> None:
    (run,) = stored(tmp_path, published("gcp-gke-h200-16rank-run_nccl_tests-t-all_gather.log"))
    how = run.config.values["runs"][0]["op_from"]
    assert "line 3" in how and "run_nccl_tests.sh -t all_gather" in run.config.values["runs"][0]["command"]


@pytest.mark.parametrize(
    ("name", "line", "cause"),
    [
        ("nccl-tests-issue287-rtx5090-2gpu-abort-after-header.log", 11, "Test NCCL failure common.cu:392 'unhandled"),
        ("nccl-tests-issue264-h100-abort-cuda-system-not-initialized.log", 5, "'system not yet initialized'"),
    ],
)
def test_more_aborted_runs_name_their_cause(name: str, line: int, cause: str) -> None:
    with pytest.raises(IngestError, match="aborted before printing any result row") as e:
        load_runs(published(name))
    assert e.value.line == line and cause in str(e.value)


def test_two_processes_each_rank_0_are_refused_naming_the_cause() -> None:
    with pytest.raises(IngestError, match="rank 0 is listed twice: several independent nccl-tests processes") as e:
        load_runs(published("nccl-tests-issue107-two-processes-rank0-twice.log"))
    assert e.value.line == 9


def test_an_aborted_run_is_refused_with_its_failure_line() -> None:
    path = published("rccl-issue876-7900xtx-abort-unhandled-cuda-error.log")
    with pytest.raises(IngestError, match=r"aborted before printing any result row") as e:
        load_runs(path)
    assert e.value.line == 26 and "Test NCCL failure common.cu:1285 'unhandled cuda error'" in str(e.value)
    proc = commlens("ingest", "--db", "/nonexistent-dir/x.db", str(path))
    assert proc.returncode == 2 and "unhandled cuda error" in proc.stderr


def test_a_fragment_needs_the_world_size_and_records_what_the_user_gave(tmp_path: Path) -> None:
    path = published("nccl-tests-issue128-fragment-reduce_scatter-2x4gpu.log")
    with pytest.raises(IngestError, match=r"world size is unknown .*--ranks N"):
        load_runs(path, op="reduce_scatter")
    given = GivenFacts(ranks=8, hosts=("node-a", "node-b"), gpu="NVIDIA A100-SXM4-80GB")
    (run,) = stored(tmp_path, path, op="reduce_scatter", given=given)
    assert run.world_size == 8 and run.system.ranks_per_host == {"node-a": 4, "node-b": 4}
    assert run.system.device_names == ("NVIDIA A100-SXM4-80GB",) * 8
    assert run.system.extra["given_by_user"] == {"ranks": 8, "hosts": ["node-a", "node-b"], "gpu": given.gpu}
    assert any(n.startswith("given by the user, not read from the log") for n in run.notes)
    with pytest.raises(IngestError, match="do not split evenly over 3 hosts"):
        load_runs(path, op="reduce_scatter", given=GivenFacts(ranks=8, nhosts=3))


def test_fragment_options_on_the_command_line(tmp_path: Path) -> None:
    path = published("nccl-tests-issue128-fragment-reduce_scatter-2x4gpu.log")
    db = tmp_path / "s.db"
    proc = commlens("ingest", "--db", str(db), "--op", "reduce_scatter", "--ranks", "8", "--hosts", "2", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "reduce_scatter; 14 measurements; 8 ranks; incomplete" in proc.stdout
    bad = commlens("ingest", "--db", str(db), "--ranks", "0", str(path))
    assert bad.returncode == 2 and "--ranks 0" in bad.stderr
    other = commlens(
        "ingest", "--db", str(db), "--gpu", "H100", str(published("inspector-readme-v4.1-dump_stats-dropped.log"))
    )
    assert other.returncode == 2 and "only for nccl-tests logs" in other.stderr


def test_inspector_durations_are_the_records_own(tmp_path: Path) -> None:
    (run,) = stored(tmp_path, published("inspector-readme-v4.1-verbose-reducescatter.log"))
    (m,) = run.measurements
    assert m.samples_s[0] == pytest.approx(41057e-6, abs=1e-12)  # 41057 us to the ns, not 41056.9x
    assert run.started_at == "2025-07-18T19:33:49+00:00"
    (record,) = read_inspector(published("inspector-readme-v4.1-verbose-reducescatter.log")).records
    assert record.start_s == pytest.approx(1752867229.235181, abs=1e-6)  # epoch times for live use


def test_inspector_dropped_records_are_reported(tmp_path: Path) -> None:
    path = published("inspector-readme-v4.1-dump_stats-dropped.log")
    with pytest.warns(IngestWarning, match="4096 collective and 0 point-to-point records dropped"):
        (run,) = load_runs(path)
    assert run.status == "incomplete" and run.config.values["dropped_records"] == {"coll": 4096, "p2p": 0}
    assert any("dropped 4096 collective" in n for n in run.notes)
    assert run.measurements[0].samples_s[0] == pytest.approx(61974e-6, abs=1e-12)


# ../shared/realdata/nccltests/: (file, op the log does not name but its header allows only one of)
REAL = [
    ("superbench-a100-8gpu-nccl_allgather.log", "all_gather", None),
    ("superbench-a100-8gpu-nccl_allreduce.log", "all_reduce", "sum"),
    ("superbench-a100-8gpu-nccl_alltoall.log", "all_to_all", None),
    ("superbench-a100-8gpu-nccl_broadcast.log", "broadcast", None),
    ("superbench-a100-8gpu-nccl_reduce.log", "reduce", None),
    ("superbench-a100-8gpu-nccl_reducescatter.log", "reduce_scatter", None),
    ("aws-efa-eks-p4d-16rank-2node-tagoutput-nccl2.8.3-2021.log", "all_reduce", None),
    ("aws-efa-eks-p4d-16rank-2node-tagoutput-nccl2.9.9-2022.log", "all_reduce", None),
]


@pytest.mark.parametrize(("name", "op", "redop"), REAL, ids=[r[0] for r in REAL])
def test_real_logs_store_every_value_as_printed(
    tmp_path: Path, realdata: Path, name: str, op: str, redop: str | None
) -> None:
    path = realdata / "nccltests" / name
    (run,) = stored(tmp_path, path)  # no --op: each one's header and rows leave one op
    tables = read_tables(path)
    assert {m.op for m in run.measurements} == {op}
    assert assert_equal_to_printed(run, [p for t in tables for p in t], redop_default=redop) > 50
    if "alltoall" in name:
        assert any("redop column is printed blank" in n for n in run.notes)


def test_the_independent_reading_sees_what_it_should() -> None:
    """The test's reader itself: the blank redop cell and a nested prefix (so the checks above can fail)."""
    (t,) = read_tables(published("skypilot-gke-h200-16rank-nested-prefix.log"))
    assert len(t) == 48 and t[0] == Printed(1024, 16, "float32", None, None, False, "28.39", "0.04", "0.03", "0")
    assert not math.isnan(float(t[-1].time))


def test_inspector_times_beyond_any_date_are_left_out_not_a_crash(tmp_path: Path) -> None:
    """issue 28's fuzz: a dump_timestamp_us of year 57887 crashed the run's start date (ValueError)."""
    lines = (published("inspector-readme-v4.1-dump_stats-dropped.log")).read_text().splitlines()
    far = lines[1].replace('"dump_timestamp_us":1748030377748202', '"dump_timestamp_us":1764590400250005000')
    assert far != lines[1]
    path = tmp_path / "far.log"
    path.write_text("\n".join([lines[0], lines[1], far]) + "\n")
    with pytest.warns(IngestWarning, match=r"far.log:3: left out: times .* are not epoch microseconds"):
        (run,) = load_runs(path)
    assert run.started_at.startswith("2025-05-23") and len(run.measurements) == 1
