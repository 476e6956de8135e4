"""The emulated cluster for real: namespaces, veth pairs, a bridge and HTB qdiscs made and removed (needs root)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from benchutil import clean_env, commlens

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root")


def _kernel_objects(name: str) -> list[str]:
    """Every namespace, link and cgroup of cluster ``name`` that exists now, read from the kernel."""
    from commlens.cluster.spec import names_for

    tag = names_for(name).tag
    found = [
        ns
        for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        if ns.startswith(f"cl-{name}-")
    ]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [line.split(":")[1].strip() for line in links.splitlines() if f"cl{tag}" in line]
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    found += [line for line in qdiscs.splitlines() if f"cl{tag}" in line]
    found += [p for p in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup") if os.path.exists(f"{p}/commlens-{name}-h1")]
    return found


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMLENS_CLUSTER_DIR", str(tmp_path))
    return tmp_path


def test_up_status_set_down_leaves_nothing(state_dir):
    name = f"tc{os.getpid() % 10000}"
    env = clean_env(COMMLENS_CLUSTER_DIR=str(state_dir))
    proc = commlens(
        "cluster",
        "up",
        "--name",
        name,
        "--hosts",
        "3",
        "--link-gbps",
        "1",
        "--slow-host",
        "1:0.3",
        "--slow-link",
        "0-2:0.5",
        "--cpu-starve",
        "1:0.5",
        "--json",
        env=env,
    )
    try:
        assert proc.returncode == 0, proc.stderr
        up = json.loads(proc.stdout)
        assert up["addresses"] == [f"10.213.{up['subnet_index']}.{k}" for k in (1, 2, 3)]
        assert len([o for o in _kernel_objects(name) if o.startswith(f"cl-{name}-h")]) == 3
        # host 1 egress at 30% of 1 Gb/s; host 0's egress has a 500 Mb/s class for host 2's address
        h1 = subprocess.run(
            ["tc", "-n", f"cl-{name}-h1", "class", "show", "dev", "eth0"], capture_output=True, text=True
        )
        assert "rate 300Mbit" in h1.stdout
        h0 = subprocess.run(
            ["tc", "-n", f"cl-{name}-h0", "filter", "show", "dev", "eth0"], capture_output=True, text=True
        )
        assert f"match 0ad5{up['subnet_index']:02x}03/ffffffff" in h0.stdout
        # a rank placed on host 1 runs in host 1's namespace, with its CPU quota (half a CPU)
        probe = (
            "import os, subprocess; print(os.environ['GLOO_SOCKET_IFNAME'], os.environ['MASTER_ADDR']); "
            "print(subprocess.run(['ip', '-4', '-br', 'addr'], capture_output=True, text=True).stdout); "
            "print(open('/proc/self/cgroup').read())"
        )
        placed = subprocess.run(
            [os.sys.executable, "-m", "commlens.cluster.place", "--cluster", name, "--host", "1", "--", "-c", probe],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert placed.returncode == 0, placed.stderr
        assert f"eth0 {up['bridge_address']}" in placed.stdout
        assert f"{up['addresses'][1]}/24" in placed.stdout and up["addresses"][0] not in placed.stdout
        assert f"commlens-{name}-h1" in placed.stdout
        quota = Path(f"/sys/fs/cgroup/cpu/commlens-{name}-h1/cpu.cfs_quota_us")  # cgroup v1 here
        if quota.exists():  # half a CPU, in 10 ms periods (a uniformly slow host, not one that stalls)
            assert quota.read_text().strip() == "5000"
            assert (quota.parent / "cpu.cfs_period_us").read_text().strip() == "10000"
        st = commlens("cluster", "status", name, "--json", env=env)
        assert st.returncode == 0 and json.loads(st.stdout)["healthy"]
        # change while running: host 1 back to full rate, link faster
        ch = commlens("cluster", "set", name, "--clear", "--link-gbps", "2", "--json", env=env)
        assert ch.returncode == 0, ch.stderr
        h1 = subprocess.run(
            ["tc", "-n", f"cl-{name}-h1", "class", "show", "dev", "eth0"], capture_output=True, text=True
        )
        assert "rate 2Gbit" in h1.stdout and "300Mbit" not in h1.stdout
    finally:
        down = commlens("cluster", "down", name, env=env)
    assert down.returncode == 0, down.stderr
    assert _kernel_objects(name) == []
    assert not (state_dir / f"{name}.json").exists()


@pytest.mark.parametrize("fail_at", [1, 4, 9, 30])
def test_failure_midway_through_up_leaves_nothing(state_dir, monkeypatch, fail_at):
    """The ``fail_at``-th ip/tc command of ``up`` fails (1: the bridge; 30: in the shaping): nothing is left."""
    from commlens.cluster import (
        ClusterError,
        ClusterSpec,
        SlowHost,
        StarvedHost,
        lifecycle,
        up,
    )

    calls = []
    real_run = lifecycle.run

    def failing_run(*argv: str) -> str:
        calls.append(argv)
        if len(calls) == fail_at:
            raise ClusterError(f"injected failure at {' '.join(argv)}")
        return real_run(*argv)

    monkeypatch.setattr(lifecycle, "run", failing_run)
    name = f"tf{os.getpid() % 10000}"
    spec = ClusterSpec(name, 3, 125e6, slow_hosts=(SlowHost(0, 0.5),), starved_hosts=(StarvedHost(1, 0.5),))
    with pytest.raises(ClusterError, match="injected failure"):
        up(spec)
    monkeypatch.undo()
    assert _kernel_objects(name) == []
    assert list(state_dir.iterdir()) == []


def test_failure_after_a_cgroup_was_made_removes_it(state_dir, monkeypatch):
    from commlens.cluster import ClusterError, ClusterSpec, StarvedHost, lifecycle, up

    real = lifecycle.set_cpu_quota
    made = []

    def second_fails(name: str, fraction: float):
        if made:
            raise ClusterError("injected failure at the second cgroup")
        made.append(real(name, fraction))
        return made[-1]

    monkeypatch.setattr(lifecycle, "set_cpu_quota", second_fails)
    name = f"tg{os.getpid() % 10000}"
    with pytest.raises(ClusterError, match="injected"):
        up(ClusterSpec(name, 3, 125e6, starved_hosts=(StarvedHost(0, 0.5), StarvedHost(1, 0.5))))
    assert made and not made[0].exists()
    assert _kernel_objects(name) == []


def test_down_after_up_was_killed(state_dir):
    """A SIGKILLed `up` leaves its registry on disk; `down` removes what it had made."""
    from commlens.cluster import down

    name = f"tk{os.getpid() % 10000}"
    code = (
        "import os\nfrom commlens.cluster import lifecycle, ClusterSpec\n"
        "real = lifecycle.apply_shaping\n"
        "lifecycle.apply_shaping = lambda s: os.kill(os.getpid(), 9)\n"
        f"lifecycle.up(ClusterSpec({name!r}, 3, 125e6))\n"
    )
    proc = subprocess.run([os.sys.executable, "-c", code], env=clean_env(COMMLENS_CLUSTER_DIR=str(state_dir)))
    assert proc.returncode == -9
    assert len(_kernel_objects(name)) >= 6  # 3 namespaces, bridge, 3 veths: left behind by the kill
    down(name)
    assert _kernel_objects(name) == []


# Run as the unprivileged user. The checkout and the interpreter may lie under a directory that user cannot
# enter (root's home, a `mktemp -d`), so a root child prepares what it will need: it rehearses the very command
# with geteuid reporting 65534 (loading every module that path imports, output discarded), then drops to
# uid/gid 65534 for real and runs the command line again; it must refuse before touching the kernel or the state.
_AS_NOBODY = """
import contextlib, io, os, sys
from commlens.cli.app import _register, app
_register()
argv = sys.argv[1:]
real_geteuid = os.geteuid
os.geteuid = lambda: 65534
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        app(argv, prog_name="commlens")
    except SystemExit:
        pass
os.geteuid = real_geteuid
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
assert os.geteuid() == 65534 and os.getegid() == 65534
app(argv, prog_name="commlens")
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["up", "--name", "x", "--hosts", "2"],
        ["up", "x", "--hosts", "2"],
        ["down", "x"],
        ["down", "--name", "x"],
        ["set", "x", "--link-gbps", "2"],
        ["status"],
        ["status", "--name", "x"],
    ],
)
def test_non_root_is_refused_clearly(state_dir, argv):
    proc = subprocess.run(
        [os.sys.executable, "-c", _AS_NOBODY, "cluster", *argv],
        capture_output=True,
        text=True,
        env=clean_env(COMMLENS_CLUSTER_DIR=str(state_dir)),
        timeout=60,
        cwd="/",
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "needs root" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_name_is_given_either_way_in_up_status_set_and_down(state_dir):
    """`up NAME` / `up --name NAME`, and the same two forms in status, set and down."""
    name = f"tn{os.getpid() % 10000}"
    env = clean_env(COMMLENS_CLUSTER_DIR=str(state_dir))
    up = commlens("cluster", "up", name, "--hosts", "2", "--json", env=env)
    try:
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["name"] == name
        st = commlens("cluster", "status", "--name", name, "--json", env=env)
        assert st.returncode == 0 and json.loads(st.stdout)["healthy"], st.stderr
        ch = commlens("cluster", "set", "--name", name, "--link-gbps", "2", "--json", env=env)
        assert ch.returncode == 0, ch.stderr
        assert json.loads(ch.stdout)["link_bytes_per_s"] == 2e9 / 8
        both = commlens("cluster", "status", name, "--name", "other", env=env)
        assert both.returncode == 2 and both.stderr.startswith("error: two cluster names given"), both.stderr
    finally:
        down = commlens("cluster", "down", "--name", name, env=env)
    assert down.returncode == 0, down.stderr
    assert _kernel_objects(name) == []
    none = commlens("cluster", "down", env=env)
    assert none.returncode == 2 and none.stderr.startswith("error: give the cluster name"), none.stderr


def test_name_taken_by_a_foreign_object_is_left_alone(state_dir):
    """`up` fails on a namespace it did not make, and its clean-up does not remove that namespace."""
    from commlens.cluster import ClusterError, ClusterSpec, up

    name = f"tx{os.getpid() % 10000}"
    subprocess.run(["ip", "netns", "add", f"cl-{name}-h1"], check=True)
    try:
        with pytest.raises(ClusterError, match="File exists|exists"):
            up(ClusterSpec(name, 3, 125e6))
        assert _kernel_objects(name) == [f"cl-{name}-h1"]
    finally:
        subprocess.run(["ip", "netns", "del", f"cl-{name}-h1"], check=True)


def test_bad_fault_is_usage_error(state_dir):
    proc = commlens(
        "cluster",
        "up",
        "--name",
        "x",
        "--hosts",
        "3",
        "--slow-host",
        "5:0.3",
        env=clean_env(COMMLENS_CLUSTER_DIR=str(state_dir)),
    )
    assert proc.returncode == 2 and "host 5 does not exist" in proc.stderr
    assert _kernel_objects("x") == []
