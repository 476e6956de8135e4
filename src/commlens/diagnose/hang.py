"""Find the first collective where ranks diverge, from PyTorch Flight Recorder dumps.

A dump directory holds one file per rank, named ``<prefix><rank>`` (PyTorch's
``TORCH_FR_DUMP_TEMP_FILE`` layout, e.g. ``nccl_trace_rank_3``, or
``fr_trace_rank_3`` from :mod:`commlens.diagnose.flightrec`), each a pickle
(or, with a ``.json`` suffix, the JSON form) of the recorder: ``entries``
(one per collective with ``process_group``, ``collective_seq_id``,
``profiling_name``, ``input_sizes``, ``input_dtypes``, ``state``, ``frames``),
``pg_config`` and ``pg_status``.

gloo dumps differ from NCCL ones (torch 2.13, measured): every entry's state
stays ``scheduled`` and ``pg_config`` is keyed by ``''`` instead of the group's
name. So the analysis relies only on what both backends record faithfully:
which collectives each rank issued, in order, with their op, sizes and dtypes.
"""

from __future__ import annotations

import json
import pickle
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Divergence", "DumpError", "HangReport", "RankDump", "diagnose_hang", "find_divergence", "load_dumps"]

_RANK_SUFFIX = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<ext>\.json)?$")

# Ops whose inputs may legitimately differ in size across ranks (uneven splits, root-only buffers).
_SIZES_MAY_DIFFER = frozenset({"all_to_all", "alltoall", "alltoall_base", "all_to_all_single", "scatter", "gather",
                               "send", "recv", "_reduce_scatter_base", "reduce_scatter"})


_ENTRY_KEYS = ("process_group", "collective_seq_id", "profiling_name", "input_sizes", "input_dtypes")


class DumpError(ValueError):
    """A dump directory or file that cannot be analysed; the message names the file."""


@dataclass(frozen=True)
class RankDump:
    """One rank's recorder, reduced to what the analysis needs."""

    rank: int
    path: Path
    entries: tuple[dict[str, Any], ...]  # collectives only, in issue order
    python_stack: tuple[dict[str, Any], ...]  # main thread at dump time (commlens dumps), else empty
    dump_reason: str
    backend: str  # "gloo", "nccl", or "" when no entry names one
    group_ranks: dict[str, tuple[int, ...]]  # process group name -> its ranks, where pg_config tells


@dataclass(frozen=True)
class Divergence:
    """The first collective (per process group, by sequence number) the ranks disagree on."""

    kind: str  # "missing_ranks", "op_mismatch", "size_mismatch" or "dtype_mismatch"
    process_group: str
    process_group_desc: str
    collective_seq_id: int
    expected: dict[str, Any]  # op, input_sizes, input_dtypes and the ranks that agree
    culprits: tuple[dict[str, Any], ...]  # per culprit rank: what it issued (or its last collective), its frames


@dataclass(frozen=True)
class HangReport:
    ranks: tuple[int, ...]
    backend: str
    files: dict[int, str]
    ranks_without_dump: tuple[int, ...]
    last_seq_by_rank: dict[int, int]
    divergence: Divergence | None = None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "consistent": self.divergence is None,
            "backend": self.backend,
            "ranks": list(self.ranks),
            "files": {str(r): f for r, f in self.files.items()},
            "ranks_without_dump": list(self.ranks_without_dump),
            "last_collective_seq_id": {str(r): s for r, s in self.last_seq_by_rank.items()},
            "divergence": None,
            "notes": list(self.notes),
        }
        if self.divergence is not None:
            d = self.divergence
            out["divergence"] = {
                "kind": d.kind, "process_group": d.process_group, "process_group_desc": d.process_group_desc,
                "collective_seq_id": d.collective_seq_id, "expected": d.expected,
                "culprit_ranks": [c["rank"] for c in d.culprits], "culprits": list(d.culprits),
            }
        return out


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
        data = json.loads(raw) if path.suffix == ".json" else pickle.loads(raw)
    except (OSError, ValueError, pickle.UnpicklingError, EOFError) as e:
        raise DumpError(f"{path}: not a readable Flight Recorder dump ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list) or "version" not in data:
        raise DumpError(f"{path}: not a Flight Recorder dump (no 'version' and 'entries')")
    return data


def _group_ranks(pg_config: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    """Map group name -> ranks. NCCL keys ``pg_config`` by group name; gloo by ``''`` for the default group."""
    out: dict[str, tuple[int, ...]] = {}
    for key, cfg in pg_config.items():
        ranks = cfg.get("ranks", "[]")
        ranks = json.loads(ranks) if isinstance(ranks, str) else ranks
        name = key or cfg.get("name") or ""
        if not name:  # gloo: the default group ('0') under an empty key
            names = {str(e["process_group"][0]) for e in entries if e.get("process_group")}
            name = "0" if "0" in names or not names else ""
        if name:
            out[name] = tuple(int(r) for r in ranks)
    return out


def load_dumps(dump_dir: str | Path) -> list[RankDump]:
    """Read every rank's dump in ``dump_dir`` (files ending in the rank number, optional ``.json``)."""
    directory = Path(dump_dir)
    if not directory.is_dir():
        raise DumpError(f"{directory}: no such directory")
    dumps: list[RankDump] = []
    for path in sorted(directory.iterdir()):
        m = _RANK_SUFFIX.match(path.name)
        if not path.is_file() or m is None or path.name.endswith(".tmp"):
            continue
        data = _read(path)
        entries = [e for e in data.get("entries", []) if not e.get("is_p2p", False)]
        for i, e in enumerate(entries):
            lacking = [k for k in _ENTRY_KEYS if k not in e]
            if lacking:
                raise DumpError(f"{path}: entry {i} lacks {', '.join(lacking)}")
        names = {str(e.get("profiling_name", "")).split(":")[0] for e in entries} - {""}
        dumps.append(RankDump(
            rank=int(data.get("rank", m.group("rank"))),
            path=path,
            entries=tuple(entries),
            python_stack=tuple(data.get("python_stack", ())),
            dump_reason=str(data.get("dump_reason", "")),
            backend=",".join(sorted(names)),
            group_ranks=_group_ranks(data.get("pg_config", {}), entries),
        ))
    if not dumps:
        raise DumpError(f"{directory}: no Flight Recorder dumps (files named <prefix><rank>)")
    seen = Counter(d.rank for d in dumps)
    twice = sorted(r for r, n in seen.items() if n > 1)
    if twice:
        raise DumpError(f"{directory}: more than one dump for rank(s) {twice}")
    return sorted(dumps, key=lambda d: d.rank)


def _op(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name", "")).split(":", 1)[-1]


def _signature(entry: dict[str, Any]) -> tuple[str, str, str]:
    return (_op(entry), json.dumps(entry.get("input_sizes")), json.dumps(entry.get("input_dtypes")))


def _frames(frames: Any) -> list[str]:
    return [f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in frames or ()]


def find_divergence(dumps: list[RankDump]) -> tuple[Divergence | None, tuple[str, ...]]:
    """Find the first collective, per process group, where ranks diverge.

    1. Per rank, index its collectives (point-to-point entries left out) by
       process group and ``collective_seq_id``; the recorder numbers each
       group's collectives 1, 2, ... in the order that rank issued them.
    2. Per group, its ranks are those ``pg_config`` lists (gloo's mis-keyed
       default group mapped back to group ``0``), else the ranks whose dumps
       hold entries of that group; ranks without a dump are left out.
    3. The recorder is a ring buffer: compare sequence numbers from the
       highest first number any rank still holds, up to the highest any rank
       issued.
    4. At each sequence number, in order, a rank that never issued it is
       *missing*; the others are grouped by (op, input sizes, input dtypes).
       The first number where ranks are missing, or where they issued more
       than one signature, is the divergence.
    5. Culprits: the missing ranks if any (they never reached the collective
       their peers wait in); otherwise the ranks outside the largest group of
       agreeing ranks (ties broken toward the group holding the lowest rank).
       The kind is ``missing_ranks``, else ``op_mismatch`` when ops differ,
       else ``size_mismatch`` (sizes differ, for ops whose inputs must match),
       else ``dtype_mismatch``.
    6. Each culprit is reported with the entry it issued (op, sizes, dtypes,
       the Python frames the recorder captured) or, when missing, its last
       collective in the group and the Python stack where its main thread
       was at dump time.
    Groups are examined in order of their name; the earliest divergence by
    creation time of the first disagreeing entry wins across groups.
    """
    notes: list[str] = []
    by_rank: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
    groups: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    for d in dumps:
        table = by_rank.setdefault(d.rank, {})
        for e in d.entries:
            name, desc = (str(x) for x in e["process_group"])
            table[(name, int(e["collective_seq_id"]))] = e
            groups.setdefault(name, set()).add(d.rank)
            descs[name] = desc
    present = {d.rank for d in dumps}
    for d in dumps:
        for name, ranks in d.group_ranks.items():
            if name in groups:
                groups[name] |= set(ranks) & present
    found: list[tuple[int, Divergence]] = []
    for name in sorted(groups):
        members = sorted(groups[name])
        seqs = {r: sorted(s for (g, s) in by_rank[r] if g == name) for r in members}
        start = max((s[0] for s in seqs.values() if s), default=1)
        if any(s and s[0] > 1 for s in seqs.values()):
            notes.append(f"group {name}: ring buffer wrapped; compared from collective {start}")
        end = max((s[-1] for s in seqs.values() if s), default=0)
        for seq in range(start, end + 1):
            issued = {r: by_rank[r][(name, seq)] for r in members if (name, seq) in by_rank[r]}
            missing = [r for r in members if r not in issued]
            buckets: dict[tuple[str, str, str], list[int]] = {}
            for r, e in issued.items():
                buckets.setdefault(_signature(e), []).append(r)
            if not missing and len(buckets) == 1:
                continue
            majority = max(buckets.items(), key=lambda kv: (len(kv[1]), -min(kv[1])))
            expected_entry = issued[min(majority[1])]
            if missing:
                kind = "missing_ranks"
                culprits = [_missing(r, name, seq, by_rank[r], dumps) for r in missing]
            else:
                ops = {sig[0] for sig in buckets}
                sizes = {sig[1] for sig in buckets}
                if len(ops) > 1:
                    kind = "op_mismatch"
                elif len(sizes) > 1 and _op(expected_entry) not in _SIZES_MAY_DIFFER:
                    kind = "size_mismatch"
                elif len({sig[2] for sig in buckets}) > 1:
                    kind = "dtype_mismatch"
                else:
                    continue
                culprits = [_issued(r, issued[r], dumps) for sig, ranks in sorted(buckets.items())
                            if sig != majority[0] for r in ranks]
                culprits.sort(key=lambda c: c["rank"])
            first_ns = min(int(e.get("time_created_ns") or 0) for e in issued.values())
            found.append((first_ns, Divergence(
                kind=kind, process_group=name, process_group_desc=descs.get(name, ""), collective_seq_id=seq,
                expected={"op": _op(expected_entry), "input_sizes": expected_entry.get("input_sizes"),
                          "input_dtypes": expected_entry.get("input_dtypes"), "ranks": sorted(majority[1]),
                          "frames": _issued(min(majority[1]), expected_entry, dumps)["frames"]},
                culprits=tuple(culprits))))
            break
    if not found:
        return None, tuple(notes)
    return min(found, key=lambda f: f[0])[1], tuple(notes)


def _issued(rank: int, entry: dict[str, Any], dumps: list[RankDump]) -> dict[str, Any]:
    """What a culprit issued; its frames from the entry, else (the entry being its last) from ``python_stack``."""
    dump = next(d for d in dumps if d.rank == rank)
    frames = _frames(entry.get("frames"))
    if not frames and dump.entries and entry is dump.entries[-1]:
        frames = _frames(dump.python_stack)
    return {"rank": rank, "op": _op(entry), "input_sizes": entry.get("input_sizes"),
            "input_dtypes": entry.get("input_dtypes"), "frames": frames}


def _missing(rank: int, group: str, seq: int, table: dict[tuple[str, int], dict[str, Any]],
             dumps: list[RankDump]) -> dict[str, Any]:
    dump = next(d for d in dumps if d.rank == rank)
    earlier = [s for (g, s) in table if g == group and s < seq]
    last = table[(group, max(earlier))] if earlier else None
    return {"rank": rank, "op": None, "input_sizes": None, "input_dtypes": None,
            "last_collective_seq_id": max(earlier) if earlier else 0,
            "last_op": _op(last) if last else None,
            "frames": _frames(dump.python_stack) or _frames(last.get("frames") if last else None),
            "dump_reason": dump.dump_reason}


def diagnose_hang(dump_dir: str | Path) -> HangReport:
    """Load the dumps in ``dump_dir`` and report the first divergence, if any."""
    dumps = load_dumps(dump_dir)
    divergence, notes = find_divergence(dumps)
    expected_ranks: set[int] = set()
    for d in dumps:
        for ranks in d.group_ranks.values():
            expected_ranks |= set(ranks)
    present = {d.rank for d in dumps}
    last_seq = {d.rank: max((int(e["collective_seq_id"]) for e in d.entries), default=0) for d in dumps}
    backends = sorted({d.backend for d in dumps} - {""})
    return HangReport(
        ranks=tuple(sorted(present)), backend=",".join(backends),
        files={d.rank: d.path.name for d in dumps},
        ranks_without_dump=tuple(sorted(expected_ranks - present)),
        last_seq_by_rank=last_seq, divergence=divergence, notes=notes)
