"""Work per cold projection at the speed points of ``project_validation.py``, counted in instructions.

On a shared machine the wall clock of one projection moves by 30-70% from one minute to the next, so a change of
10-20% in the code's own work cannot be read from it. valgrind's callgrind counts the instructions a process runs,
the same on every run (PYTHONHASHSEED fixed): each figure here is (a process that makes ``--calls`` cold
projections of the point, minus the same process that makes none) / ``--calls``, in millions of instructions. With
``--base REV`` the same count runs on that git revision's ``src`` (a temporary worktree, removed after), and the
table gives the change: the projection's own work, before and after, free of the machine's load.

Needs valgrind (``apt-get install valgrind``). About a minute a count under valgrind; two run at a time.
``--write`` replaces this benchmark's section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from docsection import write_section  # noqa: E402
from project_validation import SPEED_POINTS  # noqa: E402

SECTION = "## Projection work per call, counted (issue 27)"
# One child process: the point's projection made twice (imports, data files, caches a sweep keeps), then ``calls``
# cold projections (step.clear_caches before each, as project_validation.py's cold rounds).
CHILD = """
import sys
src, bench, idx, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, bench)
import project_validation as pv
sys.path.insert(0, src)
from commlens.project import ParallelLayout, project, step
from commlens.topology import load_topology
from commlens.workload import load_workload
assert step.__file__.startswith(src), step.__file__
point = pv.SPEED_POINTS[idx]
w = load_workload(point.workload, point.workload_overrides)
t = load_topology(point.topology)
layout = ParallelLayout.model_validate(point.layout)
project(w, t, layout, point.gpus)
project(w, t, layout, point.gpus)
for _ in range(calls):
    step.clear_caches()
    project(w, t, layout, point.gpus)
"""
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def fail(message: str) -> NoReturn:
    """``error: message`` on stderr, exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def count(src: Path, idx: int, calls: int) -> int:
    """Instructions (callgrind's Ir) of one child process."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-c",
        CHILD,
        str(src),
        str(ROOT / "benchmarks"),
        str(idx),
        str(calls),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        fail(f"callgrind run failed ({' '.join(cmd[:4])} ... {idx} {calls}): {done.stderr[-800:]}")
    return int(found.group(1))


def per_call(src: Path, calls: int, pool: ThreadPoolExecutor) -> list[float]:
    """Millions of instructions per cold projection at each speed point, for the ``src`` tree. Its modules are
    compiled first: a counted process that compiled one (its cache missing or older than the source, as after an
    edit) would count the compiler too, and the two processes of a point raced for it. An edit to the tree or to
    ``benchmarks/`` while this runs can still do so: leave them alone until it is done."""
    done = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(src), str(ROOT / "benchmarks")], capture_output=True, text=True
    )
    if done.returncode != 0:
        fail(f"cannot compile {src}: {(done.stdout + done.stderr).strip()[-800:]}")
    jobs = [(pool.submit(count, src, i, calls), pool.submit(count, src, i, 0)) for i in range(len(SPEED_POINTS))]
    return [(full.result() - empty.result()) / calls / 1e6 for full, empty in jobs]


def base_tree(rev: str, into: Path) -> Path:
    """A worktree of ``rev`` in ``into`` (its ``src``)."""
    done = subprocess.run(
        ["git", "worktree", "add", "--detach", str(into), rev], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        fail(f"--base {rev}: {done.stderr.strip()}")
    return into / "src"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=40, help="cold projections in the counted process (default 40)")
    ap.add_argument("--base", default="", help="a git revision whose src to count too, for the change")
    ap.add_argument("--write", action="store_true", help="write the section of docs/benchmarks.md")
    args = ap.parse_args()
    if args.calls < 1:
        ap.error("--calls: must be >= 1")
    if shutil.which("valgrind") is None:
        fail("valgrind not found (Debian: apt-get install valgrind)")
    if args.base:  # before any count: a bad revision is refused at once
        known = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}"], cwd=ROOT, capture_output=True
        )
        if known.returncode != 0:
            fail(f"--base {args.base}: not a commit of this repository")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True)
    here = head.stdout.strip() + (" with uncommitted changes to src" if dirty.stdout.strip() else "")
    with ThreadPoolExecutor(max_workers=2) as pool, tempfile.TemporaryDirectory() as tmp:
        now = per_call(ROOT / "src", args.calls, pool)
        before: list[float] = []
        if args.base:
            tree = Path(tmp) / "base"
            try:
                before = per_call(base_tree(args.base, tree), args.calls, pool)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    body = [
        f"Produced by `.venv/bin/python benchmarks/project_instructions.py --calls {args.calls}"
        + (f" --base {args.base}" if args.base else "")
        + f"` (from the repository root), {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}, "
        f"commit {here}.",
        "",
        "Millions of instructions per cold projection (valgrind callgrind; a process of "
        f"{args.calls} cold projections less an empty one, over {args.calls}; PYTHONHASHSEED 0): the projection's "
        "own work, which the wall clock of this shared machine cannot resolve to 10%. Not a target; the 1 ms target "
        "is judged on the wall clock (*Projection against published runs*).",
        "",
        "| point | this tree |" + (f" {args.base} | change |" if args.base else ""),
        "|---|---:|" + ("---:|---:|" if args.base else ""),
    ]
    for k, point in enumerate(SPEED_POINTS):
        row = f"| {point.label} | {now[k]:.3f} M |"
        if before:
            row += f" {before[k]:.3f} M | {now[k] / before[k] - 1:+.1%} |"
        body.append(row)
    print(SECTION + "\n\n" + "\n".join(body))
    if args.write:
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
