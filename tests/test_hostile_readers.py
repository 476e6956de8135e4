"""Issue 28's reader and bound failures, each as the input that caused it: the Flight Recorder reader and the hang
analysis, the Kineto reader's ids and its memory, YAML nesting in every spec loader, and ``sim`` sizes.

Each test failed before its fix (a traceback, an exit 1 where a script reads "suspect found", a 2 GiB reservation,
a RecursionError, tens of GB of growth); each now ends in the reader's own error or a result.
"""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from commlens.diagnose.hang import diagnose_hang, find_divergences
from commlens.ingest.flightrec import DumpError, read_dump, read_dump_dir
from commlens.ingest.kineto import read_kineto_trace

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CLI = str(Path(sys.executable).parent / "commlens")
V27 = DATA / "flightrec_v2_7_json"


def _cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _dump(rank: int, entries: list[dict[str, Any]], ranks: str = "[0, 1]") -> dict[str, Any]:
    return {
        "version": "2.7",
        "rank": rank,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "entries": entries,
    }


def _entry(seq: int, name: str = "nccl:all_reduce", sizes: list[list[int]] | None = None) -> dict[str, Any]:
    return {
        "process_group": ["0", "default_pg"],
        "collective_seq_id": seq,
        "profiling_name": name,
        "input_sizes": sizes or [[1024]],
        "input_dtypes": ["Float"],
        "time_created_ns": seq,
    }


def _write_dumps(folder: Path, dumps: list[dict[str, Any]]) -> Path:
    folder.mkdir(exist_ok=True)
    for d in dumps:
        (folder / f"fr_trace_rank_{d['rank']}").write_text(json.dumps(d))
    return folder


# -- Flight Recorder ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"\x80\x02}}b.",  # BUILD on a dict: AttributeError inside the unpickler
        b"\x80\x02}h\x05.",  # a memo index never stored
        b"\x80\x02]q\x00(K\x01e\x85.",  # TUPLE1 on an empty stack
        b"\x80\x02}(K\x01]u\x85R.",  # REDUCE with no callable admitted
    ],
)
def test_a_malformed_pickle_is_a_dump_error(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "fr_trace_rank_0"
    path.write_bytes(raw)
    with pytest.raises(DumpError, match="fr_trace_rank_0"):
        read_dump(path)


# The peak is VmHWM after resetting it (clear_refs 5) just before the read: ru_maxrss would also carry the peak
# of the process it was forked from (Linux keeps it across exec), which is the whole test session's.
_MEMO_PEAK = """
import re, struct, sys
from commlens.ingest.flightrec import read_dump
raw = b"\\x80\\x02}r" + struct.pack("<I", 100_000_000) + b"X" + struct.pack("<I", 7) + b"versionX"
raw += struct.pack("<I", 3) + b"2.3s."
open(sys.argv[1], "wb").write(raw)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
dump = read_dump(sys.argv[1], rank_from_name=0)
with open("/proc/self/status") as f:
    print(dump.version, re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1))
"""


def test_a_pickle_naming_a_huge_memo_index_costs_no_memory(tmp_path: Path) -> None:
    """Found by the fuzz: ``LONG_BINPUT 100000000`` in a 31-byte file made the C unpickler size its memo array
    for 100 million entries (800 MB; a mutated dump took 8.4 GB)."""
    out = subprocess.run(
        [sys.executable, "-c", _MEMO_PEAK, str(tmp_path / "fr_trace_rank_0")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    version, peak_kib = out.stdout.split()
    assert version == "2.3" and int(peak_kib) < 300 * 1024, f"peak {int(peak_kib) / 1024:.0f} MiB"


def test_diagnose_hang_exits_2_on_an_unreadable_dump_and_1_only_for_a_suspect(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for rank in (0, 1):
        (broken / f"fr_trace_rank_{rank}").write_bytes((V27 / f"nccl_trace_rank_{rank}").read_bytes())
    (broken / "fr_trace_rank_2").write_bytes(b"\x80\x02}}b.")
    out = _cli("diagnose", "hang", str(broken))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith("error: ") and "fr_trace_rank_2" in out.stderr and "Traceback" not in out.stderr
    assert _cli("diagnose", "hang", str(DATA / "hang_healthy")).returncode == 0
    assert _cli("diagnose", "hang", str(DATA / "hang_op_mismatch")).returncode == 1


def test_sequence_numbers_no_rank_holds_are_skipped_not_a_crash(tmp_path: Path) -> None:
    """Both ranks lost collective 2 from their buffers: ``max()`` of no agreeing ranks crashed there."""
    entries = [_entry(1), _entry(3), _entry(4)]
    folder = _write_dumps(tmp_path / "gap", [_dump(0, entries), _dump(1, entries[:2])])
    divergences, _ = find_divergences(read_dump_dir(folder).dumps)
    [d] = divergences
    assert (d.kind, d.collective_seq_id, [c["rank"] for c in d.culprits]) == ("missing_ranks", 4, [1])


def test_a_huge_sequence_number_is_compared_at_once_not_counted_up_to(tmp_path: Path) -> None:
    huge = 10**18
    folder = _write_dumps(tmp_path / "huge", [_dump(0, [_entry(1), _entry(huge)]), _dump(1, [_entry(1), _entry(huge)])])
    start = time.perf_counter()
    report = diagnose_hang(folder)
    assert report.consistent and report.last_seq_by_rank == {0: huge, 1: huge}
    assert time.perf_counter() - start < 5


def test_an_entry_with_an_empty_op_is_what_that_rank_issued(tmp_path: Path) -> None:
    """``nccl:`` names no op: it is still an entry, not a missing rank (describe_missing raised a KeyError)."""
    folder = _write_dumps(
        tmp_path / "empty-op",
        [
            _dump(0, [_entry(1), _entry(2)], "[0, 1, 2]"),
            _dump(1, [_entry(1), _entry(2)], "[0, 1, 2]"),
            _dump(2, [_entry(1), _entry(2, "nccl:")], "[0, 1, 2]"),
        ],
    )
    report = diagnose_hang(folder)
    assert [(s.rank, s.reason) for s in report.suspects] == [(2, "op_mismatch")]
    assert "issued ''" in report.suspects[0].detail
    out = _cli("diagnose", "hang", str(folder))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "culprit rank(s): 2" in out.stdout


# -- Kineto ---------------------------------------------------------------------------------------------------------

KINETO = sorted((DATA / "kineto_nccl_4rank_2host").glob("*.json.gz"))[0]


def _kineto_doc() -> dict[str, Any]:
    return json.loads(gzip.decompress(KINETO.read_bytes()))


@pytest.mark.parametrize("field", ["External id", "correlation", "pid", "tid"])
@pytest.mark.parametrize("value", [[1, 2], {"a": 1}, 1.5, True])
def test_an_id_of_the_wrong_type_joins_nothing_instead_of_crashing(tmp_path: Path, field: str, value: Any) -> None:
    doc = _kineto_doc()
    baseline = read_kineto_trace(KINETO)
    for e in doc["traceEvents"]:
        if field in ("pid", "tid"):
            e[field] = copy.deepcopy(value)
        elif isinstance(e.get("args"), dict) and field in e["args"]:
            e["args"][field] = copy.deepcopy(value)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    trace = read_kineto_trace(path)  # before: TypeError: unhashable type (lists, dicts) at five places
    if field in ("pid", "tid"):  # every event on the same (unnamed) thread: still joined by ids
        assert len(trace.collectives) == len(baseline.collectives)
    else:  # the joins by that id are gone: the collectives joined another way or counted as not joined
        assert len(trace.collectives) + trace.n_enqueue_without_gpu_span >= len(baseline.collectives)


@pytest.mark.parametrize("text", ["5", '"traceEvents"', "null", "[]"])
def test_a_trace_that_is_a_bare_json_value_is_refused(tmp_path: Path, text: str) -> None:
    """Found by the fuzz: a number at the top level crashed the depth check (``'int' object is not iterable``)."""
    from commlens.ingest.kineto import KinetoTraceError

    path = tmp_path / "trace.json"
    path.write_text(text)
    with pytest.raises(KinetoTraceError, match="not a Chrome trace"):
        read_kineto_trace(path)


def test_a_profiler_step_of_five_thousand_digits_is_no_step(tmp_path: Path) -> None:
    doc = _kineto_doc()
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    for e in steps:
        e["name"] = "ProfilerStep#" + "9" * 5000
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    assert all(c.step is None for c in read_kineto_trace(path).collectives)


_UNDER_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from commlens.ingest.kineto import read_kineto_trace
print(sum(len(read_kineto_trace(p).collectives) for p in sys.argv[1:]))
"""


def test_the_shipped_traces_read_under_a_2_gib_address_space_limit() -> None:
    """The reader reserved its 2 GiB bound up front (``read(max_bytes + 1)``): a MemoryError under ``ulimit -v``."""
    traces = sorted(str(p) for d in ("kineto_nccl_4rank_2host", "kineto_gloo_sampled") for p in (DATA / d).glob("*.gz"))
    out = subprocess.run([sys.executable, "-c", _UNDER_LIMIT, *traces], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) == sum(len(read_kineto_trace(p).collectives) for p in traces)


# -- YAML nesting ---------------------------------------------------------------------------------------------------

NESTED = "[" * 10_000 + "]" * 10_000  # 20 KB


@pytest.mark.parametrize(
    "args",
    [
        ("topology", "show", "{spec}"),
        ("sim", "collective", "-t", "{spec}"),
        ("project", "{spec}", "-t", "dgx-h100", "-n", "64"),
        ("project", "llama3-8b", "-t", "dgx-h100", "-n", "64", "--accelerators", "{spec}"),
    ],
    ids=["topology-show", "sim-t", "project-workload", "accelerators"],
)
def test_deeply_nested_yaml_is_an_error_in_every_spec_loader(tmp_path: Path, args: tuple[str, ...]) -> None:
    spec = tmp_path / "deep.yaml"
    spec.write_text(NESTED)
    out = _cli(*(a.format(spec=spec) for a in args))
    assert out.returncode == 2, out.stdout + out.stderr[-2000:]
    assert out.stderr.startswith("error: ") and "nested deeper than 64 levels" in out.stderr
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr


def test_an_alias_bomb_and_a_recursive_alias_are_refused() -> None:
    import yaml

    from commlens.specdata import load_yaml

    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
    )
    with pytest.raises(yaml.YAMLError, match="aliases are expanded"):
        load_yaml(bomb)
    with pytest.raises(yaml.YAMLError, match="nested deeper"):
        load_yaml("&a [*a]")
    assert load_yaml("a: &x {b: [1, 2]}\nc: *x\n") == {"a": {"b": [1, 2]}, "c": {"b": [1, 2]}}


# -- sim sizes ------------------------------------------------------------------------------------------------------

_PEAK = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)
sys.stderr.write(p.stderr)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.parametrize(
    "args",
    [
        ("collective", "-N", "1000000000"),  # 8 billion GPUs: refused before numpy allocates the groups
        ("collective", "-t", "dgx-h100", "-N", "8192", "--op", "all_to_all", "-b", "1M"),  # in the fabric, too big
        ("fabric", "-t", "dgx-h100", "-N", "1000000000"),
    ],
)
def test_a_simulation_too_large_for_memory_is_refused_before_it_allocates(args: tuple[str, ...]) -> None:
    out = subprocess.run([sys.executable, "-c", _PEAK, CLI, "sim", *args], capture_output=True, text=True, timeout=150)
    rc, peak_kib = map(int, out.stdout.split())
    assert rc == 2, out.stderr[-2000:]
    assert out.stderr.startswith("error: ") and ("needs about" in out.stderr or "exceed" in out.stderr)
    assert peak_kib < 400 * 1024, f"peak {peak_kib / 1024:.0f} MiB"


def test_the_estimate_is_above_what_a_simulation_measures() -> None:
    """The estimate must not refuse what runs: a 2,048-GPU all-to-all measured 3.5 GiB (issue 28's notes)."""
    from commlens.sim import CollectiveShape, estimate_sim_bytes
    from commlens.topology import load_topology

    topo = load_topology("dgx-h100")
    a2a = estimate_sim_bytes(topo, 256, [CollectiveShape("all_to_all", 64 * 2**20, 1, 2048)])
    assert 3.5 * 2**30 < a2a < 8 * 2**30
    ring = estimate_sim_bytes(topo, 1024, [CollectiveShape("all_reduce", 64 * 2**20, 1, 8192)])
    assert 90 * 2**20 < ring < 2 * 2**30  # measured 86 MiB
