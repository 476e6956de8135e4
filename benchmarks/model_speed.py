#!/usr/bin/env python
"""Issue 4's speed targets: one prediction under 50 us; 30 sizes x 9 ops x every algorithm under 1 s.

Run from the repository root::

    .venv/bin/python benchmarks/model_speed.py

Times, in this process (``time.perf_counter``; each figure the median and the
best of ``--repeat`` rounds, since the machine is shared):

1. one prediction, ``predict(dgx-h100, all_reduce, 1 GiB, algo=ring)``, on one
   node and on 16 nodes (a round is 2,000 calls), and with ``algo=auto``
   (every all_reduce algorithm evaluated, the fastest kept);
2. the sweep: 30 sizes (8 B x 2^k) x the 9 payload ops x every algorithm with
   a model for the op, each (op, size, algorithm) predicted on 16 DGX H100
   nodes (infeasible ones answer with their reason, and count);
3. the command ``commlens model predict`` in a fresh process (start-up,
   imports, one prediction), and ``--sweep`` of every op.

Writes the subsection ``### Speed`` of ``## Cost model (issue 4)`` in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_validation import ROOT, write_subsection  # noqa: E402

SINGLE_TARGET_S = 50e-6
SWEEP_TARGET_S = 1.0


def _rounds(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def single(repeat: int) -> list[tuple[str, float, float]]:
    from commlens.model import predict
    from commlens.topology import load_topology

    h100 = load_topology("dgx-h100")
    calls = 2000
    out = []
    for label, kwargs in (
        ("ring, 1 node", dict(algo="ring")),
        ("ring, 16 nodes", dict(algo="ring", nodes=16)),
        ("auto (7 algorithms), 1 node", dict(algo="auto")),
        ("auto (7 algorithms), 16 nodes", dict(algo="auto", nodes=16)),
    ):

        def loop(kwargs=kwargs) -> None:
            for _ in range(calls):
                predict(h100, "all_reduce", 1 << 30, **kwargs)

        loop()  # warm the layout cache, as any second call finds it
        med, best = _rounds(loop, repeat)
        out.append((label, med / calls, best / calls))
    return out


def sweep(repeat: int) -> tuple[int, int, float, float]:
    from commlens.model import InfeasibleError, predict_algorithms
    from commlens.ops import OP_NAMES
    from commlens.topology import load_topology

    h100 = load_topology("dgx-h100")
    ops = [op for op in OP_NAMES if op != "barrier"]
    sizes = [8 << k for k in range(30)]
    counts = [0, 0]

    def run() -> None:
        counts[0] = counts[1] = 0
        for op in ops:
            for size in sizes:
                for result in predict_algorithms(h100, op, size, nodes=16).values():
                    counts[1 if isinstance(result, InfeasibleError) else 0] += 1

    med, best = _rounds(run, repeat)
    return counts[0], counts[1], med, best


def cli(repeat: int) -> list[tuple[str, float, float]]:
    exe = str(ROOT / ".venv" / "bin" / "commlens")
    out = []
    for label, args in (
        (
            "`commlens model predict -t dgx-h100 -N 16 --size 1G`",
            ["model", "predict", "-t", "dgx-h100", "-N", "16", "--size", "1G"],
        ),
        (
            "`commlens model predict -t dgx-h100 -N 16 --op all --sweep -b 8 -e 4G`",
            ["model", "predict", "-t", "dgx-h100", "-N", "16", "--op", "all", "--sweep", "-b", "8", "-e", "4G"],
        ),
    ):

        def once(args=args) -> None:
            subprocess.run([exe, *args], check=True, stdout=subprocess.DEVNULL)

        med, best = _rounds(once, repeat)
        out.append((label, med, best))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="rounds per figure (median and best reported)")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch docs/benchmarks.md")
    args = parser.parse_args()
    started = dt.datetime.now(dt.timezone.utc)
    body = [
        f"Produced by `.venv/bin/python benchmarks/model_speed.py`, {started.isoformat(timespec='seconds')}. "
        f"Python {platform.python_version()} on {platform.machine()}, shared machine: each figure is the "
        f"median (and best) of {args.repeat} rounds.",
        "",
        "| what | median | best | target | met |",
        "|---|---:|---:|---|---|",
    ]
    for label, med, best in single(args.repeat):
        target = "< 50 us" if label.startswith("ring") else "-"
        met = ("yes" if med < SINGLE_TARGET_S else "**no**") if target != "-" else "-"
        body.append(
            f"| one prediction, all_reduce 1 GiB on dgx-h100, {label} | {med * 1e6:.1f} us | "
            f"{best * 1e6:.1f} us | {target} | {met} |"
        )
    feasible, infeasible, med, best = sweep(args.repeat)
    body.append(
        f"| sweep: 30 sizes x 9 ops x every algorithm of each op, 16 x dgx-h100 ({feasible + infeasible} "
        f"predictions, {infeasible} infeasible) | {med * 1e3:.0f} ms | {best * 1e3:.0f} ms | "
        f"< 1 s | {'yes' if med < SWEEP_TARGET_S else '**no**'} |"
    )
    for label, med, cbest in cli(max(3, args.repeat // 2)):
        body.append(f"| {label}, fresh process | {med * 1e3:.0f} ms | {cbest * 1e3:.0f} ms | - | - |")
    body += [
        "",
        "The per-call figure is the whole `predict()` call: layout lookup (cached per topology and job "
        "shape), the algorithm's stages, the prediction record; `auto` evaluates every algorithm of the "
        "op. The command's time is mostly interpreter start-up and imports (typer, pydantic, PyYAML; no "
        "torch, numpy or scipy).",
    ]
    print("\n".join(body))
    if not args.no_write:
        write_subsection("Speed", body)


if __name__ == "__main__":
    main()
