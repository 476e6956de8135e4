"""``commlens bench --cluster``: ranks placed on emulated hosts, real TCP between namespaces (needs root)."""

from __future__ import annotations

import json
import os

import pytest
from benchutil import clean_env, commlens

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root")


def test_bench_on_cluster_runs_ranks_in_namespaces_and_feels_the_slow_host(tmp_path):
    env = clean_env(COMMLENS_CLUSTER_DIR=str(tmp_path))
    name = f"tb{os.getpid() % 10000}"
    assert (
        commlens(
            "cluster", "up", "--name", name, "--hosts", "2", "--link-gbps", "1", "--slow-host", "1:0.25", env=env
        ).returncode
        == 0
    )
    try:
        out = tmp_path / "run.json"
        proc = commlens(
            "bench",
            "--cluster",
            name,
            "--ranks-per-host",
            "2",
            "--op",
            "sendrecv",
            "-b",
            "2M",
            "-n",
            "3",
            "-w",
            "1",
            "-q",
            "--no-store",
            "--json",
            str(out),
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        run = json.loads(out.read_text())
        m = run["measurements"][0]
        assert m["world_size"] == 4
        # a ring of send/recv over 4 ranks on 2 hosts crosses host 1's 250 Mb/s link (31 MB/s)
        assert m["algbw_bytes_per_s"] < 31.25e6 * 1.1
    finally:
        assert commlens("cluster", "down", name, env=env).returncode == 0
