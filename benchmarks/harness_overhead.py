#!/usr/bin/env python
"""Issue 2's measurement targets: harness overhead, sweep wall time, 64 MiB busBW.

Run from the repository root::

    .venv/bin/python benchmarks/harness_overhead.py

It writes the section ``## Harness overhead (issue 2)`` of
``docs/benchmarks.md`` (other sections are left as they are) and prints the
same figures. Three parts:

1. **Harness overhead.** For each op, size and world size (gloo on CPU), in
   one process group and interleaved round by round, it times

   - the harness: a real :class:`commlens.bench.worker.Sweep` built from a
     :class:`BenchConfig`, calling ``run_placement`` and ``gather`` exactly as
     ``Sweep.run`` does; the figure is ``Measurement(...).stats.mean_s`` of the
     per-iteration samples, each formed across ranks by
     ``commlens.bench.worker.iteration_times`` (one host: from the last rank's
     start to the last rank's end), which is what ``commlens bench`` reports;
   - a raw loop: the same ``torch.distributed`` call back to back, the whole
     loop of n iterations timed on each rank with ``time.perf_counter``,
     divided by n, max across ranks.

   Rounds alternate which of the two goes first; the figures compared are the
   medians over rounds of each round's mean. Two diagnostics split any gap:
   ``loop/it`` is the wall time of the harness's timed loop (the call to
   ``measure_interleaved``, timed from outside it) divided by n, max across ranks:
   what the harness's loop costs, including its per-iteration clock reads;
   ``rank mean`` is the mean of each rank's own durations, max across ranks:
   the harness's samples under the raw loop's definition (per-rank mean,
   then max).
2. **Sweep wall time.** ``commlens bench --nproc 4 --op all_reduce -b 8 -e 64M
   -f 2 --no-store -q`` end to end, several runs.
3. **BusBW** of all_reduce at 64 MiB, 4 ranks: the harness's reported busBW
   next to the raw loop's (busBW = 2(n-1)/n x size / time).

The workers run under ``python -m torch.distributed.run --standalone`` (the
script launches itself with ``--worker``).

Issue 34's modes, each writing its own section: ``--sweep-compare N`` (the default sweep end to end against
a raw loop, raw loops bracketing every repeat), ``--same-job N`` (the sweep and the raw loop inside one job:
the in-rank part of any gap), ``--startup`` and ``--scale``.
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
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docsection import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Harness overhead (issue 2)"
DOC_TITLE = "# commlens benchmarks"

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
KIB, MIB = 1024, 1024 * 1024
# Factor 8 from 8 B to 256 KiB, then 1 MiB, 8 MiB, 64 MiB (factor 8 again).
SIZES = (8, 64, 512, 4 * KIB, 32 * KIB, 256 * KIB, 1 * MIB, 8 * MIB, 64 * MIB)
SWEEP_ARGS = ["bench", "--nproc", "4", "--op", "all_reduce", "-b", "8", "-e", "64M", "-f", "2", "--no-store", "-q"]

LARGE_BYTES = 1 * MIB  # from here: within 3 %
LARGE_RATIO = 0.03
SMALL_US = 10.0  # at the smallest size: within 10 us
SWEEP_TARGET_S = 60.0


# --------------------------------------------------------------------------- worker (one rank)


def _worker(ns: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import commlens.bench.worker as worker_mod
    from commlens.bench.config import BenchConfig
    from commlens.bench.worker import Sweep
    from commlens.ops import OPS as CATALOG
    from commlens.results.records import DTYPE_SIZES, Measurement

    dist.init_process_group(backend="gloo", timeout=dt.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dtype = "float32"
    elem = DTYPE_SIZES[dtype]

    cfg = BenchConfig(
        ops=tuple(ns.ops),
        min_bytes=min(ns.sizes),
        max_bytes=max(ns.sizes),
        iters=ns.iters,
        warmup=ns.warmup,
        check_iters=ns.check_iters,
        backend="gloo",
        device="cpu",
    )
    # ctrl=None on gloo, as commlens.bench.worker._init does
    sweep = Sweep(cfg, rank, world, local_rank, None, None)
    sweep.shared_clock = True  # one host, CPU: what run_worker sets for this case

    # Diagnostic only: time the harness's timed loop from outside (two clock reads around the
    # call; nothing inside the loop changes).
    real_measure = worker_mod.measure_interleaved  # the timed loop run_placement runs (one implementation here)
    probe: dict[str, float] = {}

    def timed_measure(colls, iters, device, blocking, **kw):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = real_measure(colls, iters, device, blocking, **kw)
        probe["loop_s"] = time.perf_counter() - t0
        return out

    worker_mod.measure_interleaved = timed_measure

    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def max_across(value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def raw_call(op: str, count: int):  # type: ignore[no-untyped-def]
        """Buffers and the bare call: the minimal loop body."""
        fill = float(rank + 1)
        if op == "all_reduce":  # in place (the only placement torch offers)
            buf = torch.full((count,), fill, dtype=torch.float32)
            call = lambda: dist.all_reduce(buf)  # noqa: E731
            call.reset = lambda: buf.fill_(fill)  # type: ignore[attr-defined]  # sums grow; refill per round
            return call
        if op == "all_gather":  # out of place
            inp = torch.full((count,), fill, dtype=torch.float32)
            out = torch.empty(count * world, dtype=torch.float32)
            return lambda: ag(out, inp)
        if op == "reduce_scatter":  # out of place
            inp = torch.full((count * world,), fill, dtype=torch.float32)
            out = torch.empty(count, dtype=torch.float32)
            return lambda: rs(out, inp)
        if op == "all_to_all":  # out of place (the only placement torch offers)
            inp = torch.full((count * world,), fill, dtype=torch.float32)
            out = torch.empty(count * world, dtype=torch.float32)
            return lambda: dist.all_to_all_single(out, inp)
        raise ValueError(op)

    def run_raw(call) -> float:  # type: ignore[no-untyped-def]
        if hasattr(call, "reset"):
            call.reset()
        for _ in range(cfg.warmup):
            call()
        dist.barrier()
        clock = time.perf_counter
        t0 = clock()
        for _ in range(cfg.iters):
            call()
        per_iter = (clock() - t0) / cfg.iters
        return max_across(per_iter)

    def run_harness(spec, size: int, in_place: bool, redop: str | None, root: int | None) -> dict[str, Any] | None:  # type: ignore[no-untyped-def]
        results, refusals = sweep.run_placement(spec, dtype, redop, root, size, in_place, ["builtin"], cfg.iters)
        result = results["builtin"]
        assert result is not None and not refusals, f"{spec.name} in_place={in_place} not offered: {refusals}"
        gathered = sweep.gather(result[0], result[1], cfg.iters)
        loop = max_across(probe["loop_s"] / cfg.iters)
        if gathered is None:
            return None
        per_rank, wrong_per_rank = gathered.rank_samples_s, gathered.wrong_per_rank
        plan = spec.plan_size(size, elem, world)
        # as Sweep.run: each iteration across ranks (commlens.bench.worker.iteration_times)
        m = Measurement(
            op=spec.name,
            dtype=dtype,
            redop=redop,
            root=root,
            size_bytes=plan.size_bytes,
            count=plan.count,
            in_place=in_place,
            world_size=world,
            samples_s=tuple(gathered.samples_s),
            nwrong=sum(wrong_per_rank),
            rank_samples_s=tuple(tuple(r) for r in per_rank),
        )
        return {
            "mean_s": m.stats.mean_s,
            "p50_s": m.stats.p50_s,
            "busbw": m.busbw_bytes_per_s,
            "rank_mean_s": max(statistics.fmean(r) for r in per_rank),
            "loop_s": loop,
            "nwrong": m.nwrong,
        }

    cells = []
    for op in ns.ops:
        spec = CATALOG[op]
        in_place = op == "all_reduce"  # all_reduce in place; the others out of place
        redop = "sum" if spec.reduces else None
        root = None  # none of OPS has a root
        for requested in ns.sizes:
            size = requested
            plan = spec.plan_size(size, elem, world)
            while plan.count == 0:  # e.g. 8 B float32 over 4 ranks: 0 elements per rank
                size *= 2
                plan = spec.plan_size(size, elem, world)
            call = raw_call(op, plan.count)
            rounds: list[dict[str, Any]] = []
            t_cell = time.perf_counter()
            r = 0
            # at least --rounds rounds; cheap cells keep going until --cell-budget seconds (all ranks agree
            # through the max across ranks of the elapsed time) or --max-rounds
            while r < ns.rounds or (r < ns.max_rounds and max_across(time.perf_counter() - t_cell) < ns.cell_budget):
                order = ("harness", "raw") if r % 2 == 0 else ("raw", "harness")
                rec: dict[str, Any] = {}
                for which in order:
                    if which == "raw":
                        rec["raw_s"] = run_raw(call)
                    else:
                        rec["harness"] = run_harness(spec, size, in_place, redop, root)
                rounds.append(rec)
                r += 1
            del call
            if rank == 0:
                cell = {
                    "op": op,
                    "world": world,
                    "requested_bytes": requested,
                    "size_bytes": plan.size_bytes,
                    "count": plan.count,
                    "in_place": in_place,
                    "busbw_factor": spec.busbw_factor(world),
                    "rounds": [{"raw_s": rd["raw_s"], **rd["harness"]} for rd in rounds],
                    "cell_wall_s": time.perf_counter() - t_cell,
                }
                cells.append(cell)
                h = statistics.median(x["mean_s"] for x in cell["rounds"]) * 1e6
                w = statistics.median(x["raw_s"] for x in cell["rounds"]) * 1e6
                print(
                    f"  [{world} ranks] {op:<14} {plan.size_bytes:>10} B  harness {h:11.1f} us  "
                    f"raw {w:11.1f} us  ratio {h / w:6.3f}  ({cell['cell_wall_s']:.1f} s)",
                    flush=True,
                )
    if rank == 0:
        Path(ns.result).write_text(json.dumps({"world": world, "cells": cells}))
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------- driver


def _launch_world(world: int, ns: argparse.Namespace, result: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(world),
        str(Path(__file__).resolve()),
        "--worker",
        "--result",
        str(result),
        "--rounds",
        str(ns.rounds),
        "--max-rounds",
        str(ns.max_rounds),
        "--cell-budget",
        str(ns.cell_budget),
        "--iters",
        str(ns.iters),
        "--warmup",
        str(ns.warmup),
        "--check-iters",
        str(ns.check_iters),
        "--ops",
        *ns.ops,
        "--sizes",
        *map(str, ns.sizes),
    ]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun and commlens bench set it
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)


def _commlens_exe() -> str:
    here = Path(sys.executable).parent / "commlens"
    return str(here) if here.exists() else (shutil.which("commlens") or "commlens")


def _time_sweeps(runs: int, extra: tuple[str, ...] = ()) -> list[float]:
    exe = _commlens_exe()
    walls = []
    for i in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([exe, *SWEEP_ARGS, *extra], capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"sweep run {i + 1} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        walls.append(wall)
        print(f"  sweep run {i + 1}{' ' + ' '.join(extra) if extra else ''}: {wall:.1f} s", flush=True)
    return walls


def _bookkeeping_ns(n: int = 200_000, repeats: int = 7) -> tuple[float, float]:
    """Per-iteration cost of the harness's timing loop around a no-op, vs a bare loop of the no-op (ns).

    ``measure_samples`` reads the clock twice and appends a sample per iteration; this is what
    that costs, with nothing to communicate. Best of ``repeats``.
    """
    import torch

    from commlens.bench.collectives import Collective
    from commlens.bench.worker import measure_samples

    noop = Collective(launch=lambda: None, reset=lambda: None, verify=lambda: 0)
    cpu = torch.device("cpu")
    timed, bare = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        measure_samples(noop, n, cpu, False)
        timed.append((time.perf_counter() - t0) / n)
        launch = noop.launch
        t0 = time.perf_counter()
        for _ in range(n):
            launch()
        bare.append((time.perf_counter() - t0) / n)
    return min(timed) * 1e9, min(bare) * 1e9


def _fmt_size(n: int) -> str:
    for unit, f in (("MiB", MIB), ("KiB", KIB)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def _ratio_ci(harness: list[float], raw: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of median(harness) / median(raw), resampling rounds as pairs (seeded)."""
    import random

    rng = random.Random(0)
    n = len(harness)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(statistics.median(harness[i] for i in idx) / statistics.median(raw[i] for i in idx))
    ratios.sort()
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def _summarize(cell: dict[str, Any], smallest: bool) -> dict[str, Any]:
    rds = cell["rounds"]
    med = lambda key: statistics.median(x[key] for x in rds)  # noqa: E731
    h, w = med("mean_s"), med("raw_s")
    out = {
        "op": cell["op"],
        "world": cell["world"],
        "size_bytes": cell["size_bytes"],
        "requested_bytes": cell["requested_bytes"],
        "harness_us": h * 1e6,
        "raw_us": w * 1e6,
        "ratio": h / w,
        "diff_us": (h - w) * 1e6,
        "loop_us": med("loop_s") * 1e6,
        "rank_mean_us": med("rank_mean_s") * 1e6,
        "p50_us": med("p50_s") * 1e6,
        "nwrong": sum(x["nwrong"] for x in rds),
        "rounds": len(rds),
    }
    out["ci_lo"], out["ci_hi"] = _ratio_ci([x["mean_s"] for x in rds], [x["raw_s"] for x in rds])
    if cell["size_bytes"] >= LARGE_BYTES:
        out["target"] = f"<= {LARGE_RATIO:.0%}"
        out["met"] = abs(out["ratio"] - 1.0) <= LARGE_RATIO
    elif smallest:
        out["target"] = f"<= {SMALL_US:g} us"
        out["met"] = abs(out["diff_us"]) <= SMALL_US
    else:
        out["target"] = "-"
        out["met"] = None
    return out


def _decomposition(rows: list[dict[str, Any]], bookkeeping: tuple[float, float]) -> list[str]:
    """Where the harness-raw gap comes from, in figures (the same for every re-run's numbers)."""
    med = statistics.median
    out = ["Where the differences come from:", ""]
    timed_ns, bare_ns = bookkeeping
    out.append(
        f"- Per-iteration timing: the harness's loop (`measure_samples`) around a no-op call costs "
        f"{timed_ns:.0f} ns per iteration against {bare_ns:.0f} ns for a bare loop of the same call "
        f"(best of 7 x 200,000), i.e. {(timed_ns - bare_ns) / 1e3:.2f} us per iteration for the two clock reads "
        "and the append."
    )
    for label, pick in (
        (">= 1 MiB", lambda r: r["size_bytes"] >= LARGE_BYTES),
        ("the smallest size", lambda r: r["requested_bytes"] == min(x["requested_bytes"] for x in rows)),
        ("all sizes", lambda r: True),
    ):
        sel = [r for r in rows if pick(r)]
        if not sel:
            continue
        mx = [r["harness_us"] / r["rank_mean_us"] - 1 for r in sel]
        gap = [r["rank_mean_us"] / r["loop_us"] - 1 for r in sel]
        ex = [r["loop_us"] / r["raw_us"] - 1 for r in sel]
        tot = [r["ratio"] - 1 for r in sel]
        line = (
            f"- {label} ({len(sel)} rows), medians of per-row relative differences: harness vs raw "
            f"{med(tot):+.1%}; of which forming iterations across ranks (harness mean vs harness rank mean, "
            f"the same samples) {med(mx):+.1%} (range {min(mx):+.1%} to {max(mx):+.1%}); time in the harness's "
            f"loop outside its samples (rank mean vs loop/it) {med(gap):+.1%}; the harness's loop vs the raw loop "
            f"(loop/it vs raw, two interleaved executions) {med(ex):+.1%} (range {min(ex):+.1%} to {max(ex):+.1%})."
        )
        if label == "the smallest size":
            line += (
                f" In us: across-ranks forming {med([r['harness_us'] - r['rank_mean_us'] for r in sel]):+.1f}, "
                f"loop vs raw {med([r['loop_us'] - r['raw_us'] for r in sel]):+.1f}."
            )
        out.append(line)
    out += [
        "",
        "How iterations are formed across ranks: ranks leave a collective at different moments, and a rank "
        "that leaves early starts the next iteration early and waits longer in it, so each rank's own durations "
        "alternate short and long. Taking, per iteration, the longest rank's duration would pick the long sample "
        "every time and overstate the loop (an earlier version did: +7.7% median at >= 1 MiB on this machine). "
        "commlens instead times each iteration from the moment the last rank started it to the moment the last "
        "rank finished it, on the monotonic clock all ranks of a host share; back-to-back iterations then add up "
        "to the loop's wall time. Across hosts, where no clock is shared, the longest rank's duration is used.",
    ]
    return out


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| op | ranks | size | harness mean (us) | raw loop (us) | ratio | ratio 95% CI | diff (us) | target | met "
        "| harness loop/it (us) | harness rank mean (us) | harness p50 (us) | rounds |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        size = _fmt_size(r["size_bytes"])
        if r["size_bytes"] != r["requested_bytes"]:
            size += f" ({_fmt_size(r['requested_bytes'])} asked)"
        lines.append(
            f"| {r['op']} | {r['world']} | {size} | {r['harness_us']:.1f} | {r['raw_us']:.1f} | {r['ratio']:.3f} "
            f"| {r['ci_lo']:.2f}-{r['ci_hi']:.2f} "
            f"| {r['diff_us']:+.1f} | {r['target']} | {met} | {r['loop_us']:.1f} | {r['rank_mean_us']:.1f} "
            f"| {r['p50_us']:.1f} | {r['rounds']} |"
        )
    return lines


def _write_section(body: list[str]) -> None:
    write_section(SECTION, body)


def _driver(ns: argparse.Namespace, argv: list[str]) -> None:
    import torch

    t_all = time.perf_counter()
    load_start = os.getloadavg()[0]
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    all_cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="commlens-overhead-") as tmp:
        for world in ns.worlds:
            print(
                f"harness vs raw loop, {world} ranks, gloo/CPU, >= {ns.rounds} rounds x {ns.iters} iterations",
                flush=True,
            )
            result = Path(tmp) / f"world{world}.json"
            _launch_world(world, ns, result)
            all_cells += json.loads(result.read_text())["cells"]
    overhead_s = time.perf_counter() - t_all

    rows = []
    for cell in all_cells:
        smallest = cell["requested_bytes"] == min(ns.sizes)
        rows.append(_summarize(cell, smallest))

    bookkeeping = _bookkeeping_ns()
    walls: list[float] = []
    if ns.sweep_runs > 0:
        print(f"sweep wall time: commlens {' '.join(SWEEP_ARGS)}", flush=True)
        walls = _time_sweeps(ns.sweep_runs)
    nocheck: list[float] = []
    if ns.sweep_nocheck_runs > 0:
        nocheck = _time_sweeps(ns.sweep_nocheck_runs, ("-c", "0"))

    bus = None
    for cell in all_cells:
        if cell["op"] == "all_reduce" and cell["world"] == 4 and cell["size_bytes"] == 64 * MIB:
            rds = cell["rounds"]
            raw_bus = [cell["busbw_factor"] * cell["size_bytes"] / x["raw_s"] for x in rds]
            bus = {
                "harness": statistics.median(x["busbw"] for x in rds) / 1e9,
                "harness_lo": min(x["busbw"] for x in rds) / 1e9,
                "harness_hi": max(x["busbw"] for x in rds) / 1e9,
                "raw": statistics.median(raw_bus) / 1e9,
                "raw_lo": min(raw_bus) / 1e9,
                "raw_hi": max(raw_bus) / 1e9,
                "rounds": len(rds),
            }
    total_s = time.perf_counter() - t_all

    # ---- report
    checked = [r for r in rows if r["met"] is not None]
    missed = [r for r in checked if not r["met"]]
    exe = Path(sys.executable)
    py = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else "python"
    cmd = f"{py} benchmarks/harness_overhead.py" + ("" if not argv else " " + shlex.join(argv))
    wrong = sum(r["nwrong"] for r in rows)
    body = [
        f"Produced by `{cmd}` (from the repository root), {started}; "
        f"total {total_s:.0f} s ({overhead_s:.0f} s for the overhead part).",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}, gloo on CPU, one host; "
        f"1-minute load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
        "shared and noisy, so compare ratios from one run rather than absolute figures across runs.",
        "",
        "### Harness mean time vs a raw `torch.distributed` loop",
        "",
        f"Each cell: at least {ns.rounds} rounds (cheap cells add rounds until {ns.cell_budget:g} s are spent, "
        f"at most {ns.max_rounds}), alternating which of the two goes first; each round runs "
        f"{ns.warmup} warm-up and {ns.iters} timed iterations of each (commlens' defaults), "
        "in one process group launched by `torch.distributed.run --standalone`.",
        "",
        "- **harness mean**: a real `commlens.bench.worker.Sweep` (from a `BenchConfig`), `run_placement` then "
        "`gather` exactly as `Sweep.run` calls them; `Measurement(...).stats.mean_s` of the per-iteration samples, "
        "each iteration timed from the last rank's start to the last rank's end (one host, shared clock): "
        "the figure `commlens bench` reports.",
        "- **raw loop**: the bare call (`dist.all_reduce` in place; `all_gather_into_tensor`, "
        "`reduce_scatter_tensor`, `all_to_all_single` out of place) back to back after the same warm-up and a "
        "barrier; the whole loop timed on each rank with `time.perf_counter`, divided by n, max across ranks.",
        "- ratio = harness / raw and diff = harness - raw, on the medians over rounds; the 95% CI of the ratio "
        "is a bootstrap over rounds (resampled as harness/raw pairs), i.e. how well this run's noise lets the "
        "ratio be known. Targets: within 3% "
        "at >= 1 MiB, within 10 us at the smallest size (8 B asked; the per-rank ops at 4 ranks run 16 B, since 8 B "
        "of float32 is 0 elements per rank).",
        "- diagnostics (medians over rounds): **harness loop/it** is the wall time of the harness's own "
        "timed loop (its call to `measure_interleaved`, timed from outside), divided by n, max across ranks: "
        "what the harness's loop costs, per-iteration clock reads included; **harness rank mean** is each rank's "
        "mean of its own durations, max across ranks: the harness's samples under the raw loop's definition; "
        "**harness p50** is the reported p50.",
        (
            f"- harness validation: {ns.check_iters} check iteration(s) per round, {wrong} wrong elements."
            if ns.check_iters
            else "- harness validation off (`--check-iters 0`, the config's `check_iters`): the check runs after the "
            "timed loop and does not change the samples; it is left out to keep the run short."
        ),
        "",
        *_table(rows),
        "",
        f"Targets met: {len(checked) - len(missed)} of {len(checked)} checked rows.",
    ]
    if missed:
        body.append(
            "Missed: "
            + "; ".join(
                f"{r['op']} {r['world']} ranks {_fmt_size(r['size_bytes'])} "
                f"(ratio {r['ratio']:.3f}, diff {r['diff_us']:+.1f} us)"
                for r in missed
            )
            + "."
        )
    body += ["", *_decomposition(rows, bookkeeping)]
    body += ["", "### Sweep wall time", ""]
    if walls:
        body += [
            f"`commlens {' '.join(SWEEP_ARGS)}` (25 sizes, 20 iterations, 5 warm-up, 1 check), end to end "
            "including start-up, launch and teardown; target under 60 s:",
            "",
            "| run | wall (s) | under 60 s |",
            "|---:|---:|---|",
            *[f"| {i + 1} | {w:.1f} | {'yes' if w < SWEEP_TARGET_S else '**no**'} |" for i, w in enumerate(walls)],
            *[f"| `-c 0` (no validation), for reference | {w:.1f} | - |" for w in nocheck],
        ]
    else:
        body.append("Not run (`--sweep-runs 0`).")
    body += ["", "### BusBW of all_reduce at 64 MiB, 4 ranks", ""]
    if bus:
        body += [
            f"Median over {bus['rounds']} rounds (range in brackets); busBW = 2(n-1)/n x size / time, GB = 1e9 bytes.",
            "",
            "| | busBW (GB/s) |",
            "|---|---:|",
            f"| commlens reported (from mean time) | {bus['harness']:.3f} ({bus['harness_lo']:.3f}-"
            f"{bus['harness_hi']:.3f}) |",
            f"| raw loop | {bus['raw']:.3f} ({bus['raw_lo']:.3f}-{bus['raw_hi']:.3f}) |",
        ]
    else:
        body.append("Not measured in this run (needs all_reduce, 4 ranks and 64 MiB).")

    print()
    print("\n".join(body))
    if not ns.no_write:
        _write_section(body)
        print(f"\nwrote {DOC.relative_to(ROOT)} ({SECTION})")
    if ns.json:
        Path(ns.json).write_text(
            json.dumps(
                {
                    "rows": rows,
                    "cells": all_cells,
                    "sweep_walls_s": walls,
                    "sweep_nocheck_walls_s": nocheck,
                    "busbw_64mib_4ranks": bus,
                },
                indent=1,
            )
        )


SWEEP_SECTION = "## Sweep time against a raw loop (issue 34)"
SWEEP_RATIO_TARGET = 1.3
BUSBW_TARGET = 0.03
SWEEP_MIN, SWEEP_MAX = 8, 64 * MIB


def _raw_all_reduce_sweep(
    first: int, warmup: int, iters: int, cpu_s: Callable[[], float] | None = None, rounds: int = 1
) -> tuple[dict[int, float], dict[int, float]]:
    """The raw loop, in an initialized gloo job: each size from ``first`` to SWEEP_MAX (x2), float32 in place,
    ``warmup`` calls, then ``rounds`` times a barrier and ``iters / rounds`` timed calls back to back (one round:
    the plain loop; more: commlens' rounds without its harness). Returns {size: seconds per iteration, each
    round's loop time max across ranks, summed} and, where ``cpu_s`` is given, {size: this rank's CPU seconds
    over its timed loops}."""
    import torch
    import torch.distributed as dist

    per_iter: dict[int, float] = {}
    spent: dict[int, float] = {}
    size = first
    while size <= SWEEP_MAX:
        buf = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(buf)
        total = used = 0.0
        for r in range(rounds):
            n = iters // rounds + (1 if r < iters % rounds else 0)
            dist.barrier()
            c0, t0 = (cpu_s() if cpu_s else 0.0), time.perf_counter()
            for _ in range(n):
                dist.all_reduce(buf)
            took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            used += (cpu_s() - c0) if cpu_s else 0.0
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            total += float(took)
        if cpu_s:
            spent[size] = used
        per_iter[size] = total / iters
        size *= 2
    return per_iter, spent


def _raw_sweep_worker(ns: argparse.Namespace) -> None:
    """A bare ``torch.distributed`` all_reduce sweep: what a hand-written loop costs for the sweep of SWEEP_ARGS.

    Each size as ``commlens bench -b 8 -e 64M -f 2`` plans it (float32, count = size / 4): ``--warmup``
    warm-up and ``--iters`` timed calls in place, back to back after a barrier, the loop timed on each rank
    and the max across ranks kept (rank 0 writes {size: seconds per iteration} to ``--result``).
    """
    import torch.distributed as dist

    dist.init_process_group(backend="gloo", timeout=dt.timedelta(seconds=600))
    per_iter, _ = _raw_all_reduce_sweep(SWEEP_MIN, ns.warmup, ns.iters)
    if dist.get_rank() == 0 and ns.result:
        Path(ns.result).write_text(json.dumps(per_iter))
    dist.destroy_process_group()


def _raw_sweep(ns: argparse.Namespace, result: Path) -> float:
    """Wall time of the raw sweep, launched as a 4-rank ``torch.distributed.run --standalone`` job."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "4",
        str(Path(__file__).resolve()),
        "--raw-sweep-worker",
        "--result",
        str(result),
        "--iters",
        str(ns.iters),
        "--warmup",
        str(ns.warmup),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)
    return time.perf_counter() - t0


def _commlens_sweep(extra: list[str], out: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [_commlens_exe(), *SWEEP_ARGS, "--json", str(out), *extra], capture_output=True, text=True, cwd=ROOT
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"commlens {' '.join(extra)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall


def _busbw_by_size(path: Path, rank_mean: bool = False) -> dict[int, float]:
    """busBW (bytes/s) per size from a ``commlens bench --json`` file, from each row's mean time.

    ``rank_mean``: from the raw loop's definition instead, each rank's mean duration, max across ranks (the
    reported samples run from the last rank's start to the last rank's end, which leaves out a rank that
    started early and waited)."""
    from commlens.results.jsonfmt import load_run

    run = load_run(path)
    out = {}
    for m in run.measurements:
        t = m.stats.mean_s
        if rank_mean and m.rank_samples_s:
            t = max(statistics.fmean(r) for r in m.rank_samples_s)
        out[m.size_bytes] = 2 * (m.world_size - 1) / m.world_size * m.size_bytes / t
    return out


def _pair_busbw(mine: dict[int, float], raw: dict[int, float]) -> float:
    """One commlens run against the raw run of the same repeat: the median over sizes >= 1 MiB of the
    ratio of their busBW, minus 1 (a size's ratio moves with the load of that minute; the median over the
    eight large sizes does so less)."""
    ratios = [mine[s] / raw[s] for s in sorted(raw) if s >= MIB and s in mine]
    return statistics.median(ratios) - 1


def _bracket(before: dict[int, float], after: dict[int, float]) -> dict[int, float]:
    """Per size, the geometric mean of the busBW of the raw runs just before and just after a repeat's commlens
    runs: a drift of the machine's load that is linear over the repeat cancels out of the ratio."""
    return {s: (before[s] * after[s]) ** 0.5 for s in before if s in after}


def _raw_bus(ns: argparse.Namespace, res: Path) -> tuple[float, dict[int, float]]:
    """One raw sweep: its wall time and busBW (bytes/s) per size."""
    wall = _raw_sweep(ns, res)
    per = {int(k): v for k, v in json.loads(res.read_text()).items()}
    return wall, {s: 1.5 * s / t for s, t in per.items()}


def _sweep_compare(ns: argparse.Namespace, argv: list[str]) -> None:
    """The default sweep against the raw loop, end to end, runs interleaved; writes SWEEP_SECTION.

    Each repeat runs the commlens variants in an order rotated by the repeat, between two raw loops: the one
    that ends the previous repeat (or starts the first) and one of its own after them, so the raw runs
    bracket every commlens run. Wall time: min and median over repeats, the ratio of medians. busBW: per
    repeat, the median over sizes >= 1 MiB of commlens' busBW over the bracketing raw loops' (their
    geometric mean per size, :func:`_bracket`); the table gives the median of those per-repeat figures and
    their range, which says how far one repeat can be trusted on this machine. The raw loop's own A/A row
    (each raw run against the one before it) is the same figure for two runs of the same loop.
    """
    kinds: list[tuple[str, list[str]]] = [
        ("commlens, default (5 rounds, each in a new group, 1 check)", []),
        ("commlens `--round-groups shared` (every round in the default group)", ["--round-groups", "shared"]),
        ("commlens `--rounds 1`", ["--rounds", "1"]),
    ]
    if ns.sweep_default_only:
        kinds = kinds[:1]
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    loads = [os.getloadavg()[0]]
    raw_walls: list[float] = []
    raw_aa: list[float] = []
    walls: dict[str, list[float]] = {k: [] for k, _ in kinds}
    pairs: dict[str, list[float]] = {k: [] for k, _ in kinds}
    pairs_rank: dict[str, list[float]] = {k: [] for k, _ in kinds}
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        wall, before = _raw_bus(ns, Path(tmp) / "raw-first.json")
        raw_walls.append(wall)
        print(f"  raw loop {wall:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
        for i in range(ns.sweep_compare):
            outs: dict[str, Path] = {}
            for label, extra in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
                outs[label] = Path(tmp) / f"c{i}-{[k for k, _ in kinds].index(label)}.json"
                walls[label].append(_commlens_sweep(extra, outs[label]))
                print(f"  repeat {i + 1}: {label} {walls[label][-1]:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
            wall, after = _raw_bus(ns, Path(tmp) / f"raw{i}.json")
            raw_walls.append(wall)
            raw_aa.append(_pair_busbw(after, before))
            both = _bracket(before, after)
            for label, out in outs.items():
                pairs[label].append(_pair_busbw(_busbw_by_size(out), both))
                pairs_rank[label].append(_pair_busbw(_busbw_by_size(out, rank_mean=True), both))
            print(
                f"  repeat {i + 1}: raw loop {wall:.1f} s, A/A against the one before {raw_aa[-1]:+.1%}; busBW vs raw: "
                + ", ".join(f"{label.split(' (')[0]} {pairs[label][-1]:+.1%}" for label in outs)
                + f" (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            before = after
            loads.append(os.getloadavg()[0])
    raw_min, raw_med = min(raw_walls), statistics.median(raw_walls)
    body = [
        f"`.venv/bin/python benchmarks/harness_overhead.py {shlex.join(argv)}`, {started}; "
        f"{os.cpu_count()} CPUs shared with other sessions (1-minute load {min(loads):.1f}-{max(loads):.1f} "
        "during the runs).",
        "",
        f"The sweep `commlens {' '.join(SWEEP_ARGS)}` (24 sizes, {ns.iters} timed iterations per size, "
        f"{ns.warmup} warm-up) end to end, against a raw loop: a `torch.distributed.run --standalone` job of 4 "
        f"ranks running, per size, {ns.warmup} warm-up and {ns.iters} timed `dist.all_reduce` calls in place "
        f"(same sizes, same timed iterations, no check). {ns.sweep_compare} repeats, each every commlens variant "
        "(their order rotated by the repeat) between two raw loops (the previous repeat's last and its own). "
        "busBW: per repeat, the median over the sizes >= 1 MiB of commlens' busBW over the raw loops' around it "
        "(geometric mean of the two, per size, so a steady drift of the load cancels); the table gives the "
        "median of the repeats and their range; *rank mean*: commlens' busBW from the raw loop's definition "
        "(each rank's mean duration, max across ranks) instead of its reported samples (last rank's start to "
        "last rank's end). *raw loop A/A*: each raw loop against the one before it, the same figure for two runs "
        f"of one loop: what a repeat's noise is. Target: the default sweep within {SWEEP_RATIO_TARGET}x the raw "
        f"loop's wall time, busBW within {BUSBW_TARGET:.0%}.",
        "",
        "| run | wall min (s) | wall median (s) | / raw (median) | busBW vs raw, >= 1 MiB: median of repeats "
        "| range over repeats | rank mean: median | rank mean: range |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| raw `torch.distributed` loop | {raw_min:.1f} | {raw_med:.1f} | 1.00 | - | - | - | - |",
        f"| raw loop A/A (each against the one before) | - | - | - | {statistics.median(raw_aa):+.1%} "
        f"| {min(raw_aa):+.1%} .. {max(raw_aa):+.1%} | - | - |",
    ]
    for label, _ in kinds:
        w, d, dr = walls[label], pairs[label], pairs_rank[label]
        body.append(
            f"| {label} | {min(w):.1f} | {statistics.median(w):.1f} | {statistics.median(w) / raw_med:.2f} "
            f"| {statistics.median(d):+.1%} | {min(d):+.1%} .. {max(d):+.1%} "
            f"| {statistics.median(dr):+.1%} | {min(dr):+.1%} .. {max(dr):+.1%} |"
        )
    print("\n".join(body))
    if not ns.no_write:
        write_section(SWEEP_SECTION, body)


SAME_JOB_SECTION = "## The sweep against a raw loop inside one job (issue 34)"
SAME_JOB_ARGS = ["--op", "all_reduce", "-b", "1M", "-e", "64M", "-f", "2"]
SAME_JOB_ROUNDS = 5  # commlens' default rounds, which the raw-rounds loop copies


def _same_job_worker(ns: argparse.Namespace) -> None:
    """One rank: ``--same-job`` times, the raw loop's sweep (as :func:`_raw_sweep_worker`, 1-64 MiB) and commlens'
    ``Sweep.run`` at its defaults for ``SAME_JOB_ARGS``, their order alternating (ABBA), in these processes.

    Rank 0 writes per repetition and kind {size: seconds per iteration} (the raw loop's max across ranks of
    its loop time / iterations; commlens' reported mean), and every rank's CPU time (user + system) per timed
    iteration for each kind and size (``getrusage`` around the timed loops only) to ``--result``.
    """
    import resource

    import torch
    import torch.distributed as dist

    import commlens.bench.worker as worker_mod
    from commlens.bench.config import build_parser, config_from_args
    from commlens.bench.events import RowDone

    dist.init_process_group(backend="gloo", timeout=dt.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    cpu: dict[str, dict[int, list[float]]] = {"raw": {}, "commlens": {}}  # kind -> size -> [cpu s, iterations]

    def cpu_s() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def count(kind: str, size: int, spent: float, iters: int) -> None:
        acc = cpu[kind].setdefault(size, [0.0, 0.0])
        acc[0] += spent
        acc[1] += iters

    real_measure = worker_mod.measure_interleaved

    def measured(colls, iters, device, blocking, seed=None):  # type: ignore[no-untyped-def]
        c0 = cpu_s()
        out = real_measure(colls, iters, device, blocking, seed)
        count("commlens", colls[0].output.numel() * colls[0].output.element_size(), cpu_s() - c0, iters)
        return out

    worker_mod.measure_interleaved = measured

    def raw() -> dict[int, float]:
        per, spent = _raw_all_reduce_sweep(MIB, ns.warmup, ns.iters, cpu_s)
        for size, seconds in spent.items():
            count("raw", size, seconds, ns.iters)
        return per

    def commlens() -> dict[int, float]:
        cfg = config_from_args(build_parser("same-job").parse_args([*SAME_JOB_ARGS, "-n", str(ns.iters)]))
        sweep = worker_mod.Sweep(cfg, rank, world, 0, None, None)
        sweep.shared_clock = True  # one host, CPU: as run_worker sets it
        reporter = worker_mod.Reporter(None, None) if rank == 0 else None
        sweep.run(reporter)
        rows = [e for e in reporter.events if isinstance(e, RowDone)] if reporter else []
        return {m.size_bytes: m.stats.mean_s for e in rows for m in e.measurements if m is not None}

    def raw_rounds() -> dict[int, float]:
        per, _ = _raw_all_reduce_sweep(MIB, ns.warmup, ns.iters, rounds=SAME_JOB_ROUNDS)
        return per

    kinds = {"raw": raw, "commlens": commlens, "raw-rounds": raw_rounds}
    reps = []
    for i in range(ns.same_job):
        order = list(kinds)[i % 3 :] + list(kinds)[: i % 3]  # each kind first, second and last in turn
        reps.append({kind: kinds[kind]() for kind in order})
    mine = torch.tensor(
        [cpu[k][s][0] / cpu[k][s][1] for k in ("raw", "commlens") for s in sorted(cpu["raw"])], dtype=torch.float64
    )
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    if rank == 0 and ns.result:
        sizes = sorted(cpu["raw"])
        per_rank = [t.view(2, len(sizes)).tolist() for t in everyone]
        Path(ns.result).write_text(
            json.dumps({"reps": reps, "sizes": sizes, "cpu": per_rank, "load": os.getloadavg()[0]})
        )
    dist.destroy_process_group()


def _pooled_ratio(
    reps: list[dict[str, dict[int, float]]], sizes: list[int], base: str = "raw"
) -> tuple[float, float, float]:
    """The median of commlens' busBW over the ``base`` loop's, - 1, over every (size, repetition) pair, and its
    95% interval from resampling whole repetitions (the sizes of one repetition share its load)."""
    import random

    per_rep = [[rep[base][s] / rep["commlens"][s] - 1 for s in sizes] for rep in reps]
    pooled = statistics.median(x for rep in per_rep for x in rep)
    rng = random.Random(34)
    boots = sorted(
        statistics.median(x for rep in rng.choices(per_rep, k=len(per_rep)) for x in rep) for _ in range(2000)
    )
    return pooled, boots[49], boots[1949]


def _same_job(ns: argparse.Namespace, argv: list[str]) -> None:
    """The in-rank part of the sweep's gap to a raw loop, launcher left out; writes SAME_JOB_SECTION."""
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="samejob-") as tmp:
        res = Path(tmp) / "same.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
        cmd += [str(Path(__file__).resolve()), "--same-job-worker", "--same-job", str(ns.same_job)]
        cmd += ["--result", str(res), "--iters", str(ns.iters), "--warmup", str(ns.warmup)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)
        took = time.perf_counter() - t0
        data = json.loads(res.read_text())
    sizes = data["sizes"]
    reps = [{k: {int(s): t for s, t in v.items()} for k, v in rep.items()} for rep in data["reps"]]
    per_rep = [statistics.median(rep["raw"][s] / rep["commlens"][s] for s in sizes) - 1 for rep in reps]
    per_size = {s: statistics.median(rep["raw"][s] / rep["commlens"][s] for rep in reps) - 1 for s in sizes}
    per_size_rounds = {
        s: statistics.median(rep["raw-rounds"][s] / rep["commlens"][s] for rep in reps) - 1 for s in sizes
    }
    cpu_ratio = {
        s: statistics.median(r[1][j] / r[0][j] for r in data["cpu"]) - 1 for j, s in enumerate(sizes)
    }  # commlens / raw CPU per timed iteration, median over ranks
    body = [
        f"`.venv/bin/python benchmarks/harness_overhead.py {shlex.join(argv)}`, {started}, {took:.0f} s; "
        f"{os.cpu_count()} CPUs shared with other sessions (1-minute load {load0:.1f} at the start, "
        f"{data['load']:.1f} at the end).",
        "",
        f"One `torch.distributed.run --standalone` job of 4 gloo ranks (OMP_NUM_THREADS=1) runs, {ns.same_job} "
        "times in rotated order, the raw loop's sweep (per size: "
        f"`torch.ones`, {ns.warmup} warm-up and {ns.iters} timed `dist.all_reduce` calls in place, the loop timed "
        f"on each rank, max across ranks), the same loop split into {SAME_JOB_ROUNDS} rounds with a barrier "
        "before each (*raw-rounds*), and commlens' own `Sweep.run` at its defaults for "
        f"`{' '.join(SAME_JOB_ARGS)} -n {ns.iters}` (5 rounds, 1 check; its reported mean): the same processes, "
        "threads and launcher, so what differs is the harness inside a rank. busBW of commlens against the raw "
        "loop of the same repetition; CPU: user + system time of a rank per timed iteration (the timed loops "
        "only), commlens against raw, median over ranks.",
        "",
        "| size (MiB) | busBW vs raw: median over repetitions | vs raw-rounds | CPU per timed iteration vs raw |",
        "|---:|---:|---:|---:|",
    ]
    body += [f"| {s // MIB} | {per_size[s]:+.1%} | {per_size_rounds[s]:+.1%} | {cpu_ratio[s]:+.1%} |" for s in sizes]
    pooled, low, high = _pooled_ratio(reps, sizes)
    r_pooled, r_low, r_high = _pooled_ratio(reps, sizes, "raw-rounds")
    body += [
        "",
        f"Every (size, repetition) pair pooled: busBW vs raw median **{pooled:+.1%}**, 95% interval {low:+.1%} .. "
        f"{high:+.1%} (bootstrap over repetitions, 2,000 resamples); target within 3%: "
        f"{'met' if abs(pooled) <= 0.03 else 'missed'}. Against the raw loop timed in commlens' "
        f"{SAME_JOB_ROUNDS} rounds (a barrier before each, no harness): {r_pooled:+.1%} ({r_low:+.1%} .. "
        f"{r_high:+.1%}).",
    ]
    body += [
        "",
        f"Per repetition, median over sizes >= 1 MiB (the figure `--sweep-compare` gives): median "
        f"{statistics.median(per_rep):+.1%}, range {min(per_rep):+.1%} .. {max(per_rep):+.1%} "
        f"({', '.join(f'{x:+.1%}' for x in per_rep)}).",
    ]
    print("\n".join(body))
    if not ns.no_write:
        write_section(SAME_JOB_SECTION, body)


SCALE_SECTION = "## detect over 1,000 runs and ingest of 1,000 logs (issue 34)"
SCALE_RUNS = 1000
DETECT_TARGET_S, INGEST_TARGET_S = 1.0, 3.0


def _scale_store(path: Path, runs: int = SCALE_RUNS) -> tuple[int, int]:
    """A SQLite store of ``runs`` nightly runs: 3 ops x 11 sizes x 2 placements = 66 measurements of 20
    samples each (the issue's 66,200 rows), 1 % noise, a 6 % step of all_reduce at >= 1 MiB from run 600."""
    import numpy as np

    from commlens.results.records import Measurement, Run, SystemInfo
    from commlens.store import Store

    system = SystemInfo(world_size=8, backend="nccl", cpu_model="bench-cpu", cpu_cores=64, torch_version="2.4.0")
    rng = np.random.default_rng(34)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    built = []
    for i in range(runs):
        ms = []
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            for size in (1024 << k for k in range(0, 21, 2)):
                step = 1.06 if op == "all_reduce" and size >= MIB and i >= 600 else 1.0
                for in_place in (False, True):
                    base = (20e-6 + size / 100e9) * step
                    ms.append(
                        Measurement(
                            op=op,
                            dtype="float32",
                            redop="sum" if op != "all_gather" else None,
                            size_bytes=size,
                            count=size // 4 // (8 if op == "reduce_scatter" else 1) or 1,
                            in_place=in_place,
                            world_size=8,
                            samples_s=tuple(base * (1 + rng.normal(0, 0.01, 20))),
                        )
                    )
        built.append(
            Run(
                run_id=f"nightly-{i:04d}",
                started_at=(t0 + dt.timedelta(hours=8 * i)).isoformat(),
                system=system,
                measurements=tuple(ms),
                tag="nightly",
                revision=f"{i:040x}",
            )
        )
    with Store.open(str(path)) as store:
        store.save_runs(built)
    return len(built), sum(len(r.measurements) for r in built)


def _scale_logs(folder: Path, count: int = SCALE_RUNS) -> list[Path]:
    """``count`` nccl-tests logs, tests/data/regress/base-all_reduce.log with each rank's pid changed (so each
    is a run of its own)."""
    import re

    text = (ROOT / "tests" / "data" / "regress" / "base-all_reduce.log").read_text()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        log = re.sub(r"Pid (\d+)", lambda m, shift=16 * i: f"Pid {int(m.group(1)) + shift}", text)
        path = folder / f"all_reduce-{i:04d}.log"
        path.write_text(log)
        paths.append(path)
    return paths


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the process tree, the finished process) of one ``commlens`` command."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "commlens", *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, proc


def _scale(ns: argparse.Namespace, argv: list[str]) -> None:
    """Time ``commlens detect`` over a 1,000-run store and ``commlens ingest`` of 1,000 logs; SCALE_SECTION."""
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    loads = [os.getloadavg()[0]]
    repeats = ns.scale_repeats
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        work = Path(tmp)
        store = work / "history.db"
        nruns, nrows = _scale_store(store)
        print(f"store: {nruns} runs, {nrows} measurements", flush=True)
        sources = [("", None)] + ([("before", ns.scale_before)] if ns.scale_before else [])
        detect: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in sources}
        ingest: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in sources}
        logs = _scale_logs(work / "logs")
        summary = ""
        for i in range(repeats + 1):  # the sources interleaved, the first round a warm-up for detect
            for label, src in sources:
                env = {**os.environ, **_bytecode_cached(work), **({"PYTHONPATH": src} if src else {})}
                wall, cpu, proc = _timed(["detect"], {**env, "COMMLENS_DB": str(store)})
                if proc.returncode not in (0, 1):
                    raise SystemExit(f"commlens detect: exit {proc.returncode}\n{proc.stderr[-2000:]}")
                summary = summary or proc.stdout.strip().splitlines()[-1]
                if i:
                    detect[label].append((wall, cpu))
                    print(f"  detect {label}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
                    db = work / f"ingest-{label}-{i}.db"
                    wall, cpu, proc = _timed(["ingest", *map(str, logs), "--db", str(db)], env)
                    if proc.returncode != 0:
                        raise SystemExit(f"commlens ingest: exit {proc.returncode}\n{proc.stderr[-2000:]}")
                    ingest[label].append((wall, cpu))
                    print(f"  ingest {label}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        loads.append(os.getloadavg()[0])

    def cell(xs: list[tuple[float, float]], k: int) -> str:
        values = [x[k] for x in xs]
        return f"{min(values):.2f} | {statistics.median(values):.2f}"

    body = [
        f"`.venv/bin/python benchmarks/harness_overhead.py {shlex.join(argv)}`, {started}; {os.cpu_count()} CPUs "
        f"shared with other sessions (1-minute load {min(loads):.1f}-{max(loads):.1f}): wall times stretch with "
        "the load, so the CPU time of the command (user + system, all its processes) is given too. Modules are "
        "read from bytecode compiled by the first run, as an installed package's are (figures before "
        "2026-12-04 19:10 UTC compiled commlens' sources in every run: this machine sets "
        "`PYTHONDONTWRITEBYTECODE`).",
        "",
        f"- detect: a SQLite store of {nruns} runs, {nrows} measurements (3 ops x 11 sizes x 2 placements, 20 "
        "samples each, 1 % noise, a 6 % step at >= 1 MiB from run 600), `commlens detect` with the defaults, "
        f"{repeats} runs after a warm-up. Its summary: `{summary}`.",
        f"- ingest: {len(logs)} nccl-tests logs (`tests/data/regress/base-all_reduce.log`, each with other pids, "
        f"so each is a run of its own), `commlens ingest` of all of them in one command into a new SQLite store, "
        f"{repeats} times."
        + (
            f" The same commands with `PYTHONPATH` at the sources {ns.scale_before_name} (`before`), interleaved "
            "with these, the same minutes."
            if ns.scale_before
            else ""
        ),
        "",
        "| command | wall min (s) | wall median (s) | CPU min (s) | CPU median (s) | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, _ in sources:
        name = f" ({label}: {ns.scale_before_name})" if label else ""
        body += [
            f"| `commlens detect` ({nruns} runs){name} | {cell(detect[label], 0)} | {cell(detect[label], 1)} "
            f"| < {DETECT_TARGET_S:g} s |",
            f"| `commlens ingest` ({len(logs)} logs){name} | {cell(ingest[label], 0)} | {cell(ingest[label], 1)} "
            f"| < {INGEST_TARGET_S:g} s |",
        ]
    print("\n".join(body))
    if not ns.no_write:
        write_section(SCALE_SECTION, body)


STARTUP_SECTION = "## Start-up of file and store commands (issue 34)"
STARTUP_TARGET_S = 0.3
# Modules a command should not load unless it needs them, with what needs them.
HEAVY_MODULES = ("sqlalchemy", "sqlalchemy.orm", "scipy.special", "scipy.stats", "ruptures", "torch", "pandas")


def _bytecode_cached(work: Path) -> dict[str, str]:
    """Environment in which commlens' modules are compiled once and read from bytecode afterwards, as an
    installed package's are (pip compiles them at install). Where ``PYTHONDONTWRITEBYTECODE`` is set (this
    machine's sessions set it), every command would otherwise compile each commlens module it imports again:
    about a third of ``compare``'s CPU time. The cache lives in ``work`` (``PYTHONPYCACHEPREFIX``), never
    beside the sources; the warm-up run fills it."""
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(work / "pycache")}


def _startup_commands(work: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(label, argv after ``commlens``, extra environment): ten commands people run most, on real inputs.

    ``file:`` commands run with ``COMMLENS_DB`` naming a store that does not exist (nothing to read but the
    files); store commands read a SQLite store holding the two example logs.
    """
    data = ROOT / "tests" / "data" / "regress"
    base, cand = data / "base-all_reduce.log", data / "candidate-all_reduce-10pct-slower.log"
    store = work / "store.db"
    nostore = {"COMMLENS_DB": str(work / "absent" / "results.db")}
    withstore = {"COMMLENS_DB": str(store)}
    env = {**os.environ, **withstore}
    for i, log in enumerate((base, cand)):
        subprocess.run(
            [sys.executable, "-m", "commlens", "ingest", str(log), "--tag", f"t{i}"],
            env=env,
            check=True,
            capture_output=True,
        )
    runs = json.loads(
        subprocess.run(
            [sys.executable, "-m", "commlens", "runs", "--json"], env=env, check=True, capture_output=True, text=True
        ).stdout
    )
    run_id = runs[0]["run_id"]
    return [
        ("commlens --help", ["--help"], nostore),
        ("commlens bench --help", ["bench", "--help"], nostore),
        (f"commlens compare file:{base.name} file:{cand.name}", ["compare", f"file:{base}", f"file:{cand}"], nostore),
        (f"commlens show {run_id[:8]}", ["show", run_id[:8]], withstore),
        ("commlens runs", ["runs"], withstore),
        ("commlens runs (no store yet)", ["runs"], nostore),
        ("commlens detect", ["detect"], withstore),
        ("commlens export --format json -o -", ["export", "--format", "json", "-o", "-"], withstore),
        ("commlens db status", ["db", "status"], withstore),
        (f"commlens ingest {base.name} (fresh store)", ["ingest", str(base)], {}),
    ]


def _time_command(
    argv: list[str], env_extra: dict[str, str], work: Path, repeats: int
) -> tuple[list[float], list[float]]:
    """Wall and CPU times (user + system) of ``repeats`` runs after one warm-up (hyperfine's way: the whole
    process, start to exit)."""
    import resource

    walls, cpus = [], []
    for i in range(repeats + 1):
        extra = {"COMMLENS_DB": str(work / f"ingest-{len(argv)}-{i}-{time.monotonic_ns()}.db"), **env_extra}
        env = {**os.environ, **extra}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "commlens", *argv], env=env, capture_output=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"commlens {' '.join(argv)}: exit {proc.returncode}\n{proc.stderr.decode()[-2000:]}")
        if i:
            walls.append(wall)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def _import_profile(argv: list[str], env_extra: dict[str, str], work: Path) -> tuple[float, list[str]]:
    """``python -X importtime``: the cumulative import time of everything (s) and which heavy modules loaded."""
    extra = {"COMMLENS_DB": str(work / f"ingest-importtime-{time.monotonic_ns()}.db"), **env_extra}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "commlens", *argv],
        env={**os.environ, **extra},
        capture_output=True,
        text=True,
    )
    total_us, loaded = 0, []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "self [us]" in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if len(name) - len(name.lstrip()) == 1:  # top-level imports only: their cumulative times add up
            total_us += int(cumulative)
        if name.strip() in HEAVY_MODULES:
            loaded.append(name.strip())
    return total_us / 1e6, sorted(set(loaded))


def _startup(ns: argparse.Namespace) -> None:
    """Time the start-up commands and write their section."""
    repeats = ns.startup_repeats
    sources = [("", "")] + ([(" (before)", ns.startup_before)] if ns.startup_before else [])
    loads = [os.getloadavg()[0]]
    rows = []
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        work = Path(tmp)
        for label, argv, env_extra in _startup_commands(work):
            for suffix, src in sources:  # this tree and the earlier one, one right after the other
                env = {**env_extra, **_bytecode_cached(work), **({"PYTHONPATH": src} if src else {})}
                walls, cpus = _time_command(argv, env, work, repeats)
                imports_s, heavy = _import_profile(argv, env, work)
                rows.append((label + suffix, walls, cpus, imports_s, heavy))
                print(
                    f"{label}{suffix}: median {statistics.median(walls):.3f} s, min {min(walls):.3f} s, CPU min "
                    f"{min(cpus):.3f} s; {', '.join(heavy) or '-'}",
                    flush=True,
                )
    loads.append(os.getloadavg()[0])
    body = [
        f"`.venv/bin/python benchmarks/harness_overhead.py --startup` on {platform.node() or 'this host'} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}), {dt.date.today().isoformat()}, 1-minute load "
        f"{min(loads):.1f}-{max(loads):.1f} (the machine shared with other sessions). "
        f"Each command run {repeats} times after one warm-up, the whole process timed from start to exit "
        "(as hyperfine does), with its CPU time (user + system, which the load stretches less than the wall time); "
        "the import figures from one more run under `python -X importtime`. Modules are read from bytecode "
        "compiled by the warm-up run, as an installed package's are (figures before 2026-12-04 19:10 UTC "
        "compiled commlens' sources in every run: this machine sets `PYTHONDONTWRITEBYTECODE`). Store "
        "commands read a SQLite store holding the two logs of `tests/data/regress/`; file commands run with "
        "`COMMLENS_DB` naming a store that does not exist. Target: compare of two files, show, runs under "
        f"{STARTUP_TARGET_S} s."
        + (
            f" `(before)`: the same command with `PYTHONPATH` at {ns.startup_before_name}, run right after."
            if ns.startup_before
            else ""
        ),
        "",
        "| command | median (s) | min (s) | CPU median (s) | CPU min (s) | imports (s) | heavy modules loaded |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, walls, cpus, imports_s, heavy in rows:
        body.append(
            f"| `{label}` | {statistics.median(walls):.3f} | {min(walls):.3f} | {statistics.median(cpus):.3f} "
            f"| {min(cpus):.3f} | {imports_s:.3f} | {', '.join(heavy) or '-'} |"
        )
    print("\n".join(body))
    if not ns.no_write:
        write_section(STARTUP_SECTION, body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4], help="world sizes")
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="sizes in bytes")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per cell, at least")
    p.add_argument("--max-rounds", type=int, default=41, help="rounds per cell, at most")
    p.add_argument(
        "--cell-budget",
        type=float,
        default=1.0,
        help="seconds per cell: cheap cells add rounds (beyond --rounds) until this is spent",
    )
    p.add_argument("--iters", type=int, default=20, help="timed iterations (commlens default 20)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up iterations (commlens default 5)")
    p.add_argument(
        "--check-iters",
        type=int,
        default=0,
        help="harness check iterations (commlens default 1; they run after the timed loop and do not "
        "change its samples, but cost seconds per round at 64 MiB, so 0 here by default)",
    )
    p.add_argument("--sweep-runs", type=int, default=3, help="timed `commlens bench` sweeps (0: skip)")
    p.add_argument(
        "--sweep-nocheck-runs",
        type=int,
        default=1,
        help="extra timed sweeps with -c 0, to show what validation costs (0: skip)",
    )
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    p.add_argument("--json", default=None, help="also write every figure to this JSON file")
    p.add_argument("--startup", action="store_true", help="only the start-up of ten commands (its own section)")
    p.add_argument("--startup-repeats", type=int, default=7, help="timed runs of each start-up command")
    p.add_argument("--startup-before", default=None, help="--startup: also time each command with PYTHONPATH=this")
    p.add_argument("--startup-before-name", default="an earlier commit's sources", help="--startup-before, in words")
    p.add_argument(
        "--sweep-compare",
        type=int,
        default=0,
        help="only the default sweep against a raw loop: this many interleaved runs of each (its own section)",
    )
    p.add_argument("--sweep-default-only", action="store_true", help="--sweep-compare: only the default variant")
    p.add_argument(
        "--same-job",
        type=int,
        default=0,
        help="only commlens' sweep and a raw loop alternating this many times inside one job (its own section)",
    )
    p.add_argument("--same-job-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--scale", action="store_true", help="only detect over 1,000 runs and ingest of 1,000 logs (its own section)"
    )
    p.add_argument("--scale-repeats", type=int, default=3, help="timed runs of each --scale command")
    p.add_argument("--scale-before", default=None, help="--scale: also time the commands with PYTHONPATH=this src")
    p.add_argument("--scale-before-name", default="an earlier commit", help="what --scale-before is, in words")
    p.add_argument("--raw-sweep-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    ns = p.parse_args(argv)
    if ns.startup:
        _startup(ns)
    elif ns.scale:
        _scale(ns, argv)
    elif ns.raw_sweep_worker:
        _raw_sweep_worker(ns)
    elif ns.same_job_worker:
        _same_job_worker(ns)
    elif ns.same_job:
        _same_job(ns, argv)
    elif ns.sweep_compare:
        _sweep_compare(ns, argv)
    elif ns.worker:
        _worker(ns)
    else:
        _driver(ns, argv)


if __name__ == "__main__":
    main()
