#!/usr/bin/env python
"""Issue 13's targets on real runs of this machine: the regression gate on back-to-back A/A runs and on
runs with a real, known slowdown.

Run from the repository root, as root (the emulated cluster needs it), with nothing else running::

    .venv/bin/python benchmarks/regression_real.py              # measure, then judge and write the section
    .venv/bin/python benchmarks/regression_real.py --judge-only # judge the runs already measured in --workdir

Every run is a real ``commlens bench`` process tree (gloo, 2 ranks) writing its JSON to ``--workdir``; the
judging is ``commlens compare`` at its default settings (``compare_runs`` with ``CompareSettings()``), with
and without the noise floors ``commlens noise learn`` would store from a separate A/A history. What is
measured, in this order (the runs of each experiment interleaved, so a drift of the machine hits them alike):

1. **local** (loopback, the CI command of the issue: ``--nproc 2 --op all_reduce -b 1M -e 16M -f 4 -n 30``):
   ``--history`` runs at default rounds (the A/A history floors are learned from), then ``--pairs + 1``
   runs at default rounds interleaved with as many at ``--rounds 1`` (what bench did before rounds);
   consecutive runs of one kind are the back-to-back A/A pairs. The wall time of each run, and of
   ``commlens compare`` on a pair, is the cost of rounds.
2. **cluster** (two emulated hosts, one rank each, 2 Gb/s links shaped with HTB): a history of baseline
   runs, then ``--pairs`` times: a baseline run, a run with host 1's link 10 % slower (rate / 1.10), one
   15 % slower (rate / 1.15), and one with host 1's rank CPU-starved (a cgroup quota of ``--starve-cpus``
   CPUs). Each slowed run is paired with the baseline run before it.
3. **cluster-aa**: ``--pairs + 1`` back-to-back baseline runs on a fresh cluster (nothing set between them).
4. **cluster-starve**: ``--starve-pairs`` pairs of a baseline and a run with host 1's rank starved harder
   (``--hard-starve-cpus``), on a fresh cluster.

A pair is a "regression" when compare reports any regression row (exit code 1, what fails a CI job).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from docsection import write_section  # noqa: E402

from commlens.regress import CompareSettings, compare_runs, learn_floors
from commlens.results.jsonfmt import load_run
from commlens.results.records import Run
from commlens.results.runconfig import BenchSettings

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Regression gate on real runs (issue 13)"
COMMLENS = str(Path(sys.executable).with_name("commlens"))
CI_ARGS = ["--op", "all_reduce", "-b", "1M", "-e", "16M", "-f", "4", "-n", "30"]
CLUSTER = "rq13"
LINK_GBPS = 2.0


def _setting(run: Run, name: str) -> object:
    """A benchmark run's setting as bench wrote it (None for a run of another kind or without it)."""
    return run.config.values.get(name) if isinstance(run.config, BenchSettings) else None


def bench(out: Path, args: list[str], log: list[dict]) -> Run:
    """One real ``commlens bench`` run, its JSON kept in ``out`` (a run already there is reused)."""
    if not out.exists():
        cmd = [COMMLENS, "bench", *args, "--no-store", "-q", "--json", str(out)]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"{shlex.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        log.append({"file": out.name, "wall_s": wall, "args": args})
        print(f"  {out.name}: {wall:.1f} s", flush=True)
    return load_run(out)


def _default_round_groups() -> str:
    from commlens.bench.config import BenchConfig

    return BenchConfig().round_groups


def cluster(*args: str) -> None:
    subprocess.run([COMMLENS, "cluster", *args], check=True, capture_output=True, text=True)


def measure(ns: argparse.Namespace) -> None:
    wd: Path = ns.workdir
    wd.mkdir(parents=True, exist_ok=True)
    log_path = wd / "walltimes.json"
    log: list[dict] = json.loads(log_path.read_text()) if log_path.exists() else []
    try:
        if "local" in ns.parts:
            local = ["--nproc", "2", *CI_ARGS]
            print("local history ...", flush=True)
            for i in range(ns.history):
                bench(wd / f"local-hist-{i:02d}.json", local, log)
            print("local pairs ...", flush=True)
            for i in range(ns.pairs + 1):
                bench(wd / f"local-r5-{i:02d}.json", local, log)
                bench(wd / f"local-r1-{i:02d}.json", [*local, "--rounds", "1"], log)
                if ns.fresh_too:  # the other --round-groups, interleaved with the default's runs
                    other = "fresh" if _default_round_groups() == "shared" else "shared"
                    bench(wd / f"local-fr-{i:02d}.json", [*local, "--round-groups", other], log)
                if i == 0:
                    compare_wall(wd, log)
                log_path.write_text(json.dumps(log, indent=1))
        if "cluster" in ns.parts:
            subprocess.run([COMMLENS, "cluster", "down", CLUSTER], capture_output=True, text=True)
            cluster("up", CLUSTER, "--hosts", "2", "--link-gbps", str(LINK_GBPS), "--ranks-per-host", "1")
            on = ["--cluster", CLUSTER, "--ranks-per-host", "1", *CI_ARGS]
            try:
                print("cluster history ...", flush=True)
                for i in range(ns.history):
                    bench(wd / f"cl-hist-{i:02d}.json", on, log)
                print("cluster pairs ...", flush=True)
                for i in range(ns.pairs):
                    bench(wd / f"cl-base-{i:02d}.json", on, log)
                    for name, fault in (
                        ("slow10", ["--slow-host", f"1:{1 / 1.10:.6f}"]),
                        ("slow15", ["--slow-host", f"1:{1 / 1.15:.6f}"]),
                        ("starve", ["--cpu-starve", f"1:{ns.starve_cpus:g}"]),
                    ):
                        out = wd / f"cl-{name}-{i:02d}.json"
                        if out.exists():
                            continue
                        cluster("set", CLUSTER, *fault)
                        try:
                            bench(out, on, log)
                        finally:
                            cluster("set", CLUSTER, "--clear")
                            if name == "starve":  # --clear keeps CPU quotas: lift it with a full CPU
                                cluster("set", CLUSTER, "--cpu-starve", "1:1")
                    log_path.write_text(json.dumps(log, indent=1))
            finally:
                subprocess.run([COMMLENS, "cluster", "down", CLUSTER], capture_output=True, text=True)
        if "cluster-starve" in ns.parts:  # a harder-starved rank: baseline, starved, baseline, starved ...
            subprocess.run([COMMLENS, "cluster", "down", CLUSTER], capture_output=True, text=True)
            cluster("up", CLUSTER, "--hosts", "2", "--link-gbps", str(LINK_GBPS), "--ranks-per-host", "1")
            on = ["--cluster", CLUSTER, "--ranks-per-host", "1", *CI_ARGS]
            tag = f"cls{ns.hard_starve_cpus:g}"
            try:
                print(f"cluster, rank starved to {ns.hard_starve_cpus:g} CPU ...", flush=True)
                for i in range(ns.starve_pairs):
                    cluster("set", CLUSTER, "--cpu-starve", "1:2")  # 2 CPUs: the whole machine, no limit
                    bench(wd / f"{tag}-base-{i:02d}.json", on, log)
                    cluster("set", CLUSTER, "--cpu-starve", f"1:{ns.hard_starve_cpus:g}")
                    bench(wd / f"{tag}-starve-{i:02d}.json", on, log)
                    log_path.write_text(json.dumps(log, indent=1))
            finally:
                subprocess.run([COMMLENS, "cluster", "down", CLUSTER], capture_output=True, text=True)
        if "cluster-aa" in ns.parts:  # back-to-back baselines on a fresh cluster, nothing changed between them
            subprocess.run([COMMLENS, "cluster", "down", CLUSTER], capture_output=True, text=True)
            cluster("up", CLUSTER, "--hosts", "2", "--link-gbps", str(LINK_GBPS), "--ranks-per-host", "1")
            on = ["--cluster", CLUSTER, "--ranks-per-host", "1", *CI_ARGS]
            try:
                print("cluster back-to-back A/A ...", flush=True)
                for i in range(ns.pairs + 1):
                    bench(wd / f"claa-{i:02d}.json", on, log)
                    log_path.write_text(json.dumps(log, indent=1))
            finally:
                subprocess.run([COMMLENS, "cluster", "down", CLUSTER], capture_output=True, text=True)
    finally:
        log_path.write_text(json.dumps(log, indent=1))


def compare_wall(wd: Path, log: list[dict]) -> None:
    """The wall time of ``commlens compare`` on a pair of files, as a CI job runs it after bench."""
    for kind in ("r5", "r1"):
        files = [wd / f"local-{kind}-00.json", wd / f"local-{kind}-00.json"]
        t0 = time.perf_counter()
        subprocess.run(
            [COMMLENS, "compare", *map(str, files), "--no-noise-floors"],
            capture_output=True,
            text=True,
            env={**os.environ, "COMMLENS_DB": str(wd / "none.db")},
        )
        log.append({"file": f"compare-{kind}", "wall_s": time.perf_counter() - t0, "args": ["compare"]})


def _now_default(groups: str | None) -> str:
    """' (default)' where ``groups`` is what ``commlens bench`` uses today without --round-groups."""
    from commlens.bench.config import BenchConfig

    return " (default)" if groups == BenchConfig().round_groups else ""


def _aa_target(groups: str | None) -> str:
    """The A/A target goes with today's default runs."""
    return "at most 1 in 20" if _now_default(groups) else "-"


def _runs(wd: Path, pattern: str) -> list[Run]:
    return [load_run(p) for p in sorted(wd.glob(pattern))]


def _judge(pairs: list[tuple[Run, Run]], floors: dict | None, settings: CompareSettings) -> dict:
    verdicts: Counter = Counter()
    ratios = []
    for base, cand in pairs:
        report = compare_runs([base], [cand], settings, floors=floors)
        verdicts["regression" if report.has_regression else "pass"] += 1
        for r in report.rows:
            verdicts[f"row {r.verdict}"] += 1
        ratios.append(max(r.ratio for r in report.rows))
    return {
        "pairs": len(pairs),
        "regressions": verdicts["regression"],
        "verdicts": dict(verdicts),
        "max_ratio_median": float(np.median(ratios)) if ratios else float("nan"),
    }


def _floors(history: list[Run]) -> dict:
    """Floors as ``commlens noise learn --by all`` learns them from an A/A history."""
    return {f.series: f.sd_log for f in learn_floors(history, by="all")}


def _level_spread(runs: list[Run]) -> dict[int, tuple[float, float]]:
    """Per size: the sd of runs' ln level between runs, and what the rounds inside a run predict for it."""
    out = {}
    sizes = sorted({m.size_bytes for m in runs[0].measurements})
    for size in sizes:
        levels, within = [], []
        for run in runs:
            m = next(m for m in run.measurements if m.size_bytes == size)
            logs = np.log([float(np.median(s)) for s in m.round_samples()])
            levels.append(logs.mean())
            if logs.size >= 2:
                within.append(logs.std(ddof=1) / np.sqrt(logs.size))
        out[size] = (float(np.std(levels, ddof=1)), float(np.sqrt(np.mean(np.square(within)))) if within else 0.0)
    return out


def judge_all(ns: argparse.Namespace) -> dict:
    wd: Path = ns.workdir
    settings = CompareSettings()
    res: dict = {"settings": settings}
    walls = json.loads((wd / "walltimes.json").read_text()) if (wd / "walltimes.json").exists() else []
    res["walls"] = walls
    if (wd / "local-r5-00.json").exists():
        r5, r1 = _runs(wd, "local-r5-*.json"), _runs(wd, "local-r1-*.json")
        hist = _runs(wd, "local-hist-*.json")
        floors = _floors(hist) if len(hist) >= 3 else None
        res["local"] = {
            "r5": _judge(list(zip(r5, r5[1:])), None, settings),
            "r5_floor": _judge(list(zip(r5, r5[1:])), floors, settings) if floors else None,
            "r1": _judge(list(zip(r1, r1[1:])), None, settings),
            "r1_floor": _judge(list(zip(r1, r1[1:])), floors, settings) if floors else None,
            "spread_r5": _level_spread(r5),
            "spread_r1": _level_spread(r1),
            "floors": floors,
            "history": len(hist),
            "rounds": _setting(r5[0], "rounds"),
            "groups": _setting(r5[0], "round_groups") or "fresh",
        }
        fr = _runs(wd, "local-fr-*.json")
        if len(fr) >= 2:
            res["local"].update(
                fr=_judge(list(zip(fr, fr[1:])), None, settings),
                fr_floor=_judge(list(zip(fr, fr[1:])), floors, settings) if floors else None,
                spread_fr=_level_spread(fr),
                fr_groups=_setting(fr[0], "round_groups"),
            )
    if (wd / "cl-base-00.json").exists():
        base = _runs(wd, "cl-base-*.json")
        hist = _runs(wd, "cl-hist-*.json")
        floors = _floors(hist) if len(hist) >= 3 else None
        cl: dict = {
            "aa": _judge(list(zip(base, base[1:])), None, settings),
            "aa_floor": _judge(list(zip(base, base[1:])), floors, settings) if floors else None,
            "spread": _level_spread(base),
            "floors": floors,
        }
        for name in ("slow10", "slow15", "starve"):
            slowed = _runs(wd, f"cl-{name}-*.json")
            pairs = list(zip(base, slowed))
            cl[name] = _judge(pairs, None, settings)
            cl[name + "_floor"] = _judge(pairs, floors, settings) if floors else None
        res["cluster"] = cl
    for path in sorted(wd.glob("cls*-base-00.json")):
        tag = path.name.removesuffix("-base-00.json")
        pairs = list(zip(_runs(wd, f"{tag}-base-*.json"), _runs(wd, f"{tag}-starve-*.json")))
        res.setdefault("hard_starve", {})[tag[3:]] = _judge(pairs, None, settings)
    if (wd / "claa-00.json").exists():
        runs = _runs(wd, "claa-*.json")
        hist = _runs(wd, "cl-hist-*.json")
        floors = _floors(hist) if len(hist) >= 3 else None
        res["cluster_aa"] = {
            "aa": _judge(list(zip(runs, runs[1:])), None, settings),
            "aa_floor": _judge(list(zip(runs, runs[1:])), floors, settings) if floors else None,
            "spread": _level_spread(runs),
        }
    return res


def _rate(j: dict | None) -> str:
    return "-" if j is None else f"{j['regressions']} / {j['pairs']}"


def report_lines(res: dict, ns: argparse.Namespace) -> list[str]:
    walls = {w["file"]: w["wall_s"] for w in res["walls"]}

    def mean_wall(prefix: str) -> float:
        xs = [v for k, v in walls.items() if k.startswith(prefix)]
        return float(np.mean(xs)) if xs else float("nan")

    lines = [
        "Commands (as root, nothing else running): `.venv/bin/python benchmarks/regression_real.py --parts "
        "PART --no-write` for each part (`local,cluster`, then `cluster-aa`, then `cluster-starve`; runs are kept "
        "in `--workdir` and reused), then `.venv/bin/python benchmarks/regression_real.py --judge-only` to judge "
        "them all and write this section. " + ns.remark,
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine ({os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}), nothing else running; every run a real `commlens bench` "
        f"(gloo, 2 ranks). Judged by `commlens compare` at its defaults (median of each round, Welch t on ln "
        f"time over rounds, Benjamini-Hochberg, min change 3 %). A pair counts as a regression when compare "
        f"exits 1.",
        "",
    ]
    loc = res.get("local")
    if loc:
        lines += [
            "**Local, back-to-back A/A** (`commlens bench --nproc 2 " + " ".join(CI_ARGS) + "`, consecutive "
            "runs of the same code; the issue measured 2 false regressions in 5 such pairs before rounds):",
            "",
            "| runs | false regressions | with learned noise floors | target |",
            "|---|---:|---:|---|",
            f"| `--rounds {loc['rounds']}`, `--round-groups {loc['groups']}`{_now_default(loc['groups'])} | "
            f"{_rate(loc['r5'])} | {_rate(loc['r5_floor'])} | {_aa_target(loc['groups'])} |",
            *(
                [
                    f"| `--rounds {loc['rounds']}`, `--round-groups {loc['fr_groups']}`"
                    f"{_now_default(loc['fr_groups'])} | {_rate(loc['fr'])} | {_rate(loc['fr_floor'])} | "
                    f"{_aa_target(loc['fr_groups'])} |"
                ]
                if "fr" in loc
                else []
            ),
            f"| `--rounds 1` (one round a run, as before) | {_rate(loc['r1'])} | {_rate(loc['r1_floor'])} | - |",
            "",
            f"Floors learned (`noise learn --by all`) from {loc['history']} separate A/A runs at 5 rounds "
            f"(`--round-groups {loc['groups']}`). Row verdicts over all pairs, `--round-groups {loc['groups']}`: "
            + ", ".join(f"{k[4:]} {v}" for k, v in sorted(loc["r5"]["verdicts"].items()) if k.startswith("row "))
            + "; `--rounds 1`: "
            + ", ".join(f"{k[4:]} {v}" for k, v in sorted(loc["r1"]["verdicts"].items()) if k.startswith("row ")),
            "",
            "Run-to-run spread (sd of a run's ln level between runs) against what the rounds inside one run "
            "predict for it (sd of the round medians' ln / sqrt(rounds)):",
            "",
            f"| size | between runs, `--round-groups {loc['groups']}` | predicted by its rounds | between runs, "
            "`--rounds 1` |"
            + (
                f" between runs, `--round-groups {loc['fr_groups']}` | predicted by its rounds |" if "fr" in loc else ""
            ),
            "|---:|---:|---:|---:|" + ("---:|---:|" if "fr" in loc else ""),
        ]
        for size, (between, within) in loc["spread_r5"].items():
            other = ""
            if "fr" in loc:
                other = f" {loc['spread_fr'][size][0]:.1%} | {loc['spread_fr'][size][1]:.1%} |"
            lines.append(
                f"| {size >> 20} MiB | {between:.1%} | {within:.1%} | {loc['spread_r1'][size][0]:.1%} |" + other
            )
        bench5, bench1 = mean_wall("local-r5"), mean_wall("local-r1")
        if "fr" in loc:
            lines += [
                "",
                f"Mean bench wall time: `--round-groups {loc['groups']}` {bench5:.1f} s, `--round-groups "
                f"{loc['fr_groups']}` "
                f"{mean_wall('local-fr'):.1f} s, `--rounds 1` {bench1:.1f} s.",
            ]
        cmp5, cmp1 = walls.get("compare-r5", float("nan")), walls.get("compare-r1", float("nan"))
        lines += [
            "",
            f"Wall time, bench then compare as CI runs it: 5 rounds (`--round-groups {loc['groups']}`) "
            f"{bench5:.1f} s + {cmp5:.1f} s = "
            f"{bench5 + cmp5:.1f} s; `--rounds 1` {bench1:.1f} s + {cmp1:.1f} s = {bench1 + cmp1:.1f} s: "
            f"**{(bench5 + cmp5) / (bench1 + cmp1):.2f}x** (target: at most 2x). The iterations (`-n`) are "
            "split over the rounds, so rounds add a warm-up and a process group per round, not iterations.",
            "",
        ]
    cl = res.get("cluster")
    if cl:
        lines += [
            f"**Emulated cluster** (2 hosts, 1 rank each, {LINK_GBPS:g} Gb/s links shaped with HTB, same bench "
            "options): each slowed run paired with the baseline run just before it.",
            "",
            "| pair | regressions called | with learned noise floors | target |",
            "|---|---:|---:|---|",
            f"| A/A (consecutive baselines, a slowed run of each kind between them) | {_rate(cl['aa'])} | "
            f"{_rate(cl['aa_floor'])} | - |",
            *(
                [
                    f"| A/A back to back (a fresh cluster, nothing between the runs) | {_rate(res['cluster_aa']['aa'])} | "
                    f"{_rate(res['cluster_aa']['aa_floor'])} | at most 1 in 20 |"
                ]
                if res.get("cluster_aa")
                else []
            ),
            f"| host 1's link 10 % slower | {_rate(cl['slow10'])} | {_rate(cl['slow10_floor'])} | at least 16 of 20 |",
            f"| host 1's link 15 % slower | {_rate(cl['slow15'])} | {_rate(cl['slow15_floor'])} | at least 19 of 20 |",
            f"| host 1's rank CPU-starved ({ns.starve_cpus:g} CPU) | {_rate(cl['starve'])} | "
            f"{_rate(cl['starve_floor'])} | - |",
            *[
                f"| host 1's rank CPU-starved ({cpus} CPU; its own baselines just before) | {_rate(j)} | - | - |"
                for cpus, j in res.get("hard_starve", {}).items()
            ],
            "",
            "Median over pairs of the largest row ratio (candidate / base typical time): "
            + ", ".join(f"{n} {cl[n]['max_ratio_median']:.3f}" for n in ("aa", "slow10", "slow15", "starve")),
            "",
            "Run-to-run spread of the baselines: "
            + ", ".join(f"{s >> 20} MiB {b:.1%} (rounds predict {w:.1%})" for s, (b, w) in cl["spread"].items()),
            "",
        ]
    return lines


def main() -> None:
    global CLUSTER
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path("/tmp/commlens-regression-real"),
        help="where the runs' JSON files are kept (runs already there are reused)",
    )
    p.add_argument("--pairs", type=int, default=20, help="pairs of each kind")
    p.add_argument("--history", type=int, default=8, help="A/A runs the noise floors are learned from")
    p.add_argument("--starve-cpus", type=float, default=0.25, help="CPU quota of the starved rank's host")
    p.add_argument(
        "--parts",
        default="local,cluster,cluster-aa,cluster-starve",
        help="any of local, cluster (slowdowns), cluster-aa (back-to-back baselines), cluster-starve",
    )
    p.add_argument("--hard-starve-cpus", type=float, default=0.1, help="CPU quota of cluster-starve's starved host")
    p.add_argument("--starve-pairs", type=int, default=10, help="pairs of cluster-starve")
    p.add_argument("--judge-only", action="store_true", help="judge the runs in --workdir, measure nothing")
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    p.add_argument(
        "--fresh-too",
        action="store_true",
        help="local: also runs with the other --round-groups than the default, interleaved (local-fr-*)",
    )
    p.add_argument(
        "--remark",
        default="This time: `cluster-starve` was stopped after 5 of its 8 pairs (a run starved to 0.1 CPU takes 90 s).",
        help="what was particular about this measurement (printed after the commands)",
    )
    p.add_argument("--cluster-name", default=CLUSTER, help="the emulated cluster's name")
    p.add_argument("--section", default=SECTION, help="the section of docs/benchmarks.md to write")
    ns = p.parse_args()
    ns.argv = sys.argv[1:]
    ns.parts = set(ns.parts.split(","))
    CLUSTER = ns.cluster_name
    if not ns.judge_only:
        measure(ns)
    body = report_lines(judge_all(ns), ns)
    print("\n".join(body))
    if not ns.no_write:
        write_section(ns.section, body)
        print(f"\nwrote docs/benchmarks.md ({ns.section})")


if __name__ == "__main__":
    main()
