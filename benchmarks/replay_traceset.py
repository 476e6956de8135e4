"""Write a synthetic Kineto trace set of a large NCCL job, for the replay extraction speed benchmark.

``python benchmarks/replay_traceset.py DIR --ranks 64 --calls 100000`` writes ``DIR/rank<R>.json``, one per
rank, laid out as the real NCCL traces in ``shared/realdata/kineto`` are: per collective a
``record_param_comms`` cpu_op (``Collective name``, ``Process Group Name``/``Ranks``, ``In msg nelems``,
``dtype``) enclosing the ``nccl:<op>`` user_annotation, which encloses a ``cudaLaunchKernel`` runtime event;
the ``ncclDevKernel_*`` kernel carries the annotation's ``External id`` and the launch's ``correlation``;
``ProfilerStep#N`` spans; and a few ``aten::`` cpu_ops around each collective, as a real trace holds far
more compute than communication events. The job is data parallel x tensor parallel (8 ranks per tensor
parallel group, contiguous): per step each rank runs tensor-parallel all-gathers and reduce-scatters and
one data-parallel all-reduce. Seeded: the same arguments write the same files.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

_OPS = (("all_gather", "AllGather", "_allgather_base"), ("reduce_scatter", "ReduceScatter", "_reduce_scatter_base"))


def trace(rank: int, world: int, tp: int, calls: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed * 100003 + rank)
    tp_group = rank // tp
    dp_group = rank % tp
    groups = {
        f"tp{tp_group}": list(range(tp_group * tp, tp_group * tp + tp)),
        f"dp{dp_group}": list(range(dp_group, world, tp)),
    }
    events: list[dict[str, object]] = []
    pid, tid = 1000 + rank, 1000 + rank
    ts, ext, corr, step = 1_700_000_000_000_000.0, 1, 1, 0
    per_step = 9
    step_start = ts
    for i in range(calls):
        if i % per_step == 0:
            if i:
                events.append(
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": f"ProfilerStep#{step}",
                        "pid": pid,
                        "tid": tid,
                        "ts": step_start,
                        "dur": ts - step_start + 1,
                        "args": {},
                    }
                )
                step += 1
            step_start = ts
        last = i % per_step == per_step - 1
        op, kernel, coll = ("all_reduce", "AllReduce", "allreduce") if last else _OPS[i % 2]
        group = f"dp{dp_group}" if last else f"tp{tp_group}"
        n = len(groups[group])
        count = (1 << 22) if last else (1 << 18) * (n if op == "reduce_scatter" else 1)
        for _ in range(3):  # compute between collectives
            dur = rng.uniform(50, 400)
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": pid,
                    "tid": tid,
                    "ts": ts,
                    "dur": dur,
                    "args": {"External id": ext, "Record function id": ext},
                }
            )
            ext += 1
            ts += dur + 5
        rpc_ext, ann_ext = ext, ext + 1
        ext += 2
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": 60.0,
                "args": {
                    "External id": rpc_ext,
                    "Collective name": coll,
                    "Process Group Name": group,
                    "Process Group Ranks": str(groups[group]),
                    "Group size": n,
                    "In msg nelems": count,
                    "Out msg nelems": count,
                    "dtype": "BFloat16",
                    "In split size": "[]",
                    "Out split size": "[]",
                },
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"nccl:{op}",
                "pid": pid,
                "tid": tid,
                "ts": ts + 5,
                "dur": 40.0,
                "args": {"External id": ann_ext},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": pid,
                "tid": tid,
                "ts": ts + 20,
                "dur": 8.0,
                "args": {"correlation": corr, "External id": ann_ext},
            }
        )
        kernel_dur = rng.uniform(100, 3000)
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"ncclDevKernel_{kernel}_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                "pid": 0,
                "tid": 7,
                "ts": ts + 30,
                "dur": kernel_dur,
                "args": {"External id": ann_ext, "correlation": corr, "device": rank % 8, "stream": 7},
            }
        )
        corr += 1
        ts += 70 + kernel_dur * 0.2
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "nccl_version": "2.21.5"},
        "traceEvents": events,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory")
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--calls", type=int, default=100_000, help="collectives over all ranks")
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args()
    out = Path(ns.directory)
    out.mkdir(parents=True, exist_ok=True)
    per_rank = -(-ns.calls // ns.ranks)
    per_rank += -per_rank % 9  # whole steps (9 collectives), so every group's ranks issue as many
    for r in range(ns.ranks):
        (out / f"rank{r}.json").write_text(json.dumps(trace(r, ns.ranks, ns.tp, per_rank, ns.seed)))
    print(f"wrote {ns.ranks} traces of {per_rank} collectives each ({ns.ranks * per_rank} in all) to {out}")


if __name__ == "__main__":
    main()
