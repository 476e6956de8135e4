#!/usr/bin/env python
"""Issues 12 and 28's bad-input figures: a long fuzz run of every reader and spec loader (crashes, hangs and peak
memory per reader), and peak memory on the largest hostile inputs.

Run from the repository root::

    nice .venv/bin/python benchmarks/fuzz_ingest.py     # 10,000 cases per reader, then the hostile inputs
    .venv/bin/python benchmarks/fuzz_ingest.py --cases 500 --no-doc
    .venv/bin/python benchmarks/fuzz_ingest.py --cases 300 --reader kineto --reader flightrec

1. The fuzz: the cases and mutations of ``tests/test_fuzz_ingest.py`` (which CI runs with a fixed seed and
   a small budget), ``--cases`` per reader, driven here by ``random.Random("SEED:READER")``, 1-4 mutations per
   case, each reader in a forked child (its peak ``ru_maxrss`` is its own), each case under a SIGALRM of
   ``HANG_S``. Every outcome must be a stored run (read trace, analysed dump set, loaded spec) or the reader's
   own error; anything else is a crash (or a hang), printed with the input's fixture and mutations. The script
   exits 1 if there is one.
2. Peak memory (``ru_maxrss`` of a child process) of ``commlens ingest`` on: an nccl-tests log with a rank
   of 4294967296; 100,000 nested JSON brackets; ``/dev/zero``; an endless pipe (``yes``) under the default
   256 MiB cap; a valid 50 MiB log that is mostly NCCL INFO records (as ``NCCL_DEBUG=INFO`` writes); and a
   valid 50 MiB log that is all table rows (440,580 rows, 881,160 measurements), parsed only (``load_runs``)
   and, with ``--full``, through the whole command into SQLite.

It replaces the ``## Bad input (issue 12)`` section of ``docs/benchmarks.md`` (``--no-doc``: print only).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent / "tests"))
import argparse  # noqa: E402
import collections  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from docsection import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Bad input (issues 12 and 28)"
OLD_SECTION = "## Bad input (issue 12)"
HANG_S = 10  # a case running longer than this is a hang
LOG = ROOT / "tests" / "data" / "ingest" / "h100-8gpu-all_reduce.log"
TARGET_BYTES = 50 * 2**20
# How the same inputs measured before issue 12's fixes (commit 1a2ecf9), for comparison.
BEFORE = (
    "Before the fixes (commit 1a2ecf9, measured 2026-12-01 with the same inputs): the rank of 4294967296 "
    "was OOM-killed at 8.6 GB in the issue's report; the 50 MiB table log took 1187 MiB to parse and "
    "3091 MiB through the command, the NCCL INFO log 155 MiB to parse. The parse now reads lines one at a "
    "time and keeps a table row as one string; the store then built the row dicts of all 881,160 "
    "measurements before one bulk insert (`store/convert.py` `run_to_rows`, `store/repo.py`), about 2.4 GB; "
    "it now inserts 5,000 measurements at a time in the same single transaction, so the command peaks a "
    "little above the parse: what remains is the parsed run itself."
)
# What the fuzz found while issue 28 extended it to every reader (printed under the fuzz's table).
FOUND_28 = (
    "Issue 28's report: 25 of 10,800 fuzzed files crashed, in 4 bugs (a malformed pickle's AttributeError, `max()` "
    "of no agreeing ranks in `find_divergences`, a KeyError in `describe_missing`, unhashable list/dict ids at five "
    "places of the Kineto reader); each is fixed and has a test (`tests/test_hostile_readers.py`). Extending the "
    "fuzz to dumps and traces (1,000 cases per reader, before those fixes were complete) found two more, also fixed "
    "with tests: a bare JSON value as a trace crashed the Kineto reader's depth check, and a mutated pickle naming "
    "memo index 544,629,605 made the C unpickler allocate 8.4 GB (dumps now go through Python's unpickler). The "
    "NCCL Inspector crashes above are one bug (a timestamp beyond `datetime`'s years), in a reader issue 33 owns."
)
# Runs one command and prints the peak resident memory of that child, in KiB (Linux ru_maxrss).
_PEAK = (
    "import resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
    "print(json.dumps({'rc': p.returncode, 'kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
    " 'out': (p.stdout[-300:] + p.stderr[-300:]).decode(errors='replace')}))\n"
)


class _Hang(Exception):
    """A case that ran past ``HANG_S``: raised from SIGALRM inside the reader."""


def _on_alarm(_signum: int, _frame: Any) -> None:
    raise _Hang()


def _fuzz_reader(reader: str, cases: int, seed: int, conn: Any) -> None:
    """In a child process of its own (so that its peak memory is its own): ``cases`` mutated inputs of one reader."""
    import resource
    import signal
    import warnings

    import test_fuzz_ingest as fuzz

    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _on_alarm)
    rng = random.Random(f"{seed}:{reader}")
    mine = [c for c in fuzz.CASES if c.reader == reader]
    outcomes: collections.Counter = collections.Counter()
    crashes: list[tuple[str, str, str, list, str]] = []
    hangs: list[tuple[str, str, str, list, str]] = []
    slowest_s = 0.0
    start_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="commlens-fuzz-") as folder:
        harness = fuzz.Harness(Path(folder))
        try:
            for _ in range(cases):
                case = rng.choice(mine)
                mutations = [
                    (rng.choice(fuzz.KINDS), rng.random(), rng.randrange(10**6)) for _ in range(rng.randint(1, 4))
                ]
                t0 = time.perf_counter()
                signal.alarm(HANG_S)
                try:
                    outcomes[fuzz._run(harness, case, mutations)] += 1
                except _Hang:
                    hangs.append((reader, case.name, f"over {HANG_S} s", mutations, ""))
                except Exception as e:  # a crash: what the fuzz is looking for
                    where = traceback.extract_tb(e.__traceback__)[-1]
                    crashes.append(
                        (
                            reader,
                            case.name,
                            f"{type(e).__name__} at {Path(where.filename).name}:{where.lineno}",
                            mutations,
                            str(e)[:200],
                        )
                    )
                finally:
                    signal.alarm(0)
                slowest_s = max(slowest_s, time.perf_counter() - t0)
        finally:
            harness.close()
    conn.send(
        {
            "reader": reader,
            "outcomes": dict(outcomes),
            "crashes": crashes,
            "hangs": hangs,
            "seconds": time.perf_counter() - start,
            "slowest_s": slowest_s,
            "start_kib": start_kib,
            "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }
    )
    conn.close()


def _fuzz(cases: int, seed: int, only: list[str] | None) -> list[dict[str, Any]]:
    """Every reader's fuzz, one forked child at a time; each result as :func:`_fuzz_reader` sends it."""
    import multiprocessing

    import test_fuzz_ingest as fuzz  # imported here, before the fork: each child starts from the same state

    readers = sorted({c.reader for c in fuzz.CASES})
    if only:
        readers = [r for r in readers if r in only]
    context = multiprocessing.get_context("fork")
    results = []
    for reader in readers:
        ours, theirs = context.Pipe(duplex=False)
        child = context.Process(target=_fuzz_reader, args=(reader, cases, seed, theirs))
        child.start()
        theirs.close()
        try:
            result = ours.recv()
        except EOFError:  # the child died (killed for memory, or a crash of the interpreter)
            result = {"reader": reader, "died": child.exitcode}
        child.join()
        if child.exitcode:
            result["died"] = child.exitcode
        print(
            f"  {reader}: {result.get('seconds', 0):.0f} s, crashes {len(result.get('crashes', ()))}, "
            f"hangs {len(result.get('hangs', ()))}, peak {result.get('peak_kib', 0) / 1024:.0f} MiB",
            flush=True,
        )
        results.append(result)
    return results


def _inputs(folder: Path) -> dict[str, Path]:
    """The hostile inputs and the two valid 50 MiB logs, written into ``folder``."""
    lines = LOG.read_text().splitlines(True)
    rank7 = next(i for i, ln in enumerate(lines) if ln.startswith("#  Rank  7 "))
    huge = folder / "rank-4294967296.log"
    huge.write_text(
        "".join(lines[:rank7] + [lines[rank7].replace("Rank  7 ", "Rank 4294967296 ")] + lines[rank7 + 1 :])
    )
    nested = folder / "nested-100k.json"
    nested.write_text('{"results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    first_info = min(i for i, ln in enumerate(lines) if "NCCL INFO" in ln)
    info = [ln for ln in lines[:40] if "NCCL INFO" in ln]
    block = "".join(info)
    info_log = folder / "valid-50mib-nccl-info.log"
    info_log.write_text(
        "".join(lines[:first_info]) + block * (TARGET_BYTES // len(block) + 1) + "".join(lines[first_info:])
    )
    rows = [ln for ln in lines if ln.strip()[:1].isdigit() and len(ln.split()) == 13]
    first, last = lines.index(rows[0]), lines.index(rows[-1])
    table = "".join(rows)
    rows_log = folder / "valid-50mib-rows.log"
    rows_log.write_text("".join(lines[:first]) + table * (TARGET_BYTES // len(table) + 1) + "".join(lines[last + 1 :]))
    return {"huge": huge, "nested": nested, "info": info_log, "rows": rows_log}


def _peak(command: list[str], stdin: Any = None) -> dict:
    wrapper = [sys.executable, "-c", "import json\n" + _PEAK, *command]
    out = subprocess.run(wrapper, stdin=stdin, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _memory(folder: Path, full: bool) -> list[tuple[str, str, dict]]:
    files = _inputs(folder)
    cli = [str(Path(sys.executable).parent / "commlens"), "ingest"]
    db = ["--db", str(folder / "results.db")]
    parse = [
        sys.executable,
        "-c",
        "import sys, warnings; warnings.simplefilter('ignore'); "
        "from commlens.ingest import load_runs; r = load_runs(sys.argv[1]); "
        "print(len(r[0].measurements), 'measurements')",
    ]
    yes = subprocess.Popen(["yes", "# not a log"], stdout=subprocess.PIPE)
    try:
        runs = [
            ("a rank of 4294967296 (nccl-tests log, 3 KiB)", "commlens ingest", _peak(cli + [str(files["huge"])] + db)),
            ("100,000 nested brackets (JSON, 195 KiB)", "commlens ingest", _peak(cli + [str(files["nested"])] + db)),
            ("/dev/zero", "commlens ingest", _peak(cli + ["/dev/zero"] + db)),
            (
                "an endless pipe (`yes`), default 256 MiB cap",
                "commlens ingest -",
                _peak(cli + ["-"] + db, stdin=yes.stdout),
            ),
        ]
    finally:
        yes.stdout.close()  # type: ignore[union-attr]
        yes.kill()
        yes.wait()
    size_mib = files["info"].stat().st_size / 2**20
    runs.append(
        (
            f"valid log, {size_mib:.0f} MiB, mostly NCCL INFO records",
            "commlens ingest",
            _peak(cli + [str(files["info"])] + db),
        )
    )
    size_mib = files["rows"].stat().st_size / 2**20
    runs.append(
        (
            f"valid log, {size_mib:.0f} MiB, all table rows (881,160 measurements)",
            "load_runs (parse only)",
            _peak(parse + [str(files["rows"])]),
        )
    )
    if full:
        runs.append(
            (
                f"valid log, {size_mib:.0f} MiB, all table rows (881,160 measurements)",
                "commlens ingest",
                _peak(cli + [str(files["rows"])] + db),
            )
        )
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--full",
        action="store_true",
        help="also the whole command on the 50 MiB table log (minutes; about 650 MiB of memory)",
    )
    parser.add_argument("--no-doc", action="store_true", help="print only; do not rewrite docs/benchmarks.md")
    parser.add_argument("--reader", action="append", help="fuzz only this reader (repeatable); implies --no-doc")
    parser.add_argument("--fuzz-only", action="store_true", help="skip the hostile inputs; implies --no-doc")
    args = parser.parse_args()

    results = _fuzz(args.cases, args.seed, args.reader)
    crashes = [c for r in results for c in r.get("crashes", ())]
    hangs = [h for r in results for h in r.get("hangs", ())]
    died = [r["reader"] for r in results if r.get("died")]
    fuzz_s = sum(r.get("seconds", 0.0) for r in results)
    print(
        f"fuzz: {args.cases} cases per reader, {len(results)} readers, {fuzz_s:.0f} s, seed {args.seed}; "
        f"crashes: {len(crashes)}, hangs: {len(hangs)}, readers that died: {died or 'none'}"
    )
    for _, name, where, mutations, message in (crashes + hangs)[:20]:
        print(f"  CRASH/HANG {where} on {name} {mutations}: {message}")
    if args.fuzz_only:
        return 1 if crashes or hangs or died else 0
    with tempfile.TemporaryDirectory(prefix="commlens-hostile-") as scratch:
        memory = _memory(Path(scratch), args.full)
    for what, how, result in memory:
        print(
            f"  {what}: {how}: exit {result['rc']}, peak {result['kib'] / 1024:.0f} MiB: {result['out'].strip()[-160:]}"
        )

    command = (
        "benchmarks/fuzz_ingest.py"
        + (f" --cases {args.cases}" if args.cases != 10_000 else "")
        + (f" --seed {args.seed}" if args.seed != 12 else "")
        + (" --full" if args.full else "")
    )
    body = [
        f"Measured {dt.date.today().isoformat()} on {platform.machine()} ({os.cpu_count()} CPUs, shared), "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}, with "
        f"`nice .venv/bin/python {command}`.",
        "",
        "**Fuzz.** The cases of `tests/test_fuzz_ingest.py`: real fixtures of every reader (nccl-tests text and "
        "JSON, PARAM, commlens run JSON, NCCL Inspector logs, Flight Recorder dumps of six layouts in pickle and "
        "JSON, Kineto traces as JSON and gzip) and every spec loader (the shipped topology, workload and "
        "accelerators YAML), with bytes flipped, inserted and deleted, lines dropped and repeated, numbers "
        "replaced by huge, negative, infinite and NaN ones, JSON values swapped for other types; 1-4 mutations "
        "each, drawn by `random.Random('SEED:READER')`. An outcome is clean if the input is stored (ingest "
        "formats: into SQLite, read back and compared), read (a trace; a dump, among its fixture's other ranks, "
        "through the whole analysis of `diagnose hang`) or loaded (a spec), or refused with the reader's own "
        f"error. A hang is a case over {HANG_S} s (SIGALRM). Each reader runs in a child process of its own: "
        "its peak memory is that process' `ru_maxrss` (the interpreter and commlens included: the start column).",
        "",
        "| reader | cases | stored / read / loaded | refused cleanly | crashes | hangs | slowest case | peak memory "
        "(start) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.get("died") and "outcomes" not in r:
            body.append(f"| {r['reader']} | - | - | - | died (exit {r['died']}) | - | - | - |")
            continue
        counts = r["outcomes"]
        ok = counts.get("stored", 0) + counts.get("loaded", 0)
        total = sum(counts.values()) + len(r["crashes"]) + len(r["hangs"])
        body.append(
            f"| {r['reader']} | {total:,} | {ok:,} | {counts.get('refused', 0):,} | {len(r['crashes'])} | "
            f"{len(r['hangs'])} | {r['slowest_s']:.2f} s | {r['peak_kib'] / 1024:.0f} MiB "
            f"({r['start_kib'] / 1024:.0f}) |"
        )
    total_cases = sum(sum(r.get("outcomes", {}).values()) for r in results) + len(crashes) + len(hangs)
    body += [
        "",
        f"{total_cases:,} cases over {len(results)} readers in {fuzz_s:.0f} s: **{len(crashes)} crashes, "
        f"{len(hangs)} hangs**, peak memory at most "
        f"{max((r.get('peak_kib', 0) for r in results), default=0) / 1024:.0f} MiB. CI runs the same cases with "
        "a fixed seed (hypothesis' `derandomize`): 500 ingest, 200 spec and 200 dump/trace cases, in about 15 s.",
    ]
    for _, name, where, mutations, message in (crashes + hangs)[:10]:
        body.append(f"- {where} on `{name}` {mutations}: {message}".replace("|", "\\|"))
    body += [
        "",
        FOUND_28,
        "",
        "**Hostile inputs.** Peak resident memory of the child process (`ru_maxrss`):",
        "",
        "| input | command | exit | peak memory | outcome |",
        "|---|---|---:|---:|---|",
    ]
    for what, how, result in memory:
        said = result["out"].strip().splitlines()
        outcome = next((ln for ln in said if "stored run" in ln or ln.startswith("error:")), said[-1] if said else "")
        outcome = outcome.replace(scratch, "TMP").replace("|", "\\|")
        outcome = outcome if len(outcome) <= 150 else outcome[:150] + "..."
        body.append(f"| {what} | `{how}` | {result['rc']} | {result['kib'] / 1024:.0f} MiB | {outcome} |")
    body += ["", BEFORE]
    if not (args.no_doc or args.reader or args.fuzz_only):
        _rename_section(OLD_SECTION, SECTION)
        write_section(SECTION, body)
    return 1 if crashes or hangs or died else 0


def _rename_section(old: str, new: str) -> None:
    """The section written before under ``old`` (issue 12's title) carries on under ``new``."""
    from docsection import DOC

    text = DOC.read_text()
    if old + "\n" in text and new + "\n" not in text:
        DOC.write_text(text.replace(old + "\n", new + "\n", 1))


if __name__ == "__main__":
    sys.exit(main())
