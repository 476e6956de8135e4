"""Facts shared by the nccl-tests text and JSON readers: type names, versions, ranks, the busBW check.

Sources: NVIDIA/nccl-tests ``src/common.cu`` (``test_typenames``, the
``#  Rank`` line), ``src/util.cu`` (the ``-J`` writer) and ``nccl.h``
(``NCCL_VERSION_CODE``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from commlens.ops import OPS, OpSpec, UnknownOpError, get_op
from commlens.results.nccltests_json import NCCL_TYPE_NAMES
from commlens.results.records import DTYPE_SIZES, SystemInfo

__all__ = [
    "DTYPES",
    "RankInfo",
    "BusbwCheck",
    "commlens_dtype",
    "unknown_dtype_message",
    "op_from_program",
    "resolve_op",
    "nccl_version_from_code",
    "system_from_ranks",
    "check_size",
    "filter_env",
    "zero_time_note",
    "is_decimal",
]

# nccl-tests type names (and the older "char"/"int" spellings) -> commlens dtypes.
DTYPES: dict[str, str] = {nccl: ours for ours, nccl in NCCL_TYPE_NAMES.items()}
DTYPES.update({"char": "int8", "int": "int32"})
DTYPES.update({name: name for name in DTYPE_SIZES})  # commlens' own names, as some wrappers print them

_PROGRAM_RE = re.compile(r"(?<![A-Za-z0-9])([a-z][a-z0-9]*(?:_[a-z0-9]+)*?)_perf\w*")

# Environment variables worth keeping with a run (the same families `commlens bench` records).
_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "UCX_", "FI_", "RCCL_", "HSA_")
_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")

# A printed busBW further than this from size / time x factor (relative, and absolute in GB/s) is doubtful.
BUSBW_REL_TOL = 0.05
BUSBW_ABS_TOL_GBPS = 0.05


def commlens_dtype(type_name: str) -> str | None:
    """The commlens dtype of an nccl-tests type name, or None if commlens has none (uint32, f8e4m3...)."""
    return DTYPES.get(type_name)


def unknown_dtype_message(type_name: str) -> str:
    known = ", ".join(sorted(set(NCCL_TYPE_NAMES.values()) | {"char", "int"}))
    return (f"data type {type_name!r} has no commlens dtype (commlens keeps {', '.join(DTYPE_SIZES)}; "
            f"the nccl-tests names it maps onto them: {known})")


def op_from_program(text: str) -> str | None:
    """The op stem of an nccl-tests binary named in ``text`` (``./build/all_reduce_perf -b 8`` -> ``all_reduce``)."""
    match = _PROGRAM_RE.search(text)
    return match.group(1) if match else None


def resolve_op(name: str) -> OpSpec:
    """The catalog op for an nccl-tests or PARAM op name; UnknownOpError names what commlens knows."""
    try:
        return get_op(name)
    except UnknownOpError:
        raise UnknownOpError(
            f"op {name!r} is not in the commlens catalog ({', '.join(n for n in OPS)})"
        ) from None


def nccl_version_from_code(code: int) -> str:
    """``22105`` -> ``"2.21.5"``; before 2.9 NCCL encoded versions as ``major*1000 + minor*100 + patch``."""
    if code < 10000:
        return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def filter_env(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Only the communication-related variables, as ``commlens bench`` keeps them."""
    return {k: v for k, v in pairs if k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES}


@dataclass(frozen=True)
class RankInfo:
    """One ``#  Rank`` line (or one ``devices[]`` entry of the JSON)."""

    rank: int
    host: str
    pid: int | None
    device: int
    bus_id: str
    device_name: str


def system_from_ranks(
    ranks: list[RankInfo], *, world_size: int, backend: str, backend_version: str, extra: dict, env: dict[str, str]
) -> SystemInfo:
    """Hosts, ranks per host and device names from the rank list (rank order)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    hosts = list(dict.fromkeys(r.host for r in ranks))
    per_host = {h: 0 for h in hosts}
    for r in ranks:
        per_host[r.host] += 1
    extra = {
        **extra,
        "rank_hosts": [r.host for r in ranks],
        "rank_pids": [r.pid for r in ranks],
        "rank_devices": [r.device for r in ranks],
        "rank_bus_ids": [r.bus_id for r in ranks],
    }
    return SystemInfo(
        world_size=world_size,
        hosts=tuple(hosts),
        ranks_per_host=per_host,
        backend=backend,
        backend_version=backend_version,
        device="cuda",
        device_names=tuple(r.device_name for r in ranks),
        env=env,
        extra=extra,
    )


def check_size(spec: OpSpec, size_bytes: int, count: int, elem_size: int, world_size: int) -> str | None:
    """Why ``size`` and ``count`` cannot be this op at this world size, or None if they agree."""
    if spec.name == "barrier":
        return None
    expected = count * elem_size * (world_size if spec.per_rank_split else 1)
    if size_bytes == expected:
        return None
    ranks = f" x {world_size} ranks" if spec.per_rank_split else ""
    return (f"size {size_bytes} B does not match count {count} x {elem_size} B{ranks} = {expected} B "
            f"for {spec.name}: wrong op or world size")


def is_decimal(token: str) -> bool:
    """Plain ASCII digits, as nccl-tests and PARAM print sizes and counts (not ``-8``, ``0x10``, ``65_536``)."""
    return token.isascii() and token.isdigit()


def zero_time_note(warn: Callable[[Any, str], str], where_first: Any, what: str, left_out: list[str]) -> str:
    """Warn once about measurements printed with time 0 (left out); returns the note for the run.

    nccl-tests prints times as ``%7.2f`` µs, so ``0.00`` is under 5 ns: no collective is that fast, and a
    bandwidth of size / 0 is not a number. ``left_out`` names each one (``line 52 in-place``).
    """
    shown = ", ".join(left_out[:4]) + (f" ... ({len(left_out)} in all)" if len(left_out) > 4 else "")
    return warn(where_first, (
        f"{what}: {len(left_out)} measurement(s) printed with time 0 ({shown}): no bandwidth can be "
        f"computed from a time of 0, so they are left out and the run is stored as incomplete"))


class BusbwCheck:
    """Compares printed busBW with size / time x the op's factor; one summary per run segment."""

    def __init__(self) -> None:
        self.rows = 0
        self.bad = 0
        self.first: tuple[Any, float, float] | None = None  # where, printed GB/s, computed GB/s

    def add(self, where: Any, printed_gbps: float, size_bytes: int, time_s: float, factor: float) -> None:
        """``where`` locates the row (a line number, a JSON path) for the warning."""
        if time_s <= 0:
            return
        computed = size_bytes / time_s * factor / 1e9
        self.rows += 1
        diff = abs(computed - printed_gbps)
        if diff > BUSBW_ABS_TOL_GBPS and diff > BUSBW_REL_TOL * max(computed, printed_gbps):
            self.bad += 1
            if self.first is None:
                self.first = (where, printed_gbps, computed)

    def report(self, what: str, warn: Callable[[int, str], str],
               line_of: Callable[[Any], int] = lambda where: where) -> str | None:
        """Warn once if any row disagreed; returns the note for the run, or None."""
        if not self.bad or self.first is None:
            return None
        where, printed, computed = self.first
        return warn(line_of(where), (
            f"{what}: printed busBW disagrees with size / time x busBW factor by more than "
            f"{BUSBW_REL_TOL:.0%} in {self.bad} of {self.rows} measurements (first: printed {printed:g} GB/s, "
            f"computed {computed:.4g} GB/s); check the op and the world size"
        ))
