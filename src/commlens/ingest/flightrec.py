"""Read PyTorch Flight Recorder dumps (pickle or JSON, any layout from PyTorch 2.2 on) into records.

A dump directory holds one file per rank, named ``<prefix><rank>`` (PyTorch's
``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` layout, e.g.
``nccl_trace_rank_3``, the tutorial's ``trace_3``, or ``fr_trace_rank_3`` from
:mod:`commlens.diagnose.flightrec`), an optional ``.json``/``.pkl`` suffix
allowed. The format is told by the content, not the name: PyTorch writes both
``_dump_fr_trace`` (pickle) and ``_dump_fr_trace_json`` (JSON) output under
the same file name.

Dumps are data from other machines and are treated as untrusted: files are
bounded in size, pickles go through an unpickler that admits only plain
containers and scalars (no class is ever looked up, so no code can run), and
the loaded structure is bounded in depth and node count before any field is
read. Every error names the file (and the entry or field).

Layouts, keyed by the dump's ``version`` (the ``version_val`` constant of
TraceUtils.h / NCCLUtils.hpp / FlightRecorder.hpp), and what the reader makes
of each (fields are read by presence, so an unlisted minor version reads too):

- before ``2.3`` (PyTorch 2.2-2.4 era): ``seq_id`` instead of
  ``collective_seq_id``; the group only as ``pg_id`` (no ``process_group``
  tuple); no ``input_dtypes``, ``pg_config`` or ``is_p2p``. The group is named
  by its ``pg_id``; dtypes are not compared; point-to-point entries are told
  by their ``send``/``recv`` op.
- ``2.3`` on: ``process_group`` = (name, desc), ``collective_seq_id``,
  ``p2p_seq_id``, ``is_p2p``, ``input_dtypes``/``output_dtypes``,
  ``timeout_ms``, ``pg_config`` {name: {name, desc, ranks}} and ``pg_status``.
- ``2.7`` on: ``nccl_version`` (``comm_lib_version`` from ``2.10``, which also
  adds ``thread_id``/``thread_name``).
- JSON form (every version that has it): ``process_group`` is a list, missing
  ``time_discovered_*`` are ``0`` instead of ``None``, ``pg_status`` values are
  strings, ``frames`` are absent and ``entries`` is left out when empty.
- ``pg_config`` ``ranks`` is the string ``"[0, 1]"`` as PyTorch writes it, or a
  list; gloo (torch 2.13, measured) keys the default group by ``''``.
"""

from __future__ import annotations

import gc
import io
import json
import math
import pickle
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, cast

import numpy as np

from commlens.errors import CommlensError
from commlens.ingest.files import read_capped
from commlens.ingest.json_columns import loads_like_json
from commlens.results.jsonvalue import JsonObject

__all__ = [
    "DEFAULT_MAX_DUMP_BYTES",
    "DumpColumns",
    "DumpError",
    "DumpSet",
    "Entry",
    "GroupConfig",
    "RankColumns",
    "RankDump",
    "loads_plain",
    "read_dump",
    "read_dump_dir",
    "join_dump_columns",
    "read_dump_dir_columns",
]

# A 2,000-entry dump with stack traces is a few MB; the bound leaves room for buffers 100x larger.
DEFAULT_MAX_DUMP_BYTES = 256 * 1024 * 1024
_MAX_DEPTH = 12  # dump -> entries -> entry -> frames -> frame -> value is 6
_MAX_NODES = 30_000_000  # counted with repeats, so a pickle's shared references cannot multiply work unseen
_MAX_RANK = 1 << 24
_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<ext>\.json|\.pkl|\.pickle)?$")
_P2P_OPS = frozenset({"send", "recv"})


class DumpError(CommlensError, ValueError):
    """A dump directory or file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class GroupConfig:
    """One process group as a dump's ``pg_config`` states it: global ranks, in order."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Entry:
    """One recorded collective or point-to-point operation."""

    index: int  # position in the dump's ``entries``
    record_id: int | None
    process_group: str
    process_group_desc: str
    collective_seq_id: int  # ``seq_id`` in layouts before 2.3
    p2p_seq_id: int | None
    profiling_name: str  # e.g. "nccl:all_reduce", "gloo:broadcast", "nccl:send 0->1"
    op: str  # the name without backend prefix and peer suffix: "all_reduce", "send"
    input_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...] | None  # None where the layout has no dtypes
    state: str | None  # "scheduled", "started", "completed" (gloo leaves every entry "scheduled")
    time_created_ns: int | None
    is_p2p: bool
    frames: tuple[str, ...]  # "file:line in name", innermost first
    time_started_ns: int | None = None  # time_discovered_started_ns (None where unset: 0 or null)
    time_completed_ns: int | None = None  # time_discovered_completed_ns
    duration_s: float | None = None  # duration_ms (CUDA events, with the recorder's timing on)

    @property
    def backend(self) -> str:
        return self.profiling_name.split(":", 1)[0] if ":" in self.profiling_name else ""


@dataclass(frozen=True)
class RankDump:
    """One rank's dump, as read."""

    rank: int
    path: Path
    format: str  # "pickle" or "json"
    version: str
    entries: tuple[Entry, ...]  # every entry, point-to-point included, in record order
    groups: dict[str, GroupConfig]  # by group name (gloo's '' mapped back to the default group)
    python_stack: tuple[str, ...]  # commlens dumps: the main thread at dump time, innermost first
    dump_reason: str
    backend: str  # "gloo", "nccl", ... as the entries' names say; "" when none does

    @property
    def collectives(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if not e.is_p2p)


@dataclass(frozen=True)
class DumpSet:
    """The dumps of one directory and the ranks that should have written one."""

    directory: Path
    prefix: str
    dumps: tuple[RankDump, ...]  # by rank
    expected_ranks: tuple[int, ...]  # every rank some dump's pg_config or the file names show
    missing: dict[int, tuple[str, ...]]  # rank without a dump -> how we know it should have one
    notes: tuple[str, ...] = field(default=())


class _PlainUnpickler(pickle._Unpickler):
    """Admits dicts, lists, tuples, str, bytes, int, float, bool and None; refuses every class or function.

    Python's own unpickler, not the C one: the C unpickler keeps its memo in an array sized by the largest index
    a PUT names, so ``LONG_BINPUT 544629605`` in a 2 KB file allocates gigabytes before anything is checked
    (found by the fuzz: 8.4 GB); Python's keeps a dict. Dumps are a few MB: it reads them in well under a second.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a dump holds only plain data")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id: a dump holds only plain data")


def loads_plain(raw: bytes) -> Any:
    """Unpickle plain data only (containers and scalars); raises ``pickle.UnpicklingError`` on anything else."""
    return _PlainUnpickler(io.BytesIO(raw)).load()


_CONTAINERS = (dict, list, tuple)
_SCALARS = (str, bytes, int, float, bool, type(None))


def _check_plain(path: Path, data: Any) -> None:
    """Iterative walk: only plain types, bounded depth and node count (shared references counted each time).

    Only containers go on the walk's stack; scalars are checked where they are met (a dump is mostly scalars).
    """
    if not isinstance(data, _CONTAINERS):
        if not isinstance(data, _SCALARS):
            raise DumpError(f"{path}: holds a {type(data).__name__}, not plain data")
        return
    stack: list[tuple[Any, int]] = [(data, 0)]
    nodes = 1
    while stack:
        value, depth = stack.pop()
        children: Any = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        nodes += len(children)
        if nodes > _MAX_NODES:
            raise DumpError(f"{path}: more than {_MAX_NODES:,} values; not a Flight Recorder dump")
        for child in children:
            if isinstance(child, _CONTAINERS):
                if depth + 1 >= _MAX_DEPTH:
                    raise DumpError(f"{path}: nested deeper than {_MAX_DEPTH} levels; not a Flight Recorder dump")
                stack.append((child, depth + 1))
            elif not isinstance(child, _SCALARS):  # unreachable for pickles and JSON; kept for future formats
                raise DumpError(f"{path}: holds a {type(child).__name__}, not plain data")


def _load(path: Path, max_bytes: int) -> tuple[dict[str, object], str]:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise DumpError(f"{path}: {size:,} bytes, over the {max_bytes:,}-byte limit for a dump")
        raw = read_capped(path, max_bytes)
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror or e})") from None
    if raw is None:
        raise DumpError(f"{path}: over the {max_bytes:,}-byte limit for a dump")
    fmt = "json" if raw.lstrip()[:1] == b"{" else "pickle"
    try:
        if fmt == "json":
            data = json.loads(raw)
        else:
            data = loads_plain(raw)
    except RecursionError:
        raise DumpError(f"{path}: nested too deeply; not a Flight Recorder dump") from None
    except Exception as e:  # noqa: BLE001 - see below
        # The unpickler looks up no class, so it runs no code of the file's; what it can still raise on a
        # malformed stream is any error of the pickle machine's own (BUILD on a dict is an AttributeError,
        # a bad memo index a KeyError, ...): each means the same thing, an unreadable dump.
        raise DumpError(f"{path}: not a readable Flight Recorder dump ({type(e).__name__}: {str(e)[:200]})") from None
    _check_plain(path, data)
    if not isinstance(data, dict) or "version" not in data:
        raise DumpError(f"{path}: not a Flight Recorder dump (no 'version')")
    return data, fmt


def _version(path: Path, value: Any) -> str:
    text = str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    if not re.fullmatch(r"\d{1,3}\.\d{1,3}", text):
        raise DumpError(f"{path}: field 'version' is {value!r}, not 'MAJOR.MINOR'")
    return text


def _optional_int(path: Path, where: str, value: Any) -> int | None:
    """As :func:`_int`, with None (a missing field) allowed."""
    return None if value is None else _int(path, where, value)


def _int(path: Path, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d{1,20}", value):  # JSON pg_status writes numbers as text
            return int(value)
        raise DumpError(f"{path}: {where} is {value!r}, not an integer")
    return value


def _sizes(path: Path, where: str, value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, (list, tuple)) for s in value):
        raise DumpError(f"{path}: {where} is {value!r:.80}, not a list of tensor shapes")
    return tuple(tuple(_int(path, where, d) for d in s) for s in value)


def _frames(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in value if isinstance(f, dict))


def _op(profiling_name: str) -> str:
    """``nccl:all_reduce`` -> ``all_reduce``; ``nccl:send 0->1`` -> ``send``."""
    return profiling_name.split(":", 1)[-1].split(" ", 1)[0]


def _entry(path: Path, i: int, raw: Any) -> Entry:
    where = f"entry {i}"
    if not isinstance(raw, dict):
        raise DumpError(f"{path}: {where} is a {type(raw).__name__}, not a dict")
    seq_key = "collective_seq_id" if "collective_seq_id" in raw else "seq_id"
    lacking = [k for k in (seq_key, "profiling_name", "input_sizes") if k not in raw]
    if lacking:
        raise DumpError(f"{path}: {where} lacks {', '.join(lacking)}")
    name = raw["profiling_name"]
    if not isinstance(name, str):
        raise DumpError(f"{path}: {where}: profiling_name is {name!r}, not a string")
    pg = raw.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        group, desc = str(pg[0]), str(pg[1])
    elif isinstance(pg, str):
        group, desc = pg, ""
    elif pg is None and "pg_id" in raw:  # layouts before 2.3
        group, desc = str(_int(path, f"{where}: pg_id", raw["pg_id"])), ""
    else:
        raise DumpError(f"{path}: {where}: process_group is {pg!r}, not (name, desc)")
    dtypes = raw.get("input_dtypes")
    if dtypes is not None and not (isinstance(dtypes, (list, tuple)) and all(isinstance(d, str) for d in dtypes)):
        raise DumpError(f"{path}: {where}: input_dtypes is {dtypes!r:.80}, not a list of names")
    op = _op(name)
    is_p2p = raw.get("is_p2p")
    state = raw.get("state")
    return Entry(
        index=i,
        record_id=_optional_int(path, f"{where}: record_id", raw.get("record_id")),
        process_group=group,
        process_group_desc=desc,
        collective_seq_id=_int(path, f"{where}: {seq_key}", raw[seq_key]),
        p2p_seq_id=_optional_int(path, f"{where}: p2p_seq_id", raw.get("p2p_seq_id")),
        profiling_name=name,
        op=op,
        input_sizes=_sizes(path, f"{where}: input_sizes", raw["input_sizes"]),
        input_dtypes=tuple(dtypes) if dtypes is not None else None,
        state=state if isinstance(state, str) else None,
        time_created_ns=_optional_int(path, f"{where}: time_created_ns", raw.get("time_created_ns")),
        is_p2p=bool(is_p2p) if isinstance(is_p2p, bool) else op in _P2P_OPS,
        frames=_frames(raw.get("frames")),
        time_started_ns=_optional_int(
            path, f"{where}: time_discovered_started_ns", raw.get("time_discovered_started_ns")
        )
        or None,
        time_completed_ns=_optional_int(
            path, f"{where}: time_discovered_completed_ns", raw.get("time_discovered_completed_ns")
        )
        or None,
        duration_s=_duration_s(path, where, raw.get("duration_ms")),
    )


def _duration_s(path: Path, where: str, value: Any) -> float | None:
    """``duration_ms`` in seconds: None where absent or null; a finite number >= 0 otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e12:
        raise DumpError(f"{path}: {where}: duration_ms is {value!r:.40}, not a duration in ms")
    return float(value) / 1e3


def _ranks(path: Path, key: str, value: Any) -> tuple[int, ...]:
    """``pg_config`` ranks: the string ``"[0, 1]"`` (as PyTorch writes it) or a list."""
    where = f"pg_config[{key!r}].ranks"
    if isinstance(value, str):
        if len(value) > 16 * _MAX_RANK:
            raise DumpError(f"{path}: {where} is too long")
        try:
            value = json.loads(value)
        except ValueError:
            raise DumpError(f"{path}: {where} is {value!r:.80}, not a list of ranks") from None
    if not isinstance(value, (list, tuple)):
        raise DumpError(f"{path}: {where} is {value!r:.80}, not a list of ranks")
    ranks = tuple(_int(path, where, r) for r in value)
    if any(not 0 <= r < _MAX_RANK for r in ranks):
        raise DumpError(f"{path}: {where} holds a rank outside 0..{_MAX_RANK - 1}")
    return ranks


def _groups(path: Path, pg_config: Any, entries: list[Entry] | list[str]) -> dict[str, GroupConfig]:
    """Group name -> config. NCCL keys ``pg_config`` by group name; gloo keys the default group by ``''``."""
    if pg_config is None:
        return {}
    if not isinstance(pg_config, dict):
        raise DumpError(f"{path}: pg_config is a {type(pg_config).__name__}, not a dict")
    out: dict[str, GroupConfig] = {}
    for key, cfg in pg_config.items():
        if not isinstance(cfg, dict):
            raise DumpError(f"{path}: pg_config[{key!r}] is a {type(cfg).__name__}, not a dict")
        name = str(key) or str(cfg.get("name") or "")
        desc = str(cfg.get("desc") or "")
        if not name:  # gloo: the default group ('0', default_pg) under an empty key
            names = {e if isinstance(e, str) else e.process_group for e in entries}
            name = "0" if "0" in names or not names else ""
            desc = desc or ("default_pg" if name == "0" else "")
        if name:
            out[name] = GroupConfig(name=name, desc=desc, ranks=_ranks(path, str(key), cfg.get("ranks", "[]")))
    return out


def read_dump(path: str | Path, rank_from_name: int | None = None, max_bytes: int = DEFAULT_MAX_DUMP_BYTES) -> RankDump:
    """Read one rank's dump (pickle or JSON, told by content); the rank from the dump, else from the name."""
    path = Path(path)
    data, fmt = _load(path, max_bytes)
    version = _version(path, data["version"])
    raw_entries = data.get("entries", [])
    if not isinstance(raw_entries, list):
        raise DumpError(f"{path}: entries is a {type(raw_entries).__name__}, not a list")
    entries = [_entry(path, i, e) for i, e in enumerate(raw_entries)]
    rank: Any = data.get("rank", rank_from_name)
    if rank is None:
        raise DumpError(f"{path}: no rank in the dump or its name")
    rank = _int(path, "field 'rank'", rank)
    if rank_from_name is not None and rank != rank_from_name:
        raise DumpError(f"{path}: the dump says rank {rank}, its name says rank {rank_from_name}")
    stack = data.get("python_stack", ())
    backends = sorted({e.backend for e in entries} - {""})
    return RankDump(
        rank=rank,
        path=path,
        format=fmt,
        version=version,
        entries=tuple(entries),
        groups=_groups(path, data.get("pg_config"), entries),
        python_stack=_frames(stack),
        dump_reason=str(data.get("dump_reason", "")),
        backend=",".join(backends),
    )


def _candidates(directory: Path, prefix: str | None) -> tuple[str, dict[int, Path]]:
    by_prefix: dict[str, list[tuple[int, Path]]] = {}
    for path in sorted(directory.iterdir()):
        m = _NAME.match(path.name)
        if m is None or not path.is_file() or (prefix is not None and m.group("prefix") != prefix):
            continue
        by_prefix.setdefault(m.group("prefix"), []).append((int(m.group("rank")), path))
    if not by_prefix:
        wanted = f"'{prefix}<rank>'" if prefix is not None else "<prefix><rank>"
        raise DumpError(f"{directory}: no Flight Recorder dumps (files named {wanted})")
    if len(by_prefix) > 1:
        raise DumpError(
            f"{directory}: files of several prefixes ({', '.join(map(repr, sorted(by_prefix)))}); "
            f"name the dumps' prefix (--prefix)"
        )
    [(found, files)] = by_prefix.items()
    twice = sorted(r for r, n in Counter(r for r, _ in files).items() if n > 1)
    if twice:
        raise DumpError(f"{directory}: more than one dump for rank(s) {twice}")
    return found, dict(files)


def read_dump_dir(dump_dir: str | Path, prefix: str | None = None, max_bytes: int = DEFAULT_MAX_DUMP_BYTES) -> DumpSet:
    """Read every rank's dump in ``dump_dir`` and work out which ranks wrote none.

    A rank should have a dump when any dump's ``pg_config`` lists it (the
    default group lists the whole job), or when the file names skip it (ranks
    0..highest file). Ranks above the highest file that no ``pg_config`` lists
    cannot be seen; dumps older than layout 2.3 have no ``pg_config``.
    """
    directory = Path(dump_dir)
    if not directory.is_dir():
        raise DumpError(f"{directory}: no such directory")
    found_prefix, files = _candidates(directory, prefix)
    dumps = [read_dump(path, rank, max_bytes) for rank, path in sorted(files.items())]
    present = {d.rank for d in dumps}
    listed: dict[int, Counter[str]] = {}
    for d in dumps:
        for g in d.groups.values():
            for r in set(g.ranks) - present:
                listed.setdefault(r, Counter())[f"group {g.name} ({g.desc or '-'})"] += 1
    evidence: dict[int, list[str]] = {
        r: [f"the pg_config of {group} lists it ({n} of {len(dumps)} dumps)" for group, n in sorted(groups.items())]
        for r, groups in listed.items()
    }
    top = max(present)
    for r in sorted(set(range(top)) - present):
        evidence.setdefault(r, []).append(
            f"the file names run from {found_prefix}0 to {found_prefix}{top} without {found_prefix}{r}"
        )
    notes = _set_notes([d.version for d in dumps], all(not d.groups for d in dumps))
    return DumpSet(
        directory=directory,
        prefix=found_prefix,
        dumps=tuple(dumps),
        expected_ranks=tuple(sorted(present | set(evidence))),
        missing={r: tuple(w) for r, w in sorted(evidence.items())},
        notes=tuple(notes),
    )


def _set_notes(versions: list[str], no_groups: bool) -> list[str]:
    notes = []
    counted = Counter(versions)
    if len(counted) > 1:
        notes.append(
            "ranks wrote different dump versions: " + ", ".join(f"{v} ({n} dumps)" for v, n in sorted(counted.items()))
        )
    if no_groups:
        notes.append(
            "no dump has a pg_config (layouts before 2.3): missing ranks are seen only as gaps in the file names"
        )
    return notes


# an entry's (op, input sizes, input dtypes), as diagnose hang compares entries
_Signature = tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...] | None]


@dataclass(frozen=True)
class RankColumns:
    """One rank's JSON dump, its entries as columns: what :func:`read_dump` reads, without an object an entry.

    Strings are codes into the set's :attr:`DumpColumns.names` (codes compare across ranks); absent integers
    (``None``, or ``0`` for the discovered times) are 0; an absent duration NaN; ``signature`` codes an
    entry's (op, input sizes, input dtypes), as diagnose hang compares them.
    """

    rank: int
    path: Path
    version: str
    groups: dict[str, GroupConfig]
    process_group: np.ndarray  # codes
    op: np.ndarray  # codes of Entry.op: the profiling name without backend prefix and peer suffix
    seq: np.ndarray  # collective_seq_id
    is_p2p: np.ndarray
    state: np.ndarray  # codes; -1: none
    time_created_ns: np.ndarray
    time_started_ns: np.ndarray
    time_completed_ns: np.ndarray
    duration_s: np.ndarray
    signature: np.ndarray
    has_dtypes: bool  # every collective (not point-to-point) entry records its input dtypes


@dataclass(frozen=True)
class DumpColumns:
    """A dump directory read by :func:`read_dump_dir_columns`."""

    directory: Path
    prefix: str
    ranks: tuple[RankColumns, ...]  # by rank
    notes: tuple[str, ...]
    names: list[str]  # what the ranks' string codes stand for
    signatures: list[_Signature]  # what the ranks' signature codes stand for


def read_dump_dir_columns(
    dump_dir: str | Path,
    prefix: str | None = None,
    max_bytes: int = DEFAULT_MAX_DUMP_BYTES,
    *,
    share: tuple[int, int] = (0, 1),
) -> DumpColumns | None:
    """The dumps of a directory as columns, when every dump is JSON and every entry passes :func:`read_dump`'s
    checks (checked by column; the values are then the same); None otherwise: read it with
    :func:`read_dump_dir`, which says what is wrong where. Pickled dumps always take that path.

    ``share=(i, n)`` reads only the i-th of n slices of the ranks (for reading in n processes); the n slices
    joined by :func:`join_dump_columns` are the directory read at once."""
    directory = Path(dump_dir)
    if not directory.is_dir():
        return None
    try:
        found_prefix, files = _candidates(directory, prefix)
    except DumpError:
        return None
    ranks = []
    codes = _Codes()
    chosen = sorted(files.items())
    part, parts = share
    collecting = gc.isenabled()
    gc.disable()  # parsing makes millions of containers, none in a cycle: no collection pass over them
    try:
        for rank, path in chosen[part * len(chosen) // parts : (part + 1) * len(chosen) // parts]:
            got = _rank_columns(path, rank, max_bytes, codes)
            if got is None:
                return None
            ranks.append(got)
    finally:
        if collecting:
            gc.enable()
    notes = _set_notes([r.version for r in ranks], all(not r.groups for r in ranks))
    return DumpColumns(directory, found_prefix, tuple(ranks), tuple(notes), list(codes.names), list(codes.signatures))


def join_dump_columns(parts: list[DumpColumns]) -> DumpColumns:
    """The slices of a directory read with ``share=(i, n)``, i = 0..n-1, in that order, as one: the string and
    signature codes renumbered as reading them at once numbers them."""
    names: dict[str, int] = {}
    signatures: dict[_Signature, int] = {}
    ranks: list[RankColumns] = []
    for p in parts:
        name_code = np.array([names.setdefault(n, len(names)) for n in p.names] + [-1], dtype=np.int32)
        signature_code = np.array([signatures.setdefault(k, len(signatures)) for k in p.signatures], dtype=np.int32)
        ranks.extend(
            replace(
                r,
                process_group=name_code[r.process_group],
                op=name_code[r.op],
                state=name_code[r.state],  # -1 (no state) indexes the appended -1
                signature=signature_code[r.signature],
            )
            for r in p.ranks
        )
    notes = _set_notes([r.version for r in ranks], all(not r.groups for r in ranks))
    return DumpColumns(parts[0].directory, parts[0].prefix, tuple(ranks), tuple(notes), list(names), list(signatures))


class _Codes:
    """Strings and entry signatures of a dump set, numbered as first met."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.signatures: dict[_Signature, int] = {}

    def of(self, values: Sequence[str]) -> np.ndarray:
        table = self.names
        local = dict.fromkeys(values)  # the distinct values, in the order first met
        for v in local:
            local[v] = table.setdefault(v, len(table))
        return np.fromiter(map(local.__getitem__, values), dtype=np.int32, count=len(values))


_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})
_INT64_MIN = -(2**63)
_NONE = type(None)


def _types(values: Any) -> set[type]:
    return set(map(type, values))


def _ints(values: Sequence[Any], kinds: set[type], none: bool) -> np.ndarray | None:
    """int64 column of ints (None as 0 where ``none``); None when a value is anything else or beyond 64 bits
    (-2**63 included, as :func:`read_dump` refuses it)."""
    if not kinds <= ({int, _NONE} if none else {int}):
        return None
    if _NONE in kinds:
        values = [0 if v is None else v for v in values]
    try:
        out = np.array(values, dtype=np.int64)
    except OverflowError:
        return None
    return None if len(out) and int(out.min()) == _INT64_MIN else out


def _nested_plain(values: Sequence[Any], levels: int, kinds: set[type] | None = None) -> bool:
    """Every value a scalar, or a list whose items are (``levels`` deep at most) scalars or such lists."""
    kinds = _types(values) if kinds is None else kinds
    if not kinds <= _PLAIN_SCALARS | {list}:
        return False
    if list not in kinds:
        return True
    if levels == 0:
        return False
    inner = list(chain.from_iterable(v for v in values if type(v) is list) if len(kinds) > 1 else chain(*values))
    return _nested_plain(inner, levels - 1)


# the entry fields whose checks in _rank_columns imply _nested_plain(column, 2)
_CHECKED_NESTED = frozenset({"process_group", "input_sizes", "input_dtypes", "frames"})


def _parsed_dump(path: Path, rank_from_name: int, max_bytes: int) -> tuple[Any, list[Any], str] | None:
    """A JSON dump's data, its entries (each a dict) and version, when :func:`read_dump` would accept all but
    the entries; else None."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return None
        raw = read_capped(path, max_bytes)
    except OSError:
        return None
    # each key and value of a JSON text takes a byte at least: it cannot hold more values than bytes
    if raw is None or len(raw) >= _MAX_NODES - 1 or raw.lstrip()[:1] != b"{":
        return None
    try:
        data = loads_like_json(raw, beyond_64_bits=False)
        if isinstance(data, dict) and _wide_float({k: v for k, v in data.items() if k != "entries"}):
            data = json.loads(raw)  # an int beyond 64 bits, which orjson reads as a float, outside the entries
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or "version" not in data:
        return None
    entries = data.get("entries", [])
    if type(entries) is not list or not _types(entries) <= {dict}:
        return None
    try:
        _check_plain(path, {k: v for k, v in data.items() if k != "entries"})  # the entries are checked below
        version = _version(path, data["version"])
        rank = _int(path, "field 'rank'", data.get("rank", rank_from_name))
    except DumpError:
        return None
    if rank != rank_from_name:
        return None
    return data, entries, version


def _wide_float(data: Any) -> bool:
    """Whether a float of magnitude 2**63 or more is among the values (orjson reads an integer beyond 64 bits
    as such a float). The entries' fields need no such search: their integer fields take only ints, their
    duration stays under 1e12, and their other fields are not read."""
    stack = [data]
    while stack:
        value = stack.pop()
        items = value.values() if type(value) is dict else value
        for v in items:
            if type(v) is float and not -(2.0**63) < v < 2.0**63:
                return True
            if type(v) is dict or type(v) is list:
                stack.append(v)
    return False


def _entry_columns(entries: list[JsonObject]) -> dict[str, Sequence[Any]] | None:
    """The entries' fields as columns (None where an entry lacks the field); None when the entries have many
    layouts or lack a field :func:`read_dump` requires."""
    keys = tuple(entries[0]) if entries else ()
    if len(keys) > 1 and set(map(len, entries)) == {len(keys)}:  # the usual dump: every entry with one key set
        try:
            columns: dict[str, Sequence[Any]] = dict(zip(keys, zip(*map(itemgetter(*keys), entries))))
        except KeyError:  # an entry with other keys
            pass
        else:
            return columns if _REQUIRED <= columns.keys() else None
    layouts = set(map(tuple, entries))
    if len(layouts) > 16 or any(not _REQUIRED <= set(keys) for keys in layouts):
        return None
    return {k: list(map(dict.get, entries, repeat(k))) for k in set().union(*layouts)}


_REQUIRED = frozenset({"collective_seq_id", "profiling_name", "input_sizes"})


def _rank_columns(path: Path, rank_from_name: int, max_bytes: int, codes: _Codes) -> RankColumns | None:
    """:func:`read_dump` by column, for a JSON dump every entry of which it would accept; else None."""
    parsed = _parsed_dump(path, rank_from_name, max_bytes)
    if parsed is None:
        return None
    data, entries, version = parsed
    columns = _entry_columns(entries)
    if columns is None:
        return None
    n = len(entries)
    kinds = {k: _types(v) for k, v in columns.items()}

    def column(key: str) -> tuple[Sequence[Any], set[type]]:
        got = columns.get(key)
        return (got, kinds[key]) if got is not None else ([None] * n, {_NONE} if n else set())

    # depth: data -> entries -> entry -> value (3); _MAX_DEPTH allows shapes nested far deeper than dumps'
    if not all(_nested_plain(v, 2, kinds[k]) for k, v in columns.items() if k not in _CHECKED_NESTED):
        return None
    frames, frame_kinds = column("frames")
    if not frame_kinds <= {_NONE, list} or any(frames):  # frames: the record-by-record path keeps them
        return None
    names, name_kinds = column("profiling_name")
    groups = _group_column(*column("process_group"))
    dtypes, dtype_kinds = column("input_dtypes")
    if not name_kinds <= {str} or groups is None or not dtype_kinds <= {list, _NONE}:
        return None
    if not _types(chain.from_iterable(filter(None, dtypes)) if _NONE in dtype_kinds else chain(*dtypes)) <= {str}:
        return None
    sizes, size_kinds = column("input_sizes")
    if not size_kinds <= {list}:
        return None
    shapes = list(chain(*sizes))
    if not _types(shapes) <= {list} or not _types(chain(*shapes)) <= {int}:
        return None
    ints = [
        _ints(*column(k), none=k != "collective_seq_id")
        for k in (
            "collective_seq_id",
            "time_created_ns",
            "time_discovered_started_ns",
            "time_discovered_completed_ns",
            "record_id",
            "p2p_seq_id",
        )
    ]
    duration = _durations(*column("duration_ms"))
    if duration is None or any(c is None for c in ints):
        return None
    seq, created, started, completed = ints[:4]
    op_of = {n: _op(n) for n in set(names)}
    ops = list(map(op_of.__getitem__, names))
    p2p = _p2p(*column("is_p2p"), ops)
    try:
        configs = _groups(path, data.get("pg_config"), sorted(set(groups[0])))
    except DumpError:
        return None
    signature = _signatures(codes.signatures, ops, sizes, shapes, dtypes, dtype_kinds)
    has_dtypes = _NONE not in dtype_kinds or all(d is not None for d, f in zip(dtypes, p2p.tolist()) if not f)
    state = _states(codes, *column("state"))
    assert seq is not None and created is not None and started is not None and completed is not None
    return RankColumns(
        rank=rank_from_name,
        path=path,
        version=version,
        groups=configs,
        process_group=codes.of(groups[0]),
        op=codes.of(ops),
        seq=seq,
        is_p2p=p2p,
        state=state,
        time_created_ns=created,
        time_started_ns=started,
        time_completed_ns=completed,
        duration_s=duration / 1e3,
        signature=signature,
        has_dtypes=has_dtypes,
    )


def _group_column(values: Sequence[Any], kinds: set[type]) -> tuple[Sequence[str], Sequence[str]] | None:
    """The entries' (group name, description) columns, when every process_group is two strings; else None."""
    if not kinds <= {list} or set(map(len, values)) - {2}:
        return None
    if not values:
        return [], []
    names, descs = zip(*values)
    if not _types(names) <= {str} or not _types(descs) <= {str}:
        return None
    return names, descs


def _durations(values: Sequence[Any], kinds: set[type]) -> np.ndarray | None:
    """duration_ms as float64 (NaN where absent); None when one is no number in [0, 1e12)."""
    if not kinds <= {int, float, _NONE}:
        return None
    try:
        if _NONE in kinds:
            duration = np.array([math.nan if d is None else d for d in values], dtype=np.float64)
        else:
            duration = np.array(values, dtype=np.float64)
    except OverflowError:
        return None
    given = duration[np.array([d is not None for d in values], dtype=bool)] if _NONE in kinds else duration
    if not ((given >= 0) & (given < 1e12)).all():
        return None
    return duration


def _p2p(flags: Sequence[Any], kinds: set[type], ops: list[str]) -> np.ndarray:
    if kinds <= {bool}:
        return np.array(flags, dtype=bool)
    return np.array([f if type(f) is bool else o in _P2P_OPS for f, o in zip(flags, ops)], dtype=bool)


def _states(codes: _Codes, values: Sequence[Any], kinds: set[type]) -> np.ndarray:
    """State codes; -1 where none (absent, not a string, or empty)."""
    states = values if kinds <= {str} else [st if isinstance(st, str) else "" for st in values]
    state_codes = codes.of(states)
    empty = codes.names.get("")
    return state_codes if empty is None else np.where(state_codes != empty, state_codes, -1)


def _signatures(
    table: dict[_Signature, int],
    ops: list[str],
    sizes: Sequence[list[list[int]]],
    shapes: list[list[int]],
    dtypes: Sequence[list[str] | None],
    dtype_kinds: set[type],
) -> np.ndarray:
    """Codes of the entries' (op, input sizes, input dtypes), equal codes for equal triples across the set."""
    if ops and _NONE not in dtype_kinds and set(map(len, sizes)) == {1} and set(map(len, shapes)) == {1}:
        named = cast("Sequence[list[str]]", dtypes)
        if set(map(len, named)) == {1}:
            return _one_input_signatures(table, ops, list(chain(*shapes)), list(chain(*named)))
    return np.array(
        [
            table.setdefault((o, tuple(map(tuple, z)), None if d is None else tuple(d)), len(table))
            for o, z, d in zip(ops, sizes, dtypes)
        ],
        dtype=np.int32,
    )


def _one_input_signatures(
    table: dict[_Signature, int], ops: list[str], elements: list[int], dtypes: list[str]
) -> np.ndarray:
    """:func:`_signatures` where every entry has one one-dimensional input and one dtype (the same keys in
    ``table``), each distinct triple looked up once."""
    triples = list(zip(ops, elements, dtypes))
    local: dict[tuple[str, int, str], int] = dict.fromkeys(triples, 0)
    for t in local:
        local[t] = table.setdefault((t[0], ((t[1],),), (t[2],)), len(table))
    return np.fromiter(map(local.__getitem__, triples), dtype=np.int32, count=len(triples))
