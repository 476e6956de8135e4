"""The command line answers fast and speaks nccl-tests' options."""

from __future__ import annotations

import subprocess
import sys
import time

from benchutil import commlens


def test_help_is_fast_and_lists_the_commands() -> None:
    t0 = time.monotonic()
    proc = commlens("--help", timeout=30)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0
    for command in ("bench", "runs", "show"):
        assert command in proc.stdout
    assert elapsed < 2.0, f"commlens --help took {elapsed:.2f} s"


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys\nsys.argv = ['commlens', '--help']\nfrom commlens.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.stderr.strip().splitlines()[-1] == "False"


def test_bench_help_shows_the_nccl_tests_options() -> None:
    proc = commlens("bench", "--help", timeout=30)
    assert proc.returncode == 0
    text = proc.stdout
    for option in (
        "-b MIN_BYTES, --min-bytes",
        "-e MAX_BYTES, --max-bytes",
        "-f STEP_FACTOR, --step-factor",
        "-i STEP_BYTES, --step-bytes",
        "-n ITERS, --iters",
        "-w WARMUP, --warmup",
        "-c CHECK_ITERS, --check-iters",
        "-d DTYPE, --dtype",
        "-o REDOP, --redop",
        "-r ROOT, --root",
        "-z, --blocking",
        "--op",
        "--in-place",
        "--out-of-place",
        "--backend",
        "--device",
        "--nproc",
        "--timeout",
        "--json",
        "--nccl-tests-json",
        "--db",
        "--no-store",
        "--tag",
        "--revision",
    ):
        assert option in text, option
    assert "Traceback" not in proc.stderr
