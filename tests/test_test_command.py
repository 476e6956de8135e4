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
