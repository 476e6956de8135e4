#!/usr/bin/env python
"""Issue 7 on gloo/CPU: commlens' algorithms against the built-in collectives, ``auto`` against the best, model error.

Run from the repository root (about 10-15 minutes on a quiet 2-core machine)::

    .venv/bin/python benchmarks/algos_speed.py            # --help for shorter runs

1. **Pass 1, tuning**: ``commlens tune`` on 4 local ranks: all_reduce from 16 B
   to 64 MiB (factor 4), the other ops from 1 KiB to 16 MiB (factor 16); every
   algorithm and the built-in, each row validated, written to a tuning table.
2. **Pass 2, auto**: ``commlens bench --algo builtin,all,auto`` over the same
   sizes, ``auto`` reading that table (``COMMLENS_TUNING``).
3. Figures, from each row's median iteration time (p50) unless said:
   ring all_reduce busBW / the built-in's at >= 16 MiB (target >= 85%; mean
   time too, as nccl-tests reports); the best commlens algorithm's latency /
   the built-in's at <= 4 KiB (target <= 1.5x); ``auto`` / the best algorithm
   per size bucket in pass 2 (target <= 1.05), beside the same algorithm's
   two measurements in that pass (the noise floor); the cost model's error
   per algorithm: ``local-cpu`` fitted (``commlens.model.fit``) on pass 1,
   checked on pass 2.

Writes the section "Collective algorithms on gloo/CPU (issue 7)" of docs/benchmarks.md (``--no-docs``: print only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from algos_common import STAT, bench, load, row_time, size_text, times, tune, us  # noqa: E402
from docsection import write_section  # noqa: E402

SECTION = "## Collective algorithms on gloo/CPU (issue 7)"
OTHERS = "all_gather,reduce_scatter,all_to_all,broadcast,reduce"


def busbw(m, stat: str) -> float:  # noqa: ANN001 - a Measurement
    from commlens.ops import OPS

    return OPS[m.op].busbw(m.size_bytes, row_time(m, stat), m.world_size)


def algo_names(op: str) -> list[str]:
    from commlens.algos import algorithms_for

    return list(algorithms_for(op))


def op_table(run, op: str) -> list[str]:  # noqa: ANN001 - a Run
    """Per size: every implementation's p50 time (us), the fastest commlens one in bold, auto's pick."""
    names = algo_names(op)
    rows = times(run, op)
    has_auto = any("auto" in r for r in rows.values())
    head = ["size", "builtin", *names] + (["auto"] if has_auto else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for size in sorted(rows):
        r = rows[size]
        ours = {a: row_time(r[a]) for a in names if a in r}
        best = min(ours, key=ours.__getitem__) if ours else None
        cells = [size_text(size), us(row_time(r["builtin"])) if "builtin" in r else "-"]
        for a in names:
            if a not in r:
                cells.append("-")
                continue
            text = us(row_time(r[a]))
            cells.append(f"**{text}**" if a == best else text)
        if has_auto:
            cells.append(us(row_time(r["auto"])) if "auto" in r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def ring_ratio_rows(runs: list[tuple[str, object]], min_size: int) -> tuple[list[str], bool]:
    lines = ["| pass | size | builtin busBW (GB/s, p50) | ring busBW (p50) | ring / builtin (p50) | "
             "ring / builtin (mean) |", "|---|---:|---:|---:|---:|---:|"]
    ok = True
    for label, run in runs:
        for size, r in sorted(times(run, "all_reduce").items()):
            if size < min_size or "ring" not in r or "builtin" not in r:
                continue
            p50 = busbw(r["ring"], "p50") / busbw(r["builtin"], "p50")
            mean = busbw(r["ring"], "mean") / busbw(r["builtin"], "mean")
            ok &= p50 >= 0.85
            lines.append(f"| {label} | {size_text(size)} | {busbw(r['builtin'], 'p50') / 1e9:.3f} | "
                         f"{busbw(r['ring'], 'p50') / 1e9:.3f} | {p50:.2f} | {mean:.2f} |")
    return lines, ok


def latency_rows(runs: list[tuple[str, object]], max_size: int) -> tuple[list[str], bool]:
    lines = ["| pass | size | builtin (us) | best commlens | its time (us) | best / builtin |",
             "|---|---:|---:|---|---:|---:|"]
    ok = True
    names = algo_names("all_reduce")
    for label, run in runs:
        for size, r in sorted(times(run, "all_reduce").items()):
            if size > max_size or "builtin" not in r:
                continue
            ours = {a: row_time(r[a]) for a in names if a in r}
            best = min(ours, key=ours.__getitem__)
            ratio = ours[best] / row_time(r["builtin"])
            ok &= ratio <= 1.5
            lines.append(f"| {label} | {size_text(size)} | {us(row_time(r['builtin']))} | {best} | "
                         f"{us(ours[best])} | {ratio:.2f}x |")
    return lines, ok


def auto_rows(run, ops: list[str], table_path: Path) -> tuple[list[str], int, int]:  # noqa: ANN001
    """auto / best per bucket, with what auto ran and that algorithm's own time in the same pass."""
    from commlens.algos.tuning import load_table, lookup

    table = load_table(table_path)
    lines = ["| op | size | auto ran | auto (us) | best | best (us) | auto / best | auto / same algorithm |",
             "|---|---:|---|---:|---|---:|---:|---:|"]
    met = total = 0
    for op in ops:
        names = algo_names(op)
        for size, r in sorted(times(run, op).items()):
            if "auto" not in r:
                continue
            ours = {a: row_time(r[a]) for a in names if a in r}
            best = min(ours, key=ours.__getitem__)
            ran = lookup(op, size, run.world_size, table).algo
            t_auto = row_time(r["auto"])
            ratio = t_auto / ours[best]
            total += 1
            met += ratio <= 1.05
            lines.append(f"| {op} | {size_text(size)} | {ran} | {us(t_auto)} | {best} | {us(ours[best])} | "
                         f"{ratio:.2f} | {t_auto / ours[ran]:.2f} |")
    return lines, met, total


def mape_rows(train: list, test: list) -> list[str]:
    """local-cpu fitted on pass 1 (every implementation), checked on pass 2: error per op and algorithm."""
    from commlens.model.check import check_runs
    from commlens.model.fit import fit_runs
    from commlens.topology import load_topology

    fitted = fit_runs(train, load_topology("local-cpu"), stat=STAT, min_size_bytes=1024)
    wide = check_runs(test, fitted.topology, stat=STAT, min_size_bytes=1024).by_algo()
    large = check_runs(test, fitted.topology, stat=STAT, min_size_bytes=64 << 10).by_algo()
    lines = ["| op / algorithm | rows >= 1 KiB | MAPE | bias | rows >= 64 KiB | MAPE | max | bias |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for key, s in wide.items():
        big = large.get(key)
        tail = (f"{big['rows']} | {big['mape_pct']:.1f}% | {big['max_ape_pct']:.1f}% | {big['bias_pct']:+.1f}%"
                if big else "0 | - | - | -")
        lines.append(f"| {key} | {s['rows']} | {s['mape_pct']:.1f}% | {s['bias_pct']:+.1f}% | {tail} |")
    consts = ", ".join(f"{p.name} {p.value * 1e6:.1f} us" if p.unit == "s" else f"{p.name} {p.value / 1e9:.3g} GB/s"
                       for p in fitted.params if p.held_because is None)
    return lines + ["", f"Fitted on pass 1 ({len(fitted.residuals)} rows, in-sample MAPE "
                        f"{fitted.mape_pct:.1f}%): {consts}."]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--iters", type=int, default=10, help="timed iterations per row")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-bytes", default="64M", help="largest all_reduce size")
    p.add_argument("--others-max", default="16M", help="largest size of the other ops")
    p.add_argument("--no-others", action="store_true", help="all_reduce only")
    p.add_argument("--no-docs", action="store_true", help="print only; do not write docs/benchmarks.md")
    ns = p.parse_args()
    started = dt.datetime.now(dt.timezone.utc)
    load_start = load()
    timing = ["--nproc", str(ns.nproc), "-n", str(ns.iters), "-w", str(ns.warmup)]
    ar_sizes = ["-b", "16", "-e", ns.max_bytes, "-f", "4"]
    other_sizes = ["-b", "1K", "-e", ns.others_max, "-f", "16"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        table, db = work / "tuning.json", work / "tune.db"
        ar1, ar_summary = tune(["--op", "all_reduce", *ar_sizes, *timing], table, db, replace=True)
        runs1, runs2 = [ar1], []
        other1 = None
        if not ns.no_others:
            other1, _ = tune(["--op", OTHERS, *other_sizes, *timing], table, db)
            runs1.append(other1)
        env = {"COMMLENS_TUNING": str(table)}
        ar2 = bench(["--op", "all_reduce", "--algo", "builtin,all,auto", *ar_sizes, *timing], work / "ar2.json", env)
        runs2.append(ar2)
        other2 = None
        if not ns.no_others:
            other2 = bench(["--op", OTHERS, "--algo", "builtin,all,auto", *other_sizes, *timing], work / "o2.json",
                           env)
            runs2.append(other2)
        passes = [("1", ar1), ("2", ar2)]
        ring_lines, ring_ok = ring_ratio_rows(passes, 16 << 20)
        lat_lines, lat_ok = latency_rows(passes, 4 << 10)
        auto_lines, auto_met, auto_total = auto_rows(ar2, ["all_reduce"], table)
        other_auto: list[str] = []
        if other2 is not None:
            other_auto, o_met, o_total = auto_rows(other2, OTHERS.split(","), table)
            auto_met, auto_total = auto_met + o_met, auto_total + o_total
            auto_lines += other_auto[2:]
        mape = mape_rows(runs1, runs2)
        body = [
            f"Produced by `.venv/bin/python benchmarks/algos_speed.py`, {started.isoformat(timespec='seconds')}, "
            f"{(dt.datetime.now(dt.timezone.utc) - started).total_seconds():.0f} s; {ns.nproc} ranks, gloo on CPU, "
            f"{ns.iters} timed + {ns.warmup} warm-up iterations per row, every row validated. Load average "
            f"{load_start} at the start, {load()} at the end (2 cores; other jobs shared the machine).",
            "",
            "Pass 1 is `commlens tune` (every algorithm and the built-in), pass 2 `commlens bench --algo "
            "builtin,all,auto` with `auto` reading pass 1's table. Times are each row's median iteration (p50).",
            "",
            f"**Target: ring all_reduce >= 85% of the built-in's busBW at >= 16 MiB** — "
            f"{'met' if ring_ok else '**not met**'} (p50 in every pass and size).",
            "",
            *ring_lines,
            "",
            f"**Target: best commlens all_reduce within 1.5x of the built-in's latency at <= 4 KiB** — "
            f"{'met' if lat_ok else '**not met**'}.",
            "",
            *lat_lines,
            "",
            f"**Target: `auto` within 5% of the best algorithm in every size bucket** — {auto_met} of "
            f"{auto_total} buckets ({'met' if auto_met == auto_total else '**not met**'}). *auto / same "
            "algorithm*: auto's time over the time of the algorithm it ran, measured separately in the same "
            "pass: the run-to-run noise of one row.",
            "",
            *auto_lines,
            "",
            "**all_reduce, pass 2** (p50 us; bold: the fastest commlens algorithm):",
            "",
            *op_table(ar2, "all_reduce"),
            "",
        ]
        if other2 is not None:
            for op in OTHERS.split(","):
                body += [f"**{op}, pass 2** (p50 us):", "", *op_table(other2, op), ""]
        body += ["**Cost model per algorithm** (`local-cpu` fitted on pass 1 with `commlens.model.fit`, p50, rows "
                 ">= 1 KiB; checked on pass 2; `auto` rows left out):", "", *mape, ""]
        body += ["Tuning table written by pass 1 (all_reduce):", "", "```", *ar_summary.strip().splitlines(), "```"]
    text = "\n".join(body)
    print(text)
    if not ns.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
