"""Accuracy of ``diagnose links`` on an emulated 8-host cluster (needs root).

Three scenarios, ``--trials`` each: host 3's link at 30% of the rate, the single link 1-6 at 30%, and a
healthy cluster. A trial is a full ``commlens diagnose links --cluster`` run (processes started in the
namespaces, measurement, analysis); it counts as found when the JSON names exactly the injected fault
(kind and hosts), and as a false alarm when a healthy run reports any fault. Prints a Markdown table and
writes it as the section "Diagnosis accuracy (issue 6)" of docs/benchmarks.md (``--no-docs``: print only).

    sudo .venv/bin/python benchmarks/diagnose_accuracy.py --trials 20
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "commlens"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADING = "## Diagnosis accuracy (issue 6)"
SCENARIOS = [
    ("slow host 3 at 30%", ["--slow-host", "3:0.3"], ("slow_host", [3])),
    ("slow link 1-6 at 30%", ["--slow-link", "1-6:0.3"], ("slow_link", [1, 6])),
    ("healthy", [], None),
]


def cl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=300)


def write_section(body: str) -> None:
    """Replace this script's section of docs/benchmarks.md (re-read just now: the file is shared), or append it."""
    text = DOCS.read_text()
    section = f"{HEADING}\n\n{body.rstrip()}\n"
    if HEADING in text:
        start = text.index(HEADING)
        nxt = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + ("\n" + text[nxt + 1 :] if nxt != -1 else "")
    else:
        text = text.rstrip() + "\n\n" + section
    DOCS.write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20, help="diagnoses per scenario")
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--link-gbps", type=float, default=1.0)
    p.add_argument("--probe", default="-b 1M -n 2 --passes 3", help="options passed to diagnose links")
    p.add_argument("--no-docs", action="store_true", help="print only; do not write docs/benchmarks.md")
    ns = p.parse_args()
    if os.geteuid() != 0:
        print("error: needs root (network namespaces)", file=sys.stderr)
        return 2
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    name = f"acc{os.getpid() % 10000}"
    proc = cl("cluster", "up", "--name", name, "--hosts", str(ns.hosts), "--link-gbps", str(ns.link_gbps))
    if proc.returncode:
        print(proc.stderr, file=sys.stderr)
        return 1
    rows = []
    try:
        for label, fault, want in SCENARIOS:
            cl("cluster", "set", name, "--clear", *fault)
            hits, times, confs, errors = 0, [], [], 0
            for _ in range(ns.trials):
                t0 = time.perf_counter()
                proc = cl("diagnose", "links", "--cluster", name, *ns.probe.split(), "--json")
                times.append(time.perf_counter() - t0)
                if proc.returncode not in (0, 1):
                    errors += 1
                    continue
                faults = json.loads(proc.stdout)["faults"]
                got = [(f["kind"], f["hosts"]) for f in faults]
                ok = got == [] if want is None else got == [want]
                hits += ok
                confs += [f["confidence"] for f in faults]
            rows.append(
                (label, hits, ns.trials, errors, max(times), sum(times) / len(times), min(confs) if confs else None)
            )
            print(f"{label}: {hits}/{ns.trials} correct", file=sys.stderr, flush=True)
    finally:
        cl("cluster", "down", name)
    lines = [
        (
            f"Produced by `sudo .venv/bin/python benchmarks/diagnose_accuracy.py --trials {ns.trials}`, {started}: "
            f"{ns.hosts} emulated hosts (network namespaces, HTB-shaped {ns.link_gbps:g} Gb/s links), "
            f"`commlens diagnose links --cluster NAME {ns.probe}` per trial, on a 2-core machine."
        ),
        "",
        "| scenario | correct | errors | mean time (s) | max time (s) | min confidence |",
        "|---|---|---|---|---|---|",
    ]
    for label, hits, n, errors, tmax, tmean, cmin in rows:
        c = "-" if cmin is None else f"{cmin:.2f}"
        lines.append(f"| {label} | {hits}/{n} | {errors} | {tmean:.1f} | {tmax:.1f} | {c} |")
    lines += [
        "",
        (
            "A trial is correct when the `faults` list of the JSON is exactly the injected fault (kind and "
            "hosts), or empty on the healthy cluster: a healthy trial that is not correct is a false alarm. "
            "Time is the whole command, wall clock: starting 8 Python/torch processes in the namespaces on 2 "
            "cores is most of it; the measurement (3 passes of 7 rounds) takes a few seconds."
        ),
    ]
    body = "\n".join(lines)
    print(body)
    if not ns.no_docs:
        write_section(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
