"""Replay validation: record real jobs here, replay them, report per-collective and total error.

    python benchmarks/replay_validation.py [--steps 23] [--passes 3] [--cluster w32-rep] [--no-doc]

1. Records the monitor's example job (``examples/train_monitored.py``) under DDP, FSDP2, one all-reduce
   after backward (``allreduce``) and communication alone (``comms``: a PARAM-style loop, no compute) on 4
   gloo ranks of this host, with the PyTorch profiler (``--profile``) and the monitor (``--jsonl-dir``) on,
   so one run gives both a Kineto trace set and monitor records.
2. From each source, extracts a plan (``commlens.replay.extract_plan``) and replays it on 4 gloo ranks of
   this host, right after the recording: back to back (``gaps=False``), blocking with the recorded gaps
   (spin stand-in, then sleep stand-in), and on the recorded timeline (``--timeline``: each call issued at
   its recorded offset, asynchronously, sleep stand-in), ``--passes`` measured passes each after one
   warm-up pass; the four modes interleaved, ``--repeats`` times. Per replay: the collectives' summed time recorded and replayed
   (each collective's own time: its last-arriving rank's), their ratio, the median per-collective ratio,
   the same over the isolated collectives (recorded without compute beside them on the host: what a
   back-to-back replay is comparable with), and with gaps the step time (first call to last end) ratio;
   per mode, the median over the repeats and the min-max.
3. With ``--cluster NAME`` (root; the benchmark brings the cluster up, 2 hosts at 1 Gbit/s, and down):
   the DDP job recorded on it (2 ranks per host) and replayed on it.
4. Replays the real 8-rank DLRM Kineto set (``shared/realdata/kineto/param-dlrm-8rank-step12``, recorded
   on NCCL) on 8 gloo ranks with the recorded sizes, and reports what was extracted.
5. Times the extraction of a 64-rank, 100,000-call NCCL trace set (``benchmarks/replay_traceset.py``) in a
   fresh process, three times: wall and CPU seconds, peak memory.

Targets (issue 32): back to back, total within 10% and median ratio 0.9-1.1; with gaps, step time within
10%; extraction under 30 s and 2 GiB. Figures go to the "Replay" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import write_section  # noqa: E402

DLRM = ROOT.parent / "shared" / "realdata" / "kineto" / "param-dlrm-8rank-step12"
if not DLRM.is_dir():
    DLRM = Path("/work/shared/realdata/kineto/param-dlrm-8rank-step12")
PY = sys.executable


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def record(job: str, steps: int, out: Path, cluster: str | None, profile: bool = True) -> None:
    """Run the example job under the profiler and the monitor: out/prof/rank<R>.json, out/mon/*.jsonl (without
    ``profile``, under the monitor alone)."""
    train = ["--parallel", job, "--steps", str(steps), "--jsonl-dir", str(out / "mon"), "--topology", "none"]
    train += ["--profile", str(out / "prof")] if profile else []
    if cluster:
        cmd = [PY, str(ROOT / "tests" / "cluster_train.py"), "--cluster", cluster, "--world", "4"]
        cmd += ["--ranks-per-host", "2", "--workdir", str(out / "work"), "--", *train]
    else:
        cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
        cmd += [str(ROOT / "examples" / "train_monitored.py"), *train]
    subprocess.run(cmd, check=True, capture_output=True, timeout=900)


def replay(
    plan: Any, gaps: bool, passes: int, cluster: str | None, timeline: bool = False, compute: str = "spin"
) -> dict[str, Any]:
    from commlens.bench.launcher import Local, OnCluster
    from commlens.replay import ReplayRequest, ReplaySettings, run

    settings = ReplaySettings(
        gaps=gaps, passes=passes, warmup_passes=1, timeline=timeline, compute="sleep" if timeline else compute
    )
    placement = OnCluster(cluster, 2) if cluster else Local(plan.world_size)
    t0 = time.perf_counter()
    cmp = run(ReplayRequest(plan, placement, settings)).comparison
    return {
        "gaps": gaps,
        "mode": "timeline (sleep)" if timeline else f"gaps ({compute})" if gaps else "back to back",
        "calls": len(cmp.collectives),
        "recorded_s": cmp.recorded_total_s,
        "replayed_s": cmp.replayed_total_s,
        "total_ratio": cmp.total_ratio,
        "median_ratio": cmp.median_ratio,
        "recorded_max_s": cmp.recorded_max_total_s,
        "replayed_max_s": cmp.replayed_max_total_s,
        "span_ratio": cmp.span_ratio,
        "last_ratio": _ratio(*reversed(cmp.last_arrival_totals())),
        "last_median": cmp.last_arrival_median_ratio,
        "raw_ratio": _ratio(cmp.replayed_max_total_s, cmp.recorded_max_total_s),
        "isolated": len(cmp.isolated),
        "overlap_known": cmp.overlap_known,
        "isolated_ratio": cmp.isolated_ratio,
        "isolated_median": cmp.isolated_median_ratio,
        "recorded_span_s": cmp.recorded_span_s,
        "replayed_span_s": cmp.replayed_span_s,
        "wall_s": time.perf_counter() - t0,
        "load": load(),
    }


def _ratio(replayed: float, recorded: float) -> float:
    return replayed / recorded if recorded > 0 else float("nan")


# (gaps, timeline, the gaps' stand-in): back to back, blocking with spin gaps, with sleep gaps, timeline
MODES = ((False, False, "spin"), (True, False, "spin"), (True, False, "sleep"), (True, True, "sleep"))
COMM_ONLY = "comms"  # the job with no compute beside its communication (--parallel comms)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated replays of one plan in one mode: each ratio's median over the repeats (a target is judged on
    it), its min and max, and the loads seen."""
    row = dict(results[0])
    keys = ("total_ratio", "median_ratio", "span_ratio", "isolated_ratio", "isolated_median", "replayed_s")
    for key in (*keys, "last_ratio", "last_median", "raw_ratio"):
        values = [r[key] for r in results]
        row[key] = statistics.median(values)
        row[key + "_range"] = (min(values), max(values))
    row["load"] = "-".join(sorted({r["load"] for r in results}, key=float))
    row["repeats"] = len(results)
    return row


def extraction(workdir: Path, repeats: int) -> list[dict[str, float]]:
    traces = workdir / "traceset"
    subprocess.run([PY, str(ROOT / "benchmarks" / "replay_traceset.py"), str(traces)], check=True, timeout=900)
    out = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(
            [PY, "-m", "commlens", "replay", "plan", str(traces), "-o", str(workdir / "big-plan.json")],
            check=True,
            capture_output=True,
            timeout=900,
        )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out.append({"wall_s": wall, "cpu_s": cpu, "peak_mib": after.ru_maxrss / 1024, "load": float(load())})
    return out


def _within(total: float, median: float) -> bool:
    return abs(total - 1) <= 0.1 and 0.9 <= median <= 1.1


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The rows against the targets: back to back, total within 10% and median 0.9-1.1 (over every collective,
    and over the isolated ones, the set a back-to-back replay is comparable with); with gaps or on the
    timeline, step time within 10%."""
    b2b = [r for r in rows if not r["gaps"]]
    ok = [r for r in b2b if _within(r["total_ratio"], r["median_ratio"])]
    iso_ok = [r for r in b2b if r["isolated"] and _within(r["isolated_ratio"], r["isolated_median"])]
    alone = [r for r in b2b if r["job"].startswith(COMM_ONLY + " ")]
    one_clock = [r for r in b2b if r["last_ratio"] == r["last_ratio"]]  # not NaN: the ranks shared a clock
    last_ok = [r for r in one_clock if _within(r["last_ratio"], r["last_median"])]
    raw_ok = [r for r in b2b if abs(r["raw_ratio"] - 1) <= 0.1]
    alone_ok = [r for r in alone if r in ok]
    lines = [
        f"Against the targets: back to back, {len(ok)} of {len(b2b)} replays within 10% in total with a median "
        "per-collective ratio in 0.9-1.1 over every collective"
        + (f" ({', '.join(r['job'] + ' ' + r['source'] for r in ok)})" if ok else "")
        + f"; of them the job with no compute beside its communication (`--parallel {COMM_ONLY}`) "
        f"{len(alone_ok)} of {len(alone)}, the jobs that compute {len(ok) - len(alone_ok)} of {len(b2b) - len(alone)}"
        + f"; {len(iso_ok)} of {len(b2b)} over the isolated collectives"
        + (f" ({', '.join(r['job'] + ' ' + r['source'] for r in iso_ok)})" if iso_ok else "")
        + f"; {len(last_ok)} of {len(one_clock)} by the last entry to the last exit (the replays on one clock)"
        + (f" ({', '.join(r['job'] + ' ' + r['source'] for r in last_ok)})" if last_ok else "")
        + f"; {len(raw_ok)} of {len(b2b)} by the raw figure (as the earliest rank saw each collective, waits included)"
    ]
    spin = [r for r in rows if r["mode"] == "gaps (spin)"]
    spin_ok = [r for r in spin if _within(r["total_ratio"], r["median_ratio"])]
    lines.append(
        f"; per collective with the recorded gaps (spin stand-in: the cores busy between calls as in the job), "
        f"total within 10% and median 0.9-1.1 in {len(spin_ok)} of {len(spin)}"
        + (f" ({', '.join(r['job'] + ' ' + r['source'] for r in spin_ok)})" if spin_ok else "")
    )
    for mode in ("gaps (spin)", "gaps (sleep)", "timeline (sleep)"):
        these = [r for r in rows if r["mode"] == mode]
        within = [r for r in these if abs(r["span_ratio"] - 1) <= 0.1]
        lines.append(f"; {mode}: step time within 10% in {len(within)} of {len(these)}")
    return ["".join(lines) + "."]


def definitions(rows: list[dict[str, Any]]) -> list[str]:
    """Per job, a recorded collective's mean own time from each source: Kineto's gloo span runs on the group's
    worker thread (queueing and the caller's wake-up left out), the monitor's from the Python call to its
    return, as a replay times it."""
    per: dict[str, dict[str, float]] = {}
    for r in rows:
        if not r["gaps"] and r["calls"]:
            per.setdefault(r["job"], {})[r["source"]] = r["recorded_s"] / r["calls"]
    parts = [
        f"{job}: Kineto {v['kineto'] * 1e3:.2f} ms, monitor {v['monitor'] * 1e3:.2f} ms "
        f"(x{v['monitor'] / v['kineto']:.2f})"
        for job, v in per.items()
        if "kineto" in v and "monitor" in v and v["kineto"] > 0
    ]
    if not parts:
        return []
    return [
        "A recorded collective's mean own time, per source (Kineto: the gloo span on the worker thread; the "
        "monitor: the Python call to its return, the span a replay times): " + "; ".join(parts) + ".",
        "",
    ]


def _ranged(r: dict[str, Any], key: str) -> str:
    """The median over the repeats, with the min-max where there were several."""
    lo, hi = r.get(key + "_range", (r[key], r[key]))
    return f"{r[key]:.3f}" + (f" ({lo:.3f}-{hi:.3f})" if r.get("repeats", 1) > 1 else "")


def fmt_rows(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| job | source | mode | collectives | recorded ms | replayed ms | total ratio | median ratio "
        "| last entry to last exit: total / median ratio | raw ratio | isolated | isolated total / median ratio "
        "| step time ratio | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        span = _ranged(r, "span_ratio") if r["gaps"] else "-"
        iso = f"{_ranged(r, 'isolated_ratio')} / {_ranged(r, 'isolated_median')}" if r["isolated"] else "-"
        last = (
            f"{_ranged(r, 'last_ratio')} / {_ranged(r, 'last_median')}" if r["last_ratio"] == r["last_ratio"] else "-"
        )
        lines.append(
            f"| {r['job']} | {r['source']} | {r['mode']} | {r['calls']} | "
            f"{r['recorded_s'] * 1e3:.1f} | {r['replayed_s'] * 1e3:.1f} | {_ranged(r, 'total_ratio')} | "
            f"{_ranged(r, 'median_ratio')} | {last} | "
            f"{_ranged(r, 'raw_ratio')} | {r['isolated']} of {r['overlap_known']} | {iso} | {span} | {r['load']} |"
        )
    return lines


PROBE_TITLE = "## Replay: one collective after compute, after sleep (`benchmarks/replay_validation.py --probe`)"


def probe_plan(calls: int, gap_s: float, count: int = 99_968) -> Any:
    """4 ranks, ``calls`` blocking all-reduces of ``count`` float32 on the world group (the allreduce job's
    gradient: 399,872 B), each ``gap_s`` after the previous one ended on every rank."""
    from commlens.replay.plan import PlanCall, PlanGroup, RankCalls, ReplayPlan

    def rank_calls(rank: int) -> Any:
        return RankCalls(
            rank,
            tuple(
                PlanCall(
                    "all_reduce", "world", count, "float32", i * (gap_s + 0.005), 0.005, gap_s if i else 0.0, "sum"
                )
                for i in range(calls)
            ),
            "h",
        )

    return ReplayPlan("monitor", 4, (PlanGroup("world", (0, 1, 2, 3)),), tuple(rank_calls(r) for r in range(4)))


def probe(repeats: int, passes: int, steps: int, calls: int = 30, gap_ms: float = 20.0) -> list[str]:
    """The same collective replayed back to back, after ``gap_ms`` of compute (spin) and after ``gap_ms`` of
    sleep on every rank, the three interleaved ``repeats`` times: its own time (last-arriving rank's). Then the
    communication-only job recorded under the monitor alone (no profiler) and its plan replayed back to back."""
    plan = probe_plan(calls, gap_ms / 1e3)
    modes = (("back to back", False, "spin"), ("after compute (spin)", True, "spin"), ("after sleep", True, "sleep"))
    own: dict[str, list[float]] = {m: [] for m, _, _ in modes}
    loads: list[str] = []
    for _ in range(repeats):
        for name, gaps, compute in modes:
            r = replay(plan, gaps, passes, None, compute=compute)
            own[name].append(r["replayed_s"] / r["calls"])
            loads.append(r["load"])
            print(f"  probe {name:22} {own[name][-1] * 1e3:.2f} ms per call (load {r['load']})", flush=True)
    lines = _probe_lines(own, loads, repeats, passes, calls, gap_ms) + aligned_probe(repeats, calls)
    return lines + _unprofiled(steps, repeats, passes)


# what comes before and after each timed all-reduce in the aligned probe (``--probe``, torch ranks of its own):
# (name, before, after); "compute" is the replay's spin stand-in, 20 ms; "align" a barrier of the world
ALIGNED = (
    ("back to back", "", ""),
    ("compute, align", "compute,align", ""),
    ("compute, align, align after", "compute,align", "align"),
    ("compute, align after", "compute", "align"),
    ("staggered sleep (4 ms x rank), align after", "stagger", "align"),
    ("compute (the replay's spin gaps)", "compute", ""),
    ("sleep (the replay's sleep gaps)", "sleep", ""),
)


def _probe_rank(out: str, calls: int, repeats: int) -> None:
    """One rank of the aligned probe (run by torch.distributed.run): the 399,872 B all-reduce timed ``calls``
    times per variant of :data:`ALIGNED`, the variants interleaved ``repeats`` times; rank 0 writes every
    rank's (start, end) per variant to ``out``."""
    import json

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x, busy, busy_out = torch.ones(99_968), torch.ones(32, 32), torch.empty(32, 32)

    def do(steps: str) -> None:
        for step in filter(None, steps.split(",")):
            if step == "compute":
                t = time.perf_counter() + 0.02
                while time.perf_counter() < t:
                    torch.mm(busy, busy, out=busy_out)
            elif step == "sleep":
                time.sleep(0.02)
            elif step == "stagger":
                time.sleep(0.004 * rank)
            elif step == "align":
                dist.barrier()

    stamps: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in ALIGNED}
    for _ in range(repeats):
        for name, before, after in ALIGNED:
            dist.barrier()
            for _ in range(calls):
                do(before)
                t0 = time.perf_counter()
                dist.all_reduce(x)
                stamps[name].append((t0, time.perf_counter()))
                do(after)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, stamps)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


def aligned_probe(repeats: int, calls: int = 30) -> list[str]:
    """The aligned probe on 4 gloo ranks of this host: per variant, mean per call of the collective's own time
    (its least-waiting rank's), the last arriver's time, last entry to last exit, and the arrival skew."""
    import json

    with tempfile.TemporaryDirectory(prefix="replay-aligned-") as d:
        out = Path(d) / "stamps.json"
        load0 = load()
        cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", __file__]
        subprocess.run([*cmd, "--probe-rank", str(out), "--repeats", str(repeats)], check=True, timeout=900)
        ranks = json.loads(out.read_text())
    lines = [
        f"Why: the same all-reduce on 4 gloo ranks of this host, {calls} per variant, the variants interleaved "
        f"{repeats} times, torch ranks of their own (`--probe`'s second part; *align*: a barrier of the 4 ranks, "
        f"*compute*: 20 ms of the spin stand-in). Mean per call, ms (load {load0} at the start, {load()} at the end):",
        "",
        "| before / after each call | own time (least-waiting rank) | last arriver's time | last entry to last exit "
        "| arrival skew (last - first entry) |",
        "|---|---|---|---|---|",
    ]
    for name, _, _ in ALIGNED:
        own, last, tail, skew = [], [], [], []
        for i in range(len(ranks[0][name])):
            starts = [r[name][i][0] for r in ranks]
            ends = [r[name][i][1] for r in ranks]
            took = [e - s for s, e in zip(starts, ends)]
            own.append(min(took))
            last.append(took[starts.index(max(starts))])
            tail.append(max(ends) - max(starts))
            skew.append(max(starts) - min(starts))
        cells = " | ".join(f"{statistics.mean(v) * 1e3:.2f}" for v in (own, last, tail, skew))
        lines.append(f"| {name} | {cells} |")
        print(f"  aligned {name:45} {cells}", flush=True)
    return lines + [""]


def _unprofiled(steps: int, repeats: int, passes: int) -> list[str]:
    """The communication-only job recorded under the monitor alone, its plan replayed back to back."""
    from commlens.replay import extract_plan

    with tempfile.TemporaryDirectory(prefix="replay-probe-") as d:
        record(COMM_ONLY, steps, Path(d), None, profile=False)
        plan = extract_plan([Path(d) / "mon"])
    rows = [replay(plan, False, passes, None) for _ in range(repeats)]
    for r in rows:
        print(f"  unprofiled {COMM_ONLY} total {r['total_ratio']:.3f} median {r['median_ratio']:.3f}", flush=True)
    totals, medians = [r["total_ratio"] for r in rows], [r["median_ratio"] for r in rows]
    return [
        f"The communication-only job (`--parallel {COMM_ONLY} --steps {steps}`) recorded under the monitor alone, "
        f"without the profiler, at load {rows[0]['load']}, its plan ({rows[0]['calls']} collectives, recorded "
        f"{rows[0]['recorded_s'] * 1e3:.1f} ms) replayed back to back {repeats} times right after: total ratio "
        f"{', '.join(f'{x:.3f}' for x in totals)}, median per-collective ratio {', '.join(f'{x:.3f}' for x in medians)} "
        f"(load {', '.join(r['load'] for r in rows)}; target: total within 10%, median 0.9-1.1).",
        "",
    ]


def _probe_lines(
    own: dict[str, list[float]], loads: list[str], repeats: int, passes: int, calls: int, gap_ms: float
) -> list[str]:
    base = statistics.median(own["back to back"])
    lines = [
        f"`python benchmarks/replay_validation.py --probe --repeats {repeats} --passes {passes}`: one collective, "
        f"all_reduce of 399,872 B float32 (the `allreduce` job's gradient) on 4 gloo ranks of this host, {calls} "
        f"per pass, every rank alike, blocking, {passes} measured passes after a warm-up; back to back, after "
        f"{gap_ms:.0f} ms of compute on every rank (`--compute spin`: 32x32 matrix products) and after {gap_ms:.0f} "
        f"ms of sleep, the three interleaved {repeats} times. The collective's own time (its last-arriving rank's, "
        f"so no wait for a peer in it), mean per call; median over the repeats (min-max). Load {min(loads, key=float)}-"
        f"{max(loads, key=float)} (2 cores shared with other sessions).",
        "",
        "| preceded by | own time per call, ms | against back to back |",
        "|---|---|---|",
    ]
    for name, v in own.items():
        lines.append(
            f"| {name} | {statistics.median(v) * 1e3:.2f} ({min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}) | "
            f"{statistics.median(v) / base:.2f}x |"
        )
    return lines + [""]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=23, help="training steps recorded (the profiler skips the first 3)")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument(
        "--jobs",
        default="ddp,fsdp2,allreduce,comms",
        help="the example job's --parallel modes recorded here (allreduce: one blocking all-reduce after backward; "
        "comms: communication alone, a PARAM-style loop)",
    )
    p.add_argument("--cluster", default=None, help="also record and replay on an emulated cluster of this name")
    p.add_argument("--no-dlrm", action="store_true")
    p.add_argument("--no-extraction", action="store_true")
    p.add_argument("--repeats", type=int, default=3, help="replays of each plan in each mode, and extraction runs")
    p.add_argument("--no-doc", action="store_true")
    p.add_argument("--probe", action="store_true", help="only the same collective after compute, after sleep")
    p.add_argument("--probe-rank", metavar="OUT", help=argparse.SUPPRESS)  # one rank of the aligned probe
    ns = p.parse_args()
    if ns.probe_rank:
        _probe_rank(ns.probe_rank, 30, ns.repeats)
        return 0
    if ns.probe:
        lines = probe(ns.repeats, ns.passes, ns.steps)
        if not ns.no_doc:
            write_section(PROBE_TITLE, lines)
        print("\n".join(lines))
        return 0
    from commlens.replay import extract_plan

    workdir = Path(tempfile.mkdtemp(prefix="replay-validation-"))
    rows: list[dict[str, Any]] = []
    body: list[str] = []
    try:
        targets = [(job, None) for job in ns.jobs.split(",")]
        if ns.cluster:
            subprocess.run(
                [PY, "-m", "commlens", "cluster", "up", "--name", ns.cluster, "--hosts", "2", "--link-gbps", "1"],
                check=True,
                capture_output=True,
                timeout=300,
            )
            targets.append(("ddp", ns.cluster))
        try:
            for job, cluster in targets:
                where = f"cluster {cluster}" if cluster else "this host"
                out = workdir / f"{job}-{cluster or 'local'}"
                print(f"recording {job} on {where} (load {load()})", flush=True)
                try:
                    record(job, ns.steps, out, cluster)
                except subprocess.CalledProcessError as e:
                    tail = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-3:]
                    body.append(f"Recording {job} on {where} failed: {' | '.join(tail)}")
                    print(body[-1], flush=True)
                    continue
                for source, path in (("kineto", out / "prof"), ("monitor", out / "mon")):
                    plan = extract_plan([path])
                    tried: dict[tuple[bool, bool, str], list[dict[str, Any]]] = {m: [] for m in MODES}
                    for _ in range(ns.repeats):  # the modes interleaved, so the load drifts alike over each
                        for gaps, timeline, compute in MODES:
                            r = replay(plan, gaps, ns.passes, cluster, timeline, compute)
                            tried[(gaps, timeline, compute)].append(r)
                            print(
                                f"  {source:8} {r['mode']:17} total {r['total_ratio']:.3f} "
                                f"median {r['median_ratio']:.3f} last {r['last_ratio']:.3f} {r['last_median']:.3f} "
                                f"raw {r['raw_ratio']:.3f} span {r['span_ratio']:.3f} "
                                f"isolated {r['isolated']}/{r['overlap_known']} {r['isolated_ratio']:.3f} "
                                f"{r['isolated_median']:.3f} "
                                f"(recorded {r['recorded_s'] * 1e3:.1f} ms, replayed {r['replayed_s'] * 1e3:.1f} ms, "
                                f"load {r['load']})",
                                flush=True,
                            )
                    for results in tried.values():
                        if not results:
                            continue
                        row = summary(results)
                        row.update(job=f"{job} ({where})", source=source)
                        rows.append(row)
        finally:
            if ns.cluster:
                subprocess.run([PY, "-m", "commlens", "cluster", "down", ns.cluster], capture_output=True, timeout=300)
        body[:0] = [
            f"`python benchmarks/replay_validation.py --steps {ns.steps} --passes {ns.passes} --repeats {ns.repeats}"
            + (f" --cluster {ns.cluster}" if ns.cluster else "")
            + "`: the monitor's example job (`examples/train_monitored.py`, 2 transformer layers, dim 64; "
            f"`--parallel {COMM_ONLY}`: no compute, 6 blocking collectives per step on buffers of the gradient's size) "
            "on 4 gloo ranks under the PyTorch profiler and the monitor, then each source's plan replayed on the same ranks "
            f"right after ({ns.passes} measured passes, 1 warm-up), {ns.repeats} times with the four modes "
            "interleaved: each ratio is the median over the repeats (min-max in brackets). A collective's time is "
            "its last-arriving rank's (no wait for a late peer in it; the target is judged on it); *last entry to "
            "last exit*: the same collective from the last rank's entry to the last rank's exit on the host's one "
            "clock (no wait either, but the tail of ranks that leave late); *raw*: the summed times as the earliest "
            "rank saw them (its wait for late peers included), total ratio; the step time leaves out a rank's wait "
            "for late peers in its "
            "first collective (start-up skew). *Isolated*: the collectives recorded without "
            "another rank of the host computing beside them (at most 5% of the call), the set a back-to-back "
            "replay (communication alone) is comparable with, as far as the plan shows it (it misses compute on a "
            "rank whose gloo span closed late); the others ran beside the job's compute, which "
            "slows gloo on shared cores (docs/replay.md, 'What a recorded time is comparable with'). Machine: 2 "
            "cores shared with other sessions (load: the 1-minute load average at each replay).",
            "",
            *fmt_rows(rows),
            "",
            *verdicts(rows),
            "",
            *definitions(rows),
        ]
        if not ns.no_dlrm and DLRM.is_dir():
            plan = extract_plan([DLRM])
            r = replay(plan, False, ns.passes, None)
            from collections import Counter

            ops = Counter(c.op for rc in plan.ranks for c in rc.calls)
            body += [
                f"Real 8-rank DLRM set (`{DLRM.name}`, NCCL, 2023): extracted {plan.n_calls} calls "
                f"({', '.join(f'{k} {v}' for k, v in ops.items())}) on {len(plan.groups)} group, timing from the "
                f"NCCL kernels; replayed on 8 gloo ranks of this host with the recorded sizes, back to back: "
                f"recorded {r['recorded_s'] * 1e3:.2f} ms on the GPUs, replayed {r['replayed_s'] * 1e3:.2f} ms "
                f"(ratio {r['total_ratio']:.1f}, median per collective {r['median_ratio']:.1f}; load {r['load']}): "
                "what CPU gloo on 2 shared cores costs against NCCL on the recorded GPUs, not an error of the replay.",
                "",
            ]
            print(body[-2], flush=True)
        if not ns.no_extraction:
            runs = extraction(workdir, ns.repeats)
            walls = [x["wall_s"] for x in runs]
            cpus = [x["cpu_s"] for x in runs]
            peak = max(x["peak_mib"] for x in runs)
            line = (
                f"Extraction of a 64-rank, 100,224-call NCCL trace set (`benchmarks/replay_traceset.py`, 154 MB of "
                f"JSON) with `commlens replay plan` in a fresh process, {ns.repeats} runs: wall min "
                f"{min(walls):.1f} s, median {statistics.median(walls):.1f} s; CPU min {min(cpus):.1f} s, median "
                f"{statistics.median(cpus):.1f} s; peak memory of a process {peak:.0f} MiB (load "
                f"{', '.join(str(x['load']) for x in runs)}). Target: under 30 s and 2 GiB."
            )
            body += [line, ""]
            print(line, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if not ns.no_doc:
        write_section("## Replay (`benchmarks/replay_validation.py`)", body)
    print("\n".join(body))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
