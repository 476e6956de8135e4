#!/usr/bin/env python
"""Issue 7 on gloo/CPU: commlens' algorithms against the built-in collectives, ``auto`` against the best, model error.

Run from the repository root (about 12 minutes on the 2-core machine)::

    .venv/bin/python benchmarks/algos_speed.py            # --help for shorter runs

1. **Pass 1, tuning**: ``commlens tune`` on 4 local ranks: all_reduce from 16 B
   to 64 MiB (factor 4), the other ops from 1 KiB to 16 MiB (factor 16); every
   algorithm and the built-in, each row validated, written to a tuning table.
2. **Passes 2.., auto**: ``commlens bench --algo builtin,all,auto
   --interleave`` over the same sizes (``--passes``, default 3, every other
   one in the order auto, all, builtin; within a pass the implementations of
   a size are timed in rounds of shuffled order), ``auto`` reading that table
   (``COMMLENS_TUNING``); their samples are pooled row by row.
3. Figures, from each row's median iteration time (p50) unless said:
   ring all_reduce busBW / the built-in's at >= 16 MiB (target >= 85%; mean
   time too, as nccl-tests reports); the best commlens algorithm's latency /
   the built-in's at <= 4 KiB (target <= 1.5x); ``auto`` / the best algorithm
   per size bucket in the pooled passes (target <= 1.05), beside auto over the
   same algorithm's own row (the noise floor); the cost model's error per
   algorithm: ``local-cpu`` fitted (``commlens.model.fit``) on pass 1,
   checked on the pooled passes.

Writes the section "Collective algorithms on gloo/CPU (issue 7)" of docs/benchmarks.md (``--no-docs``: print only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from algos_common import STAT, bench, load, median_ratio_ci, merge_runs, row_time, size_text, times, tune, us  # noqa: E402
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
    """ring / builtin busBW per pass and size; the verdict is the last run's (the pooled passes)."""
    lines = [
        "| pass | size | builtin busBW (GB/s, p50) | ring busBW (p50) | ring / builtin (p50) | ring / builtin (mean) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    ok = True
    for label, run in runs:
        for size, r in sorted(times(run, "all_reduce").items()):
            if size < min_size or "ring" not in r or "builtin" not in r:
                continue
            p50 = busbw(r["ring"], "p50") / busbw(r["builtin"], "p50")
            mean = busbw(r["ring"], "mean") / busbw(r["builtin"], "mean")
            if run is runs[-1][1]:
                ok &= p50 >= 0.85
            lines.append(
                f"| {label} | {size_text(size)} | {busbw(r['builtin'], 'p50') / 1e9:.3f} | "
                f"{busbw(r['ring'], 'p50') / 1e9:.3f} | {p50:.2f} | {mean:.2f} |"
            )
    return lines, ok and len(lines) > 2


def latency_rows(runs: list[tuple[str, object]], max_size: int) -> tuple[list[str], bool]:
    """best commlens / builtin p50 per pass and size; the verdict is the last run's (the pooled passes)."""
    lines = [
        "| pass | size | builtin (us) | best commlens | its time (us) | best / builtin |",
        "|---|---:|---:|---|---:|---:|",
    ]
    ok = True
    names = algo_names("all_reduce")
    for label, run in runs:
        for size, r in sorted(times(run, "all_reduce").items()):
            if size > max_size or "builtin" not in r:
                continue
            ours = {a: row_time(r[a]) for a in names if a in r}
            best = min(ours, key=ours.__getitem__)
            ratio = ours[best] / row_time(r["builtin"])
            if run is runs[-1][1]:
                ok &= ratio <= 1.5
            lines.append(
                f"| {label} | {size_text(size)} | {us(row_time(r['builtin']))} | {best} | "
                f"{us(ours[best])} | {ratio:.2f}x |"
            )
    return lines, ok and len(lines) > 2


def auto_rows(run, ops: list[str], table_path: Path) -> tuple[list[str], int, int, int]:  # noqa: ANN001
    """auto / best per bucket, with what auto ran and that algorithm's own row in the same passes.

    Returns the lines, the buckets where auto's row is within 5% of the best row, those where the samples
    cannot show it 5% slower (the 95% interval of auto / best reaches down to 1.05), and the number of buckets.
    """
    from commlens.algos.tuning import load_table, lookup

    table = load_table(table_path)
    lines = [
        "| op | size | auto ran | auto (us) | best | best (us) | auto / best (95% CI) | picked / best | "
        "auto / same algorithm |",
        "|---|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    met = within_noise = total = 0
    for op in ops:
        names = algo_names(op)
        for size, r in sorted(times(run, op).items()):
            if "auto" not in r:
                continue
            ours = {a: row_time(r[a]) for a in names if a in r}
            best = min(ours, key=ours.__getitem__)
            ran = lookup(op, size, run.world_size, table).algo
            t_auto = row_time(r["auto"])
            ratio, lo, hi = median_ratio_ci(r["auto"], r[best])
            total += 1
            met += ratio <= 1.05
            within_noise += lo <= 1.05
            lines.append(
                f"| {op} | {size_text(size)} | {ran} | {us(t_auto)} | {best} | {us(ours[best])} | "
                f"{ratio:.2f} ({lo:.2f}-{hi:.2f}) | {ours[ran] / ours[best]:.2f} | {t_auto / ours[ran]:.2f} |"
            )
    return lines, met, within_noise, total


def mape_rows(train: list, test: list) -> list[str]:
    """local-cpu fitted on pass 1 (every implementation), checked on pass 2: error per op and algorithm."""
    from commlens.model.check import check_runs
    from commlens.model.fit import fit_runs
    from commlens.topology import load_topology

    fitted = fit_runs(train, load_topology("local-cpu"), stat=STAT, min_size_bytes=1024)
    wide = check_runs(test, fitted.topology, stat=STAT, min_size_bytes=1024).by_algo()
    large = check_runs(test, fitted.topology, stat=STAT, min_size_bytes=64 << 10).by_algo()
    lines = [
        "| op / algorithm | rows >= 1 KiB | MAPE | bias | rows >= 64 KiB | MAPE | max | bias |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, s in wide.items():
        big = large.get(key)
        tail = (
            f"{big['rows']} | {big['mape_pct']:.1f}% | {big['max_ape_pct']:.1f}% | {big['bias_pct']:+.1f}%"
            if big
            else "0 | - | - | -"
        )
        lines.append(f"| {key} | {s['rows']} | {s['mape_pct']:.1f}% | {s['bias_pct']:+.1f}% | {tail} |")
    consts = ", ".join(
        f"{p.name} {p.value * 1e6:.1f} us" if p.unit == "s" else f"{p.name} {p.value / 1e9:.3g} GB/s"
        for p in fitted.params
        if p.held_because is None
    )
    return lines + [
        "",
        f"Fitted on pass 1 ({len(fitted.residuals)} rows, in-sample MAPE {fitted.mape_pct:.1f}%): {consts}.",
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--iters", type=int, default=10, help="timed iterations per row and pass")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=3, help="passes of the auto sweep, pooled row by row")
    p.add_argument("--max-bytes", default="64M", help="largest all_reduce size")
    p.add_argument("--others-max", default="16M", help="largest size of the other ops")
    p.add_argument("--no-others", action="store_true", help="all_reduce only")
    p.add_argument("--keep", type=Path, help="keep the tuning table, the tune runs' store and the passes here")
    p.add_argument("--no-docs", action="store_true", help="print only; do not write docs/benchmarks.md")
    ns = p.parse_args()
    started, t0 = dt.datetime.now(dt.timezone.utc), time.monotonic()
    load_start = load()
    timing = ["--nproc", str(ns.nproc), "-n", str(ns.iters), "-w", str(ns.warmup)]
    ar_sizes = ["-b", "16", "-e", ns.max_bytes, "-f", "4"]
    other_sizes = ["-b", "1K", "-e", ns.others_max, "-f", "16"]
    sweeps = [("all_reduce", ar_sizes)] + ([] if ns.no_others else [(OTHERS, other_sizes)])
    with tempfile.TemporaryDirectory() as tmp:
        work = ns.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        table, db = work / "tuning.json", work / "tune.db"
        runs1, summaries = [], []
        for k, (ops, sizes) in enumerate(sweeps):
            run, summary = tune(["--op", ops, *sizes, *timing], table, db, replace=k == 0)
            runs1.append(run)
            summaries.append(summary)
        env = {"COMMLENS_TUNING": str(table)}
        passes: dict[str, list] = {ops: [] for ops, _ in sweeps}
        for i in range(ns.passes):
            order = "builtin,all,auto" if i % 2 == 0 else "auto,all,builtin"  # no implementation always first
            for ops, sizes in sweeps:
                passes[ops].append(
                    bench(
                        # one round per row, as these figures were first measured (rounds add set-up per row)
                        ["--op", ops, "--algo", order, "--interleave", "--rounds", "1", *sizes, *timing],
                        work / f"{ops[:10]}-{i}.json",
                        env,
                    )
                )
        ar2 = merge_runs(passes["all_reduce"])
        other2 = None if ns.no_others else merge_runs(passes[OTHERS])
        runs2 = [ar2] + ([] if other2 is None else [other2])
        each = [("1 (tune)", runs1[0])] + [(str(i + 2), r) for i, r in enumerate(passes["all_reduce"])]
        ring_lines, ring_ok = ring_ratio_rows(each + [(f"2-{ns.passes + 1} pooled", ar2)], 16 << 20)
        lat_lines, lat_ok = latency_rows(each + [(f"2-{ns.passes + 1} pooled", ar2)], 4 << 10)
        auto_lines, auto_met, noise_met, auto_total = auto_rows(ar2, ["all_reduce"], table)
        if other2 is not None:
            other_auto, o_met, o_noise, o_total = auto_rows(other2, OTHERS.split(","), table)
            auto_met, noise_met, auto_total = auto_met + o_met, noise_met + o_noise, auto_total + o_total
            auto_lines += other_auto[2:]
        mape = mape_rows(runs1, runs2)
        body = [
            f"Produced by `.venv/bin/python benchmarks/algos_speed.py`, {started.isoformat(timespec='seconds')}, "
            f"{time.monotonic() - t0:.0f} s; {ns.nproc} ranks, gloo on CPU, {ns.iters} timed + {ns.warmup} warm-up "
            f"iterations per row and pass, every row validated. Load average {load_start} at the start, {load()} at "
            "the end (2 cores; other jobs shared the machine).",
            "",
            f"Pass 1 is `commlens tune` (every algorithm and the built-in); passes 2-{ns.passes + 1} are "
            "`commlens bench --algo builtin,all,auto --interleave` (every other one in the order auto, all, "
            "builtin; the implementations of a size timed in rounds, each in a shuffled order) with `auto` "
            "reading pass 1's table; *pooled*: each row's samples of passes 2 on, together. Times are medians of a "
            "row's iterations (p50).",
            "",
            f"**Target: ring all_reduce >= 85% of the built-in's busBW at >= 16 MiB** — "
            f"{'met' if ring_ok else '**not met**'} (p50 of the pooled passes at every size; each pass shown).",
            "",
            *ring_lines,
            "",
            f"**Target: best commlens all_reduce within 1.5x of the built-in's latency at <= 4 KiB** — "
            f"{'met' if lat_ok else '**not met**'} (p50 of the pooled passes at every size; each pass shown).",
            "",
            *lat_lines,
            "",
            f"**Target: `auto` within 5% of the best algorithm in every size bucket** — auto's rows: {auto_met} of "
            f"{auto_total} buckets, pooled passes ({'met' if auto_met == auto_total else '**not met**'}); not "
            f"shown to be more than 5% slower (the 95% bootstrap interval of auto / best reaches 1.05 or below) in "
            f"{noise_met} of {auto_total}. *picked / best*: the algorithm auto ran, timed as its own row, over the "
            "best; *auto / same algorithm*: auto's time over that of the algorithm it ran, measured as its own row "
            "in the same passes: what two measurements of the same work differ by here (choosing costs about 5 us "
            "a call).",
            "",
            *auto_lines,
            "",
            "**all_reduce, pooled passes** (p50 us; bold: the fastest commlens algorithm):",
            "",
            *op_table(ar2, "all_reduce"),
            "",
        ]
        if other2 is not None:
            for op in OTHERS.split(","):
                body += [f"**{op}, pooled passes** (p50 us):", "", *op_table(other2, op), ""]
        body += [
            "**Cost model per algorithm** (`local-cpu` fitted on pass 1 with `commlens.model.fit`, p50, rows "
            ">= 1 KiB; checked on the pooled passes; `auto` rows left out):",
            "",
            *mape,
            "",
        ]
        body += ["Tuning table written by pass 1 (all_reduce):", "", "```", *summaries[0].strip().splitlines(), "```"]
    text = "\n".join(body)
    print(text)
    if not ns.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
