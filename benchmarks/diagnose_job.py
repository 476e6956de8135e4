"""Late ranks from NCCL Inspector dumps, and ``diagnose job`` at scale (issue 31).

Accuracy: ``--jobs`` generated jobs with one late rank and as many healthy ones (tests/scenarios/job_files.py:
8 to 64 ranks, 8 per host, 200 collectives, a late rank from a random collective on, 1.5-6 ms late, arrival
jitter 100 µs, the Inspector's dump thread waking every 0.5-3 ms so ranks' files hold different samples,
the three layouts in turn: compact v4.0, verbose v4.0, the v4.3 marker layout). A late job counts as found
when exactly the late rank is named and the onset lies within 5 collectives of the true one; a healthy job
as clean when no rank is named.

Speed: ``commlens diagnose job`` over 64 ranks x ``--records`` collectives in each of NCCL Inspector,
Flight Recorder (its buffer as large) and monitor files, run ``--repeats`` times as a child process: wall
time and peak RSS (the child's ``ru_maxrss``, from ``wait4``).

    .venv/bin/python benchmarks/diagnose_job.py                 # both, writes its section of docs/benchmarks.md
    .venv/bin/python benchmarks/diagnose_job.py --skip-speed --no-docs
    .venv/bin/python benchmarks/diagnose_job.py --skip-accuracy --data /tmp/dj64   # files kept for reruns
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from docsection import write_section  # noqa: E402
from scenarios.job_files import STEP, JobSpec, write_flightrec, write_inspector, write_monitor  # noqa: E402

from commlens.diagnose.job import late_ranks_from_paths  # noqa: E402

TITLE = "## Late ranks from NCCL Inspector, and diagnose job at scale (issue 31)"
LAYOUTS = ("compact", "verbose", "v4.3")
RANKS = (8, 16, 24, 32, 48, 64)


def _job_index(op: str, seq: int) -> int:
    """The job-wide collective index of an Inspector (op, coll_sn) in the generated program."""
    names = [s[1] for s in STEP]
    return seq * len(STEP) + names.index(op)


def accuracy(jobs: int, seed: int, work: Path) -> tuple[list[str], dict[str, int]]:
    rng = random.Random(seed)
    rows = []
    counts = {"late_found": 0, "late_jobs": 0, "healthy_clean": 0, "healthy_jobs": 0, "onset_errors": 0}
    for k in range(2 * jobs):
        late = k < jobs
        ranks = rng.choice(RANKS)
        layout = LAYOUTS[k % len(LAYOUTS)]
        late_rank = rng.randrange(ranks) if late else None
        onset = rng.randrange(30, 150)
        spec = JobSpec(
            ranks=ranks,
            collectives=200,
            late_rank=late_rank,
            onset=onset,
            late_ms=rng.uniform(1.5, 6.0),
            seed=seed * 1000 + k,
            dump_interval_us=rng.choice((500, 1000, 3000)),
        )
        out = work / f"job{k}"
        write_inspector(spec, out, layout=layout)
        t0 = time.perf_counter()
        reports = late_ranks_from_paths([out])
        elapsed = time.perf_counter() - t0
        named = [r for rep in reports for r in rep.late]
        shutil.rmtree(out)
        if late:
            counts["late_jobs"] += 1
            onset_error = min((abs(_job_index(r.onset_op, r.onset_seq) - onset) for r in named), default=None)
            ok = [r.rank for r in named] == [late_rank] and onset_error is not None and onset_error <= 5
            counts["late_found"] += ok
            counts["onset_errors"] += 0 if ok else 1
            outcome = "found" if ok else "MISSED"
            detail = f"late rank {late_rank} from {onset}, {spec.late_ms:.1f} ms; named {[r.rank for r in named]}"
            if named:
                detail += f", onset {_job_index(named[0].onset_op, named[0].onset_seq)}"
        else:
            counts["healthy_jobs"] += 1
            counts["healthy_clean"] += not named
            outcome = "clean" if not named else "FALSE ALARM"
            detail = f"named {[r.rank for r in named]}"
        judged = sum(rep.judged for rep in reports)
        partial = sum(rep.partial for rep in reports)
        rows.append(
            f"| {k} | {ranks} | {layout} | {spec.dump_interval_us} | {judged} ({partial} partial) | {detail} | "
            f"{outcome} | {elapsed:.2f} s |"
        )
    return rows, counts


def _tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and all its descendants now (MiB), from /proc."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return total / 2**20


def _watch_tree(pid: int, peak: list[float], stop: threading.Event) -> None:
    while not stop.wait(0.05):
        peak[0] = max(peak[0], _tree_rss_mib(pid))


def speed(
    records: int, repeats: int, work: Path, data: Path
) -> tuple[list[float], list[float], list[float], list[float], str]:
    spec = JobSpec(ranks=64, collectives=records, late_rank=37, onset=records // 3, fr_entries=records, seed=31)
    t0 = time.perf_counter()
    paths = [data / "inspector", data / "flightrec", data / "monitor"]
    if all(p.is_dir() for p in paths):
        print(f"reusing the files in {data}", flush=True)
    else:
        write_inspector(spec, paths[0])
        write_flightrec(spec, paths[1])
        write_monitor(spec, paths[2])
        print(f"generated 64 x {records} records per source in {time.perf_counter() - t0:.0f} s", flush=True)
    walls, rss, tree, cpu = [], [], [], []
    verdict = ""
    binary = Path(sys.executable).parent / "commlens"
    for _ in range(repeats):
        start = time.perf_counter()
        out_file = work / "out.txt"
        with open(out_file, "wb") as out_fp:
            proc = subprocess.Popen(
                [str(binary), "diagnose", "job", *map(str, paths)], stdout=out_fp, stderr=subprocess.DEVNULL
            )
            peak, stop = [0.0], threading.Event()
            watcher = threading.Thread(target=_watch_tree, args=(proc.pid, peak, stop), daemon=True)
            watcher.start()
            # the child's rusage: its CPU time includes its reader processes'; ru_maxrss is the largest one's
            _pid, status, usage = os.wait4(proc.pid, 0)
            stop.set()
            watcher.join()
        walls.append(time.perf_counter() - start)
        rss.append(usage.ru_maxrss / 1024)
        tree.append(peak[0])
        cpu.append(usage.ru_utime + usage.ru_stime)
        out = out_file.read_text()
        verdict = next((line for line in out.splitlines() if line.startswith("late rank:")), out[-300:])
        print(
            f"  {walls[-1]:.1f} s wall, {cpu[-1]:.1f} s CPU, largest process {rss[-1]:.0f} MiB, all processes "
            f"together {tree[-1]:.0f} MiB (sampled every 50 ms), exit {os.waitstatus_to_exitcode(status)}",
            flush=True,
        )
    return walls, rss, tree, cpu, verdict


def _verdict(wall_s: float, cpu_s: float, rss_mib: float) -> str:
    if wall_s <= 10 and rss_mib <= 1024:
        return ": **met**" + (" (wall time; the CPU time, all processes, is over 10 s)." if cpu_s > 10 else ".")
    return ": **missed** (" + ("wall time over 10 s" if wall_s > 10 else "memory over 1 GiB") + ")."


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20, help="late jobs (and as many healthy ones)")
    p.add_argument("--seed", type=int, default=31)
    p.add_argument("--records", type=int, default=10_000, help="collectives per rank and source for the speed run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--data", type=Path, help="keep the speed run's generated files here (reused when present: same --records)"
    )
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--no-docs", action="store_true")
    ns = p.parse_args()
    body = [
        f"Measured {dt.date.today().isoformat()} with `.venv/bin/python benchmarks/diagnose_job.py` "
        f"(seed {ns.seed}); machine load while running: `{Path('/proc/loadavg').read_text().strip()}` (2 cores).",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="diagnose-job-") as tmp:
        work = Path(tmp)
        if not ns.skip_accuracy:
            rows, c = accuracy(ns.jobs, ns.seed, work)
            print("\n".join(rows))
            body += [
                "**Late rank from NCCL Inspector dumps.** Generated jobs (tests/scenarios/job_files.py): 8-64 ranks, "
                "200 collectives, one rank late from a random collective on (1.5-6 ms, arrival jitter 100 µs, and on "
                "every rank one-off 1-5 ms hiccups in 0.2% of collectives), the "
                "dump thread waking every 0.5-3 ms (ranks' files then hold different samples), the three layouts "
                "in turn. Found = exactly the late rank named, onset within 5 collectives.",
                "",
                f"- late jobs: **{c['late_found']} of {c['late_jobs']}** found (target >= 19 of 20)",
                f"- healthy jobs: **{c['healthy_clean']} of {c['healthy_jobs']}** with no rank named (target 20 of 20)",
                "",
                "| job | ranks | layout | dump interval (µs) | instances judged | what happened | outcome | time |",
                "|---|---|---|---|---|---|---|---|",
                *rows,
                "",
            ]
        if not ns.skip_speed:
            load_before = Path("/proc/loadavg").read_text().split()[0]
            walls, rss, tree, cpu, verdict = speed(ns.records, ns.repeats, work, ns.data or work)
            load_after = Path("/proc/loadavg").read_text().split()[0]
            body += [
                f"**diagnose job at scale.** 64 ranks x {ns.records:,} collectives in each of NCCL Inspector (compact), "
                f"Flight Recorder (JSON, buffer {ns.records:,}) and monitor files, one `commlens diagnose job` child "
                f"process per repeat ({ns.repeats}; it reads the three sources in four processes, the Flight Recorder "
                f"dumps in two): wall min "
                f"{min(walls):.1f} s, median {statistics.median(walls):.1f} s; CPU time (user + system, its reader "
                f"processes included) min {min(cpu):.1f} s, median {statistics.median(cpu):.1f} s; peak RSS of the "
                f"largest process max {max(rss):.0f} MiB, of all its processes together max {max(tree):.0f} MiB "
                f"(1-minute load average {load_before} before, {load_after} after; targets: under 10 s and 1 GiB)"
                + _verdict(min(walls), min(cpu), max(tree)),
                "",
                f"    {verdict}",
                "",
            ]
    if not ns.no_docs:
        write_section(TITLE, body)
    print("\n".join(body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
