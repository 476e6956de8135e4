"""Speed of `commlens sim`: wall time and peak memory of a 1 GiB ring all-reduce on 512, 4,096 and 16,384 GPUs
(nodes of 8, two-tier rail-optimized fat tree, ECMP and spraying) and of one whole training step of a 405B-class
layout on 16,384 GPUs with every TP, PP and DP group at once.

Each case runs in a fresh Python process (``python -c``); its peak memory is that process's own peak resident set
(``resource.getrusage(RUSAGE_SELF).ru_maxrss`` read in the child at the end: interpreter, numpy and commlens
included). ASTRA-sim 2.0's analytical backends, measured by this project on this machine
(shared/reference/peers-measured.md), are quoted for comparison.

Writes the subsection ``### Speed`` of ``## Simulator (issue 18)`` in docs/benchmarks.md.

    .venv/bin/python benchmarks/sim_speed.py [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

from docsection import DOC, DOC_TITLE

SECTION = "## Simulator (issue 18)"
GPU_COUNTS = (512, 4096, 16384)
TARGET_WALL_S = {4096: 2.0, 16384: 30.0}
TARGET_RSS_MIB = 1024.0
STEP_TARGET_S = 60.0

RING = """
import json, resource, sys, time
import numpy as np
from commlens.sim import Collective, SimConfig, SimOptions, run
from commlens.topology import load_topology
gpus, routing = int(sys.argv[1]), sys.argv[2]
topo = load_topology("h100-rail-2tier")
t = time.perf_counter()
r = run(SimConfig(topo, gpus // 8, (Collective("ar", "all_reduce", 1 << 30, np.arange(gpus)[None, :], algo="ring"),),
                  SimOptions(routing)))
wall = time.perf_counter() - t
c = r.collectives[0]
print(json.dumps({"wall_s": wall, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "time_s": c.time_s, "analytic_s": c.analytic_s, "busbw": c.busbw_bytes_per_s, "events": r.events}))
"""

# The whole-step case (`commlens sim step`): Llama 3 405B as Meta trained it, TP 8, PP 16, DP 128, every group at once.
STEP = """
import json, resource, time
from commlens.project import Scenario
from commlens.project.layout import ParallelLayout
from commlens.project.simstep import simulate_step
from commlens.topology import load_topology
from commlens.workload import load_workload
w = load_workload("llama3-405b").model_copy(update={"seq_len": 8192, "global_batch": 2048})
layout = ParallelLayout(tp=8, pp=16, first_stage_layers=7, last_stage_layers=7, dp=128, zero=1,
                        order=("tp", "cp", "pp", "dp"), recompute="full")
t = time.perf_counter()
d = simulate_step(Scenario(w, load_topology("h100-rail-2tier"), layout, 16384))
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "step_s": d.step_time_s, "projected_s": d.projected_step_time_s,
                  "collectives": d.collectives, "events": d.events}))
"""


def write_subsection(title: str, body: list[str]) -> None:
    """Replace (or append) ``### title`` inside ``## Simulator (issue 18)`` of docs/benchmarks.md, read just before."""
    text = DOC.read_text() if DOC.exists() else DOC_TITLE + "\n"
    sub = f"### {title}\n\n" + "\n".join(body).rstrip() + "\n"
    sec_re = re.compile(r"^" + re.escape(SECTION) + r"[ \t]*\n.*?(?=^## |\Z)", re.S | re.M)
    found = sec_re.search(text)
    if found is None:
        text = text.rstrip() + f"\n\n{SECTION}\n\n{sub}"
    else:
        section = found.group(0).rstrip() + "\n"
        sub_re = re.compile(r"^### " + re.escape(title) + r"[ \t]*\n.*?(?=^### |\Z)", re.S | re.M)
        if sub_re.search(section):
            section = sub_re.sub(lambda _: sub + "\n", section, count=1)
        else:
            section = section.rstrip() + "\n\n" + sub
        text = text[: found.start()] + section.rstrip() + "\n\n" + text[found.end() :]
        text = text.rstrip() + "\n"
    DOC.write_text(text)


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _verdict(wall_s: float, rss_mib: float, target_s: float) -> str:
    return "pass" if wall_s < target_s and rss_mib < TARGET_RSS_MIB else "miss"


def ring_rows() -> list[str]:
    rows = []
    for gpus in GPU_COUNTS:
        for routing in ("ecmp", "spray"):
            m = _child(RING, str(gpus), routing)
            target = TARGET_WALL_S.get(gpus)
            bound = f"< {target:g} s, < 1 GiB" if target else "< 1 GiB"
            verdict = _verdict(m["wall_s"], m["rss_mib"], target if target else float("inf"))
            rows.append(
                f"| 1 GiB ring all-reduce, {gpus:,} GPUs, {routing} | {m['wall_s']:.2f} s | {m['rss_mib']:.0f} MiB | "
                f"{m['time_s'] * 1e3:.2f} ms (analytic {m['analytic_s'] * 1e3:.2f}), busBW {m['busbw'] / 1e9:.1f} "
                f"GB/s, {m['events']:,} events | {bound} | {verdict} |"
            )
            print(rows[-1], flush=True)
    return rows


def step_row() -> str:
    s = _child(STEP)
    return (
        f"| whole step, Llama 3 405B (TP 8, PP 16, DP 128), 16,384 GPUs, ecmp (`commlens sim step`) | "
        f"{s['wall_s']:.1f} s | {s['rss_mib']:.0f} MiB | step {s['step_s']:.2f} s (projected {s['projected_s']:.2f} s), "
        f"{s['collectives']:,} collectives, {s['events']:,} events | < {STEP_TARGET_S:g} s, < 1 GiB | "
        f"{_verdict(s['wall_s'], s['rss_mib'], STEP_TARGET_S)} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the subsection of docs/benchmarks.md")
    args = ap.parse_args()
    rows = ring_rows()
    rows.append(step_row())
    print(rows[-1])
    body = [
        f"`.venv/bin/python benchmarks/sim_speed.py --write` on this machine ({os.cpu_count()} cores), topology preset "
        "`h100-rail-2tier` (DGX H100 nodes of 8, 8 x 400 Gb/s, two-tier rail-optimized non-blocking fat tree). Wall "
        "time of the simulation call alone, in a fresh process per case; peak memory is that child process's own peak "
        "RSS (`getrusage(RUSAGE_SELF).ru_maxrss` read in the child as it ends: interpreter, numpy and commlens "
        "included, so about 45 MiB of it is the interpreter and imports). A ring's 2(p - 1) steps move over the "
        "same connections, so the simulator moves them as one stage of flows (one bundle: a start and a finish "
        "event) rather than step by step; the whole step has every TP, PP and DP group of the layout at once.",
        "",
        "| case | wall | peak memory | simulated | target | |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "For comparison, ASTRA-sim 2.0 (astra-sim/astra-sim @518bd51, analytical backends), 1 GiB ring all-reduce at "
        "400 GB/s and 1 us per step: 512 NPUs in 2-4 s; 4,096 NPUs on a flat ring or switch in 5-9 minutes and 5.5 GB "
        "of memory; 4,096 NPUs as 8 x 512 two-level in 40 s. These were measured by this project on this machine "
        "(shared/reference/peers-measured.md, 2026-11-29), not published by ASTRA-sim. Its analytical topologies have "
        "no fat tree and no ECMP, and its congestion-aware backend is one-level only; commlens' ring is NCCL-like "
        "(one channel per rail, each crossing nodes on its own NIC) on the full two-tier fabric with its ECMP hash, "
        "so the comparison is of cost for a comparable question, not of identical models.",
    ]
    if args.write:
        write_subsection("Speed", body)


if __name__ == "__main__":
    main()
