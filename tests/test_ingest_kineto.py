"""commlens.ingest.kineto: PyTorch profiler traces read into one record per collective.

Real files: HTA's test traces in ../shared/realdata/kineto (see its README) and gloo traces
recorded here with torchrun (tests/data/stragglers_late_rank1, tests/data/kineto_gloo_sampled).
Fixture: tests/data/kineto_nccl_4rank_2host, in the layout of HTA's nccl_parser_config trace.
"""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import pytest

from commlens.ingest.kineto import KinetoTraceError, read_kineto_trace, read_trace_json

DATA = Path(__file__).parent / "data"
NCCL_DATA = "kineto/nccl_parser_config_nccl_data.json.gz"


def _write_gz(path: Path, trace: dict) -> Path:
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


def test_nccl_collective_counted_once_on_its_kernel(realdata: Path) -> None:
    """Each of the 21 collectives has a CPU enqueue, a gpu_user_annotation and a kernel: one record each."""
    trace = read_kineto_trace(realdata / NCCL_DATA)
    assert (trace.rank, trace.world_size, trace.backend, trace.host) == (0, 2, "nccl", None)
    assert len(trace.collectives) == 21
    assert collections.Counter(c.op for c in trace.collectives) == {"all_reduce": 15, "broadcast": 6}
    assert {c.span for c in trace.collectives} == {"gpu_kernel"}
    assert collections.Counter(c.step for c in trace.collectives) == {4: 7, 5: 7, 6: 7}
    first = trace.collectives[0]
    # The kernel (External id 114 = record_param_comms'), not the nccl:broadcast enqueue at 4458676423294.674 µs.
    assert first.name == "nccl:broadcast"
    assert first.start_s == pytest.approx(4458676423385.774e-6, abs=1e-9)
    assert first.duration_s == pytest.approx(30.975e-6, abs=1e-9)
    assert (first.group, first.group_ranks, first.count, first.dtype, first.seq) == ("0", (0, 1), 53120, "float", None)
    assert sorted({c.count for c in trace.collectives if c.op == "all_reduce"}) == [
        2049000,
        2431040,
        6563840,
        6637568,
        7875584,
    ]


def test_gpu_user_annotation_when_the_kernel_is_missing(realdata: Path, tmp_path: Path) -> None:
    top = read_trace_json(realdata / NCCL_DATA)
    top["traceEvents"] = [e for e in top["traceEvents"] if e.get("cat") != "kernel"]
    trace = read_kineto_trace(_write_gz(tmp_path / "no_kernels.json.gz", top))
    assert len(trace.collectives) == 21 and {c.span for c in trace.collectives} == {"gpu_user_annotation"}
    assert trace.collectives[0].start_s == pytest.approx(4458676423384.774e-6, abs=1e-9)
    top["traceEvents"] = [e for e in top["traceEvents"] if e.get("cat") != "gpu_user_annotation"]
    with pytest.raises(KinetoTraceError, match="21 nccl:\\* enqueue spans but no GPU-side span"):
        read_kineto_trace(_write_gz(tmp_path / "cpu_only.json.gz", top))


def test_kernel_joined_by_correlation_in_the_sampled_128_rank_job(realdata: Path) -> None:
    """trace_filter: kernels carry their own correlation as External id; the launch inside nccl:* joins them."""
    trace = read_kineto_trace(realdata / "kineto/trace_filter_sampled_rank-0.json.gz")
    assert (trace.rank, trace.world_size, trace.n_unjoined_kernels, trace.n_enqueue_without_gpu_span) == (0, 128, 0, 0)
    assert collections.Counter(c.name for c in trace.collectives) == {
        "nccl:all_to_all": 4,
        "nccl:all_reduce": 4,
        "nccl:_all_gather_base": 2,
    }
    first = trace.collectives[0]
    assert (first.op, first.count, first.dtype, first.step, first.group) == ("all_to_all", 384, "long", 551, None)
    assert first.start_s == pytest.approx(1682725898.094377, abs=1e-6)
    assert first.duration_s == pytest.approx(30669e-6, abs=0.5e-6)  # epoch µs as float seconds: 0.24 µs steps
    assert [c.op for c in trace.collectives if c.name == "nccl:_all_gather_base"] == ["all_gather"] * 2


def test_gloo_cpu_spans_are_the_collectives(realdata: Path) -> None:
    trace = read_kineto_trace(realdata / "kineto/cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert (trace.rank, trace.world_size, trace.backend) == (34, 300, "gloo")
    assert collections.Counter((c.span, c.count, c.dtype) for c in trace.collectives) == {
        ("cpu", 321271, "float"): 5,
        ("cpu", 2082411, "float"): 5,
    }
    assert trace.collectives[0].duration_s == pytest.approx(173209.713e-6, abs=1e-9)


@pytest.mark.parametrize(
    "name, message",
    [
        ("amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", "no distributedInfo"),
        ("distributed_info_unavailable_distributed_info_not_found.json.gz", "no distributedInfo"),
        ("rank_unavailable_rank_not_found.json.gz", "distributedInfo has no rank"),
    ],
)
def test_traces_without_a_rank_are_refused_by_name(realdata: Path, name: str, message: str) -> None:
    with pytest.raises(KinetoTraceError, match=message) as e:
        read_kineto_trace(realdata / "kineto" / name)
    assert name in str(e.value)


def test_gzip_read_like_json(tmp_path: Path) -> None:
    plain = DATA / "stragglers_late_rank1" / "trace_rank1.json"
    gz = tmp_path / "trace_rank1.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_kineto_trace(gz).collectives == read_kineto_trace(plain).collectives
    assert len(read_kineto_trace(gz).collectives) == 20


def test_real_sampled_gloo_traces_carry_shapes_and_steps() -> None:
    paths = sorted((DATA / "kineto_gloo_sampled").glob("*.pt.trace.json.gz"))
    steps = {read_kineto_trace(p).rank: sorted({c.step for c in read_kineto_trace(p).collectives}) for p in paths}
    assert steps == {0: [2, 3, 4, 5], 1: [2, 3, 4, 5], 2: [3, 4, 5, 6]}
    trace = read_kineto_trace(paths[0])
    assert collections.Counter((c.op, c.count, c.dtype) for c in trace.collectives) == {
        ("all_reduce", 16384, "float"): 4,
        ("broadcast", 1, "float"): 4,
    }


def test_fixture_reads_as_the_real_layout() -> None:
    trace = read_kineto_trace(DATA / "kineto_nccl_4rank_2host" / "rank-3.pt.trace.json.gz")
    assert (trace.rank, trace.host, len(trace.collectives)) == (3, "node-b", 18)
    assert {c.span for c in trace.collectives} == {"gpu_kernel"}
    assert {c.group_ranks for c in trace.collectives} == {(0, 1, 2, 3)}


def test_gzip_bomb_refused(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (3 << 20)))
    assert bomb.stat().st_size < 10_000
    with pytest.raises(KinetoTraceError, match="more than 1048576 bytes of JSON once decompressed"):
        read_kineto_trace(bomb, max_bytes=1 << 20)


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"traceEvents": []}', "not gzip data"),
        (gzip.compress(b'{"traceEvents": [', mtime=0)[:-8], "cannot read"),  # truncated
    ],
    ids=["not-gzip", "truncated"],  # not the bytes: a test's id must not change between collections
)
def test_bad_gzip(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(content)
    with pytest.raises(KinetoTraceError, match=message):
        read_kineto_trace(path)


def _trace(events: list, **top: object) -> dict:
    return {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2}, "traceEvents": events, **top}


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 50 + "]" * 50, "nested deeper than 32 levels"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 32 levels"),
        ('{"traceEvents": [], "x": NaN}', "NaN is not a JSON number"),
        ('{"events": []}', "no traceEvents list"),
        ('{"traceEvents": [', "not a readable Chrome trace"),
    ],
)
def test_bad_json(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(text)
    with pytest.raises(KinetoTraceError, match=message):
        read_kineto_trace(path)


def test_negative_duration_is_a_reading_error(tmp_path: Path) -> None:
    span = {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 10.0}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_trace([{**span, "dur": 5.0}, {**span, "ts": 20.0, "dur": -3.5}])))
    with pytest.raises(KinetoTraceError, match=r"traceEvents\[1\] \('gloo:all_reduce'\): negative duration -3.5"):
        read_kineto_trace(path)
    path.write_text(json.dumps(_trace([{**span, "dur": "5"}])))
    with pytest.raises(KinetoTraceError, match=r"traceEvents\[0\].*dur is not a number: '5'"):
        read_kineto_trace(path)
    path.write_text(json.dumps(_trace([{**span, "name": "aten::mm", "dur": 1.0}])))
    with pytest.raises(KinetoTraceError, match="no collective spans"):
        read_kineto_trace(path)


def test_a_gloo_span_closing_after_the_profiler_stopped_ends_at_its_stop(tmp_path: Path) -> None:
    """Seen on 4 gloo ranks sharing 2 cores: the last gloo:all_reduce closed 296 ms after its rank had gone on
    and stopped the profiler. The collective had completed by the stop; the span is cut there and counted.
    A profiler span without a usable end (as in a hand-made trace) cuts nothing."""
    span = {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2}
    window = {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler"}
    events = [
        {**window, "ts": 0.0, "dur": 1000.0},
        {**span, "ts": 100.0, "dur": 50.0},
        {**span, "ts": 900.0, "dur": 400.0},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_trace(events)))
    trace = read_kineto_trace(path)
    got = [(c.start_s * 1e6, c.end_s * 1e6) for c in trace.collectives]
    assert got == [pytest.approx((100.0, 150.0)), pytest.approx((900.0, 1000.0))]
    assert trace.n_cpu_spans_clipped == 1
    events[0] = {**window, "ts": 0.0}
    path.write_text(json.dumps(_trace(events)))
    trace = read_kineto_trace(path)
    assert trace.collectives[-1].end_s * 1e6 == pytest.approx(1300.0) and trace.n_cpu_spans_clipped == 0
