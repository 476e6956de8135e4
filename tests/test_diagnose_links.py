"""``commlens diagnose links`` on a real 4-host emulated cluster: healthy passes, a slow host and a slow link found.

One cluster for the module; faults are changed while it runs (`commlens cluster set`), as an operator would.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from benchutil import clean_env, commlens

from commlens.diagnose.links_analysis import diagnose_links
from commlens.diagnose.tournament import rounds

QUICK = ("-b", "1M", "-n", "2", "--passes", "3")


def test_tournament_meets_every_pair_once_in_disjoint_rounds():
    for n in (2, 3, 4, 7, 8):
        sched = rounds(n)
        assert len(sched) == (n - 1 if n % 2 == 0 else n)
        pairs = [p for r in sched for p in r]
        assert sorted(pairs) == [(a, b) for a in range(n) for b in range(a + 1, n)]
        for r in sched:
            hosts = [h for p in r for h in p]
            assert len(hosts) == len(set(hosts))


def _records(bw: dict[tuple[int, int], float], n: int, passes: int = 3) -> list[dict]:
    """Synthetic records: each pair at its rate (bytes/s) for a 1 MB message, +-1% jitter."""
    size = 1_000_000
    recs = []
    for p in range(passes):
        for a in range(n):
            for b in range(a + 1, n):
                rate = bw.get((a, b), 100e6)
                t = size / rate
                recs.append(
                    {
                        "kind": "pair",
                        "pass": p,
                        "round": 0,
                        "rank": a,
                        "peer": b,
                        "size_bytes": size,
                        "times_s": [t * 0.99, t, t * 1.01],
                        "latency_s": [1e-4],
                    }
                )
    return recs


def test_analysis_tells_a_slow_host_from_a_slow_link():
    host = diagnose_links(_records({(0, 3): 30e6, (1, 3): 30e6, (2, 3): 30e6, (3, 4): 30e6}, 5), 5)
    assert [(f.kind, f.hosts) for f in host.faults] == [("slow_host", (3,))]
    assert host.faults[0].measured_bytes_per_s == pytest.approx(30e6)
    assert host.faults[0].expected_bytes_per_s == pytest.approx(100e6)
    assert host.faults[0].confidence == 1.0
    link = diagnose_links(_records({(1, 2): 50e6}, 5), 5)
    assert [(f.kind, f.hosts) for f in link.faults] == [("slow_link", (1, 2))]
    assert diagnose_links(_records({(1, 2): 85e6}, 5), 5).faults == []  # 15% low: within the 25% bar


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("clusters")
    env = clean_env(COMMLENS_CLUSTER_DIR=str(state))
    name = f"td{os.getpid() % 10000}"
    proc = commlens("cluster", "up", "--name", name, "--hosts", "4", "--link-gbps", "1", env=env)
    assert proc.returncode == 0, proc.stderr
    try:
        yield name, env
    finally:
        down = commlens("cluster", "down", name, env=env)
        assert down.returncode == 0, down.stderr


@needs_root
def test_healthy_cluster_passes(cluster, tmp_path):
    name, env = cluster
    png = tmp_path / "links.png"
    proc = commlens("diagnose", "links", "--cluster", name, *QUICK, "--json", "--heatmap", str(png), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = json.loads(proc.stdout)
    assert d["healthy"] and d["faults"] == []
    assert d["hosts"] == 4 and all(d["bandwidth_bytes_per_s"][i][i] is None for i in range(4))
    # the shaped rate, 1 Gb/s = 125 MB/s: HTB's bucket holds 1 ms of traffic (125 kB), so a 1 MiB transfer
    # after an idle moment may finish up to 125 kB / 1 MiB = 12% early; the ack's round trip costs ~2%
    assert 0.85 * 125e6 < d["expected_bytes_per_s"] <= 1.15 * 125e6
    assert d["bandwidth_bytes_per_s"][0][1] <= 1.15 * 125e6
    assert 0 < d["ring"]["ratio"] <= 1.1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_root
def test_slow_host_found(cluster):
    name, env = cluster
    assert commlens("cluster", "set", name, "--slow-host", "2:0.3", env=env).returncode == 0
    try:
        proc = commlens("diagnose", "links", "--cluster", name, *QUICK, "--json", env=env)
    finally:
        commlens("cluster", "set", name, "--clear", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    faults = json.loads(proc.stdout)["faults"]
    assert [(f["kind"], f["hosts"]) for f in faults] == [("slow_host", [2])]
    ratio = faults[0]["measured_bytes_per_s"] / faults[0]["expected_bytes_per_s"]
    assert 0.25 < ratio < 0.35 and faults[0]["confidence"] >= 0.9  # 30% of the rate, measured


@needs_root
def test_slow_link_found_and_reported_in_table(cluster):
    name, env = cluster
    assert commlens("cluster", "set", name, "--slow-link", "0-3:0.4", env=env).returncode == 0
    try:
        proc = commlens("diagnose", "links", "--cluster", name, *QUICK, env=env)
    finally:
        commlens("cluster", "set", name, "--clear", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    faults = [line for line in proc.stdout.splitlines() if line.startswith("FAULT")]
    assert len(faults) == 1 and faults[0].startswith("FAULT slow_link link 0-3:")


@needs_root
def test_killed_diagnosis_leaves_no_rank_behind(cluster):
    """SIGKILL the launcher mid-measurement: the kernel kills its ranks (PR_SET_PDEATHSIG), none is left."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    name, env = cluster
    launcher = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "commlens"),
            "diagnose",
            "links",
            "--cluster",
            name,
            "-b",
            "1M",
            "--passes",
            "50",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ranks() -> list[str]:
        pattern = f"raw-out {tempfile.gettempdir()}/commlens-links-"
        out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
        return [
            pid
            for pid in out.split()
            if Path(f"/proc/{pid}/environ").exists()
            and f"COMMLENS_CLUSTER_DIR={env['COMMLENS_CLUSTER_DIR']}".encode()
            in Path(f"/proc/{pid}/environ").read_bytes()
        ]

    # the ranks seen running at one moment (asking again after the wait could catch one between its probes)
    deadline = time.monotonic() + 30
    running = ranks()
    while len(running) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
        running = ranks()
    assert len(running) == 4
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    time.sleep(1)
    assert ranks() == []


def test_needs_a_cluster_or_nproc():
    proc = commlens("diagnose", "links")
    assert proc.returncode == 2 and "--cluster NAME" in proc.stderr


def test_the_links_stage_takes_one_config_and_returns_its_diagnosis():
    """run(LinksConfig) measures on real local ranks and returns the diagnosis; a wrong field is refused by name."""
    from commlens.diagnose.links import GroupsError, LinkDiagnosis, LinkProbe, LinksConfig, Local, run

    for bad, message in (
        ({"placement": 2}, "^placement: must be Local or OnCluster, got int$"),
        ({"timeout_s": float("nan")}, "^timeout_s: must be a finite number of seconds > 0, got nan$"),
        ({"strategy": "all"}, "^strategy: must be one of groups, pairs, got 'all'$"),
    ):
        with pytest.raises(GroupsError, match=message):
            LinksConfig(**{"placement": Local(2), **bad})  # type: ignore[arg-type]
    with pytest.raises(GroupsError, match="--strategy groups needs at least 4 hosts, got 2"):
        run(LinksConfig(Local(2), strategy="groups"))
    probe = LinkProbe(size_bytes=64 * 1024, iters=1, passes=1, latency_iters=1)
    diagnosis = run(LinksConfig(Local(2), probe, timeout_s=60.0))
    assert isinstance(diagnosis, LinkDiagnosis) and diagnosis.hosts == 2 and diagnosis.passes == 1
    assert diagnosis.size_bytes == 64 * 1024 and diagnosis.bandwidth_bytes_per_s[0][1] is not None
