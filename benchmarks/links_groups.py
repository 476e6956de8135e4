"""Bad-node isolation by group testing (issue 31): ``diagnose links --strategy groups`` against all pairs.

Two parts, each writing its own section of docs/benchmarks.md (``--no-docs``: print only):

``model``: 64 to 4,096 hosts. The search (``commlens.diagnose.links_groups.GroupSearch``, the code the worker
runs) is driven by a measurement model: an edge's rate is the lower of its two hosts' rates and the link's,
times a factor fixed per edge and test (the spread between concurrent flows) and one per exchange (jitter),
both log-normal; σ of each is the flag. Rounds are counted as the worker counts them (rounds x passes);
all pairs' rounds are passes x (N-1) + 1 (its ring check), and its accuracy is that of ``diagnose_links`` on
records from the same model (up to ``--pairs-max`` hosts: above, its N^2 records are too many here).

    .venv/bin/python benchmarks/links_groups.py model

``cluster`` (root): an emulated cluster (``commlens cluster``, namespaces ``cl-w31b-...``), trials that each run
``commlens diagnose links --cluster NAME --json`` with ``--strategy pairs`` and with ``--strategy groups`` on the
same faults (one or two slow hosts at 30%, or one slow link at 30% between two hosts next to each other in
the screening ring, placed at random with a fixed seed); a trial agrees when both name the same faults (kind
and hosts) and those are the injected ones.

    sudo .venv/bin/python benchmarks/links_groups.py cluster --hosts 16 --trials 20
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docsection import write_section

from commlens.diagnose.links_analysis import diagnose_links
from commlens.diagnose.links_groups import GroupSearch
from commlens.diagnose.tournament import rounds as tournament

BIN = Path(sys.executable).parent / "commlens"
MODEL_TITLE = "## Group testing for slow hosts, modelled at 64 to 4,096 hosts (issue 31)"
SIZE = 1 << 20
RATE = 12.5e9  # 100 Gb/s hosts; only ratios matter


@dataclass(frozen=True)
class Faults:
    """Injected faults: host -> fraction, (a, b) -> fraction."""

    hosts: dict[int, float] = field(default_factory=dict)
    links: dict[tuple[int, int], float] = field(default_factory=dict)

    def expected(self) -> set[tuple[str, tuple[int, ...]]]:
        return {("slow_host", (h,)) for h in self.hosts} | {("slow_link", ab) for ab in self.links}

    def rate(self, a: int, b: int) -> float:
        return RATE * min(self.hosts.get(a, 1.0), self.hosts.get(b, 1.0), self.links.get((min(a, b), max(a, b)), 1.0))


def scenario(kind: str, n: int, rng: random.Random) -> Faults:
    """``one host``, ``two hosts``, ``eight hosts``, ``link on ring`` (hosts i, i+1), ``link anywhere``."""
    if kind.endswith("host") or kind.endswith("hosts"):
        k = {"one host": 1, "two hosts": 2, "eight hosts": 8}[kind]
        return Faults(hosts={h: 0.3 for h in rng.sample(range(n), k)})
    if kind == "link on ring":
        a = rng.randrange(n)
        b = (a + 1) % n
        return Faults(links={(min(a, b), max(a, b)): 0.3})
    a, b = sorted(rng.sample(range(n), 2))
    return Faults(links={(a, b): 0.3})


def _times(rng: random.Random, rate: float, iters: int, edge: float, jitter: float) -> list[float]:
    spread = rng.lognormvariate(0, edge)
    return [SIZE / (rate * spread * rng.lognormvariate(0, jitter)) for _ in range(iters)]


def model_groups(
    n: int, faults: Faults, rng: random.Random, edge: float, jitter: float, passes: int = 3, iters: int = 2
):
    """(found faults, measurement rounds, tests) of one modelled group search."""
    search = GroupSearch(n)
    while (ids := search.next_round()) is not None:
        r = len(search.rounds) - 1
        recs = [
            {
                "round": r,
                "pass": p,
                "test": tid,
                "rank": a,
                "peer": b,
                "size_bytes": SIZE,
                "times_s": _times(rng, faults.rate(a, b), iters, edge, jitter),
            }
            for tid in ids
            for p in range(passes)
            for a, b in search.tests[tid].edges()
        ]
        search.observe(recs)
    d = search.diagnosis()
    return {(f.kind, tuple(f.hosts)) for f in d.faults}, d.rounds, len(search.tests)


def model_pairs(
    n: int, faults: Faults, rng: random.Random, edge: float, jitter: float, passes: int = 3, iters: int = 2
):
    """Found faults of ``diagnose_links`` on modelled all-pairs records (each direction its own flow)."""
    recs = [
        {
            "kind": "pair",
            "pass": p,
            "round": 0,
            "rank": s,
            "peer": t,
            "size_bytes": SIZE,
            "times_s": _times(rng, faults.rate(s, t), iters, edge, jitter),
            "latency_s": [1e-5],
        }
        for p in range(passes)
        for a in range(n)
        for b in range(a + 1, n)
        for s, t in ((a, b), (b, a))
    ]
    d = diagnose_links(recs, n)
    return {(f.kind, tuple(f.hosts)) for f in d.faults}


def run_model(ns: argparse.Namespace) -> list[str]:
    kinds = ["one host", "two hosts", "eight hosts", "link on ring", "link anywhere"]
    rows = []
    for n in ns.sizes:
        pair_rounds = ns.passes * len(tournament(n)) + 1
        for kind in kinds:
            rng = random.Random(f"{ns.seed}-{n}-{kind}")
            trials = ns.trials if n <= 1024 else max(1, ns.trials // 4)
            hit, rounds, tests, pair_hit, pair_trials = 0, [], [], 0, 0
            for _ in range(trials):
                faults = scenario(kind, n, rng)
                found, r, t = model_groups(n, faults, rng, ns.edge_sigma, ns.jitter_sigma, ns.passes)
                hit += found == faults.expected()
                rounds.append(r)
                tests.append(t)
                if n <= ns.pairs_max and pair_trials < ns.pairs_trials:
                    pair_trials += 1
                    pair_hit += (
                        model_pairs(n, faults, rng, ns.edge_sigma, ns.jitter_sigma, ns.passes) == faults.expected()
                    )
            rows.append((n, kind, trials, hit, rounds, tests, pair_rounds, pair_hit, pair_trials))
            print(
                f"{n} {kind}: groups {hit}/{trials}, rounds max {max(rounds)} vs {pair_rounds}",
                file=sys.stderr,
                flush=True,
            )
    lines = [
        f"Produced by `.venv/bin/python benchmarks/links_groups.py model --trials {ns.trials} --pairs-trials "
        f"{ns.pairs_trials}` ({dt.date.today()}; 4,096 hosts: a quarter of the trials): the search the worker "
        f"runs, driven by a measurement model (edge spread σ = {ns.edge_sigma}, exchange jitter σ = {ns.jitter_sigma}, "
        f"log-normal; faults at 30% of the rate; {ns.passes} passes, 2 timed exchanges). A trial is correct when the "
        "faults named are exactly the injected ones. Rounds: measurement rounds, passes included (in each, every "
        "host sends at most one message); all pairs: passes x (N-1) + 1.",
        "",
        "| hosts | faults | trials | groups correct | groups rounds (median / max) | tests (median) "
        "| all-pairs rounds | groups / all-pairs (max) | all-pairs correct |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, kind, trials, hit, rounds, tests, pair_rounds, pair_hit, pair_trials in rows:
        pairs = f"{pair_hit}/{pair_trials}" if pair_trials else "not run"
        lines.append(
            f"| {n} | {kind} | {trials} | {hit}/{trials} | {statistics.median(rounds):g} / {max(rounds)} | "
            f"{statistics.median(tests):g} | {pair_rounds} | {max(rounds) / pair_rounds:.1%} | {pairs} |"
        )
    lines += [
        "",
        '"link anywhere" puts the slow link between two hosts drawn at random: the group search sees a link only '
        "on a ring it tests (the screen joins hosts i and i+1; halves add a few closing edges), so it misses most "
        "of them; finding an arbitrary slow link needs every pair measured, at least (N-1)/2 rounds of N flows, "
        'which is what `--strategy pairs` does. "link on ring" puts it between hosts i and i+1.',
    ]
    return lines


def cl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=900, env=env)


def _faults_args(f: Faults) -> list[str]:
    out = []
    for h, frac in f.hosts.items():
        out += ["--slow-host", f"{h}:{frac}"]
    for (a, b), frac in f.links.items():
        out += ["--slow-link", f"{a}-{b}:{frac}"]
    return out


def run_cluster(ns: argparse.Namespace) -> list[str]:
    if os.geteuid() != 0:
        raise SystemExit("error: the cluster part needs root (network namespaces)")
    env = {**os.environ, "COMMLENS_CLUSTER_DIR": ns.state_dir}
    name = f"w31b-bench{ns.hosts}"
    kinds = ["one host", "two hosts", "link on ring"]
    rng = random.Random(f"{ns.seed}-cluster-{ns.hosts}")
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    loads = []
    up = cl("cluster", "up", "--name", name, "--hosts", str(ns.hosts), "--link-gbps", str(ns.link_gbps), env=env)
    if up.returncode:
        raise SystemExit(f"error: cluster up failed: {up.stderr.strip()}")
    trials: list[dict[str, Any]] = []
    try:
        for i in range(ns.trials):
            kind = kinds[i % len(kinds)]
            faults = scenario(kind, ns.hosts, rng)
            s = cl("cluster", "set", name, "--clear", *_faults_args(faults), env=env)
            if s.returncode:
                raise SystemExit(f"error: cluster set failed: {s.stderr.strip()}")
            row: dict[str, Any] = {"kind": kind, "want": sorted(faults.expected())}
            for strategy in ("pairs", "groups"):
                t0 = time.perf_counter()
                proc = cl(
                    "diagnose", "links", "--cluster", name, "--strategy", strategy, *ns.probe.split(), "--json", env=env
                )
                wall = time.perf_counter() - t0
                if proc.returncode not in (0, 1):
                    row[strategy] = {"error": proc.stderr.strip()[-300:], "wall_s": wall}
                    continue
                d = json.loads(proc.stdout)
                row[strategy] = {
                    "found": sorted((f["kind"], tuple(f["hosts"])) for f in d["faults"]),
                    "rounds": d["rounds"],
                    "wall_s": wall,
                    "ratios": [round(f["measured_bytes_per_s"] / f["expected_bytes_per_s"], 2) for f in d["faults"]],
                    "tests": [
                        (t["purpose"], t["hosts"][0], t["hosts"][-1], round(t["ratio"], 2), t["low_passes"])
                        for t in d.get("group_tests") or []
                    ],
                }
            loads.append(os.getloadavg()[0])
            trials.append(row)
            print(json.dumps({"trial": i, **row}, default=list), file=sys.stderr, flush=True)
            if not ns.no_docs:  # the section so far, so a run stopped early still leaves its figures
                write_section(_cluster_title(ns), _cluster_lines(ns, trials, started, loads))
    finally:
        down = cl("cluster", "down", name, env=env)
        if down.returncode:
            print(f"cluster down failed: {down.stderr.strip()}", file=sys.stderr)
    return _cluster_lines(ns, trials, started, loads)


def _cluster_title(ns: argparse.Namespace) -> str:
    return f"## Group testing for slow hosts on the emulated cluster, {ns.hosts} hosts (issue 31)"


def _cluster_lines(ns: argparse.Namespace, trials: list[dict[str, Any]], started: str, loads: list[float]) -> list[str]:
    lines = [
        f"Produced by `sudo .venv/bin/python benchmarks/links_groups.py cluster --hosts {ns.hosts} --trials "
        f"{ns.trials} --link-gbps {ns.link_gbps:g}`, {started} ({len(trials)} of {ns.trials} trials run"
        f"{'' if len(trials) == ns.trials else ' when this was written'}): {ns.hosts} emulated hosts (HTB-shaped "
        f"{ns.link_gbps:g} Gb/s links), each trial `commlens diagnose links --cluster NAME {ns.probe} --json` "
        f"with `--strategy pairs` then `--strategy groups` on the same faults (30% of the rate, placed at random, "
        f"seed {ns.seed}); 2-core machine shared with other work, load average {min(loads or [math.nan]):.1f} to "
        f"{max(loads or [math.nan]):.1f}.",
        "",
        "| faults | trials | same faults as all pairs | injected faults found (pairs / groups) | rounds pairs "
        "| rounds groups (median / max) | groups / pairs (max) | wall s pairs (median) | wall s groups (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        by_kind.setdefault(t["kind"], []).append(t)
    total_same = 0
    for kind, ts in [*by_kind.items(), ("all", trials)]:
        ok = [t for t in ts if "found" in t["pairs"] and "found" in t["groups"]]
        same = sum(t["pairs"]["found"] == t["groups"]["found"] for t in ok)
        right_p = sum(t["pairs"]["found"] == t["want"] for t in ok)
        right_g = sum(t["groups"]["found"] == t["want"] for t in ok)
        rp = [t["pairs"]["rounds"] for t in ok]
        rg = [t["groups"]["rounds"] for t in ok]
        wp = [t["pairs"]["wall_s"] for t in ok]
        wg = [t["groups"]["wall_s"] for t in ok]
        if kind == "all":
            total_same = same
        if not ok:
            lines.append(f"| {kind} | {len(ts)} | 0 (every trial failed) | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {kind} | {len(ts)} | {same}/{len(ts)} | {right_p}/{len(ts)} / {right_g}/{len(ts)} | {max(rp)} | "
            f"{statistics.median(rg):g} / {max(rg)} | {max(g / p for g, p in zip(rg, rp, strict=True)):.0%} | "
            f"{statistics.median(wp):.1f} | {statistics.median(wg):.1f} |"
        )
    failed = [t for t in trials if "error" in t["pairs"] or "error" in t["groups"]]
    lines += [
        "",
        f"{total_same} of {len(trials)} trials name the same faults with both strategies"
        + (f"; {len(failed)} trials failed to measure: {failed[0]}" if failed else "")
        + ". The slow link is placed between two hosts next to each other in host order (the screening ring's "
        "edges; a link elsewhere is not seen by the group search, see the modelled section). Wall time is the "
        "whole command (starting one Python/torch process per host on 2 cores is most of it).",
    ]
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=["model", "cluster"])
    p.add_argument("--seed", type=int, default=31)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--no-docs", action="store_true", help="print only; do not write docs/benchmarks.md")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 4096], help="model: host counts")
    p.add_argument("--trials", type=int, default=20, help="model: trials per size and faults; cluster: trials")
    p.add_argument("--edge-sigma", type=float, default=0.05, help="model: log-normal σ of an edge's rate per test")
    p.add_argument("--jitter-sigma", type=float, default=0.05, help="model: log-normal σ of one exchange")
    p.add_argument("--pairs-max", type=int, default=256, help="model: all pairs' accuracy up to this many hosts")
    p.add_argument("--pairs-trials", type=int, default=5, help="model: all-pairs trials per size and faults")
    p.add_argument("--hosts", type=int, default=16, help="cluster: emulated hosts")
    p.add_argument("--link-gbps", type=float, default=0.2, help="cluster: link rate")
    p.add_argument("--probe", default="-b 512K -n 2 --passes 3", help="cluster: options for diagnose links")
    p.add_argument("--state-dir", default="/tmp/w31b/clusters", help="cluster: COMMLENS_CLUSTER_DIR")
    ns = p.parse_args()
    lines = run_model(ns) if ns.part == "model" else run_cluster(ns)
    print("\n".join(lines))
    if not ns.no_docs:
        title = MODEL_TITLE if ns.part == "model" else _cluster_title(ns)
        write_section(title, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
