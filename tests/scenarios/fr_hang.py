"""Produce Flight Recorder dumps of a gloo job that hangs or mismatches (fixtures for tests/test_diagnose_hang.py).

Run once per scenario, e.g.:

    torchrun --nproc-per-node 4 tests/scenarios/fr_hang.py --scenario hang --out tests/data/hang_skip

Every rank runs three healthy training-like steps (all_reduce of gradients,
broadcast of a flag), then the scenario's fault at step 3, with a 3 s process
group timeout. Dumps are written by ``commlens.diagnose.flightrec``:

- ``hang``: rank 2 skips the step-3 all_reduce and sits in a slow "data
  loader" (sleep); the others time out, raise, and dump through the exception
  hook; torchrun then SIGTERMs rank 2, which dumps from its signal handler.
- ``op_mismatch``: rank 1 calls broadcast where the others call all_reduce.
- ``dtype_mismatch``: rank 3 all-reduces int32 where the others use float32
  (same byte count, so gloo sums the bits silently and the job goes on:
  every rank dumps on demand at the end). With float64 instead, gloo aborts
  one rank (``EnforceNotMet``, SIGABRT): that is ``dtype_abort``.
- ``dtype_abort``: rank 3 all-reduces float64 where the others use float32;
  gloo aborts rank 2 (no dump); ranks 0, 1, 3 raise and dump, their dumps
  without per-entry stack traces (the symbolizing dump hangs while the
  collective is stuck; see commlens.diagnose.flightrec).
- ``healthy``: no fault; every rank dumps on demand at the end.
"""

from __future__ import annotations

import argparse
import datetime
import time

import torch
import torch.distributed as dist

from commlens.diagnose import flightrec


def step(grad: torch.Tensor) -> None:
    dist.all_reduce(grad)
    flag = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(flag, src=0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--scenario", required=True, choices=["hang", "op_mismatch", "dtype_mismatch", "dtype_abort", "healthy"]
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
    try:
        flightrec.install(args.out)
        rank = dist.get_rank()
        grad = torch.ones(1024)
        for _ in range(3):
            step(grad)
        if args.scenario == "hang":
            if rank == 2:
                time.sleep(60)  # stuck outside any collective; torchrun's SIGTERM ends it
            else:
                dist.all_reduce(grad)
        elif args.scenario == "op_mismatch":
            if rank == 1:
                dist.broadcast(grad, src=0)
            else:
                dist.all_reduce(grad)
        elif args.scenario == "dtype_mismatch":
            dist.all_reduce(grad.int() if rank == 3 else grad)
        elif args.scenario == "dtype_abort":
            dist.all_reduce(grad.double() if rank == 3 else grad)
        step(grad)
        dist.barrier()
        if args.scenario in ("healthy", "dtype_mismatch"):
            flightrec.dump(reason="end of run")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
