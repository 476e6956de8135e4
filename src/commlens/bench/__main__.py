"""``python -m commlens.bench``: one rank of the benchmark, under any launcher (torchrun, mpirun, slurm).

A face of the CLI (it counts as ``cli`` in DESIGN.md's layers): rank 0 under an external launcher prints
the table and saves the run as its options say, through ``commlens.cli.bench_outputs``.
"""

import sys

from commlens.bench.worker import run_worker
from commlens.cli.bench_outputs import Outputs

if __name__ == "__main__":
    sys.exit(run_worker(sys.argv[1:], Outputs()))
