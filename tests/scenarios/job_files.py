"""Write a generated multi-rank job's files: NCCL Inspector dumps, Flight Recorder dumps, monitor records,
and nccl-tests ``-J -I 1`` JSON with per-process rows. Deterministic for a seed.

    python tests/scenarios/job_files.py --out /tmp/job --ranks 16 --collectives 400 --late-rank 5 --onset 120

Nothing here was recorded: the files are written from the formats' documented facts, one model of a job
behind all of them.

The job: ``--ranks`` processes of one GPU each, ``--ranks-per-host`` per host (``node-000`` ...), one world
communicator / process group. Each training step issues an all_reduce (64 MiB), an all_gather (8 MiB
per rank), a reduce_scatter (8 MiB per rank) and a broadcast (8 B from rank 0). For each collective every
rank arrives after a common time plus its own jitter (uniform, ``--jitter-us``), now and then (0.2% of
(rank, collective) pairs) 1-5 ms later once (a page fault, a GC pause); from ``--onset`` on the
late rank arrives ``--late-ms`` later (+-10%). The collective ends when the last rank has arrived plus
the transfer time (size over 100 GB/s busBW), on every rank within 5 us; each rank's duration is its end
minus its own arrival, so waiting ranks run long and the late rank short. Each host's clock is off the
true time by a fixed amount (up to 2 ms). ``--hang-after K`` stops the late rank after collective K:
the others start collective K+1 and never finish it.

The facts each file follows:

- NCCL Inspector (``plugins/profiler/inspector``, NCCL 2.28/2.29; see tests/data/nccl_inspector/README.md):
  one ``<hostname>-pid<PID>.log`` per process, one compact JSON object per line with ``header`` (``id`` as
  ``0x%lx``, ``comm_name``, ``rank``, ``n_ranks``, ``nnodes``), ``metadata``
  (``inspector_output_format_version``, ``dump_timestamp_us``, ``hostname``, ``pid``) and ``coll_perf``;
  ``coll_sn`` is NCCL's ``comm->seqNumber[func]``, counted per collective type from 0;
  ``coll_exec_time_us`` an integer; algBW/busBW with 6 decimals. The plugin keeps only the last completed
  collective of a communicator and writes it when its dump thread wakes (``--dump-interval-us``), so a
  record is written at the first wake after it completed, and a collective that completed while an
  earlier one was still unwritten replaces it: ranks' files hold different samples.
  ``--layout verbose`` adds ``event_trace_ts`` kernel-channel times (NCCL_INSPECTOR_DUMP_VERBOSE=1);
  ``--layout v4.3`` writes a ``dump_stats`` marker line carrying header and metadata, then bare
  ``coll_perf`` lines (the layout a public fork's README describes).
- Flight Recorder (PyTorch ``get_dump_json``, layout 2.7, as tests/data/flightrec_v2_7_json): one
  ``nccl_trace_rank_<R>`` per rank, ``entries`` with ``collective_seq_id`` counted per process group from 1
  over every collective, ``profiling_name`` ``nccl:<op>``, ``time_created_ns`` (enqueue, wall clock),
  ``time_discovered_started_ns`` / ``_completed_ns`` (0 when unset), ``duration_ms`` (CUDA events),
  ``state``; the ring buffer keeps the last ``--fr-entries`` entries.
- commlens monitor (``monitor-rank<R>.jsonl``): ``{"type": "record", ...}`` lines in the wire form of
  ``CollectiveRecord`` (``seq`` counted per group from 0 from when the monitor was installed: here after
  the first ``--monitor-late-install`` collectives), then an ``{"type": "end"}`` line when the job ended.
- nccl-tests ``-J`` file version 3 with ``-I 1`` (``src/util.cu``, nccl-tests 2.19):
  ``out_of_place_per_iter`` / ``in_place_per_iter`` with ``times_us`` (the max over processes) and
  ``per_process_max_times_us`` (one row per process, each iteration's CUDA-event time on that process).
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# (NCCL name, PyTorch op, bytes per rank (or total for all_reduce / broadcast))
STEP = (
    ("AllReduce", "all_reduce", 64 << 20),
    ("AllGather", "all_gather", 8 << 20),
    ("ReduceScatter", "reduce_scatter", 8 << 20),
    ("Broadcast", "broadcast", 8),
)
BUSBW_BYTES_PER_S = 100e9
COMM_ID = "0x5d1c0e9a7b3f21"
T0_US = 1_764_590_400_000_000  # 2025-12-01T12:00:00Z


@dataclass(frozen=True)
class JobSpec:
    ranks: int = 8
    collectives: int = 200
    ranks_per_host: int = 8
    late_rank: int | None = None
    onset: int = 0  # the first collective (0-based, job-wide) the late rank is late for
    late_ms: float = 3.0
    jitter_us: float = 100.0
    hang_after: int | None = None  # the late rank issues nothing after this collective
    seed: int = 0
    dump_interval_us: int = 500
    fr_entries: int = 2000
    monitor_late_install: int = 3
    hiccup_rate: float = 0.002  # per rank and collective: a one-off delay of 1-5 ms (a page fault, a GC pause)


@dataclass
class _Call:
    index: int  # job-wide, 0-based
    nccl: str
    op: str
    count_bytes: int  # coll_msg_size_bytes (per rank for all_gather / reduce_scatter)
    sn: int  # NCCL coll_sn (per collective type)
    arrivals_us: list[float]  # true time
    ends_us: list[float | None]  # None: never finished on that rank


def host_of(spec: JobSpec, rank: int) -> str:
    return f"node-{rank // spec.ranks_per_host:03d}"


def simulate(spec: JobSpec) -> list[_Call]:
    """Every collective of the job, with each rank's true arrival and end (µs since the epoch)."""
    rng = random.Random(spec.seed)
    calls: list[_Call] = []
    per_func: dict[str, int] = {}
    now = float(T0_US)
    for i in range(spec.collectives):
        nccl, op, nbytes = STEP[i % len(STEP)]
        now += 2000 + rng.uniform(0, 200)  # compute between collectives
        arrivals = [now + rng.uniform(0, spec.jitter_us) for _ in range(spec.ranks)]
        for r in range(spec.ranks):
            if rng.random() < spec.hiccup_rate:
                arrivals[r] += rng.uniform(1000, 5000)
        if spec.late_rank is not None and i >= spec.onset:
            arrivals[spec.late_rank] += spec.late_ms * 1e3 * rng.uniform(0.9, 1.1)
        total = nbytes * (spec.ranks if op in ("all_gather", "reduce_scatter") else 1)
        transfer_us = total / BUSBW_BYTES_PER_S * 1e6 * (2 * (spec.ranks - 1) / spec.ranks if op == "all_reduce" else 1)
        end = max(arrivals) + transfer_us + 5
        ends: list[float | None] = [end + rng.uniform(0, 5) for _ in range(spec.ranks)]
        if spec.hang_after is not None and spec.late_rank is not None and i > spec.hang_after:
            ends = [None] * spec.ranks
        sn = per_func.get(nccl, 0)
        per_func[nccl] = sn + 1
        calls.append(_Call(i, nccl, op, nbytes, sn, arrivals, ends))
        now = max(e for e in ends if e is not None) if ends[0] is not None else end
        if spec.hang_after is not None and i > spec.hang_after:
            break
    return calls


def _clock_offsets_us(spec: JobSpec) -> dict[str, float]:
    rng = random.Random(f"{spec.seed}:clocks")
    hosts = sorted({host_of(spec, r) for r in range(spec.ranks)})
    return {h: (0.0 if k == 0 else rng.uniform(-2000, 2000)) for k, h in enumerate(hosts)}


def _issued(spec: JobSpec, call: _Call, rank: int) -> bool:
    """Whether a rank issued a collective (after a hang the late rank issues nothing)."""
    return not (spec.hang_after is not None and rank == spec.late_rank and call.index > spec.hang_after)


def write_inspector(spec: JobSpec, out: Path, *, layout: str = "compact") -> list[Path]:
    """One ``<host>-pid<PID>.log`` per rank, sampled as the plugin's dump thread samples."""
    out.mkdir(parents=True, exist_ok=True)
    calls = simulate(spec)
    offsets = _clock_offsets_us(spec)
    nnodes = len(offsets)
    version = "v4.3" if layout == "v4.3" else "v4.0"
    paths = []
    for rank in range(spec.ranks):
        host = host_of(spec, rank)
        pid = 40000 + rank
        header = {"id": COMM_ID, "comm_name": "world", "rank": rank, "n_ranks": spec.ranks, "nnodes": nnodes}
        lines: list[str] = []
        done = [c for c in calls if _issued(spec, c, rank) and c.ends_us[rank] is not None]
        # the dump thread wakes every interval and writes the last collective completed since its last write
        pending: _Call | None = None
        wake = T0_US + spec.dump_interval_us
        for k, call in enumerate(done):
            end = call.ends_us[rank]
            assert end is not None
            while wake < end:
                if pending is not None:
                    lines.append(
                        _inspector_line(spec, pending, rank, header, host, pid, wake, offsets, layout, version)
                    )
                    pending = None
                wake += spec.dump_interval_us
            pending = call
            if k == len(done) - 1:
                lines.append(_inspector_line(spec, pending, rank, header, host, pid, wake, offsets, layout, version))
        path = out / f"{host}-pid{pid}.log"
        if layout == "v4.3":
            marker = {
                "header": header,
                "metadata": _metadata(version, T0_US, host, pid),
                "dump_stats": {
                    "coll_records": len(lines),
                    "coll_dropped_total": 0,
                    "p2p_records": 0,
                    "p2p_dropped_total": 0,
                },
            }
            lines.insert(0, json.dumps(marker, separators=(",", ":")))
        path.write_text("".join(line + "\n" for line in lines))
        paths.append(path)
    return paths


def _metadata(version: str, dump_us: int, host: str, pid: int) -> dict[str, Any]:
    return {
        "inspector_output_format_version": version,
        "git_rev": "",
        "rec_mechanism": "nccl_profiler_interface",
        "dump_timestamp_us": dump_us,
        "hostname": host,
        "pid": pid,
    }


def _inspector_line(
    spec: JobSpec,
    call: _Call,
    rank: int,
    header: dict[str, Any],
    host: str,
    pid: int,
    wake_us: float,
    offsets: dict[str, float],
    layout: str,
    version: str,
) -> str:
    end = call.ends_us[rank]
    assert end is not None
    exec_us = int(end - call.arrivals_us[rank])
    total = call.count_bytes * (spec.ranks if call.op in ("all_gather", "reduce_scatter") else 1)
    algbw = total / (exec_us * 1e3) if exec_us else 0.0
    factor = (
        2 * (spec.ranks - 1) / spec.ranks
        if call.op == "all_reduce"
        else ((spec.ranks - 1) / spec.ranks if call.op in ("all_gather", "reduce_scatter") else 1.0)
    )
    perf: dict[str, Any] = {
        "coll": call.nccl,
        "coll_sn": call.sn,
        "coll_msg_size_bytes": call.count_bytes,
        "coll_exec_time_us": exec_us,
        "coll_timing_source": "kernel_gpu",
        "coll_algobw_gbs": f"{algbw:.6f}",
        "coll_busbw_gbs": f"{algbw * factor:.6f}",
    }
    off = offsets[host]
    if layout == "verbose":
        start = int(call.arrivals_us[rank] + off)
        perf["event_trace_sn"] = {
            "coll_start_sn": 1,
            "coll_stop_sn": 2,
            "kernel_events": [{"channel_id": 0, "kernel_start_sn": 3, "kernel_stop_sn": 4, "kernel_record_sn": 5}],
        }
        perf["event_trace_ts"] = {
            "coll_start_ts": start - 100,
            "coll_stop_ts": start - 94,
            "kernel_events": [
                {
                    "channel_id": 0,
                    "kernel_start_ts": start,
                    "kernel_stop_ts": start + exec_us,
                    "kernel_record_ts": start + exec_us,
                }
            ],
        }
    text = json.dumps(perf, separators=(",", ":"))
    # the bandwidths are printed as %lf numbers, not strings
    text = text.replace(f'"{perf["coll_algobw_gbs"]}"', perf["coll_algobw_gbs"]).replace(
        f'"{perf["coll_busbw_gbs"]}"', perf["coll_busbw_gbs"]
    )
    if layout == "v4.3":
        return '{"coll_perf":' + text + "}"
    obj = {"header": header, "metadata": _metadata(version, int(wake_us + off), host, pid)}
    return json.dumps(obj, separators=(",", ":"))[:-1] + ',"coll_perf":' + text + "}"


def write_flightrec(spec: JobSpec, out: Path) -> list[Path]:
    """One ``nccl_trace_rank_<R>`` (JSON, layout 2.7) per rank: the last ``fr_entries`` entries."""
    out.mkdir(parents=True, exist_ok=True)
    calls = simulate(spec)
    offsets = _clock_offsets_us(spec)
    paths = []
    for rank in range(spec.ranks):
        off = offsets[host_of(spec, rank)]
        entries = []
        for call in calls:
            if not _issued(spec, call, rank):
                continue
            seq = call.index + 1
            arrive = call.arrivals_us[rank] + off
            end = call.ends_us[rank]
            total = call.count_bytes * (spec.ranks if call.op == "all_gather" else 1)
            elems = call.count_bytes // 4
            in_elems = elems * (spec.ranks if call.op == "reduce_scatter" else 1)
            out_elems = total // 4 if call.op == "all_gather" else elems
            entries.append(
                {
                    "record_id": call.index,
                    "pg_id": 0,
                    "process_group": ["0", "default_pg"],
                    "collective_seq_id": seq,
                    "p2p_seq_id": 0,
                    "op_id": seq,
                    "profiling_name": f"nccl:{call.op}",
                    "time_created_ns": int((arrive - 30) * 1000),
                    "input_sizes": [[max(in_elems, 1)]],
                    "input_dtypes": ["Float"],
                    "output_sizes": [[max(out_elems, 1)]],
                    "output_dtypes": ["Float"],
                    "state": "completed" if end is not None else "started",
                    "time_discovered_started_ns": int((arrive + 20) * 1000),
                    "time_discovered_completed_ns": int((end + off + 50) * 1000) if end is not None else 0,
                    "retired": end is not None,
                    "timeout_ms": 600000,
                    "is_p2p": False,
                    "duration_ms": (end - call.arrivals_us[rank]) / 1e3 if end is not None else None,
                }
            )
        entries = entries[-spec.fr_entries :]
        last_done = max((e["collective_seq_id"] for e in entries if e["state"] == "completed"), default=-1)
        dump = {
            "version": "2.7",
            "nccl_version": "2.27.5",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(spec.ranks)))}},
            "pg_status": {
                "0": {
                    "last_enqueued_collective": str(entries[-1]["collective_seq_id"] if entries else -1),
                    "last_started_collective": str(entries[-1]["collective_seq_id"] if entries else -1),
                    "last_completed_collective": str(last_done),
                }
            },
            "entries": entries,
        }
        path = out / f"nccl_trace_rank_{rank}"
        path.write_text(json.dumps(dump))
        paths.append(path)
    return paths


def write_monitor(spec: JobSpec, out: Path) -> list[Path]:
    """One ``monitor-rank<R>.jsonl`` per rank: a record per collective seen since the monitor was installed."""
    out.mkdir(parents=True, exist_ok=True)
    calls = simulate(spec)
    offsets = _clock_offsets_us(spec)
    paths = []
    for rank in range(spec.ranks):
        host = host_of(spec, rank)
        off = offsets[host]
        lines = []
        for call in calls:
            if call.index < spec.monitor_late_install or not _issued(spec, call, rank):
                continue
            end = call.ends_us[rank]
            if end is None:
                continue
            size = call.count_bytes * (spec.ranks if call.op in ("all_gather", "reduce_scatter") else 1)
            lines.append(
                json.dumps(
                    {
                        "type": "record",
                        "rank": rank,
                        "group": "world",
                        "group_size": spec.ranks,
                        "seq": call.index - spec.monitor_late_install,
                        "op": call.op,
                        "size_bytes": size,
                        "dtype": "float32",
                        "start_s": (call.arrivals_us[rank] + off) / 1e6,
                        "end_s": (end + off) / 1e6,
                        "timing": "cuda",
                        "host": host,
                    },
                    separators=(",", ":"),
                )
            )
        if spec.hang_after is None:
            lines.append('{"type":"end"}')
        path = out / f"monitor-rank{rank}.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        paths.append(path)
    return paths


def write_nccl_tests_json(
    spec: JobSpec, out: Path, *, sizes: tuple[int, ...] = (1 << 20, 16 << 20, 256 << 20), iterations: int = 50
) -> Path:
    """nccl-tests ``all_reduce_perf -J -I 1`` output (file version 3), one process per GPU.

    The late process (``late_rank``) starts each iteration late from iteration ``onset`` of every size on,
    so the others' CUDA-event times include the wait and its own are the shortest.
    """
    rng = random.Random(f"{spec.seed}:nccl-tests")
    results = []
    for size in sizes:
        entry: dict[str, Any] = {"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": "    -1"}
        for key in ("out_of_place", "in_place"):
            base_us = size / BUSBW_BYTES_PER_S * 1e6 * 2 * (spec.ranks - 1) / spec.ranks + 20
            rows = [[0.0] * iterations for _ in range(spec.ranks)]
            for i in range(iterations):
                arrivals = [rng.uniform(0, spec.jitter_us) for _ in range(spec.ranks)]
                if spec.late_rank is not None and i >= spec.onset:
                    arrivals[spec.late_rank] += spec.late_ms * 1e3 * rng.uniform(0.9, 1.1)
                end = max(arrivals) + base_us
                for r in range(spec.ranks):
                    rows[r][i] = end - arrivals[r] + rng.uniform(0, 2)
            times = [max(rows[r][i] for r in range(spec.ranks)) for i in range(iterations)]
            avg = sum(times) / len(times)
            ordered = sorted(times)
            stdev = (sum((t - avg) ** 2 for t in times) / max(len(times) - 1, 1)) ** 0.5
            busbw = size / (avg * 1e3) * 2 * (spec.ranks - 1) / spec.ranks
            entry[key] = {"time": avg, "alg_bw": size / (avg * 1e3), "bus_bw": busbw, "nwrong": 0.0}
            entry[f"{key}_per_iter"] = {
                "skipped_iterations": 0,
                "min_us": ordered[0],
                "max_us": ordered[-1],
                "avg_us": avg,
                "p50_us": ordered[len(ordered) // 2],
                "p95_us": ordered[int(len(ordered) * 0.95)],
                "p99_us": ordered[int(len(ordered) * 0.99)],
                "stdev_us": stdev,
                "cv_pct": stdev / avg * 100,
                "times_us": times,
                "per_process_max_times_us": rows,
            }
        entry["actual_iterations"] = iterations
        entry["experiment_name"] = ""
        results.append(entry)
    doc = {
        "version": 3,
        "start_time": "2025-12-01 12:00:00",
        "args": [
            "./build/all_reduce_perf",
            "-b",
            "1M",
            "-e",
            "256M",
            "-f",
            "16",
            "-g",
            "1",
            "-n",
            str(iterations),
            "-I",
            "1",
            "-J",
            "results.json",
        ],
        "env": ["NCCL_DEBUG=WARN"],
        "nccl_version": 22805,
        "config": {
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": sizes[0],
            "maximum_bytes": sizes[-1],
            "step_factor": 16,
            "warmup_iters": 1,
            "iterations": iterations,
            "aggregated_iterations": 1,
            "validation": 1,
            "graph": 0,
            "blocking_collectives": "false",
            "per_iter_timing": "true",
            "per_iter_skip": 0,
            "parallel_init": "false",
            "devices": [
                {
                    "rank": r,
                    "group": 0,
                    "pid": 50000 + r,
                    "hostname": host_of(spec, r),
                    "device": r % spec.ranks_per_host,
                    "device_hex": f"0000:{0x18 + r % spec.ranks_per_host:02x}:00",
                    "device_info": "NVIDIA H100 80GB HBM3",
                }
                for r in range(spec.ranks)
            ],
        },
        "results": results,
        "out_of_bounds": {"count": 0},
        "average_bus_bandwidth": {
            "bandwidth": sum(r[k]["bus_bw"] for r in results for k in ("out_of_place", "in_place")) / (2 * len(results))
        },
        "errors": {"count": 0},
        "end_time": "2025-12-01 12:00:42",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--ranks-per-host", type=int, default=8)
    parser.add_argument("--collectives", type=int, default=200)
    parser.add_argument("--late-rank", type=int)
    parser.add_argument("--onset", type=int, default=0)
    parser.add_argument("--late-ms", type=float, default=3.0)
    parser.add_argument("--hang-after", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fr-entries", type=int, default=2000, help="Flight Recorder ring buffer (TORCH_FR_BUFFER_SIZE)"
    )
    parser.add_argument(
        "--dump-interval-us", type=int, default=500, help="NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"
    )
    parser.add_argument("--layout", choices=("compact", "verbose", "v4.3"), default="compact")
    parser.add_argument("--sources", default="inspector,flightrec,monitor,nccl-tests")
    args = parser.parse_args()
    spec = JobSpec(
        ranks=args.ranks,
        collectives=args.collectives,
        ranks_per_host=args.ranks_per_host,
        late_rank=args.late_rank,
        onset=args.onset,
        late_ms=args.late_ms,
        hang_after=args.hang_after,
        seed=args.seed,
        fr_entries=args.fr_entries,
        dump_interval_us=args.dump_interval_us,
    )
    sources = args.sources.split(",")
    if "inspector" in sources:
        write_inspector(spec, args.out / "inspector", layout=args.layout)
    if "flightrec" in sources:
        write_flightrec(spec, args.out / "flightrec")
    if "monitor" in sources:
        write_monitor(spec, args.out / "monitor")
    if "nccl-tests" in sources:
        write_nccl_tests_json(spec, args.out / "nccl-tests.json")


if __name__ == "__main__":
    main()
