#!/usr/bin/env python
"""Issue 7 on an emulated cluster (needs root): hierarchical against flat all_reduce, and the model's winner.

Run from the repository root (about 10 minutes)::

    sudo .venv/bin/python benchmarks/algos_cluster.py        # --help for the options

1. ``commlens cluster up``: 2 hosts (network namespaces), 1 Gb/s links, the
   link between the two hosts slowed to ``--slow`` of that (default 0.25: 250
   Mb/s, against several GB/s between the ranks of one host).
2. Two passes of ``commlens bench --cluster NAME --ranks-per-host 2 --op
   all_reduce --algo builtin,all --interleave`` (4 ranks, 1 KiB .. 16 MiB,
   factor 4; the implementations of a size timed in shuffled rounds), every row
   validated: up to 64 KiB with 100 timed iterations per row (latency-bound
   rows are noisy and cheap), from 256 KiB with 15.
3. Calibration: the ``emulated-cluster`` template fitted
   (``commlens.model.fit``, rows' median times) on pass 1; it then predicts
   every algorithm at every size. The predicted winner (among commlens'
   algorithms, and between hierarchical and ring) is compared with the
   measured winner of pass 2, a separate measurement; the model's error per
   algorithm on pass 2 is stated too.
4. The slow link with 16 MiB ``sendrecv``: one direction per connection (2
   ranks per host) and both directions over one connection (1 rank per host).

Writes the section "Collective algorithms on an emulated cluster (issue 7)" of docs/benchmarks.md
(``--no-docs``: print only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from algos_common import STAT, bench, commlens, load, median_ratio_ci, merge_runs, row_time, size_text, times, us  # noqa: E402
from docsection import write_section  # noqa: E402

SECTION = "## Collective algorithms on an emulated cluster (issue 7)"


def measure(ns: argparse.Namespace, name: str) -> tuple:
    """Two passes of the sweep and the slow link's sendrecv two ways, on a fresh cluster torn down afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        work = ns.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        os.environ["COMMLENS_CLUSTER_DIR"] = tmp
        commlens(
            "cluster",
            "up",
            "--name",
            name,
            "--hosts",
            "2",
            "--link-gbps",
            str(ns.link_gbps),
            "--ranks-per-host",
            "2",
            "--slow-link",
            f"0-1:{ns.slow}",
        )
        try:
            args = [
                "--cluster",
                name,
                "--ranks-per-host",
                "2",
                "--op",
                "all_reduce",
                "--algo",
                "builtin,all",
                "--interleave",
                "-f",
                "4",
            ]
            small = args + ["-b", "1K", "-e", "64K", "-n", str(ns.small_iters), "-w", str(4 * ns.warmup)]
            large = args + ["-b", "256K", "-e", ns.max_bytes, "-n", str(ns.iters), "-w", str(ns.warmup)]
            runs = [
                merge_runs([bench(small, work / f"pass{k}-small.json"), bench(large, work / f"pass{k}-large.json")])
                for k in (1, 2)
            ]
            # the slow link one way at a time (4 ranks: each pair carries one direction) and both ways over one
            # connection (2 ranks: each sends to and receives from the other)
            for per_host in (2, 1):
                runs.append(
                    bench(
                        [
                            "--cluster",
                            name,
                            "--ranks-per-host",
                            str(per_host),
                            "--op",
                            "sendrecv",
                            "-b",
                            "16M",
                            "-n",
                            "5",
                            "-w",
                            "1",
                        ],
                        work / f"sendrecv-{per_host}.json",
                    )
                )
            return tuple(runs)
        finally:
            commlens("cluster", "down", name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--link-gbps", type=float, default=1.0, help="every host's link rate")
    p.add_argument("--slow", type=float, default=0.25, help="the link between the hosts, as a fraction of the rate")
    p.add_argument("--iters", type=int, default=15, help="timed iterations per row from 256 KiB")
    p.add_argument("--small-iters", type=int, default=100, help="timed iterations per row up to 64 KiB")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-bytes", default="16M")
    p.add_argument("--keep", type=Path, help="keep the run files (pass1-small.json, pass1-large.json, ...) here")
    p.add_argument("--runs", type=Path, help="analyse the run files kept in this folder instead of measuring")
    p.add_argument("--no-docs", action="store_true", help="print only; do not write docs/benchmarks.md")
    ns = p.parse_args()
    if ns.runs is None and os.geteuid() != 0:
        print("error: needs root (network namespaces)", file=sys.stderr)
        return 2
    from commlens.algos import algorithms_for
    from commlens.model import InfeasibleError, predict
    from commlens.model.check import check_runs
    from commlens.model.fit import fit_runs
    from commlens.topology import load_topology

    started, t0 = dt.datetime.now(dt.timezone.utc), time.monotonic()
    load_start = load()
    names = list(algorithms_for("all_reduce"))
    name = f"alg{os.getpid() % 10000}"
    from commlens.results import load_run

    if ns.runs is not None:
        run1, run2 = (
            merge_runs([load_run(ns.runs / f"pass{k}-{part}.json") for part in ("small", "large")]) for k in (1, 2)
        )
        links = [load_run(ns.runs / f"{f}.json") for f in ("sendrecv-2", "sendrecv-1")]
    else:
        run1, run2, *links = measure(ns, name)
    link_lines = []
    for run, what in zip(
        links, ("one way per connection (4 ranks, ring of send/recv)", "both ways over one connection (2 ranks)")
    ):
        (m,) = run.measurements
        link_lines.append(f"| {what} | {m.size_bytes / row_time(m) / 1e6:.1f} |")
    fitted = fit_runs([run1], load_topology("emulated-cluster"), stat=STAT, min_size_bytes=1024)
    topo = fitted.topology
    nodes, ranks_per_host = 2, 2

    def predicted(size: int) -> dict[str, float]:
        out = {}
        for a in names:
            try:
                out[a] = predict(topo, "all_reduce", size, algo=a, nodes=nodes, ranks_per_host=ranks_per_host).time_s
            except InfeasibleError:
                pass
        return out

    rows2 = times(run2, "all_reduce")
    rows1 = times(run1, "all_reduce")
    hier_lines = [
        "| size | ring p1 (us) | hierarchical p1 (us) | ring / hier p1 | ring p2 (us) | hierarchical p2 "
        "(us) | ring / hier p2 (95% CI) | builtin p2 (us) | predicted ring / hier |",
        "|" + "---:|" * 9,
    ]
    win_lines = [
        "| size | measured winner (p2) | its time (us) | predicted winner | predicted time (us) | "
        "its measured time / the winner's (95% CI) | right | hier vs ring: measured | predicted | right |",
        "|---:|---|---:|---|---:|---:|---|---|---|---|",
    ]
    beats = beats_clear = right_all = right_tied = right_pair = right_pair_tied = total = 0
    for size in sorted(rows2):
        r1, r2 = rows1.get(size, {}), rows2[size]
        pred = predicted(size)
        meas = {a: row_time(r2[a]) for a in names if a in r2}
        m_win, p_win = min(meas, key=meas.__getitem__), min(pred, key=pred.__getitem__)
        ratio, lo, hi = median_ratio_ci(r2[p_win], r2[m_win])
        tied = p_win != m_win and lo <= 1.0  # these samples cannot tell the two apart
        hr, hlo, hhi = median_ratio_ci(r2["ring"], r2["hierarchical"])
        m_pair = "hierarchical" if meas["hierarchical"] < meas["ring"] else "ring"
        p_pair = "hierarchical" if pred["hierarchical"] < pred["ring"] else "ring"
        pair_tied = m_pair != p_pair and hlo <= 1.0 <= hhi
        total += 1
        right_all += m_win == p_win
        right_tied += m_win == p_win or tied
        right_pair += m_pair == p_pair
        right_pair_tied += m_pair == p_pair or pair_tied
        both = meas["hierarchical"] < meas["ring"] and (not r1 or row_time(r1["hierarchical"]) < row_time(r1["ring"]))
        beats += both
        beats_clear += both and hlo > 1.0
        ratio1 = f"{row_time(r1['ring']) / row_time(r1['hierarchical']):.2f}" if r1 else "-"
        hier_lines.append(
            f"| {size_text(size)} | {us(row_time(r1['ring'])) if r1 else '-'} | "
            f"{us(row_time(r1['hierarchical'])) if r1 else '-'} | {ratio1} | {us(meas['ring'])} | "
            f"{us(meas['hierarchical'])} | {hr:.2f} ({hlo:.2f}-{hhi:.2f}) | "
            f"{us(row_time(r2['builtin'])) if 'builtin' in r2 else '-'} | "
            f"{pred['ring'] / pred['hierarchical']:.2f} |"
        )
        verdict = "yes" if m_win == p_win else ("tie" if tied else "no")
        pair_verdict = "yes" if m_pair == p_pair else ("tie" if pair_tied else "no")
        win_lines.append(
            f"| {size_text(size)} | {m_win} | {us(meas[m_win])} | {p_win} | {us(pred[p_win])} | "
            f"{ratio:.2f} ({lo:.2f}-{hi:.2f}) | {verdict} | {m_pair} | {p_pair} | {pair_verdict} |"
        )
    check = check_runs([run2], topo, stat=STAT, min_size_bytes=1024).by_algo()
    mape_lines = ["| op / algorithm | rows | MAPE | max | bias |", "|---|---:|---:|---:|---:|"]
    for key, s in check.items():
        mape_lines.append(
            f"| {key} | {s['rows']} | {s['mape_pct']:.1f}% | {s['max_ape_pct']:.1f}% | {s['bias_pct']:+.1f}% |"
        )
    consts = ", ".join(
        f"{q.name} {q.value * 1e6:.1f} us" if q.unit == "s" else f"{q.name} {q.value / 1e9:.3g} GB/s"
        for q in fitted.params
        if q.held_because is None
    )
    share_all, share_pair = 100.0 * right_all / total, 100.0 * right_pair / total
    share_tied, share_pair_tied = 100.0 * right_tied / total, 100.0 * right_pair_tied / total
    body = [
        f"Produced by `sudo .venv/bin/python benchmarks/algos_cluster.py`, {started.isoformat(timespec='seconds')}, "
        f"{time.monotonic() - t0:.0f} s. Emulated cluster: 2 hosts x 2 ranks "
        f"(gloo over real TCP between network namespaces), {ns.link_gbps:g} Gb/s links, the link between the "
        f"hosts at {ns.slow:g} of that ({ns.link_gbps * ns.slow * 1000:.0f} Mb/s); all_reduce 1 KiB .. "
        f"{ns.max_bytes}, {ns.small_iters} timed + {4 * ns.warmup} warm-up iterations per row up to 64 KiB, "
        f"{ns.iters} + {ns.warmup} from 256 KiB, every row validated, two "
        f"passes, each timing the implementations of a size in rounds of shuffled order (`bench --interleave`). Times are each "
        f"row's median iteration (p50); intervals are 95% bootstrap intervals of a ratio of medians (pass 2). "
        f"Load average {load_start} at the start, "
        f"{load()} at the end (2 cores).",
        "",
        f"**Target: hierarchical all_reduce beats the flat ring** — in {beats} of {total} size buckets in both "
        f"passes ({'met' if beats == total else '**not met**'}); in {beats_clear} of them pass 2's interval lies "
        "wholly above 1. Inside a host the hierarchical algorithm reduce-scatters and all-gathers over the fast "
        "local path; across the slow link each host sends n (two ranks x n/2, one way per connection from 32 KiB "
        "per half shard) where the ring sends 1.5 n; below 32 KiB it goes through one leader per host, 3 steps "
        "of which one crosses the link, where the ring takes 6 steps.",
        "",
        *hier_lines,
        "",
        f"**Target: the calibrated cost model predicts the winner in >= 90% of size buckets** — among every "
        f"commlens all_reduce algorithm: {right_all} of {total} exactly ({share_all:.0f}%, "
        f"{'met' if share_all >= 90 else '**not met**'}), {right_tied} of {total} ({share_tied:.0f}%, "
        f"{'met' if share_tied >= 90 else '**not met**'}) counting a predicted winner the measurement cannot tell "
        f"from the measured one (*tie*: the interval of its time over the winner's holds 1); hierarchical against "
        f"ring: {right_pair} of {total} exactly ({share_pair:.0f}%, {'met' if share_pair >= 90 else '**not met**'}), "
        f"{right_pair_tied} of {total} with ties ({share_pair_tied:.0f}%). The model is `emulated-cluster` "
        f"fitted on pass 1 ({len(fitted.residuals)} rows, in-sample MAPE {fitted.mape_pct:.1f}%: {consts}); the "
        "winners are pass 2's, a separate measurement.",
        "",
        *win_lines,
        "",
        "**Model error per algorithm on pass 2** (rows >= 1 KiB):",
        "",
        *mape_lines,
    ]
    if link_lines:
        body += [
            "",
            f"**The slow link itself** (`bench --op sendrecv -b 16M`, {ns.link_gbps * ns.slow * 125:.2f} MB/s "
            "shaped): what one direction gets. Exchanges in which two ranks send to each other at once "
            "(hierarchical's two-host ring, recursive doubling, Rabenseifner) run at the second rate; the "
            "flat ring's hops at the first.",
            "",
            "| traffic over the slow link | MB/s each way |",
            "|---|---:|",
            *link_lines,
        ]
    print("\n".join(body))
    if not ns.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
