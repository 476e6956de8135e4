"""Running the real ``commlens`` command (and torch's own launcher) from tests: real processes, real gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
# Every op of the catalog, barrier included ("all" means every payload op).
ALL_OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "sendrecv",
    "barrier",
)
# Few iterations in one round: these tests check behaviour, not speed (rounds multiply each row's set-up,
# warm-up and gather by the rounds); rounds are tested with their own options in test_bench_rounds.py and
# test_bench_interleave.py.
QUICK = ("-n", "3", "-w", "1", "-q", "--rounds", "1")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child: no store or fault settings leaking in from the caller."""
    env = {k: v for k, v in os.environ.items() if k not in ("COMMLENS_DB", "COMMLENS_INJECT_FAULT")}
    env.update(extra)
    return env


def commlens(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``commlens`` console script and capture its output."""
    return subprocess.run(
        [str(BIN / "commlens"), *args], capture_output=True, text=True, timeout=timeout, env=env or clean_env(), cwd=cwd
    )


def stored_runs(db: Path) -> list[dict[str, Any]]:
    """``commlens runs --db DB --json``, parsed."""
    proc = commlens("runs", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def table_rows(stdout: str) -> list[str]:
    """The data lines of a printed table (everything that is not a ``#`` line or blank)."""
    return [line for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]
