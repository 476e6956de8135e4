"""Writes the NCCL Inspector fixtures of this folder (deterministic; see README.md for the layout's source).

Run from the repository root: ``.venv/bin/python tests/data/nccl_inspector/make_fixtures.py``.
The files are written as the plugin writes them: one compact JSON object per line (no spaces), integers
for sizes, sequence numbers, times and timestamps, ``%lf`` (6 decimals) for the bandwidths, which are
computed as the plugin computes them (``inspectorComputeOpBw``) from the integer µs execution time.
"""

from __future__ import annotations

import random
from pathlib import Path

HERE = Path(__file__).parent
T0_US = 1764590400_000000  # 2025-12-01T12:00:00Z


def bandwidths(coll: str, msg: int, exec_us: int, n: int) -> tuple[float, float]:
    """(algBW, busBW) in GB/s as the plugin computes them."""
    traffic, factor = {
        "AllReduce": (msg, 2 * (n - 1) / n),
        "AllGather": (msg * n, (n - 1) / n),
        "ReduceScatter": (msg * n, (n - 1) / n),
        "Broadcast": (msg, 1.0),
        "Reduce": (msg, 1.0),
        "Send": (msg, 1.0),
        "Recv": (msg, 1.0),
    }.get(coll, (0, 0.0))
    alg = traffic / 1e9 / (exec_us / 1e6) if exec_us else 0.0
    return alg, alg * factor


def header(comm: str, name: str | None, rank: int, n: int, nnodes: int) -> str:
    named = f',"comm_name":"{name}"' if name is not None else ""
    return f'"header":{{"id":"{comm}"{named},"rank":{rank},"n_ranks":{n},"nnodes":{nnodes}}}'


def metadata(ts_us: int, host: str, pid: int, version: str = "v4.0") -> str:
    return (
        f'"metadata":{{"inspector_output_format_version":"{version}","git_rev":"",'
        f'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":{ts_us},"hostname":"{host}","pid":{pid}}}'
    )


def coll_perf(coll: str, sn: int, msg: int, exec_us: int, n: int, trace: str = "") -> str:
    alg, bus = bandwidths(coll, msg, exec_us, n)
    return (
        f'"coll_perf":{{"coll":"{coll}","coll_sn":{sn},"coll_msg_size_bytes":{msg},"coll_exec_time_us":{exec_us},'
        f'"coll_timing_source":"kernel_gpu","coll_algobw_gbs":{alg:f},"coll_busbw_gbs":{bus:f}{trace}}}'
    )


def kernel_trace(start_us: int, exec_us: int, channels: int, rng: random.Random) -> str:
    """Verbose event traces: the collective's host-side start/stop, then each channel's kernel events."""
    sn = [
        f'{{"channel_id":{c},"kernel_start_sn":{3 + 3 * c},"kernel_stop_sn":{4 + 3 * c},"kernel_record_sn":{5 + 3 * c}}}'
        for c in range(channels)
    ]
    ts = []
    for c in range(channels):
        k0 = start_us + 110 + c * rng.randint(0, 3)
        k1 = k0 + exec_us - rng.randint(0, 4)
        ts.append(f'{{"channel_id":{c},"kernel_start_ts":{k0},"kernel_stop_ts":{k1},"kernel_record_ts":{k1}}}')
    return (
        f',"event_trace_sn":{{"coll_start_sn":1,"coll_stop_sn":2,"kernel_events":[{",".join(sn)}]}}'
        f',"event_trace_ts":{{"coll_start_ts":{start_us},"coll_stop_ts":{start_us + 6},"kernel_events":[{",".join(ts)}]}}'
    )


def compact_job() -> None:
    """Two hosts, four single-GPU processes; a world communicator (4 ranks) and a TP communicator per host (2)."""
    rng = random.Random(15)
    world = "0x1f3a5c7e9b2d4f"
    tp = {"node-a": "0x6b8d0f2a4c6e81", "node-b": "0x93c5e7092b4d6f"}
    procs = [("node-a", 41001, 0), ("node-a", 41002, 1), ("node-b", 52001, 2), ("node-b", 52002, 3)]
    out = HERE / "compact"
    out.mkdir(exist_ok=True)
    for host, pid, rank in procs:
        lines = []
        ts = T0_US
        for dump in range(2):  # two periodic dumps, each draining four collectives per communicator
            ts += 250_000
            for sn in range(4 * dump, 4 * dump + 4):
                for coll, msg, base_us in (("AllReduce", 67108864, 1480), ("AllGather", 4194304, 310)):
                    ts += rng.randint(2, 9)
                    exec_us = base_us + rng.randint(0, 60)
                    lines.append(
                        "{"
                        + ",".join(
                            (
                                header(world, "world", rank, 4, 2),
                                metadata(ts, host, pid),
                                coll_perf(coll, 2 * sn + (coll == "AllGather"), msg, exec_us, 4),
                            )
                        )
                        + "}"
                    )
            for sn in range(4 * dump, 4 * dump + 4):
                ts += rng.randint(2, 9)
                exec_us = 95 + rng.randint(0, 8)
                lines.append(
                    "{"
                    + ",".join(
                        (
                            header(tp[host], f"TP Group {0 if host == 'node-a' else 1}", rank % 2, 2, 1),
                            metadata(ts, host, pid),
                            coll_perf("ReduceScatter", sn, 8388608, exec_us, 2),
                        )
                    )
                    + "}"
                )
        (out / f"{host}-pid{pid}.log").write_text("\n".join(lines) + "\n")


def verbose_job() -> None:
    """One host, two processes, NCCL_INSPECTOR_DUMP_VERBOSE=1: event traces, a Broadcast, an All2All, P2P."""
    rng = random.Random(28)
    comm = "0xe62dedaa97644b"
    out = HERE / "verbose"
    out.mkdir(exist_ok=True)
    for rank, pid in ((0, 7001), (1, 7002)):
        lines = []
        start = T0_US + 1_000_000 + rank * 3  # rank 1's host clock 3 µs ahead
        for sn, (coll, msg, base_us) in enumerate(
            (
                ("AllReduce", 2147483648, 41057),
                ("Broadcast", 16777216, 95),
                ("All2All", 1048576, 160),
                ("AllReduce", 2147483648, 41090),
            )
        ):
            exec_us = base_us + rng.randint(0, 20)
            trace = kernel_trace(start, exec_us, 2, rng)
            dump_ts = start + exec_us + 400
            lines.append(
                "{"
                + ",".join(
                    (
                        header(comm, "unknown", rank, 2, 1),
                        metadata(dump_ts, "gpu-host-07", pid),
                        coll_perf(coll, sn, msg, exec_us, 2, trace),
                    )
                )
                + "}"
            )
            start += exec_us + 1000
        peer = 1 - rank
        kind = "Send" if rank == 0 else "Recv"
        alg, bus = bandwidths(kind, 4194304, 30, 2)
        lines.append(
            "{"
            + ",".join(
                (
                    header(comm, "unknown", rank, 2, 1),
                    metadata(start + 500, "gpu-host-07", pid),
                    f'"p2p_perf":{{"p2p":"{kind}","p2p_sn":1,"p2p_peer":{peer},"p2p_msg_size_bytes":4194304,'
                    f'"p2p_exec_time_us":30,"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":{alg:f},'
                    f'"p2p_busbw_gbs":{bus:f}}}',
                )
            )
            + "}"
        )
        (out / f"gpu-host-07-pid{pid}.log").write_text("\n".join(lines) + "\n")


def truncated() -> None:
    """A process killed while the dump thread wrote: three whole records, the fourth cut mid-object."""
    comm = "0x2c4e6a8b0d1f33"
    lines = []
    for sn in range(4):
        exec_us = 700 + 3 * sn
        lines.append(
            "{"
            + ",".join(
                (
                    header(comm, None, 0, 8, 1),
                    metadata(T0_US + 10 * sn, "node-c", 3001),
                    coll_perf("AllReduce", sn, 33554432, exec_us, 8),
                )
            )
            + "}"
        )
    text = "\n".join(lines)
    (HERE / "truncated").mkdir(exist_ok=True)
    (HERE / "truncated" / "node-c-pid3001.log").write_text(text[: len(text) - 57])


def marker_v43() -> None:
    """The v4.3 layout a fork's README describes: a dump_stats marker carries header and metadata once."""
    comm = "0x7f8c496ae9f662"
    lines = [
        "{"
        + ",".join(
            (
                header(comm, None, 2, 8, 1),
                metadata(T0_US, "example-host", 1639453, "v4.3"),
                '"dump_stats":{"coll_records":2,"coll_dropped_total":0,"coll_dropped_since_last_dump":0,'
                '"p2p_records":0,"p2p_dropped_total":0,"p2p_dropped_since_last_dump":0}',
            )
        )
        + "}"
    ]
    for sn in (1406, 1407):
        alg, bus = bandwidths("AllReduce", 17179869184, 61974, 8)
        lines.append(
            '{"coll_perf":{"coll":"AllReduce","coll_algo":"RING","coll_proto":"LL","coll_sn":%d,'
            '"coll_msg_size_bytes":17179869184,"coll_exec_time_us":61974,"coll_algobw_gbs":%f,'
            '"coll_busbw_gbs":%f}}' % (sn, alg, bus)
        )
    (HERE / "marker_v4_3.log").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    compact_job()
    verbose_job()
    truncated()
    marker_v43()
