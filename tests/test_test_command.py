"""``make test``'s script leaves the machine as it found it: the PostgreSQL server it starts for a run is its own
(a fresh directory) and is stopped and removed when the run ends, whether its tests pass or fail; what the tests
leave in their temporary directory goes with the run; nothing is added to what starts at boot.

Each case runs ``scripts/test.sh`` on a one-test file that records the server it was given and passes or fails.
"""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import os
from pathlib import Path

def test_probe():
    import tempfile
    url = os.environ["COMMLENS_TEST_PG_URL"]
    Path(os.environ["PROBE_OUT"]).write_text(url)
    # what a tool leaves in its temporary directory (Chromium, torchrun) must not outlive the run
    left = tempfile.mkdtemp(prefix="probe-left-")
    Path(left, "f").write_text("x")
    Path(os.environ["PROBE_OUT"] + ".tmp").write_text(left)
    import psycopg
    from urllib.parse import parse_qs, urlparse
    host = parse_qs(urlparse(url).query)["host"][0]
    with psycopg.connect(host=host, port=5432, user="commlens_test", dbname="commlens_test") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert os.environ["PROBE_PASS"] == "1"
"""


def _boot_links() -> set[str]:
    return set(glob.glob("/etc/systemd/system/*.wants/*")) | {
        p for d in (2, 3, 4, 5) for p in glob.glob(f"/etc/rc{d}.d/S*")
    }


def _postgres_serving(directory: str) -> bool:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return any(line.startswith(("postgres", "/usr/lib/postgresql")) and directory in line for line in out.splitlines())


@pytest.mark.skipif(
    not (glob.glob("/usr/lib/postgresql/*/bin/initdb")), reason="PostgreSQL is not installed: nothing to start"
)
@pytest.mark.parametrize("passes", [True, False], ids=["tests-pass", "tests-fail"])
def test_the_run_s_own_postgres_is_stopped_and_removed(tmp_path: Path, passes: bool) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    out_file = tmp_path / "url"
    links = _boot_links()
    env = {k: v for k, v in os.environ.items() if k != "COMMLENS_TEST_PG_URL"}
    env.update(PROBE_OUT=str(out_file), PROBE_PASS="1" if passes else "0", VENV=str(ROOT / ".venv"))
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test.sh"), str(probe), "-p", "no:cacheprovider", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert (run.returncode == 0) == passes, run.stdout[-2000:] + run.stderr[-2000:]
    server_dir = parse_qs(urlparse(out_file.read_text()).query)["host"][0]
    assert server_dir.startswith(("/tmp/commlens-test-pg.", os.environ.get("TMPDIR", "/tmp")))
    assert not Path(server_dir).exists(), "the run's PostgreSQL directory is left behind"
    left = Path(str(out_file) + ".tmp").read_text()
    assert not Path(left).exists(), "a temporary directory of the run is left behind"
    assert not _postgres_serving(server_dir), "the run's PostgreSQL server is still running"
    assert _boot_links() == links


# -- the whole suite's two parts: what fails in either fails the run, and a run of nothing is no pass ------------

TWO_PART_CONFTEST = """
import pytest

def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs in the second part")
"""


def _whole_suite(tmp_path: Path, tests: dict[str, str], **env_extra: str) -> subprocess.CompletedProcess[str]:
    """``scripts/test.sh`` with no arguments (the whole suite, in its two parts) in a directory holding ``tests``:
    with no pytest configuration there, pytest collects that directory. A PostgreSQL URL is given, so none starts
    (the probes do not use it)."""
    (tmp_path / "conftest.py").write_text(TWO_PART_CONFTEST)
    for name, body in tests.items():
        (tmp_path / name).write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "COMMLENS_TEST_WORKERS"}
    env.update(VENV=str(ROOT / ".venv"), COMMLENS_TEST_PG_URL="postgresql://unused", **env_extra)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "test.sh")], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )


PASSES = "def test_passes():\n    assert True\n"
FAILS = "def test_fails():\n    assert False\n"
ALONE_PASSES = "import pytest\n\n@pytest.mark.alone\ndef test_alone_passes():\n    assert True\n"
ALONE_FAILS = "import pytest\n\n@pytest.mark.alone\ndef test_alone_fails():\n    assert False\n"


def test_the_whole_suite_runs_the_tests_that_judge_speed_after_the_others_and_passes_when_both_parts_pass(
    tmp_path: Path,
) -> None:
    run = _whole_suite(tmp_path, {"test_a.py": PASSES, "test_b.py": PASSES, "test_c.py": ALONE_PASSES})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    # part 1 runs the two unmarked tests on workers, then part 2 the one marked alone
    assert 0 <= run.stdout.find("2 passed in") < run.stdout.find("1 passed, 2 deselected in"), run.stdout
    assert run.stderr.index("part 1 of 2") < run.stderr.index("part 2 of 2"), run.stderr


@pytest.mark.parametrize(
    "tests, part",
    [
        ({"test_a.py": FAILS, "test_c.py": ALONE_PASSES}, 1),
        ({"test_a.py": PASSES, "test_c.py": ALONE_FAILS}, 2),
        ({"test_c.py": ALONE_FAILS}, 2),  # part 1 collects nothing (exit 5): that alone is no failure
    ],
    ids=["part-1-fails", "part-2-fails", "only-part-2-has-tests"],
)
def test_a_failure_in_either_part_fails_the_run(tmp_path: Path, tests: dict[str, str], part: int) -> None:
    run = _whole_suite(tmp_path, tests)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"error: part {part} of the tests failed (pytest exit 1)" in run.stderr


def test_a_run_that_collects_no_test_in_either_part_fails(tmp_path: Path) -> None:
    run = _whole_suite(tmp_path, {"helper.py": "X = 1\n"})
    assert run.returncode == 1 and "error: no tests were collected" in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("workers", ["0", "two", "-1"])
def test_a_bad_worker_count_is_refused(tmp_path: Path, workers: str) -> None:
    run = _whole_suite(tmp_path, {"test_a.py": PASSES}, COMMLENS_TEST_WORKERS=workers)
    assert run.returncode == 2, run.stderr[-2000:]
    assert f"error: COMMLENS_TEST_WORKERS must be a whole number of at least 1, not '{workers}'" in run.stderr


def test_one_worker_runs_the_whole_suite_in_one_serial_part(tmp_path: Path) -> None:
    run = _whole_suite(tmp_path, {"test_a.py": FAILS, "test_c.py": ALONE_PASSES}, COMMLENS_TEST_WORKERS="1")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "1 failed, 1 passed" in run.stdout and "part 1 of 2" not in run.stderr, run.stdout + run.stderr
