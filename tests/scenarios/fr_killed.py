"""Record Flight Recorder dumps of a gloo job whose highest rank is killed (tests/data/hang_killed_last).

    torchrun --standalone --nproc-per-node 4 tests/scenarios/fr_killed.py --out tests/data/hang_killed_last

Every rank runs three healthy steps (all_reduce of a gradient, broadcast of
a flag), then the last rank SIGKILLs itself (as the kernel's OOM killer
would) before collective 7; it leaves no dump. The others' all_reduce fails
(recorded: gloo raises "Connection closed by peer"); ranks that get there
first dump through commlens.diagnose.flightrec's exception hook, the rest on
torchrun's SIGTERM (in the fixture: ranks 0 and 2, and rank 1). Since the killed rank is the highest, the file names do not
show it is missing; only the dumps' pg_config does.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal

import torch
import torch.distributed as dist

from commlens.diagnose import flightrec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
    try:
        flightrec.install(args.out, stack_traces=False)
        rank, world = dist.get_rank(), dist.get_world_size()
        grad = torch.ones(1024)
        for _ in range(3):
            dist.all_reduce(grad)
            dist.broadcast(torch.zeros(1, dtype=torch.int64), src=0)
        if rank == world - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(grad)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
