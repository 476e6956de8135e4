"""Record real gloo Flight Recorder dumps in PyTorch's JSON form (fixtures for tests/test_ingest_flightrec.py).

    torchrun --standalone --nproc-per-node 3 tests/scenarios/fr_json.py --out tests/data/flightrec_gloo_json

Three ranks run two steps (all_reduce of a gradient, broadcast of a flag,
and a send/recv pair between ranks 0 and 1), then rank 2 all-reduces int32
where the others use float32 (same byte count: gloo sums the bits and the
job goes on). torch 2.13's gloo recorder leaves send/recv out (measured:
only the collectives and the barrier are entries). Every rank then writes ``_dump_fr_trace_json()`` (torch 2.13:
layout 2.10) to ``fr_trace_rank_<rank>.json``.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    try:
        rank = dist.get_rank()
        grad = torch.ones(256)
        for _ in range(2):
            dist.all_reduce(grad)
            dist.broadcast(torch.zeros(1, dtype=torch.int64), src=0)
            if rank == 0:
                dist.send(torch.ones(16), dst=1)
            elif rank == 1:
                dist.recv(torch.empty(16), src=0)
        dist.all_reduce(grad.int() if rank == 2 else grad)
        dist.barrier()
        from torch._C._distributed_c10d import _dump_fr_trace_json

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"fr_trace_rank_{rank}.json").write_bytes(_dump_fr_trace_json(includeCollectives=True, onlyActive=False))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
