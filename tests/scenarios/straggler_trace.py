"""Record PyTorch profiler (Kineto) traces of a gloo training-like loop with one late rank.

Fixture for tests/test_diagnose_stragglers.py; run once:

    torchrun --nproc-per-node 3 tests/scenarios/straggler_trace.py --out tests/data/stragglers_late_rank1

Each of 10 steps does a small matmul ("forward/backward"), then all-reduces
a 64 KiB gradient and broadcasts a 1-element flag. Rank ``--late-rank``
sleeps ``--late-ms`` before each all_reduce, so its peers wait for it there:
a persistent late arriver. Each rank writes ``trace_rank<R>.json`` (Chrome
trace), with the profiler's own timestamps (same host: a shared clock).
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--late-rank", type=int, default=1)
    parser.add_argument("--late-ms", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    try:
        rank = dist.get_rank()
        torch.manual_seed(rank)
        weight = torch.randn(64, 64)
        grad = torch.zeros(16384)
        flag = torch.zeros(1)
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                weight = torch.tanh(weight @ weight) * 0.5
                if rank == args.late_rank:
                    time.sleep(args.late_ms / 1e3)
                dist.all_reduce(grad)
                dist.broadcast(flag, src=0)
        os.makedirs(args.out, exist_ok=True)
        prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
