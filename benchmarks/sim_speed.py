"""Speed of `commlens sim`: wall time and peak memory of a 1 GiB ring all-reduce on 512, 4,096 and 16,384 GPUs
(nodes of 8, two-tier rail-optimized fat tree, ECMP and spraying) and of one whole training step of a 405B-class
layout on 16,384 GPUs with every TP, PP and DP group at once.

Each case runs in a fresh Python process; its peak memory is that process's peak resident set (ru_maxrss),
interpreter and imports included. ASTRA-sim 2.0's analytical backends, measured by this project on this machine
(shared/reference/peers-measured.md), are quoted for comparison.

    .venv/bin/python benchmarks/sim_speed.py [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from docsection import write_section

RING = """
import json, resource, sys, time
import numpy as np
from commlens.sim import Collective, simulate
from commlens.topology import load_topology
gpus, routing = int(sys.argv[1]), sys.argv[2]
topo = load_topology("h100-rail-2tier")
t = time.perf_counter()
r = simulate(topo, gpus // 8, [Collective("ar", "all_reduce", 1 << 30, np.arange(gpus)[None, :], algo="ring")],
             routing=routing)
wall = time.perf_counter() - t
c = r.collectives[0]
print(json.dumps({"wall_s": wall, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "time_s": c.time_s, "analytic_s": c.analytic_s, "busbw": c.busbw_bytes_per_s, "events": r.events}))
"""

STEP = """
import json, resource, time
from commlens.project.layout import ParallelLayout
from commlens.project.simstep import simulate_step
from commlens.topology import load_topology
from commlens.workload import load_workload
w = load_workload("llama3-405b").model_copy(update={"seq_len": 8192, "global_batch": 2048})
layout = ParallelLayout(tp=8, pp=16, first_stage_layers=7, last_stage_layers=7, dp=128, zero=1,
                        order=("tp", "cp", "pp", "dp"), recompute="full")
t = time.perf_counter()
d = simulate_step(w, load_topology("h100-rail-2tier"), layout, 16384)
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "step_s": d["step_time_s"], "projected_s": d["projected_step_time_s"],
                  "collectives": d["collectives"], "events": d["events"]}))
"""


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the section of docs/benchmarks.md")
    args = ap.parse_args()
    targets = {4096: 2.0, 16384: 30.0}
    rows = []
    for gpus in (512, 4096, 16384):
        for routing in ("ecmp", "spray"):
            m = _child(RING, str(gpus), routing)
            target = targets.get(gpus)
            bound = f"< {target:g} s, < 1 GiB" if target else "-"
            verdict = "-" if target is None else ("met" if m["wall_s"] < target and m["rss_mib"] < 1024 else "missed")
            rows.append(
                f"| 1 GiB ring all-reduce, {gpus:,} GPUs, {routing} | {m['wall_s']:.2f} s | {m['rss_mib']:.0f} MiB | "
                f"{m['time_s'] * 1e3:.2f} ms (analytic {m['analytic_s'] * 1e3:.2f}), busBW {m['busbw'] / 1e9:.1f} GB/s | "
                f"{bound} | {verdict} |"
            )
            print(rows[-1], flush=True)
    s = _child(STEP)
    rows.append(
        f"| whole step, Llama 3 405B layout (TP 8, PP 16, DP 128), 16,384 GPUs, ecmp | {s['wall_s']:.1f} s | "
        f"{s['rss_mib']:.0f} MiB | step {s['step_s']:.2f} s (projected {s['projected_s']:.2f} s), "
        f"{s['collectives']:,} collectives, {s['events']:,} events | < 60 s | "
        f"{'met' if s['wall_s'] < 60 else 'missed'} |"
    )
    print(rows[-1])
    body = [
        f"`.venv/bin/python benchmarks/sim_speed.py --write` on this machine ({os.cpu_count()} cores), topology preset "
        "`h100-rail-2tier` (DGX H100 nodes of 8, 8 x 400 Gb/s, two-tier rail-optimized non-blocking fat tree). Wall "
        "time of `simulate()` in a fresh process; peak memory is that process's peak RSS (interpreter, numpy and "
        "commlens included).",
        "",
        "| case | wall | peak memory | simulated | target | |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "ASTRA-sim 2.0 (analytical backends, astra-sim @518bd51, measured by this project on this machine, "
        "shared/reference/peers-measured.md), 1 GiB ring all-reduce: 512 NPUs in 2-4 s; 4,096 NPUs on a flat ring or "
        "switch in 5-9 minutes and 5.5 GB; 8 x 512 two-level in 40 s. Its analytical topologies have no fat tree and "
        "no ECMP; its congestion-aware backend is one-level only. commlens' ring is NCCL-like (one channel per rail, "
        "each crossing nodes on its own NIC), on the full two-tier fabric with its ECMP hash.",
    ]
    if args.write:
        write_section("## Simulator speed (issue 18)", body)


if __name__ == "__main__":
    main()
