"""Write Kineto traces of a 4-rank, 2-host NCCL job in the exact layout of a real one.

Fixture for tests/test_ingest_kineto.py and tests/test_diagnose_stragglers.py; run once:

    python tests/scenarios/kineto_nccl_layout.py --out tests/data/kineto_nccl_4rank_2host

This machine has no GPU, so the NCCL job cannot be recorded here; these files
reproduce, event for event, the layout of HTA's real trace of a 2-rank NCCL
2.17.1 job (HolisticTraceAnalysis ``tests/data/nccl_parser_config/nccl_data.json.gz``,
in ``shared/realdata/kineto``): per collective a ``c10d::allreduce_`` cpu_op,
inside it ``record_param_comms`` (with "Collective name", "Process Group
Name", "In msg nelems", "dtype", ... and its "External id"), inside that the
``nccl:<op>`` user_annotation (the enqueue), inside that ``cudaLaunchKernelExC``
(cuda_runtime, the record_param_comms' External id, a correlation id) with
its ``ac2g`` flow start; on the GPU (pid = device, tid = stream) a
``gpu_user_annotation`` with the annotation's External id, and the
``ncclKernel_*`` kernel with the record_param_comms' External id, the launch's
correlation and the collective metadata copied into its args. Timestamps are
µs with ns decimals; ``ProfilerStep#N`` spans on the main thread;
``distributedInfo`` with ``pg_config`` and ``nccl_version``; ``host_name``
at the top level as torch 2.x writes it. Files are gzipped as PyTorch's
trace handler writes them.

The job (the truth the tests check): ranks 0, 1 on host node-a, ranks 2, 3 on
node-b, whose clock reads 2.5 s ahead. Each step runs two all_reduces
(2049000 and 6563840 floats) and one broadcast (53 longs, root 0). Rank 3
starts every all_reduce 3 ms late; the others arrive within 50 µs of each
other. NCCL kernels spin until every rank has arrived, so all ranks' kernels
of one collective end together (within 2 µs), and rank 3's are the shortest.
Ranks 0, 1, 3 profiled steps 10-15; rank 2's profiler window is one step
later (11-16), so the traces share steps 11-15.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

RANKS = 4
HOSTS = ("node-a", "node-a", "node-b", "node-b")
CLOCK_AHEAD_US = {"node-a": 0.0, "node-b": 2.5e6}
LATE_RANK, LATE_US = 3, 3000.0
STEPS = {0: range(10, 16), 1: range(10, 16), 2: range(11, 17), 3: range(10, 16)}
STEP_US = 50_000.0
T0_US = 4458676416788.066  # the real trace's first ProfilerStep start
# (op for the annotation, c10d op, record_param_comms name, kernel name, elements, dtype, transfer µs)
COLLECTIVES = (
    (
        "all_reduce",
        "c10d::allreduce_",
        "allreduce",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        2049000,
        "Float",
        820.0,
    ),
    (
        "all_reduce",
        "c10d::allreduce_",
        "allreduce",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        6563840,
        "Float",
        2600.0,
    ),
    (
        "broadcast",
        "c10d::broadcast_",
        "broadcast",
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        53,
        "Long",
        8.0,
    ),
)


def _meta(name: str, count: int, dtype: str) -> dict[str, object]:
    return {
        "Collective name": name,
        "In msg nelems": count,
        "Out msg nelems": count,
        "Group size": RANKS,
        "dtype": dtype,
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": "[0, 1, 2, 3]",
    }


def build(seed: int = 11) -> dict[int, dict[str, object]]:
    rng = random.Random(seed)
    # True-time arrivals and ends of every collective, for all ranks at once.
    truth: dict[tuple[int, int], tuple[list[float], float]] = {}
    for step in range(10, 17):
        for k, (op, *_rest, transfer_us) in enumerate(COLLECTIVES):
            base = T0_US + (step - 10) * STEP_US + 5000.0 + k * 12_000.0
            arrive = [
                base + rng.uniform(0, 50) + (LATE_US if r == LATE_RANK and op == "all_reduce" else 0.0)
                for r in range(RANKS)
            ]
            truth[(step, k)] = (arrive, max(arrive) + 120.0 + transfer_us)
    traces = {}
    for r in range(RANKS):
        pid, tid, stream = 2910249 + r * 7, 2910249 + r * 7, 40
        ahead = CLOCK_AHEAD_US[HOSTS[r]]
        events: list[dict[str, object]] = []
        ext, corr, ev_idx = 1, 19000 + r * 1000, 7200
        for step in STEPS[r]:
            s0 = T0_US + (step - 10) * STEP_US + ahead
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{step}",
                    "pid": pid,
                    "tid": tid,
                    "ts": round(s0, 3),
                    "dur": round(STEP_US - 10.0, 3),
                    "args": {"External id": ext, "Record function id": ext, "Ev Idx": ev_idx},
                }
            )
            ext, ev_idx = ext + 1, ev_idx + 1
            for k, (op, c10d, rpc_name, kernel, count, dtype, _t) in enumerate(COLLECTIVES):
                arrive, end_true = truth[(step, k)]
                a = arrive[r] + ahead
                c10d_ts, rpc_ts, ann_ts, launch_ts = a - 120.0, a - 70.0, a - 40.0, a
                kernel_ts = a + 18.0
                kernel_end = end_true + ahead + rng.uniform(-2.0, 2.0)
                rpc_ext, ann_ext = ext + 1, ext + 2
                events += [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": c10d,
                        "pid": pid,
                        "tid": tid,
                        "ts": round(c10d_ts, 3),
                        "dur": 294.37,
                        "args": {"External id": ext, "Record function id": ext, "Ev Idx": ev_idx},
                    },
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "record_param_comms",
                        "pid": pid,
                        "tid": tid,
                        "ts": round(rpc_ts, 3),
                        "dur": 189.626,
                        "args": {
                            "External id": rpc_ext,
                            "Record function id": rpc_ext,
                            "Process Group Name": "0",
                            "Global rank stride": 1,
                            "Out msg nelems": count,
                            "Process Group Ranks": "[0, 1, 2, 3]",
                            "Group size": RANKS,
                            "Global rank start": 0,
                            "Ev Idx": ev_idx + 1,
                            "In msg nelems": count,
                            "In split size": "[]",
                            "Out split size": "[]",
                            "dtype": dtype,
                            "Process Group Description": "default_pg",
                            "Collective name": rpc_name,
                        },
                    },
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": f"nccl:{op}",
                        "pid": pid,
                        "tid": tid,
                        "ts": round(ann_ts, 3),
                        "dur": 92.804,
                        "args": {"External id": ann_ext, "Record function id": ann_ext, "Ev Idx": ev_idx + 2},
                    },
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaLaunchKernelExC",
                        "pid": pid,
                        "tid": tid,
                        "ts": round(launch_ts, 3),
                        "dur": 17.944,
                        "args": {"External id": rpc_ext, "cbid": 430, "correlation": corr},
                    },
                    {
                        "ph": "s",
                        "id": corr,
                        "pid": pid,
                        "tid": tid,
                        "ts": round(launch_ts, 3),
                        "cat": "ac2g",
                        "name": "ac2g",
                    },
                    {
                        "ph": "X",
                        "cat": "gpu_user_annotation",
                        "name": f"nccl:{op}",
                        "pid": r,
                        "tid": stream,
                        "ts": round(kernel_ts - 1.0, 3),
                        "dur": round(kernel_end - kernel_ts + 1.5, 3),
                        "args": {"External id": ann_ext},
                    },
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": kernel,
                        "pid": r,
                        "tid": stream,
                        "ts": round(kernel_ts, 3),
                        "dur": round(kernel_end - kernel_ts, 3),
                        "args": {
                            "External id": rpc_ext,
                            "queued": 0,
                            "device": r,
                            "context": 1,
                            "stream": stream,
                            "correlation": corr,
                            "registers per thread": 96,
                            "shared memory": 87568,
                            "blocks per SM": 0.074074,
                            "warps per SM": 1.259259,
                            "grid": [8, 1, 1],
                            "block": [544, 1, 1],
                            "est. achieved occupancy %": 0,
                            **_meta(rpc_name, count, dtype),
                        },
                    },
                    {
                        "ph": "f",
                        "id": corr,
                        "pid": r,
                        "tid": stream,
                        "ts": round(kernel_ts, 3),
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    },
                ]
                ext, corr, ev_idx = ext + 3, corr + 1, ev_idx + 3
        meta_ts = round(T0_US + ahead - 357.0, 3)
        events += [
            {"name": "process_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0, "args": {"name": "python3.10"}},
            {"name": "process_labels", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
            {"name": "process_name", "ph": "M", "ts": meta_ts, "pid": r, "tid": 0, "args": {"name": "python3.10"}},
            {"name": "process_labels", "ph": "M", "ts": meta_ts, "pid": r, "tid": 0, "args": {"labels": f"GPU {r}"}},
        ]
        traces[r] = {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": r,
                    "name": "NVIDIA A100-PG509-200",
                    "totalGlobalMem": 42297524224,
                    "computeMajor": 8,
                    "computeMinor": 0,
                    "maxThreadsPerBlock": 1024,
                    "maxThreadsPerMultiprocessor": 2048,
                    "regsPerBlock": 65536,
                    "warpSize": 32,
                    "sharedMemPerBlock": 49152,
                    "numSms": 108,
                    "regsPerMultiprocessor": 65536,
                    "sharedMemPerBlockOptin": 166912,
                    "sharedMemPerMultiprocessor": 167936,
                }
            ],
            "distributedInfo": {
                "backend": "nccl",
                "rank": r,
                "world_size": RANKS,
                "pg_count": 1,
                "pg_config": [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "pg_size": RANKS,
                        "ranks": list(range(RANKS)),
                    }
                ],
                "nccl_version": "2.17.1",
            },
            "host_name": HOSTS[r],
            "traceEvents": events,
            "traceName": f"/tmp/job/rank-{r}.pt.trace.json.gz",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1711964646000000000,
        }
    return traces


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for r, trace in build().items():
        data = json.dumps(trace).encode()
        with (
            open(args.out / f"rank-{r}.pt.trace.json.gz", "wb") as f,
            gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz,
        ):
            gz.write(data)


if __name__ == "__main__":
    main()
