#!/usr/bin/env python
"""Issue 15's overhead targets for the in-job monitor: step time with and without it, and one record's cost.

Run from the repository root::

    .venv/bin/python benchmarks/monitor_overhead.py

It writes the section ``## In-job monitor overhead (issue 15)`` of
``docs/benchmarks.md`` (other sections are left as they are) and prints the
same figures. Two parts:

1. **Training loop.** ``examples/train_monitored.py`` (a few transformer
   layers under DDP, gloo, 4 ranks, ``torch.distributed.run --standalone``),
   launched ``--pairs`` times monitored (``--jsonl-dir``, the monitor as a
   user runs it) and as many times unmonitored (``--no-monitor``),
   interleaved: each pair runs both, and pairs alternate which goes first.
   Each launch writes every rank's step times (``--step-times``); the
   launch's figure is the median over the steps after ``--warmup-steps`` of
   the step's time, max across ranks. The overhead is the mean of the
   per-pair ratios monitored / unmonitored, with a 95% Student t interval
   over those ratios. Target: at most 1% of step time.
2. **One recorded collective.** In this process, a 1-rank gloo group:
   blocks of ``--calls`` calls of ``torch.distributed.all_reduce`` on a
   4-byte tensor, blocking and async (``async_op=True`` then ``wait()``, as
   DDP's comm hook and FSDP2 issue them), alternately bare and wrapped by
   :class:`commlens.monitor.recorder.Recorder` (``install()`` /
   ``uninstall()`` around each block); the cost is the difference of the
   medians over blocks of the per-call time, with a seeded bootstrap
   interval over block pairs. Memory: a fresh Recorder's ring filled with
   ``DEFAULT_CAPACITY`` records by real wrapped calls, the memory it keeps
   measured with ``tracemalloc``, checked against ``sys.getsizeof`` of the
   ring's tuples and the objects only they hold.

Wall time: each launch costs about 30-40 s on a 2-core machine (start-up of
4 torch processes is most of it; 150 steps add about 8 s), so the default 10
pairs (20 launches) take about 12 minutes, part 2 about a minute more. ``--quick`` is a smoke run (1 pair of
short launches, small blocks, about 1.5 minutes) that never writes the docs.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import argparse
import datetime as dt
import gc
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from docsection import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## In-job monitor overhead (issue 15)"
EXAMPLE = ROOT / "examples" / "train_monitored.py"
TARGET_RATIO = 1.01  # overhead at most 1% of step time


# --------------------------------------------------------------------------- part 1: the training loop


def _launch(ns: argparse.Namespace, monitored: bool, workdir: Path, tag: str) -> dict[str, Any]:
    """One training job; its median step time (max across ranks, warm-up dropped) and what it recorded."""
    prefix = workdir / f"{tag}.steps"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ns.nproc),
        str(EXAMPLE),
        "--parallel",
        ns.parallel,
        "--steps",
        str(ns.steps),
        "--step-times",
        str(prefix),
    ]
    jsonl = workdir / f"{tag}.jsonl"
    cmd += ["--jsonl-dir", str(jsonl)] if monitored else ["--no-monitor"]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun and commlens bench set it
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=ns.launch_timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"launch {tag} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    per_rank = [json.loads(Path(f"{prefix}.{r}").read_text()) for r in range(ns.nproc)]
    steps = [max(ts[i] for ts in per_rank) for i in range(ns.warmup_steps, ns.steps)]
    recorded = None
    if monitored:
        lines = (jsonl / "monitor-rank0.jsonl").read_text().splitlines()
        recorded = sum(1 for line in lines if line.startswith('{"type":"record"'))
    return {"median_s": statistics.median(steps), "steps": len(steps), "wall_s": wall, "recorded_rank0": recorded}


def _t_interval(values: list[float]) -> tuple[float, float] | None:
    """95% Student t interval of the mean of ``values`` (None for fewer than 2)."""
    if len(values) < 2:
        return None
    from scipy import stats

    mean = statistics.fmean(values)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return mean - half, mean + half


def _training(ns: argparse.Namespace) -> list[dict[str, Any]]:
    pairs = []
    with tempfile.TemporaryDirectory(prefix="commlens-monoverhead-") as tmp:
        for i in range(ns.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            got: dict[bool, dict[str, Any]] = {}
            for monitored in order:
                got[monitored] = _launch(ns, monitored, Path(tmp), f"p{i}-{'mon' if monitored else 'bare'}")
            mon, bare = got[True], got[False]
            pair = {
                "pair": i + 1,
                "first": "monitored" if order[0] else "unmonitored",
                "monitored_s": mon["median_s"],
                "unmonitored_s": bare["median_s"],
                "ratio": mon["median_s"] / bare["median_s"],
                "steps": mon["steps"],
                "recorded_rank0": mon["recorded_rank0"],
                "wall_s": mon["wall_s"] + bare["wall_s"],
            }
            pairs.append(pair)
            print(
                f"  pair {i + 1}/{ns.pairs} ({pair['first']} first): monitored {mon['median_s'] * 1e3:.2f} ms, "
                f"unmonitored {bare['median_s'] * 1e3:.2f} ms, ratio {pair['ratio']:.4f} ({pair['wall_s']:.0f} s)",
                flush=True,
            )
    return pairs


# --------------------------------------------------------------------------- part 2: one recorded collective


def _bootstrap_diff(wrapped: list[float], bare: list[float], resamples: int = 4000) -> tuple[float, float]:
    """95% bootstrap interval of median(wrapped) - median(bare), resampling blocks as pairs (seeded)."""
    rng = random.Random(15)
    n = len(wrapped)
    diffs = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        diffs.append(statistics.median(wrapped[i] for i in idx) - statistics.median(bare[i] for i in idx))
    diffs.sort()
    return diffs[int(0.025 * resamples)], diffs[int(0.975 * resamples) - 1]


def _per_call(ns: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from commlens.monitor.recorder import DEFAULT_CAPACITY, Recorder

    with tempfile.TemporaryDirectory(prefix="commlens-monpercall-") as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            tensor = torch.zeros(1, dtype=torch.float32)
            recorder = Recorder()
            recorder.step = 1000  # as in a job: monitor.step() has set it

            def noop(_fut: Any) -> None:
                return None

            def block(mode: str) -> float:
                call = dist.all_reduce  # the installed wrapper, or the original
                t0 = time.perf_counter()
                if mode == "blocking":
                    for _ in range(ns.calls):
                        call(tensor)
                elif mode == "async":
                    for _ in range(ns.calls):
                        call(tensor, async_op=True).wait()
                else:  # "future": what the wrapper asks of torch for an async call, with nothing recorded
                    for _ in range(ns.calls):
                        work = call(tensor, async_op=True)
                        work.get_future().add_done_callback(noop)
                        work.wait()
                return (time.perf_counter() - t0) / ns.calls

            def timed(mode: str, wrapped: bool) -> float:
                if wrapped:
                    recorder.install()
                try:
                    return block(mode)
                finally:
                    if wrapped:
                        recorder.uninstall()

            def run(mode: str, with_it: bool) -> float:
                """One block; "future" compares an unrecorded async call with and without a future callback."""
                if mode == "future":
                    return timed("future" if with_it else "async", False)
                return timed(mode, with_it)

            modes: dict[str, Any] = {}
            for mode in ("blocking", "async", "future"):
                run(mode, False)  # warm-up, both ways
                run(mode, True)
                bare: list[float] = []
                wrapped: list[float] = []
                for b in range(ns.blocks):
                    for w in (True, False) if b % 2 == 0 else (False, True):
                        (wrapped if w else bare).append(run(mode, w))
                diff = statistics.median(wrapped) - statistics.median(bare)
                lo, hi = _bootstrap_diff(wrapped, bare)
                m = modes[mode] = {
                    "bare_us": statistics.median(bare) * 1e6,
                    "wrapped_us": statistics.median(wrapped) * 1e6,
                    "diff_us": diff * 1e6,
                    "ci_lo_us": lo * 1e6,
                    "ci_hi_us": hi * 1e6,
                }
                print(
                    f"  {mode} all_reduce 4 B: without {m['bare_us']:.2f} us, with {m['wrapped_us']:.2f} us, "
                    f"cost {m['diff_us']:+.2f} us (95% CI {m['ci_lo_us']:+.2f} to {m['ci_hi_us']:+.2f})",
                    flush=True,
                )
            modes["memory"] = _ring_memory(ns.capacity or DEFAULT_CAPACITY, tensor)
            modes["default_capacity"] = DEFAULT_CAPACITY
        finally:
            dist.destroy_process_group()
    return modes


def _ring_memory(capacity: int, tensor: Any) -> dict[str, Any]:
    """Bytes a full ring keeps: tracemalloc around filling it, and sys.getsizeof of what only its slots hold."""
    import torch.distributed as dist

    from commlens.monitor.recorder import Recorder

    recorder = Recorder(capacity)
    recorder.step = 1000
    recorder.install()
    try:
        dist.all_reduce(tensor)  # registers the group (once per job) before the count starts
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(capacity - 1):
            dist.all_reduce(tensor)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    finally:
        recorder.uninstall()
    ring = recorder._ring  # the benchmark measures the ring itself
    slots = [s for s in ring if s is not None]
    holders: dict[int, int] = {}
    objects: dict[int, Any] = {}
    for slot in slots:
        for item in slot:
            holders[id(item)] = holders.get(id(item), 0) + 1
            objects[id(item)] = item
    own = sum(sys.getsizeof(objects[k]) for k, n in holders.items() if n == 1)  # held by one slot only
    shared = sum(sys.getsizeof(objects[k]) for k, n in holders.items() if n > 1)
    tuples = sum(sys.getsizeof(s) for s in slots)
    list_bytes = sys.getsizeof(ring)
    traced_per = (after - before) / (capacity - 1)
    size_per = (tuples + own) / len(slots)
    return {
        "capacity": capacity,
        "filled": len(slots),
        "slot_example": repr(slots[-1]),
        "traced_per_record_b": traced_per,
        "getsizeof_per_record_b": size_per,
        "list_per_slot_b": list_bytes / capacity,
        "shared_b": shared,
    }


# --------------------------------------------------------------------------- report


def _verdict(ci: tuple[float, float] | None, mean: float) -> str:
    if ci is None:
        return "not judged (one pair gives no interval)"
    if ci[1] <= TARGET_RATIO:
        return "met (the interval's upper end is at most 1.01)"
    if ci[0] > TARGET_RATIO:
        return "**missed** (the whole interval is above 1.01)"
    return f"not resolved (the interval spans 1.01; mean {mean:.4f}); more pairs would narrow it"


def _report(ns: argparse.Namespace, argv: list[str], pairs: list[dict[str, Any]], call: dict[str, Any]) -> list[str]:
    import torch

    ratios = [p["ratio"] for p in pairs]
    mean = statistics.fmean(ratios)
    ci = _t_interval(ratios)
    ci_text = "n/a (one pair)" if ci is None else f"{ci[0]:.4f} to {ci[1]:.4f}"
    exe = Path(sys.executable)
    py = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else "python"
    cmd = f"{py} benchmarks/monitor_overhead.py" + ("" if not argv else " " + shlex.join(argv))
    mem = call["memory"]
    bare_ms = statistics.fmean(p["unmonitored_s"] for p in pairs) * 1e3
    per_step = [p["recorded_rank0"] / ns.steps for p in pairs if p["recorded_rank0"] is not None]
    colls = statistics.fmean(per_step) if per_step else 0.0
    async_us = call["async"]["diff_us"]
    full_mib = (mem["traced_per_record_b"] + mem["list_per_slot_b"]) * call["default_capacity"] / 2**20
    body = [
        f"Produced by `{cmd}` (from the repository root), {ns.started}; total {ns.total_s:.0f} s.",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}, gloo on CPU, one host; "
        f"1-minute load average {ns.load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. "
        f"The job has {ns.nproc} ranks on {os.cpu_count()} cores, so it is oversubscribed: ranks take turns on "
        "the cores, and the step times are those of a crowded machine, not of a rank with a core to itself.",
        "",
        "### Step time with and without the monitor",
        "",
        f"`examples/train_monitored.py --parallel {ns.parallel} --steps {ns.steps}` under "
        f"`torch.distributed.run --standalone --nproc-per-node {ns.nproc}`, {ns.pairs} pair(s) of launches, "
        "interleaved (each pair runs the job monitored, with `--jsonl-dir`, and unmonitored, with "
        "`--no-monitor`; pairs alternate which goes first). A launch's figure: the median, over the steps "
        f"after the first {ns.warmup_steps}, of each step's time, max across ranks. Ratio = monitored / "
        "unmonitored per pair; the overhead is their mean, with a 95% Student t interval over the per-pair "
        "ratios.",
        "",
        "| pair | first | monitored (ms) | unmonitored (ms) | ratio |",
        "|---:|---|---:|---:|---:|",
        *[
            f"| {p['pair']} | {p['first']} | {p['monitored_s'] * 1e3:.2f} | {p['unmonitored_s'] * 1e3:.2f} "
            f"| {p['ratio']:.4f} |"
            for p in pairs
        ],
        "",
        f"Mean ratio {mean:.4f} (overhead {mean - 1:+.2%} of step time), 95% CI {ci_text}; median of the "
        f"ratios {statistics.median(ratios):.4f}. Target: at most 1% of step time: {_verdict(ci, mean)}.",
        "",
        f"For scale: rank 0 recorded {colls:.1f} collective(s) per step (DDP's gradient all-reduce buckets), so at "
        f"the async cost below the hot path accounts for {colls * async_us:.1f} us of a {bare_ms:.1f} ms step "
        f"({colls * async_us / (bare_ms * 1e3):.3%}); the rest of any difference is the monitor's window thread, "
        "`monitor.step()` and the DDP comm hook the monitor registers (DDP's own default hook, issued from "
        "Python), against the noise of a shared machine.",
        "",
        "### One recorded collective",
        "",
        f"One process, a 1-rank gloo group: {ns.blocks} blocks of {ns.calls} calls of `torch.distributed."
        "all_reduce` on a 4-byte float32 tensor, alternating bare and wrapped by `commlens.monitor.recorder."
        "Recorder` (`install()` before the block, `uninstall()` after; blocks alternate which goes first). "
        "Figures are medians over blocks of the per-call time; the cost is wrapped - bare, with a 95% bootstrap "
        "interval over block pairs (seeded).",
        "",
        "| call | without (us) | with (us) | cost per call (us) | 95% CI (us) |",
        "|---|---:|---:|---:|---|",
        *[
            f"| {label} | {call[k]['bare_us']:.2f} | {call[k]['wrapped_us']:.2f} | {call[k]['diff_us']:+.2f} "
            f"| {call[k]['ci_lo_us']:+.2f} to {call[k]['ci_hi_us']:+.2f} |"
            for k, label in (
                ("blocking", "blocking, recorded vs bare"),
                ("async", "async (`async_op=True`, `wait()`), recorded from the Work's future vs bare"),
                ("future", "diagnostic: async bare + a no-op callback on `get_future()` vs async bare"),
            )
        ],
        "",
        "The diagnostic row records nothing: it times what the wrapper asks of torch for each async call "
        "(the Work's future and a done-callback), so the async cost splits into that and commlens' own code.",
        "",
        f"Memory: a fresh `Recorder({mem['capacity']})` filled by {mem['capacity']} real wrapped calls "
        f"(a slot: `{mem['slot_example']}`). Measured with `tracemalloc` (memory still allocated after "
        f"filling, less before, per record): **{mem['traced_per_record_b']:.0f} bytes per record**; checked "
        f"with `sys.getsizeof` of each slot's tuple and the objects only that slot holds (its floats and "
        f"sequence number): {mem['getsizeof_per_record_b']:.0f} bytes. The ring's list adds "
        f"{mem['list_per_slot_b']:.0f} bytes per slot, allocated up front; strings and the step number are "
        f"shared across slots ({mem['shared_b']} bytes in all). At DEFAULT_CAPACITY = {call['default_capacity']} "
        f"slots a rank's full ring holds {full_mib:.1f} MiB"
        + (
            "."
            if mem["capacity"] == call["default_capacity"]
            else f" (per-record figure measured at {mem['capacity']} slots)."
        ),
    ]
    return body


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=10, help="interleaved pairs of launches (monitored, unmonitored)")
    p.add_argument("--steps", type=int, default=150, help="training steps per launch")
    p.add_argument("--warmup-steps", type=int, default=20, help="first steps of each launch left out")
    p.add_argument("--nproc", type=int, default=4, help="ranks of the training job")
    p.add_argument("--parallel", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--calls", type=int, default=2000, help="calls per block of the per-call benchmark")
    p.add_argument("--blocks", type=int, default=30, help="blocks of each kind (bare, recorded) per call mode")
    p.add_argument("--capacity", type=int, default=None, help="ring size for the memory figure (default: DEFAULT)")
    p.add_argument("--launch-timeout", type=float, default=900.0, help="seconds a launch may take")
    p.add_argument(
        "--quick", action="store_true", help="smoke run: 1 pair of 30 steps, small blocks; never writes the docs"
    )
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    p.add_argument("--json", default=None, help="also write every figure to this JSON file")
    argv = sys.argv[1:]
    ns = p.parse_args(argv)
    if ns.quick:
        ns.pairs, ns.steps, ns.warmup_steps, ns.calls, ns.blocks = 1, 30, 5, 500, 6
        ns.capacity = ns.capacity or 4096
        ns.no_write = True
    if ns.steps <= ns.warmup_steps or ns.pairs < 1:
        p.error("need --pairs >= 1 and --steps > --warmup-steps")
    t_all = time.perf_counter()
    ns.load_start = os.getloadavg()[0]
    ns.started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    print(f"training loop, {ns.nproc} gloo ranks, {ns.pairs} interleaved pair(s) of {ns.steps}-step launches")
    pairs = _training(ns)
    print("one recorded collective (1-rank gloo group, this process)")
    call = _per_call(ns)
    ns.total_s = time.perf_counter() - t_all
    body = _report(ns, argv, pairs, call)
    print()
    print("\n".join(body))
    if not ns.no_write:
        write_section(SECTION, body)
        print(f"\nwrote {DOC.relative_to(ROOT)} ({SECTION})")
    if ns.json:
        Path(ns.json).write_text(json.dumps({"pairs": pairs, "per_call": call}, indent=1))


if __name__ == "__main__":
    main()
