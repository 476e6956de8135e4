"""nccl-tests ``-J`` JSON, as nccl-tests writes it (``src/util.cu``, file versions 1-3) and as commlens does.

nccl-tests' layout: ``version`` (an int), ``start_time`` (local time, no zone),
``args`` (argv), ``env`` (``K=V`` strings), ``nccl_version`` (a version code),
``config`` {``nthreads``, ``ngpus``, sizes, ``iterations``, ..., ``devices[]``}:
one device entry per *process* (its first GPU), so the world size is
``len(devices) x nthreads x ngpus``; ``results[]`` {``size``, ``count``, ``type``,
``redop``, ``root`` (a string), ``out_of_place``/``in_place`` {``time`` or
``cpu_time`` (µs), ``alg_bw``, ``bus_bw`` (GB/s), ``nwrong`` (a float, null
unchecked)}, ``out_of_place_per_iter``/``in_place_per_iter`` with ``-I`` (v2+)
{``times_us``, ``skipped_iterations`` (v3), ``per_process_max_times_us``, ...},
``actual_iterations``, ``experiment_name`` (empty)}; ``out_of_bounds``,
``average_bus_bandwidth`` (v1 misspelt it ``average_bus_bandwidith``/``bandwidith``),
``errors``, ``end_time``. The op is the binary in ``args[0]``.

commlens' own writer (``commlens.results.nccltests_json``) differs: ``version``
is ``"commlens X"``, ``args`` a string, ``env`` a dict, ``devices[]`` top level and
one per rank, ``experiment_name`` the op, and each placement carries its
per-iteration ``times`` (µs) and statistics.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from typing import Any

from commlens.ingest.base import (
    MAX_COUNT,
    MAX_RANKS,
    MAX_SIZE_BYTES,
    IngestError,
    InputFormat,
    ParsedRun,
    PatternSniff,
    Source,
    check_limit,
    json_line,
    load_json,
    quote,
)
from commlens.ingest.nccltests_facts import (
    RankInfo,
    commlens_dtype,
    filter_env,
    nccl_version_from_code,
    op_from_program,
    system_from_ranks,
    unknown_dtype_message,
)
from commlens.ingest.table_checks import BusbwCheck, check_size, resolve_op, row_measurement, zero_time_note
from commlens.ops import OpSpec, UnknownOpError
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.nccltests_json import from_nccl_tests
from commlens.results.records import DTYPE_SIZES, Measurement, RunStatus, SystemInfo
from commlens.results.stats import TimeStats
from commlens.results.units import finite_float

__all__ = ["FORMAT", "parse_nccl_tests_json", "load_json"]

_NCCL_TESTS_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# A key of nccl-tests -J output anywhere in a JSON document (loose: commlens runs are sniffed first).
_SNIFF_RE = re.compile(r'"(?:results|nccl_version)"\s*:')


class _Doc:
    """The document and helpers that turn a bad value into an error at its line."""

    def __init__(self, source: Source, data: Any) -> None:
        self.source = source
        self.data = data

    def error(self, path: tuple[str | int, ...], message: str) -> IngestError:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        return self.source.error(json_line(self.source.text, path), f"{where}: {message}" if where else message)

    def number(self, path: tuple[str | int, ...], value: Any) -> float:
        """A finite number >= 0, as a float."""
        number = finite_float(value)
        if number is None or number < 0:
            raise self.error(path, f"expected a finite number >= 0, got {quote(value, 60)}")
        return number

    def optional_number(self, path: tuple[str | int, ...], value: Any) -> float | None:
        """As :meth:`number`, with None (JSON null or a missing key) allowed."""
        return None if value is None else self.number(path, value)

    def integer(
        self, path: tuple[str | int, ...], value: Any, limit: int, *, default: int | None = None, low: int = 0
    ) -> int:
        """An integer in ``[low, limit)``; ``default`` stands for a missing (null, 0, empty) value."""
        if default is not None and not value and not isinstance(value, (bool, float)):
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.error(path, f"expected an integer >= {low}, got {quote(value, 60)}")
        problem = check_limit(str(path[-1]) if path else "value", value, limit)
        if problem:
            raise self.error(path, problem)
        return value


def _utc(value: Any) -> str | None:
    """An ISO UTC time from nccl-tests' local ``YYYY-MM-DD HH:MM:SS`` (zone unknown: taken as UTC) or ISO."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        try:
            when = dt.datetime.strptime(value, _NCCL_TESTS_TIME_FORMAT)
        except ValueError:
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def _devices(doc: _Doc) -> tuple[list[JsonObject], tuple[str | int, ...]]:
    data = doc.data
    raw_config = data.get("config")
    config = raw_config if isinstance(raw_config, dict) else {}
    for path, devices in ((("config", "devices"), config.get("devices")), (("devices",), data.get("devices"))):
        if devices:
            if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
                raise doc.error(path, "expected a list of device objects")
            return devices, path
    raise doc.error(("config",), "no devices[] listed: the world size is unknown")


def _ranks(doc: _Doc, devices: list[JsonObject], path: tuple, per_process: int) -> list[RankInfo]:
    """One entry per rank; nccl-tests lists each process's first GPU, so its others are assumed alike."""
    ranks: list[RankInfo] = []
    seen: set[int] = set()
    for i, d in enumerate(devices):
        rank = d.get("rank", i)
        if isinstance(rank, bool) or not isinstance(rank, int) or rank in seen:
            raise doc.error((*path, i, "rank"), f"rank {quote(rank, 60)} repeated or not an integer")
        problem = check_limit("rank", rank + per_process - 1, MAX_RANKS) if rank >= 0 else f"rank {rank} < 0"
        if problem:
            raise doc.error((*path, i, "rank"), problem)
        seen.add(rank)
        raw_device = d.get("device")
        device = raw_device if isinstance(raw_device, int) and -1 <= raw_device < MAX_RANKS else -1
        for k in range(per_process):
            ranks.append(
                RankInfo(
                    rank=rank + k,
                    host=str(d.get("hostname") or ""),
                    pid=pid if isinstance(pid := d.get("pid"), int) and not isinstance(pid, bool) else None,
                    device=device + k if device >= 0 else device,
                    bus_id=str(d.get("device_hex") or ""),
                    device_name=str(d.get("device_info") or ""),
                )
            )
    return ranks


def _op(doc: _Doc, entry: JsonObject, i: int, program_op: str | None, default_op: str | None) -> OpSpec:
    named = entry.get("experiment_name")
    if named is not None and not isinstance(named, str):
        raise doc.error(("results", i, "experiment_name"), f"expected a string, got {quote(named, 60)}")
    name = named or program_op or default_op
    path: tuple[str | int, ...] = ("results", i, "experiment_name") if named else ("args",)
    if not name:
        raise doc.error(
            ("results", i),
            "the file does not say which collective it measured (no *_perf binary in "
            "args, no experiment_name); pass the op (commlens ingest --op all_reduce)",
        )
    try:
        spec = resolve_op(op_from_program(name) or name)
    except UnknownOpError as e:
        raise doc.error(path, str(e)) from None
    if default_op is not None and name != default_op and resolve_op(default_op).name != spec.name:
        raise doc.error(path, f"the file names {name!r} but the op given is {default_op!r}")
    return spec


def _placement(
    doc: _Doc,
    entry: JsonObject,
    i: int,
    in_place: bool,
    spec: OpSpec,
    dtype: str,
    size_count: tuple[int, int],
    world: int,
    iters: int,
    check: BusbwCheck,
    zero_times: list[tuple[tuple[str | int, ...], str]],
) -> Measurement | None:
    """One half of a result, or None where the file has none or printed its time as 0 (then in ``zero_times``)."""
    key = "in_place" if in_place else "out_of_place"
    half = entry.get(key)
    if half is None:
        return None
    path: tuple[str | int, ...] = ("results", i, key)
    if not isinstance(half, dict):
        raise doc.error(path, "expected an object or null")
    time_key = "time" if "time" in half else "cpu_time"
    time_s = doc.number((*path, time_key), half.get(time_key)) * 1e-6
    if time_s == 0.0:  # no bandwidth can come of it: left out, warned, noted, the run incomplete
        zero_times.append(((*path, time_key), f"results[{i}] {'in' if in_place else 'out-of'}-place"))
        return None
    nwrong_f = doc.optional_number((*path, "nwrong"), half.get("nwrong"))
    samples: list[float] = []
    rank_samples: tuple[tuple[float, ...], ...] | None = None
    per_iter = entry.get(f"{key}_per_iter")
    if isinstance(per_iter, dict):  # nccl-tests -I (file version 2+)
        iter_path = ("results", i, f"{key}_per_iter")
        skip = doc.integer((*iter_path, "skipped_iterations"), per_iter.get("skipped_iterations"), MAX_COUNT, default=0)
        times = per_iter.get("times_us") or []
        if not isinstance(times, list):
            raise doc.error((*iter_path, "times_us"), "expected a list of times")
        samples = [doc.number((*iter_path, "times_us"), t) * 1e-6 for t in times[skip:]]
        rows = per_iter.get("per_process_max_times_us")
        if isinstance(rows, list) and len(rows) == world:
            if not all(isinstance(r, list) for r in rows):
                raise doc.error((*iter_path, "per_process_max_times_us"), "expected a list of lists of times")
            rank_samples = tuple(
                tuple(doc.number((*iter_path, "per_process_max_times_us"), t) * 1e-6 for t in r[skip:]) for r in rows
            )
    elif isinstance(half.get("times"), list):  # commlens' writer
        samples = [doc.number((*path, "times"), t) * 1e-6 for t in half["times"]]
    size, count = size_count
    if spec.name != "barrier":
        bus_bw = doc.optional_number((*path, "bus_bw"), half.get("bus_bw"))
        if bus_bw is not None:
            check.add(("results", i), bus_bw, size, time_s, spec.busbw_factor(world))
    reported = None
    if not samples:
        reported = TimeStats.of_mean(time_s, iters)
    root_text = entry.get("root", -1)
    try:
        root = int(str(root_text).strip()) if not isinstance(root_text, (bool, float)) else None
    except ValueError:
        root = None
    if root is None or not -1 <= root < MAX_RANKS:
        raise doc.error(("results", i, "root"), f"bad root {quote(root_text, 60)}") from None
    if nwrong_f is not None and nwrong_f >= MAX_COUNT:
        raise doc.error((*path, "nwrong"), check_limit("nwrong", int(nwrong_f), MAX_COUNT) or "")
    redop, root = from_nccl_tests(str(entry.get("redop") or "none"), root)
    return row_measurement(
        spec,
        world,
        lambda message: doc.error(path, message),
        dtype=dtype,
        size=size,
        count=count,
        in_place=in_place,
        redop=redop,
        root=root,
        reported=reported,
        samples=tuple(samples),
        nwrong=None if nwrong_f is None else int(nwrong_f),
        rank_samples=rank_samples,
    )


def parse_nccl_tests_json(source: Source, *, op: str | None = None) -> ParsedRun:
    """One run from an nccl-tests ``-J`` file (or commlens' file in that layout)."""
    data = load_json(source)
    doc = _Doc(source, data)
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise doc.error((), "not an nccl-tests JSON file: no results[] list")
    written_by_commlens = isinstance(data.get("version"), str) and data["version"].startswith("commlens")
    raw_config = data.get("config")
    config = raw_config if isinstance(raw_config, dict) else {}
    args = data.get("args")
    argv = args if isinstance(args, list) else str(args or "").split()
    program_op = op_from_program(str(argv[0])) if argv else None
    per_process = doc.integer(
        ("config", "nthreads"), config.get("nthreads"), MAX_RANKS, default=1, low=1
    ) * doc.integer(("config", "ngpus"), config.get("ngpus"), MAX_RANKS, default=1, low=1)
    devices, dev_path = _devices(doc)
    problem = check_limit("world size", len(devices) * per_process, MAX_RANKS + 1)
    if problem:
        raise doc.error(("config",), f"{problem} ({len(devices)} devices x {per_process} GPUs each)")
    ranks = _ranks(doc, devices, dev_path, per_process)
    world = len(ranks)
    iters = doc.integer(("config", "iterations"), config.get("iterations"), MAX_COUNT, default=0)
    notes: list[str] = []
    if per_process > 1:
        notes.append(
            f"nccl-tests -J lists one device per process: the other {per_process - 1} GPUs of each process "
            f"are taken to be on the same host, with the same device name"
        )
    measurements, checks, ops, zero_times = _results(doc, data["results"], program_op, op, world, iters)
    if not measurements:
        if zero_times:
            raise doc.error(zero_times[0][0], "every result has time 0: no measurement to store")
        raise doc.error(("results",), "no results: the test produced no rows")
    if zero_times:
        notes.append(
            zero_time_note(
                lambda path, msg: source.warn(json_line(source.text, path), msg),
                zero_times[0][0],
                "results",
                [label for _, label in zero_times],
            )
        )
    for name, check in checks.items():
        note = check.report(name, source.warn, lambda path: json_line(source.text, path))
        if note:
            notes.append(note)
    errors = data.get("errors")
    if isinstance(errors, list):
        notes.extend(f"nccl-tests reported error: {e}" for e in errors if e)
    avg_note = _average_note(source, data)
    if avg_note:
        notes.append(avg_note)
    status, failed_note = _status(data, measurements, bool(zero_times))
    if failed_note:
        notes.append(failed_note)
    system = _system(data, config, ranks, world, devices)
    run_config = {"format": "nccl-tests-json", "ops": ops, **{k: v for k, v in config.items() if k != "devices"}}
    started = _utc(data.get("start_time"))
    return ParsedRun(
        source="nccl-tests",
        system=system,
        measurements=measurements,
        config=run_config,
        notes=notes,
        command_line=" ".join(str(a) for a in argv),
        started_at=started,
        started_at_note=None
        if written_by_commlens
        else ("start_time and end_time are nccl-tests' local times without a zone: taken as UTC"),
        finished_at=_utc(data.get("end_time")),
        status=status,
    )


def _objects(value: JsonValue) -> list[JsonObject]:
    """The objects of a JSON list (its other items and a value not a list: none)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _results(
    doc: _Doc, results: list[JsonValue], program_op: str | None, op: str | None, world: int, iters: int
) -> tuple[list[Measurement], dict[str, BusbwCheck], list[str], list[tuple[tuple[str | int, ...], str]]]:
    """The measurements of ``results[]``, the busBW check per op, the ops in order, and the halves with time 0."""
    measurements: list[Measurement] = []
    checks: dict[str, BusbwCheck] = {}
    ops: list[str] = []
    zero_times: list[tuple[tuple[str | int, ...], str]] = []  # (JSON path, label) of each half with time 0
    for i, entry in enumerate(results):
        if not isinstance(entry, dict):
            raise doc.error(("results", i), "expected an object")
        size = doc.integer(("results", i, "size"), entry.get("size"), MAX_SIZE_BYTES)
        count = doc.integer(("results", i, "count"), entry.get("count"), MAX_COUNT)
        spec = _op(doc, entry, i, program_op, op)
        type_name = str(entry.get("type"))
        dtype = commlens_dtype(type_name)
        if dtype is None:
            raise doc.error(("results", i, "type"), unknown_dtype_message(type_name))
        problem = check_size(spec, size, count, DTYPE_SIZES[dtype], world)
        if problem:
            raise doc.error(("results", i), problem)
        check = checks.setdefault(spec.name, BusbwCheck())
        if spec.name not in ops:
            ops.append(spec.name)
        actual = entry.get("actual_iterations")
        entry_iters = (
            doc.integer(("results", i, "actual_iterations"), actual, MAX_COUNT)
            if isinstance(actual, int) and not isinstance(actual, bool)
            else iters
        )
        for in_place in (False, True):
            m = _placement(doc, entry, i, in_place, spec, dtype, (size, count), world, entry_iters, check, zero_times)
            if m is not None:
                measurements.append(m)
    return measurements, checks, ops, zero_times


def _average_note(source: Source, data: JsonObject) -> str | None:
    """A warning when the file's average bus bandwidth is not the mean of its results, else None."""
    avg = data.get("average_bus_bandwidth") or data.get("average_bus_bandwidith")
    if isinstance(avg, dict):
        printed = avg.get("bandwidth", avg.get("bandwidith"))
        halves = [r.get(k) for r in _objects(data.get("results")) for k in ("out_of_place", "in_place")]
        printed_rows = [h.get("bus_bw") for h in halves if isinstance(h, dict)]
        rows = [float(b) for b in printed_rows if isinstance(b, (int, float))]
        if (
            isinstance(printed, (int, float))
            and rows
            and abs(sum(rows) / len(rows) - printed) > 1e-3 * abs(printed) + 1e-3
        ):
            return source.warn(
                json_line(source.text, ("average_bus_bandwidth",)),
                f"average bus bandwidth {printed:g} GB/s is not the mean of the {len(rows)} results "
                f"({sum(rows) / len(rows):.6g} GB/s): results may be missing",
            )
    return None


def _status(data: JsonObject, measurements: list[Measurement], zero_time: bool) -> tuple[RunStatus, str | None]:
    """The run's status, and a note when its results check failed."""
    status: RunStatus = "incomplete" if zero_time else "complete"
    oob = data.get("out_of_bounds")
    wrong = [m for m in measurements if m.nwrong]
    oob_count = oob.get("count") if isinstance(oob, dict) else None
    oob_failed = isinstance(oob, dict) and (
        (isinstance(oob_count, int) and oob_count > 0) or str(oob.get("okay")).lower() == "false"
    )
    if oob_failed or wrong:
        status = "check_failed"
        shown = ", ".join(
            f"{m.op} {m.size_bytes} B {'in' if m.in_place else 'out-of'}-place ({m.nwrong} wrong)" for m in wrong[:4]
        )
        return status, (
            f"results check failed: out_of_bounds count {oob_count}"
            f"{'; rows with wrong results: ' + shown if wrong else ''}{' ...' if len(wrong) > 4 else ''}; "
            f"the run is stored with status check_failed"
        )
    return status, None


def _system(
    data: JsonObject, config: JsonObject, ranks: list[RankInfo], world: int, devices: list[JsonObject]
) -> SystemInfo:
    """The run's system: its ranks, backend and version, the environment the file records."""
    env_field = data.get("env")
    if isinstance(env_field, dict):
        env = filter_env((str(k), str(v)) for k, v in env_field.items())
    elif isinstance(env_field, list):
        env = filter_env((k, v) for k, sep, v in (str(e).partition("=") for e in env_field) if sep)
    else:
        env = {}
    nccl_version = data.get("nccl_version")
    backend_version = (
        nccl_version_from_code(nccl_version)
        if isinstance(nccl_version, int) and nccl_version > 0
        else str(nccl_version or "")
    )
    backend = str(config.get("backend") or "nccl")
    extra: JsonObject = {"json_version": data.get("version")}
    system = system_from_ranks(
        ranks, world_size=world, backend=backend, backend_version=backend_version, extra=extra, env=env
    )
    if all(d.get("device") == -1 for d in devices):  # commlens' writer, for a run on CPUs
        kinds = {str(d.get("device_info") or "cpu") for d in devices}
        system = replace(system, device=kinds.pop() if len(kinds) == 1 else "cpu", device_names=())
    return system


FORMAT = InputFormat(
    name="nccl-tests-json",
    description="nccl-tests -J files",
    document="json",
    sniff=PatternSniff(_SNIFF_RE),
    marker='nccl-tests -J output ("results")',
    parse=parse_nccl_tests_json,
)
