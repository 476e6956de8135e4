"""Issue 33's target on published files: each stored with every value equal to an independent reading of the
printed table, or refused with its cause named.

Reads the fixtures of tests/data/ingest_published/ and the nccl-tests logs of ../shared/realdata/nccltests/
(where present) with the options their README gives, compares every stored value with the test's own reading
(tests/test_ingest_published.py: a plain split under each header, nothing of commlens' reader), and writes
the figures to the "Published logs (issue 33)" section of docs/benchmarks.md.

    .venv/bin/python benchmarks/ingest_published.py
"""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from pathlib import Path

from docsection import write_section

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
_spec = importlib.util.spec_from_file_location("published", ROOT / "tests" / "test_ingest_published.py")
assert _spec is not None and _spec.loader is not None
published = importlib.util.module_from_spec(_spec)
sys.modules["published"] = published  # its dataclasses look their module up
_spec.loader.exec_module(published)

from commlens.ingest import GivenFacts, IngestError, IngestWarning, load_runs  # noqa: E402

DATA = ROOT.parent / "shared" / "realdata" / "ingest_published"  # published files: third-party, not committed here
REAL = ROOT.parent / "shared" / "realdata" / "nccltests"

# file -> (load_runs options, expected: "stored" or the words the refusal must contain)
FILES: dict[str, tuple[dict, str]] = {
    **{name: (opts, "stored") for name, opts, _ in published.CASES},
    "spcx-2node-alltoall-three-settings-2026.log": ({}, "stored"),
    "rccl-issue876-7900xtx-abort-unhandled-cuda-error.log": ({}, "unhandled cuda error"),
    "nccl-tests-issue287-rtx5090-2gpu-abort-after-header.log": ({}, "unhandled cuda error"),
    "nccl-tests-issue264-h100-abort-cuda-system-not-initialized.log": ({}, "system not yet initialized"),
    "nccl-tests-issue107-two-processes-rank0-twice.log": ({}, "rank 0 is listed twice"),
}


def _check(path: Path, options: dict, expect: str) -> tuple[str, int, int, float]:
    """(outcome, runs, values compared, seconds)."""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IngestWarning)
            runs = load_runs(path, **options)
    except IngestError as e:
        ok = expect != "stored" and expect in str(e)
        return ("refused, cause named" if ok else f"REFUSED: {e}"), 0, 0, time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if expect != "stored":
        return "STORED but expected a refusal", len(runs), 0, seconds
    tables = published.read_tables(path)
    if len(runs) > 1:
        pairs = list(zip(runs, tables))
    else:
        pairs = [(runs[0], [p for t in tables for p in t])]
    halves = 0  # each half of a printed row: size, count, type, redop, root, time, algBW, busBW, #wrong
    for run, printed in pairs:
        ops = {m.op for m in run.measurements}
        try:
            halves += published.assert_equal_to_printed(
                run,
                printed,
                redop_default="sum" if ops & {"all_reduce", "reduce", "reduce_scatter"} else None,
                reduces="sendrecv" not in ops,
            )
        except AssertionError as e:
            return f"MISMATCH: {e}", len(runs), halves * 9, seconds
    return "stored exactly", len(runs), halves * 9, seconds


def main(doc: Path | None = None) -> int:
    rows = [(DATA / name, opts, expect) for name, (opts, expect) in FILES.items() if (DATA / name).is_file()]
    if len(rows) < len(FILES):
        print(
            f"note: {len(FILES) - len(rows)} published files are not in {DATA}: measured without them", file=sys.stderr
        )
    if REAL.is_dir():
        rows += [(REAL / f.name, {}, "stored") for f in sorted(REAL.glob("*.log"))]
    body = [
        "Issue 33: published nccl-tests / rccl-tests logs, each stored with every value (size, count, type, redop,",
        "root, time, algBW, busBW, #wrong, per placement) equal to an independent reading of the printed table, or",
        "refused with its cause named. Command: `.venv/bin/python benchmarks/ingest_published.py`.",
        "",
        "| file | options | outcome | runs | values compared | read (ms) |",
        "|---|---|---|---:|---:|---:|",
    ]
    good = 0
    for path, opts, expect in rows:
        outcome, nruns, values, seconds = _check(path, opts, expect)
        good += outcome in ("stored exactly", "refused, cause named")
        shown = ", ".join(f"{k}={v.as_dict() if isinstance(v, GivenFacts) else v}" for k, v in opts.items()) or "-"
        body.append(f"| {path.name} | {shown} | {outcome} | {nruns} | {values} | {seconds * 1e3:.1f} |")
        print(f"{path.name}: {outcome} ({nruns} runs, {values} values, {seconds * 1e3:.1f} ms)")
    body += ["", f"{good} of {len(rows)} files as expected (stored exactly, or refused with the cause named)."]
    print(body[-1])
    if doc is None:
        write_section("## Published logs (issue 33)", body)
    else:
        write_section("## Published logs (issue 33)", body, doc)
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
