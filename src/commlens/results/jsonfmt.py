"""The versioned JSON file format of a run (``"format": "commlens.run/5"``; versions 1-4 are read and upgraded).

Derived figures (time statistics, algBW, busBW) are written for the reader's
convenience and recomputed from ``samples_s`` on load, so a file can never
disagree with itself once loaded. See ``docs/result-format.md``.

Version 4 adds a measurement's ``group`` (the process group a row measured inside a
job ran on). A run is written in the oldest version that holds it: version 3 unless a
row has a group, so a benchmark's file is what it always was, and a commlens that
reads only version 3 refuses a grouped run ("newer than this commlens reads") instead
of dropping its groups and pairing the rows of different groups as one series.

Version 5 types the run's ``config`` by kind (``commlens.results.runconfig``: bench settings, ingested
settings, monitor job, replay) and writes it with its ``"kind"``; every run is written in version 5. An older
file's config gets its kind from the run's ``source`` (the upgrader from version 4).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import IO, Any, cast

from commlens.errors import CommlensError
from commlens.files import atomic_text
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.records import Measurement, RecordError, Run, RunStatus, SystemInfo
from commlens.results.runconfig import ConfigFormatError, config_from_wire, kind_of_source
from commlens.results.stats import TimeStats
from commlens.results.units import finite_float

__all__ = [
    "FORMAT",
    "FORMAT_WITH_GROUPS",
    "FormatError",
    "run_to_dict",
    "run_from_dict",
    "dump_run",
    "load_run",
    "write_json",
]

FORMAT = "commlens.run/5"  # what this commlens writes, and the newest version it reads
FORMAT_WITH_GROUPS = FORMAT  # every version from 4 holds process groups
_FORMAT_PREFIX = "commlens.run/"


# No benchmark runs more rounds than this; a longer list is a corrupted or hostile file.
MAX_ROUNDS = 10_000


class FormatError(CommlensError, ValueError):
    """A file that is not a valid commlens run."""


def measurement_to_dict(m: Measurement) -> JsonObject:
    out: JsonObject = {
        "op": m.op,
        "algo": m.algo,
        "dtype": m.dtype,
        "redop": m.redop,
        "root": m.root,
        "size_bytes": m.size_bytes,
        "count": m.count,
        "in_place": m.in_place,
        "world_size": m.world_size,
    }
    if m.group is not None:  # absent, not null, for a benchmark row: version-3 files stay as they were
        out["group"] = m.group
    out.update(nwrong=m.nwrong, iterations=len(m.samples_s) if m.samples_s else m.stats.n)
    out.update(m.stats.as_dict())
    out.update(
        algbw_bytes_per_s=m.algbw_bytes_per_s,
        busbw_bytes_per_s=m.busbw_bytes_per_s,
        algbw_p50_bytes_per_s=m.algbw_p50_bytes_per_s,
        busbw_p50_bytes_per_s=m.busbw_p50_bytes_per_s,
        samples_s=list(m.samples_s),
    )
    if m.rank_samples_s is not None:
        out["rank_samples_s"] = [list(r) for r in m.rank_samples_s]
    if m.rounds is not None:
        out["rounds"] = list(m.rounds)
    if m.reported is not None:
        out["reported"] = {**m.reported.as_dict(), "n": m.reported.n}
    return out


def run_to_dict(run: Run) -> JsonObject:
    system = asdict(run.system)
    system["fingerprint"] = run.system.fingerprint()
    return {
        "format": FORMAT,
        "run_id": run.run_id,
        "status": run.status,
        "source": run.source,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "tag": run.tag,
        "revision": run.revision,
        "command_line": run.command_line,
        "config": run.config.as_dict(),
        "notes": list(run.notes),
        "system": system,
        "avg_busbw_bytes_per_s": run.avg_busbw_bytes_per_s(),
        "measurements": [measurement_to_dict(m) for m in run.measurements],
    }


_REQUIRED = object()
_MAX_SHOWN_CHARS = 80


def _shown(value: Any) -> str:
    """A value as an error message quotes it: cut short, since a file may hold anything."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN_CHARS else text[:_MAX_SHOWN_CHARS] + "...(cut)"


def _get(d: Mapping[str, JsonValue], key: str, default: object) -> object:
    if default is _REQUIRED:
        return d[key]  # KeyError: run_from_dict says which field is missing
    return d.get(key, default)


def _int(d: Mapping[str, JsonValue], key: str, default: object = _REQUIRED) -> int:
    """An integer field; an integral float (``64.0``) is one, a bool, string or infinity is not."""
    value = _get(d, key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"{key}: expected an integer, got {_shown(value)}")
    return value


def _str(d: Mapping[str, JsonValue], key: str, default: object = _REQUIRED) -> str:
    value = _get(d, key, default)
    if not isinstance(value, str):
        raise FormatError(f"{key}: expected a string, got {_shown(value)}")
    return value


def _str_or_none(d: Mapping[str, JsonValue], key: str) -> str | None:
    """A string field that may be null or absent (None)."""
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise FormatError(f"{key}: expected a string or null, got {_shown(value)}")
    return value


def _bool(d: Mapping[str, JsonValue], key: str) -> bool:
    value = d[key]
    if not isinstance(value, bool):
        raise FormatError(f"{key}: expected true or false, got {_shown(value)}")
    return value


def _times(key: str, values: JsonValue) -> tuple[float, ...]:
    """A list of finite numbers of seconds."""
    if not isinstance(values, list):
        raise FormatError(f"{key}: expected a list of times, got {_shown(values)}")
    times = tuple(finite_float(v) for v in values)
    for v, t in zip(values, times):
        if t is None:
            raise FormatError(f"{key}: expected finite numbers of seconds, got {_shown(v)}")
    return tuple(t for t in times if t is not None)


def _reported(rep: JsonValue) -> TimeStats:
    if not isinstance(rep, dict):
        raise FormatError(f"reported: expected an object, got {_shown(rep)}")
    fields = {"mean_s", "p50_s", "p95_s", "p99_s", "min_s", "max_s", "stdev_s", "cv", "n"}
    unknown = set(rep) - fields
    if unknown:
        raise FormatError(f"reported: unknown fields {_shown(sorted(unknown))}")
    n = _int(rep, "n", 0)
    stats: dict[str, float | None] = {}
    for name in sorted(fields - {"n"}):
        value = rep.get(name)
        number = None if value is None else finite_float(value)
        if value is not None and number is None:
            raise FormatError(f"reported.{name}: expected a finite number or null, got {_shown(value)}")
        stats[name] = number
    mean_s = stats["mean_s"]
    if mean_s is None:
        raise FormatError("reported.mean_s: missing")
    return TimeStats(
        mean_s=mean_s,
        p50_s=stats["p50_s"],
        p95_s=stats["p95_s"],
        p99_s=stats["p99_s"],
        min_s=stats["min_s"],
        max_s=stats["max_s"],
        stdev_s=stats["stdev_s"],
        cv=stats["cv"],
        n=n,
    )


def measurement_from_dict(d: JsonValue) -> Measurement:
    """One measurement, every field checked for its type (a file may hold anything anywhere)."""
    if not isinstance(d, dict):
        raise FormatError(f"a measurement must be an object, got {_shown(d)}")
    rank = d.get("rank_samples_s")
    if rank is not None and not isinstance(rank, list):
        raise FormatError(f"rank_samples_s: expected a list of lists of times, got {_shown(rank)}")
    rep = d.get("reported")
    nwrong = d.get("nwrong")
    rounds = d.get("rounds")
    if rounds is not None and (
        not isinstance(rounds, list)
        or len(rounds) > MAX_ROUNDS
        or not all(isinstance(k, int) and not isinstance(k, bool) for k in rounds)
    ):
        raise FormatError(f"rounds: expected a list of at most {MAX_ROUNDS} sample counts, got {_shown(rounds)}")
    return Measurement(
        op=_str(d, "op"),
        algo=_str(d, "algo", "builtin"),
        dtype=_str(d, "dtype"),
        redop=_str_or_none(d, "redop"),
        root=None if d.get("root") is None else _int(d, "root"),
        size_bytes=_int(d, "size_bytes"),
        count=_int(d, "count"),
        in_place=_bool(d, "in_place"),
        world_size=_int(d, "world_size"),
        samples_s=_times("samples_s", d["samples_s"]),
        nwrong=None if nwrong is None else _int(d, "nwrong"),
        rank_samples_s=None if rank is None else tuple(_times("rank_samples_s", r) for r in rank),
        reported=None if rep is None else _reported(rep),
        rounds=None if rounds is None else tuple(k for k in rounds if isinstance(k, int)),  # all are, checked
        group=_str_or_none(d, "group"),  # its length is checked by Measurement
    )


def system_from_dict(sysd: Any) -> SystemInfo:
    """A run's system from its JSON object, every field checked for its type (a file or row may hold anything)."""
    if not isinstance(sysd, dict):
        raise FormatError(f"system: expected an object, got {_shown(sysd)}")
    sysd = dict(sysd)
    sysd.pop("fingerprint", None)
    known = {f.name: f for f in fields(SystemInfo)}
    unknown = set(sysd) - set(known)
    if unknown:
        raise FormatError(f"system: unknown fields {_shown(sorted(unknown))}")
    kinds = {"hosts": list, "device_names": list, "ranks_per_host": dict, "env": dict, "extra": dict}
    for name, value in sysd.items():
        kind = kinds.get(name, int if name in ("world_size", "cpu_cores") else str)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise FormatError(f"system.{name}: expected {_KIND_NAMES[kind]}, got {_shown(value)}")
    for name in ("hosts", "device_names"):
        if not all(isinstance(v, str) for v in sysd.get(name, ())):
            raise FormatError(f"system.{name}: expected a list of strings")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in sysd.get("ranks_per_host", {}).values()):
        raise FormatError("system.ranks_per_host: expected integer counts")
    return SystemInfo(**sysd)


_KIND_NAMES = {int: "an integer", str: "a string", list: "a list", dict: "an object"}


def _upgrade_1_to_2(d: JsonObject) -> JsonObject:
    """Version 2 adds each measurement's optional ``rounds``; a version-1 row was timed in one round."""
    return d


def _upgrade_2_to_3(d: JsonObject) -> JsonObject:
    """Version 3 writes null for the redop of an op that does not reduce and the root of an op without one,
    where versions 1 and 2 wrote nccl-tests' ``"none"`` and ``-1``."""
    measurements = d.get("measurements")
    if not isinstance(measurements, list):
        return d  # run_from_dict says what is wrong with it
    upgraded = []
    for m in measurements:
        if isinstance(m, dict):
            m = dict(m)
            if m.get("redop") == "none":
                m["redop"] = None
            if m.get("root") == -1:  # also -1.0, which versions 1 and 2 read as -1
                m["root"] = None
        upgraded.append(m)
    return {**d, "measurements": upgraded}


def _upgrade_3_to_4(d: JsonObject) -> JsonObject:
    """Version 4 adds each measurement's optional ``group``; a version-3 row was measured on no process group."""
    return d


def _upgrade_4_to_5(d: JsonObject) -> JsonObject:
    """Version 5 names the config's kind; a version-4 config's is the one its run's source wrote."""
    config, source = d.get("config", {}), d.get("source", "commlens")
    if not isinstance(config, dict) or not isinstance(source, str) or "kind" in config:
        return d  # run_from_dict says what is wrong with it
    return {**d, "config": {"kind": kind_of_source(source), **config}}


# Upgraders from an older format version to the next.
_UPGRADERS: dict[int, Callable[[JsonObject], JsonObject]] = {
    1: _upgrade_1_to_2,
    2: _upgrade_2_to_3,
    3: _upgrade_3_to_4,
    4: _upgrade_4_to_5,
}
_CURRENT_VERSION = int(FORMAT.rsplit("/", 1)[1])


def run_from_dict(d: JsonObject) -> Run:
    """Build a run from its dict form, upgrading older format versions."""
    fmt = d.get("format") if isinstance(d, dict) else None
    if not isinstance(fmt, str) or not fmt.startswith(_FORMAT_PREFIX):
        raise FormatError(f"not a commlens run (format is {_shown(fmt)}, expected {FORMAT!r})")
    suffix = fmt[len(_FORMAT_PREFIX) :]
    version = int(suffix) if suffix.isascii() and suffix.isdigit() and len(suffix) < 6 else 0
    if version < 1:  # versions start at 1
        raise FormatError(f"bad format version in {_shown(fmt)}")
    if version > _CURRENT_VERSION:
        raise FormatError(f"{fmt} is newer than this commlens reads ({FORMAT}); upgrade commlens")
    while version < _CURRENT_VERSION:
        d = _UPGRADERS[version](d)
        version += 1
    try:
        system = system_from_dict(d["system"])
        source = _str(d, "source", "commlens")
        config = config_from_wire(d.get("config", {}), source)
        notes, measurements = d.get("notes", []), d["measurements"]
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise FormatError(f"notes: expected a list of strings, got {_shown(notes)}")
        if not isinstance(measurements, list):
            raise FormatError(f"measurements: expected a list, got {_shown(measurements)}")
        return Run(
            run_id=_str(d, "run_id"),
            status=cast(RunStatus, _str(d, "status", "complete")),  # Run refuses any other
            source=source,
            started_at=_str(d, "started_at"),
            finished_at=_str_or_none(d, "finished_at"),
            tag=_str_or_none(d, "tag"),
            revision=_str_or_none(d, "revision"),
            command_line=_str(d, "command_line", ""),
            config=config,
            notes=tuple(n for n in notes if isinstance(n, str)),  # all are, checked
            system=system,
            measurements=tuple(measurement_from_dict(m) for m in measurements),
        )
    except KeyError as e:
        raise FormatError(f"missing field {e.args[0]!r}") from None
    except (TypeError, ValueError, RecordError, ConfigFormatError) as e:
        raise FormatError(str(e)) from None


def dump_run(run: Run, fp: IO[str]) -> None:
    json.dump(run_to_dict(run), fp, indent=1)
    fp.write("\n")


def write_json(path: str | Path, data: Any) -> None:
    """Write JSON atomically: a reader never sees a half-written file. ``-`` is stdout."""
    with atomic_text(path) as fp:
        json.dump(data, fp, indent=1)
        fp.write("\n")


def load_run(path: str | Path) -> Run:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise FormatError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except (RecursionError, ValueError):  # nested too deep; an integer of more than 4,300 digits
        raise FormatError(f"{path}: not a commlens run (JSON nested too deep, or a number too long)") from None
    try:
        return run_from_dict(data)
    except FormatError as e:
        raise FormatError(f"{path}: {e}") from None
