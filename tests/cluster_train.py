"""Run ``examples/train_monitored.py`` as ranks on the hosts of an emulated cluster (for test_monitor_cluster).

``python tests/cluster_train.py --cluster NAME --world 4 --ranks-per-host R --workdir DIR -- TRAIN_ARGS``

The ranks are launched the way ``commlens bench --cluster`` launches its own: through
``commlens.bench.launcher.launch_ranks`` (torch's elastic launcher, the rendezvous store bound to the
cluster's bridge address only), each rank entering its host through ``commlens.cluster.place``, which
picks host ``LOCAL_RANK // R``, joins a CPU-starved host's cgroup and sets ``COMMLENS_CLUSTER_HOST``. With
``--world 4 --ranks-per-host 3`` ranks 0-2 are on host 0 and rank 3 alone on host 1. The training script
runs as the module ``train_monitored`` (``examples/`` put on ``PYTHONPATH``, which the ranks inherit).
Exit code 0 when every rank ended well; 1 with each failed rank's stderr printed otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from commlens.bench.launcher import Ranks, RanksFailed, launch_ranks, rank_stderr
from commlens.cluster import load_state

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--ranks-per-host", type=int, required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("train_args", nargs=argparse.REMAINDER)
    ns = p.parse_args()
    train_args = ns.train_args[1:] if ns.train_args[:1] == ["--"] else ns.train_args
    state = load_state(ns.cluster)
    prefix = (
        "-m",
        "commlens.cluster.place",
        "--cluster",
        ns.cluster,
        "--ranks-per-host",
        str(ns.ranks_per_host),
        "--",
    )
    ranks = Ranks(ns.world, prefix, state.bridge_address)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))
    workdir = Path(ns.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        interrupted = launch_ranks("train_monitored", train_args, ranks, workdir, capture_stderr=True)
    except RanksFailed as e:
        for rank in sorted(e.failures):
            print(f"rank {rank} failed:\n{rank_stderr(workdir, rank)}", file=sys.stderr)
        return 1
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
