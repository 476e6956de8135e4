#!/usr/bin/env python
"""Issue 34's memory target: peak RSS per rank against the message size, commlens beside a raw loop.

Run from the repository root::

    .venv/bin/python benchmarks/bench_footprint.py            # 1 and 16 MiB, every op and dtype; -e 1G
    .venv/bin/python benchmarks/bench_footprint.py --quick    # 1 and 64 MiB, four ops, two dtypes

It writes the section ``## Per-rank memory footprint (issue 34)`` of ``docs/benchmarks.md`` and prints the same
figures. For every op and size (gloo on CPU, 4 ranks), one after the other in the same run:

1. **commlens**: the real worker (``commlens.bench.worker.run_worker``, what ``commlens bench`` and
   ``torchrun -m commlens.bench`` run) with ``-b SIZE -e SIZE -d all``; around each row (one dtype) the
   rank resets its peak resident set (``/proc/self/clear_refs``, 5) and reads it back after the row
   (``VmHWM``): the peak while that row was set up, warmed up, timed and checked.
2. **raw loop**: the same ``torch.distributed`` call on tensors of the op's send and receive counts, filled
   once, warmed up and timed for as many iterations, measured the same way.

A run's *base* is its ranks' resident set when their first row started (the interpreter, torch, gloo; the
buffers are reserved but not yet touched); the figure the target holds is the peak over ranks and rows, against
``3 x size + 300 MB``. Then ``-e 1G`` at 4 ranks (all_reduce float32 and all_to_all float32) shows the
largest size runs here, with its peak.

The workers run under ``python -m torch.distributed.run --standalone`` (this script launches itself).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from docsection import write_section  # noqa: E402

from commlens.ops import OP_NAMES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Per-rank memory footprint (issue 34)"
MIB = 1024 * 1024
NPROC = 4
OPS = tuple(op for op in OP_NAMES if op != "barrier")  # every payload op of the catalog
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
SIZES = (1 * MIB, 16 * MIB)
QUICK_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
QUICK_DTYPES = ("float32", "int64")
QUICK_SIZES = (1 * MIB, 64 * MIB)
ITERS, WARMUP = 2, 1
BASE_LIMIT_MB = 300.0
FACTOR_LIMIT = 3.0


# ---------------------------------------------------------------- inside one rank


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


class _RowPeaks:
    """Per row: the resident set when it started and its peak, in bytes."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def measure(self, label: dict[str, Any], body: Any) -> Any:
        _reset_peak()
        base = _status_kb("VmRSS") * 1024
        result = body()
        self.rows.append({**label, "base_bytes": base, "peak_bytes": _status_kb("VmHWM") * 1024})
        return result


def commlens_worker(out_dir: Path, argv: list[str]) -> int:
    """One rank of ``commlens.bench`` with each row's peak resident set recorded."""
    from commlens.bench import worker

    peaks = _RowPeaks()
    real_run_cell = worker.Sweep._run_cell

    def run_cell(self: Any, rows: Any, cell: Any, *args: Any, **kwargs: Any) -> Any:
        row = rows[cell[0]]
        label = {"op": row.spec.name, "dtype": row.dtype, "size_bytes": row.size}
        outcomes = peaks.measure(label, lambda: real_run_cell(self, rows, cell, *args, **kwargs))
        peaks.rows[-1]["ran"] = all(o.skip_note is None for o in outcomes)
        return outcomes

    worker.Sweep._run_cell = run_cell  # type: ignore[method-assign]
    code = worker.run_worker(argv)
    rank = int(os.environ["RANK"])
    (out_dir / f"commlens-rank{rank}.json").write_text(json.dumps(peaks.rows))
    return code


def raw_worker(out_dir: Path, op: str, dtypes: list[str], size: int) -> int:
    """One rank of a plain torch.distributed loop: the op's buffers, filled once, warmed up, timed."""
    import torch
    import torch.distributed as dist

    from commlens.bench.validate import TORCH_DTYPES

    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    peaks = _RowPeaks()
    for dtype in dtypes:
        tdt = TORCH_DTYPES[dtype]
        total = size // tdt.itemsize
        per = total // n

        def body(tdt: Any = tdt, total: int = total, per: int = per) -> bool:
            ones = lambda k: torch.ones(k, dtype=tdt)  # noqa: E731
            if op in ("all_reduce", "broadcast", "reduce"):
                t = ones(total)
                call = {
                    "all_reduce": lambda: dist.all_reduce(t),
                    "broadcast": lambda: dist.broadcast(t, 0),
                    "reduce": lambda: dist.reduce(t, 0),
                }[op]
            elif op in ("all_gather", "gather"):
                src, out = ones(per), ones(per * n) if op == "all_gather" or rank == 0 else None
                if op == "all_gather":
                    call = lambda: dist.all_gather_into_tensor(out, src)  # noqa: E731
                else:
                    parts = list(out.chunk(n)) if out is not None else None
                    call = lambda: dist.gather(src, parts, dst=0)  # noqa: E731
            elif op in ("reduce_scatter", "scatter"):
                full, dst = ones(per * n) if op == "reduce_scatter" or rank == 0 else None, ones(per)
                if op == "reduce_scatter":
                    call = lambda: dist.reduce_scatter_tensor(dst, full)  # noqa: E731
                else:
                    parts = list(full.chunk(n)) if full is not None else None
                    call = lambda: dist.scatter(dst, parts, src=0)  # noqa: E731
            elif op == "all_to_all":
                send, recv = ones(per * n), ones(per * n)
                call = lambda: dist.all_to_all_single(recv, send)  # noqa: E731
            else:  # sendrecv: a ring, as commlens runs it
                send, recv = ones(total), ones(total)

                def call() -> None:
                    ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
                    for w in dist.batch_isend_irecv(ops):
                        w.wait()

            try:
                for _ in range(WARMUP + ITERS):
                    call()
            except RuntimeError:  # gloo refuses the dtype for this op
                return False
            return True

        dist.barrier()
        ran = peaks.measure({"op": op, "dtype": dtype, "size_bytes": size}, body)
        peaks.rows[-1]["ran"] = ran
    (out_dir / f"raw-rank{rank}.json").write_text(json.dumps(peaks.rows))
    dist.destroy_process_group()
    return 0


HEAP_OPS = ("all_gather", "reduce_scatter")
HEAP_SIZES = (4 * MIB, 16 * MIB)


def heap_cost_worker(out_dir: Path) -> int:
    """One rank: all_gather and reduce_scatter rows as the sweep runs them (out of place, float32 and int32,
    round 0 then 4 later rounds of 4 timed iterations, freed memory handed back before each placement as
    ``Sweep._run_cell`` does), with the minor page faults and CPU time of each timed loop."""
    import resource

    import torch.distributed as dist

    import commlens.bench.worker as worker_mod
    from commlens.bench.config import build_parser, config_from_args
    from commlens.ops import OPS as CATALOG

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = config_from_args(build_parser("heap-cost").parse_args(["--op", ",".join(HEAP_OPS), "-e", "16M"]))
    sweep = worker_mod.Sweep(cfg, rank, world, 0, None, None)
    sweep.buffers.reserve(max(HEAP_SIZES), max(HEAP_SIZES))
    loop: dict[str, float] = {}
    real_measure = worker_mod.measure_interleaved

    def measured(colls: Any, iters: int, device: Any, blocking: bool, seed: int | None = None) -> Any:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        out = real_measure(colls, iters, device, blocking, seed)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        loop.update(cpu=r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, faults=r1.ru_minflt - r0.ru_minflt)
        return out

    worker_mod.measure_interleaved = measured
    rows: dict[str, dict[str, float]] = {}
    for op in HEAP_OPS:
        for size in HEAP_SIZES:
            acc = rows.setdefault(f"{op} {size // MIB}", {"cpu": 0.0, "faults": 0.0, "iters": 0.0})
            for dtype in ("float32", "int32"):
                for r in range(5):
                    worker_mod.release_freed_memory()
                    redop = "sum" if op == "reduce_scatter" else None
                    sweep.run_placement(CATALOG[op], dtype, redop, None, size, False, ["builtin"], 4, None, r)
                    acc["cpu"] += loop["cpu"]
                    acc["faults"] += loop["faults"]
                    acc["iters"] += 4
    peak = _status_kb("VmHWM") * 1024
    (out_dir / f"heap-rank{rank}.json").write_text(json.dumps({"rows": rows, "peak": peak}))
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------- the driver


EXTRA_ENV: dict[str, str] = {}  # --env NAME=VALUE: set for every rank (e.g. glibc's MALLOC_MMAP_THRESHOLD_)


def _launch(out_dir: Path, worker_args: list[str]) -> float:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={NPROC}",
        str(Path(__file__).resolve()),
        "--out",
        str(out_dir),
        *worker_args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"), **EXTRA_ENV}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed ({' '.join(worker_args)}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def _collect(out_dir: Path, who: str) -> dict[tuple[str, str, int], dict[str, float]]:
    """(op, dtype, size) -> the largest rank's peak over the row's rounds, and the largest rank's base: its
    resident set when its first row started (a row runs once per round; later starts hold what gloo kept)."""
    table: dict[tuple[str, str, int], dict[str, float]] = {}
    for rank in range(NPROC):
        rows = json.loads((out_dir / f"{who}-rank{rank}.json").read_text())
        base = rows[0]["base_bytes"] if rows else 0
        for row in rows:
            if not row["ran"]:
                continue
            key = (row["op"], row["dtype"], row["size_bytes"])
            cur = table.setdefault(key, {"peak": 0.0, "base": 0.0})
            cur["peak"] = max(cur["peak"], row["peak_bytes"])
            cur["base"] = max(cur["base"], base)
    return table


def measure(ops: tuple[str, ...], dtypes: tuple[str, ...], sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    results = []
    for op in ops:
        for size in sizes:
            with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
                out = Path(tmp)
                bench_args = ["-b", str(size), "-e", str(size), "-n", str(ITERS), "-w", str(WARMUP)]
                bench_args += ["--op", op, "-d", ",".join(dtypes), "--backend", "gloo", "--quiet"]
                t_commlens = _launch(out, ["--commlens", "--", *bench_args])
                t_raw = _launch(out, ["--raw", op, "--dtypes", ",".join(dtypes), "--size", str(size)])
                mine, raw = _collect(out, "commlens"), _collect(out, "raw")
            for dtype in dtypes:
                key = (op, dtype, size)
                if key not in mine:
                    continue
                results.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        "size_bytes": size,
                        "commlens_peak": mine[key]["peak"],
                        "commlens_base": mine[key]["base"],
                        "raw_peak": raw[key]["peak"] if key in raw else None,
                    }
                )
            print(f"{op} {size // MIB} MiB: commlens launch {t_commlens:.1f} s, raw {t_raw:.1f} s", flush=True)
    return results


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:,.0f}"


def _within(r: dict[str, Any]) -> bool:
    return r["commlens_peak"] <= FACTOR_LIMIT * r["size_bytes"] + BASE_LIMIT_MB * 1e6


def large_run(size: int, op: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        out = Path(tmp)
        bench_args = ["-b", str(size), "-e", str(size), "-n", "1", "-w", "1", "--op", op, "-d", "float32"]
        wall = _launch(out, ["--commlens", "--", *bench_args, "--backend", "gloo", "--quiet"])
        mine = _collect(out, "commlens")
    (row,) = mine.values()
    return {"op": op, "size_bytes": size, "peak": row["peak"], "base": row["base"], "wall_s": wall}


def heap_cost(reps: int, settings: list[str]) -> None:
    """What a malloc setting per rank (each of ``settings``, ``NAME=VALUE``; ``MALLOC_ARENA_MAX=1`` if none) costs
    the timed loops: jobs with the default and with each setting, in rotated order, ``reps`` each (see
    :func:`heap_cost_worker`); prints faults and CPU per timed iteration."""
    kinds: dict[str, dict[str, str]] = {"default": {}}
    for setting in settings or ["MALLOC_ARENA_MAX=1"]:
        name, value = setting.split("=", 1)
        kinds[setting] = {name: value}
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    loads = [os.getloadavg()[0]]
    for i in range(reps):
        for kind in list(kinds)[i % len(kinds) :] + list(kinds)[: i % len(kinds)]:
            EXTRA_ENV.clear()
            EXTRA_ENV.update(kinds[kind])
            with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
                _launch(Path(tmp), ["--heap-cost-worker"])
                got[kind] += [json.loads((Path(tmp) / f"heap-rank{r}.json").read_text()) for r in range(NPROC)]
            loads.append(os.getloadavg()[0])
    print(
        f"{reps} jobs of each, alternating; 1-minute load {min(loads):.1f}-{max(loads):.1f}; per timed iteration, "
        "mean over ranks and jobs:"
    )
    print("| row (out of place) | " + " | ".join(f"{k}: faults / CPU ms" for k in kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for row in got[next(iter(kinds))][0]["rows"]:
        cells = []
        for kind in kinds:
            it = sum(j["rows"][row]["iters"] for j in got[kind])
            faults = sum(j["rows"][row]["faults"] for j in got[kind]) / it
            cells.append(f"{faults:,.0f} / {sum(j['rows'][row]['cpu'] for j in got[kind]) / it * 1e3:.2f}")
        print(f"| {row} MiB | " + " | ".join(cells) + " |")
    print(
        "peak of the largest rank (MB): " + ", ".join(f"{k} {max(j['peak'] for j in got[k]) / 1e6:,.0f}" for k in kinds)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer ops, dtypes and sizes")
    ap.add_argument("--no-large", action="store_true", help="skip the -e 1G runs")
    ap.add_argument("--no-doc", action="store_true", help="print only; leave docs/benchmarks.md alone")
    ap.add_argument("--ops", help="only these ops (comma-separated; implies --no-doc)")
    ap.add_argument("--sizes-mib", help="only these sizes in MiB (comma-separated; implies --no-doc)")
    ap.add_argument("--only-dtypes", help="only these dtypes (comma-separated; implies --no-doc)")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for every rank (implies --no-doc)")
    ap.add_argument(
        "--heap-cost",
        type=int,
        default=0,
        help="only what a malloc setting per rank costs the timed loops: this many jobs with the default and "
        "with each --heap-setting",
    )
    ap.add_argument(
        "--heap-setting",
        action="append",
        default=[],
        help="NAME=VALUE compared by --heap-cost (repeatable; default MALLOC_ARENA_MAX=1)",
    )
    ap.add_argument("--heap-cost-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--commlens", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--raw", help=argparse.SUPPRESS)
    ap.add_argument("--dtypes", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.commlens:
        sys.exit(commlens_worker(ns.out, ns.rest))
    if ns.heap_cost_worker:
        sys.exit(heap_cost_worker(ns.out))
    if ns.heap_cost:
        heap_cost(ns.heap_cost, ns.heap_setting)
        return
    if ns.raw:
        sys.exit(raw_worker(ns.out, ns.raw, ns.dtypes.split(","), ns.size))

    ops, dtypes, sizes = (QUICK_OPS, QUICK_DTYPES, QUICK_SIZES) if ns.quick else (OPS, DTYPES, SIZES)
    if ns.ops or ns.sizes_mib or ns.only_dtypes or ns.env:  # a probe, not the section's figures
        ns.no_doc = True
        ops = tuple(ns.ops.split(",")) if ns.ops else ops
        sizes = tuple(int(x) * MIB for x in ns.sizes_mib.split(",")) if ns.sizes_mib else sizes
        dtypes = tuple(ns.only_dtypes.split(",")) if ns.only_dtypes else dtypes
        EXTRA_ENV.update(dict(e.split("=", 1) for e in ns.env))
    t0 = time.perf_counter()
    results = measure(ops, dtypes, sizes)
    large = [] if ns.no_large else [large_run(1024 * MIB, op) for op in ("all_reduce", "all_to_all")]
    elapsed = time.perf_counter() - t0

    body = [
        f"`.venv/bin/python benchmarks/bench_footprint.py{' --quick' if ns.quick else ''}` on "
        f"{platform.node() or 'this host'} ({os.cpu_count()} CPUs, {platform.python_version()}), "
        f"{time.strftime('%Y-%m-%d')}, {elapsed:.0f} s. gloo, {NPROC} ranks, `-n {ITERS} -w {WARMUP}` (check on).",
        "",
        "Peak resident set of the largest rank while one row (one op, dtype and size) was set up, warmed up, "
        "timed and checked (`VmHWM` after resetting it through `/proc/self/clear_refs` at the row's start), "
        "commlens' worker beside a plain `torch.distributed` loop on the op's send and receive tensors, in "
        "the same run. *base*: the rank's resident set when the row started. Target: peak <= "
        f"{FACTOR_LIMIT:g} x size + {BASE_LIMIT_MB:.0f} MB (and base under {BASE_LIMIT_MB:.0f} MB).",
        "",
        "| op | size (MiB) | dtypes | commlens peak (MB), max / min over dtypes | base (MB) | raw loop peak (MB) "
        "| commlens / raw | peak / size | target |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    misses = 0
    for op in ops:
        for size in sizes:
            rows = [r for r in results if r["op"] == op and r["size_bytes"] == size]
            if not rows:
                continue
            worst = max(rows, key=lambda r: r["commlens_peak"])
            best = min(rows, key=lambda r: r["commlens_peak"])
            raws = [r["raw_peak"] for r in rows if r["raw_peak"] is not None]
            raw_worst = max(raws) if raws else None
            ok = all(_within(r) for r in rows)
            base = rows[0]["commlens_base"]  # before the first row touched the buffers
            misses += 0 if ok else 1
            body.append(
                f"| {op} | {size // MIB} | {len(rows)} | {_mb(worst['commlens_peak'])} / {_mb(best['commlens_peak'])} "
                f"| {_mb(base)} | {_mb(raw_worst)} "
                f"| {worst['commlens_peak'] / raw_worst:.2f}x | "
                f"{(worst['commlens_peak'] - base) / size:.2f} | {'met' if ok else 'MISSED'} |"
                if raw_worst
                else f"| {op} | {size // MIB} | {len(rows)} | {_mb(worst['commlens_peak'])} | - | - | - | - | "
                f"{'met' if ok else 'MISSED'} |"
            )
    body += [
        "",
        "*peak / size*: (highest peak - base) / size: what the rows added to the rank, in messages (under 1 MiB "
        "this is mostly the check's fixed chunk temporaries, about 10 MB). The dtypes column counts the dtypes gloo ran for the op "
        "(it refuses some, e.g. bfloat16 for some ops on some builds); a refused row is not measured.",
        "",
        f"Rows within target: {'all' if misses == 0 else f'all but {misses} (op, size) groups'}.",
        "",
        "A miss at 16 MiB is glibc keeping gloo's freed message-sized temporaries resident within the row "
        "(commlens' worker hands freed pages back between placements and cells, the raw loop does not): "
        "`--ops all_gather,gather,reduce_scatter --sizes-mib 16 --env MALLOC_MMAP_THRESHOLD_=65536` maps "
        "every large temporary afresh and shows the live set (both within 3 x size).",
    ]
    if large:
        body += ["", "`-e 1G` at 4 ranks (`-b 1G -e 1G -n 1 -w 1 -d float32`, check on):", ""]
        body += ["| op | peak of the largest rank (MB) | base (MB) | peak / size | wall (s) | target |"]
        body += ["|---|---:|---:|---:|---:|---|"]
        for r in large:
            ok = r["peak"] <= FACTOR_LIMIT * r["size_bytes"] + BASE_LIMIT_MB * 1e6
            body.append(
                f"| {r['op']} | {_mb(r['peak'])} | {_mb(r['base'])} | "
                f"{(r['peak'] - r['base']) / r['size_bytes']:.2f} | {r['wall_s']:.0f} | {'met' if ok else 'MISSED'} |"
            )
    print("\n".join(body))
    if not ns.no_doc:
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
