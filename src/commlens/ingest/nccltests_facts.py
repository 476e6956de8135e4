"""What nccl-tests prints and what it means, shared by its text and ``-J`` readers: type names, program
names, version codes, environment, the rank list.

Sources: NVIDIA/nccl-tests ``src/common.cu`` (``test_typenames``, the
``#  Rank`` line), ``src/util.cu`` (the ``-J`` writer) and ``nccl.h``
(``NCCL_VERSION_CODE``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from commlens.results.nccltests_json import NCCL_TYPE_NAMES
from commlens.results.records import DTYPE_SIZES, SystemInfo

__all__ = [
    "DTYPES",
    "RankInfo",
    "commlens_dtype",
    "filter_env",
    "nccl_version_from_code",
    "op_from_program",
    "system_from_ranks",
    "unknown_dtype_message",
]

# nccl-tests type names (and the older "char"/"int" spellings) -> commlens dtypes.
DTYPES: dict[str, str] = {nccl: ours for ours, nccl in NCCL_TYPE_NAMES.items()}
DTYPES.update({"char": "int8", "int": "int32"})
DTYPES.update({name: name for name in DTYPE_SIZES})  # commlens' own names, as some wrappers print them

_PROGRAM_RE = re.compile(r"(?<![A-Za-z0-9])([a-z][a-z0-9]*(?:_[a-z0-9]+)*?)_perf\w*")

# Environment variables worth keeping with a run (the same families `commlens bench` records).
_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "UCX_", "FI_", "RCCL_", "HSA_")
_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")


def commlens_dtype(type_name: str) -> str | None:
    """The commlens dtype of an nccl-tests type name, or None if commlens has none (uint32, f8e4m3...)."""
    return DTYPES.get(type_name)


def unknown_dtype_message(type_name: str) -> str:
    known = ", ".join(sorted(set(NCCL_TYPE_NAMES.values()) | {"char", "int"}))
    return (
        f"data type {type_name!r} has no commlens dtype (commlens keeps {', '.join(DTYPE_SIZES)}; "
        f"the nccl-tests names it maps onto them: {known})"
    )


def op_from_program(text: str) -> str | None:
    """The op stem of an nccl-tests binary named in ``text`` (``./build/all_reduce_perf -b 8`` -> ``all_reduce``)."""
    match = _PROGRAM_RE.search(text)
    return match.group(1) if match else None


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
    ranks_per_host = {h: 0 for h in hosts}
    for r in ranks:
        ranks_per_host[r.host] += 1
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
        ranks_per_host=ranks_per_host,
        backend=backend,
        backend_version=backend_version,
        device="cuda",
        device_names=tuple(r.device_name for r in ranks),
        env=env,
        extra=extra,
    )
