"""A run in the layout of nccl-tests' ``-J`` JSON output.

Times are microseconds and bandwidths GB/s (1e9 bytes), as nccl-tests writes
them; type names are nccl-tests' (``float``, ``half``, ``double``...). Rows
pair the out-of-place and in-place measurements of one size.
"""

from __future__ import annotations

from collections.abc import Sequence

from commlens import __version__
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.records import Measurement, MeasurementKey, Run
from commlens.results.runconfig import BenchSettings, IngestedSettings

__all__ = ["NCCL_TYPE_NAMES", "from_nccl_tests", "run_to_nccl_tests_json", "to_nccl_tests"]

NCCL_TYPE_NAMES = {
    "float32": "float",
    "float16": "half",
    "bfloat16": "bfloat16",
    "float64": "double",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
}


# What nccl-tests prints (text table and -J) for the redop of an op that does not reduce and the root of an
# op without one; a Measurement holds None for both.
_NO_REDOP = "none"
_NO_ROOT = -1


def listed(value: JsonValue) -> Sequence[JsonValue]:
    """A per-rank list kept in ``system.extra`` (rank_pids, rank_hosts); empty when absent or not a list."""
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def to_nccl_tests(redop: str | None, root: int | None) -> tuple[str, int]:
    """A row's redop and root as nccl-tests prints them: ``none`` and ``-1`` where the op has none."""
    return (_NO_REDOP if redop is None else redop), (_NO_ROOT if root is None else root)


def from_nccl_tests(redop: str, root: int) -> tuple[str | None, int | None]:
    """A printed redop and root as a Measurement holds them: None for nccl-tests' ``none`` and ``-1``."""
    return (None if redop == _NO_REDOP else redop), (None if root == _NO_ROOT else root)


def _scaled(value: float | None, factor: float) -> float | None:
    """``value * factor``; None (JSON null) for a statistic the measurement does not have (no samples kept)."""
    return None if value is None else value * factor


def _placement(m: Measurement | None) -> JsonObject | None:
    if m is None:
        return None
    s = m.stats
    return {
        "time": s.mean_s * 1e6,
        "alg_bw": m.algbw_bytes_per_s / 1e9,
        "bus_bw": m.busbw_bytes_per_s / 1e9,
        "nwrong": m.nwrong,
        "min": _scaled(s.min_s, 1e6),
        "max": _scaled(s.max_s, 1e6),
        "p50": _scaled(s.p50_s, 1e6),
        "p95": _scaled(s.p95_s, 1e6),
        "p99": _scaled(s.p99_s, 1e6),
        "stdev": _scaled(s.stdev_s, 1e6),
        "cv": _scaled(s.cv, 100.0),
        "times": [t * 1e6 for t in m.samples_s],
    }


def _hosts_per_rank(hosts: tuple[str, ...], ranks_per_host: dict[str, int], world_size: int) -> list[str]:
    """One host name per rank (block placement) when the run did not record each rank's host."""
    out = [h for h in hosts for _ in range(ranks_per_host.get(h, 0))]
    if len(out) != world_size:
        out = [hosts[0] if hosts else "unknown"] * world_size
    return out


def _validation(check_iters: JsonValue) -> int:
    """nccl-tests' ``validation`` flag from bench's ``check_iters`` (0 when absent)."""
    return int(check_iters) if isinstance(check_iters, (int, float)) and check_iters else 0


def run_to_nccl_tests_json(run: Run) -> JsonObject:
    """The nccl-tests ``-J`` document for ``run``."""
    # a bench run's settings (an ingested run's where it kept the same names; none of another kind's)
    cfg: JsonObject = run.config.values if isinstance(run.config, (BenchSettings, IngestedSettings)) else {}
    rows: dict[MeasurementKey, dict[bool, Measurement]] = {}
    for m in run.measurements:
        rows.setdefault(m.key._replace(in_place=False), {})[m.in_place] = m
    results: list[JsonObject] = []
    for key, pair in rows.items():
        any_m = next(iter(pair.values()))
        redop, root = to_nccl_tests(key.redop, key.root)
        results.append(
            {
                "size": key.size_bytes,
                "count": any_m.count,
                "type": NCCL_TYPE_NAMES[key.dtype],
                "redop": redop,
                "root": f"{root:6d}",
                "out_of_place": _placement(pair.get(False)),
                "in_place": _placement(pair.get(True)),
                "actual_iterations": len(any_m.samples_s),
                "experiment_name": key.op,
            }
        )
    checked = [m.nwrong for m in run.measurements if m.nwrong is not None]
    wrong = sum(checked)
    system = run.system
    pids = listed(system.extra.get("rank_pids"))
    hosts = listed(system.extra.get("rank_hosts")) or _hosts_per_rank(
        system.hosts, system.ranks_per_host, system.world_size
    )
    devices: list[JsonObject] = [
        {
            "rank": rank,
            "group": 0,
            "pid": pids[rank] if rank < len(pids) else None,
            "hostname": host,
            "device": rank if system.device == "cuda" else -1,
            "device_hex": None,
            "device_info": system.device_names[rank] if rank < len(system.device_names) else system.device,
        }
        for rank, host in enumerate(hosts)
    ]
    step = {"step_bytes": cfg.get("step_bytes")} if cfg.get("step_bytes") else {"step_factor": cfg.get("step_factor")}
    return {
        "version": f"commlens {__version__}",
        "start_time": run.started_at,
        "args": run.command_line,
        "env": dict(system.env),
        "nccl_version": system.backend_version if system.backend == "nccl" else None,
        "config": {
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": cfg.get("min_bytes"),
            "maximum_bytes": cfg.get("max_bytes"),
            **step,
            "warmup_iters": cfg.get("warmup"),
            "iterations": cfg.get("iters"),
            "aggregated_iterations": 1,
            "validation": _validation(cfg.get("check_iters")),
            "graph": 0,
            "blocking_collectives": int(bool(cfg.get("blocking"))),
            "parallel_init": 0,
            "backend": system.backend,
        },
        "devices": devices,
        "results": results,
        "out_of_bounds": {"count": wrong if checked else None, "okay": wrong == 0 if checked else None},
        "average_bus_bandwidth": {"bandwidth": run.avg_busbw_bytes_per_s() / 1e9, "okay": "unchecked"},
        "errors": [],
    }
