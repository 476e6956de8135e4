"""Record PyTorch profiler (Kineto) traces of a gloo training-like loop with one late rank.

Fixture for tests/test_diagnose_stragglers.py; run once:

    torchrun --nproc-per-node 3 tests/scenarios/straggler_trace.py --out tests/data/stragglers_late_rank1

Each of 10 steps does a small matmul ("forward/backward"), then all-reduces
a 64 KiB gradient and broadcasts a 1-element flag. Rank ``--late-rank``
sleeps ``--late-ms`` before each all_reduce, so its peers wait for it there:
a persistent late arriver. Each rank writes ``trace_rank<R>.json`` (Chrome
trace), with the profiler's own timestamps (same host: a shared clock).

With ``--active N`` the profiler runs on a schedule instead, as training jobs
use it: it records shapes, samples N steps after one warm-up step, and writes
gzipped traces through PyTorch's ``tensorboard_trace_handler``
(``<worker>.<time>.pt.trace.json.gz``). ``--shifted-rank R`` starts rank R's
window one step later, so the ranks' traces cover different steps
(tests/data/kineto_gloo_sampled)::

    torchrun --nproc-per-node 3 tests/scenarios/straggler_trace.py --out tests/data/kineto_gloo_sampled \
        --steps 8 --active 4 --shifted-rank 2
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def _step(
    args: argparse.Namespace, rank: int, weight: torch.Tensor, grad: torch.Tensor, flag: torch.Tensor
) -> torch.Tensor:
    weight = torch.tanh(weight @ weight) * 0.5
    if rank == args.late_rank:
        time.sleep(args.late_ms / 1e3)
    dist.all_reduce(grad)
    dist.broadcast(flag, src=0)
    return weight


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--late-rank", type=int, default=1)
    parser.add_argument("--late-ms", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--active", type=int, default=0, help="profile on a schedule: this many steps, gzipped")
    parser.add_argument(
        "--shifted-rank", type=int, default=-1, help="with --active: this rank's window starts one step later"
    )
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    try:
        rank = dist.get_rank()
        torch.manual_seed(rank)
        weight = torch.randn(64, 64)
        grad = torch.zeros(16384)
        flag = torch.zeros(1)
        dist.barrier()
        if args.active:
            sampled = schedule(
                skip_first=1 + (rank == args.shifted_rank), wait=0, warmup=1, active=args.active, repeat=1
            )
            handler = tensorboard_trace_handler(args.out, worker_name=f"rank{rank}", use_gzip=True)
            with profile(
                activities=[ProfilerActivity.CPU], schedule=sampled, on_trace_ready=handler, record_shapes=True
            ) as prof:
                for _ in range(args.steps):
                    weight = _step(args, rank, weight, grad, flag)
                    prof.step()
            return
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                weight = _step(args, rank, weight, grad, flag)
        os.makedirs(args.out, exist_ok=True)
        prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
