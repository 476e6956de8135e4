#!/usr/bin/env python
"""Issue 34: why rounds in fresh process groups reported more busBW than a raw loop.

Run from the repository root::

    .venv/bin/python benchmarks/fresh_groups.py              # 16 MiB, 8 trials; writes its section
    .venv/bin/python benchmarks/fresh_groups.py --no-write   # print only

One 4-rank gloo job (``torch.distributed.run --standalone``, this script launches itself) times all_reduce of
one float32 size four ways, the ways interleaved trial by trial (each trial rotates their order) so the
machine's load hits them alike:

- ``default 20``: 5 warm-up, then 20 back-to-back calls in the default process group (the raw loop of
  ``harness_overhead.py --sweep-compare``, and nccl-tests' loop);
- ``default 5x4``: 5 rounds of 4 in the default group (1 warm-up each, 5 in the first), a barrier before each;
- ``fresh 5x4``: the same rounds, each in a new group (``new_group``, destroyed after it), as
  ``commlens bench --round-groups fresh`` runs them;
- ``fresh 20``: one new group, 5 warm-up, 20 back-to-back.

A variant's time per iteration is the sum over its bursts of the slowest rank's burst time, over the
iterations; its busBW against ``default 20`` is taken per trial, then the median and range over trials. The
job also records the CPU time (user + system) rank 0 spent per timed iteration, and then the time of each of
the first 24 calls in a new group beside 24 calls in the long-lived default group (the slowest rank's, median
over the trials).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docsection import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Fresh process groups against a long-lived one (issue 34)"
VARIANTS = ("default 20", "default 5x4", "fresh 5x4", "fresh 20")
FIRST_CALLS = 24


def _worker(ns: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=600))
    buf = torch.ones(ns.size // 4, dtype=torch.float32)

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def slowest(x: float, group: object = None) -> float:
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return float(t)

    def burst(group: object, n: int, spent: list[float]) -> float:
        dist.barrier()
        c0, t0 = cpu(), time.perf_counter()
        for _ in range(n):
            dist.all_reduce(buf, group=group)
        took = time.perf_counter() - t0
        spent[0] += cpu() - c0
        return slowest(took)

    def variant(name: str) -> tuple[float, float]:
        fresh, rounds = name.startswith("fresh"), name.endswith("5x4")
        spent = [0.0]
        total = 0.0
        for r in range(5 if rounds else 1):
            group = dist.new_group(backend="gloo") if fresh else None
            for _ in range(5 if r == 0 else 1):
                dist.all_reduce(buf, group=group)
            total += burst(group, 4 if rounds else 20, spent)
            if group is not None:
                dist.destroy_process_group(group)
        return total / 20, spent[0] / 20

    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpus: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for t in range(ns.trials):
        for v in VARIANTS[t % len(VARIANTS) :] + VARIANTS[: t % len(VARIANTS)]:
            per_iter, cpu_iter = variant(v)
            times[v].append(per_iter)
            cpus[v].append(cpu_iter)
    first_fresh: list[list[float]] = [[] for _ in range(FIRST_CALLS)]
    first_default: list[list[float]] = [[] for _ in range(FIRST_CALLS)]
    for _ in range(ns.trials):
        for fresh, into in ((True, first_fresh), (False, first_default)):
            group = dist.new_group(backend="gloo") if fresh else None
            dist.barrier()
            for i in range(FIRST_CALLS):
                t0 = time.perf_counter()
                dist.all_reduce(buf, group=group)
                into[i].append(slowest(time.perf_counter() - t0, group))
            if group is not None:
                dist.destroy_process_group(group)
    if dist.get_rank() == 0:
        Path(ns.result).write_text(
            json.dumps({"times": times, "cpus": cpus, "first_fresh": first_fresh, "first_default": first_default})
        )
    dist.destroy_process_group()


def _row(name: str, data: dict[str, dict[str, list[float]]]) -> str:
    base, mine = data["times"]["default 20"], data["times"][name]
    gains = [b / m - 1 for b, m in zip(base, mine)]
    gain = "-" if name == "default 20" else f"{statistics.median(gains):+.1%}"
    spread = "-" if name == "default 20" else f"{min(gains):+.0%} .. {max(gains):+.0%}"
    return (
        f"| {name} | {statistics.median(mine) * 1e3:.1f} | {gain} | {spread} "
        f"| {statistics.median(data['cpus'][name]) * 1e3:.1f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=16 << 20, help="bytes of the all_reduce (float32)")
    p.add_argument("--trials", type=int, default=8, help="trials of the four ways (interleaved)")
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    ns = p.parse_args(argv)
    if ns.worker:
        _worker(ns)
        return
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="fresh-groups-") as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
        cmd += [str(Path(__file__).resolve()), "--worker", "--result", str(result)]
        cmd += ["--size", str(ns.size), "--trials", str(ns.trials)]
        t0 = time.perf_counter()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)
        wall = time.perf_counter() - t0
        data = json.loads(result.read_text())
    loads.append(os.getloadavg()[0])
    mib = ns.size / 2**20
    body = [
        f"`{' '.join(['.venv/bin/python', 'benchmarks/fresh_groups.py', *argv])}`, "
        f"{started}, {platform.node()} ({os.cpu_count()} CPUs, shared with other sessions: 1-minute load "
        f"{min(loads):.1f}-{max(loads):.1f}), {wall:.0f} s.",
        "",
        f"One 4-rank gloo job, all_reduce of {mib:g} MiB float32, four ways interleaved over {ns.trials} trials "
        "(see the script's docstring). busBW against 20 back-to-back calls in the default group: per trial, "
        "then the median and range over trials. CPU: rank 0's user + system time per timed iteration.",
        "",
        "| way | time per iteration, median (ms) | busBW vs default 20 | range over trials | CPU per iteration (ms) |",
        "|---|---:|---:|---:|---:|",
        *[_row(v, data) for v in VARIANTS],
        "",
        f"The first {FIRST_CALLS} calls in a new group beside {FIRST_CALLS} in the default group (slowest rank, "
        "median over trials, ms):",
        "",
        "| call | " + " | ".join(str(i + 1) for i in range(FIRST_CALLS)) + " |",
        "|---|" + "---:|" * FIRST_CALLS,
        "| new group | " + " | ".join(f"{statistics.median(x) * 1e3:.0f}" for x in data["first_fresh"]) + " |",
        "| default group | " + " | ".join(f"{statistics.median(x) * 1e3:.0f}" for x in data["first_default"]) + " |",
    ]
    print("\n".join(body))
    if not ns.no_write:
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
