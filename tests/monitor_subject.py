"""A job of known collectives under the monitor, for tests/test_monitor.py: run with torchrun, prints JSON.

Each rank issues, in this order: all_reduce (sync, 1 MiB float32), all_reduce (async, 256 KiB, waited on
later), all_gather_into_tensor (64 KiB per rank), reduce_scatter_tensor (256 KiB input), all_to_all_single
(64 KiB), broadcast (4 KiB int64), gather and scatter (1 KiB per rank), barrier, and then the same on a
subgroup of ranks {0, 1} when there are 4 ranks. Rank 0 prints its records, the Flight Recorder's count
of collectives, the ring's losses and the monitor's windows as one JSON object.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist


def issue(group: dist.ProcessGroup | None, n: int, rank_in_group: int) -> None:
    a = torch.ones(1 << 18)  # 1 MiB float32
    dist.all_reduce(a, group=group)
    b = torch.ones(1 << 16)  # 256 KiB
    work = dist.all_reduce(b, group=group, async_op=True)
    dist.all_gather_into_tensor(torch.empty(n * (1 << 14)), torch.ones(1 << 14), group=group)
    dist.reduce_scatter_tensor(torch.empty((1 << 16) // n), torch.ones(1 << 16), group=group)
    dist.all_to_all_single(torch.empty(1 << 14), torch.ones(1 << 14), group=group)
    dist.broadcast(
        torch.ones(512, dtype=torch.int64), src=dist.get_global_rank(group or dist.group.WORLD, 0), group=group
    )
    root = dist.get_global_rank(group or dist.group.WORLD, 0)
    gl = [torch.empty(256) for _ in range(n)] if rank_in_group == 0 else None
    dist.gather(torch.ones(256), gather_list=gl, dst=root, group=group)
    sl = [torch.ones(256) for _ in range(n)] if rank_in_group == 0 else None
    dist.scatter(torch.empty(256), scatter_list=sl, src=root, group=group)
    dist.barrier(group=group)
    work.wait()


def main() -> None:
    dist.init_process_group("gloo")
    from commlens import monitor

    capacity = int(os.environ.get("SUBJECT_CAPACITY", "65536"))
    rounds = int(os.environ.get("SUBJECT_ROUNDS", "1"))
    mon = monitor.start(port=None, window_s=3600, capacity=capacity, topology="local-cpu", hang_deadline_s=None)
    world = dist.get_world_size()
    sub = dist.new_group([0, 1]) if world == 4 else None
    if sub is not None:
        monitor.name_group(sub, "pair")
    for _ in range(rounds):
        issue(None, world, dist.get_rank())
        if sub is not None and dist.get_rank() in (0, 1):
            issue(sub, 2, dist.get_rank())
        monitor.step()
    records, _, lost = mon.recorder.read(0)
    rows = mon.close_window()
    monitor.stop()
    from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]

    from commlens.ingest.flightrec import loads_plain

    fr = loads_plain(_dump_fr_trace(includeStackTraces=False))
    fr_ops = [e.get("profiling_name", "") for e in fr.get("entries", [])]
    if dist.get_rank() == 0:
        out = {
            "records": [r.as_wire() for r in records],
            "lost": lost,
            "written": mon.recorder.written,
            "fr_ops": fr_ops,
            "rows": [r.as_wire() for r in rows],
            "model": mon.expectations.description if mon.expectations else None,
        }
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
