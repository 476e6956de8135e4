"""The command line answers fast and speaks nccl-tests' options."""

from __future__ import annotations

import subprocess
import sys

from benchutil import commlens


def test_help_lists_the_commands_without_loading_any_stage() -> None:
    # --help stays fast because it loads no command's module (the lazy command table): checked by what it imports,
    # not by a wall-clock limit that a loaded machine breaks. benchmarks/harness_overhead.py --startup times it.
    proc = commlens("--help", timeout=30)
    assert proc.returncode == 0
    for command in ("bench", "runs", "show"):
        assert command in proc.stdout
    code = (
        "import sys\nsys.argv = ['commlens', '--help']\nfrom commlens.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main()\n    except SystemExit:\n        pass\n"
        "heavy = ('numpy', 'sqlalchemy', 'pydantic', 'scipy', 'torch', 'commlens.store', 'commlens.bench',"
        " 'commlens.project', 'commlens.regress', 'commlens.ingest')\n"
        "print(sorted({m for m in sys.modules if m.startswith(heavy)}), file=sys.stderr)"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert loaded.stderr.strip().splitlines()[-1] == "[]", loaded.stderr


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
