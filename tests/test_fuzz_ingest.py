"""Fuzzing every reader and the YAML loaders: hostile input ends cleanly, or is stored (or read).

Real fixtures (``tests/data/ingest/``, NCCL Inspector logs, commlens' own run files, Flight Recorder dumps of
every layout (pickle and JSON), Kineto traces, the shipped YAML presets) are mutated:
bytes flipped, inserted and deleted, lines dropped and repeated, numbers replaced by huge, negative,
infinite and NaN ones, JSON values swapped for values of other types. The only outcomes allowed are
a stored run (or a read trace, a finished hang analysis, a loaded spec), or the reader's own error
(``IngestError``, ``DumpError``, ``KinetoTraceError``, ``TopologyError``, ``WorkloadError``,
``AcceleratorsFileError``) with a message of bounded length; anything else (a ``KeyError``, an
``OverflowError``, a ``RecursionError``, a crash in the store) fails the test with the input that caused it.
A mutated Flight Recorder dump goes into a directory with its fixture's other ranks and through the whole
analysis of ``commlens diagnose hang`` (reader, divergences, the report's JSON and text).

CI runs a fixed seed (``derandomize=True``) and a bounded budget; ``benchmarks/fuzz_ingest.py`` runs
the same cases at least 10,000 times and reports the figures in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlens.ingest import IngestError, IngestWarning, load_source_runs, read_source
from commlens.results import BenchSettings, Measurement, Run, SystemInfo, run_to_dict

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "ingest"
SRC = ROOT / "src" / "commlens"
# The longest error message a hostile input may produce (a quoted value is cut to 200 characters).
MAX_MESSAGE_CHARS = 2000

# Replacements for a number: what a corrupted or hostile file puts where a count, size, rank or time goes.
HOSTILE_NUMBERS = (
    "4294967296",
    "-1",
    "0",
    "-0",
    "1e400",
    "-1e400",
    "inf",
    "-inf",
    "nan",
    "NaN",
    "Infinity",
    "99999999999999999999999999",
    "1125899906842624",
    "0x10",
    "65_536",
    "1.5",
    "",
    "1e-320",
    "9" * 400,
)
# Replacements for a JSON value: every type, and the extremes of each.
HOSTILE_VALUES: tuple[Any, ...] = (
    4294967296,
    -1,
    0,
    2**70,
    -(2**70),
    1.5,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    True,
    False,
    None,
    "",
    "x" * 1000,
    "-1",
    "inf",
    [],
    {},
    [1, 2],
    {"a": 1},
    [[[[]]]],
    "all_reduce_perf",
    "commlens.run/1",
    "commlens.run/999",
)
KINDS = ("flip", "insert", "delete", "drop_line", "repeat_line", "number", "json_value")


def _bench_run_json() -> bytes:
    system = SystemInfo(world_size=2, backend="gloo", device="cpu", hosts=("h",), ranks_per_host={"h": 2})
    ms = (
        Measurement(
            op="all_reduce",
            dtype="float32",
            size_bytes=64,
            count=16,
            in_place=False,
            world_size=2,
            samples_s=(2e-5, 3e-5),
            redop="sum",
            rank_samples_s=((2e-5, 3e-5), (1e-5, 2e-5)),
            nwrong=0,
        ),
        Measurement(
            op="broadcast", dtype="int8", size_bytes=8, count=8, in_place=True, world_size=2, samples_s=(1e-5,), root=0
        ),
    )
    run = Run(
        run_id="cd" * 16,
        started_at="2025-02-01T00:00:00+00:00",
        system=system,
        measurements=ms,
        tag="t",
        config=BenchSettings({"sizes": [8, 64]}),
        notes=("a note",),
    )
    return json.dumps(run_to_dict(run), indent=1).encode()


@dataclass(frozen=True)
class Case:
    """A fixture to mutate and the reader that must take whatever it becomes."""

    name: str
    data: bytes
    reader: (
        str  # a format of commlens ingest, or "flightrec", "kineto", "job", "replay-plan", "replay-monitor", or a spec
    )
    siblings: Path | None = None  # flightrec, job: the fixture's directory, whose other ranks' files go alongside


SPEC_READERS = ("topology", "workload", "accelerators")
TRACE_READERS = ("flightrec", "kineto", "job", "replay-plan", "replay-monitor")
JOB_FILES = (  # one rank's file of each source of a generated job, mutated among the other ranks' files
    ("job_late_rank/inspector", "node-000-pid40000.log"),
    ("job_late_rank/monitor", "monitor-rank1.jsonl"),
    ("job_late_rank/flightrec", "nccl_trace_rank_2"),
)
FLIGHTREC_DIRS = (
    ("flightrec_v2_3_nccl", "nccl_trace_rank_1"),  # pickle, layout 2.3
    ("flightrec_v1_1_nccl", "nccl_trace_rank_2"),  # pickle, before 2.3 (no pg_config)
    ("flightrec_v2_7_json", "nccl_trace_rank_1"),  # JSON
    ("flightrec_gloo_json", "fr_trace_rank_1.json"),  # JSON, gloo
    ("flightrec_v2_9_active", "_dump_1"),  # pickle, active collectives only
    ("hang_op_mismatch", "fr_trace_rank_1"),  # pickle (protocol 4) with frames, a divergence
)
KINETO_TRACES = (
    "kineto_nccl_4rank_2host/rank-1.pt.trace.json.gz",
    "kineto_gloo_sampled/rank1.1796123109628727888.pt.trace.json.gz",
)


def _cases() -> list[Case]:
    formats = {"a100-2node-reduce_scatter-v1.json": "nccl-tests-json", "h100-8gpu-all_reduce-I.json": "nccl-tests-json"}
    cases = [
        Case(p.name, p.read_bytes(), formats.get(p.name, "param" if p.name.startswith("param") else "nccl-tests"))
        for p in sorted(DATA.iterdir())
        if p.suffix in (".log", ".json")
    ]
    run = _bench_run_json()
    cases.append(Case("commlens-run.json", run, "commlens"))
    cases.append(Case("commlens-export.json", b"[" + run + b"]", "commlens"))
    cases += [
        Case(p.name, p.read_bytes(), "nccl-inspector")
        for p in sorted((DATA.parent / "nccl_inspector" / "compact").glob("*.log"))[:2]
    ]
    cases += [
        Case(name, (DATA.parent / folder / name).read_bytes(), "flightrec", siblings=DATA.parent / folder)
        for folder, name in FLIGHTREC_DIRS
    ]
    cases += [
        Case(f"{folder.split('/')[-1]}-{name}", (DATA.parent / folder / name).read_bytes(), "job", DATA.parent / folder)
        for folder, name in JOB_FILES
    ]
    # Traces decompressed, so that mutations reach the JSON; one kept gzip, so that they reach the gzip layer.
    cases += [Case(Path(t).name[:-3], gzip.decompress((DATA.parent / t).read_bytes()), "kineto") for t in KINETO_TRACES]
    cases.append(Case(Path(KINETO_TRACES[0]).name, (DATA.parent / KINETO_TRACES[0]).read_bytes(), "kineto"))
    replay = DATA.parent / "replay" / "ddp-4rank-gloo"
    cases.append(Case("plan-kineto.json", (replay / "plan-kineto.json").read_bytes(), "replay-plan"))
    cases.append(Case("monitor-rank1.jsonl", (replay / "monitor-rank1.jsonl").read_bytes(), "replay-monitor"))
    cases += [
        Case(p.name, p.read_bytes(), "topology") for p in sorted((SRC / "topology" / "presets").glob("*.yaml"))[:4]
    ]
    cases += [
        Case(p.name, p.read_bytes(), "workload") for p in sorted((SRC / "workload" / "presets").glob("*.yaml"))[:3]
    ]
    cases.append(Case("accelerators.yaml", (SRC / "project" / "accelerators.yaml").read_bytes(), "accelerators"))
    return cases


CASES = _cases()
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _json_nodes(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON document, in document order, iteratively."""
    out: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            out.append((node, key))
            stack.append(child)
    return out


def mutate(data: bytes, kind: str, where: float, pick: int) -> bytes:
    """``data`` with one mutation of ``kind``: ``where`` (0..1) places it, ``pick`` chooses what goes in."""
    n = len(data)
    at = min(int(where * n), max(n - 1, 0))
    if kind == "flip" and n:
        return data[:at] + bytes([data[at] ^ (1 << (pick % 8))]) + data[at + 1 :]
    if kind == "insert":
        payload = (
            HOSTILE_NUMBERS[pick % len(HOSTILE_NUMBERS)].encode()
            if pick % 3
            else [
                b"\n",
                b"[",
                b"{",
                b'"',
                b"\x00",
                b"\xff\xfe",
                b"#  Rank 4294967296 Group 0 Pid 1 on h device 0 [0000:00:00] GPU\n",
                b"\r",
            ][pick % 8]
        )
        return data[:at] + payload + data[at:]
    if kind == "delete":
        return data[:at] + data[at + 1 + pick % 64 :]
    if kind in ("drop_line", "repeat_line"):
        lines = data.splitlines(True)
        if not lines:
            return data
        i = min(int(where * len(lines)), len(lines) - 1)
        repeat = lines[i : i + 1] * (1 + pick % 3) if kind == "repeat_line" else []
        return b"".join(lines[:i] + repeat + lines[i + 1 :])
    if kind == "number":
        numbers = list(_NUMBER.finditer(data))
        if not numbers:
            return data
        m = numbers[min(int(where * len(numbers)), len(numbers) - 1)]
        return data[: m.start()] + HOSTILE_NUMBERS[pick % len(HOSTILE_NUMBERS)].encode() + data[m.end() :]
    if kind == "json_value":
        try:
            doc = json.loads(data)
        except ValueError:
            return mutate(data, "number", where, pick)
        nodes = _json_nodes(doc)
        if not nodes:
            return data
        container, key = nodes[min(int(where * len(nodes)), len(nodes) - 1)]
        container[key] = HOSTILE_VALUES[pick % len(HOSTILE_VALUES)]
        return json.dumps(doc, indent=1).encode()
    return data


def _loader(reader: str) -> tuple[Callable[[Path], Any], tuple[type[Exception], ...]]:
    if reader == "topology":
        from commlens.topology.loader import load_topology
        from commlens.topology.spec import TopologyError

        return load_topology, (TopologyError,)
    if reader == "workload":
        from commlens.workload.loader import load_workload
        from commlens.workload.spec import WorkloadError

        return load_workload, (WorkloadError,)
    from commlens.project.hardware import AcceleratorsFileError, load_accelerators_file

    return load_accelerators_file, (AcceleratorsFileError,)


class Harness:
    """Runs one input through its reader (and the store, for what ingests), in a scratch directory."""

    def __init__(self, folder: Path) -> None:
        from commlens.store import Store

        self.folder = folder
        self.store = Store.open(str(folder / "fuzz.db"))
        self._names = itertools.count()

    def check(self, case: Case, data: bytes) -> str:
        """``stored``, ``loaded`` or ``refused``; raises on anything else."""
        if case.reader == "flightrec":
            return self._hang(case, data)
        if case.reader == "job":
            return self._job(case, data)
        path = self.folder / f"{next(self._names)}-{case.name}"
        path.write_bytes(data)
        try:
            if case.reader == "kineto":
                return self._trace(path)
            if case.reader.startswith("replay-"):
                return self._replay(case, path)
            return self._load_spec(case, path) if case.reader in SPEC_READERS else self._ingest(case, path)
        finally:
            path.unlink()

    def _hang(self, case: Case, data: bytes) -> str:
        """The mutated dump among its fixture's other ranks, through diagnose hang's whole analysis."""
        import shutil

        from commlens.diagnose.hang import DumpError, culprit_issued, diagnose_hang

        assert case.siblings is not None
        folder = self.folder / f"dumps-{next(self._names)}"
        folder.mkdir()
        try:
            for sibling in case.siblings.iterdir():
                if sibling.name != case.name and sibling.suffix != ".md":
                    shutil.copyfile(sibling, folder / sibling.name)
            (folder / case.name).write_bytes(data)
            try:
                report = diagnose_hang(folder)
            except DumpError as e:
                _check_message(e)
                return "refused"
            json.dumps(report.to_json())  # what --json prints
            for d in report.divergences:  # what the text report prints
                for c in d.culprits:
                    culprit_issued(c)
            return "loaded"
        finally:
            shutil.rmtree(folder)

    def _job(self, case: Case, data: bytes) -> str:
        """The mutated file among its source's other ranks' files, through `diagnose job` and the late-rank reading."""
        import shutil

        from commlens.diagnose.job import JobError, diagnose_job, late_ranks_from_paths

        assert case.siblings is not None
        folder = self.folder / f"job-{next(self._names)}"
        shutil.copytree(case.siblings, folder)
        name = case.name.split("-", 1)[1]
        (folder / name).write_bytes(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", IngestWarning)
                try:
                    json.dumps(diagnose_job([folder]).to_json())
                    for report in late_ranks_from_paths([folder]):
                        json.dumps(report.to_json())
                except JobError as e:
                    _check_message(e)
                    return "refused"
            return "loaded"
        finally:
            shutil.rmtree(folder)

    def _trace(self, path: Path) -> str:
        from commlens.ingest.kineto import KinetoTraceError, read_kineto_trace

        try:
            trace = read_kineto_trace(path)
        except KinetoTraceError as e:
            _check_message(e)
            return "refused"
        for c in trace.collectives:
            _ = (c.identity, c.duration_s)
        return "loaded"

    def _replay(self, case: Case, path: Path) -> str:
        """A plan through ``replay run``'s checks; monitor records through ``replay plan``, then written and
        read back as a plan."""
        from commlens.replay import ReplayPlanError, extract_plan, load_plan, write_plan
        from commlens.replay.plan import check_runnable, size_bytes

        try:
            if case.reader == "replay-plan":
                plan = load_plan(path)
                check_runnable(plan)
                for r in plan.ranks:
                    for c in r.calls:
                        size_bytes(c, len(plan.group(c.group).ranks))
            else:
                plan = extract_plan([path], source="monitor")
                write_plan(plan, path.with_suffix(".plan"))
                assert load_plan(path.with_suffix(".plan")) == plan
                path.with_suffix(".plan").unlink()
        except ReplayPlanError as e:
            _check_message(e)
            return "refused"
        return "loaded"

    def _ingest(self, case: Case, path: Path) -> str:
        from commlens.store import StoreError

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IngestWarning)
            try:
                _, runs = load_source_runs(read_source(path), fmt=case.reader)
            except IngestError as e:
                _check_message(e)
                return "refused"
        for run in runs:
            json.dumps(run_to_dict(run))  # what --json prints
        # Each run under an id of its own, so that every mutated run reaches the store's insert (a run
        # mutated elsewhere than in its id would otherwise be skipped as already stored).
        new = [replace(run, run_id=f"fuzz{next(self._names)}") for run in runs]
        try:
            self.store.save_runs(new)
        except StoreError as e:
            _check_message(e)
            return "refused"
        for run in new:
            assert self.store.get_run(run.run_id).measurements == run.measurements
        return "stored"

    def _load_spec(self, case: Case, path: Path) -> str:
        load, errors = _loader(case.reader)
        try:
            load(path)
        except errors as e:
            _check_message(e)
            return "refused"
        return "loaded"

    def close(self) -> None:
        self.store.close()


def _check_message(e: Exception) -> None:
    assert len(str(e)) <= MAX_MESSAGE_CHARS, f"an error message of {len(str(e))} characters: {str(e)[:300]}..."


@pytest.fixture(scope="module")
def harness() -> Any:
    with tempfile.TemporaryDirectory(prefix="commlens-fuzz-") as folder:
        h = Harness(Path(folder))
        yield h
        h.close()


_mutation = st.tuples(st.sampled_from(KINDS), st.floats(0, 1), st.integers(0, 10**6))
_ingest_cases = [c for c in CASES if c.reader not in SPEC_READERS + TRACE_READERS]
_spec_cases = [c for c in CASES if c.reader in SPEC_READERS]
_trace_cases = [c for c in CASES if c.reader in TRACE_READERS]


def _fuzz_settings(max_examples: int) -> settings:
    """The same inputs every run (derandomized, no example database), however slow a case."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def _run(harness: Harness, case: Case, mutations: list[tuple[str, float, int]]) -> str:
    data = case.data
    for kind, where, pick in mutations:
        data = mutate(data, kind, where, pick)
    return harness.check(case, data)


@_fuzz_settings(500)
@given(case=st.sampled_from(_ingest_cases), mutations=st.lists(_mutation, min_size=1, max_size=4))
def test_mutated_ingest_files_are_stored_or_refused_cleanly(
    harness: Harness, case: Case, mutations: list[tuple[str, float, int]]
) -> None:
    assert _run(harness, case, mutations) in ("stored", "refused")


@_fuzz_settings(200)
@given(case=st.sampled_from(_spec_cases), mutations=st.lists(_mutation, min_size=1, max_size=3))
def test_mutated_yaml_specs_load_or_are_refused_cleanly(
    harness: Harness, case: Case, mutations: list[tuple[str, float, int]]
) -> None:
    assert _run(harness, case, mutations) in ("loaded", "refused")


@_fuzz_settings(200)
@given(case=st.sampled_from(_trace_cases), mutations=st.lists(_mutation, min_size=1, max_size=4))
def test_mutated_dumps_and_traces_are_read_or_refused_cleanly(
    harness: Harness, case: Case, mutations: list[tuple[str, float, int]]
) -> None:
    assert _run(harness, case, mutations) in ("loaded", "refused")


def test_the_fixtures_themselves_go_in(harness: Harness) -> None:
    """The mutations start from files that ingest (or load): a fuzz of files already refused proves little."""
    outcomes = {c.name: harness.check(c, c.data) for c in CASES}
    refused_on_purpose = {
        "duplicate-rank.log",
        "nan-time.log",
        "no-op-named.log",
        "truncated-row.log",
        "uint32-type.log",
    }  # the fixtures of malformed logs
    assert {name for name, out in outcomes.items() if out == "refused"} == refused_on_purpose
