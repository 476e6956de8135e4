"""The versioned JSON file format of a run (``"format": "commlens.run/1"``).

Derived figures (time statistics, algBW, busBW) are written for the reader's
convenience and recomputed from ``samples_s`` on load, so a file can never
disagree with itself once loaded. See ``docs/result-format.md``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any, Callable

from commlens.results.records import Measurement, RecordError, Run, SystemInfo
from commlens.results.stats import TimeStats

__all__ = ["FORMAT", "FormatError", "run_to_dict", "run_from_dict", "dump_run", "load_run", "write_json"]

FORMAT = "commlens.run/1"
_FORMAT_PREFIX = "commlens.run/"


class FormatError(ValueError):
    """A file that is not a valid commlens run."""


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    out: dict[str, Any] = {
        "op": m.op,
        "algo": m.algo,
        "dtype": m.dtype,
        "redop": m.redop,
        "root": m.root,
        "size_bytes": m.size_bytes,
        "count": m.count,
        "in_place": m.in_place,
        "world_size": m.world_size,
        "nwrong": m.nwrong,
        "iterations": len(m.samples_s) if m.samples_s else m.stats.n,
    }
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
    if m.reported is not None:
        out["reported"] = {**m.reported.as_dict(), "n": m.reported.n}
    return out


def run_to_dict(run: Run) -> dict[str, Any]:
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
        "config": run.config,
        "notes": list(run.notes),
        "system": system,
        "avg_busbw_bytes_per_s": run.avg_busbw_bytes_per_s(),
        "measurements": [measurement_to_dict(m) for m in run.measurements],
    }


def _measurement_from_dict(d: dict[str, Any]) -> Measurement:
    rank = d.get("rank_samples_s")
    rep = d.get("reported")
    return Measurement(
        op=d["op"],
        algo=d.get("algo", "builtin"),
        dtype=d["dtype"],
        redop=d.get("redop", "none"),
        root=int(d.get("root", -1)),
        size_bytes=int(d["size_bytes"]),
        count=int(d["count"]),
        in_place=bool(d["in_place"]),
        world_size=int(d["world_size"]),
        samples_s=tuple(float(s) for s in d["samples_s"]),
        nwrong=None if d.get("nwrong") is None else int(d["nwrong"]),
        rank_samples_s=None if rank is None else tuple(tuple(float(s) for s in r) for r in rank),
        reported=None if rep is None else TimeStats(**rep),
    )


# Upgraders from an older format version to the next: {1: upgrade_1_to_2, ...}.
_UPGRADERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
_CURRENT_VERSION = int(FORMAT.rsplit("/", 1)[1])


def run_from_dict(d: dict[str, Any]) -> Run:
    """Build a run from its dict form, upgrading older format versions."""
    fmt = d.get("format") if isinstance(d, dict) else None
    if not isinstance(fmt, str) or not fmt.startswith(_FORMAT_PREFIX):
        raise FormatError(f"not a commlens run (format is {fmt!r}, expected {FORMAT!r})")
    try:
        version = int(fmt[len(_FORMAT_PREFIX):])
    except ValueError:
        raise FormatError(f"bad format version in {fmt!r}") from None
    if version > _CURRENT_VERSION:
        raise FormatError(f"{fmt} is newer than this commlens reads ({FORMAT}); upgrade commlens")
    while version < _CURRENT_VERSION:
        d = _UPGRADERS[version](d)
        version += 1
    try:
        sysd = dict(d["system"])
        sysd.pop("fingerprint", None)
        system = SystemInfo(**sysd)
        return Run(
            run_id=d["run_id"],
            status=d.get("status", "complete"),
            source=d.get("source", "commlens"),
            started_at=d["started_at"],
            finished_at=d.get("finished_at"),
            tag=d.get("tag"),
            revision=d.get("revision"),
            command_line=d.get("command_line", ""),
            config=d.get("config", {}),
            notes=tuple(d.get("notes", ())),
            system=system,
            measurements=tuple(_measurement_from_dict(m) for m in d["measurements"]),
        )
    except KeyError as e:
        raise FormatError(f"missing field {e.args[0]!r}") from None
    except (TypeError, ValueError, RecordError) as e:
        raise FormatError(str(e)) from None


def dump_run(run: Run, fp: IO[str]) -> None:
    json.dump(run_to_dict(run), fp, indent=1)
    fp.write("\n")


def write_json(path: str | Path, data: Any) -> None:
    """Write JSON atomically: a reader never sees a half-written file. ``-`` is stdout."""
    if str(path) == "-":
        import sys

        json.dump(data, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fp:
            json.dump(data, fp, indent=1)
            fp.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a JSON file gets the mode open() would give
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load_run(path: str | Path) -> Run:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise FormatError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    try:
        return run_from_dict(data)
    except FormatError as e:
        raise FormatError(f"{path}: {e}") from None
